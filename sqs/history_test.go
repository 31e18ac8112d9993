package sqs_test

import (
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/servertest"
	pb "github.com/styxq/styx/styxpb"
	"github.com/styxq/styx/styxtest"
)

// TestQueuesHistoryCountsSQS (issue 28, 6): the queue history counts the
// messages the SQS API sends and deletes as it counts /v1's produces and
// completes.
func TestQueuesHistoryCountsSQS(t *testing.T) {
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.Start(t, b)
		styxtest.CreateQueue(t, s.C, &pb.QueueInfo{QueueName: "hs"})
		c := s.SQSClient("test", "test")
		u, err := c.GetQueueUrl(ctx, &awssqs.GetQueueUrlInput{QueueName: aws.String("hs")})
		require.NoError(t, err)
		for _, body := range []string{"a", "b", "c"} {
			_, err := c.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: u.QueueUrl, MessageBody: aws.String(body)})
			require.NoError(t, err)
		}
		got, err := c.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: u.QueueUrl, MaxNumberOfMessages: 1, WaitTimeSeconds: 5})
		require.NoError(t, err)
		require.Len(t, got.Messages, 1)
		_, err = c.DeleteMessage(ctx, &awssqs.DeleteMessageInput{QueueUrl: u.QueueUrl, ReceiptHandle: got.Messages[0].ReceiptHandle})
		require.NoError(t, err)

		h, err := s.C.QueuesHistory(ctx, &pb.QueuesHistoryRequest{QueueName: "hs"})
		require.NoError(t, err)
		var produced, completed int64
		for _, p := range h.Points {
			produced, completed = produced+p.Produced, completed+p.Completed
		}
		assert.EqualValues(t, 3, produced)
		assert.EqualValues(t, 1, completed)
		assert.EqualValues(t, 2, h.Points[len(h.Points)-1].Depth)
	})
}

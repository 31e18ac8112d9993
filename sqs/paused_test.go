package sqs_test

import (
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/servertest"
	pb "github.com/styxq/styx/styxpb"
	"github.com/styxq/styx/styxtest"
)

// TestSQSReceiveOnPausedQueue (issue 49, live queues): a paused queue's
// ReceiveMessage gets nothing, as a /v1 lease does (the rule is the
// engine's lease path), while SendMessage goes on; resumed, the message
// is received.
func TestSQSReceiveOnPausedQueue(t *testing.T) {
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.Start(t, b)
		styxtest.CreateQueue(t, s.C, &pb.QueueInfo{QueueName: "held"})
		_, err := s.C.QueuesPause(ctx, &pb.QueuesPauseRequest{QueueName: "held"})
		require.NoError(t, err)
		c := s.SQSClient("test", "test")
		u, err := c.GetQueueUrl(ctx, &awssqs.GetQueueUrlInput{QueueName: aws.String("held")})
		require.NoError(t, err)
		_, err = c.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: u.QueueUrl, MessageBody: aws.String("m")})
		require.NoError(t, err)
		got, err := c.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: u.QueueUrl, WaitTimeSeconds: 1})
		require.NoError(t, err)
		require.Empty(t, got.Messages, "a paused queue hands nothing out")

		_, err = s.C.QueuesResume(ctx, &pb.QueuesPauseRequest{QueueName: "held"})
		require.NoError(t, err)
		got, err = c.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: u.QueueUrl, WaitTimeSeconds: 5})
		require.NoError(t, err)
		require.Len(t, got.Messages, 1)
		require.Equal(t, "m", *got.Messages[0].Body)
	})
}

package sqs_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/servertest"
	pb "github.com/styxq/styx/styxpb"
	"github.com/styxq/styx/styxtest"
)

// TestSQSReceiveWithoutVisibilityOnDLQ (issue 49, 8): a ReceiveMessage with
// VisibilityTimeout 0 on a dead-letter queue is a look, which releases the
// dead item: no DLQ attempt is recorded and its attempts stay as they were
// (it was recorded as a DLQ attempt, "no error recorded"). On a live queue
// such a receive still counts, as SQS counts it.
func TestSQSReceiveWithoutVisibilityOnDLQ(t *testing.T) {
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.Start(t, b)
		styxtest.CreateQueue(t, s.C, &pb.QueueInfo{QueueName: "pk-dlq"})
		styxtest.CreateQueue(t, s.C, &pb.QueueInfo{QueueName: "pk", DeadQueue: "pk-dlq", MaxAttempts: 5})
		s.Produce("pk", "a")
		res := s.Lease("pk", 1)
		s.Retry("pk", res.Partition, &pb.QueueRetryItem{Id: res.Items[0].Id, Dead: true, Error: "bad input"})
		dead := s.WaitItems("pk-dlq", 1)[0]

		c := s.SQSClient("test", "test")
		for i, q := range []string{"pk-dlq", "pk-dlq", "pk"} {
			if q == "pk" {
				s.Produce("pk", "b")
			}
			u, err := c.GetQueueUrl(ctx, &awssqs.GetQueueUrlInput{QueueName: aws.String(q)})
			require.NoError(t, err)
			// The Go SDK leaves a VisibilityTimeout of 0 out (its zero
			// value); boto3 and the AWS CLI send it: a request of its own.
			body := fmt.Sprintf(`{"QueueUrl":%q,"VisibilityTimeout":0,"WaitTimeSeconds":5}`, *u.QueueUrl)
			req, err := http.NewRequest(http.MethodPost, s.Endpoint+"/", strings.NewReader(body))
			require.NoError(t, err)
			req.Host = "127.0.0.1"
			req.Header.Set("Content-Type", "application/x-amz-json-1.0")
			req.Header.Set("X-Amz-Target", "AmazonSQS.ReceiveMessage")
			res, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			var got struct{ Messages []struct{ Body string } }
			require.NoError(t, json.NewDecoder(res.Body).Decode(&got))
			require.NoError(t, res.Body.Close())
			require.Equal(t, 200, res.StatusCode)
			require.Len(t, got.Messages, 1, "receive %d of %s", i, q)
		}

		list, err := s.C.DeadList(ctx, &pb.DeadListRequest{QueueName: "pk-dlq"})
		require.NoError(t, err)
		require.Len(t, list.Items, 1)
		it := list.Items[0]
		assert.Zero(t, it.DeadLetterAttempts, "two looks through SQS are no DLQ attempts: %v", it.DeadLetterErrors)
		assert.Empty(t, it.DeadLetterErrors)
		assert.Equal(t, dead.Attempts, it.Attempts, "the dead item's attempts as it died")
		live := s.Items("pk")
		require.Len(t, live, 1)
		assert.EqualValues(t, 1, live[0].Attempts, "a receive with VisibilityTimeout 0 on a live queue counts, as in SQS")
	})
}

package sqs_test

// Issue 51, point 2: ApproximateFirstReceiveTimestamp is the time of the
// message's first receive on every receive, as AWS answers it, and
// survives a restart.

import (
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/daemon"
	"github.com/styxq/styx/internal/servertest"
)

// receiveOne receives the one message of queue url with every system
// attribute, and makes it visible again at once (a visibility change to
// 0, which counts the receive as SQS does) when again is set.
func receiveOne(t *testing.T, c *awssqs.Client, url *string, again bool) types.Message {
	t.Helper()
	got, err := c.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: url, WaitTimeSeconds: 5,
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{"All"}})
	require.NoError(t, err)
	require.Len(t, got.Messages, 1)
	m := got.Messages[0]
	if again {
		_, err = c.ChangeMessageVisibility(ctx, &awssqs.ChangeMessageVisibilityInput{QueueUrl: url, ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: 0})
		require.NoError(t, err)
	}
	return m
}

// TestSQSFirstReceiveTimestamp: every receive of a message answers the
// time of its first receive (epoch milliseconds), also after the server
// restarts (Pebble, PostgreSQL), and its ApproximateReceiveCount counts on.
func TestSQSFirstReceiveTimestamp(t *testing.T) {
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		// Both servers run on b's storage: the same Pebble directory, the
		// same PostgreSQL schema.
		var first string
		t.Run("before restart", func(t *testing.T) {
			s := servertest.Start(t, b)
			c := s.SQSClient("test", "test")
			q, err := c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String("first-receive")})
			require.NoError(t, err)
			_, err = c.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: q.QueueUrl, MessageBody: aws.String("m")})
			require.NoError(t, err)

			before := time.Now().UnixMilli()
			m := receiveOne(t, c, q.QueueUrl, true)
			after := time.Now().UnixMilli()
			first = m.Attributes["ApproximateFirstReceiveTimestamp"]
			ms, err := strconv.ParseInt(first, 10, 64)
			require.NoError(t, err, "the first receive answers its time")
			require.GreaterOrEqual(t, ms, before)
			require.LessOrEqual(t, ms, after)

			// A later receive, a millisecond or more after the first.
			require.Eventually(t, func() bool { return time.Now().UnixMilli() > after }, time.Second, time.Millisecond)
			m = receiveOne(t, c, q.QueueUrl, true)
			require.Equal(t, "2", m.Attributes["ApproximateReceiveCount"])
			require.Equal(t, first, m.Attributes["ApproximateFirstReceiveTimestamp"], "the second receive answers the first's time")
		})
		if b.Name == daemon.StorageMemory {
			return
		}
		t.Run("after restart", func(t *testing.T) {
			s := servertest.Start(t, b)
			c := s.SQSClient("test", "test")
			q, err := c.GetQueueUrl(ctx, &awssqs.GetQueueUrlInput{QueueName: aws.String("first-receive")})
			require.NoError(t, err)
			m := receiveOne(t, c, q.QueueUrl, false)
			require.Equal(t, "3", m.Attributes["ApproximateReceiveCount"])
			require.Equal(t, first, m.Attributes["ApproximateFirstReceiveTimestamp"], "the first receive's time survives a restart")
		})
	})
}

package sqs_test

import (
	"os"
	"strconv"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/daemon"
	"github.com/styxq/styx/internal/pgtest"
	"github.com/styxq/styx/internal/servertest"
)

// node is one endpoint of a FIFO test: a client and the queue URL as that
// server names it.
type node struct {
	c   *awssqs.Client
	url func(queue string) *string
}

func nodeOf(s *servertest.Server) node {
	return node{c: s.SQSClient("test", "test"), url: func(q string) *string { return aws.String(s.Endpoint + "/000000000000/" + q) }}
}

// TestSQSFIFOSharedState (issue 51, 5): what SQS answers for a FIFO queue
// is the same whichever node answers. On every backend (one node, the
// endpoints the same) and on two PostgreSQL nodes behind alternating
// endpoints: a deduplicated send answers the first send's MessageId and
// SequenceNumber, the SequenceNumbers of sends alternating between the
// nodes increase in the group's receive order, and a receive retried with
// its ReceiveRequestAttemptId through the other node returns the same
// messages and receipt handles (and is refused once one was deleted).
func TestSQSFIFOSharedState(t *testing.T) {
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.Start(t, b)
		checkFIFOSharedState(t, [2]node{nodeOf(s), nodeOf(s)}, s)
	})
	t.Run("postgres-two-nodes", func(t *testing.T) {
		if os.Getenv(pgtest.EnvURL) == "" && os.Getenv(pgtest.EnvRequire) == "" {
			t.Skipf("postgres backend skipped: %s is not set (see internal/pgtest)", pgtest.EnvURL)
		}
		t.Parallel()
		b := servertest.Backend{Name: daemon.StoragePostgres, URL: pgtest.URL(t)}
		a, other := servertest.Start(t, b), servertest.Start(t, b)
		checkFIFOSharedState(t, [2]node{nodeOf(a), nodeOf(other)}, a)
	})
}

func checkFIFOSharedState(t *testing.T, n [2]node, s *servertest.Server) {
	for _, name := range []string{"shared.fifo", "order.fifo"} {
		_, err := n[0].c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String(name), Attributes: fifoAttrs()})
		require.NoError(t, err)
	}
	send := func(i int, q, group, dedup, body string) *awssqs.SendMessageOutput {
		out, err := n[i%2].c.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: n[i%2].url(q), MessageBody: aws.String(body),
			MessageGroupId: aws.String(group), MessageDeduplicationId: aws.String(dedup)})
		require.NoError(t, err)
		return out
	}

	t.Run("DeduplicatedSendAnswersTheFirst", func(t *testing.T) {
		first := send(0, "shared.fifo", "g", "d", "once")
		again := send(1, "shared.fifo", "g", "d", "once")
		require.Equal(t, aws.ToString(first.MessageId), aws.ToString(again.MessageId), "node B answers node A's MessageId")
		require.Equal(t, aws.ToString(first.SequenceNumber), aws.ToString(again.SequenceNumber))
		require.Len(t, s.WaitItems("shared.fifo", 1), 1, "stored once")
	})

	t.Run("RetriedReceiveOnTheOtherNode", func(t *testing.T) {
		recv := func(i int) (*awssqs.ReceiveMessageOutput, error) {
			return n[i].c.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: n[i].url("shared.fifo"), WaitTimeSeconds: 5,
				MaxNumberOfMessages: 10, ReceiveRequestAttemptId: aws.String("r"), MessageSystemAttributeNames: []types.MessageSystemAttributeName{"All"}})
		}
		got, err := recv(0)
		require.NoError(t, err)
		require.Len(t, got.Messages, 1)
		retried, err := recv(1)
		require.NoError(t, err)
		require.Len(t, retried.Messages, 1, "the retry on the other node returns the same messages")
		require.Equal(t, aws.ToString(got.Messages[0].MessageId), aws.ToString(retried.Messages[0].MessageId))
		require.Equal(t, aws.ToString(got.Messages[0].ReceiptHandle), aws.ToString(retried.Messages[0].ReceiptHandle))
		require.Equal(t, got.Messages[0].Attributes["SequenceNumber"], retried.Messages[0].Attributes["SequenceNumber"])

		_, err = n[1].c.DeleteMessage(ctx, &awssqs.DeleteMessageInput{QueueUrl: n[1].url("shared.fifo"), ReceiptHandle: got.Messages[0].ReceiptHandle})
		require.NoError(t, err)
		_, err = recv(0)
		servertest.RequireSQSError(t, err, "InvalidParameterValue", "not valid anymore")
	})

	t.Run("SequenceNumbersIncreaseInReceiveOrder", func(t *testing.T) {
		var sent []string
		for i := range 8 {
			out := send(i, "order.fifo", "g", "m"+strconv.Itoa(i), "m"+strconv.Itoa(i))
			sent = append(sent, aws.ToString(out.SequenceNumber))
		}
		var bodies, seqs []string
		for i := 0; len(bodies) < len(sent); i++ {
			require.Less(t, i, 20, "received %v", bodies)
			out, err := n[i%2].c.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: n[i%2].url("order.fifo"), WaitTimeSeconds: 5,
				MaxNumberOfMessages: 3, MessageSystemAttributeNames: []types.MessageSystemAttributeName{"SequenceNumber"}})
			require.NoError(t, err)
			for _, m := range out.Messages {
				bodies, seqs = append(bodies, aws.ToString(m.Body)), append(seqs, m.Attributes["SequenceNumber"])
				_, err := n[i%2].c.DeleteMessage(ctx, &awssqs.DeleteMessageInput{QueueUrl: n[i%2].url("order.fifo"), ReceiptHandle: m.ReceiptHandle})
				require.NoError(t, err)
			}
		}
		require.Equal(t, []string{"m0", "m1", "m2", "m3", "m4", "m5", "m6", "m7"}, bodies, "the group's order")
		require.Equal(t, sent, seqs, "each message's SequenceNumber is its send's")
		for i := 1; i < len(seqs); i++ {
			prev, err1 := strconv.ParseUint(seqs[i-1], 10, 64)
			cur, err2 := strconv.ParseUint(seqs[i], 10, 64)
			require.NoError(t, err1)
			require.NoError(t, err2)
			require.Greater(t, cur, prev, "SequenceNumbers increase in receive order: %v", seqs)
		}
	})
}

package sqs_test

// FIFO queues (issue 37) through the Go SDK, on every backend: queue
// attributes, sends (MessageGroupId, deduplication by id and by content),
// order within a group under concurrent consumers, ReceiveRequestAttemptId,
// dead-lettering and move tasks that keep the group, and MessageGroupId on a
// standard queue (fair queues).

import (
	"bytes"
	"crypto/md5"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/servertest"
	pb "github.com/styxq/styx/styxpb"
)

// fifoAttrs are the attributes of a FIFO queue, with more.
func fifoAttrs(more ...string) map[string]string {
	a := map[string]string{"FifoQueue": "true"}
	for i := 0; i+1 < len(more); i += 2 {
		a[more[i]] = more[i+1]
	}
	return a
}

func TestSQSFIFOQueueAttributes(t *testing.T) {
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.Start(t, b)
		c := s.SQSClient("test", "test")
		create := func(name string, attrs map[string]string) (*awssqs.CreateQueueOutput, error) {
			return c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String(name), Attributes: attrs})
		}

		// A .fifo name is a FIFO queue's, and a FIFO queue has one.
		_, err := create("jobs.fifo", nil)
		servertest.RequireSQSError(t, err, "InvalidParameterValue", "Can only include alphanumeric characters, hyphens, or underscores. 1 to 80 in length")
		_, err = create("jobs", fifoAttrs())
		servertest.RequireSQSError(t, err, "InvalidParameterValue", "The name of a FIFO queue can only include alphanumeric characters, hyphens, or underscores, must end with .fifo suffix and be 1 to 80 in length.")
		_, err = create("bad name.fifo", fifoAttrs())
		servertest.RequireSQSError(t, err, "InvalidParameterValue", "must end with .fifo suffix")
		_, err = create(strings.Repeat("j", 76)+".fifo", fifoAttrs())
		servertest.RequireSQSError(t, err, "InvalidParameterValue", "1 to 80 in length")
		_, err = create("jobs", map[string]string{"FifoQueue": "false"})
		servertest.RequireSQSError(t, err, "InvalidAttributeName", "Unknown Attribute FifoQueue.")
		_, err = create("jobs.fifo", map[string]string{"FifoQueue": "yes"})
		servertest.RequireSQSError(t, err, "InvalidAttributeValue", "FifoQueue")
		// The FIFO attributes are a FIFO queue's only.
		for _, name := range []string{"ContentBasedDeduplication", "DeduplicationScope", "FifoThroughputLimit"} {
			_, err = create("jobs", map[string]string{name: "true"})
			servertest.RequireSQSError(t, err, "InvalidAttributeName", "Unknown Attribute "+name+".")
		}
		_, err = create("jobs.fifo", fifoAttrs("ContentBasedDeduplication", "yes"))
		servertest.RequireSQSError(t, err, "InvalidAttributeValue", "ContentBasedDeduplication", "true or false")
		_, err = create("jobs.fifo", fifoAttrs("DeduplicationScope", "group"))
		servertest.RequireSQSError(t, err, "InvalidAttributeValue", "DeduplicationScope", "queue or messageGroup")
		_, err = create("jobs.fifo", fifoAttrs("FifoThroughputLimit", "perGroup"))
		servertest.RequireSQSError(t, err, "InvalidAttributeValue", "FifoThroughputLimit", "perQueue or perMessageGroupId")
		_, err = create("jobs.fifo", fifoAttrs("FifoThroughputLimit", "perMessageGroupId"))
		servertest.RequireSQSError(t, err, "InvalidAttributeValue", "perMessageGroupId is allowed only when DeduplicationScope is messageGroup")
		_, err = s.C.QueuesInfo(ctx, &pb.QueuesInfoRequest{QueueName: "jobs.fifo"})
		servertest.RequireCode(t, err, 400, "does not exist")

		q, err := create("jobs.fifo", fifoAttrs("ContentBasedDeduplication", "true", "VisibilityTimeout", "45"))
		require.NoError(t, err)
		require.Equal(t, s.Endpoint+"/000000000000/jobs.fifo", aws.ToString(q.QueueUrl))
		got, err := c.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{QueueUrl: q.QueueUrl, AttributeNames: []types.QueueAttributeName{"All"}})
		require.NoError(t, err)
		require.Equal(t, "true", got.Attributes["FifoQueue"])
		require.Equal(t, "true", got.Attributes["ContentBasedDeduplication"])
		require.Equal(t, "queue", got.Attributes["DeduplicationScope"])
		require.Equal(t, "perQueue", got.Attributes["FifoThroughputLimit"])
		require.Equal(t, "45", got.Attributes["VisibilityTimeout"])
		require.Equal(t, "arn:aws:sqs:us-east-1:000000000000:jobs.fifo", got.Attributes["QueueArn"])
		info, err := s.C.QueuesInfo(ctx, &pb.QueuesInfoRequest{QueueName: "jobs.fifo"})
		require.NoError(t, err)
		require.True(t, info.Ordered, "a FIFO queue is an ordered queue")

		// CreateQueue again: the URL with the same attributes, else
		// QueueAlreadyExists.
		again, err := create("jobs.fifo", fifoAttrs("ContentBasedDeduplication", "true"))
		require.NoError(t, err)
		require.Equal(t, aws.ToString(q.QueueUrl), aws.ToString(again.QueueUrl))
		_, err = create("jobs.fifo", fifoAttrs("ContentBasedDeduplication", "false"))
		servertest.RequireSQSError(t, err, "QueueAlreadyExists", "ContentBasedDeduplication")

		// SetQueueAttributes: the FIFO attributes change, FifoQueue never.
		set := func(url *string, attrs map[string]string) error {
			_, err := c.SetQueueAttributes(ctx, &awssqs.SetQueueAttributesInput{QueueUrl: url, Attributes: attrs})
			return err
		}
		require.NoError(t, set(q.QueueUrl, map[string]string{"DeduplicationScope": "messageGroup", "FifoThroughputLimit": "perMessageGroupId",
			"ContentBasedDeduplication": "false"}))
		got, err = c.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{QueueUrl: q.QueueUrl,
			AttributeNames: []types.QueueAttributeName{"DeduplicationScope", "FifoThroughputLimit", "ContentBasedDeduplication", "FifoQueue"}})
		require.NoError(t, err)
		require.Equal(t, map[string]string{"DeduplicationScope": "messageGroup", "FifoThroughputLimit": "perMessageGroupId",
			"ContentBasedDeduplication": "false", "FifoQueue": "true"}, got.Attributes)
		servertest.RequireSQSError(t, set(q.QueueUrl, map[string]string{"DeduplicationScope": "queue"}), "InvalidAttributeValue", "perMessageGroupId")
		servertest.RequireSQSError(t, set(q.QueueUrl, map[string]string{"FifoQueue": "true"}), "InvalidAttributeName", "Unknown Attribute FifoQueue.")
		servertest.RequireSQSError(t, set(q.QueueUrl, map[string]string{"FifoQueue": "false"}), "InvalidAttributeName", "Unknown Attribute FifoQueue.")

		// A standard queue shows and takes no FIFO attribute.
		plain, err := create("plain", nil)
		require.NoError(t, err)
		got, err = c.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{QueueUrl: plain.QueueUrl, AttributeNames: []types.QueueAttributeName{"All"}})
		require.NoError(t, err)
		require.NotContains(t, got.Attributes, "FifoQueue")
		require.NotContains(t, got.Attributes, "ContentBasedDeduplication")
		servertest.RequireSQSError(t, set(plain.QueueUrl, map[string]string{"ContentBasedDeduplication": "true"}), "InvalidAttributeName",
			"Unknown Attribute ContentBasedDeduplication.")
		servertest.RequireSQSError(t, set(plain.QueueUrl, map[string]string{"FifoQueue": "true"}), "InvalidAttributeName", "Unknown Attribute FifoQueue.")

		// A FIFO queue's dead-letter queue is a FIFO queue, a standard
		// queue's a standard queue.
		_, err = create("jobs-dlq.fifo", fifoAttrs())
		require.NoError(t, err)
		policy := func(dlq string) string {
			return `{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:` + dlq + `","maxReceiveCount":3}`
		}
		_, err = create("other.fifo", fifoAttrs("RedrivePolicy", policy("plain")))
		servertest.RequireSQSError(t, err, "InvalidParameterValue", "Dead-letter queue must be same type of queue as the source.")
		_, err = create("other", map[string]string{"RedrivePolicy": policy("jobs-dlq.fifo")})
		servertest.RequireSQSError(t, err, "InvalidParameterValue", "Dead-letter queue must be same type of queue as the source.")
		servertest.RequireSQSError(t, set(plain.QueueUrl, map[string]string{"RedrivePolicy": policy("jobs-dlq.fifo")}), "InvalidParameterValue", "same type of queue")
		require.NoError(t, set(q.QueueUrl, map[string]string{"RedrivePolicy": policy("jobs-dlq.fifo")}))
		info, err = s.C.QueuesInfo(ctx, &pb.QueuesInfoRequest{QueueName: "jobs.fifo"})
		require.NoError(t, err)
		require.Equal(t, "jobs-dlq.fifo", info.DeadQueue)
	})
}

func TestSQSFIFOSend(t *testing.T) {
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.Start(t, b)
		c := s.SQSClient("test", "test")
		q, err := c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String("orders.fifo"), Attributes: fifoAttrs()})
		require.NoError(t, err)
		send := func(url *string, group, dedup, body string) (*awssqs.SendMessageOutput, error) {
			in := &awssqs.SendMessageInput{QueueUrl: url, MessageBody: aws.String(body)}
			if group != "" {
				in.MessageGroupId = aws.String(group)
			}
			if dedup != "" {
				in.MessageDeduplicationId = aws.String(dedup)
			}
			return c.SendMessage(ctx, in)
		}
		seq := func(t *testing.T, s *string) uint64 {
			t.Helper()
			n, err := strconv.ParseUint(aws.ToString(s), 10, 64)
			require.NoError(t, err, "SequenceNumber %q", aws.ToString(s))
			return n
		}

		// What a FIFO send needs, in SQS's words.
		_, err = send(q.QueueUrl, "", "d0", "x")
		servertest.RequireSQSError(t, err, "MissingParameter", "The request must contain the parameter MessageGroupId.")
		_, err = send(q.QueueUrl, "a", "", "x")
		servertest.RequireSQSError(t, err, "InvalidParameterValue", "The queue should either have ContentBasedDeduplication enabled or MessageDeduplicationId provided explicitly")
		_, err = c.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: q.QueueUrl, MessageBody: aws.String("x"), MessageGroupId: aws.String("a"),
			MessageDeduplicationId: aws.String("d0"), DelaySeconds: 5})
		servertest.RequireSQSError(t, err, "InvalidParameterValue", "Value 5 for parameter DelaySeconds is invalid. Reason: The request include parameter that is not valid for this queue type.")
		_, err = send(q.QueueUrl, "a group", "d0", "x")
		servertest.RequireSQSError(t, err, "InvalidParameterValue", "parameter MessageGroupId is invalid", "alphanumeric and punctuation")
		_, err = send(q.QueueUrl, "a", strings.Repeat("d", 129), "x")
		servertest.RequireSQSError(t, err, "InvalidParameterValue", "parameter MessageDeduplicationId is invalid", "1 to 128 in length")
		require.Empty(t, s.Items("orders.fifo"))

		// Deduplication by id: a send of an id sent within the window
		// answers the first send's MessageId and SequenceNumber and stores
		// nothing; across groups too (DeduplicationScope queue).
		a1, err := send(q.QueueUrl, "a", "d1", "one")
		require.NoError(t, err)
		require.NotEmpty(t, aws.ToString(a1.MessageId))
		require.Equal(t, md5Of("one"), aws.ToString(a1.MD5OfMessageBody))
		seq1 := seq(t, a1.SequenceNumber)
		for _, group := range []string{"a", "b"} {
			dup, err := send(q.QueueUrl, group, "d1", "another body")
			require.NoError(t, err)
			require.Equal(t, aws.ToString(a1.MessageId), aws.ToString(dup.MessageId), "a deduplicated send answers the first's MessageId")
			require.Equal(t, aws.ToString(a1.SequenceNumber), aws.ToString(dup.SequenceNumber))
		}
		a2, err := send(q.QueueUrl, "a", "d2", "two")
		require.NoError(t, err)
		require.NotEqual(t, aws.ToString(a1.MessageId), aws.ToString(a2.MessageId))
		seq2 := seq(t, a2.SequenceNumber)
		require.Greater(t, seq2, seq1, "SequenceNumber increases within a group")

		// A batch: each entry is checked alone (but an entry without
		// MessageGroupId fails the whole batch: TestSQSFIFOBatchMissingIDs);
		// an id repeated in the batch is deduplicated.
		batch, err := c.SendMessageBatch(ctx, &awssqs.SendMessageBatchInput{QueueUrl: q.QueueUrl, Entries: []types.SendMessageBatchRequestEntry{
			{Id: aws.String("e1"), MessageBody: aws.String("three"), MessageGroupId: aws.String("a"), MessageDeduplicationId: aws.String("d3")},
			{Id: aws.String("e3"), MessageBody: aws.String("three again"), MessageGroupId: aws.String("a"), MessageDeduplicationId: aws.String("d3")},
			{Id: aws.String("e4"), MessageBody: aws.String("late"), MessageGroupId: aws.String("c"), MessageDeduplicationId: aws.String("d5"), DelaySeconds: 2},
		}})
		require.NoError(t, err)
		require.Len(t, batch.Successful, 2)
		require.Equal(t, []string{"e1", "e3"}, []string{aws.ToString(batch.Successful[0].Id), aws.ToString(batch.Successful[1].Id)})
		require.Equal(t, aws.ToString(batch.Successful[0].MessageId), aws.ToString(batch.Successful[1].MessageId))
		seq3 := seq(t, batch.Successful[0].SequenceNumber)
		require.Greater(t, seq3, seq2)
		require.Len(t, batch.Failed, 1)
		require.Equal(t, "e4", aws.ToString(batch.Failed[0].Id))
		require.Equal(t, "InvalidParameterValue", aws.ToString(batch.Failed[0].Code))
		require.Contains(t, aws.ToString(batch.Failed[0].Message), "DelaySeconds")
		require.True(t, batch.Failed[0].SenderFault)

		// A message's DelaySeconds of 0 is accepted (the SDK leaves a 0
		// out: a JSON request of our own).
		req, err := http.NewRequest(http.MethodPost, s.Endpoint+"/", bytes.NewBufferString(`{"QueueUrl":"`+aws.ToString(q.QueueUrl)+
			`","MessageBody":"four","MessageGroupId":"d","MessageDeduplicationId":"d6","DelaySeconds":0}`))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/x-amz-json-1.0")
		req.Header.Set("X-Amz-Target", "AmazonSQS.SendMessage")
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		require.NoError(t, res.Body.Close())
		require.Equal(t, http.StatusOK, res.StatusCode)

		// Stored: one item per id, each with its group.
		items := s.WaitItems("orders.fifo", 4)
		groups := map[string]int{}
		for _, it := range items {
			groups[it.Group]++
		}
		require.Equal(t, map[string]int{"a": 3, "d": 1}, groups)

		// Received in order, one receive holding the group's messages, with
		// their system attributes: by name, then All.
		byName, err := c.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: q.QueueUrl, MaxNumberOfMessages: 10, WaitTimeSeconds: 5,
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{"SequenceNumber"}})
		require.NoError(t, err)
		var visible []types.ChangeMessageVisibilityBatchRequestEntry
		for i, m := range byName.Messages {
			require.Equal(t, []string{"SequenceNumber"}, slices.Collect(maps.Keys(m.Attributes)))
			if aws.ToString(m.Body) == "one" {
				require.Equal(t, aws.ToString(a1.SequenceNumber), m.Attributes["SequenceNumber"])
			}
			visible = append(visible, types.ChangeMessageVisibilityBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: m.ReceiptHandle})
		}
		require.NotEmpty(t, visible)
		changed, err := c.ChangeMessageVisibilityBatch(ctx, &awssqs.ChangeMessageVisibilityBatchInput{QueueUrl: q.QueueUrl, Entries: visible})
		require.NoError(t, err)
		require.Empty(t, changed.Failed)
		got, err := c.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: q.QueueUrl, MaxNumberOfMessages: 10, WaitTimeSeconds: 5,
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{"All"}})
		require.NoError(t, err)
		var inA []types.Message
		for _, m := range got.Messages {
			if m.Attributes["MessageGroupId"] == "a" {
				inA = append(inA, m)
			}
		}
		require.Len(t, inA, 3, "the group's head and the ready messages after it")
		want := []struct{ body, dedup, seq, id string }{
			{"one", "d1", aws.ToString(a1.SequenceNumber), aws.ToString(a1.MessageId)},
			{"two", "d2", aws.ToString(a2.SequenceNumber), aws.ToString(a2.MessageId)},
			{"three", "d3", aws.ToString(batch.Successful[0].SequenceNumber), aws.ToString(batch.Successful[0].MessageId)},
		}
		for i, m := range inA {
			require.Equal(t, want[i].body, aws.ToString(m.Body))
			require.Equal(t, want[i].id, aws.ToString(m.MessageId))
			require.Equal(t, "a", m.Attributes["MessageGroupId"])
			require.Equal(t, want[i].dedup, m.Attributes["MessageDeduplicationId"])
			require.Equal(t, want[i].seq, m.Attributes["SequenceNumber"])
			require.Equal(t, "2", m.Attributes["ApproximateReceiveCount"], "the first receive counted")
		}

		// ContentBasedDeduplication: the body's SHA-256 is the id, unless
		// one is given.
		cbd, err := c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String("content.fifo"), Attributes: fifoAttrs("ContentBasedDeduplication", "true")})
		require.NoError(t, err)
		c1, err := send(cbd.QueueUrl, "x", "", "same body")
		require.NoError(t, err)
		c2, err := send(cbd.QueueUrl, "y", "", "same body")
		require.NoError(t, err)
		require.Equal(t, aws.ToString(c1.MessageId), aws.ToString(c2.MessageId), "the same body is deduplicated")
		c3, err := send(cbd.QueueUrl, "x", "explicit", "same body")
		require.NoError(t, err)
		require.NotEqual(t, aws.ToString(c1.MessageId), aws.ToString(c3.MessageId), "a given id overrides the body's")
		s.WaitItems("content.fifo", 2)
		got, err = c.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: cbd.QueueUrl, MaxNumberOfMessages: 10, WaitTimeSeconds: 5,
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{"MessageDeduplicationId"}})
		require.NoError(t, err)
		require.Len(t, got.Messages, 2)
		sum := sha256.Sum256([]byte("same body"))
		require.Equal(t, hex.EncodeToString(sum[:]), got.Messages[0].Attributes["MessageDeduplicationId"])
		require.Equal(t, "explicit", got.Messages[1].Attributes["MessageDeduplicationId"])

		// DeduplicationScope messageGroup: each group has its own ids.
		scoped, err := c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String("scoped.fifo"),
			Attributes: fifoAttrs("DeduplicationScope", "messageGroup", "FifoThroughputLimit", "perMessageGroupId")})
		require.NoError(t, err)
		x1, err := send(scoped.QueueUrl, "x", "d", "x")
		require.NoError(t, err)
		y1, err := send(scoped.QueueUrl, "y", "d", "y")
		require.NoError(t, err)
		require.NotEqual(t, aws.ToString(x1.MessageId), aws.ToString(y1.MessageId))
		x2, err := send(scoped.QueueUrl, "x", "d", "x again")
		require.NoError(t, err)
		require.Equal(t, aws.ToString(x1.MessageId), aws.ToString(x2.MessageId))
		require.Len(t, s.WaitItems("scoped.fifo", 2), 2)

		// A standard queue: MessageGroupId is the item's group (SQS's fair
		// queues); MessageDeduplicationId is refused.
		plain, err := c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String("plain")})
		require.NoError(t, err)
		_, err = send(plain.QueueUrl, "", "d", "x")
		servertest.RequireSQSError(t, err, "InvalidParameterValue", "Value d for parameter MessageDeduplicationId is invalid. Reason: The request include parameter that is not valid for this queue type.")
		p1, err := send(plain.QueueUrl, "tenant-1", "", "fair")
		require.NoError(t, err)
		require.Nil(t, p1.SequenceNumber)
		require.Equal(t, "tenant-1", s.WaitItems("plain", 1)[0].Group)
		got, err = c.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: plain.QueueUrl, WaitTimeSeconds: 5,
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{"All"}})
		require.NoError(t, err)
		require.Len(t, got.Messages, 1)
		require.Equal(t, "tenant-1", got.Messages[0].Attributes["MessageGroupId"])
		require.NotContains(t, got.Messages[0].Attributes, "SequenceNumber")
		require.NotContains(t, got.Messages[0].Attributes, "MessageDeduplicationId")
	})
}

func md5Of(s string) string {
	return fmt.Sprintf("%x", md5.Sum([]byte(s)))
}

// TestSQSFIFOOrderUnderConcurrency: concurrent consumers of a FIFO queue,
// some of whose receives are abandoned (their visibility timeout of 1 s
// passes), never hold two receives of one group at once and process each
// group's messages once each, in send order.
func TestSQSFIFOOrderUnderConcurrency(t *testing.T) {
	t.Parallel()
	const groups, perGroup, consumers = 3, 12, 4
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.Start(t, b)
		c := s.SQSClient("test", "test")
		q, err := c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String("ordered.fifo"), Attributes: fifoAttrs("ContentBasedDeduplication", "true")})
		require.NoError(t, err)
		var entries []types.SendMessageBatchRequestEntry
		for i := range perGroup {
			for g := range groups {
				entries = append(entries, types.SendMessageBatchRequestEntry{Id: aws.String(fmt.Sprintf("g%d-%d", g, i)),
					MessageBody: aws.String(fmt.Sprintf("%d:%d", g, i)), MessageGroupId: aws.String(fmt.Sprintf("g%d", g))})
			}
		}
		for chunk := range slices.Chunk(entries, 10) {
			out, err := c.SendMessageBatch(ctx, &awssqs.SendMessageBatchInput{QueueUrl: q.QueueUrl, Entries: chunk})
			require.NoError(t, err)
			require.Empty(t, out.Failed)
		}

		var (
			mu       sync.Mutex
			held     = map[string]bool{} // groups a processing consumer holds
			next     = make([]int, groups)
			done     int
			problems []string
		)
		fail := func(format string, args ...any) {
			problems = append(problems, fmt.Sprintf(format, args...))
		}
		deadline := time.Now().Add(60 * time.Second)
		var wg sync.WaitGroup
		for range consumers {
			wg.Go(func() {
				for {
					mu.Lock()
					stop := done == groups*perGroup || len(problems) > 0 || time.Now().After(deadline)
					mu.Unlock()
					if stop {
						return
					}
					abandon := rand.IntN(5) == 0
					in := &awssqs.ReceiveMessageInput{QueueUrl: q.QueueUrl, MaxNumberOfMessages: int32(1 + rand.IntN(3)), WaitTimeSeconds: 1}
					if abandon {
						in.VisibilityTimeout = 1
					}
					out, err := c.ReceiveMessage(ctx, in)
					if err != nil {
						mu.Lock()
						fail("receive: %v", err)
						mu.Unlock()
						return
					}
					type msg struct {
						g, i   int
						handle *string
					}
					var msgs []msg
					for _, m := range out.Messages {
						var g, i int
						if _, err := fmt.Sscanf(aws.ToString(m.Body), "%d:%d", &g, &i); err != nil {
							mu.Lock()
							fail("body %q: %v", aws.ToString(m.Body), err)
							mu.Unlock()
							return
						}
						msgs = append(msgs, msg{g, i, m.ReceiptHandle})
					}
					last := map[int]int{} // group -> index of its last message in msgs
					mu.Lock()
					for j, m := range msgs {
						key := strconv.Itoa(m.g)
						if _, seen := last[m.g]; !seen && held[key] {
							fail("group %d received while another receive holds it", m.g)
						}
						last[m.g] = j
					}
					if !abandon {
						for g := range last {
							held[strconv.Itoa(g)] = true
						}
					}
					mu.Unlock()
					if abandon {
						continue // their visibility timeout passes
					}
					for j, m := range msgs {
						mu.Lock()
						if m.i != next[m.g] {
							fail("group %d: message %d processed when %d was next", m.g, m.i, next[m.g])
						}
						next[m.g] = m.i + 1
						if last[m.g] == j {
							// Released before the delete: the group's next
							// message cannot come before the delete.
							delete(held, strconv.Itoa(m.g))
						}
						mu.Unlock()
						if _, err := c.DeleteMessage(ctx, &awssqs.DeleteMessageInput{QueueUrl: q.QueueUrl, ReceiptHandle: m.handle}); err != nil {
							mu.Lock()
							fail("delete: %v", err)
							mu.Unlock()
							return
						}
						mu.Lock()
						done++
						mu.Unlock()
					}
				}
			})
		}
		wg.Wait()
		require.Empty(t, problems)
		require.Equal(t, groups*perGroup, done, "every message processed once")
		for g := range groups {
			require.Equal(t, perGroup, next[g], "group %d", g)
		}
		require.Empty(t, s.Items("ordered.fifo"))
	})
}

// TestSQSReceiveRequestAttemptID: a receive retried with its
// ReceiveRequestAttemptId returns the same messages and receipt handles,
// resetting their visibility timeout, while none was deleted or had its
// visibility changed; after their visibility timeout it is a new receive.
// Standard queues ignore the id, as SQS.
func TestSQSReceiveRequestAttemptID(t *testing.T) {
	t.Parallel()
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.Start(t, b)
		c := s.SQSClient("test", "test")
		q, err := c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String("attempts.fifo"), Attributes: fifoAttrs("ContentBasedDeduplication", "true")})
		require.NoError(t, err)
		for _, m := range []struct{ group, body string }{{"g", "g0"}, {"g", "g1"}, {"h", "h0"}, {"k", "k0"}} {
			_, err := c.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: q.QueueUrl, MessageGroupId: aws.String(m.group), MessageBody: aws.String(m.body)})
			require.NoError(t, err)
		}
		receive := func(attempt string, n int32, visibility int32) (*awssqs.ReceiveMessageOutput, error) {
			return c.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: q.QueueUrl, MaxNumberOfMessages: n, WaitTimeSeconds: 5,
				VisibilityTimeout: visibility, ReceiveRequestAttemptId: aws.String(attempt),
				MessageSystemAttributeNames: []types.MessageSystemAttributeName{"ApproximateReceiveCount"}})
		}
		ids := func(out *awssqs.ReceiveMessageOutput) (ids, handles []string) {
			for _, m := range out.Messages {
				ids, handles = append(ids, aws.ToString(m.MessageId)), append(handles, aws.ToString(m.ReceiptHandle))
			}
			return ids, handles
		}

		r1, err := receive("try-1", 2, 30)
		require.NoError(t, err)
		require.Len(t, r1.Messages, 2)
		ids1, handles1 := ids(r1)
		// The retry: the same messages and receipt handles, the visibility
		// timeout reset (to 100 s here).
		r2, err := receive("try-1", 2, 100)
		require.NoError(t, err)
		ids2, handles2 := ids(r2)
		require.Equal(t, ids1, ids2)
		require.Equal(t, handles1, handles2)
		require.Equal(t, "1", r2.Messages[0].Attributes["ApproximateReceiveCount"], "a retry is no new receive")
		leased := 0
		for _, it := range s.Items("attempts.fifo") {
			if it.IsLeased {
				leased++
				require.Greater(t, it.LeaseDeadline.AsTime(), time.Now().Add(60*time.Second), "the retry resets the visibility timeout")
			}
		}
		require.Equal(t, 2, leased)
		// Another attempt id is another receive: the other messages.
		r3, err := receive("try-2", 10, 30)
		require.NoError(t, err)
		ids3, _ := ids(r3)
		require.NotEmpty(t, ids3)
		for _, id := range ids3 {
			require.NotContains(t, ids1, id)
		}
		// Once a message of the receive is deleted, the retry is refused.
		_, err = c.DeleteMessage(ctx, &awssqs.DeleteMessageInput{QueueUrl: q.QueueUrl, ReceiptHandle: r1.Messages[0].ReceiptHandle})
		require.NoError(t, err)
		_, err = receive("try-1", 2, 30)
		servertest.RequireSQSError(t, err, "InvalidParameterValue", "Value try-1 for parameter ReceiveRequestAttemptId is invalid. Reason: The receiveRequestAttemptId is not valid anymore since the receive call is not retryable.")
		for _, m := range slices.Concat(r1.Messages[1:], r3.Messages) {
			_, err = c.DeleteMessage(ctx, &awssqs.DeleteMessageInput{QueueUrl: q.QueueUrl, ReceiptHandle: m.ReceiptHandle})
			require.NoError(t, err)
		}
		// Whatever a first receive of g0, g1, h0 and k0 left is still there
		// (ready, so a receive that waits 1 s, not 5, gets it: usually
		// nothing is left).
		rest, err := c.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: q.QueueUrl, MaxNumberOfMessages: 10, WaitTimeSeconds: 1,
			VisibilityTimeout: 30, ReceiveRequestAttemptId: aws.String("try-rest")})
		require.NoError(t, err)
		for _, m := range rest.Messages {
			_, err = c.DeleteMessage(ctx, &awssqs.DeleteMessageInput{QueueUrl: q.QueueUrl, ReceiptHandle: m.ReceiptHandle})
			require.NoError(t, err)
		}
		require.Empty(t, s.Items("attempts.fifo"))

		// After the visibility timeout: a new receive under the same id.
		_, err = c.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: q.QueueUrl, MessageGroupId: aws.String("z"), MessageBody: aws.String("z0")})
		require.NoError(t, err)
		r4, err := receive("try-3", 1, 1)
		require.NoError(t, err)
		require.Len(t, r4.Messages, 1)
		visibleAgain(t, c, q.QueueUrl)
		r5, err := receive("try-3", 1, 30)
		require.NoError(t, err)
		require.Len(t, r5.Messages, 1)
		require.Equal(t, aws.ToString(r4.Messages[0].MessageId), aws.ToString(r5.Messages[0].MessageId))
		require.NotEqual(t, aws.ToString(r4.Messages[0].ReceiptHandle), aws.ToString(r5.Messages[0].ReceiptHandle))
		require.Equal(t, "2", r5.Messages[0].Attributes["ApproximateReceiveCount"])
		// A visibility change makes the retry refused too.
		_, err = c.ChangeMessageVisibility(ctx, &awssqs.ChangeMessageVisibilityInput{QueueUrl: q.QueueUrl, ReceiptHandle: r5.Messages[0].ReceiptHandle, VisibilityTimeout: 60})
		require.NoError(t, err)
		_, err = receive("try-3", 1, 30)
		servertest.RequireSQSError(t, err, "InvalidParameterValue", "not retryable")

		_, err = receive("a b", 1, 30)
		servertest.RequireSQSError(t, err, "InvalidParameterValue", "parameter ReceiveRequestAttemptId is invalid")

		// A standard queue ignores the id: each receive is new.
		plain, err := c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String("plain")})
		require.NoError(t, err)
		for _, body := range []string{"p0", "p1"} {
			_, err = c.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: plain.QueueUrl, MessageBody: aws.String(body)})
			require.NoError(t, err)
		}
		var bodies []string
		for range 2 {
			out, err := c.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: plain.QueueUrl, WaitTimeSeconds: 5, ReceiveRequestAttemptId: aws.String("same")})
			require.NoError(t, err)
			require.Len(t, out.Messages, 1)
			bodies = append(bodies, aws.ToString(out.Messages[0].Body))
		}
		slices.Sort(bodies)
		require.Equal(t, []string{"p0", "p1"}, bodies)
	})
}

// TestSQSFIFODeadLetter: a FIFO queue's message that reaches its
// maxReceiveCount goes to its FIFO dead-letter queue with its group, the
// group goes on, and a move task brings it back into its group.
func TestSQSFIFODeadLetter(t *testing.T) {
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.Start(t, b)
		c := s.SQSClient("test", "test")
		dlq, err := c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String("orders-dlq.fifo"), Attributes: fifoAttrs()})
		require.NoError(t, err)
		dlqArn := "arn:aws:sqs:us-east-1:000000000000:orders-dlq.fifo"
		src, err := c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String("orders.fifo"), Attributes: fifoAttrs(
			"ContentBasedDeduplication", "true", "RedrivePolicy", `{"deadLetterTargetArn":"`+dlqArn+`","maxReceiveCount":2}`)})
		require.NoError(t, err)
		var sent []*awssqs.SendMessageOutput
		for _, body := range []string{"a1", "a2"} {
			out, err := c.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: src.QueueUrl, MessageGroupId: aws.String("a"), MessageBody: aws.String(body)})
			require.NoError(t, err)
			sent = append(sent, out)
		}
		all := []types.MessageSystemAttributeName{"All"}
		receiveOne := func(url *string) types.Message {
			t.Helper()
			out, err := c.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: url, WaitTimeSeconds: 5, MessageSystemAttributeNames: all})
			require.NoError(t, err)
			require.Len(t, out.Messages, 1)
			return out.Messages[0]
		}
		// a1 fails twice: the group's head each time, then dead-lettered.
		for receive := 1; receive <= 2; receive++ {
			m := receiveOne(src.QueueUrl)
			require.Equal(t, "a1", aws.ToString(m.Body), "the failed head comes back first")
			require.Equal(t, strconv.Itoa(receive), m.Attributes["ApproximateReceiveCount"])
			_, err = c.ChangeMessageVisibility(ctx, &awssqs.ChangeMessageVisibilityInput{QueueUrl: src.QueueUrl, ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: 0})
			require.NoError(t, err)
		}
		dead := s.WaitItems("orders-dlq.fifo", 1)[0]
		require.Equal(t, "a", dead.Group, "the dead item keeps its group")
		// The group goes on with a2.
		m := receiveOne(src.QueueUrl)
		require.Equal(t, "a2", aws.ToString(m.Body))
		require.Equal(t, "a", m.Attributes["MessageGroupId"])
		_, err = c.DeleteMessage(ctx, &awssqs.DeleteMessageInput{QueueUrl: src.QueueUrl, ReceiptHandle: m.ReceiptHandle})
		require.NoError(t, err)
		// Received from the dead-letter queue: its group, MessageId and
		// SequenceNumber, and its source.
		m = receiveOne(dlq.QueueUrl)
		require.Equal(t, aws.ToString(sent[0].MessageId), aws.ToString(m.MessageId))
		require.Equal(t, "a", m.Attributes["MessageGroupId"])
		require.Equal(t, aws.ToString(sent[0].SequenceNumber), m.Attributes["SequenceNumber"])
		require.Equal(t, "arn:aws:sqs:us-east-1:000000000000:orders.fifo", m.Attributes["DeadLetterQueueSourceArn"])
		_, err = c.ChangeMessageVisibility(ctx, &awssqs.ChangeMessageVisibilityInput{QueueUrl: dlq.QueueUrl, ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: 0})
		require.NoError(t, err)

		// A move task back: the message returns to its group.
		_, err = c.StartMessageMoveTask(ctx, &awssqs.StartMessageMoveTaskInput{SourceArn: aws.String(dlqArn)})
		require.NoError(t, err)
		servertest.Eventually(t, func() bool {
			tasks, err := c.ListMessageMoveTasks(ctx, &awssqs.ListMessageMoveTasksInput{SourceArn: aws.String(dlqArn)})
			return err == nil && len(tasks.Results) == 1 && aws.ToString(tasks.Results[0].Status) == "COMPLETED"
		}, "the move task should complete")
		require.Equal(t, "a", s.WaitItems("orders.fifo", 1)[0].Group)
		m = receiveOne(src.QueueUrl)
		require.Equal(t, "a1", aws.ToString(m.Body))
		require.Equal(t, aws.ToString(sent[0].MessageId), aws.ToString(m.MessageId))
		require.Equal(t, "a", m.Attributes["MessageGroupId"])
	})
}

// TestSQSFairQueue: MessageGroupId on a standard queue makes it a fair
// queue: a receive takes the groups in turn, so a busy group does not hold
// back the others.
func TestSQSFairQueue(t *testing.T) {
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.Start(t, b)
		c := s.SQSClient("test", "test")
		q, err := c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String("fair")})
		require.NoError(t, err)
		var entries []types.SendMessageBatchRequestEntry
		for i := range 20 {
			entries = append(entries, types.SendMessageBatchRequestEntry{Id: aws.String(fmt.Sprintf("hot%d", i)),
				MessageBody: aws.String("hot"), MessageGroupId: aws.String("hot")})
		}
		for i := range 5 {
			entries = append(entries, types.SendMessageBatchRequestEntry{Id: aws.String(fmt.Sprintf("t%d", i)),
				MessageBody: aws.String(fmt.Sprintf("tenant-%d", i)), MessageGroupId: aws.String(fmt.Sprintf("tenant-%d", i))})
		}
		for chunk := range slices.Chunk(entries, 10) {
			out, err := c.SendMessageBatch(ctx, &awssqs.SendMessageBatchInput{QueueUrl: q.QueueUrl, Entries: chunk})
			require.NoError(t, err)
			require.Empty(t, out.Failed)
		}
		s.WaitItems("fair", 25)
		out, err := c.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: q.QueueUrl, MaxNumberOfMessages: 10, WaitTimeSeconds: 5})
		require.NoError(t, err)
		var tenants []string
		for _, m := range out.Messages {
			if body := aws.ToString(m.Body); body != "hot" {
				tenants = append(tenants, body)
			}
		}
		slices.Sort(tenants)
		require.Equal(t, []string{"tenant-0", "tenant-1", "tenant-2", "tenant-3", "tenant-4"}, tenants,
			"a receive of 10 takes every small group, not 10 of the busy one")
	})
}

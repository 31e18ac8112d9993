package sqs_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/daemon"
	"github.com/styxq/styx/internal/groupcheck"
	"github.com/styxq/styx/internal/pgtest"
	"github.com/styxq/styx/internal/servertest"
)

// fifoLoad runs 8 consumers of one FIFO queue through the AWS SDK, spread
// over nodes (the first creates the queue), with retries (visibility set
// to 0: back first in its group) and receives left to expire (a short
// visibility timeout), and checks the recorded history with
// internal/groupcheck: never two receives of a group in flight at once,
// each group's messages in send order, every message deleted. The
// visibility timeout of a processed receive is long (30 s), so its deletes
// always come first: a delete after the visibility timeout may delete
// nothing (AWS's rule), which the checker could not tell.
func fifoLoad(t *testing.T, nodes []*servertest.Server) {
	const groups, perGroup, consumers = 12, 20, 8
	const processVisibility, abandonVisibility = 30, 1
	clients := make([]*awssqs.Client, len(nodes))
	urls := make([]*string, len(nodes))
	for i, n := range nodes {
		clients[i] = n.SQSClient("test", "test")
		urls[i] = aws.String(n.Endpoint + "/000000000000/load.fifo")
	}
	_, err := clients[0].CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String("load.fifo"),
		Attributes: fifoAttrs("ContentBasedDeduplication", "true")})
	require.NoError(t, err)
	h := groupcheck.New()
	var entries []types.SendMessageBatchRequestEntry
	for i := range perGroup {
		for g := range groups {
			entries = append(entries, types.SendMessageBatchRequestEntry{Id: aws.String(fmt.Sprintf("g%d-%d", g, i)),
				MessageBody: aws.String(fmt.Sprintf("%d:%d", g, i)), MessageGroupId: aws.String(fmt.Sprintf("g%d", g))})
		}
	}
	for k := 0; k < len(entries); k += 10 {
		out, err := clients[(k/10)%len(clients)].SendMessageBatch(ctx, &awssqs.SendMessageBatchInput{QueueUrl: urls[(k/10)%len(urls)], Entries: entries[k : k+10]})
		require.NoError(t, err)
		require.Empty(t, out.Failed)
	}
	for g := range groups {
		h.Produced(fmt.Sprint("g", g), perGroup)
	}

	var deleted, retried, abandoned atomic.Int64
	deadline := time.Now().Add(90 * time.Second)
	var wg sync.WaitGroup
	for k := range consumers {
		c, url := clients[k%len(clients)], urls[k%len(urls)]
		node := fmt.Sprint("node", k%len(clients))
		wg.Go(func() {
			for deleted.Load() < groups*perGroup && time.Now().Before(deadline) {
				abandon := rand.IntN(20) == 0
				vt := int32(processVisibility)
				if abandon {
					vt = abandonVisibility
				}
				sent := time.Now()
				out, err := c.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: url, MaxNumberOfMessages: int32(1 + rand.IntN(5)),
					WaitTimeSeconds: 1, VisibilityTimeout: vt, MessageSystemAttributeNames: []types.MessageSystemAttributeName{"MessageGroupId"}})
				got := time.Now()
				if !assert.NoError(t, err) {
					return
				}
				// The lease's deadline is at least the request's send plus
				// the visibility timeout.
				visibleAt := sent.Add(time.Duration(vt) * time.Second)
				items := make([]groupcheck.Item, len(out.Messages))
				for k, m := range out.Messages {
					var g, i int
					_, err := fmt.Sscanf(aws.ToString(m.Body), "%d:%d", &g, &i)
					require.NoError(t, err)
					group := fmt.Sprint("g", g)
					require.Equal(t, group, m.Attributes["MessageGroupId"])
					items[k] = groupcheck.Item{Group: group, Index: i}
				}
				for _, r := range groupcheck.Runs(items, got, visibleAt, node) {
					l := &r.Lease
					if abandon {
						abandoned.Add(1)
						h.Add(*l)
						continue
					}
					cut := len(r.At) // delete a prefix, retry the rest
					if rand.IntN(10) == 0 {
						cut = rand.IntN(len(r.At))
					}
					for j, k := range r.At {
						rh := out.Messages[k].ReceiptHandle
						if j < cut {
							l.End = groupcheck.EndAt(time.Now(), visibleAt)
							_, err := c.DeleteMessage(ctx, &awssqs.DeleteMessageInput{QueueUrl: url, ReceiptHandle: rh})
							if !assert.NoError(t, err) {
								return
							}
							l.Completed = append(l.Completed, l.Items[j])
							deleted.Add(1)
							continue
						}
						l.End = groupcheck.EndAt(time.Now(), visibleAt)
						_, err := c.ChangeMessageVisibility(ctx, &awssqs.ChangeMessageVisibilityInput{QueueUrl: url, ReceiptHandle: rh, VisibilityTimeout: 0})
						if !assert.NoError(t, err) {
							return
						}
						if j == cut {
							retried.Add(1)
						}
					}
					h.Add(*l)
				}
			}
		})
	}
	wg.Wait()
	require.Equal(t, int64(groups*perGroup), deleted.Load(), "every message deleted in time")
	require.Empty(t, h.Check(true, 10))
	t.Logf("%d messages in %d groups, %d consumers on %d nodes: %d receives of a group, %d retried, %d left to expire",
		groups*perGroup, groups, consumers, len(nodes), h.Len(), retried.Load(), abandoned.Load())
}

// TestSQSFIFOGroupsUnderLoad: 8 consumers of a FIFO queue through the AWS
// SDK, with retries and expiring receives, never hold two receives of a
// group at once and get each group's messages in send order, on every
// backend (issue 37).
func TestSQSFIFOGroupsUnderLoad(t *testing.T) {
	t.Parallel()
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		fifoLoad(t, []*servertest.Server{servertest.Start(t, b)})
	})
}

// TestSQSFIFOGroupsUnderLoadTwoNodes is TestSQSFIFOGroupsUnderLoad with the
// consumers and the sends spread over two nodes on one PostgreSQL
// database.
func TestSQSFIFOGroupsUnderLoadTwoNodes(t *testing.T) {
	if os.Getenv(pgtest.EnvURL) == "" && os.Getenv(pgtest.EnvRequire) == "" {
		t.Skipf("postgres backend skipped: %s is not set (see internal/pgtest)", pgtest.EnvURL)
	}
	t.Parallel()
	b := servertest.Backend{Name: daemon.StoragePostgres, URL: pgtest.URL(t)}
	fifoLoad(t, []*servertest.Server{servertest.Start(t, b), servertest.Start(t, b)})
}

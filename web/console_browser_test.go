package web_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	styx "github.com/styxq/styx"
	pb "github.com/styxq/styx/styxpb"
	"github.com/styxq/styx/styxtest"
)

// kill produces n items to queue q (payloads payloadOf(i), references
// "<q>-ref-<i>"), leases them and retries them dead with the error errText,
// so that they land in q's dead-letter queue.
func kill(t *testing.T, c *styx.Client, q string, n int, errText string, payloadOf func(i int) string) {
	t.Helper()
	ctx := context.Background()
	var items []*pb.QueueProduceItem
	for i := range n {
		items = append(items, &pb.QueueProduceItem{Kind: "payment", Encoding: "application/json",
			Reference: fmt.Sprintf("%s-ref-%d", q, i), Bytes: []byte(payloadOf(i))})
	}
	require.NoError(t, c.QueueProduce(ctx, &pb.QueueProduceRequest{QueueName: q, Items: items, RequestTimeout: "10s"}))
	left := n
	for left > 0 {
		res, err := c.QueueLease(ctx, &pb.QueueLeaseRequest{QueueName: q, BatchSize: int32(left), ClientId: "fixture", RequestTimeout: "5s"})
		require.NoError(t, err)
		var retry []*pb.QueueRetryItem
		for _, it := range res.Items {
			retry = append(retry, &pb.QueueRetryItem{Id: it.Id, Dead: true, Error: errText})
		}
		_, err = c.QueueRetry(ctx, &pb.QueueRetryRequest{QueueName: q, Partition: res.Partition, Items: retry})
		require.NoError(t, err)
		left -= len(res.Items)
	}
}

// TestBrowserRedrivePreview (issue 28, 1): with 3 of 9 dead items whose
// source queue was deleted, the redrive dialog says 6 will move and 3 stay
// and why, by destination; the task then shows as completed with warnings
// and its reason.
func TestBrowserRedrivePreview(t *testing.T) {
	srv := styxtest.Start(t, styxtest.Options{})
	c := srv.Client
	styxtest.CreateQueue(t, c, &pb.QueueInfo{QueueName: "pay-dlq"})
	styxtest.CreateQueue(t, c, &pb.QueueInfo{QueueName: "pay", DeadQueue: "pay-dlq"})
	styxtest.CreateQueue(t, c, &pb.QueueInfo{QueueName: "pay-old", DeadQueue: "pay-dlq"})
	kill(t, c, "pay", 6, "card declined", func(i int) string { return fmt.Sprintf(`{"n":%d}`, i) })
	kill(t, c, "pay-old", 3, "card declined", func(i int) string { return fmt.Sprintf(`{"old":%d}`, i) })
	waitDead(t, c, "pay-dlq", 9)
	require.NoError(t, c.QueuesDelete(context.Background(), &pb.QueuesDeleteRequest{QueueName: "pay-old"}))
	b := newBrowser(t, srv.Endpoint)

	b.open("/ui/queues/pay-dlq/dead")
	b.waitText("main table caption", "9 dead items")
	b.run(chromedp.Click(`//button[text()="Redrive all…"]`))
	b.waitText("#confirm-dialog", "This will move 6 of 9 items to their source queue; 3 will stay in the dead-letter queue (3 destination queue does not exist).")
	require.Equal(t, "Redrive 6 items", b.text("#confirm-ok"))
	require.Equal(t, "pay | 6 | 0 | –", b.rowIn("#confirm-dialog", "pay"))
	require.Equal(t, "pay-old | 0 | 3 | 3 destination queue does not exist", b.rowIn("#confirm-dialog", "pay-old"))
	b.run(chromedp.Click(`#confirm-ok`, chromedp.ByQuery))
	b.waitText("h1", "Redrives")
	b.waitText(`tr[aria-current="true"]`, "completed with warnings")
	row := b.text(`tr[aria-current="true"]`)
	require.Contains(t, row, "6 of 9 moved")
	require.Contains(t, row, "3 of 9 items stay in the dead-letter queue: 3 whose destination queue does not exist")
	waitDead(t, c, "pay-dlq", 3)
}

// waitDead waits until the dead-letter queue holds n dead items.
func waitDead(t *testing.T, c *styx.Client, dlq string, n int64) {
	t.Helper()
	require.Eventually(t, func() bool {
		g, err := c.DeadGroups(context.Background(), &pb.DeadGroupsRequest{QueueName: dlq})
		return err == nil && g.TotalItems == n
	}, 10*time.Second, 10*time.Millisecond)
}

// rowIn is the text of the row under scope (a selector) whose first cell
// is name, cells separated by " | ".
func (b *browser) rowIn(scope, name string) string {
	b.t.Helper()
	return b.eval(fmt.Sprintf(`(() => { const r = [...document.querySelectorAll(%q)].find((r) => r.cells[0].innerText.trim() === %q);
		return r ? [...r.cells].map((c) => c.innerText.trim()).join(' | ') : ''; })()`, scope+" tbody tr", name))
}

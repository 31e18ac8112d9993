package web_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	styx "github.com/styxq/styx"
	pb "github.com/styxq/styx/styxpb"
	"github.com/styxq/styx/styxtest"
)

// die makes n items of queue q die with errText: references prefix-0 to
// prefix-<n-1>.
func die(t *testing.T, c *styx.Client, q, prefix string, n int, errText string) {
	t.Helper()
	ctx := context.Background()
	var items []*pb.QueueProduceItem
	for i := range n {
		items = append(items, &pb.QueueProduceItem{Reference: fmt.Sprintf("%s-%d", prefix, i), Bytes: []byte(`{}`)})
	}
	require.NoError(t, c.QueueProduce(ctx, &pb.QueueProduceRequest{QueueName: q, Items: items, RequestTimeout: "10s"}))
	for left := n; left > 0; {
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

// TestBrowserAllActionsConfirmed (issue 48, 5): the delete and the redrive
// of an error group act on the items the dialog counted. 5 items of a group
// are confirmed for deletion while 3 more die: OK deletes the 5 and the 3
// stay; the same for a redrive of 4 while 2 more die. When an item counted
// is gone meanwhile (deleted by someone else), OK does not act: the dialog
// asks again with the count as it is now, and its OK deletes those.
func TestBrowserAllActionsConfirmed(t *testing.T) {
	t.Parallel()
	srv := styxtest.Start(t, styxtest.Options{})
	c := srv.Client
	ctx := context.Background()
	b := newBrowser(t, srv.Endpoint)
	// queues creates dead-letter queue dlq and queue src whose dead_queue
	// it is.
	queues := func(dlq, src string) {
		styxtest.CreateQueue(t, c, &pb.QueueInfo{QueueName: dlq})
		styxtest.CreateQueue(t, c, &pb.QueueInfo{QueueName: src, DeadQueue: dlq})
	}

	t.Run("Delete", func(t *testing.T) {
		b.t = t
		queues("shop-dlq", "shop")
		die(t, c, "shop", "early", 5, "card declined for order 17")
		waitDead(t, c, "shop-dlq", 5)
		b.open("/ui/queues/shop-dlq/dead")
		b.waitText("main table caption", "5 dead items in 1 group")
		b.run(chromedp.Click(`button[aria-label="Delete group card declined for order <n>"]`, chromedp.ByQuery))
		b.waitDialog("This will delete 5 items of shop-dlq for good.")
		// 3 more die while the dialog is open.
		die(t, c, "shop", "late", 3, "card declined for order 18")
		waitDead(t, c, "shop-dlq", 8)
		b.run(chromedp.Click(`#confirm-ok`, chromedp.ByQuery))
		b.waitText("#status", "Deleted")
		require.Equal(t, "Deleted 5 items.", b.text("#status"))
		require.Equal(t, []string{"late-0", "late-1", "late-2"}, deadRefs(t, c, "shop-dlq"), "the items that died later are still there")
	})

	t.Run("Redrive", func(t *testing.T) {
		b.t = t
		queues("ship-dlq", "ship")
		die(t, c, "ship", "early", 4, "carrier timeout after 30s")
		waitDead(t, c, "ship-dlq", 4)
		b.open("/ui/queues/ship-dlq/dead")
		b.waitText("main table caption", "4 dead items in 1 group")
		b.run(chromedp.Click(`button[aria-label="Redrive group carrier timeout after <dur>"]`, chromedp.ByQuery))
		b.waitDialog("This will move 4 items to their source queue.")
		die(t, c, "ship", "late", 2, "carrier timeout after 45s")
		waitDead(t, c, "ship-dlq", 6)
		b.run(chromedp.Click(`#confirm-ok`, chromedp.ByQuery))
		b.waitText("h1", "Redrives")
		b.waitText(`tr[aria-current="true"]`, "completed")
		require.Contains(t, b.text(`tr[aria-current="true"]`), "4 of 4 moved")
		require.Equal(t, []string{"early-0", "early-1", "early-2", "early-3"}, references(t, c, "ship"), "exactly the confirmed items moved")
		require.Equal(t, []string{"late-0", "late-1"}, deadRefs(t, c, "ship-dlq"), "the items that died later are still there")
	})

	t.Run("AskAgain", func(t *testing.T) {
		b.t = t
		queues("post-dlq", "post")
		die(t, c, "post", "first", 4, "carrier timeout after 30s")
		waitDead(t, c, "post-dlq", 4)
		ids := deadIDs(t, c, "post-dlq")
		b.open("/ui/queues/post-dlq/dead")
		b.waitText("main table caption", "4 dead items in 1 group")
		b.run(chromedp.Click(`button[aria-label="Delete group carrier timeout after <dur>"]`, chromedp.ByQuery))
		b.waitDialog("This will delete 4 items of post-dlq for good.")
		// Meanwhile one of the 4 is deleted elsewhere and 2 more die: the
		// 4 confirmed items are no longer there.
		res, err := c.DeadDelete(ctx, &pb.DeadDeleteRequest{QueueName: "post-dlq", Filter: &pb.DeadFilter{Ids: []string{ids["first-0"]}}})
		require.NoError(t, err)
		require.EqualValues(t, 1, res.Deleted)
		die(t, c, "post", "second", 2, "carrier timeout after 45s")
		waitDead(t, c, "post-dlq", 5)
		b.run(chromedp.Click(`#confirm-ok`, chromedp.ByQuery))
		b.waitDialog("This will delete 5 items of post-dlq for good.")
		require.Equal(t, "Nothing was deleted: the items changed while the dialog was open (4 confirmed). The count below is as it is now.",
			b.text("#changed-note"))
		require.Equal(t, []string{"first-1", "first-2", "first-3", "second-0", "second-1"}, deadRefs(t, c, "post-dlq"), "nothing deleted yet")
		b.run(chromedp.Click(`#confirm-ok`, chromedp.ByQuery))
		b.waitText("#status", "Deleted")
		require.Equal(t, "Deleted 5 items.", b.text("#status"))
		require.Empty(t, deadRefs(t, c, "post-dlq"))
	})
}

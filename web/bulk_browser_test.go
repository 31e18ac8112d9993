package web_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	styx "github.com/styxq/styx"
	pb "github.com/styxq/styx/styxpb"
	"github.com/styxq/styx/styxtest"
)

// deadIDs returns the ids of the dead items of dead-letter queue dlq by
// reference.
func deadIDs(t *testing.T, c *styx.Client, dlq string) map[string]string {
	t.Helper()
	res, err := c.DeadList(context.Background(), &pb.DeadListRequest{QueueName: dlq, Limit: 1000, WithoutPayload: true})
	require.NoError(t, err)
	require.Empty(t, res.NextPivot)
	ids := map[string]string{}
	for _, it := range res.Items {
		ids[it.Reference] = it.Id
	}
	return ids
}

// references returns the sorted references of the items of queue q
// (partition 0, its only one).
func references(t *testing.T, c *styx.Client, q string) []string {
	t.Helper()
	res, err := c.StorageItemsList(context.Background(), &pb.StorageItemsListRequest{QueueName: q, Limit: 1000})
	require.NoError(t, err)
	var refs []string
	for _, it := range res.Items {
		refs = append(refs, it.Reference)
	}
	slices.Sort(refs)
	return refs
}

// deadRefs returns the sorted references of the dead items of dlq.
func deadRefs(t *testing.T, c *styx.Client, dlq string) []string {
	t.Helper()
	var refs []string
	for r := range deadIDs(t, c, dlq) {
		refs = append(refs, r)
	}
	slices.Sort(refs)
	return refs
}

// TestBrowserBulkSelection (issue 39, 3): dead items are ticked on the
// dead-letter queue page and redriven or deleted together, through the dry
// run and confirmation of the group actions. 3 of 10 ticked (one with the
// keyboard) stay ticked across the page's live updates, are redriven (the
// dry run says 3) and exactly they are back in their source queues; of 3
// ticked for deletion one is deleted meanwhile by someone else, leaves the
// selection, and the other 2 are deleted; "all N matching this filter"
// redrives every item the filter matches, across pages (N counted by a dry
// run), and no other; a selection of 1,001 items ticked page by page is
// over the limit of ids an action takes, and is deleted as "all".
func TestBrowserBulkSelection(t *testing.T) {
	t.Parallel()
	srv := styxtest.Start(t, styxtest.Options{})
	c := srv.Client
	ctx := context.Background()
	styxtest.CreateQueue(t, c, &pb.QueueInfo{QueueName: "ops-dlq"})
	styxtest.CreateQueue(t, c, &pb.QueueInfo{QueueName: "shop", DeadQueue: "ops-dlq"})
	styxtest.CreateQueue(t, c, &pb.QueueInfo{QueueName: "ship", DeadQueue: "ops-dlq"})
	kill(t, c, "shop", 6, "card declined for order 17", func(i int) string { return fmt.Sprintf(`{"order":%d}`, i) })
	kill(t, c, "ship", 4, "carrier timeout after 30s", func(i int) string { return fmt.Sprintf(`{"parcel":%d}`, i) })
	waitDead(t, c, "ops-dlq", 10)
	ids := deadIDs(t, c, "ops-dlq")
	box := func(ref string) string {
		return fmt.Sprintf(`input[type=checkbox][aria-label="Select dead item %s"]`, ids[ref])
	}
	b := newBrowser(t, srv.Endpoint)
	checked := func(ref string) bool {
		return b.eval(fmt.Sprintf(`String(!!document.querySelector(%q) && document.querySelector(%q).checked)`, box(ref), box(ref))) == "true"
	}
	// liveUpdate waits until the page has redrawn itself (a live update).
	liveUpdate := func() {
		ready := b.eval(`document.getElementById('main').dataset.ready`)
		b.run(chromedp.Poll(fmt.Sprintf(`document.getElementById('main').dataset.ready !== %q`, ready), nil, chromedp.WithPollingInterval(50*time.Millisecond)))
	}

	t.Run("RedriveSelected", func(t *testing.T) {
		b.t = t
		b.open("/ui/queues/ops-dlq/dead")
		b.waitText("main table caption", "10 dead items in 2 groups")
		b.waitText("#bulk", "No items selected")
		require.Equal(t, "true", b.eval(`String(document.getElementById('bulk-redrive').disabled)`), "nothing to act on yet")
		b.run(chromedp.Click(box("shop-ref-1"), chromedp.ByQuery), chromedp.Click(box("shop-ref-3"), chromedp.ByQuery))
		// The keyboard: a checkbox takes the focus and Space ticks it.
		b.run(chromedp.Focus(box("ship-ref-0"), chromedp.ByQuery), chromedp.KeyEvent(" "))
		b.waitText("#bulk-count", "3 items selected.")
		require.Equal(t, "true", b.eval(`String(document.getElementById('sel-page').indeterminate)`), "the page's box is mixed")

		// The page redraws itself; the selection stays.
		liveUpdate()
		liveUpdate()
		require.Equal(t, "3 items selected.", b.text("#bulk-count"))
		for _, ref := range []string{"shop-ref-1", "shop-ref-3", "ship-ref-0"} {
			require.True(t, checked(ref), ref)
		}
		require.False(t, checked("shop-ref-0"))
		b.screenshot("dead-bulk")

		b.run(chromedp.Click(`#bulk-redrive`, chromedp.ByQuery))
		b.waitDialog("This will move 3 items to their source queue.")
		require.Equal(t, "Redrive 3 items", b.text("#confirm-ok"))
		require.Equal(t, "shop | 2 | 0 | –", b.rowIn("#confirm-dialog", "shop"))
		require.Equal(t, "ship | 1 | 0 | –", b.rowIn("#confirm-dialog", "ship"))
		b.run(chromedp.Click(`#confirm-ok`, chromedp.ByQuery))
		b.waitText("h1", "Redrives")
		b.waitText(`tr[aria-current="true"]`, "completed")
		require.Contains(t, b.text(`tr[aria-current="true"]`), "3 of 3 moved")

		waitDead(t, c, "ops-dlq", 7)
		require.Equal(t, []string{"shop-ref-1", "shop-ref-3"}, references(t, c, "shop"), "exactly the ticked items are back")
		require.Equal(t, []string{"ship-ref-0"}, references(t, c, "ship"))
	})

	t.Run("DeleteSelected", func(t *testing.T) {
		b.t = t
		b.open("/ui/queues/ops-dlq/dead")
		b.waitText("main table caption", "7 dead items in 2 groups")
		b.waitText("#bulk", "No items selected")
		for _, ref := range []string{"shop-ref-0", "shop-ref-2", "shop-ref-4"} {
			require.False(t, checked(ref), "the selection was cleared after the redrive")
			b.run(chromedp.Click(box(ref), chromedp.ByQuery))
		}
		b.waitText("#bulk-count", "3 items selected.")
		// Someone else deletes one of them: it leaves the selection at the
		// next update.
		res, err := c.DeadDelete(ctx, &pb.DeadDeleteRequest{QueueName: "ops-dlq", Filter: &pb.DeadFilter{Ids: []string{ids["shop-ref-4"]}}})
		require.NoError(t, err)
		require.EqualValues(t, 1, res.Deleted)
		b.waitText("#bulk-count", "2 items selected.")
		b.run(chromedp.Click(`#bulk-delete`, chromedp.ByQuery))
		b.waitDialog("This will delete 2 items of ops-dlq for good.")
		require.Equal(t, "Delete 2 items", b.text("#confirm-ok"))
		b.run(chromedp.Click(`#confirm-ok`, chromedp.ByQuery))
		b.waitText("#status", "Deleted 2 items.")
		b.waitText("#bulk", "No items selected")
		require.Equal(t, []string{"ship-ref-1", "ship-ref-2", "ship-ref-3", "shop-ref-5"}, deadRefs(t, c, "ops-dlq"))
	})

	t.Run("AllMatchingFilter", func(t *testing.T) {
		b.t = t
		// 55 more timeouts, from a third queue: the filter's 58 items take
		// two pages.
		styxtest.CreateQueue(t, c, &pb.QueueInfo{QueueName: "late", DeadQueue: "ops-dlq"})
		kill(t, c, "late", 55, "carrier timeout after 45s", func(i int) string { return fmt.Sprintf(`{"late":%d}`, i) })
		waitDead(t, c, "ops-dlq", 59)
		ids = deadIDs(t, c, "ops-dlq")
		b.open("/ui/queues/ops-dlq/dead?error=timeout")
		b.waitText("main", "Dead items matching")
		b.waitText("nav.pager", "Next page")
		b.run(chromedp.Click(`#sel-page`, chromedp.ByQuery))
		b.waitText("#bulk-count", "50 items selected.")
		b.waitText("#bulk-all", "Select all 58 matching this filter")
		b.run(chromedp.Click(`#bulk-all`, chromedp.ByQuery))
		b.waitText("#bulk-count", "All 58 items matching this filter selected.")
		b.run(chromedp.Click(`#bulk-redrive`, chromedp.ByQuery))
		b.waitDialog("This will move 58 items to their source queue.")
		require.Contains(t, b.text("#confirm-dialog"), `Selected: error contains "timeout".`)
		b.run(chromedp.Click(`#confirm-ok`, chromedp.ByQuery))
		b.waitText("h1", "Redrives")
		b.waitText(`tr[aria-current="true"]`, "completed")
		require.Contains(t, b.text(`tr[aria-current="true"]`), "58 of 58 moved")

		waitDead(t, c, "ops-dlq", 1)
		require.Equal(t, []string{"shop-ref-5"}, deadRefs(t, c, "ops-dlq"), "only the items matching the filter moved")
		require.Equal(t, []string{"ship-ref-0", "ship-ref-1", "ship-ref-2", "ship-ref-3"}, references(t, c, "ship"))
		require.Len(t, references(t, c, "late"), 55)
		tasks, err := c.RedrivesList(ctx, &pb.RedrivesListRequest{QueueName: "ops-dlq"})
		require.NoError(t, err)
		require.Equal(t, "timeout", tasks.Tasks[0].Filter.ErrorContains, "the filter itself was sent")
		require.Empty(t, tasks.Tasks[0].Filter.Ids)
	})

	t.Run("OverTheLimit", func(t *testing.T) {
		b.t = t
		// 1,001 dead items: ticked page by page, one more than an action
		// takes by id (filter.ids, 1,000).
		styxtest.CreateQueue(t, c, &pb.QueueInfo{QueueName: "big-dlq"})
		styxtest.CreateQueue(t, c, &pb.QueueInfo{QueueName: "big", DeadQueue: "big-dlq"})
		styxtest.CreateQueue(t, c, &pb.QueueInfo{QueueName: "big2", DeadQueue: "big-dlq"})
		kill(t, c, "big", 500, "boom", func(i int) string { return fmt.Sprint(i) })
		kill(t, c, "big2", 501, "boom", func(i int) string { return fmt.Sprint(i) })
		waitDead(t, c, "big-dlq", 1001)
		b.open("/ui/queues/big-dlq/dead")
		b.waitText("#page-range", "of 1,001")
		for pages := 1; ; pages++ {
			require.Less(t, pages, 100)
			b.run(chromedp.Click(`#sel-page`, chromedp.ByQuery))
			b.waitText("#bulk-count", "selected")
			if b.eval(`document.querySelector('a[rel=next]') ? 'more' : ''`) == "" {
				break
			}
			at := b.text("#page-range")
			b.run(chromedp.Click(`a[rel=next]`, chromedp.ByQuery))
			b.waitGone("#page-range", at)
		}
		b.waitText("#bulk-count", "1,001 items selected (")
		b.waitText("#bulk-over", "over the limit of 1,000 items an action takes by id")
		require.Equal(t, "true", b.eval(`String(document.getElementById('bulk-redrive').disabled && document.getElementById('bulk-delete').disabled)`))
		b.run(chromedp.Click(`#bulk-all`, chromedp.ByQuery))
		b.waitText("#bulk-count", "All 1,001 dead items selected.")
		b.run(chromedp.Click(`#bulk-delete`, chromedp.ByQuery))
		b.waitDialog("This will delete 1,001 items of big-dlq for good.")
		b.run(chromedp.Click(`#confirm-ok`, chromedp.ByQuery))
		b.waitText("#status", "Deleted 1,001 items.")
		waitDead(t, c, "big-dlq", 0)
		require.Equal(t, []string{"shop-ref-5"}, deadRefs(t, c, "ops-dlq"), "another dead-letter queue keeps its items")
	})
}

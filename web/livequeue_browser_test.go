package web_test

import (
	"context"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	pb "github.com/styxq/styx/styxpb"
	"github.com/styxq/styx/styxtest"
)

// TestBrowserPauseAndClear (issue 49, live queues): the queue page's Pause
// button pauses the queue after a confirmation, shows the paused banner,
// and a worker's lease gets nothing until Resume; the Clear dialog shows
// what each clear would remove before it removes anything.
func TestBrowserPauseAndClear(t *testing.T) {
	t.Parallel()
	srv := styxtest.Start(t, styxtest.Options{})
	c := srv.Client
	ctx := context.Background()
	styxtest.CreateQueue(t, c, &pb.QueueInfo{QueueName: "orders"})
	produce := func(payloads ...string) {
		req := &pb.QueueProduceRequest{QueueName: "orders", RequestTimeout: "10s"}
		for _, p := range payloads {
			req.Items = append(req.Items, &pb.QueueProduceItem{Bytes: []byte(p)})
		}
		require.NoError(t, c.QueueProduce(ctx, req))
	}
	produce("a", "b", "c")
	held, err := c.QueueLease(ctx, &pb.QueueLeaseRequest{QueueName: "orders", BatchSize: 1, ClientId: "worker", RequestTimeout: "5s"})
	require.NoError(t, err)
	require.Len(t, held.Items, 1)

	b := newBrowser(t, srv.Endpoint)
	b.open("/ui/queues/orders")
	b.waitText("#pause-button", "Pause consumption")
	b.run(chromedp.Click(`#pause-button`, chromedp.ByQuery))
	b.waitDialog("Leases of orders will get nothing until you resume it")
	b.run(chromedp.Click(`#confirm-ok`, chromedp.ByQuery))
	b.waitText("#paused-banner", "Consumption is paused")
	b.waitText("#pause-button", "Resume consumption")
	info, err := c.QueuesInfo(ctx, &pb.QueuesInfoRequest{QueueName: "orders"})
	require.NoError(t, err)
	require.True(t, info.Paused, "the button paused the queue")
	lctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = c.QueueLease(lctx, &pb.QueueLeaseRequest{QueueName: "orders", BatchSize: 1, ClientId: "worker", RequestTimeout: "10s"})
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded, "a paused queue hands nothing out")
	b.screenshot("queue-paused")
	// The overview marks it, so that its depth is not read as stuck
	// consumers.
	b.open("/ui/")
	b.waitText("#paused-orders", "paused")
	b.open("/ui/queues/orders")
	b.waitText("#pause-button", "Resume consumption")

	// The Clear dialog counts first; Cancel removes nothing.
	b.run(chromedp.Click(`#clear-button`, chromedp.ByQuery))
	b.waitDialog("Choose what to remove")
	require.Equal(t, "2 items", b.text(`[data-clear="ready"]`))
	require.Equal(t, "0 items", b.text(`[data-clear="scheduled"]`))
	require.Equal(t, "3 items", b.text(`[data-clear="all"]`))
	require.Contains(t, b.text("#confirm-dialog"), "(2 ready, 1 leased)")
	b.run(chromedp.Click(`#confirm-dialog button[value=cancel]`, chromedp.ByQuery))
	st, err := c.QueueClearDryRun(ctx, &pb.QueueClearRequest{QueueName: "orders", Destructive: true})
	require.NoError(t, err)
	require.EqualValues(t, 3, st.Total, "Cancel removed nothing")
	// OK clears the ready items (the default choice); the leased one stays.
	// The click waits until the cancelled flow is over (the dialog closed,
	// the button enabled again: a click on a busy button does nothing).
	b.run(chromedp.Poll(`!document.getElementById('confirm-dialog').open && !document.getElementById('clear-button').disabled`, nil,
		chromedp.WithPollingInterval(20*time.Millisecond)))
	b.run(chromedp.Click(`#clear-button`, chromedp.ByQuery))
	b.waitDialog("Choose what to remove")
	b.run(chromedp.Click(`#confirm-ok`, chromedp.ByQuery))
	b.waitText("#status", "Cleared ready items of orders.")
	// The page redraws after the clear (the Ready card reads 0): the
	// action is over, so the next click is taken.
	b.run(chromedp.Poll(`[...document.querySelectorAll('main .card')].some((c) => c.innerText.replace(/\s+/g, ' ').trim() === 'Ready 0')`, nil,
		chromedp.WithPollingInterval(20*time.Millisecond)))
	st, err = c.QueueClearDryRun(ctx, &pb.QueueClearRequest{QueueName: "orders", Destructive: true})
	require.NoError(t, err)
	require.Equal(t, [2]int64{1, 1}, [2]int64{st.Total, st.Leased}, "the ready items went, the leased one stayed")

	// Resume: a waiting lease gets the next item.
	produce("d")
	got := make(chan *pb.QueueLeaseResponse, 1)
	go func() {
		res, err := c.QueueLease(ctx, &pb.QueueLeaseRequest{QueueName: "orders", BatchSize: 1, ClientId: "waiter", RequestTimeout: "10s"})
		if err != nil {
			res = nil
		}
		got <- res
	}()
	b.run(chromedp.Click(`#pause-button`, chromedp.ByQuery))
	b.waitDialog("get its items again")
	b.run(chromedp.Click(`#confirm-ok`, chromedp.ByQuery))
	b.waitGone("main", "Consumption is paused")
	res := <-got
	require.NotNil(t, res, "the waiting lease was served after the resume")
	require.Len(t, res.Items, 1)
	require.Equal(t, "d", string(res.Items[0].Bytes))
}

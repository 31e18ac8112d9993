package web_test

import (
	"context"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	pb "github.com/styxq/styx/styxpb"
	"github.com/styxq/styx/styxtest"
)

// TestBrowserLiveQueues (issue 39, point 4): live queues are not opaque.
// The queue page shows its consumers (client id, leases held and their
// items, last seen); the overview shows each queue's produced, completed
// and dead-lettered items of the last minutes and a ready count and a
// depth chart that leave out the dead items a dead-letter queue holds; an
// item of a live queue opens read-only, with its state, the consumer that
// holds it, attempts, kind, reference and its payload as text.
func TestBrowserLiveQueues(t *testing.T) {
	t.Parallel()
	srv := styxtest.Start(t, styxtest.Options{})
	c := srv.Client
	ctx := context.Background()
	styxtest.CreateQueue(t, c, &pb.QueueInfo{QueueName: "jobs-dlq"})
	styxtest.CreateQueue(t, c, &pb.QueueInfo{QueueName: "jobs", DeadQueue: "jobs-dlq", LeaseTimeout: "10m"})
	items := []*pb.QueueProduceItem{{Utf8: `<img src=x onerror="document.title='pwned'">`, Kind: "mail.send", Reference: "order-1"}}
	for _, p := range []string{"b", "c", "d", "e", "f"} {
		items = append(items, &pb.QueueProduceItem{Utf8: p, Kind: "mail.send"})
	}
	require.NoError(t, c.QueueProduce(ctx, &pb.QueueProduceRequest{QueueName: "jobs", RequestTimeout: "10s", Items: items}))
	lease := func(client string) *pb.QueueLeaseResponse {
		res, err := c.QueueLease(ctx, &pb.QueueLeaseRequest{QueueName: "jobs", BatchSize: 2, ClientId: client, RequestTimeout: "5s"})
		require.NoError(t, err)
		require.Len(t, res.Items, 2)
		return res
	}
	a := lease("worker-a") // the oldest two: the <img> payload among them
	b := lease("worker-b")
	require.NoError(t, c.QueueComplete(ctx, &pb.QueueCompleteRequest{QueueName: "jobs", Partition: a.Partition, Ids: []string{a.Items[1].Id}, RequestTimeout: "5s"}))
	_, err := c.QueueRetry(ctx, &pb.QueueRetryRequest{QueueName: "jobs", Partition: b.Partition, Items: []*pb.QueueRetryItem{{Id: b.Items[0].Id, Dead: true, Error: "bounced"}}})
	require.NoError(t, err)
	waitDead(t, c, "jobs-dlq", 1)
	// jobs: 2 ready, 2 leased (one each); jobs-dlq: 1 dead item held.
	br := newBrowser(t, srv.Endpoint)

	t.Run("Overview", func(t *testing.T) {
		br.t = t
		br.open("/ui/")
		br.waitText("main table", "jobs-dlq")
		require.Regexp(t, `^jobs \| 2 \| 2 \| 0 \| 1 \| – \| \d+s \| jobs-dlq \| 0 \| 6 \| 1 \| 1$`, br.rowText("jobs"),
			"2 ready, 2 leased, 1 dead; produced 6, completed 1, dead-lettered 1 in the last 5 minutes")
		require.Regexp(t, `^jobs-dlq \| – \| 0 \| 0 \| – \| 1 \| \d+s \| – \| 0 \| 0 \| 0 \| 0$`, br.rowText("jobs-dlq"),
			"the dead item is held, not ready")
		br.waitText("#chart-depth", "depth 4 now") // jobs' 4, not the dead item jobs-dlq holds
		require.Contains(t, br.text("#chart-depth"), "live queues")
	})

	t.Run("Consumers", func(t *testing.T) {
		br.t = t
		br.open("/ui/queues/jobs")
		br.waitText("h2#consumers + table", "worker-a")
		rows := br.eval(`[...document.querySelectorAll('h2#consumers + table tbody tr')].map((r) => [...r.cells].map((c) => c.innerText.trim()).join(' | ')).join('\n')`)
		lines := strings.Split(rows, "\n")
		require.Len(t, lines, 2, rows)
		require.Regexp(t, `^worker-b \| – \| 1 \| 2 \| (just now|\d+s ago) \| (just now|\d+s ago) \| `+b.Items[1].Id+`$`, lines[0], "most recently seen first")
		require.Regexp(t, `^worker-a \| – \| 1 \| 2 \| (just now|\d+s ago) \| (just now|\d+s ago) \| `+a.Items[0].Id+`$`, lines[1])
	})

	t.Run("LiveItem", func(t *testing.T) {
		br.t = t
		br.open("/ui/queues/jobs")
		br.waitText("h2#consumers + table", "worker-a")
		// The held item's link opens it.
		br.run(chromedp.Click(`h2#consumers + table a[href$="/items/`+a.Items[0].Id+`"]`, chromedp.ByQuery))
		br.waitText("h1", "Item "+a.Items[0].Id)
		props := br.text("#item-props")
		require.Contains(t, props, "leased until")
		require.Contains(t, props, "by consumer worker-a")
		require.Contains(t, props, "Attempts\n1")
		require.Contains(t, props, "mail.send")
		require.Contains(t, props, "order-1")
		require.Equal(t, `<img src=x onerror="document.title='pwned'">`, br.text(`pre[aria-label="Payload (text)"]`), "the payload is text")
		require.Equal(t, "0", br.eval(`String(document.querySelectorAll('main img').length)`), "never markup")
		require.Equal(t, "0", br.eval(`String(document.querySelectorAll('main button').length)`), "read-only: no actions")
		require.Contains(t, br.text("main"), "Read-only")
		br.screenshot("live-item")

		// From the items list: a ready item.
		br.open("/ui/queues/jobs/items")
		// The last item listed: "f", never leased.
		br.run(chromedp.Click(`main tbody tr:last-child th a`, chromedp.ByQuery))
		br.waitText("h1", "Item ")
		require.Contains(t, br.text("#item-props"), "ready")
		require.Contains(t, br.text(`pre[aria-label="Payload (text)"]`), "f")
	})
}

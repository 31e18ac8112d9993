package web_test

import (
	"context"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/daemon"
	pb "github.com/styxq/styx/styxpb"
	"github.com/styxq/styx/styxtest"
)

// TestBrowserFirstIDAndLeaseHolder (issue 49, points 3 and 4): a dead item
// whose DLQ lease ended has a new id, but its page opens by the id it had
// when it died (its first id), which the dead items list links by; and
// after a restart, the item page of a held lease names its consumer (it said
// "consumer not known").
func TestBrowserFirstIDAndLeaseHolder(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	opts := styxtest.Options{Storage: daemon.StoragePebble, Configure: func(cfg *daemon.Config) { cfg.DataDir = dir }}
	srv := styxtest.Start(t, opts)
	c := srv.Client
	ctx := context.Background()
	styxtest.CreateQueue(t, c, &pb.QueueInfo{QueueName: "jobs-dlq"})
	styxtest.CreateQueue(t, c, &pb.QueueInfo{QueueName: "jobs", DeadQueue: "jobs-dlq"})
	require.NoError(t, c.QueueProduce(ctx, &pb.QueueProduceRequest{QueueName: "jobs", RequestTimeout: "10s",
		Items: []*pb.QueueProduceItem{{Utf8: "order 7", Reference: "order-7"}}}))
	lease := func(queue, client string) *pb.QueueLeaseResponse {
		res, err := c.QueueLease(ctx, &pb.QueueLeaseRequest{QueueName: queue, BatchSize: 1, ClientId: client, RequestTimeout: "5s"})
		require.NoError(t, err)
		require.Len(t, res.Items, 1)
		return res
	}
	l := lease("jobs", "worker")
	_, err := c.QueueRetry(ctx, &pb.QueueRetryRequest{QueueName: "jobs", Partition: l.Partition,
		Items: []*pb.QueueRetryItem{{Id: l.Items[0].Id, Dead: true, Error: "bounced"}}})
	require.NoError(t, err)
	waitDead(t, c, "jobs-dlq", 1)
	dead, err := c.DeadList(ctx, &pb.DeadListRequest{QueueName: "jobs-dlq", Limit: 10})
	require.NoError(t, err)
	first := dead.Items[0].Id

	// A DLQ lease of it ends (retried): its id changes. Leased again by
	// holder-1, and the server restarts.
	l = lease("jobs-dlq", "inspector")
	_, err = c.QueueRetry(ctx, &pb.QueueRetryRequest{QueueName: "jobs-dlq", Partition: l.Partition,
		Items: []*pb.QueueRetryItem{{Id: l.Items[0].Id, Error: "looked"}}})
	require.NoError(t, err)
	l = lease("jobs-dlq", "holder-1")
	require.NotEqual(t, first, l.Items[0].Id)
	require.Equal(t, first, l.Items[0].FirstId)
	require.NoError(t, srv.Close())
	srv = styxtest.Start(t, opts)
	br := newBrowser(t, srv.Endpoint)

	br.open("/ui/queues/jobs-dlq/dead/" + first)
	br.waitText("h1", "Dead item "+first)
	require.Contains(t, br.text("main"), "order 7")
	require.NotContains(t, br.text("main"), "No item")

	br.open("/ui/queues/jobs-dlq/dead")
	br.run(chromedp.WaitVisible(`main tbody a[href$="/dead/`+first+`"]`, chromedp.ByQuery))

	br.open("/ui/queues/jobs-dlq/items/" + first)
	br.waitText("h1", "Item "+first)
	props := br.text("#item-props")
	require.Contains(t, props, "leased until")
	require.Contains(t, props, "by consumer holder-1")
}

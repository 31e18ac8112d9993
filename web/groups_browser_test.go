package web_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	pb "github.com/styxq/styx/styxpb"
	"github.com/styxq/styx/styxtest"
)

// TestBrowserHeldGroups (issue 37): an ordered queue's page says it is
// ordered and what a dead item does to its group, and lists the groups held
// by their dead item (group_dead_policy hold) with the dead item and since
// when; an item's page shows its group. Redriving the dead item releases
// the group, and the page says so once it refreshes.
func TestBrowserHeldGroups(t *testing.T) {
	t.Parallel()
	srv := styxtest.Start(t, styxtest.Options{})
	c := srv.Client
	ctx := context.Background()
	styxtest.CreateQueue(t, c, &pb.QueueInfo{QueueName: "orders-dlq"})
	styxtest.CreateQueue(t, c, &pb.QueueInfo{QueueName: "orders", DeadQueue: "orders-dlq", LeaseTimeout: "10m", Ordered: true, GroupDeadPolicy: "hold"})
	require.NoError(t, c.QueueProduce(ctx, &pb.QueueProduceRequest{QueueName: "orders", RequestTimeout: "10s", Items: []*pb.QueueProduceItem{
		{Utf8: `{"event":"created"}`, Group: "customer-42"}, {Utf8: `{"event":"paid"}`, Group: "customer-42"},
		{Utf8: `{"event":"created"}`, Group: "customer-7"}}}))
	res, err := c.QueueLease(ctx, &pb.QueueLeaseRequest{QueueName: "orders", BatchSize: 1, ClientId: "worker", RequestTimeout: "5s"})
	require.NoError(t, err)
	require.Equal(t, "customer-42", res.Items[0].Group)
	_, err = c.QueueRetry(ctx, &pb.QueueRetryRequest{QueueName: "orders", Partition: res.Partition,
		Items: []*pb.QueueRetryItem{{Id: res.Items[0].Id, Dead: true, Error: "card declined"}}})
	require.NoError(t, err)
	waitDead(t, c, "orders-dlq", 1)
	br := newBrowser(t, srv.Endpoint)

	br.open("/ui/queues/orders")
	br.waitText("#held-groups", "customer-42")
	held := br.text("#held-groups")
	require.Contains(t, held, "1 group waits for a dead item")
	require.Contains(t, held, "redriven (it goes first) or deleted from orders-dlq")
	require.Regexp(t, `customer-42\s+0\s+explicit:orders~\w+\s+(just now|\d+s ago)`, held)
	require.Contains(t, br.text("main dl.props"), "Ordered groups\nyes")
	require.Contains(t, br.text("main dl.props"), "holds its group until redriven or deleted")
	br.screenshot("held-groups")

	// The dead item's page shows its group.
	dead, err := c.DeadList(ctx, &pb.DeadListRequest{QueueName: "orders-dlq"})
	require.NoError(t, err)
	require.Len(t, dead.Items, 1)
	require.Equal(t, "customer-42", dead.Items[0].Group)
	br.open("/ui/queues/orders-dlq/dead/" + dead.Items[0].Id)
	br.waitText("main", "customer-42")

	// Redriven: the group is released.
	_, err = c.DeadRedrive(ctx, &pb.DeadRedriveRequest{QueueName: "orders-dlq", All: true})
	require.NoError(t, err)
	br.open("/ui/queues/orders")
	br.waitText("h2#consumers", "Consumers")
	br.waitGone("main", "Held groups")
}

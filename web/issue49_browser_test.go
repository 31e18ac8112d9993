package web_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	pb "github.com/styxq/styx/styxpb"
	"github.com/styxq/styx/styxtest"
)

// TestBrowserTruths49 (issue 49, 6 and 8): a dead-letter queue no queue
// names any more still shows its dead items as held, not ready, and its
// page offers them; a filter the error groups cannot follow (a reference)
// says the groups are not narrowed by it; a payload edit reads as an edit
// in the item's history, not "Attempt 1"; a consumer's client id stays on
// one line.
func TestBrowserTruths49(t *testing.T) {
	t.Parallel()
	srv := styxtest.Start(t, styxtest.Options{})
	c := srv.Client
	ctx := context.Background()
	for _, q := range []*pb.QueueInfo{{QueueName: "t49-dlq"}, {QueueName: "t49", DeadQueue: "t49-dlq"}} {
		require.NoError(t, c.QueuesCreate(ctx, q))
	}
	require.NoError(t, c.QueueProduce(ctx, &pb.QueueProduceRequest{QueueName: "t49", RequestTimeout: "5s",
		Items: []*pb.QueueProduceItem{{Reference: "bill-5", Utf8: "a"}, {Reference: "bill-6", Utf8: "b"}}}))
	res, err := c.QueueLease(ctx, &pb.QueueLeaseRequest{QueueName: "t49", BatchSize: 2, RequestTimeout: "5s", ClientId: "worker-on-host-a-with-a-long-name-7"})
	require.NoError(t, err)
	require.Len(t, res.Items, 2)
	_, err = c.QueueRetry(ctx, &pb.QueueRetryRequest{QueueName: "t49", Partition: res.Partition, Items: []*pb.QueueRetryItem{
		{Id: res.Items[0].Id, Dead: true, Error: "order 5 not found"}, {Id: res.Items[1].Id, Dead: true, Error: "order 6 not found"}}})
	require.NoError(t, err)
	waitDead(t, c, "t49-dlq", 2)
	list, err := c.DeadList(ctx, &pb.DeadListRequest{QueueName: "t49-dlq"})
	require.NoError(t, err)
	edited := list.Items[0].Id
	_, err = c.DeadEdit(ctx, &pb.DeadEditRequest{QueueName: "t49-dlq", Id: edited, Payload: []byte("fixed")})
	require.NoError(t, err)
	// A consumer of its own, with a long client id, on another queue.
	require.NoError(t, c.QueuesCreate(ctx, &pb.QueueInfo{QueueName: "t49-work"}))
	require.NoError(t, c.QueueProduce(ctx, &pb.QueueProduceRequest{QueueName: "t49-work", RequestTimeout: "5s", Items: []*pb.QueueProduceItem{{Utf8: "w"}}}))
	_, err = c.QueueLease(ctx, &pb.QueueLeaseRequest{QueueName: "t49-work", BatchSize: 1, RequestTimeout: "5s", ClientId: "worker-on-host-a-with-a-long-name-7"})
	require.NoError(t, err)
	// The retirement step: no queue names t49-dlq now.
	require.NoError(t, c.QueuesUpdate(ctx, &pb.QueueInfo{QueueName: "t49", UpdateMask: []string{"dead_queue"}}))
	b := newBrowser(t, srv.Endpoint)

	t.Run("OrphanedDLQHoldsItsDeadItems", func(t *testing.T) {
		b.t = t
		b.open("/ui/")
		b.waitText("main table", "t49-dlq")
		row := b.rowText("t49-dlq")
		require.Regexp(t, `^t49-dlq \| – \| 0 \| 0 \| – \| 2 \|`, row, "not ready: held (Ready, Leased, Scheduled, Dead, Dead held)")
		b.open("/ui/queues/t49-dlq")
		b.waitText("main", "Dead items held")
		require.Contains(t, b.text("main"), "Dead items held by t49-dlq")
		b.open("/ui/queues/t49-dlq/dead")
		b.waitText("main", "2 dead items in 1 group")
	})

	t.Run("GroupsSayTheyAreNotFiltered", func(t *testing.T) {
		b.t = t
		b.open("/ui/queues/t49-dlq/dead?reference=bill-404")
		b.waitText("#groups-unfiltered", "not narrowed by the filter's reference")
		b.open("/ui/queues/t49-dlq/dead?reason=explicit")
		b.waitText("main", "2 dead items in 1 group")
		require.Equal(t, "none", b.eval(`document.querySelector('#groups-unfiltered') ? 'shown' : 'none'`), "a filter the groups follow: no note")
	})

	t.Run("EditIsNoAttempt", func(t *testing.T) {
		b.t = t
		b.open("/ui/queues/t49-dlq/dead/" + edited)
		b.waitText("ol.timeline", "payload edited by")
		entries := b.eval(`[...document.querySelectorAll('ol.timeline li .when')].map((w) => w.innerText.split(' · ')[0]).join(',')`)
		require.Equal(t, "Attempt 1,Payload edit", entries)
	})

	t.Run("ClientIDOnOneLine", func(t *testing.T) {
		b.t = t
		b.open("/ui/queues/t49-work")
		b.waitText("main", "worker-on-host-a-with-a-long-name-7")
		require.Equal(t, "nowrap", b.eval(`getComputedStyle(document.querySelector('th.client-id code')).whiteSpace`))
	})
}

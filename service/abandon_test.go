package service_test

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/servertest"
	"github.com/styxq/styx/internal/store"
	pb "github.com/styxq/styx/styxpb"
)

// TestAbandonedLeaseGivesItsItemsBack: a lease whose client goes away
// after the queue leased it items, but before the answer reached it (here:
// while the lease's write is held), gives them back: the next lease gets
// them at once with the abandoned attempt not counted. Before, they stayed
// leased to nobody until their lease deadline (issue 48's fault review:
// TestGroupsTwoNodesOrdered lost minutes to it). The embedded backends'
// item log lets the test hold the write; PostgreSQL runs the same engine
// code.
func TestAbandonedLeaseGivesItsItemsBack(t *testing.T) {
	t.Parallel()
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		servertest.RequireItemLog(t, b)
		s := servertest.Start(t, b)
		require.NoError(t, s.C.QueuesCreate(ctx, &pb.QueueInfo{QueueName: "q", LeaseTimeout: "10m", RequestedPartitions: 1}))
		require.NoError(t, s.C.QueueProduce(ctx, &pb.QueueProduceRequest{QueueName: "q", RequestTimeout: "1m",
			Items: []*pb.QueueProduceItem{{Utf8: "only one"}}}))

		entered, release := make(chan struct{}), make(chan struct{})
		var once sync.Once
		s.Faults.SetWriteHook(func(*store.Batch) error {
			once.Do(func() { close(entered) })
			<-release
			return nil
		})
		lctx, cancel := context.WithCancel(ctx)
		leased := make(chan error, 1)
		go func() {
			_, err := s.C.QueueLease(lctx, &pb.QueueLeaseRequest{QueueName: "q", BatchSize: 1, ClientId: "gone", RequestTimeout: "1m"})
			leased <- err
		}()
		<-entered // the queue is writing the lease of the item
		cancel()
		require.Error(t, <-leased)
		// The server's call returns once it sees the client gone: it
		// answers 499, counted when the handler ends.
		servertest.Eventually(t, func() bool {
			return metricLine(scrape(s), `styx_http_requests_total{code="499",path="/v1/queue.lease"}`) != ""
		}, "the server's lease call ended")
		s.Faults.SetWriteHook(nil)
		close(release)

		res, err := s.C.QueueLease(ctx, &pb.QueueLeaseRequest{QueueName: "q", BatchSize: 1, ClientId: "next", RequestTimeout: "20s"})
		require.NoError(t, err, "the item is given back at once, not at its lease deadline (10m)")
		require.Len(t, res.Items, 1)
		require.Equal(t, "only one", string(res.Items[0].Bytes))
		require.EqualValues(t, 1, res.Items[0].Attempts, "the abandoned lease's attempt is not counted")
	})
}

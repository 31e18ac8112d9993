package service_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/servertest"
	pb "github.com/styxq/styx/styxpb"
)

// consumers returns queue.stats' consumers of queue, by client id.
func consumers(s *servertest.Server, queue string) map[string]*pb.QueueConsumer {
	s.T.Helper()
	st, err := s.C.QueueStats(ctx, &pb.QueueStatsRequest{QueueName: queue})
	require.NoError(s.T, err)
	out := map[string]*pb.QueueConsumer{}
	for _, c := range st.Consumers {
		out[c.ClientId] = c
	}
	return out
}

// leasedIDs returns the ids of a lease's items.
func leasedIDs(res *pb.QueueLeaseResponse) []string {
	var out []string
	for _, it := range res.Items {
		out = append(out, it.Id)
	}
	return out
}

// TestConsumers: queue.stats lists who consumes a queue (issue 39, point
// 4): two consumers with different client ids lease; each is listed with
// the items it took, the leases it holds (and their ids) and when it was
// last seen; a complete and an expiry end leases; once they hold none and
// the consumer window passes, they age out.
func TestConsumers(t *testing.T) {
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.StartFake(t, b)
		s.CreateQueue(&pb.QueueInfo{QueueName: "cq", LeaseTimeout: "1m"})
		s.Produce("cq", "a", "b", "c", "d")
		require.Empty(t, consumers(s, "cq"), "no consumer before any lease")

		a := leaseAs(s, t, "cq", "worker-a", 2)
		seenA := s.Now()
		s.Advance(10 * time.Second)
		bl := leaseAs(s, t, "cq", "worker-b", 1)
		require.Len(t, a.Items, 2)
		require.Len(t, bl.Items, 1)

		cs := consumers(s, "cq")
		require.Len(t, cs, 2, "both consumers listed: %v", cs)
		ca, cb := cs["worker-a"], cs["worker-b"]
		require.EqualValues(t, 2, ca.Held)
		require.EqualValues(t, 2, ca.Leased)
		require.ElementsMatch(t, leasedIDs(a), ca.HeldIds)
		require.WithinDuration(t, seenA, ca.LastSeenAt.AsTime(), time.Second)
		require.EqualValues(t, 1, cb.Held)
		require.Equal(t, leasedIDs(bl), cb.HeldIds)
		require.WithinDuration(t, s.Now(), cb.LastSeenAt.AsTime(), time.Second)
		st, err := s.C.QueueStats(ctx, &pb.QueueStatsRequest{QueueName: "cq"})
		require.NoError(t, err)
		require.Equal(t, "worker-b", st.Consumers[0].ClientId, "most recently seen first")

		// A complete ends one of a's leases.
		s.Complete("cq", a.Partition, a.Items[0].Id)
		cs = consumers(s, "cq")
		require.EqualValues(t, 1, cs["worker-a"].Held)
		require.Equal(t, []string{a.Items[1].Id}, cs["worker-a"].HeldIds)
		require.EqualValues(t, 2, cs["worker-a"].Leased, "leased counts what it took")

		// The leases expire: no lease held, still listed within the window.
		s.Advance(2*time.Minute, "cq")
		cs = consumers(s, "cq")
		require.Len(t, cs, 2)
		require.Zero(t, cs["worker-a"].Held)
		require.Zero(t, cs["worker-b"].Held)

		// The window passes: they age out.
		s.Advance(5 * time.Minute)
		require.Empty(t, consumers(s, "cq"))
	})
}

// TestClusterConsumers: on PostgreSQL two nodes serve one queue's leases,
// and each node's queue.stats lists both consumers with the leases they
// hold; a complete through the other node ends a lease on both views.
func TestClusterConsumers(t *testing.T) {
	t.Parallel()
	nodes := cluster(t, 2)
	nodes[0].CreateQueue(&pb.QueueInfo{QueueName: "cc", LeaseTimeout: "5m"})
	nodes[0].Produce("cc", "a", "b", "c")
	a := leaseAs(nodes[0], t, "cc", "worker-a", 2)
	b := leaseAs(nodes[1], t, "cc", "worker-b", 1)
	require.Len(t, a.Items, 2)
	require.Len(t, b.Items, 1)
	held := func(n *servertest.Server) map[string]int32 {
		out := map[string]int32{}
		for id, c := range consumers(n, "cc") {
			out[id] = c.Held
		}
		return out
	}
	want := map[string]int32{"worker-a": 2, "worker-b": 1}
	for i, n := range nodes {
		servertest.Eventually(t, func() bool { return len(held(n)) == 2 && held(n)["worker-a"] == 2 && held(n)["worker-b"] == 1 },
			"node %d lists both consumers %v: %v", i, want, held(n))
	}
	// worker-a completes one item through node 1: node 0 dealt it.
	nodes[1].Complete("cc", a.Partition, a.Items[0].Id)
	for i, n := range nodes {
		servertest.Eventually(t, func() bool { return held(n)["worker-a"] == 1 }, "node %d: worker-a holds 1: %v", i, held(n))
	}
	c := consumers(nodes[1], "cc")["worker-a"]
	require.Equal(t, []string{a.Items[1].Id}, c.HeldIds)
	// What a consumer took comes from the records node 0 writes each
	// RefreshInterval (its held leases from the items' rows at once).
	servertest.Eventually(t, func() bool { return consumers(nodes[1], "cc")["worker-a"].Leased == 2 },
		"node 1: worker-a leased 2: %v", consumers(nodes[1], "cc")["worker-a"])
}

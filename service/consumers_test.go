package service_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	pb "github.com/styxq/styx/styxpb"
)

// consumers returns queue.stats' consumers of queue, by client id.
func (s *server) consumers(queue string) map[string]*pb.QueueConsumer {
	s.t.Helper()
	st, err := s.C.QueueStats(ctx, &pb.QueueStatsRequest{QueueName: queue})
	require.NoError(s.t, err)
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
	forEachBackend(t, func(t *testing.T, b backend) {
		s := startFake(t, b)
		s.createQueue(&pb.QueueInfo{QueueName: "cq", LeaseTimeout: "1m"})
		s.produce("cq", "a", "b", "c", "d")
		require.Empty(t, s.consumers("cq"), "no consumer before any lease")

		a := s.leaseAs(t, "cq", "worker-a", 2)
		seenA := s.now()
		s.advance(10 * time.Second)
		bl := s.leaseAs(t, "cq", "worker-b", 1)
		require.Len(t, a.Items, 2)
		require.Len(t, bl.Items, 1)

		cs := s.consumers("cq")
		require.Len(t, cs, 2, "both consumers listed: %v", cs)
		ca, cb := cs["worker-a"], cs["worker-b"]
		require.EqualValues(t, 2, ca.Held)
		require.EqualValues(t, 2, ca.Leased)
		require.ElementsMatch(t, leasedIDs(a), ca.HeldIds)
		require.WithinDuration(t, seenA, ca.LastSeenAt.AsTime(), time.Second)
		require.EqualValues(t, 1, cb.Held)
		require.Equal(t, leasedIDs(bl), cb.HeldIds)
		require.WithinDuration(t, s.now(), cb.LastSeenAt.AsTime(), time.Second)
		st, err := s.C.QueueStats(ctx, &pb.QueueStatsRequest{QueueName: "cq"})
		require.NoError(t, err)
		require.Equal(t, "worker-b", st.Consumers[0].ClientId, "most recently seen first")

		// A complete ends one of a's leases.
		s.complete("cq", a.Partition, a.Items[0].Id)
		cs = s.consumers("cq")
		require.EqualValues(t, 1, cs["worker-a"].Held)
		require.Equal(t, []string{a.Items[1].Id}, cs["worker-a"].HeldIds)
		require.EqualValues(t, 2, cs["worker-a"].Leased, "leased counts what it took")

		// The leases expire: no lease held, still listed within the window.
		s.advance(2*time.Minute, "cq")
		cs = s.consumers("cq")
		require.Len(t, cs, 2)
		require.Zero(t, cs["worker-a"].Held)
		require.Zero(t, cs["worker-b"].Held)

		// The window passes: they age out.
		s.advance(5 * time.Minute)
		require.Empty(t, s.consumers("cq"))
	})
}

// TestClusterConsumers: on PostgreSQL two nodes serve one queue's leases,
// and each node's queue.stats lists both consumers with the leases they
// hold; a complete through the other node ends a lease on both views.
func TestClusterConsumers(t *testing.T) {
	t.Parallel()
	nodes := cluster(t, 2)
	nodes[0].createQueue(&pb.QueueInfo{QueueName: "cc", LeaseTimeout: "5m"})
	nodes[0].produce("cc", "a", "b", "c")
	a := nodes[0].leaseAs(t, "cc", "worker-a", 2)
	b := nodes[1].leaseAs(t, "cc", "worker-b", 1)
	require.Len(t, a.Items, 2)
	require.Len(t, b.Items, 1)
	held := func(n *server) map[string]int32 {
		out := map[string]int32{}
		for id, c := range n.consumers("cc") {
			out[id] = c.Held
		}
		return out
	}
	want := map[string]int32{"worker-a": 2, "worker-b": 1}
	for i, n := range nodes {
		eventually(t, func() bool { return len(held(n)) == 2 && held(n)["worker-a"] == 2 && held(n)["worker-b"] == 1 },
			"node %d lists both consumers %v: %v", i, want, held(n))
	}
	// worker-a completes one item through node 1: node 0 dealt it.
	nodes[1].complete("cc", a.Partition, a.Items[0].Id)
	for i, n := range nodes {
		eventually(t, func() bool { return held(n)["worker-a"] == 1 }, "node %d: worker-a holds 1: %v", i, held(n))
	}
	c := nodes[1].consumers("cc")["worker-a"]
	require.Equal(t, []string{a.Items[1].Id}, c.HeldIds)
	require.EqualValues(t, 2, c.Leased)
}

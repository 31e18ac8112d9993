package service_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/servertest"
	pb "github.com/styxq/styx/styxpb"
)

// leaseHolders returns each leased item's stored consumer
// (lease_client_id) of queue, by the item's first id.
func leaseHolders(t *testing.T, s *servertest.Server, queue string) map[string]string {
	t.Helper()
	res, err := s.C.StorageItemsList(ctx, &pb.StorageItemsListRequest{QueueName: queue, Limit: 100})
	require.NoError(t, err)
	out := map[string]string{}
	for _, it := range res.Items {
		if it.IsLeased {
			out[it.FirstId] = it.LeaseClientId
		}
	}
	return out
}

// TestConsumersSurviveRestart (issue 49, point 4): the consumer of a lease
// is stored with it, so after a restart queue.stats still lists the
// consumer with the leases it holds and storage/items.list shows each
// lease's consumer (memory and Pebble: the item's state record; PostgreSQL:
// its row), and a renewal keeps it.
func TestConsumersSurviveRestart(t *testing.T) {
	t.Parallel()
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.Start(t, b)
		s.CreateQueue(&pb.QueueInfo{QueueName: "rq", LeaseTimeout: "1h"})
		s.Produce("rq", "a", "b", "c")
		a := leaseAs(s, t, "rq", "worker-a", 2)
		require.Len(t, a.Items, 2)
		ids := leasedIDs(a)
		want := map[string]string{ids[0]: "worker-a", ids[1]: "worker-a"}
		require.Equal(t, want, leaseHolders(t, s, "rq"))

		s.Restart()
		cs := consumers(s, "rq")
		require.Contains(t, cs, "worker-a", "the consumer of the held leases is known after the restart")
		require.EqualValues(t, 2, cs["worker-a"].Held)
		require.ElementsMatch(t, ids, cs["worker-a"].HeldIds)
		require.Equal(t, want, leaseHolders(t, s, "rq"))

		// A renewal after the restart keeps the holder; so does a second
		// restart.
		_, err := s.C.QueueRenew(ctx, &pb.QueueRenewRequest{QueueName: "rq", Partition: a.Partition, Ids: ids[:1]})
		require.NoError(t, err)
		s.Restart()
		require.Equal(t, want, leaseHolders(t, s, "rq"))
		require.EqualValues(t, 2, consumers(s, "rq")["worker-a"].Held)

		// Completed, the lease leaves its consumer.
		s.Complete("rq", a.Partition, ids[0])
		require.EqualValues(t, 1, consumers(s, "rq")["worker-a"].Held)
	})
}

// TestClusterLeaseHoldersOnEveryNode (issue 49, point 4): on PostgreSQL a
// lease's consumer is in its row, so another node lists it at once (not
// only once the dealing node wrote its records), and after the dealing node
// stops and its records age out.
func TestClusterLeaseHoldersOnEveryNode(t *testing.T) {
	t.Parallel()
	nodes := cluster(t, 2)
	nodes[0].CreateQueue(&pb.QueueInfo{QueueName: "hc", LeaseTimeout: "1h"})
	nodes[0].Produce("hc", "a", "b", "c")
	a := leaseAs(nodes[0], t, "hc", "worker-a", 2)
	require.Len(t, a.Items, 2)
	ids := leasedIDs(a)
	// At once on the other node: from the rows, before any node's
	// consumers writer ran.
	c := consumers(nodes[1], "hc")["worker-a"]
	require.NotNil(t, c, "node 1 lists worker-a")
	require.EqualValues(t, 2, c.Held)
	require.ElementsMatch(t, ids, c.HeldIds)
	require.Equal(t, map[string]string{ids[0]: "worker-a", ids[1]: "worker-a"}, leaseHolders(t, nodes[1], "hc"))

	// Node 0 stops: its leases are still held by worker-a, on node 1.
	nodes[0].Stop()
	c = consumers(nodes[1], "hc")["worker-a"]
	require.NotNil(t, c)
	require.EqualValues(t, 2, c.Held)
	nodes[1].Complete("hc", a.Partition, ids[1])
	require.Equal(t, []string{ids[0]}, consumers(nodes[1], "hc")["worker-a"].HeldIds)
}

// TestFirstIDLookups (issue 49, point 3): a dead item whose DLQ lease ran out
// has a new id but keeps its first id, which every lookup by id takes over
// the wire: dead.list's ids (styx dead show), storage/items.list's ids,
// dead.edit, dead.delete; the lease's old id completes nothing.
func TestFirstIDLookups(t *testing.T) {
	t.Parallel()
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.StartFake(t, b)
		s.CreateQueue(&pb.QueueInfo{QueueName: "dlq"})
		s.CreateQueue(&pb.QueueInfo{QueueName: "src", DeadQueue: "dlq", LeaseTimeout: "1m"})
		s.Produce("src", "a", "b")
		for range 2 {
			l := s.Lease("src", 1)
			s.Retry("src", l.Partition, &pb.QueueRetryItem{Id: l.Items[0].Id, Dead: true, Error: "boom"})
		}
		dead := s.WaitItems("dlq", 2)
		first := dead[0].Id
		require.Equal(t, first, dead[0].FirstId)

		// A DLQ lease of it runs out: its id changes, its first id stays.
		l := s.Lease("dlq", 1)
		require.Equal(t, first, l.Items[0].Id)
		require.Empty(t, l.Items[0].FirstId, "a first lease leaves first_id out (it is id): Querator's fields only")
		s.Advance(2*time.Minute, "dlq")
		items := s.Items("dlq")
		require.Len(t, items, 2)
		require.Equal(t, "b", string(items[0].Payload), "a went to the tail")
		require.Equal(t, first, items[1].FirstId)
		require.NotEqual(t, first, items[1].Id)

		res, err := s.C.DeadList(ctx, &pb.DeadListRequest{QueueName: "dlq", Filter: &pb.DeadFilter{Ids: []string{first}}, Limit: 1})
		require.NoError(t, err)
		require.Len(t, res.Items, 1, "dead.list by the first id")
		require.Equal(t, "a", string(res.Items[0].Payload))
		byID, err := s.C.StorageItemsList(ctx, &pb.StorageItemsListRequest{QueueName: "dlq", Ids: []string{first}})
		require.NoError(t, err)
		require.Len(t, byID.Items, 1, "storage/items.list by the first id")
		require.Equal(t, items[1].Id, byID.Items[0].Id)
		edited, err := s.C.DeadEdit(ctx, &pb.DeadEditRequest{QueueName: "dlq", Id: first, Payload: []byte("fixed")})
		require.NoError(t, err)
		require.Equal(t, first, edited.FirstId)

		// The lease's id (the first id) completes nothing now.
		err = s.C.QueueComplete(ctx, &pb.QueueCompleteRequest{QueueName: "dlq", Partition: l.Partition, Ids: []string{first}})
		servertest.RequireCode(t, err, 400, "not leased")

		del, err := s.C.DeadDelete(ctx, &pb.DeadDeleteRequest{QueueName: "dlq", Filter: &pb.DeadFilter{Ids: []string{first}}})
		require.NoError(t, err)
		require.EqualValues(t, 1, del.Deleted)
		require.Len(t, s.Items("dlq"), 1)
	})
}

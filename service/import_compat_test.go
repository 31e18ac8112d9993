package service_test

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/servertest"
	pb "github.com/styxq/styx/styxpb"
)

// importItems imports items into one partition of queue and returns the
// reply's items.
func importItems(s *servertest.Server, queue string, partition int32, items ...*pb.StorageItem) []*pb.StorageItem {
	s.T.Helper()
	res, err := s.C.StorageItemsImport(ctx, &pb.StorageItemsImportRequest{QueueName: queue, Partition: partition, Items: items})
	require.NoError(s.T, err)
	require.Len(s.T, res.Items, len(items), "the reply has one entry per item of the request")
	return res.Items
}

// partitionItems lists the items of one partition.
func partitionItems(s *servertest.Server, queue string, partition int32) []*pb.StorageItem {
	s.T.Helper()
	res, err := s.C.StorageItemsList(ctx, &pb.StorageItemsListRequest{QueueName: queue, Partition: partition})
	require.NoError(s.T, err)
	return res.Items
}

// TestImportSourceIDIdempotent: storage/items.import skips an item whose
// source_id the partition already holds, without error, and keeps the first
// copy, within one request and across requests and restarts (Querator's
// partition stores skip such items in Add).
func TestImportSourceIDIdempotent(t *testing.T) {
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.Start(t, b)
		s.CreateQueue(&pb.QueueInfo{QueueName: "imp", RequestedPartitions: 2})
		src := func(id, payload string) *pb.StorageItem {
			return &pb.StorageItem{SourceId: id, Payload: []byte(payload), Kind: "k"}
		}

		t.Run("WithinOneRequestTheFirstWins", func(t *testing.T) {
			got := importItems(s, "imp", 0, src("s1", "first"), src("s1", "second"), src("", "no-id"), src("", "no-id"))
			assert.Equal(t, got[0].Id, got[1].Id, "the skipped item is answered with the one that holds its source_id")
			assert.Equal(t, "first", string(got[1].Payload))
			assert.Equal(t, "s1", got[1].SourceId)
			assert.NotEqual(t, got[2].Id, got[3].Id, "items without a source_id are never deduplicated")
			assert.Equal(t, []string{"first", "no-id", "no-id"}, payloads(partitionItems(s, "imp", 0)))
		})

		var first string
		t.Run("AcrossRequests", func(t *testing.T) {
			held := partitionItems(s, "imp", 0)[0]
			first = held.Id
			got := importItems(s, "imp", 0, src("s1", "third"), src("s2", "other"))
			assert.Equal(t, first, got[0].Id)
			assert.Equal(t, "first", string(got[0].Payload))
			assert.Equal(t, "s2", got[1].SourceId)
			assert.Equal(t, []string{"first", "no-id", "no-id", "other"}, payloads(partitionItems(s, "imp", 0)))
		})

		t.Run("PerPartition", func(t *testing.T) {
			got := importItems(s, "imp", 1, src("s1", "in-1"))
			assert.NotEqual(t, first, got[0].Id)
			assert.Equal(t, []string{"in-1"}, payloads(partitionItems(s, "imp", 1)))
		})

		t.Run("SurvivesRestart", func(t *testing.T) {
			s.Restart()
			got := importItems(s, "imp", 0, src("s1", "after-restart"), src("s2", "again"))
			assert.Equal(t, first, got[0].Id)
			assert.Equal(t, "first", string(got[0].Payload))
			assert.Equal(t, "other", string(got[1].Payload))
			assert.Len(t, partitionItems(s, "imp", 0), 4)
		})

		t.Run("HeldOnlyWhileTheItemExists", func(t *testing.T) {
			require.NoError(t, s.C.StorageItemsDelete(ctx, &pb.StorageItemsDeleteRequest{QueueName: "imp", Ids: []string{first}}))
			got := importItems(s, "imp", 0, src("s1", "new"))
			assert.NotEqual(t, first, got[0].Id)
			assert.Equal(t, "new", string(got[0].Payload))
			assert.Equal(t, []string{"no-id", "no-id", "other", "new"}, payloads(partitionItems(s, "imp", 0)))
		})
	})
}

// TestImportLeasedAndClear is Querator's QueueClear scenario (queue_test.go):
// 500 produced items and 2 imported leased ones; a clear with queue: true
// keeps exactly the 2 leased items, still leased, and they can be
// completed by their ids; destructive removes everything.
func TestImportLeasedAndClear(t *testing.T) {
	t.Parallel()
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.Start(t, b)
		s.CreateQueue(&pb.QueueInfo{QueueName: "clr", LeaseTimeout: "1m", ExpireTimeout: "10m"})
		produce := func(n int) {
			for i := 0; i < n; i += 100 {
				batch := make([]string, 0, 100)
				for j := i; j < min(i+100, n); j++ {
					batch = append(batch, fmt.Sprint("p", j))
				}
				s.Produce("clr", batch...)
			}
		}
		deadline := time.Now().Add(30 * time.Second).Truncate(time.Microsecond)
		leased := func(payload string, attempts int32) *pb.StorageItem {
			return &pb.StorageItem{IsLeased: true, LeaseDeadline: servertest.At(deadline), ExpireDeadline: servertest.At(deadline.Add(time.Minute)),
				Attempts: attempts, Kind: "k", Payload: []byte(payload)}
		}

		produce(500)
		got := importItems(s, "clr", 0, leased("leased 1", 3), leased("leased 2", 7))
		for i, it := range got {
			assert.True(t, it.IsLeased, "imported leased items stay leased")
			assert.True(t, deadline.Equal(it.LeaseDeadline.AsTime()), "lease_deadline as given: %s", it.LeaseDeadline.AsTime())
			assert.Equal(t, []int32{3, 7}[i], it.Attempts)
		}
		require.Len(t, s.Items("clr"), 502)
		st, err := s.C.QueueStats(ctx, &pb.QueueStatsRequest{QueueName: "clr"})
		require.NoError(t, err)
		assert.Equal(t, int32(2), st.LogicalQueues[0].Partitions[0].TotalLeased)

		t.Run("NonDestructiveKeepsLeased", func(t *testing.T) {
			require.NoError(t, s.C.QueueClear(ctx, &pb.QueueClearRequest{QueueName: "clr", Queue: true}))
			left := s.Items("clr")
			require.Len(t, left, 2)
			for i, it := range left {
				assert.True(t, it.IsLeased)
				assert.Equal(t, got[i].Id, it.Id)
				assert.True(t, deadline.Equal(it.LeaseDeadline.AsTime()))
				assert.Equal(t, got[i].Attempts, it.Attempts)
			}
			s.LeaseNone("clr")
			s.Complete("clr", 0, left[0].Id, left[1].Id)
			assert.Empty(t, s.Items("clr"))
		})

		t.Run("Destructive", func(t *testing.T) {
			produce(200)
			importItems(s, "clr", 0, leased("leased 3", 1), leased("leased 4", 1))
			require.Len(t, s.Items("clr"), 202)
			require.NoError(t, s.C.QueueClear(ctx, &pb.QueueClearRequest{QueueName: "clr", Queue: true, Destructive: true}))
			assert.Empty(t, s.Items("clr"))
		})

		t.Run("Scheduled", func(t *testing.T) {
			produce(3)
			importItems(s, "clr", 0, leased("leased 5", 1),
				&pb.StorageItem{EnqueueAt: servertest.At(time.Now().Add(time.Hour)), Payload: []byte("later")})
			require.NoError(t, s.C.QueueClear(ctx, &pb.QueueClearRequest{QueueName: "clr", Scheduled: true}))
			left := s.Items("clr")
			assert.Equal(t, []string{"p0", "p1", "p2", "leased 5"}, payloads(left))
			sched, err := s.C.StorageScheduledList(ctx, &pb.StorageItemsListRequest{QueueName: "clr"})
			require.NoError(t, err)
			assert.Empty(t, sched.Items)
			require.NoError(t, s.C.QueueClear(ctx, &pb.QueueClearRequest{QueueName: "clr", Destructive: true}))
		})
	})
}

// TestImportLeasedDeadlines: a leased item imported without lease_deadline
// gets the queue's lease_timeout from now; one whose deadline has passed is
// an expired lease, requeued by the lifecycle with its attempts; an
// imported lease survives a restart.
func TestImportLeasedDeadlines(t *testing.T) {
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.Start(t, b)
		s.CreateQueue(&pb.QueueInfo{QueueName: "ld", LeaseTimeout: "1m"})

		t.Run("MissingDeadlineGetsLeaseTimeout", func(t *testing.T) {
			before := time.Now()
			got := importItems(s, "ld", 0, &pb.StorageItem{IsLeased: true, Attempts: 1, Payload: []byte("no deadline")})
			after := time.Now()
			require.True(t, got[0].IsLeased)
			d := got[0].LeaseDeadline.AsTime()
			assert.False(t, d.Before(before.Add(time.Minute).Add(-time.Millisecond)), "%s", d)
			assert.False(t, d.After(after.Add(time.Minute)), "%s", d)
			s.Restart()
			items := s.Items("ld")
			require.Len(t, items, 1)
			assert.True(t, items[0].IsLeased, "an imported lease survives a restart")
			assert.Equal(t, got[0].Id, items[0].Id)
			s.Complete("ld", 0, items[0].Id)
		})

		t.Run("PastDeadlineIsAnExpiredLease", func(t *testing.T) {
			importItems(s, "ld", 0, &pb.StorageItem{IsLeased: true, LeaseDeadline: servertest.At(time.Now().Add(-time.Second)),
				Attempts: 2, Payload: []byte("expired")})
			var items []*pb.StorageItem
			servertest.Eventually(t, func() bool {
				items = s.Items("ld")
				return len(items) == 1 && !items[0].IsLeased
			}, "the expired lease should be requeued")
			assert.Equal(t, int32(2), items[0].Attempts)
			it := s.Lease("ld", 1).Items[0]
			assert.Equal(t, "expired", string(it.Bytes))
			assert.Equal(t, int32(3), it.Attempts)
		})
	})
}

// TestClusterImportSourceIDOnce imports the same source_ids from two nodes
// at once: each partition ends with one item per source_id, and every reply
// names that item.
func TestClusterImportSourceIDOnce(t *testing.T) {
	nodes := cluster(t, 2)
	nodes[0].CreateQueue(&pb.QueueInfo{QueueName: "ci"})
	const keys, calls = 50, 8
	replies := make([][]*pb.StorageItem, calls)
	var wg sync.WaitGroup
	for c := range calls {
		wg.Go(func() {
			req := &pb.StorageItemsImportRequest{QueueName: "ci"}
			for _, k := range rand.Perm(keys) {
				req.Items = append(req.Items, &pb.StorageItem{SourceId: fmt.Sprint("s", k), Payload: []byte(fmt.Sprint(c))})
			}
			res, err := nodes[c%2].C.StorageItemsImport(ctx, req)
			if assert.NoError(t, err) {
				replies[c] = res.Items
			}
		})
	}
	wg.Wait()
	items := nodes[0].Items("ci")
	require.Len(t, items, keys)
	held := map[string]string{}
	for _, it := range items {
		held[it.SourceId] = it.Id
	}
	require.Len(t, held, keys)
	for _, r := range replies {
		for _, it := range r {
			assert.Equal(t, held[it.SourceId], it.Id, "source_id %s", it.SourceId)
		}
	}
}

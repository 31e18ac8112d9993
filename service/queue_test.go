package service_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	styx "github.com/styxq/styx"
	"github.com/styxq/styx/internal/servertest"
	pb "github.com/styxq/styx/styxpb"
)

func TestQueues(t *testing.T) {
	t.Parallel()
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.Start(t, b)
		t.Run("CreateDefaults", func(t *testing.T) {
			s.CreateQueue(&pb.QueueInfo{QueueName: "defaults"})
			info, err := s.C.QueuesInfo(ctx, &pb.QueuesInfoRequest{QueueName: "defaults"})
			require.NoError(t, err)
			assert.Equal(t, "1m0s", info.LeaseTimeout)
			assert.Equal(t, "336h0m0s", info.ExpireTimeout)
			assert.Equal(t, int32(0), info.MaxAttempts)
			assert.Equal(t, int32(1), info.RequestedPartitions)
			assert.Len(t, info.Partitions, 1)
			assert.Empty(t, info.DeadQueue)
			assert.NotNil(t, info.CreatedAt)
		})
		t.Run("CreateExisting", func(t *testing.T) {
			err := s.C.QueuesCreate(ctx, &pb.QueueInfo{QueueName: "defaults"})
			servertest.RequireCode(t, err, styx.CodeBadRequest, "queue already exists", "defaults")
		})
		t.Run("UpdateKeepsOmittedFields", func(t *testing.T) {
			s.CreateQueue(&pb.QueueInfo{QueueName: "upd", LeaseTimeout: "30s", MaxAttempts: 5, Reference: "r1"})
			require.NoError(t, s.C.QueuesUpdate(ctx, &pb.QueueInfo{QueueName: "upd", MaxAttempts: 7}))
			info, err := s.C.QueuesInfo(ctx, &pb.QueuesInfoRequest{QueueName: "upd"})
			require.NoError(t, err)
			assert.Equal(t, int32(7), info.MaxAttempts)
			assert.Equal(t, "30s", info.LeaseTimeout)
			assert.Equal(t, "r1", info.Reference)
			assert.Equal(t, "336h0m0s", info.ExpireTimeout)
		})
		t.Run("UpdateUnknown", func(t *testing.T) {
			err := s.C.QueuesUpdate(ctx, &pb.QueueInfo{QueueName: "nope", MaxAttempts: 7})
			servertest.RequireCode(t, err, styx.CodeBadRequest, "queue does not exist; no such queue named 'nope'")
		})
		t.Run("ListAndDelete", func(t *testing.T) {
			for _, n := range []string{"l-a", "l-b", "l-c"} {
				s.CreateQueue(&pb.QueueInfo{QueueName: n})
			}
			res, err := s.C.QueuesList(ctx, &pb.QueuesListRequest{Pivot: "l-b", Limit: 2})
			require.NoError(t, err)
			require.Len(t, res.Items, 2)
			assert.Equal(t, "l-b", res.Items[0].QueueName)
			assert.Equal(t, "l-c", res.Items[1].QueueName)
			s.Produce("l-b", "x")
			require.NoError(t, s.C.QueuesDelete(ctx, &pb.QueuesDeleteRequest{QueueName: "l-b"}))
			_, err = s.C.QueuesInfo(ctx, &pb.QueuesInfoRequest{QueueName: "l-b"})
			servertest.RequireCode(t, err, styx.CodeBadRequest, "queue does not exist")
			// Re-created under the same name, the queue starts empty.
			s.CreateQueue(&pb.QueueInfo{QueueName: "l-b"})
			assert.Empty(t, s.Items("l-b"))
		})
	})
}

func TestProduceLeaseComplete(t *testing.T) {
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.Start(t, b)
		t.Run("FIFO", func(t *testing.T) {
			s.CreateQueue(&pb.QueueInfo{QueueName: "fifo"})
			s.Produce("fifo", "a", "b", "c")
			s.Produce("fifo", "d")
			res := s.Lease("fifo", 3)
			require.Len(t, res.Items, 3)
			for i, want := range []string{"a", "b", "c"} {
				it := res.Items[i]
				assert.Equal(t, want, string(it.Bytes))
				assert.Equal(t, int32(1), it.Attempts)
				assert.Equal(t, "test", it.Kind)
				assert.Equal(t, "ref-"+want, it.Reference)
				assert.WithinDuration(t, time.Now().Add(time.Minute), it.LeaseDeadline.AsTime(), 5*time.Second)
			}
			s.Complete("fifo", res.Partition, res.Items[0].Id, res.Items[1].Id, res.Items[2].Id)
			res = s.Lease("fifo", 10)
			require.Len(t, res.Items, 1)
			assert.Equal(t, "d", string(res.Items[0].Bytes))
			s.Complete("fifo", 0, res.Items[0].Id)
			assert.Empty(t, s.Items("fifo"))
			s.LeaseNone("fifo")
		})
		t.Run("LeaseTimeoutMessage", func(t *testing.T) {
			s.CreateQueue(&pb.QueueInfo{QueueName: "empty"})
			_, err := s.C.QueueLease(ctx, &pb.QueueLeaseRequest{QueueName: "empty", BatchSize: 1, ClientId: "c", RequestTimeout: "20ms"})
			servertest.RequireCode(t, err, styx.CodeRetry, "request timeout; no items are in the queue, try again")
		})
		t.Run("LongPollWokenByProduce", func(t *testing.T) {
			s.CreateQueue(&pb.QueueInfo{QueueName: "poll"})
			got := make(chan *pb.QueueLeaseResponse, 1)
			go func() {
				res, err := s.C.QueueLease(ctx, &pb.QueueLeaseRequest{QueueName: "poll", BatchSize: 5, ClientId: "w", RequestTimeout: "10s"})
				assert.NoError(t, err)
				got <- res
			}()
			servertest.WaitStat(t, s, "poll", func(st *pb.QueueLogicalStats) bool { return st.LeaseWaiting == 1 })
			start := time.Now()
			s.Produce("poll", "wake")
			res := <-got
			require.Len(t, res.Items, 1)
			assert.Equal(t, "wake", string(res.Items[0].Bytes))
			assert.Less(t, time.Since(start), 5*time.Second)
		})
		t.Run("WaitersServedInArrivalOrder", func(t *testing.T) {
			s.CreateQueue(&pb.QueueInfo{QueueName: "fair"})
			results := make([]chan string, 3)
			for i := range results {
				results[i] = make(chan string, 1)
				go func() {
					res, err := s.C.QueueLease(ctx, &pb.QueueLeaseRequest{QueueName: "fair", BatchSize: 1, ClientId: fmt.Sprint("c", i), RequestTimeout: "10s"})
					if assert.NoError(t, err) && assert.Len(t, res.Items, 1) {
						results[i] <- string(res.Items[0].Bytes)
					}
				}()
				servertest.WaitStat(t, s, "fair", func(st *pb.QueueLogicalStats) bool { return st.LeaseWaiting == int32(i+1) })
			}
			s.Produce("fair", "1", "2", "3")
			for i, want := range []string{"1", "2", "3"} {
				assert.Equal(t, want, <-results[i], "waiter %d", i)
			}
		})
		t.Run("DuplicateClientID", func(t *testing.T) {
			s.CreateQueue(&pb.QueueInfo{QueueName: "dup"})
			done := make(chan struct{})
			go func() {
				defer close(done)
				_, _ = s.C.QueueLease(ctx, &pb.QueueLeaseRequest{QueueName: "dup", BatchSize: 1, ClientId: "same", RequestTimeout: "2s"})
			}()
			servertest.WaitStat(t, s, "dup", func(st *pb.QueueLogicalStats) bool { return st.LeaseWaiting == 1 })
			_, err := s.C.QueueLease(ctx, &pb.QueueLeaseRequest{QueueName: "dup", BatchSize: 1, ClientId: "same", RequestTimeout: "1s"})
			servertest.RequireCode(t, err, styx.CodeBadRequest, "duplicate client id; a client cannot make multiple leased requests to the same queue")
			s.Produce("dup", "x")
			<-done
		})
		t.Run("CompleteUnknownIDChangesNothing", func(t *testing.T) {
			s.CreateQueue(&pb.QueueInfo{QueueName: "cu"})
			s.Produce("cu", "a", "b")
			res := s.Lease("cu", 1)
			ready := s.Items("cu")[1].Id
			err := s.C.QueueComplete(ctx, &pb.QueueCompleteRequest{QueueName: "cu", Ids: []string{res.Items[0].Id, ready}})
			servertest.RequireCode(t, err, styx.CodeBadRequest, ready, "not leased")
			require.Len(t, s.Items("cu"), 2, "the leased item must not be completed by a rejected request")
			err = s.C.QueueComplete(ctx, &pb.QueueCompleteRequest{QueueName: "cu", Partition: 0, Ids: []string{"0000000000000"}})
			servertest.RequireCode(t, err, styx.CodeBadRequest, "0000000000000")
		})
	})
}

// TestRetry checks queue.retry, scheduling and lease expiry over the wire.
// The server runs on a fake clock (TestRealTimersWakeWaitingLeases keeps
// the real one).
func TestRetry(t *testing.T) {
	t.Parallel()
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.StartFake(t, b)
		t.Run("RequeuedAtTailWithNewID", func(t *testing.T) {
			s.CreateQueue(&pb.QueueInfo{QueueName: "rq"})
			s.Produce("rq", "a", "b")
			a := s.Lease("rq", 1).Items[0]
			s.Retry("rq", 0, &pb.QueueRetryItem{Id: a.Id})
			res := s.Lease("rq", 2)
			require.Len(t, res.Items, 2)
			assert.Equal(t, "b", string(res.Items[0].Bytes))
			assert.Equal(t, "a", string(res.Items[1].Bytes))
			assert.NotEqual(t, a.Id, res.Items[1].Id, "a requeued item gets a new id")
			assert.Equal(t, int32(2), res.Items[1].Attempts)
			// The old id is no longer a lease handle.
			err := s.C.QueueComplete(ctx, &pb.QueueCompleteRequest{QueueName: "rq", Ids: []string{a.Id}})
			servertest.RequireCode(t, err, styx.CodeBadRequest, a.Id)
		})
		t.Run("ErrorRecorded", func(t *testing.T) {
			s.CreateQueue(&pb.QueueInfo{QueueName: "re"})
			s.Produce("re", "a")
			for i := 1; i <= 12; i++ {
				it := s.Lease("re", 1).Items[0]
				s.Retry("re", 0, &pb.QueueRetryItem{Id: it.Id, Error: fmt.Sprint("boom ", i)})
			}
			items := s.Items("re")
			require.Len(t, items, 1)
			assert.Equal(t, "boom 12", items[0].LastError)
			require.Len(t, items[0].Errors, 10, "the last 10 attempt errors are kept")
			assert.Equal(t, "boom 3", items[0].Errors[0].Error)
			assert.Equal(t, int32(3), items[0].Errors[0].Attempt)
			assert.Equal(t, "boom 12", items[0].Errors[9].Error)
			assert.Equal(t, int32(12), items[0].Attempts)
		})
		t.Run("ReleaseNotCounted", func(t *testing.T) {
			s.CreateQueue(&pb.QueueInfo{QueueName: "rel", MaxAttempts: 2})
			s.Produce("rel", "a")
			for range 5 {
				it := s.Lease("rel", 1).Items[0]
				assert.Equal(t, int32(1), it.Attempts)
				s.Retry("rel", 0, &pb.QueueRetryItem{Id: it.Id, Release: true})
			}
			require.Len(t, s.Items("rel"), 1, "released items never reach max_attempts")
		})
		t.Run("RetryAtSchedules", func(t *testing.T) {
			s.CreateQueue(&pb.QueueInfo{QueueName: "ra"})
			s.Produce("ra", "a")
			it := s.Lease("ra", 1).Items[0]
			s.Retry("ra", 0, &pb.QueueRetryItem{Id: it.Id, RetryAt: servertest.At(s.Now().Add(700 * time.Millisecond))})
			sched, err := s.C.StorageScheduledList(ctx, &pb.StorageItemsListRequest{QueueName: "ra"})
			require.NoError(t, err)
			require.Len(t, sched.Items, 1)
			assert.NotNil(t, sched.Items[0].EnqueueAt)
			s.LeaseNone("ra")
			s.Advance(699*time.Millisecond, "ra")
			s.LeaseNone("ra")
			s.Advance(time.Millisecond, "ra")
			res := s.Lease("ra", 1) // due now
			assert.Equal(t, "a", string(res.Items[0].Bytes))
		})
		t.Run("ProduceScheduled", func(t *testing.T) {
			s.CreateQueue(&pb.QueueInfo{QueueName: "ps"})
			require.NoError(t, s.C.QueueProduce(ctx, &pb.QueueProduceRequest{QueueName: "ps", Items: []*pb.QueueProduceItem{
				{Utf8: "later", EnqueueAt: servertest.At(s.Now().Add(500 * time.Millisecond))},
			}}))
			s.LeaseNone("ps")
			st, err := s.C.QueueStats(ctx, &pb.QueueStatsRequest{QueueName: "ps"})
			require.NoError(t, err)
			assert.Equal(t, int32(1), st.LogicalQueues[0].Partitions[0].Scheduled)
			s.Advance(500*time.Millisecond, "ps")
			assert.Equal(t, "later", string(s.Lease("ps", 1).Items[0].Bytes))
		})
		t.Run("LeaseExpiryRequeuesAndCounts", func(t *testing.T) {
			s.CreateQueue(&pb.QueueInfo{QueueName: "lx", LeaseTimeout: "1s"})
			s.Produce("lx", "a")
			first := s.Lease("lx", 1).Items[0]
			s.Advance(999*time.Millisecond, "lx")
			s.LeaseNone("lx")
			s.Advance(time.Millisecond, "lx")
			second := s.Lease("lx", 1).Items[0] // the lease has expired
			assert.Equal(t, "a", string(second.Bytes))
			assert.NotEqual(t, first.Id, second.Id)
			assert.Equal(t, int32(2), second.Attempts)
			err := s.C.QueueComplete(ctx, &pb.QueueCompleteRequest{QueueName: "lx", Ids: []string{first.Id}})
			servertest.RequireCode(t, err, styx.CodeBadRequest, first.Id)
		})
	})
}

// TestRealTimersWakeWaitingLeases checks, on the real clock, that the
// engines wake on their own timers: a lease that waits is served by a
// scheduled item when it becomes due and by an item whose lease expires,
// with no request in between (every other lifecycle test moves a fake
// clock and sends a request).
func TestRealTimersWakeWaitingLeases(t *testing.T) {
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.Start(t, b)
		s.CreateQueue(&pb.QueueInfo{QueueName: "rt", LeaseTimeout: "1s"})
		s.Produce("rt", "leased")
		first := s.Lease("rt", 1).Items[0]
		require.NoError(t, s.C.QueueProduce(ctx, &pb.QueueProduceRequest{QueueName: "rt", Items: []*pb.QueueProduceItem{
			{Utf8: "later", EnqueueAt: servertest.At(time.Now().Add(500 * time.Millisecond))},
		}}))
		s.LeaseNone("rt")
		// The scheduled item is due first, but a loaded machine may serve
		// the two in either order.
		got := map[string]*pb.QueueLeaseItem{}
		for range 2 {
			it := s.Lease("rt", 1).Items[0]
			got[string(it.Bytes)] = it
		}
		require.Contains(t, got, "later", "the scheduled item, when due")
		require.Contains(t, got, "leased", "the item whose lease expired")
		assert.NotEqual(t, first.Id, got["leased"].Id)
		assert.Equal(t, int32(2), got["leased"].Attempts)
	})
}

func TestPartitions(t *testing.T) {
	t.Parallel()
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.Start(t, b)
		s.CreateQueue(&pb.QueueInfo{QueueName: "parts", RequestedPartitions: 3})
		// Each produce goes whole to the partition with the fewest ready
		// items (ADR 0007).
		for i := range 3 {
			s.Produce("parts", fmt.Sprint(i, "a"), fmt.Sprint(i, "b"))
		}
		st, err := s.C.QueueStats(ctx, &pb.QueueStatsRequest{QueueName: "parts"})
		require.NoError(t, err)
		require.Len(t, st.LogicalQueues[0].Partitions, 3)
		for _, p := range st.LogicalQueues[0].Partitions {
			assert.Equal(t, int32(2), p.Total, "partition %d", p.Partition)
		}
		// One consumer is served from every partition: equals take turns.
		seen := map[int32]int{}
		for range 3 {
			res := s.Lease("parts", 10)
			require.Len(t, res.Items, 2)
			seen[res.Partition]++
			s.Complete("parts", res.Partition, res.Items[0].Id, res.Items[1].Id)
		}
		assert.Len(t, seen, 3)
		// Completing in the wrong partition is refused.
		s.Produce("parts", "z")
		res := s.Lease("parts", 1)
		err = s.C.QueueComplete(ctx, &pb.QueueCompleteRequest{QueueName: "parts", Partition: (res.Partition + 1) % 3, Ids: []string{res.Items[0].Id}})
		servertest.RequireCode(t, err, styx.CodeBadRequest, "not leased")
		// Partitions can be added.
		require.NoError(t, s.C.QueuesUpdate(ctx, &pb.QueueInfo{QueueName: "parts", RequestedPartitions: 4}))
		// No partition has ready items (one is leased): the three produces
		// take turns after the partition produced to last, and the new
		// partition gets one.
		for i := range 3 {
			s.Produce("parts", fmt.Sprint("new", i))
		}
		st, err = s.C.QueueStats(ctx, &pb.QueueStatsRequest{QueueName: "parts"})
		require.NoError(t, err)
		require.Len(t, st.LogicalQueues[0].Partitions, 4)
		assert.Equal(t, int32(1), st.LogicalQueues[0].Partitions[3].Total)
	})
}

func TestStorageAndAdmin(t *testing.T) {
	t.Parallel()
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.Start(t, b)
		s.CreateQueue(&pb.QueueInfo{QueueName: "st"})
		t.Run("ListPaginates", func(t *testing.T) {
			for i := range 25 {
				s.Produce("st", fmt.Sprint(i))
			}
			var ids []string
			pivot := ""
			for {
				res, err := s.C.StorageItemsList(ctx, &pb.StorageItemsListRequest{QueueName: "st", Pivot: pivot, Limit: 10})
				require.NoError(t, err)
				for i, it := range res.Items {
					if i == 0 && it.Id == pivot {
						continue // the pivot is inclusive: seen on the last page
					}
					ids = append(ids, it.Id)
				}
				if len(res.Items) < 10 {
					break
				}
				pivot = res.Items[len(res.Items)-1].Id
			}
			require.Len(t, ids, 25)
			for i := 1; i < len(ids); i++ {
				require.Less(t, ids[i-1], ids[i])
			}
		})
		t.Run("DeleteAndClear", func(t *testing.T) {
			items := s.Items("st")
			require.NoError(t, s.C.StorageItemsDelete(ctx, &pb.StorageItemsDeleteRequest{QueueName: "st", Ids: []string{items[0].Id, items[1].Id}}))
			require.Len(t, s.Items("st"), 23)
			leased := s.Lease("st", 1)
			require.NoError(t, s.C.QueueClear(ctx, &pb.QueueClearRequest{QueueName: "st", Queue: true}))
			left := s.Items("st")
			require.Len(t, left, 1, "clearing the queue keeps leased items")
			assert.Equal(t, leased.Items[0].Id, left[0].Id)
			assert.True(t, left[0].IsLeased)
			require.NoError(t, s.C.QueueClear(ctx, &pb.QueueClearRequest{QueueName: "st", Destructive: true}))
			assert.Empty(t, s.Items("st"))
			err := s.C.QueueClear(ctx, &pb.QueueClearRequest{QueueName: "st"})
			servertest.RequireCode(t, err, styx.CodeBadRequest, "queue, scheduled or destructive")
		})
		t.Run("ImportAndReload", func(t *testing.T) {
			res, err := s.C.StorageItemsImport(ctx, &pb.StorageItemsImportRequest{QueueName: "st", Items: []*pb.StorageItem{
				{Payload: []byte("imp"), Kind: "k", Attempts: 2, LastError: "earlier"},
			}})
			require.NoError(t, err)
			require.Len(t, res.Items, 1)
			assert.NotEmpty(t, res.Items[0].Id)
			require.NoError(t, s.C.QueueReload(ctx, &pb.QueueReloadRequest{QueueName: "st"}))
			it := s.Lease("st", 1).Items[0]
			assert.Equal(t, "imp", string(it.Bytes))
			assert.Equal(t, int32(3), it.Attempts)
		})
		t.Run("ConcurrentProducersAllDurable", func(t *testing.T) {
			s.CreateQueue(&pb.QueueInfo{QueueName: "conc"})
			var wg sync.WaitGroup
			for w := range 8 {
				wg.Go(func() {
					for i := range 20 {
						s.Produce("conc", fmt.Sprint(w, "-", i))
					}
				})
			}
			wg.Wait()
			require.Len(t, s.Items("conc"), 160)
		})
	})
}

func TestRestartKeepsState(t *testing.T) {
	t.Parallel()
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.Start(t, b)
		s.CreateQueue(&pb.QueueInfo{QueueName: "rs", LeaseTimeout: "1m"})
		s.Produce("rs", "a", "b", "c")
		leased := s.Lease("rs", 1).Items[0]
		s.Restart()
		items := s.Items("rs")
		require.Len(t, items, 3)
		assert.True(t, items[0].IsLeased, "a live lease survives a restart")
		res := s.Lease("rs", 5)
		require.Len(t, res.Items, 2)
		assert.Equal(t, "b", string(res.Items[0].Bytes))
		s.Complete("rs", 0, leased.Id) // the old lease handle still works
		// Ids are never reused after a restart.
		s.Produce("rs", "d")
		for _, it := range s.Items("rs") {
			assert.NotEqual(t, leased.Id, it.Id)
		}
	})
}

// TestDeleteAnswersWaitingLeases: a lease waiting on a queue that is
// deleted is answered at once that the queue does not exist (400), not that
// the server is shutting down (454, retry elsewhere).
func TestDeleteAnswersWaitingLeases(t *testing.T) {
	t.Parallel()
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.Start(t, b)
		s.CreateQueue(&pb.QueueInfo{QueueName: "doomed"})
		errc := make(chan error, 1)
		go func() {
			_, err := s.C.QueueLease(ctx, &pb.QueueLeaseRequest{QueueName: "doomed", BatchSize: 1, ClientId: "w",
				RequestTimeout: "1m"})
			errc <- err
		}()
		servertest.WaitStat(t, s, "doomed", func(st *pb.QueueLogicalStats) bool { return st.LeaseWaiting == 1 })
		require.NoError(t, s.C.QueuesDelete(ctx, &pb.QueuesDeleteRequest{QueueName: "doomed"}))
		err := <-errc
		require.Equal(t, styx.CodeBadRequest, styx.ErrorCode(err), "%v", err)
		require.True(t, styx.IsQueueNotExist(err), "%v", err)
	})
}

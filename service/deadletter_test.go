package service_test

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	styx "github.com/styxq/styx"
	"github.com/styxq/styx/daemon"
	"github.com/styxq/styx/internal/clock"
	"github.com/styxq/styx/internal/servertest"
	"github.com/styxq/styx/internal/store"
	pb "github.com/styxq/styx/styxpb"
)

// withDLQ creates queue q with dead-letter queue q+"-dlq" and extra settings.
func withDLQ(s *servertest.Server, q string, info *pb.QueueInfo) string {
	dlq := q + "-dlq"
	s.CreateQueue(&pb.QueueInfo{QueueName: dlq})
	info.QueueName, info.DeadQueue = q, dlq
	s.CreateQueue(info)
	return dlq
}

// TestDeadLetter checks the moves to a dead-letter queue over the wire. The
// server runs on a fake clock: leases and expire deadlines end by
// s.advance, not by sleeps.
func TestDeadLetter(t *testing.T) {
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.StartFake(t, b)

		t.Run("RetriesCountTowardMaxAttempts", func(t *testing.T) {
			dlq := withDLQ(s, "mr", &pb.QueueInfo{MaxAttempts: 3})
			require.NoError(t, s.C.QueueProduce(ctx, &pb.QueueProduceRequest{QueueName: "mr", Items: []*pb.QueueProduceItem{
				{Bytes: []byte("order-1"), Kind: "order", Reference: "r-1", Encoding: "text/plain"},
			}}))
			created := s.Items("mr")[0].CreatedAt.AsTime()
			var lastID string
			for i := 1; i <= 3; i++ {
				it := s.Lease("mr", 1).Items[0]
				assert.Equal(t, int32(i), it.Attempts)
				lastID = it.Id
				s.Retry("mr", 0, &pb.QueueRetryItem{Id: it.Id, Error: fmt.Sprint("attempt ", i, " failed")})
			}
			// Retry returns once the dead-letter queue has the item.
			dead := s.Items(dlq)
			require.Len(t, dead, 1)
			assert.Empty(t, s.Items("mr"), "no copy is left in the source")
			d := dead[0]
			assert.Equal(t, "max_attempts", d.DeadReason)
			assert.Equal(t, "mr", d.SourceQueue)
			assert.Equal(t, lastID, d.SourceId)
			assert.NotEqual(t, lastID, d.Id)
			assert.Equal(t, int32(3), d.Attempts, "attempts are not reset")
			assert.Equal(t, "order-1", string(d.Payload))
			assert.Equal(t, "order", d.Kind)
			assert.Equal(t, "r-1", d.Reference)
			assert.Equal(t, "text/plain", d.Encoding)
			assert.True(t, d.CreatedAt.AsTime().Equal(created))
			assert.Equal(t, "attempt 3 failed", d.LastError)
			require.Len(t, d.Errors, 3)
			assert.Equal(t, "attempt 1 failed", d.Errors[0].Error)
			require.NotNil(t, d.DeadAt)
			assert.WithinDuration(t, s.Now(), d.DeadAt.AsTime(), time.Millisecond)
			// Retention in the DLQ counts from dead_at with the DLQ's expire_timeout (336h).
			assert.WithinDuration(t, d.DeadAt.AsTime().Add(336*time.Hour), d.ExpireDeadline.AsTime(), time.Second)
			assert.Equal(t, 1.0, testutil.ToFloat64(s.D.Metrics.DeadLettered.WithLabelValues("mr", dlq, "max_attempts")))
			// The dead item can be leased from the DLQ like any item.
			got := s.Lease(dlq, 1).Items[0]
			assert.Equal(t, "order-1", string(got.Bytes))
		})

		t.Run("LeaseExpiryCountsTowardMaxAttempts", func(t *testing.T) {
			dlq := withDLQ(s, "le", &pb.QueueInfo{MaxAttempts: 2, LeaseTimeout: "1s"})
			s.Produce("le", "x")
			s.Lease("le", 1)
			s.Advance(1001*time.Millisecond, "le") // attempt 1 expires
			it := s.Lease("le", 1).Items[0]        // attempt 2, after the expiry
			assert.Equal(t, int32(2), it.Attempts)
			s.Advance(1001*time.Millisecond, "le") // attempt 2 expires too: dead
			dead := s.WaitItems(dlq, 1)
			assert.Equal(t, "max_attempts", dead[0].DeadReason)
			assert.Equal(t, int32(2), dead[0].Attempts)
			servertest.Eventually(t, func() bool { return len(s.Items("le")) == 0 }, "no copy is left in the source")
		})

		t.Run("ExpiredNeverLeasedMovedAndGone", func(t *testing.T) {
			dlq := withDLQ(s, "ex", &pb.QueueInfo{ExpireTimeout: "1s", LeaseTimeout: "1s"})
			s.Produce("ex", "a", "b")
			s.Advance(1001*time.Millisecond, "ex")
			dead := s.WaitItems(dlq, 2)
			for _, d := range dead {
				assert.Equal(t, "expired", d.DeadReason)
				assert.Equal(t, int32(0), d.Attempts)
			}
			servertest.Eventually(t, func() bool { return len(s.Items("ex")) == 0 }, "expired items must not stay in the source")
			s.LeaseNone("ex")
		})

		t.Run("ExplicitDeadKeepsError", func(t *testing.T) {
			dlq := withDLQ(s, "xd", &pb.QueueInfo{})
			s.Produce("xd", "poison")
			it := s.Lease("xd", 1).Items[0]
			s.Retry("xd", 0, &pb.QueueRetryItem{Id: it.Id, Dead: true, Error: "cannot parse"})
			dead := s.Items(dlq)
			require.Len(t, dead, 1)
			assert.Equal(t, "explicit", dead[0].DeadReason)
			assert.Equal(t, "cannot parse", dead[0].LastError)
			assert.Equal(t, "poison", string(dead[0].Payload))
			assert.Empty(t, s.Items("xd"))
		})

		t.Run("DLQWaiterWokenByMove", func(t *testing.T) {
			dlq := withDLQ(s, "wk", &pb.QueueInfo{})
			got := make(chan *pb.QueueLeaseResponse, 1)
			go func() {
				res, err := s.C.QueueLease(ctx, &pb.QueueLeaseRequest{QueueName: dlq, BatchSize: 1, ClientId: "dlq-watcher", RequestTimeout: "10s"})
				assert.NoError(t, err)
				got <- res
			}()
			servertest.WaitStat(t, s, dlq, func(st *pb.QueueLogicalStats) bool { return st.LeaseWaiting == 1 })
			s.Produce("wk", "w")
			it := s.Lease("wk", 1).Items[0]
			start := time.Now()
			s.Retry("wk", 0, &pb.QueueRetryItem{Id: it.Id, Dead: true})
			res := <-got
			require.Len(t, res.Items, 1)
			assert.Equal(t, "w", string(res.Items[0].Bytes))
			assert.Less(t, time.Since(start), 2*time.Second)
		})

		t.Run("DLQRetentionFromDeadAt", func(t *testing.T) {
			s.CreateQueue(&pb.QueueInfo{QueueName: "rt-dlq", ExpireTimeout: "1s", LeaseTimeout: "1s"})
			s.CreateQueue(&pb.QueueInfo{QueueName: "rt", DeadQueue: "rt-dlq"})
			s.Produce("rt", "short-lived")
			it := s.Lease("rt", 1).Items[0]
			s.Retry("rt", 0, &pb.QueueRetryItem{Id: it.Id, Dead: true})
			dead := s.Items("rt-dlq")
			require.Len(t, dead, 1)
			assert.WithinDuration(t, dead[0].DeadAt.AsTime().Add(time.Second), dead[0].ExpireDeadline.AsTime(), time.Millisecond)
			// At the end of its retention the dead item is dropped and counted.
			s.Advance(1001*time.Millisecond, "rt-dlq")
			s.WaitItems("rt-dlq", 0)
			assert.Equal(t, 1.0, testutil.ToFloat64(s.D.Metrics.ItemsDropped.WithLabelValues("rt-dlq", "expired")))
		})

		t.Run("NoDLQDropsAndCounts", func(t *testing.T) {
			s.CreateQueue(&pb.QueueInfo{QueueName: "nd", MaxAttempts: 1})
			s.Produce("nd", "a")
			it := s.Lease("nd", 1).Items[0]
			s.Retry("nd", 0, &pb.QueueRetryItem{Id: it.Id})
			assert.Empty(t, s.Items("nd"))
			assert.Equal(t, 1.0, testutil.ToFloat64(s.D.Metrics.ItemsDropped.WithLabelValues("nd", "max_attempts")))
			assert.Contains(t, s.Logs.String(), `level=WARN msg="dead item dropped: the queue has no dead_queue" queue=nd id=`+it.Id+` reason=max_attempts attempts=1`)
		})
	})
}

// TestDeadLetterMoveInterrupted stops the move between the dead-letter
// queue's write and the source's delete, restarts, and checks that exactly
// one copy exists.
func TestDeadLetterMoveInterrupted(t *testing.T) {
	t.Parallel()
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		servertest.RequireItemLog(t, b)
		s := servertest.Start(t, b)
		dlq := withDLQ(s, "cr", &pb.QueueInfo{})
		s.Produce("cr", "precious")
		it := s.Lease("cr", 1).Items[0]

		// Fail every source write that deletes an item: the DLQ write goes
		// through, the source delete does not.
		var refused atomic.Int32
		s.Faults.SetWriteHook(func(b *store.Batch) error {
			for _, op := range b.Ops {
				if op.Kind == store.OpDelete && op.Meta.DeadReason != "" {
					refused.Add(1)
					return errors.New("injected: crash before the source delete")
				}
			}
			return nil
		})
		s.Retry("cr", 0, &pb.QueueRetryItem{Id: it.Id, Dead: true, Error: "bad"})
		servertest.Eventually(t, func() bool { return refused.Load() >= 2 }, "the source retries its delete")
		// Both queues hold the item now, but never the DLQ twice, although
		// the source sent it again after each failed delete.
		require.Len(t, s.Items(dlq), 1)
		require.Len(t, s.Items("cr"), 1)
		s.LeaseNone("cr") // the dead item is not handed out from the source

		s.Restart() // the fault is gone with the old server
		s.WaitItems(dlq, 1)
		servertest.Eventually(t, func() bool { return len(s.Items("cr")) == 0 }, "the source deletes its copy after restart")
		dead := s.Items(dlq)
		require.Len(t, dead, 1, "exactly one copy in the DLQ")
		assert.Equal(t, it.Id, dead[0].SourceId)
		assert.Equal(t, "explicit", dead[0].DeadReason)
		assert.Equal(t, "bad", dead[0].LastError)
	})
}

// TestExpiredWhileLeasedDiesWhenLeaseEnds: an item past its expire deadline
// stays leased while its lease lives and dies (expired) when the lease ends.
// The server runs on a fake clock, so time passes the deadline without a
// sleep.
func TestExpiredWhileLeasedDiesWhenLeaseEnds(t *testing.T) {
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		clk := clock.NewFake(time.Now())
		s := servertest.StartWith(t, b, func(c *daemon.Config) { c.Clock = clk })
		dlq := withDLQ(s, "el", &pb.QueueInfo{ExpireTimeout: "30s", LeaseTimeout: "30s"})
		_, err := s.C.StorageItemsImport(ctx, &pb.StorageItemsImportRequest{QueueName: "el", Items: []*pb.StorageItem{
			{Payload: []byte("a"), ExpireDeadline: servertest.At(clk.Now().Add(300 * time.Millisecond))},
		}})
		require.NoError(t, err)
		it := s.Lease("el", 1).Items[0]
		clk.Advance(600 * time.Millisecond) // past the expire deadline, well within the lease
		// Past its expire deadline the item is still leased.
		st, err := s.C.QueueStats(ctx, &pb.QueueStatsRequest{QueueName: "el"})
		require.NoError(t, err)
		assert.Equal(t, int32(1), st.LogicalQueues[0].Partitions[0].TotalLeased)
		assert.Empty(t, s.Items(dlq), "a live lease is never moved")
		s.Retry("el", 0, &pb.QueueRetryItem{Id: it.Id, Error: "late"})
		dead := s.Items(dlq)
		require.Len(t, dead, 1)
		assert.Equal(t, "expired", dead[0].DeadReason)
		assert.Equal(t, "late", dead[0].LastError)
		servertest.Eventually(t, func() bool { return len(s.Items("el")) == 0 }, "the source deletes its copy")
	})
}

// TestLiveLeaseNotMovedAcrossRestart: an item whose expire deadline passes
// while it is leased is not moved at a restart while its lease is live. The
// server runs on a fake clock, which passes the deadline between the two
// restarts: on real time, a loaded machine's lease came after a deadline
// 300 ms away, when the item had gone to the dead-letter queue.
func TestLiveLeaseNotMovedAcrossRestart(t *testing.T) {
	t.Parallel()
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.StartFake(t, b)
		// lease_timeout cannot exceed expire_timeout, so the item that
		// expires before its lease ends is imported with its own deadline.
		dlq := withDLQ(s, "ll", &pb.QueueInfo{ExpireTimeout: "30s", LeaseTimeout: "30s"})
		_, err := s.C.StorageItemsImport(ctx, &pb.StorageItemsImportRequest{QueueName: "ll", Items: []*pb.StorageItem{
			{Payload: []byte("held"), ExpireDeadline: servertest.At(s.Now().Add(300 * time.Millisecond))},
		}})
		require.NoError(t, err)
		it := s.Lease("ll", 1).Items[0]
		s.Restart()
		s.Advance(time.Second, "ll") // past the expire deadline, the lease still live; the lifecycle runs
		s.Restart()
		items := s.Items("ll")
		require.Len(t, items, 1)
		assert.True(t, items[0].IsLeased)
		assert.Empty(t, s.Items(dlq), "a live lease is never moved, even across a restart")
		s.Complete("ll", 0, it.Id)
		assert.Empty(t, s.Items("ll"))
		assert.Empty(t, s.Items(dlq))
	})
}

func TestDeadQueueRules(t *testing.T) {
	t.Parallel()
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.Start(t, b)
		s.CreateQueue(&pb.QueueInfo{QueueName: "dlq"})
		s.CreateQueue(&pb.QueueInfo{QueueName: "src", DeadQueue: "dlq"})
		s.CreateQueue(&pb.QueueInfo{QueueName: "other"})
		cases := []struct {
			name  string
			call  func() error
			parts []string
		}{
			{"DLQMustExist", func() error {
				return s.C.QueuesCreate(ctx, &pb.QueueInfo{QueueName: "a", DeadQueue: "missing"})
			}, []string{"dead_queue", "'missing' does not exist"}},
			{"NotItsOwnDLQOnCreate", func() error {
				return s.C.QueuesCreate(ctx, &pb.QueueInfo{QueueName: "self", DeadQueue: "self"})
			}, []string{"its own dead_queue"}},
			{"NotItsOwnDLQOnUpdate", func() error {
				return s.C.QueuesUpdate(ctx, &pb.QueueInfo{QueueName: "other", DeadQueue: "other"})
			}, []string{"its own dead_queue"}},
			{"NoChainOnCreate", func() error {
				return s.C.QueuesCreate(ctx, &pb.QueueInfo{QueueName: "b", DeadQueue: "src"})
			}, []string{"'src' has a dead_queue of its own", "cannot be chained"}},
			{"NoChainOnUpdate", func() error {
				return s.C.QueuesUpdate(ctx, &pb.QueueInfo{QueueName: "other", DeadQueue: "src"})
			}, []string{"cannot be chained"}},
			{"ADLQCannotGetADLQ", func() error {
				return s.C.QueuesUpdate(ctx, &pb.QueueInfo{QueueName: "dlq", DeadQueue: "other"})
			}, []string{"'dlq' is the dead_queue of 'src'", "cannot have one of its own"}},
			{"ReferencedDLQCannotBeDeleted", func() error {
				return s.C.QueuesDelete(ctx, &pb.QueuesDeleteRequest{QueueName: "dlq", Force: true})
			}, []string{"cannot be deleted", "dead_queue of 'src'"}},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				servertest.RequireCode(t, c.call(), styx.CodeBadRequest, c.parts...)
			})
		}
		t.Run("NothingChanged", func(t *testing.T) {
			res, err := s.C.QueuesList(ctx, &pb.QueuesListRequest{})
			require.NoError(t, err)
			var names []string
			for _, q := range res.Items {
				names = append(names, q.QueueName+">"+q.DeadQueue)
			}
			assert.Equal(t, "dlq> other> src>dlq", strings.Join(names, " "))
		})
		t.Run("DeletableOnceUnreferenced", func(t *testing.T) {
			require.NoError(t, s.C.QueuesDelete(ctx, &pb.QueuesDeleteRequest{QueueName: "src"}))
			require.NoError(t, s.C.QueuesDelete(ctx, &pb.QueuesDeleteRequest{QueueName: "dlq"}))
		})
	})
}

// TestSlowDLQDoesNotStallSource holds the dead-letter queue's write and
// checks that the source queue keeps serving meanwhile.
func TestSlowDLQDoesNotStallSource(t *testing.T) {
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		servertest.RequireItemLog(t, b)
		s := servertest.Start(t, b)
		dlq := withDLQ(s, "sl", &pb.QueueInfo{})
		release := make(chan struct{})
		held := make(chan struct{}, 1)
		s.Faults.SetWriteHook(func(b *store.Batch) error {
			for _, op := range b.Ops {
				if op.Kind == store.OpInsert && op.Body != nil && op.Body.DeadReason != "" {
					select {
					case held <- struct{}{}:
					default:
					}
					<-release // the DLQ's write hangs until the test releases it
					return nil
				}
			}
			return nil
		})
		s.Produce("sl", "poison", "fine")
		poison := s.Lease("sl", 1).Items[0]
		retried := make(chan error, 1)
		go func() {
			retried <- servertest.RetryErr(s.C.QueueRetry(ctx, &pb.QueueRetryRequest{QueueName: "sl", Items: []*pb.QueueRetryItem{{Id: poison.Id, Dead: true}}}))
		}()
		<-held
		// The source serves other requests while its DLQ is stuck.
		s.Produce("sl", "more")
		res := s.Lease("sl", 2)
		require.Len(t, res.Items, 2)
		s.Complete("sl", res.Partition, res.Items[0].Id, res.Items[1].Id)
		select {
		case err := <-retried:
			t.Fatalf("the retry returned before the move finished: %v", err)
		default:
		}
		close(release)
		require.NoError(t, <-retried)
		dead := s.Items(dlq)
		require.Len(t, dead, 1)
		assert.Equal(t, "poison", string(dead[0].Payload))
		assert.Empty(t, s.Items("sl"))
	})
}

package service_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	styx "github.com/styxq/styx"
	"github.com/styxq/styx/daemon"
	"github.com/styxq/styx/internal/servertest"
	"github.com/styxq/styx/internal/store"
	pb "github.com/styxq/styx/styxpb"
)

// The commit pipeline (ADR 0012): the logical queue applies a batch, goes on
// with later requests while it syncs, and answers each request only once
// the sync covering its write is done, in batch order. These tests hold or
// fail one batch's sync through the fault-injection store's sync hook.

// insertsPayload reports whether b inserts an item with the payload p.
func insertsPayload(b *store.Batch, p string) bool {
	for _, op := range b.Ops {
		if op.Kind == store.OpInsert && op.Body != nil && string(op.Body.Payload) == p {
			return true
		}
	}
	return false
}

// leasesAnItem reports whether b records a lease (store.OpLease).
func leasesAnItem(b *store.Batch) bool {
	for _, op := range b.Ops {
		if op.Kind == store.OpLease {
			return true
		}
	}
	return false
}

// gate is a one-shot barrier, opened at most once (also by the test's
// cleanup, so that a failing test never leaves a sync held).
type gate struct {
	ch   chan struct{}
	once sync.Once
}

func newGate(t *testing.T) *gate {
	g := &gate{ch: make(chan struct{})}
	t.Cleanup(g.open)
	return g
}

func (g *gate) open() { g.once.Do(func() { close(g.ch) }) }

// notYet fails the test if ch already holds a value.
func notYet[T any](t *testing.T, ch <-chan T, what string) {
	t.Helper()
	select {
	case v := <-ch:
		t.Fatalf("%s answered before the sync of its write (or of an earlier one) completed: %v", what, v)
	default:
	}
}

func TestRepliesWaitForTheirSyncInOrder(t *testing.T) {
	t.Parallel()
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		servertest.RequireItemLog(t, b)
		s := servertest.Start(t, b)
		s.CreateQueue(&pb.QueueInfo{QueueName: "pipe", LeaseTimeout: "1m"})

		// Hold the sync of the batch that produces "first"; signal when
		// that batch and, later, a batch that leases an item are applied.
		release := newGate(t)
		produced, leased := make(chan struct{}, 1), make(chan struct{}, 1)
		s.Faults.SetSyncHook(func(b *store.Batch) func() error {
			switch {
			case insertsPayload(b, "first"):
				produced <- struct{}{}
				return func() error { <-release.ch; return nil }
			case leasesAnItem(b):
				select {
				case leased <- struct{}{}:
				default:
				}
			}
			return nil
		})

		produceDone := make(chan error, 1)
		go func() {
			produceDone <- s.C.QueueProduce(ctx, &pb.QueueProduceRequest{QueueName: "pipe",
				Items: []*pb.QueueProduceItem{{Bytes: []byte("first")}}})
		}()
		<-produced // applied; its sync is held
		notYet(t, produceDone, "the produce")

		// The loop goes on while the produce syncs: a lease takes the item
		// in a later batch, but is answered only after the produce.
		leaseDone := sendLease(s, &pb.QueueLeaseRequest{QueueName: "pipe", BatchSize: 1, ClientId: "c", RequestTimeout: "30s"})
		<-leased // the lease is applied in a batch after the held one
		notYet(t, leaseDone, "the lease of the item")
		notYet(t, produceDone, "the produce")

		release.open()
		require.NoError(t, <-produceDone)
		lr := <-leaseDone
		require.NoError(t, lr.err)
		require.Len(t, lr.res.Items, 1)
		assert.Equal(t, "first", string(lr.res.Items[0].Bytes))
		s.Complete("pipe", lr.res.Partition, lr.res.Items[0].Id)
		assert.Empty(t, s.Items("pipe"))
	})
}

func TestFailedSyncFailsLaterBatchesAndReloads(t *testing.T) {
	t.Parallel()
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		servertest.RequireItemLog(t, b)
		s := servertest.Start(t, b)
		s.CreateQueue(&pb.QueueInfo{QueueName: "sf"})

		// The sync of the batch producing "doomed" fails once "also",
		// produced in a later batch while it syncs, is applied; "also"'s
		// batch goes on only once that failure has been answered, so that
		// the pipeline is idle again when the loop decides how to answer
		// it (a batch already durable, as on the memory store, used to be
		// answered success then, 1 CI run in 3).
		fail := newGate(t)
		doomed, also := make(chan struct{}, 1), make(chan struct{}, 1)
		firstAnswered := make(chan struct{})
		s.Faults.SetSyncHook(func(b *store.Batch) func() error {
			switch {
			case insertsPayload(b, "doomed"):
				doomed <- struct{}{}
				return func() error { <-fail.ch; return errors.New("injected: fsync failed") }
			case insertsPayload(b, "also"):
				fail.open()
				<-firstAnswered
				also <- struct{}{}
			}
			return nil
		})
		produce := func(p string, answered chan struct{}) <-chan error {
			ch := make(chan error, 1)
			go func() {
				ch <- s.C.QueueProduce(ctx, &pb.QueueProduceRequest{QueueName: "sf", Items: []*pb.QueueProduceItem{{Bytes: []byte(p)}}})
				if answered != nil {
					close(answered)
				}
			}()
			return ch
		}
		first := produce("doomed", firstAnswered)
		<-doomed
		second := produce("also", nil)
		<-also

		// Neither is acknowledged: the first failed its sync, and the
		// second was built on the state the first left in memory.
		for _, ch := range []<-chan error{first, second} {
			err := <-ch
			require.Error(t, err)
			// The same answer as PostgreSQL gives for a failing database.
			servertest.RequireCode(t, err, styx.CodeUnavailable, "storage unavailable; queue 'sf': sync: ", "injected: fsync failed")
		}
		servertest.Eventually(t, func() bool { return strings.Contains(s.Logs.String(), "sync failed; reloading the queue from storage") }, "the loop reloads")

		// The queue works on after the reload: what storage holds (the
		// failed batches were applied, only their sync failed) is served,
		// and new items are acknowledged again.
		s.Faults.SetSyncHook(nil)
		s.Produce("sf", "after")
		got := map[string]bool{}
		for _, it := range s.Items("sf") {
			got[string(it.Payload)] = true
		}
		assert.True(t, got["after"])
		n := len(got)
		for range n {
			res := s.Lease("sf", 1)
			s.Complete("sf", res.Partition, res.Items[0].Id)
		}
		assert.Empty(t, s.Items("sf"))
	})
}

// TestConsumeBeforeSync: with daemon.Config.ConsumeBeforeSync (ADR 0013),
// complete and a lease of durable items are answered while their batch's
// sync is held, but a produce still waits for its sync, and so does a lease
// of an item whose produce is not yet durable.
func TestConsumeBeforeSync(t *testing.T) {
	t.Parallel()
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		servertest.RequireItemLog(t, b)
		s := servertest.StartWith(t, b, func(c *daemon.Config) { c.ConsumeBeforeSync = true })
		s.CreateQueue(&pb.QueueInfo{QueueName: "early", LeaseTimeout: "1m"})
		s.Produce("early", "durable")

		// Hold every sync from now on until released.
		release := newGate(t)
		applied := make(chan string, 16)
		s.Faults.SetSyncHook(func(b *store.Batch) func() error {
			switch {
			case insertsPayload(b, "fresh"):
				applied <- "produce"
			case leasesAnItem(b):
				applied <- "lease"
			default:
				applied <- "other"
			}
			return func() error { <-release.ch; return nil }
		})

		// A lease of the durable item is answered before its own sync.
		res := s.Lease("early", 1)
		require.Len(t, res.Items, 1)
		assert.Equal(t, "durable", string(res.Items[0].Bytes))
		assert.Equal(t, "lease", <-applied)
		// So is its complete.
		s.Complete("early", res.Partition, res.Items[0].Id)
		assert.Equal(t, "other", <-applied)

		// A produce waits for its sync; a lease of the item it stores waits
		// for that sync too.
		produceDone := make(chan error, 1)
		go func() {
			produceDone <- s.C.QueueProduce(ctx, &pb.QueueProduceRequest{QueueName: "early",
				Items: []*pb.QueueProduceItem{{Bytes: []byte("fresh")}}})
		}()
		require.Equal(t, "produce", <-applied)
		leaseDone := make(chan *pb.QueueLeaseResponse, 1)
		go func() {
			res, err := s.C.QueueLease(ctx, &pb.QueueLeaseRequest{QueueName: "early", BatchSize: 1, ClientId: "c2", RequestTimeout: "30s"})
			assert.NoError(t, err)
			leaseDone <- res
		}()
		require.Equal(t, "lease", <-applied)
		notYet(t, produceDone, "the produce")
		notYet(t, leaseDone, "the lease of an item not yet durable")

		release.open()
		require.NoError(t, <-produceDone)
		got := <-leaseDone
		require.NotNil(t, got)
		require.Len(t, got.Items, 1)
		assert.Equal(t, "fresh", string(got.Items[0].Bytes))
	})
}

// TestCompleteBeforeSync: by default (ADR 0033) a complete is answered
// once its batch is written, while that batch's sync is held, and a lease
// with a lease timeout over a minute (ADR 0034) still waits for its sync;
// with daemon.Config.SyncCompletes the complete
// waits for its sync too.
func TestCompleteBeforeSync(t *testing.T) {
	t.Parallel()
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		servertest.RequireItemLog(t, b)
		for _, syncCompletes := range []bool{false, true} {
			// One server after the other on the backend's store.
			s := servertest.StartWith(t, b, func(c *daemon.Config) { c.SyncCompletes = syncCompletes })
			q := fmt.Sprintf("cb-%v", syncCompletes)
			// A lease timeout over a minute: the lease of b waits for its
			// sync even though b is recent (ADR 0034 answers leases of
			// recent items with at most a minute before their sync).
			s.CreateQueue(&pb.QueueInfo{QueueName: q, LeaseTimeout: "5m"})
			s.Produce(q, "a")
			s.Produce(q, "b")
			a := s.Lease(q, 1)
			require.Len(t, a.Items, 1)

			// Hold every sync from now on until released.
			release := newGate(t)
			applied := make(chan string, 16)
			s.Faults.SetSyncHook(func(b *store.Batch) func() error {
				if leasesAnItem(b) {
					applied <- "lease"
				} else {
					applied <- "other"
				}
				return func() error { <-release.ch; return nil }
			})

			completeDone := make(chan error, 1)
			go func() {
				completeDone <- s.C.QueueComplete(ctx, &pb.QueueCompleteRequest{QueueName: q, Partition: a.Partition, Ids: []string{a.Items[0].Id}})
			}()
			require.Equal(t, "other", <-applied)
			if !syncCompletes {
				select {
				case err := <-completeDone:
					require.NoError(t, err)
				case <-time.After(30 * time.Second):
					t.Fatal("the complete was not answered while its sync was held")
				}
			}
			leaseDone := make(chan *pb.QueueLeaseResponse, 1)
			go func() {
				res, err := s.C.QueueLease(ctx, &pb.QueueLeaseRequest{QueueName: q, BatchSize: 1, ClientId: "c2", RequestTimeout: "30s"})
				assert.NoError(t, err)
				leaseDone <- res
			}()
			require.Equal(t, "lease", <-applied)
			notYet(t, leaseDone, "a lease")
			if syncCompletes {
				notYet(t, completeDone, "a complete with SyncCompletes")
			}

			release.open()
			if syncCompletes {
				require.NoError(t, <-completeDone)
			}
			got := <-leaseDone
			require.NotNil(t, got)
			require.Len(t, got.Items, 1)
			assert.Equal(t, "b", string(got.Items[0].Bytes))
			s.Faults.SetSyncHook(nil)
			assert.Equal(t, []string{"b"}, payloads(s.Items(q)), "a completed")
			s.Stop()
		}
	})
}

// TestStorageFailureAnswers453: a write the store refuses is answered 453
// naming the cause, the code TestPostgresRestart gets from a database that
// is down, and nothing of the request is kept. (PostgreSQL has no fault
// injection store; its outage is TestPostgresRestart.)
func TestStorageFailureAnswers453(t *testing.T) {
	t.Parallel()
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		if b.Postgres() {
			t.Skip("fault injection is for the embedded stores; PostgreSQL's outage is TestPostgresRestart")
		}
		s := servertest.Start(t, b)
		s.CreateQueue(&pb.QueueInfo{QueueName: "wf"})
		s.Faults.SetWriteHook(func(b *store.Batch) error {
			if insertsPayload(b, "refused") {
				return errors.New("injected: disk full")
			}
			return nil
		})
		err := s.C.QueueProduce(ctx, &pb.QueueProduceRequest{QueueName: "wf", Items: []*pb.QueueProduceItem{{Bytes: []byte("refused")}}})
		servertest.RequireCode(t, err, styx.CodeUnavailable, "storage unavailable; queue 'wf': ", "injected: disk full")
		s.Faults.SetWriteHook(nil)

		s.Produce("wf", "after")
		var got []string
		for _, it := range s.Items("wf") {
			got = append(got, string(it.Payload))
		}
		assert.Equal(t, []string{"after"}, got, "the refused item is not kept; the queue serves on")
	})
}

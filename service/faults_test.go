package service_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	styx "github.com/styxq/styx"
	"github.com/styxq/styx/daemon"
	"github.com/styxq/styx/internal/backend/embedded/pebble"
	"github.com/styxq/styx/internal/queue"
	"github.com/styxq/styx/internal/servertest"
	"github.com/styxq/styx/internal/store"
	"github.com/styxq/styx/internal/store/faulty"
	pb "github.com/styxq/styx/styxpb"
)

// TestPanicNeverAcknowledged (issue 23, 1): a panic in a queue's loop while
// it writes (a storage engine panicking on a failed write-ahead-log write,
// injected here by a write hook that panics) answers the produce 453 naming
// the panic, never 200; the queue reloads and serves on; the panic is
// counted in styx_queue_loop_panics_total; and after a restart exactly the
// acknowledged items are there. Before the fix, the loop died and every
// caller waiting on it got a nil error, so 200, for items never written.
func TestPanicNeverAcknowledged(t *testing.T) {
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		servertest.RequireItemLog(t, b)
		s := servertest.Start(t, b)
		s.CreateQueue(&pb.QueueInfo{QueueName: "pq"})
		s.Produce("pq", "ok-1")

		s.Faults.SetWriteHook(func(b *store.Batch) error {
			for _, op := range b.Ops {
				if op.Kind == store.OpInsert && op.Body != nil && strings.HasPrefix(string(op.Body.Payload), "lost") {
					panic("injected: wal write failed")
				}
			}
			return nil
		})
		for i := range 3 {
			err := s.C.QueueProduce(ctx, &pb.QueueProduceRequest{QueueName: "pq", RequestTimeout: "10s",
				Items: []*pb.QueueProduceItem{{Bytes: fmt.Appendf(nil, "lost-%d", i)}}})
			require.Error(t, err, "a produce whose write panicked is never acknowledged")
			require.Equal(t, styx.CodeUnavailable, styx.ErrorCode(err), err.Error())
			require.Contains(t, err.Error(), "panic")
		}
		s.Faults.SetWriteHook(nil)

		s.Produce("pq", "ok-2")
		require.Equal(t, []string{"ok-1", "ok-2"}, payloads(s.Items("pq")))
		require.Equal(t, `styx_queue_loop_panics_total{queue="pq"} 3`, metricLine(scrape(s), `styx_queue_loop_panics_total{queue="pq"}`))

		s.Restart()
		require.Equal(t, []string{"ok-1", "ok-2"}, payloads(s.Items("pq")))
	})
}

// health returns the status /health answers.
func health(s *servertest.Server) string {
	s.T.Helper()
	resp, err := http.Get(s.D.Endpoint() + "/health")
	require.NoError(s.T, err)
	defer resp.Body.Close()
	var h struct{ Status string }
	require.NoError(s.T, json.NewDecoder(resp.Body).Decode(&h))
	// 200 when healthy, 503 when writes are refused (issue 41).
	if h.Status == "ok" {
		require.Equal(s.T, http.StatusOK, resp.StatusCode)
	} else {
		require.Equal(s.T, http.StatusServiceUnavailable, resp.StatusCode, h.Status)
	}
	return h.Status
}

// TestDiskFullStaysUpAndHeals (issue 23, 2), on Pebble over a filesystem
// the test fills: below the free-space watermark produces are refused with
// 453 naming the disk, while leases, completes and every read go on and
// /health says "degraded: disk full"; when the log's writes fail (ENOSPC,
// as a disk that filled up between two checks gives), every write is
// refused and the reads still work; once space returns, produces work
// again within seconds, without a restart, and every acknowledged item is
// there, before and after a restart. Before the fix, the first failing
// write got a 453 and the next one panicked the process.
func TestDiskFullStaysUpAndHeals(t *testing.T) {
	mem := vfs.NewMem()
	mem.TestingSetDiskUsage(vfs.DiskUsage{AvailBytes: 1 << 30, TotalBytes: 2 << 30})
	var full atomic.Bool
	fs := errorfs.Wrap(mem, errorfs.InjectorFunc(func(op errorfs.Op) error {
		switch op.Kind {
		case errorfs.OpFileWrite, errorfs.OpFileWriteAt, errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo:
			if full.Load() {
				return syscall.ENOSPC
			}
		}
		return nil
	}))
	// The complete below must be durable before the disk fills: a complete's
	// answer may otherwise leave before its sync (ADR 0033), which the full
	// disk then fails, bringing its item back under the lease
	// (TestCompleteBeforeItsFsyncPowerCut is that case).
	s := servertest.StartWith(t, pebbleOn(func() vfs.FS { return fs }, pebble.Config{MinFreeBytes: 64 << 20, CheckInterval: 10 * time.Millisecond}),
		func(c *daemon.Config) { c.SyncCompletes = true })
	s.CreateQueue(&pb.QueueInfo{QueueName: "df"})
	s.Produce("df", "a", "b")
	require.Equal(t, "ok", health(s))

	// Below the watermark: produces refused, the rest goes on.
	mem.TestingSetDiskUsage(vfs.DiskUsage{AvailBytes: 10 << 20, TotalBytes: 2 << 30})
	produce := func(p string) error {
		return s.C.QueueProduce(ctx, &pb.QueueProduceRequest{QueueName: "df", RequestTimeout: "10s",
			Items: []*pb.QueueProduceItem{{Bytes: []byte(p)}}})
	}
	// A produce may pass until the monitor has read the free space (every
	// 10ms here): the probes that pass are acknowledged items like others.
	servertest.Eventually(t, func() bool { return produce("probe") != nil }, "produces are refused below the watermark")
	err := produce("refused")
	servertest.RequireCode(t, err, styx.CodeUnavailable, "disk full")
	require.Contains(t, health(s), "degraded: disk full")
	lease := s.Lease("df", 1)
	s.Complete("df", lease.Partition, lease.Items[0].Id)
	before := payloads(s.Items("df"))
	require.Equal(t, "b", before[0])
	require.NotContains(t, before, "refused")

	// The disk fills up under the log: every write is refused, reads go on.
	full.Store(true)
	var werr error
	servertest.Eventually(t, func() bool {
		_, werr = s.C.QueueLease(ctx, &pb.QueueLeaseRequest{QueueName: "df", BatchSize: 1, ClientId: "c2", RequestTimeout: "1s"})
		return werr != nil && styx.ErrorCode(werr) == styx.CodeUnavailable
	}, "writes fail once the log cannot be written")
	require.Contains(t, health(s), "degraded")
	require.Equal(t, before, payloads(s.Items("df")), "reads are served")
	_, err = s.C.QueueStats(ctx, &pb.QueueStatsRequest{QueueName: "df"})
	require.NoError(t, err)
	_, err = s.C.QueuesList(ctx, &pb.QueuesListRequest{Limit: 10})
	require.NoError(t, err)

	// Space returns: writes resume without a restart.
	full.Store(false)
	mem.TestingSetDiskUsage(vfs.DiskUsage{AvailBytes: 1 << 30, TotalBytes: 2 << 30})
	servertest.Eventually(t, func() bool { return produce("c") == nil }, "produces work again once space returns")
	require.Equal(t, "ok", health(s))
	want := append(before, "c")
	require.Equal(t, want, payloads(s.Items("df")))
	s.Restart()
	require.Equal(t, want, payloads(s.Items("df")), "every acknowledged item survives a restart")
}

// TestStartOnFullDisk (issue 23, 2): a server started on a disk below the
// free-space watermark listens, serves reads and says why it refuses
// writes (its store opens read-only instead of replaying and flushing its
// log, which needs room); once space returns it writes again without a
// restart. Before the fix it never listened.
func TestStartOnFullDisk(t *testing.T) {
	mem := vfs.NewMem()
	mem.TestingSetDiskUsage(vfs.DiskUsage{AvailBytes: 1 << 30, TotalBytes: 2 << 30})
	s := servertest.Start(t, pebbleOn(func() vfs.FS { return mem }, pebble.Config{MinFreeBytes: 64 << 20, CheckInterval: 10 * time.Millisecond}))
	s.CreateQueue(&pb.QueueInfo{QueueName: "sf"})
	s.Produce("sf", "a", "b")
	s.Stop()

	mem.TestingSetDiskUsage(vfs.DiskUsage{AvailBytes: 1 << 20, TotalBytes: 2 << 30})
	s.Boot()
	require.Contains(t, health(s), "degraded: disk full")
	require.Equal(t, []string{"a", "b"}, payloads(s.Items("sf")))
	err := s.C.QueueProduce(ctx, &pb.QueueProduceRequest{QueueName: "sf", RequestTimeout: "10s",
		Items: []*pb.QueueProduceItem{{Bytes: []byte("c")}}})
	servertest.RequireCode(t, err, styx.CodeUnavailable, "disk full")
	_, err = s.C.QueueLease(ctx, &pb.QueueLeaseRequest{QueueName: "sf", BatchSize: 1, ClientId: "c", RequestTimeout: "1s"})
	servertest.RequireCode(t, err, styx.CodeUnavailable, "disk full")

	mem.TestingSetDiskUsage(vfs.DiskUsage{AvailBytes: 1 << 30, TotalBytes: 2 << 30})
	servertest.Eventually(t, func() bool {
		return s.C.QueueProduce(ctx, &pb.QueueProduceRequest{QueueName: "sf", RequestTimeout: "10s",
			Items: []*pb.QueueProduceItem{{Bytes: []byte("c")}}}) == nil
	}, "produces work once space returns")
	require.Equal(t, "ok", health(s))
	require.Equal(t, []string{"a", "b", "c"}, payloads(s.Items("sf")))
}

// TestInterruptedMoveShownOnce (issue 41, 5; ADR 0003): a dead-letter move
// interrupted between the dead-letter queue's write and the source's delete
// (the source's delete fails once) is finished by the source's reload
// before it serves again, and a listing waits for that: right after the
// retry that killed the item is answered, the source and its dead-letter
// queue, listed one after the other, show the item once. Before, the
// listings raced the resent move and showed it in both queues.
func TestInterruptedMoveShownOnce(t *testing.T) {
	t.Parallel()
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		servertest.RequireItemLog(t, b)
		s := servertest.Start(t, b)
		dlq := withDLQ(s, "once", &pb.QueueInfo{})
		const n = 20
		for i := range n {
			p := fmt.Sprintf("item-%d", i)
			s.Produce("once", p)
			it := s.Lease("once", 1).Items[0]
			// The first write that deletes the dying item from the source
			// fails; the write after the reload goes through.
			var failed atomic.Bool
			s.Faults.SetWriteHook(func(b *store.Batch) error {
				for _, op := range b.Ops {
					if op.Kind == store.OpDelete && op.Meta.DeadReason != "" && failed.CompareAndSwap(false, true) {
						return errors.New("injected: the source's delete failed")
					}
				}
				return nil
			})
			s.Retry("once", 0, &pb.QueueRetryItem{Id: it.Id, Dead: true, Error: "bad"})
			require.True(t, failed.Load(), "the fault fired")
			require.Empty(t, payloads(s.Items("once")), "%s: the source shows no item once the retry is answered", p)
			require.Len(t, s.Items(dlq), i+1, "%s: the dead-letter queue shows each item once", p)
			s.Faults.SetWriteHook(nil)
		}
		s.Restart()
		require.Empty(t, s.Items("once"))
		require.Len(t, s.Items(dlq), n)
	})
}

// TestQueueAdminFailureLeavesNoHalfStep (issue 41, 6): a queues.create,
// update or delete whose store call fails leaves the stored definition and
// the running queue in agreement: both as before, or, when the store
// applied the change but reported a failure (After), both as after it on
// the embedded backends (PostgreSQL rolls the transaction back: before).
// Observed through the public API: queues.info and queues.list (the store)
// against a produce and the outcome of a retry (the running queue, whose
// max_attempts decides it), before and after a restart. Before the fix, a
// failed delete left the queue listed while every call said it did not
// exist, and a failed update left the running queue on the old definition.
// The fault is faulty.SetCallFault on the embedded backends and a trigger
// on styx_queues raising an error on PostgreSQL.
func TestQueueAdminFailureLeavesNoHalfStep(t *testing.T) {
	t.Parallel()
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.Start(t, b)
		s.CreateQueue(&pb.QueueInfo{QueueName: "adm-dlq"})
		inject, clear := catalogFault(s, t)
		for _, call := range []string{"create", "update", "delete"} {
			for _, after := range []bool{false, true} {
				name := fmt.Sprintf("adm-%s-%v", call, after)
				if call != "create" {
					s.CreateQueue(&pb.QueueInfo{QueueName: name, DeadQueue: "adm-dlq"})
					s.Produce(name, "kept")
				}
				before := adminStateOf(s, name)
				inject(call, after)
				var err error
				switch call {
				case "create":
					err = s.C.QueuesCreate(ctx, &pb.QueueInfo{QueueName: name, DeadQueue: "adm-dlq", MaxAttempts: 1})
				case "update":
					err = s.C.QueuesUpdate(ctx, &pb.QueueInfo{QueueName: name, MaxAttempts: 1})
				case "delete":
					err = s.C.QueuesDelete(ctx, &pb.QueuesDeleteRequest{QueueName: name})
				}
				clear()
				require.Error(t, err, "%s: the call fails", name)
				got := adminStateOf(s, name)
				require.Equal(t, got.stored, got.running, "%s: the store and the running queue agree (%v)", name, err)
				if !after || b.Postgres() {
					require.Equal(t, before, got, "%s: a failed step changes nothing", name)
				} else {
					require.NotEqual(t, before, got, "%s: the store applied the step: both are as after it", name)
				}
				s.Restart()
				require.Equal(t, got, adminStateOf(s, name), "%s: a restart finds what the server showed", name)
			}
		}
	})
}

// adminView is what a queue looks like, to the store or to its running
// queue: whether it exists, and its max_attempts (0 unlimited, -1 when it
// does not exist).
type adminView struct {
	exists      bool
	maxAttempts int32
}

// adminState is a queue as its stored definition shows it and as its
// running queue behaves.
type adminState struct{ stored, running adminView }

// adminStateOf reads the queue name both ways: queues.info and queues.list;
// a produce and, when it is accepted, a lease of one item and a retry of
// it: "dead_lettered" at the first attempt means max_attempts 1, "requeued"
// means unlimited (the queues of the test have no other).
func adminStateOf(s *servertest.Server, name string) adminState {
	s.T.Helper()
	var st adminState
	info, err := s.C.QueuesInfo(ctx, &pb.QueuesInfoRequest{QueueName: name})
	listed := false
	list, lerr := s.C.QueuesList(ctx, &pb.QueuesListRequest{Limit: 1000})
	require.NoError(s.T, lerr)
	for _, q := range list.Items {
		listed = listed || q.QueueName == name
	}
	if err == nil {
		require.True(s.T, listed, "%s: queues.info and queues.list agree", name)
		st.stored = adminView{exists: true, maxAttempts: info.MaxAttempts}
	} else {
		require.False(s.T, listed, "%s: queues.info and queues.list agree (%v)", name, err)
		st.stored.maxAttempts = -1
	}
	err = s.C.QueueProduce(ctx, &pb.QueueProduceRequest{QueueName: name, RequestTimeout: "10s",
		Items: []*pb.QueueProduceItem{{Bytes: []byte("probe")}}})
	if err != nil {
		require.Contains(s.T, err.Error(), "does not exist", "%s: produce", name)
		st.running.maxAttempts = -1
		return st
	}
	st.running.exists = true
	lease := s.Lease(name, 1)
	out := s.Retry(name, lease.Partition, &pb.QueueRetryItem{Id: lease.Items[0].Id, Error: "probe"})
	switch out[0].Outcome {
	case "dead_lettered":
		st.running.maxAttempts = 1
	case "requeued":
	default:
		s.T.Fatalf("%s: retry outcome %q", name, out[0].Outcome)
	}
	return st
}

// catalogFault returns how to make the store's next queue definition calls
// of one kind fail, before or after they are applied, and how to stop: on
// the embedded backends faulty.SetCallFault; on PostgreSQL a trigger on
// styx_queues that raises an error, BEFORE or AFTER the row changes (the
// transaction rolls back either way).
func catalogFault(s *servertest.Server, t *testing.T) (inject func(call string, after bool), clear func()) {
	cause := errors.New("injected: catalog write failed")
	if !s.B.Postgres() {
		return func(call string, after bool) {
				s.Faults.SetCallFault(&faulty.CallFault{Call: call + " queue", After: after, Err: cause})
			}, func() {
				s.Faults.SetCallFault(nil)
			}
	}
	conn, err := pgx.Connect(ctx, s.B.URL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(ctx) })
	_, err = conn.Exec(ctx, `CREATE FUNCTION styx_test_fail() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION 'injected: catalog write failed'; END $$`)
	require.NoError(t, err)
	ops := map[string]string{"create": "INSERT", "update": "UPDATE", "delete": "DELETE"}
	return func(call string, after bool) {
			when := "BEFORE"
			if after {
				when = "AFTER"
			}
			_, err := conn.Exec(ctx, `CREATE TRIGGER styx_test_fault `+when+` `+ops[call]+
				` ON styx_queues FOR EACH ROW EXECUTE FUNCTION styx_test_fail()`)
			require.NoError(t, err)
		}, func() {
			_, err := conn.Exec(ctx, `DROP TRIGGER IF EXISTS styx_test_fault ON styx_queues`)
			require.NoError(t, err)
		}
}

// TestRedriveStepRetryMovesOnce (issue 41): a redrive step whose delete
// from the dead-letter queue fails after the destination took the items is
// run again, and the destination's copy, completed meanwhile by a
// consumer, is not sent again: the item is delivered once. Before, the
// step sent the items again and the destination, no longer holding a copy
// under their source keys, took a second one (TestWriteFaults found it
// under injected write faults).
func TestRedriveStepRetryMovesOnce(t *testing.T) {
	t.Parallel()
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		servertest.RequireItemLog(t, b)
		s := servertest.Start(t, b)
		dlq := withDLQ(s, "rr", &pb.QueueInfo{})
		s.Produce("rr", "x")
		it := s.Lease("rr", 1).Items[0]
		s.Retry("rr", 0, &pb.QueueRetryItem{Id: it.Id, Dead: true, Error: "bad"})
		s.WaitItems(dlq, 1)

		// The dead-letter queue's first delete of a dead item waits until
		// the test has consumed the destination's copy, then fails.
		held, release := make(chan struct{}), make(chan struct{})
		var failed atomic.Bool
		s.Faults.SetWriteHook(func(b *store.Batch) error {
			for _, op := range b.Ops {
				if op.Kind == store.OpDelete && queue.IsDeadCopyKey(op.Meta.SourceKey) && failed.CompareAndSwap(false, true) {
					close(held)
					<-release
					return errors.New("injected: the dead-letter queue's delete failed")
				}
			}
			return nil
		})
		task, err := s.C.DeadRedrive(ctx, &pb.DeadRedriveRequest{QueueName: dlq, All: true})
		require.NoError(t, err)
		<-held
		copyOf := s.Lease("rr", 1).Items[0]
		require.Equal(t, "x", string(copyOf.Bytes))
		s.Complete("rr", 0, copyOf.Id)
		close(release)

		done := waitTask(s, task.TaskId)
		require.Equal(t, "completed", done.Status)
		require.Equal(t, int64(1), done.Moved)
		require.Empty(t, s.Items(dlq), "the dead item left the dead-letter queue")
		require.Empty(t, s.Items("rr"), "the completed copy is the only one the destination got")
		s.Faults.SetWriteHook(nil)
	})
}

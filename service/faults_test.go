package service_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/stretchr/testify/require"

	styx "github.com/styxq/styx"
	"github.com/styxq/styx/internal/backend/embedded/pebble"
	"github.com/styxq/styx/internal/store"
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
	forEachBackend(t, func(t *testing.T, b backend) {
		requireItemLog(t, b)
		s := start(t, b)
		s.createQueue(&pb.QueueInfo{QueueName: "pq"})
		s.produce("pq", "ok-1")

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

		s.produce("pq", "ok-2")
		require.Equal(t, []string{"ok-1", "ok-2"}, payloads(s.items("pq")))
		require.Equal(t, `styx_queue_loop_panics_total{queue="pq"} 3`, metricLine(s.scrape(), `styx_queue_loop_panics_total{queue="pq"}`))

		s.restart()
		require.Equal(t, []string{"ok-1", "ok-2"}, payloads(s.items("pq")))
	})
}

// health returns the status /health answers.
func (s *server) health() string {
	s.t.Helper()
	resp, err := http.Get(s.d.Endpoint() + "/health")
	require.NoError(s.t, err)
	defer resp.Body.Close()
	var h struct{ Status string }
	require.NoError(s.t, json.NewDecoder(resp.Body).Decode(&h))
	// 200 when healthy, 503 when writes are refused (issue 41).
	if h.Status == "ok" {
		require.Equal(s.t, http.StatusOK, resp.StatusCode)
	} else {
		require.Equal(s.t, http.StatusServiceUnavailable, resp.StatusCode, h.Status)
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
	s := start(t, pebbleOn(func() vfs.FS { return fs }, pebble.Config{MinFreeBytes: 64 << 20, CheckInterval: 10 * time.Millisecond}))
	s.createQueue(&pb.QueueInfo{QueueName: "df"})
	s.produce("df", "a", "b")
	require.Equal(t, "ok", s.health())

	// Below the watermark: produces refused, the rest goes on.
	mem.TestingSetDiskUsage(vfs.DiskUsage{AvailBytes: 10 << 20, TotalBytes: 2 << 30})
	produce := func(p string) error {
		return s.C.QueueProduce(ctx, &pb.QueueProduceRequest{QueueName: "df", RequestTimeout: "10s",
			Items: []*pb.QueueProduceItem{{Bytes: []byte(p)}}})
	}
	// A produce may pass until the monitor has read the free space (every
	// 10ms here): the probes that pass are acknowledged items like others.
	eventually(t, func() bool { return produce("probe") != nil }, "produces are refused below the watermark")
	err := produce("refused")
	requireCode(t, err, styx.CodeUnavailable, "disk full")
	require.Contains(t, s.health(), "degraded: disk full")
	lease := s.lease("df", 1)
	s.complete("df", lease.Partition, lease.Items[0].Id)
	before := payloads(s.items("df"))
	require.Equal(t, "b", before[0])
	require.NotContains(t, before, "refused")

	// The disk fills up under the log: every write is refused, reads go on.
	full.Store(true)
	var werr error
	eventually(t, func() bool {
		_, werr = s.C.QueueLease(ctx, &pb.QueueLeaseRequest{QueueName: "df", BatchSize: 1, ClientId: "c2", RequestTimeout: "1s"})
		return werr != nil && styx.ErrorCode(werr) == styx.CodeUnavailable
	}, "writes fail once the log cannot be written")
	require.Contains(t, s.health(), "degraded")
	require.Equal(t, before, payloads(s.items("df")), "reads are served")
	_, err = s.C.QueueStats(ctx, &pb.QueueStatsRequest{QueueName: "df"})
	require.NoError(t, err)
	_, err = s.C.QueuesList(ctx, &pb.QueuesListRequest{Limit: 10})
	require.NoError(t, err)

	// Space returns: writes resume without a restart.
	full.Store(false)
	mem.TestingSetDiskUsage(vfs.DiskUsage{AvailBytes: 1 << 30, TotalBytes: 2 << 30})
	eventually(t, func() bool { return produce("c") == nil }, "produces work again once space returns")
	require.Equal(t, "ok", s.health())
	want := append(before, "c")
	require.Equal(t, want, payloads(s.items("df")))
	s.restart()
	require.Equal(t, want, payloads(s.items("df")), "every acknowledged item survives a restart")
}

// TestStartOnFullDisk (issue 23, 2): a server started on a disk below the
// free-space watermark listens, serves reads and says why it refuses
// writes (its store opens read-only instead of replaying and flushing its
// log, which needs room); once space returns it writes again without a
// restart. Before the fix it never listened.
func TestStartOnFullDisk(t *testing.T) {
	mem := vfs.NewMem()
	mem.TestingSetDiskUsage(vfs.DiskUsage{AvailBytes: 1 << 30, TotalBytes: 2 << 30})
	s := start(t, pebbleOn(func() vfs.FS { return mem }, pebble.Config{MinFreeBytes: 64 << 20, CheckInterval: 10 * time.Millisecond}))
	s.createQueue(&pb.QueueInfo{QueueName: "sf"})
	s.produce("sf", "a", "b")
	s.stop()

	mem.TestingSetDiskUsage(vfs.DiskUsage{AvailBytes: 1 << 20, TotalBytes: 2 << 30})
	s.boot()
	require.Contains(t, s.health(), "degraded: disk full")
	require.Equal(t, []string{"a", "b"}, payloads(s.items("sf")))
	err := s.C.QueueProduce(ctx, &pb.QueueProduceRequest{QueueName: "sf", RequestTimeout: "10s",
		Items: []*pb.QueueProduceItem{{Bytes: []byte("c")}}})
	requireCode(t, err, styx.CodeUnavailable, "disk full")
	_, err = s.C.QueueLease(ctx, &pb.QueueLeaseRequest{QueueName: "sf", BatchSize: 1, ClientId: "c", RequestTimeout: "1s"})
	requireCode(t, err, styx.CodeUnavailable, "disk full")

	mem.TestingSetDiskUsage(vfs.DiskUsage{AvailBytes: 1 << 30, TotalBytes: 2 << 30})
	eventually(t, func() bool {
		return s.C.QueueProduce(ctx, &pb.QueueProduceRequest{QueueName: "sf", RequestTimeout: "10s",
			Items: []*pb.QueueProduceItem{{Bytes: []byte("c")}}}) == nil
	}, "produces work once space returns")
	require.Equal(t, "ok", s.health())
	require.Equal(t, []string{"a", "b", "c"}, payloads(s.items("sf")))
}

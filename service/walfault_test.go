package service_test

import (
	"bytes"
	"fmt"
	"runtime"
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
	"github.com/styxq/styx/internal/servertest"
	pb "github.com/styxq/styx/styxpb"
)

// TestWALRotationFaults (issue 41, point 1; ADR 0022), through the HTTP
// API on Pebble: a produce load rotates the write-ahead log (1 MiB
// memtables), and the disk fails exactly when Pebble rotates it — creating
// the next log, syncing the data directory, or the last sync of the
// previous log — and then fails every write, sync and creation until the
// test heals it. Before the fix Pebble panicked with its mutex released
// and Go aborted the test binary (`fatal error: sync: unlock of unlocked
// mutex`). Now: the server lives; produces get 453 while the disk fails
// and /health says degraded; once the disk works produces succeed again
// without a restart; and every produce answered 200 is stored exactly
// once, before and after a restart (a produce answered 453 at most once).
func TestWALRotationFaults(t *testing.T) {
	inRotation := func() bool {
		buf := make([]byte, 64<<10)
		return bytes.Contains(buf[:runtime.Stack(buf, false)], []byte("(*DB).rotateWAL"))
	}
	for _, tc := range []struct {
		name    string
		trigger func(op errorfs.Op) bool
	}{
		{"create of the next log", func(op errorfs.Op) bool {
			return (op.Kind == errorfs.OpCreate || op.Kind == errorfs.OpReuseForWrite) && strings.HasSuffix(op.Path, ".log") && inRotation()
		}},
		{"directory sync", func(op errorfs.Op) bool {
			return op.Kind == errorfs.OpFileSync && op.Path == "db" && inRotation()
		}},
		{"last sync of the previous log", func(op errorfs.Op) bool {
			return (op.Kind == errorfs.OpFileSync || op.Kind == errorfs.OpFileSyncData || op.Kind == errorfs.OpFileSyncTo) &&
				strings.HasSuffix(op.Path, ".log") && inRotation()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var armed, fired, failing atomic.Bool
			cause := error(syscall.ENOSPC)
			fs := errorfs.Wrap(vfs.NewMem(), errorfs.InjectorFunc(func(op errorfs.Op) error {
				switch op.Kind {
				case errorfs.OpCreate, errorfs.OpReuseForWrite, errorfs.OpFileWrite, errorfs.OpFileWriteAt, errorfs.OpFileSync,
					errorfs.OpFileSyncData, errorfs.OpFileSyncTo, errorfs.OpRename, errorfs.OpLink:
				default:
					return nil
				}
				if failing.Load() {
					return cause
				}
				if armed.Load() && tc.trigger(op) && armed.CompareAndSwap(true, false) {
					fired.Store(true)
					failing.Store(true)
					return cause
				}
				return nil
			}))
			s := servertest.Start(t, pebbleOn(func() vfs.FS { return fs }, pebble.Config{MemTableBytes: 1 << 20, MinFreeBytes: -1, CheckInterval: 10 * time.Millisecond}))
			s.CreateQueue(&pb.QueueInfo{QueueName: "rot"})
			acked, refused := map[string]bool{}, map[string]bool{}
			n := 0
			produce := func() error {
				req := &pb.QueueProduceRequest{QueueName: "rot", RequestTimeout: "10s"}
				var batch []string
				for range 8 {
					n++
					p := fmt.Sprintf("p%d-%s", n, strings.Repeat("x", 1000))
					batch = append(batch, p)
					req.Items = append(req.Items, &pb.QueueProduceItem{Bytes: []byte(p)})
				}
				err := s.C.QueueProduce(ctx, req)
				for _, p := range batch {
					if err == nil {
						acked[p] = true
					} else {
						refused[p] = true
					}
				}
				return err
			}

			armed.Store(true)
			for i := 0; !fired.Load(); i++ {
				require.Less(t, i, 3000, "the log never rotated")
				if err := produce(); err != nil {
					servertest.RequireCode(t, err, styx.CodeUnavailable)
				}
			}

			// While the disk fails: 453, /health degraded, reads served.
			servertest.Eventually(t, func() bool { return produce() != nil }, "produces are refused once the disk fails")
			for deadline := time.Now().Add(300 * time.Millisecond); time.Now().Before(deadline); {
				servertest.RequireCode(t, produce(), styx.CodeUnavailable, "storage unavailable")
			}
			require.Contains(t, health(s), "degraded")
			_, err := s.C.QueuesList(ctx, &pb.QueuesListRequest{Limit: 10})
			require.NoError(t, err, "reads while the disk fails")

			// The disk works again: produces succeed without a restart.
			failing.Store(false)
			servertest.Eventually(t, func() bool { return produce() == nil }, "produces succeed once the disk works")
			require.Equal(t, "ok", health(s))
			for range 20 {
				require.NoError(t, produce())
			}
			check := func(when string) {
				stored := map[string]int{}
				for _, it := range s.Items("rot") {
					stored[string(it.Payload)]++
				}
				for p := range acked {
					require.Equal(t, 1, stored[p], "%s: acknowledged item %.12s… stored %d times", when, p, stored[p])
				}
				for p := range refused {
					require.LessOrEqual(t, stored[p], 1, "%s: refused item %.12s… stored %d times", when, p, stored[p])
				}
			}
			check("healed")
			s.Restart()
			check("after a restart")
			t.Logf("%d items acknowledged, %d refused", len(acked), len(refused))
		})
	}
}

package pebble

import (
	"bytes"
	"context"
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

	"github.com/styxq/styx/internal/queue"
	"github.com/styxq/styx/internal/store"
)

// Issue 41, points 1 and 2 (ADR 0022): an I/O error on the calls Pebble
// panics on must not take the process down. These tests inject the error
// exactly there, with errorfs, and pick the call by the function Pebble is
// in when it makes it:
//
//   - the WAL rotation (DB.rotateWAL): the creation of the next log, the
//     sync of the data directory after it, the last sync of the previous log.
//     Pebble panics with its mutex released and Go aborts the process
//     (`fatal error: sync: unlock of unlocked mutex`), which no recover
//     catches;
//   - the move of a marker while Pebble opens (atomicfs.Marker.Move), which
//     panics when the directory sync fails.
//
// From the injected call on, the disk fails every write, sync and creation
// until the test says it works again: writes must be refused (453,
// store.ErrUnavailable) meanwhile, reads served, and once the disk works the
// store heals by itself. Every write acknowledged is there after a restart.

// diskFault fails, once its trigger has matched a call, every write-side
// call of the filesystem with cause, until healed.
type diskFault struct {
	cause   error
	trigger func(op errorfs.Op) bool
	armed   atomic.Bool // the trigger may fire
	fired   atomic.Bool // it fired
	failing atomic.Bool // the disk fails every write-side call
}

func (d *diskFault) String() string { return "diskFault" }

func (d *diskFault) MaybeError(op errorfs.Op) error {
	if !writeSide(op.Kind) {
		return nil
	}
	if d.failing.Load() {
		return d.cause
	}
	if d.armed.Load() && d.trigger(op) && d.armed.CompareAndSwap(true, false) {
		d.fired.Store(true)
		d.failing.Store(true)
		return d.cause
	}
	return nil
}

// writeSide reports whether a call writes: what a full or failing disk
// refuses.
func writeSide(k errorfs.OpKind) bool {
	switch k {
	case errorfs.OpCreate, errorfs.OpReuseForWrite, errorfs.OpFileWrite, errorfs.OpFileWriteAt, errorfs.OpFileSync,
		errorfs.OpFileSyncData, errorfs.OpFileSyncTo, errorfs.OpRename, errorfs.OpLink:
		return true
	}
	return false
}

func isSync(k errorfs.OpKind) bool {
	return k == errorfs.OpFileSync || k == errorfs.OpFileSyncData || k == errorfs.OpFileSyncTo
}

// inStack reports whether the calling goroutine is inside the function
// named fn (as runtime.Stack prints it).
func inStack(fn string) bool {
	buf := make([]byte, 64<<10)
	return bytes.Contains(buf[:runtime.Stack(buf, false)], []byte(fn))
}

// payloadInsert writes n items with ids from first, each with a 1 KB body
// (so that memtables fill and the log rotates), as insert does.
func payloadInsert(s *Store, qid, first uint64, n int) error {
	b := &store.Batch{QueueID: qid}
	for id := first; id < first+uint64(n); id++ {
		b.Insert(0, queue.ItemMeta{ID: id, BodyID: id, CreatedAt: t0}, queue.ItemBody{Payload: bytes.Repeat([]byte{byte(id)}, 1024)}, queue.ItemErrors{})
	}
	wait, err := s.WriteAsync(context.Background(), b)
	if err != nil || wait == nil {
		return err
	}
	return wait()
}

// requireExactlyOnce checks that every acknowledged id is stored once.
func requireExactlyOnce(t *testing.T, s *Store, qid uint64, acked []uint64) {
	t.Helper()
	count := map[uint64]int{}
	for _, id := range ids(t, s, qid) {
		count[id]++
	}
	for _, id := range acked {
		require.Equal(t, 1, count[id], "acknowledged item %d", id)
	}
}

// faultStore opens a store with a 1 MiB memtable (the log rotates every
// few hundred items) on an in-memory filesystem failing as d says.
func faultStore(t *testing.T, mem *vfs.MemFS, d *diskFault) *Store {
	t.Helper()
	s, err := Open(Config{Dir: "db", FS: errorfs.Wrap(mem, d), Logger: quiet, CheckInterval: 10 * time.Millisecond,
		MemTableBytes: 1 << 20, MinFreeBytes: -1})
	require.NoError(t, err)
	return s
}

func TestWALRotationFaultsHeal(t *testing.T) {
	inRotation := func(op errorfs.Op) bool { return inStack("(*DB).rotateWAL") }
	cases := []struct {
		name    string
		trigger func(op errorfs.Op) bool
	}{
		{"create of the next log", func(op errorfs.Op) bool {
			return (op.Kind == errorfs.OpCreate || op.Kind == errorfs.OpReuseForWrite) && strings.HasSuffix(op.Path, ".log") && inRotation(op)
		}},
		{"directory sync", func(op errorfs.Op) bool {
			return op.Kind == errorfs.OpFileSync && op.Path == "db" && inRotation(op)
		}},
		{"last sync of the previous log", func(op errorfs.Op) bool {
			return isSync(op.Kind) && strings.HasSuffix(op.Path, ".log") && inRotation(op)
		}},
	}
	for _, tc := range cases {
		for _, cause := range []error{syscall.ENOSPC, syscall.EIO} {
			t.Run(fmt.Sprintf("%s/%v", tc.name, cause), func(t *testing.T) {
				mem := vfs.NewMem()
				d := &diskFault{cause: cause, trigger: tc.trigger}
				s := faultStore(t, mem, d)
				defer func() { _ = s.Close() }()
				q, err := s.CreateQueue(context.Background(), queue.QueueInfo{Name: "q", Partitions: 1})
				require.NoError(t, err)

				// Write until the injected call fails; the process must live.
				d.armed.Store(true)
				var acked []uint64
				next := uint64(1)
				for i := 0; !d.fired.Load(); i++ {
					require.Less(t, i, 5000, "the log never rotated")
					if err := payloadInsert(s, q.ID, next, 16); err == nil {
						for id := next; id < next+16; id++ {
							acked = append(acked, id)
						}
					} else {
						require.ErrorIs(t, err, store.ErrUnavailable)
					}
					next += 16
				}

				// While the disk fails: writes refused, reads served, Health says why.
				require.Eventually(t, func() bool { return s.WriteFault() != nil }, 5*time.Second, time.Millisecond)
				deadline := time.Now().Add(300 * time.Millisecond)
				for time.Now().Before(deadline) {
					err := payloadInsert(s, q.ID, next, 4)
					require.ErrorIs(t, err, store.ErrUnavailable, "a write while the disk fails")
					next += 4
					time.Sleep(10 * time.Millisecond)
				}
				require.Contains(t, s.Health(), "storage read-only")
				_, err = s.ListQueues(context.Background(), queue.ListQueuesParams{})
				require.NoError(t, err, "reads while the disk fails")

				// The disk works again: the store heals by itself.
				d.failing.Store(false)
				require.Eventually(t, func() bool { return s.WriteFault() == nil }, 20*time.Second, 10*time.Millisecond, "the store heals")
				for range 40 { // rotates the log again
					require.NoError(t, payloadInsert(s, q.ID, next, 16))
					for id := next; id < next+16; id++ {
						acked = append(acked, id)
					}
					next += 16
				}
				requireExactlyOnce(t, s, q.ID, acked)

				// And after a restart.
				require.NoError(t, s.Close())
				s = faultStore(t, mem, d)
				requireExactlyOnce(t, s, q.ID, acked)
				require.Empty(t, s.Health())
			})
		}
	}
}

// TestOpenDirSyncFaultStartsReadOnly (issue 41, point 2): the directory
// sync of a marker's move while Pebble opens fails. The store opens
// read-only (reads served, writes refused naming the fault) instead of
// panicking, and turns writable by itself once the disk works; a new
// store on such a disk is refused with an error, never a panic.
func TestOpenDirSyncFaultStartsReadOnly(t *testing.T) {
	inMove := func(op errorfs.Op) bool {
		return op.Kind == errorfs.OpFileSync && op.Path == "db" && inStack("(*Marker).Move")
	}
	for _, cause := range []error{syscall.ENOSPC, syscall.EIO} {
		t.Run(fmt.Sprint(cause), func(t *testing.T) {
			mem := vfs.NewMem()
			d := &diskFault{cause: cause, trigger: inMove}
			s := faultStore(t, mem, d)
			q, err := s.CreateQueue(context.Background(), queue.QueueInfo{Name: "q", Partitions: 1})
			require.NoError(t, err)
			require.NoError(t, insert(s, q.ID, 1, 3))
			require.NoError(t, s.Close())

			d.armed.Store(true)
			s = faultStore(t, mem, d)
			defer func() { _ = s.Close() }()
			require.True(t, d.fired.Load(), "the marker's directory sync ran")
			require.Equal(t, []uint64{1, 2, 3}, ids(t, s, q.ID), "reads are served")
			require.ErrorIs(t, insert(s, q.ID, 10, 1), store.ErrUnavailable)
			require.Contains(t, s.Health(), "storage read-only")

			d.failing.Store(false)
			require.Eventually(t, func() bool { return s.WriteFault() == nil }, 20*time.Second, 10*time.Millisecond, "the store heals")
			require.NoError(t, insert(s, q.ID, 10, 1))
			require.Equal(t, []uint64{1, 2, 3, 10}, ids(t, s, q.ID))
			require.NoError(t, s.Close())
			s = faultStore(t, mem, d)
			require.Equal(t, []uint64{1, 2, 3, 10}, ids(t, s, q.ID))
		})
	}
	t.Run("new store", func(t *testing.T) {
		d := &diskFault{cause: syscall.EIO, trigger: inMove}
		d.armed.Store(true)
		_, err := Open(Config{Dir: "db", FS: errorfs.Wrap(vfs.NewMem(), d), Logger: quiet, MinFreeBytes: -1})
		require.True(t, d.fired.Load())
		require.ErrorContains(t, err, "input/output error")
	})
}

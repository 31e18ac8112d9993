package pebble

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/queue"
	"github.com/styxq/styx/internal/store"
)

// insert writes n items with ids from first through WriteAsync and its
// wait, as the logical queue does, and returns the error of either.
func insert(s *Store, qid, first uint64, n int) error {
	b := &store.Batch{QueueID: qid}
	for id := first; id < first+uint64(n); id++ {
		b.Insert(0, queue.ItemMeta{ID: id, BodyID: id, CreatedAt: t0}, queue.ItemBody{Payload: fmt.Appendf(nil, "p%d", id)}, queue.ItemErrors{})
	}
	wait, err := s.WriteAsync(context.Background(), b)
	if err != nil || wait == nil {
		return err
	}
	return wait()
}

// ids returns the item ids stored in partition 0 of qid.
func ids(t *testing.T, s *Store, qid uint64) []uint64 {
	t.Helper()
	var out []uint64
	require.NoError(t, s.LoadItems(context.Background(), qid, 0, func(m queue.ItemMeta) error {
		out = append(out, m.ID)
		return nil
	}))
	return out
}

// TestWriteErrorFailsClosedAndHeals (ADR 0015): a write error injected at
// the filesystem (every write and sync of the write-ahead log, as a full
// or failing disk gives) fails the write it hits and every later one
// before Pebble is called again (Pebble would panic on its failed log);
// reads go on; the store says why in Health; once the disk works again the
// monitor reopens the database read-write, Generation changes and writes
// resume. No write that answered success is missing afterwards, and no
// panic reaches the caller.
func TestWriteErrorFailsClosedAndHeals(t *testing.T) {
	fail := &errorfs.Toggle{Injector: errorfs.InjectorFunc(func(op errorfs.Op) error {
		if op.Kind.ReadOrWrite() == errorfs.OpIsWrite && strings.HasSuffix(op.Path, ".log") {
			return errorfs.ErrInjected
		}
		return nil
	})}
	fs := errorfs.Wrap(vfs.NewMem(), fail)
	var causes []string
	s, err := Open(Config{Dir: "db", FS: fs, Logger: quiet, CheckInterval: 10 * time.Millisecond,
		OnFault: func(c string) { causes = append(causes, c) }})
	require.NoError(t, err)
	defer s.Close()
	ctx := context.Background()
	q, err := s.CreateQueue(ctx, queue.QueueInfo{Name: "q", Partitions: 1})
	require.NoError(t, err)
	require.NoError(t, insert(s, q.ID, 1, 5))
	gen := s.Generation()

	fail.On()
	var acked []uint64
	failed := 0
	for k := range 20 {
		first := uint64(100 + 10*k)
		if err := insert(s, q.ID, first, 3); err != nil {
			require.Error(t, err)
			failed++
			continue
		}
		acked = append(acked, first, first+1, first+2)
	}
	require.Equal(t, 20, failed, "no write succeeds on a failing log")
	require.Error(t, s.WriteFault())
	require.Contains(t, s.Health(), "storage read-only")
	_, err = s.CreateQueue(ctx, queue.QueueInfo{Name: "q2", Partitions: 1})
	require.ErrorIs(t, err, store.ErrUnavailable, "catalog writes are refused too")
	// Reads go on (from the failed handle, or the read-only one).
	_, err = s.ListQueues(ctx, queue.ListQueuesParams{})
	require.NoError(t, err)

	fail.Off()
	require.Eventually(t, func() bool { return s.WriteFault() == nil }, 10*time.Second, 10*time.Millisecond, "the store heals")
	require.NotEqual(t, gen, s.Generation())
	require.Empty(t, s.Health())
	require.NoError(t, insert(s, q.ID, 1000, 2))
	got := ids(t, s, q.ID)
	for _, id := range append([]uint64{1, 2, 3, 4, 5, 1000, 1001}, acked...) {
		require.Contains(t, got, id)
	}
	require.NotEmpty(t, causes)
}

// TestOpenBelowWatermarkIsReadOnly: a store opened on a disk below its
// free-space watermark opens read-only (a read-write open would replay and
// flush its log, which needs room): it serves reads, refuses writes naming
// the disk, and becomes writable by itself once there is room.
func TestOpenBelowWatermarkIsReadOnly(t *testing.T) {
	mem := vfs.NewMem()
	s, err := Open(Config{Dir: "db", FS: mem, Logger: quiet})
	require.NoError(t, err)
	q, err := s.CreateQueue(context.Background(), queue.QueueInfo{Name: "q", Partitions: 1})
	require.NoError(t, err)
	require.NoError(t, insert(s, q.ID, 1, 3))
	require.NoError(t, s.Close())

	mem.TestingSetDiskUsage(vfs.DiskUsage{AvailBytes: 1 << 20, TotalBytes: 1 << 30})
	s, err = Open(Config{Dir: "db", FS: mem, Logger: quiet, MinFreeBytes: 64 << 20, CheckInterval: 10 * time.Millisecond})
	require.NoError(t, err)
	defer s.Close()
	require.Equal(t, []uint64{1, 2, 3}, ids(t, s, q.ID))
	err = insert(s, q.ID, 10, 1)
	require.ErrorIs(t, err, store.ErrUnavailable)
	require.ErrorContains(t, err, "disk full")
	require.Contains(t, s.Health(), "disk full")

	mem.TestingSetDiskUsage(vfs.DiskUsage{AvailBytes: 1 << 29, TotalBytes: 1 << 30})
	require.Eventually(t, func() bool { return s.InsertFault() == nil }, 10*time.Second, 10*time.Millisecond)
	require.NoError(t, insert(s, q.ID, 10, 1))
	require.Equal(t, []uint64{1, 2, 3, 10}, ids(t, s, q.ID))
}

// TestMarkerDeleteFailureOpensFaulted: when the disk fails the sync that
// deletes the clean-shutdown marker at Open (a full disk), the store opens
// all the same, faulted (writes refused, reads served), and heals; the
// reopen that heals it deletes the marker, so that a power cut after it is
// an unclean shutdown (seed 133 of TestWriteFaults failed its restart so).
func TestMarkerDeleteFailureOpensFaulted(t *testing.T) {
	mem := vfs.NewCrashableMem()
	s, err := Open(Config{Dir: "db", FS: mem, Logger: quiet, MinFreeBytes: -1})
	require.NoError(t, err)
	q, err := s.CreateQueue(t.Context(), queue.QueueInfo{Name: "q", Partitions: 1})
	require.NoError(t, err)
	require.NoError(t, insert(s, q.ID, 1, 3))
	require.NoError(t, s.Close())

	var fired atomic.Bool
	fs := errorfs.Wrap(mem, errorfs.InjectorFunc(func(op errorfs.Op) error {
		switch op.Kind {
		case errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo:
			if strings.HasSuffix(op.Path, ".log") && fired.CompareAndSwap(false, true) {
				return syscall.ENOSPC
			}
		}
		return nil
	}))
	s, err = Open(Config{Dir: "db", FS: fs, Logger: quiet, MinFreeBytes: -1, CheckInterval: 10 * time.Millisecond})
	require.NoError(t, err, "a failed sync at Open does not keep the store from opening")
	require.True(t, fired.Load(), "the fault fired")
	assert.False(t, s.Unclean(), "the last shutdown was clean")
	assert.Equal(t, []uint64{1, 2, 3}, ids(t, s, q.ID), "reads are served")
	require.Eventually(t, func() bool { return s.WriteFault() == nil }, 10*time.Second, 10*time.Millisecond, "the store heals")
	require.NoError(t, insert(s, q.ID, 4, 1))

	// The healing reopen deleted the marker: a power cut now is unclean.
	mem = mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0, RNG: rand.New(rand.NewPCG(5, 6))})
	require.NoError(t, s.Close())
	s, err = Open(Config{Dir: "db", FS: mem, Logger: quiet, MinFreeBytes: -1})
	require.NoError(t, err)
	defer s.Close()
	assert.True(t, s.Unclean(), "a power cut after the healing reopen")
	assert.Equal(t, []uint64{1, 2, 3, 4}, ids(t, s, q.ID))
}

// stallFS stalls the creation of sstables (a flush's output) while armed,
// until release is closed.
type stallFS struct {
	vfs.FS
	armed   *atomic.Bool
	stalled chan struct{} // closed at the first stalled creation
	once    *sync.Once
	release chan struct{}
}

func (fs stallFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	if fs.armed.Load() && strings.HasSuffix(name, ".sst") {
		fs.once.Do(func() { close(fs.stalled) })
		<-fs.release
	}
	return fs.FS.Create(name, c)
}

// TestStuckCloseAnswersTheFault: when a reopen cannot close the faulted
// handle in time (Pebble's Close waits for a flush that does not end),
// every call answers the fault: none reaches the half-closed handle, whose
// reads panic ("pebble: closed" ended the server in the syscall fault
// suite, fsync-EIO-from-40). Once that Close ends, the store reopens and
// heals.
func TestStuckCloseAnswersTheFault(t *testing.T) {
	defer func(d time.Duration) { closeTimeout = d }(closeTimeout)
	closeTimeout = 50 * time.Millisecond
	fs := stallFS{FS: vfs.NewMem(), armed: new(atomic.Bool), stalled: make(chan struct{}), once: new(sync.Once), release: make(chan struct{})}
	s, err := Open(Config{Dir: "db", FS: fs, Logger: quiet, MinFreeBytes: -1, CheckInterval: 10 * time.Millisecond})
	require.NoError(t, err)
	ctx := context.Background()
	q, err := s.CreateQueue(ctx, queue.QueueInfo{Name: "q", Partitions: 1})
	require.NoError(t, err)
	require.NoError(t, insert(s, q.ID, 1, 3))

	fs.armed.Store(true)
	_, err = s.db.AsyncFlush()
	require.NoError(t, err)
	<-fs.stalled
	// A write fails: the monitor reopens, and Close waits for the flush.
	s.setFault("sync", syscall.EIO)
	require.Eventually(t, func() bool { return s.fault.Load().broken }, 10*time.Second, 10*time.Millisecond, "the reopen gives up")

	_, err = s.ListQueues(ctx, queue.ListQueuesParams{})
	require.ErrorIs(t, err, store.ErrUnavailable, "a read answers the fault")
	err = s.LoadItems(ctx, q.ID, 0, func(queue.ItemMeta) error { return nil })
	require.ErrorIs(t, err, store.ErrUnavailable)
	require.ErrorIs(t, insert(s, q.ID, 10, 1), store.ErrUnavailable)
	require.Contains(t, s.Health(), "storage")

	// The flush, and with it the abandoned Close, end: the store reopens
	// and heals, with everything it held.
	fs.armed.Store(false)
	close(fs.release)
	require.Eventually(t, func() bool { return s.WriteFault() == nil }, 10*time.Second, 10*time.Millisecond, "the store heals")
	require.Empty(t, s.Health())
	require.NoError(t, insert(s, q.ID, 4, 1))
	assert.Equal(t, []uint64{1, 2, 3, 4}, ids(t, s, q.ID))
	require.NoError(t, s.Close())
}

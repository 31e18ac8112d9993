package backup_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	styx "github.com/styxq/styx"
	"github.com/styxq/styx/daemon"
	"github.com/styxq/styx/internal/backend/embedded/pebble"
	"github.com/styxq/styx/internal/backup"
	"github.com/styxq/styx/internal/clock"
	"github.com/styxq/styx/internal/servertest"
	"github.com/styxq/styx/internal/store"
	pb "github.com/styxq/styx/styxpb"
)

var ctx = context.Background()

// pebbleAt is a Pebble backend on dir: every server started on it sees
// what the ones before wrote.
func pebbleAt(dir string) servertest.Backend {
	return servertest.Backend{Name: daemon.StoragePebble, Open: func(t *testing.T) store.Store {
		s, err := pebble.Open(pebble.Config{Dir: dir, Logger: servertest.TestLogger()})
		require.NoError(t, err)
		return s
	}}
}

// TestBackupUnderLoadAndRestore takes a backup over the API while a
// producer runs, restores it into a new directory and starts a server on
// it: every item acknowledged before the backup began is there, and a
// lease handle the old server handed out after the backup names no item
// of the restored server, whose clock here is the old one's (so the ids
// would repeat without the restore's id move). On PostgreSQL the call is
// 501 naming pg_basebackup and pg_dump.
func TestBackupUnderLoadAndRestore(t *testing.T) {
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		if b.Postgres() {
			s, _ := servertest.StartAuth(t, b)
			_, err := s.C.StorageBackup(ctx, &bytes.Buffer{}, nil)
			servertest.RequireCode(t, err, 501, "pg_basebackup", "pg_dump")
			return
		}
		s := servertest.StartFake(t, b)
		clk := s.Clock
		s.CreateQueue(&pb.QueueInfo{QueueName: "late", LeaseTimeout: "1m", ExpireTimeout: "24h", RequestedPartitions: 1})
		s.CreateQueue(&pb.QueueInfo{QueueName: "q", LeaseTimeout: "1m", ExpireTimeout: "24h", RequestedPartitions: 1})
		var acked atomic.Int64
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := int64(0); ; n += 10 {
				select {
				case <-stop:
					return
				default:
				}
				req := &pb.QueueProduceRequest{QueueName: "q", RequestTimeout: "1m"}
				for i := range int64(10) {
					req.Items = append(req.Items, &pb.QueueProduceItem{Bytes: fmt.Appendf(nil, "p-%d", n+i)})
				}
				if err := s.C.QueueProduce(ctx, req); err != nil {
					t.Errorf("produce: %v", err)
					return
				}
				acked.Store(n + 10)
			}
		}()
		servertest.Eventually(t, func() bool { return acked.Load() >= 200 }, "the producer should produce")
		before := acked.Load()
		var buf bytes.Buffer
		var lastProgress atomic.Int64
		n, err := s.C.StorageBackup(ctx, &buf, func(written, total int64) {
			require.Positive(t, total)
			lastProgress.Store(written)
		})
		require.NoError(t, err)
		close(stop)
		wg.Wait()
		require.Equal(t, int64(buf.Len()), n)
		require.Equal(t, n, lastProgress.Load())

		// After the backup the old server hands out a lease handle of an
		// item the backup does not hold.
		s.Produce("late", "after")
		stale := s.Lease("late", 1).Items[0]

		dir := filepath.Join(t.TempDir(), "restored")
		restored, err := backup.Restore(ctx, bytes.NewReader(buf.Bytes()), dir, clk.Now(), nil)
		require.NoError(t, err)
		require.Equal(t, 2, restored.Queues)
		require.Equal(t, pebble.FormatVersion, restored.Manifest.StoreFormat)

		r := &servertest.Server{T: t, B: pebbleAt(dir)}
		r.Configure = func(cfg *daemon.Config) { cfg.Clock = clock.NewFake(clk.Now()) }
		r.Boot()
		t.Cleanup(r.Stop)
		got := map[string]bool{}
		for _, it := range r.Items("q") {
			got[string(it.Payload)] = true
		}
		for i := range before {
			require.True(t, got[fmt.Sprintf("p-%d", i)], "item p-%d was acknowledged before the backup began, and is not in it", i)
		}
		// The stale handle names no item of the restored server, not even
		// one produced and leased there now.
		r.Produce("late", "fresh")
		fresh := r.Lease("late", 1).Items[0]
		require.NotEqual(t, stale.Id, fresh.Id, "the restored server handed out an id the old one had handed out after the backup")
		err = r.C.QueueComplete(ctx, &pb.QueueCompleteRequest{QueueName: "late", Partition: 0, Ids: []string{stale.Id}})
		servertest.RequireCode(t, err, 400)
		require.Equal(t, styx.ReasonNotLeased, styx.ErrorReason(err))
	})
}

// TestBackupScope: only an admin key without queue patterns takes a
// backup, and the call is audited.
func TestBackupScope(t *testing.T) {
	s, _ := servertest.StartAuth(t, servertest.Backends(t)[1])
	consumer := s.Client(s.NewKey("consumer", []string{"produce", "consume", "read", "dead"}))
	_, err := consumer.StorageBackup(ctx, &bytes.Buffer{}, nil)
	servertest.RequireCode(t, err, 403)
	narrow := s.Client(s.NewKey("narrow", []string{"admin"}, "q*"))
	_, err = narrow.StorageBackup(ctx, &bytes.Buffer{}, nil)
	servertest.RequireCode(t, err, 403)
	var buf bytes.Buffer
	_, err = s.C.StorageBackup(ctx, &buf, nil)
	require.NoError(t, err)
	m, err := backup.Read(&buf, func(string, io.Reader) error { return nil })
	require.NoError(t, err)
	require.NotEmpty(t, m.Files)
	servertest.Eventually(t, func() bool { return strings.Contains(s.Logs.String(), "audit: storage/backup") }, "the backup should be audited")
}

// TestRestoreRefuses: a non-empty directory, an archive cut short and a
// corrupted one are refused, and leave nothing behind.
func TestRestoreRefuses(t *testing.T) {
	s := servertest.Start(t, servertest.Backends(t)[0])
	s.CreateQueue(&pb.QueueInfo{QueueName: "q", LeaseTimeout: "1m", ExpireTimeout: "24h", RequestedPartitions: 1})
	s.Produce("q", "a", "b")
	var buf bytes.Buffer
	_, err := s.C.StorageBackup(ctx, &buf, nil)
	require.NoError(t, err)
	full := buf.Bytes()

	busy := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(busy, "x"), nil, 0o600))
	_, err = backup.Restore(ctx, bytes.NewReader(full), busy, time.Now(), nil)
	require.ErrorContains(t, err, "not empty")

	for name, archive := range map[string][]byte{
		"cut":     full[:len(full)-2048],
		"corrupt": corrupt(full),
	} {
		dir := filepath.Join(t.TempDir(), name)
		_, err := backup.Restore(ctx, bytes.NewReader(archive), dir, time.Now(), nil)
		require.ErrorIs(t, err, backup.ErrInvalid, name)
		_, statErr := os.Stat(dir)
		require.True(t, os.IsNotExist(statErr), "%s: the directory should be removed", name)
	}
	dir := filepath.Join(t.TempDir(), "ok")
	_, err = backup.Restore(ctx, bytes.NewReader(full), dir, time.Now(), nil)
	require.NoError(t, err)
}

// corrupt returns a copy of archive with one byte of its first store file
// changed.
func corrupt(archive []byte) []byte {
	out := bytes.Clone(archive)
	out[512+10] ^= 0xff // the first entry's contents start after its 512-byte header
	return out
}

// TestConcurrentBackups: backups taken at once each get a whole archive
// (one's checkpoint is not taken for another's leftover).
func TestConcurrentBackups(t *testing.T) {
	dir := t.TempDir()
	s := servertest.Start(t, pebbleAt(dir))
	s.CreateQueue(&pb.QueueInfo{QueueName: "q", LeaseTimeout: "1m", ExpireTimeout: "24h", RequestedPartitions: 1})
	s.Produce("q", "a", "b", "c")
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Go(func() {
			var buf bytes.Buffer
			if _, err := s.C.StorageBackup(ctx, &buf, nil); err != nil {
				errs <- err
				return
			}
			_, err := backup.Read(&buf, func(string, io.Reader) error { return nil })
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, e := range entries {
		require.False(t, strings.HasPrefix(e.Name(), "styx-checkpoint-"), "a checkpoint was left behind: %s", e.Name())
	}
}

// blockingWriter blocks its first Write until release is closed, after
// saying so on started.
type blockingWriter struct {
	buf     bytes.Buffer
	started chan struct{}
	release chan struct{}
	once    sync.Once
}

func (w *blockingWriter) Write(p []byte) (int, error) {
	w.once.Do(func() {
		close(w.started)
		<-w.release
	})
	return w.buf.Write(p)
}

// TestBackupDoesNotStopTheQueues: while a backup's client reads nothing,
// the queues produce, lease and complete as before, and what they do then
// is not in the backup (it holds the store as the call found it).
func TestBackupDoesNotStopTheQueues(t *testing.T) {
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		if b.Postgres() {
			t.Skip("no backup on PostgreSQL (TestBackupUnderLoadAndRestore checks its 501)")
		}
		s := servertest.Start(t, b)
		s.CreateQueue(&pb.QueueInfo{QueueName: "q", LeaseTimeout: "1m", ExpireTimeout: "24h", RequestedPartitions: 1})
		s.Produce("q", "before-1", "before-2")
		w := &blockingWriter{started: make(chan struct{}), release: make(chan struct{})}
		done := make(chan error, 1)
		go func() {
			_, err := s.C.StorageBackup(ctx, w, nil)
			done <- err
		}()
		<-w.started
		for i := range 20 {
			s.Produce("q", fmt.Sprintf("during-%d", i))
		}
		leased := s.Lease("q", 5)
		s.Complete("q", leased.Partition, leased.Items[0].Id)
		close(w.release)
		require.NoError(t, <-done)

		dir := filepath.Join(t.TempDir(), "restored")
		_, err := backup.Restore(ctx, bytes.NewReader(w.buf.Bytes()), dir, time.Now(), nil)
		require.NoError(t, err)
		r := servertest.Start(t, pebbleAt(dir))
		var got []string
		for _, it := range r.Items("q") {
			got = append(got, string(it.Payload))
		}
		require.ElementsMatch(t, []string{"before-1", "before-2"}, got)
	})
}

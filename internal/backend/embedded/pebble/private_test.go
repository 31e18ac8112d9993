package pebble

import (
	"bytes"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/queue"
)

// withUmask sets the process's umask for the rest of the test. The umask
// is the process's: a test that calls it must not be parallel.
func withUmask(t *testing.T, mask int) {
	old := syscall.Umask(mask)
	t.Cleanup(func() { syscall.Umask(old) })
}

// modes returns the mode of everything under root (root included), by
// path relative to it.
func modes(t *testing.T, root string) map[string]fs.FileMode {
	t.Helper()
	out := map[string]fs.FileMode{}
	require.NoError(t, filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		out[rel] = info.Mode()
		return nil
	}))
	return out
}

// requirePrivate checks that every file under root is 0600 and every
// directory 0700.
func requirePrivate(t *testing.T, root string) {
	t.Helper()
	for name, mode := range modes(t, root) {
		if mode.IsDir() {
			require.Equal(t, privateDirMode, mode.Perm(), "directory %s is %#o", name, mode.Perm())
		} else {
			require.Equal(t, privateFileMode, mode.Perm(), "file %s is %#o", name, mode.Perm())
		}
	}
}

// lockedBuffer is a log destination that Pebble's goroutines may share.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// TestFilesPrivateWhateverTheUmask (issue 36): with the usual umask 022,
// which leaves files 0644, every file of a store (the log, sstables,
// MANIFEST, OPTIONS, the markers, LOCK) is 0600 and every directory
// (the data directory and its missing parent) 0700, after a flush, a
// compaction and a reopen, on the disk and on an errorfs wrapper of it
// (what the fault-injection tests use). Not parallel: it sets the umask.
func TestFilesPrivateWhateverTheUmask(t *testing.T) {
	withUmask(t, 0o022)
	for _, c := range []struct {
		name string
		fs   vfs.FS
	}{
		{"disk", nil},
		{"errorfs", errorfs.Wrap(vfs.Default, errorfs.InjectorFunc(func(errorfs.Op) error { return nil }))},
	} {
		t.Run(c.name, func(t *testing.T) {
			root := filepath.Join(t.TempDir(), "parent")
			dir := filepath.Join(root, "data")
			ctx := t.Context()
			for round := range 2 {
				s, err := Open(Config{Dir: dir, FS: c.fs, Logger: quiet})
				require.NoError(t, err)
				q, err := s.CreateQueue(ctx, queue.QueueInfo{Name: "q" + string(rune('a'+round)), Partitions: 3})
				require.NoError(t, err)
				fill(t, s, q.ID, 100)
				compactAll(t, s)
				require.NoError(t, s.Close())
			}

			var kinds []string
			for name := range modes(t, dir) {
				for _, k := range []string{".log", ".sst", "MANIFEST-", "OPTIONS-", "marker.", "LOCK"} {
					if strings.Contains(name, k) {
						kinds = append(kinds, k)
					}
				}
			}
			require.Subset(t, kinds, []string{".log", ".sst", "MANIFEST-", "OPTIONS-", "marker.", "LOCK"})
			requirePrivate(t, root)
		})
	}
}

// TestDataDirTightenedOrRefused (issue 36): an existing data directory that
// others may access is made 0700 when it is the server user's and empty or
// a store (whose files an earlier version left 0644 are made 0600), with a
// warning; otherwise Open refuses, naming the directory, its mode and the
// chmod to run, and changes nothing.
func TestDataDirTightenedOrRefused(t *testing.T) {
	withUmask(t, 0o022)
	open := func(dir string) (*lockedBuffer, error) {
		var logs lockedBuffer
		s, err := Open(Config{Dir: dir, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		if err == nil {
			require.NoError(t, s.Close())
		}
		return &logs, err
	}
	mode := func(path string) fs.FileMode {
		st, err := os.Stat(path)
		require.NoError(t, err)
		return st.Mode().Perm()
	}
	opened := func(t *testing.T, dir string) string {
		require.NoError(t, os.Mkdir(dir, 0o755))
		require.NoError(t, os.Chmod(dir, 0o755))
		return dir
	}

	t.Run("empty", func(t *testing.T) {
		dir := opened(t, filepath.Join(t.TempDir(), "data"))
		logs, err := open(dir)
		require.NoError(t, err)
		require.Equal(t, privateDirMode, mode(dir))
		require.Contains(t, logs.String(), "the data directory was open to other users: made it 0700")
		require.Contains(t, logs.String(), "was=0755")
		requirePrivate(t, dir)
	})

	t.Run("store of an earlier version", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "data")
		_, err := open(dir)
		require.NoError(t, err)
		// What an earlier version left: everything readable by all.
		for name := range modes(t, dir) {
			perm := fs.FileMode(0o644)
			if name == "." {
				perm = 0o755
			}
			require.NoError(t, os.Chmod(filepath.Join(dir, name), perm))
		}
		require.NoError(t, os.Mkdir(filepath.Join(dir, "archive"), 0o755))
		logs, err := open(dir)
		require.NoError(t, err)
		requirePrivate(t, dir)
		require.Contains(t, logs.String(), "made it 0700")
		require.Contains(t, logs.String(), "made them 0600")
		// Nothing to say the next time.
		logs, err = open(dir)
		require.NoError(t, err)
		require.NotContains(t, logs.String(), "open to other users")
	})

	refused := func(t *testing.T, dir string, why string) {
		t.Helper()
		_, err := open(dir)
		require.Error(t, err)
		require.ErrorContains(t, err, "the data directory "+dir+" is mode 0755")
		require.ErrorContains(t, err, why)
		require.ErrorContains(t, err, "run `chmod 700 "+dir+"`")
		require.Equal(t, fs.FileMode(0o755), mode(dir))
		_, err = os.Stat(filepath.Join(dir, "LOCK"))
		require.ErrorIs(t, err, fs.ErrNotExist, "Pebble must not have started")
	}

	t.Run("holds something else", func(t *testing.T) {
		dir := opened(t, filepath.Join(t.TempDir(), "home"))
		require.NoError(t, os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("x"), 0o644))
		refused(t, dir, "it holds files that are not a Styx store")
		require.Equal(t, fs.FileMode(0o644), mode(filepath.Join(dir, "notes.txt")))
	})

	t.Run("another user's", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("needs root to give the directory to another user")
		}
		dir := opened(t, filepath.Join(t.TempDir(), "data"))
		require.NoError(t, os.Chown(dir, 65534, 65534))
		refused(t, dir, "it belongs to user 65534, not to this server's user (0)")
	})

	t.Run("a file", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "data")
		require.NoError(t, os.WriteFile(path, nil, 0o600))
		_, err := open(path)
		require.ErrorContains(t, err, "is not a directory")
	})
}

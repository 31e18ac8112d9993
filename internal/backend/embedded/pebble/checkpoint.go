package pebble

import (
	"context"
	"fmt"
	"io"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	pebbledb "github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// Online snapshots of the store (issue 47; internal/backup streams them).

// FormatVersion is the store format this package writes ("styx-store-2",
// ADR 0020): a backup's manifest names it, and a restore refuses a backup
// of another format.
const FormatVersion = formatValue

// checkpointPrefix names the directories Checkpoint makes inside the data
// directory (beside Pebble's files, which Pebble alone reads by name).
const checkpointPrefix = "styx-checkpoint-"

// Checkpoint is a consistent copy of the store at one moment, made by
// Store.Checkpoint: a Pebble database in a directory of its own (its
// sstables hard-linked to the store's where the filesystem allows), which
// the store's later writes never change. Read its files with Files and
// Open; Close removes it. Not safe for concurrent use.
type Checkpoint struct {
	fs    vfs.FS
	dir   string
	files []CheckpointFile
}

// CheckpointFile is one file of a Checkpoint: its name (no directory) and
// its size in bytes.
type CheckpointFile struct {
	Name string
	Size int64
}

// Checkpoint makes a Checkpoint of the store: every write committed before
// the call (every item whose write was answered) is in it, with the
// write-ahead log flushed and synced first. It holds the store's gate only
// while Pebble links or copies the files (Pebble blocks no commit for
// long: it holds its own lock only to read the current version), so the
// queues' loops go on writing meanwhile. Checkpoints left behind by a crash
// (a directory styx-checkpoint-* in the data directory that no Checkpoint
// of this process holds open) are removed first; several may be open at
// once.
// Returns ErrClosed after Close, and the store's write fault when it
// refuses writes (the checkpoint syncs the log).
func (s *Store) Checkpoint(ctx context.Context) (*Checkpoint, error) {
	if err := s.enterWrite(ctx); err != nil {
		return nil, err
	}
	defer s.exit()
	checkpoints.mu.Lock()
	if names, err := s.fs.List(s.dir); err == nil {
		for _, n := range names {
			if p := s.fs.PathJoin(s.dir, n); strings.HasPrefix(n, checkpointPrefix) && !checkpoints.open[p] {
				_ = s.fs.RemoveAll(p)
			}
		}
	}
	dir := s.fs.PathJoin(s.dir, checkpointPrefix+strconv.FormatInt(time.Now().UnixNano(), 10))
	for checkpoints.open[dir] {
		dir += "x"
	}
	checkpoints.open[dir] = true
	checkpoints.mu.Unlock()
	c := &Checkpoint{fs: s.fs, dir: dir}
	if err := s.db.Checkpoint(dir, pebbledb.WithFlushedWAL()); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("pebble: checkpoint: %w", err)
	}
	names, err := s.fs.List(dir)
	if err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("pebble: checkpoint: list %s: %w", dir, err)
	}
	slices.Sort(names)
	for _, n := range names {
		st, err := s.fs.Stat(s.fs.PathJoin(dir, n))
		if err != nil {
			_ = c.Close()
			return nil, fmt.Errorf("pebble: checkpoint: %w", err)
		}
		if st.IsDir() {
			continue
		}
		c.files = append(c.files, CheckpointFile{Name: n, Size: st.Size()})
	}
	return c, nil
}

// checkpoints are the checkpoint directories open in this process (made
// and not yet closed), which the removal of leftovers spares: two backups
// may run at once. mu is a leaf, held only around the directory listing.
var checkpoints = struct {
	mu   sync.Mutex
	open map[string]bool
}{open: map[string]bool{}}

// Files returns the checkpoint's files, in name order.
func (c *Checkpoint) Files() []CheckpointFile { return c.files }

// Size returns the total size of the checkpoint's files, in bytes.
func (c *Checkpoint) Size() int64 {
	var n int64
	for _, f := range c.files {
		n += f.Size
	}
	return n
}

// Open opens the checkpoint's file name for reading; the caller closes it.
func (c *Checkpoint) Open(name string) (io.ReadCloser, error) {
	if name != path.Base(name) {
		return nil, fmt.Errorf("pebble: checkpoint: %q is not a file name", name)
	}
	return c.fs.Open(c.fs.PathJoin(c.dir, name))
}

// Close removes the checkpoint's directory. Safe to call twice.
func (c *Checkpoint) Close() error {
	if c.dir == "" {
		return nil
	}
	dir := c.dir
	c.dir = ""
	err := c.fs.RemoveAll(dir)
	checkpoints.mu.Lock()
	delete(checkpoints.open, dir)
	checkpoints.mu.Unlock()
	return err
}

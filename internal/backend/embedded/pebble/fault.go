package pebble

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	pebbledb "github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/styxq/styx/internal/store"
)

// Storage faults (ADRs 0015 and 0022). Pebble cannot survive some failed
// file calls: a failed write-ahead-log write makes the next commit panic
// while holding the commit pipeline's lock, which leaves the database
// unusable and unclosable; an error while it rotates its log, or a failed
// directory sync while a marker moves, panics, the first with its mutex
// released, which aborts the process. So Pebble never sees such an error,
// and the store never writes through a handle after one:
//
//   - Each database handle writes through its own faultFS; the first
//     failing write, sync, creation, rename or close of a file (the log, a
//     flush's sstable, the MANIFEST, the directory) marks the store faulted
//     and freezes the handle's disk: the failed call and every later one
//     report success to Pebble and leave the disk as a crash at that
//     moment would have (files created from then on live in memory).
//     A failed SyncWait and a recovered panic fault the store too.
//   - A faulted store refuses every write (store.ErrUnavailable naming the
//     cause) before calling Pebble, and reports failed any write that
//     completes after the fault; reads go on.
//   - The monitor goroutine then reopens the database read-only from the
//     disk (Pebble's crash recovery) and, once the free space is at least
//     the watermark again and the disk works (a synced write of the format
//     marker through the new handle proves it: see openDB), read-write:
//     writes resume without a restart. Generation counts the reopenings; each queue
//     reloads its state from the store when it changes.
//   - The free-space watermark (Config.MinFreeBytes) refuses the calls that
//     add items before the disk is full, so a flush and a restart always
//     have room. A store opened on a disk below it opens read-only, and so
//     does one whose disk fails while it opens.

// DefaultCheckInterval is how often the monitor reads the free space and
// tries to heal a faulted store.
const DefaultCheckInterval = time.Second

// drainTimeout bounds how long a reopen waits for the calls in progress
// (pending syncs among them) before giving up: the store then stays
// read-only through its current handle until the process restarts.
const drainTimeout = 10 * time.Second

// closeTimeout bounds how long closeDB waits for Pebble's Close; a
// variable for the tests.
var closeTimeout = drainTimeout

// faultState is the store's health, replaced whole (atomic pointer).
type faultState struct {
	// err refuses every write: a failed write or sync, a read-only open.
	// Nil when writable.
	err error
	// space refuses the calls that add items: the free space is below the
	// watermark. Nil when there is room.
	space error
	// broken: the handle could not be closed (a panic inside Pebble holds
	// its commit lock); only a restart heals it.
	broken bool
	// readOnly: the database is open read-only.
	readOnly bool
}

// gate counts the calls in progress on the database handle; a reopen holds
// it (new calls wait) until the handle is replaced, and Close closes it.
type gate struct {
	mu     sync.Mutex
	cond   sync.Cond
	n      int
	held   bool
	closed bool
}

func (g *gate) init() { g.cond.L = &g.mu }

// enter registers a call, waiting while a reopen holds the gate.
func (g *gate) enter() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	for g.held && !g.closed {
		g.cond.Wait()
	}
	if g.closed {
		return store.ErrClosed
	}
	g.n++
	return nil
}

// exit ends a call.
func (g *gate) exit() {
	g.mu.Lock()
	if g.n--; g.n == 0 {
		g.cond.Broadcast()
	}
	g.mu.Unlock()
}

// hold makes new calls wait and waits up to timeout (0: forever) for the
// calls in progress to end; it reports whether they did. Either way the
// caller must release.
func (g *gate) hold(timeout time.Duration) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.held = true
	var expired atomic.Bool
	if timeout > 0 {
		t := time.AfterFunc(timeout, func() {
			expired.Store(true)
			g.mu.Lock()
			g.cond.Broadcast()
			g.mu.Unlock()
		})
		defer t.Stop()
	}
	for g.n > 0 && !expired.Load() {
		g.cond.Wait()
	}
	return g.n == 0
}

// release lets calls in again.
func (g *gate) release() {
	g.mu.Lock()
	g.held = false
	g.cond.Broadcast()
	g.mu.Unlock()
}

// close refuses new calls (store.ErrClosed, also to those waiting) and
// waits for the calls in progress to end.
func (g *gate) close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closed = true
	g.cond.Broadcast()
	for g.n > 0 {
		g.cond.Wait()
	}
}

// enter registers a call in progress on the database, failing if the store
// is closed; it waits while a reopen replaces the handle. A successful
// enter must be paired with s.exit.
func (s *Store) enterCall() error {
	if err := s.gate.enter(); err != nil {
		return err
	}
	if s.db == nil {
		s.gate.exit()
		return s.fault.Load().err
	}
	return nil
}

// exit ends a call registered by enter.
func (s *Store) exit() { s.gate.exit() }

// writable returns the error a write is refused with, or nil.
func (s *Store) writable() error {
	if f := s.fault.Load(); f.err != nil {
		return f.err
	}
	return nil
}

// WriteFault returns the error every write is refused with while the store
// is read-only (after a failed write or sync, or opened on a disk below the
// free-space watermark), else nil (store.Guard).
func (s *Store) WriteFault() error { return s.writable() }

// InsertFault returns the error a call that adds items (produce, import, a
// redrive into a queue) is refused with: WriteFault's, or the free-space
// watermark's, else nil (store.Guard).
func (s *Store) InsertFault() error {
	if s.minFree > 0 && s.written.Load() >= s.minFree/8 {
		// Much was written since the last reading: read the free space
		// now, not at the next tick (a fast producer fills a small disk
		// within a second).
		s.written.Store(0)
		_, space := s.space()
		s.setSpace(space)
	}
	f := s.fault.Load()
	if f.err != nil {
		return f.err
	}
	return f.space
}

// Generation counts the times the database was reopened (store.Guard): a
// queue reloads its state from the store when it changes, since writes
// that were applied but never synced are gone after a reopen.
func (s *Store) Generation() uint64 { return s.gen.Load() }

// Health describes the store for /health (store.Guard): "" when it is
// writable with room, else why it is degraded ("disk full: 12 MB free, the
// watermark is 128 MB; produces are refused").
func (s *Store) Health() string {
	f := s.fault.Load()
	switch {
	case f.broken:
		return "storage read-only until restart: " + cause(f.err)
	case f.err != nil && errors.Is(f.err, errDiskFull):
		return cause(f.err) + "; storage read-only"
	case f.err != nil:
		return "storage read-only: " + cause(f.err)
	case f.space != nil:
		return cause(f.space)
	}
	return ""
}

// errDiskFull is in the chain of every fault and refusal for want of disk
// space (a write that failed with ENOSPC, free space under the watermark):
// Health words those as "disk full".
var errDiskFull = errors.New("disk full")

// cause returns the cause of a classified storage error (without its
// "storage unavailable; pebble: " prefix).
func cause(err error) string {
	var e *store.Error
	if errors.As(err, &e) {
		return e.Err.Error()
	}
	return err.Error()
}

// setFault marks the store faulted by cause (once; the first cause is
// kept) and wakes the monitor. Any goroutine.
func (s *Store) setFault(kind string, cause error) {
	for {
		old := s.fault.Load()
		if old.err != nil {
			return
		}
		nf := *old
		err := fmt.Errorf("%s failed, writes are refused until it heals: %w", kind, cause)
		if errors.Is(cause, syscall.ENOSPC) {
			err = fmt.Errorf("%w: %w", errDiskFull, err)
		}
		nf.err = store.Unavailable("pebble", err)
		if s.fault.CompareAndSwap(old, &nf) {
			s.log.Error("storage fault: the store refuses writes until it heals", "cause", kind, "error", cause)
			if s.onFault != nil {
				s.onFault(kind)
			}
			select {
			case s.poke <- struct{}{}:
			default:
			}
			return
		}
	}
}

// setSpace records whether the free space is below the watermark.
func (s *Store) setSpace(space error) {
	for {
		old := s.fault.Load()
		if (old.space == nil) == (space == nil) {
			if old.space == nil || old.space.Error() == space.Error() {
				return
			}
		}
		nf := *old
		nf.space = space
		if s.fault.CompareAndSwap(old, &nf) {
			if space != nil && old.space == nil {
				s.log.Warn("free space below the watermark: produces are refused", "error", space)
				if s.onFault != nil {
					s.onFault("space")
				}
			} else if space == nil {
				s.log.Info("free space above the watermark again: produces resume")
			}
			return
		}
	}
}

// space reads the free space of the data directory and returns the error
// the watermark refuses inserts with, nil when there is room or the
// filesystem does not say (an in-memory one).
func (s *Store) space() (free uint64, err error) {
	if s.minFree <= 0 {
		return 0, nil
	}
	u, uerr := s.fs.GetDiskUsage(s.dir)
	if uerr != nil {
		return 0, nil
	}
	if int64(u.AvailBytes) < s.minFree {
		return u.AvailBytes, store.Unavailable("pebble", fmt.Errorf("%w: %d MB free in %s, the watermark is %d MB; calls that add items are refused until space is freed",
			errDiskFull, u.AvailBytes>>20, s.dir, s.minFree>>20))
	}
	return u.AvailBytes, nil
}

// roomToReopen reports whether the disk has room for a read-write open:
// replaying the log flushes it, and Pebble's Open waits for that flush
// however often it fails, so it needs the watermark and at least four
// memtables free (the most the log holds unflushed). True when the
// filesystem does not say.
func (s *Store) roomToReopen() bool {
	u, err := s.fs.GetDiskUsage(s.dir)
	if err != nil {
		return true
	}
	return int64(u.AvailBytes) >= max(s.minFree, 4*int64(s.opts.MemTableSize))
}

// monitor reads the free space every interval and heals a faulted store:
// read-only at once (Pebble must not write through a failed handle), then
// read-write once there is room. It ends when the store closes.
func (s *Store) monitor(interval time.Duration) {
	defer close(s.monitorDone)
	t := time.NewTicker(interval)
	defer t.Stop()
	// A read-write reopen that fails, or whose store faults again within a
	// minute, is tried again after a delay doubling up to a minute.
	var retryAt, healedAt time.Time
	backoff := interval
	for {
		select {
		case <-s.stopMonitor:
			return
		case <-t.C:
		case <-s.poke:
		}
		s.written.Store(0)
		_, space := s.space()
		s.setSpace(space)
		f := s.fault.Load()
		now := time.Now()
		switch {
		case f.broken:
			if s.closedLate() {
				retryAt = now // the next tick reopens
			}
		case f.err == nil:
			if !healedAt.IsZero() && now.Sub(healedAt) > time.Minute {
				backoff, healedAt = interval, time.Time{}
			}
		case !f.readOnly:
			s.reopen(true)
		case (space == nil || s.db == nil) && s.roomToReopen() && !now.Before(retryAt):
			if s.reopen(false) {
				healedAt = now
			}
			retryAt = now.Add(backoff)
			backoff = min(2*backoff, time.Minute)
		}
	}
}

// reopen replaces the database handle: read-only, or read-write. It holds
// the gate (calls wait) while the handle is swapped, and reports whether
// the store is writable afterwards.
func (s *Store) reopen(readOnly bool) bool {
	if !s.gate.hold(drainTimeout) {
		s.gate.release()
		s.markBroken(errors.New("calls did not end within 10s"))
		return false
	}
	defer s.gate.release()
	if late, err := closeDB(s.db); err != nil {
		// Pebble's Close marks the handle closed before it waits for its
		// flushes and commits, so a read through it would panic ("pebble:
		// closed", which ended the server from a goroutine that reads the
		// catalog, in the syscall fault suite): no call uses it again, and
		// every call answers the fault until the abandoned Close ends
		// (the monitor then reopens the database) or, if it never does, a
		// restart.
		s.db = nil
		s.lateClose = late
		s.markBroken(err)
		return false
	}
	db, failure, err := s.openWithin(readOnly, openTimeout)
	if errors.Is(err, errOpenStuck) {
		s.db = nil
		s.markBroken(err)
		return false
	}
	if failure != nil && !readOnly {
		// A file failed while the database opened (its flush, say):
		// this handle must not be written through either.
		if err == nil {
			_, _ = closeDB(db)
		}
		err = fmt.Errorf("the disk failed while reopening: %w", failure)
	}
	if err != nil && !readOnly {
		// No room for the replay's flush yet, say: read-only again.
		s.log.Warn("storage: reopening read-write failed; staying read-only", "error", err)
		db, _, err = s.openWithin(true, openTimeout)
		readOnly = true
		if errors.Is(err, errOpenStuck) {
			s.db = nil
			s.markBroken(err)
			return false
		}
	}
	if err != nil {
		// No handle at all: every call answers the fault until a later
		// reopen succeeds.
		s.db = nil
		s.fault.Store(&faultState{space: s.fault.Load().space, readOnly: true,
			err: store.Unavailable("pebble", fmt.Errorf("cannot open the database: %w", err))})
		s.log.Error("storage: cannot reopen the database; retrying", "error", err)
		return false
	}
	s.db = db
	s.gen.Add(1)
	nf := &faultState{space: s.fault.Load().space, readOnly: readOnly}
	if readOnly {
		nf.err = s.readOnlyErr(s.fault.Load().err)
	}
	s.fault.Store(nf)
	if readOnly {
		s.log.Warn("storage reopened read-only: reads are served, writes refused until there is room", "error", nf.err)
	} else {
		s.log.Info("storage reopened read-write: writes resume")
		if err := s.dropClean(); err != nil {
			// The write failed: the store is faulted again, and nothing
			// is written until a later reopen deletes the marker.
			s.log.Warn("storage: deleting the clean-shutdown marker failed", "error", err)
		}
		if err := s.upgrade(); err != nil {
			// Format 1 on disk still: a later reopen or restart tries again.
			s.log.Warn("storage: upgrading the store's format failed", "error", err)
		}
	}
	return !readOnly
}

// openTimeout bounds a reopen's Open: Pebble's read-write Open waits for
// the flush of the log it replayed, retrying it for as long as it fails.
const openTimeout = 30 * time.Second

// errOpenStuck: Open did not return within openTimeout.
var errOpenStuck = errors.New("reopening the database did not finish within 30s (its flush keeps failing); restart the server once there is room")

// openWithin is openDB (a read-write open probed) giving up after timeout
// (errOpenStuck); a handle the abandoned Open returns later is closed.
func (s *Store) openWithin(readOnly bool, timeout time.Duration) (*pebbledb.DB, error, error) {
	type opened struct {
		db           *pebbledb.DB
		failure, err error
	}
	done := make(chan opened, 1)
	go func() {
		db, failure, err := s.openDB(readOnly, !readOnly)
		done <- opened{db, failure, err}
	}()
	select {
	case o := <-done:
		return o.db, o.failure, o.err
	case <-time.After(timeout):
		go func() {
			if o := <-done; o.err == nil {
				_, _ = closeDB(o.db)
			}
		}()
		return nil, nil, errOpenStuck
	}
}

// readOnlyErr is the error a read-only store refuses writes with: the
// fault that made it read-only, or the watermark.
func (s *Store) readOnlyErr(cause error) error {
	if cause != nil {
		return cause
	}
	if _, space := s.space(); space != nil {
		return space
	}
	if u, err := s.fs.GetDiskUsage(s.dir); err == nil {
		return store.Unavailable("pebble", fmt.Errorf("%w: %d MB free in %s, opening the store read-write needs %d MB to flush its log",
			errDiskFull, u.AvailBytes>>20, s.dir, max(s.minFree, 4*int64(s.opts.MemTableSize))>>20))
	}
	return store.Unavailable("pebble", errors.New("storage is read-only"))
}

// markBroken records that the handle cannot be replaced: the store
// refuses writes, and serves reads through the handle if it is still open
// (calls that did not end), or answers them the fault if its Close did not
// finish (reopen), until a restart or, for that Close, until it ends
// (closedLate).
func (s *Store) markBroken(cause error) {
	old := s.fault.Load()
	nf := *old
	nf.broken = true
	if nf.err == nil {
		nf.err = store.Unavailable("pebble", cause)
	}
	s.fault.Store(&nf)
	s.log.Error("storage: cannot reopen the database; writes are refused until the server restarts", "error", cause)
}

// closeDB closes db, turning a panic (Pebble's, on a handle whose log
// failed) into an error, and giving up after closeTimeout (a commit that
// panicked holds Pebble's commit lock, which Close needs; Close waits for
// a flush in progress, which Pebble retries while it fails). When it gives
// up, late is closed once the abandoned Close ends, if it ever does.
func closeDB(db *pebbledb.DB) (late <-chan struct{}, err error) {
	if db == nil {
		return nil, nil
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		// A panic or an error: the handle is gone either way, and a log
		// error on close is the fault already known.
		defer func() { _ = recover() }()
		_ = db.Close()
	}()
	select {
	case <-done:
		return nil, nil
	case <-time.After(closeTimeout):
		return done, fmt.Errorf("close did not finish within %v (Pebble's commit pipeline or a flush is stuck after a failed write)", closeTimeout)
	}
}

// closedLate reports whether the Close a reopen abandoned (Store.lateClose)
// has ended since; if so, the store is no longer broken but faulted with
// no handle, which the monitor reopens as after any fault. Called by the
// monitor only.
func (s *Store) closedLate() bool {
	if s.lateClose == nil {
		return false
	}
	select {
	case <-s.lateClose:
	default:
		return false
	}
	s.lateClose = nil
	old := s.fault.Load()
	s.fault.Store(&faultState{space: old.space, readOnly: true, err: old.err})
	s.log.Info("storage: the abandoned close of the faulted handle ended; reopening the database")
	return true
}

// faultFS is the filesystem one database handle writes through (ADR 0022).
// Pebble cannot survive some failed calls: an error while it rotates its
// log (creating the next log, syncing the directory, the last sync of the
// previous log) panics with its mutex released, which aborts the process
// (`fatal error: sync: unlock of unlocked mutex`, beyond any recover); a
// failed directory sync while a marker moves panics; a failed log write
// makes the next commit panic holding the commit lock. So Pebble never
// sees such an error: the first failing write, sync, creation, rename or
// close of a file freezes the handle's disk (freeze.fail), which tells the
// store (the fault, before Pebble goes on), and the failed call and every
// later one report success to Pebble without touching the disk again:
// writes and syncs are dropped, files created from then on live in memory
// (so Pebble reads back what it wrote, a flush's sstable say), removals and
// renames of files on the disk are skipped. What is on the disk stays what
// a crash at the moment of the failure would have left, which Pebble's
// recovery is built for; the monitor closes the handle and reopens the
// database from the disk. The store refuses writes from the failure on and
// acknowledges none that completes after it.
//
// Compactions are the exception: Pebble handles their failures itself (the
// output is dropped and the compaction retried later) and nothing
// acknowledged depends on them, so their errors reach Pebble, after
// compactionRetryDelay, unless the handle is frozen already.
type faultFS struct {
	vfs.FS
	z *freeze
	// onSync is Config.OnSync, handed to the write-ahead log's files
	// (walCategory); nil when unset.
	onSync func(time.Duration)
}

// walCategory is the write category Pebble creates its write-ahead log
// files in (wal.StandaloneManager): the files whose syncs onSync reports.
const walCategory vfs.DiskWriteCategory = "pebble-wal"

// freeze is one database handle's hold on the disk: live until a file call
// fails, frozen from then on (faultFS).
type freeze struct {
	// onErr is told of the failure that froze the handle, before the
	// failed call returns: the store's fault (setFault).
	onErr func(op string, err error)
	// frozen is set, after onErr has returned, by the first failure.
	frozen atomic.Bool
	// mu guards mem and cause.
	mu sync.Mutex
	// mem holds the files created after the freeze; nil until then.
	mem *vfs.MemFS
	// cause is the first failure ("sync /data: input/output error").
	cause error
}

func newFreeze(onErr func(op string, err error)) *freeze { return &freeze{onErr: onErr} }

// fail freezes the handle's disk, telling the store first: a call that
// sees the handle frozen (and drops its write) comes after the store's
// fault, so nothing that depends on it is acknowledged.
func (z *freeze) fail(op string, err error) {
	z.mu.Lock()
	if z.mem == nil {
		z.mem = vfs.NewMem()
		z.cause = err
		// An *os.PathError of op names it already ("sync <file>: …").
		if pe := (*os.PathError)(nil); !errors.As(err, &pe) || pe.Op != op {
			z.cause = fmt.Errorf("%s: %w", op, err)
		}
	}
	z.mu.Unlock()
	if !z.frozen.Load() {
		z.onErr(op, err)
	}
	z.frozen.Store(true)
}

// isFrozen reports whether the handle's disk is frozen.
func (z *freeze) isFrozen() bool { return z.frozen.Load() }

// failure returns the failure that froze the handle, nil if none.
func (z *freeze) failure() error {
	if !z.isFrozen() {
		return nil
	}
	z.mu.Lock()
	defer z.mu.Unlock()
	return z.cause
}

// memory returns the in-memory filesystem of a frozen handle.
func (z *freeze) memory() *vfs.MemFS {
	z.mu.Lock()
	defer z.mu.Unlock()
	return z.mem
}

// memHas reports whether name was created after the freeze.
func (z *freeze) memHas(name string) bool {
	if !z.isFrozen() {
		return false
	}
	_, err := z.memory().Stat(name)
	return err == nil
}

// create makes name in memory, for a frozen handle.
func (fs faultFS) create(name string) (vfs.File, error) {
	mem := fs.z.memory()
	if err := mem.MkdirAll(fs.PathDir(name), privateDirMode); err != nil {
		return nil, err
	}
	return mem.Create(name, vfs.WriteCategoryUnspecified)
}

// compactionCategories are the write categories of files whose failure
// Pebble handles itself: a compaction's output is thrown away and the
// compaction retried later, and nothing acknowledged depends on it.
var compactionCategories = map[vfs.DiskWriteCategory]bool{"pebble-compaction": true, "pebble-blob-file-rewrite": true}

// compactionRetryDelay is how long a compaction's failed write waits
// before Pebble sees the error: Pebble retries a failed compaction at once,
// which on a full disk spun a core at 100 % (about 150 failed compactions a
// second in a 50 MB filesystem).
const compactionRetryDelay = time.Second

// opened finishes the creation or opening for writing of name.
func (fs faultFS) opened(op, name string, c vfs.DiskWriteCategory, f vfs.File, err error) (vfs.File, error) {
	compaction := compactionCategories[c]
	if err != nil {
		if compaction && !fs.z.isFrozen() {
			time.Sleep(compactionRetryDelay)
			return nil, err
		}
		fs.z.fail(op, err)
		return fs.create(name)
	}
	ff := faultFile{File: f, z: fs.z, compaction: compaction}
	if c == walCategory {
		ff.onSync = fs.onSync
	}
	return ff, nil
}

func (fs faultFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	if fs.z.isFrozen() {
		return fs.create(name)
	}
	f, err := fs.FS.Create(name, c)
	return fs.opened("create", name, c, f, err)
}

func (fs faultFS) OpenReadWrite(name string, c vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	if fs.z.isFrozen() {
		return fs.z.memory().OpenReadWrite(name, c, opts...)
	}
	f, err := fs.FS.OpenReadWrite(name, c, opts...)
	return fs.opened("open", name, c, f, err)
}

func (fs faultFS) ReuseForWrite(oldname, newname string, c vfs.DiskWriteCategory) (vfs.File, error) {
	if fs.z.isFrozen() {
		return fs.create(newname)
	}
	f, err := fs.FS.ReuseForWrite(oldname, newname, c)
	return fs.opened("create", newname, c, f, err)
}

// OpenDir opens a directory, whose Sync is checked like a file's. Pebble
// opens directories only while it opens the database, where an error is
// returned as it is (Open fails, cleanly).
func (fs faultFS) OpenDir(name string) (vfs.File, error) {
	if fs.z.isFrozen() {
		mem := fs.z.memory()
		if err := mem.MkdirAll(name, privateDirMode); err != nil {
			return nil, err
		}
		return mem.OpenDir(name)
	}
	f, err := fs.FS.OpenDir(name)
	if err != nil {
		return nil, err
	}
	return faultFile{File: f, z: fs.z}, nil
}

func (fs faultFS) Open(name string, opts ...vfs.OpenOption) (vfs.File, error) {
	if fs.z.memHas(name) {
		return fs.z.memory().Open(name, opts...)
	}
	return fs.FS.Open(name, opts...)
}

func (fs faultFS) Stat(name string) (vfs.FileInfo, error) {
	if fs.z.memHas(name) {
		return fs.z.memory().Stat(name)
	}
	return fs.FS.Stat(name)
}

// List lists dir on the disk and, once frozen, in memory.
func (fs faultFS) List(dir string) ([]string, error) {
	names, err := fs.FS.List(dir)
	if !fs.z.isFrozen() {
		return names, err
	}
	more, merr := fs.z.memory().List(dir)
	if err != nil && merr != nil {
		return nil, err
	}
	seen := make(map[string]bool, len(names))
	for _, n := range names {
		seen[n] = true
	}
	for _, n := range more {
		if !seen[n] {
			names = append(names, n)
		}
	}
	return names, nil
}

// Remove removes a file; once frozen, only one created in memory (the
// disk keeps what the MANIFEST on it may still name).
func (fs faultFS) Remove(name string) error {
	if fs.z.isFrozen() {
		if fs.z.memHas(name) {
			return fs.z.memory().Remove(name)
		}
		return nil
	}
	return fs.FS.Remove(name)
}

func (fs faultFS) RemoveAll(name string) error {
	if fs.z.isFrozen() {
		return nil
	}
	return fs.FS.RemoveAll(name)
}

func (fs faultFS) Rename(oldname, newname string) error {
	if fs.z.isFrozen() {
		if fs.z.memHas(oldname) {
			return fs.z.memory().Rename(oldname, newname)
		}
		return nil
	}
	if err := fs.FS.Rename(oldname, newname); err != nil {
		fs.z.fail("rename", err)
	}
	return nil
}

func (fs faultFS) Link(oldname, newname string) error {
	if fs.z.isFrozen() {
		return nil
	}
	if err := fs.FS.Link(oldname, newname); err != nil {
		fs.z.fail("link", err)
	}
	return nil
}

func (fs faultFS) MkdirAll(dir string, perm os.FileMode) error {
	if fs.z.isFrozen() {
		return fs.z.memory().MkdirAll(dir, perm)
	}
	return fs.FS.MkdirAll(dir, perm)
}

// Unwrap returns the wrapped filesystem.
func (fs faultFS) Unwrap() vfs.FS { return fs.FS }

// faultFile is a file on the disk opened through faultFS: its first
// failing write, sync or close freezes the handle (a compaction's output
// returns its error instead, after compactionRetryDelay), and once the
// handle is frozen its writes and syncs are dropped and reported done.
type faultFile struct {
	vfs.File
	z          *freeze
	compaction bool
	// onSync is told of each successful sync and its duration; set on
	// the write-ahead log's files only (faultFS.onSync), else nil.
	onSync func(time.Duration)
}

// syncStart is when a sync starts, for synced: the zero time when onSync
// is unset (no clock read for the files other than the log's).
func (f faultFile) syncStart() time.Time {
	if f.onSync == nil {
		return time.Time{}
	}
	return time.Now()
}

// synced reports to onSync, when set, a sync started at start that made
// the file durable (durable: it succeeded, and was not a partial SyncTo).
func (f faultFile) synced(start time.Time, durable bool) {
	if f.onSync != nil && durable {
		f.onSync(time.Since(start))
	}
}

// check returns what Pebble is told of a call on the disk that returned
// err: nil, unless it is a compaction's error on a live handle.
func (f faultFile) check(op string, err error) error {
	if err == nil {
		return nil
	}
	if f.compaction && !f.z.isFrozen() {
		time.Sleep(compactionRetryDelay)
		return err
	}
	f.z.fail(op, err)
	return nil
}

func (f faultFile) Write(p []byte) (int, error) {
	if f.z.isFrozen() {
		return len(p), nil
	}
	n, err := f.File.Write(p)
	if err = f.check("write", err); err != nil {
		return n, err
	}
	return len(p), nil
}

func (f faultFile) WriteAt(p []byte, off int64) (int, error) {
	if f.z.isFrozen() {
		return len(p), nil
	}
	n, err := f.File.WriteAt(p, off)
	if err = f.check("write", err); err != nil {
		return n, err
	}
	return len(p), nil
}

func (f faultFile) Sync() error {
	if f.z.isFrozen() {
		return nil
	}
	start := f.syncStart()
	err := f.File.Sync()
	f.synced(start, err == nil)
	return f.check("sync", err)
}

func (f faultFile) SyncData() error {
	if f.z.isFrozen() {
		return nil
	}
	start := f.syncStart()
	err := f.File.SyncData()
	f.synced(start, err == nil)
	return f.check("sync", err)
}

func (f faultFile) SyncTo(length int64) (bool, error) {
	if f.z.isFrozen() {
		return true, nil
	}
	start := f.syncStart()
	full, err := f.File.SyncTo(length)
	// A partial SyncTo (sync_file_range) is not an fsync.
	f.synced(start, full && err == nil)
	if err = f.check("sync", err); err != nil {
		return full, err
	}
	return full, nil
}

// Preallocate's failure is not a fault (Pebble ignores it: a filesystem
// without fallocate, or a log preallocated past a small disk's free space:
// the writes themselves fail when the space is really gone).
func (f faultFile) Preallocate(offset, length int64) error {
	if f.z.isFrozen() {
		return nil
	}
	return f.File.Preallocate(offset, length)
}

// Close closes the file; a failure (a write-back error reported late)
// freezes the handle: Pebble panics on a failed close of its log.
func (f faultFile) Close() error {
	err := f.File.Close()
	if f.z.isFrozen() {
		return nil
	}
	return f.check("close", err)
}

var _ io.Closer = faultFile{}

// Package pebble is Styx's default durable store.Store, built on Pebble
// (github.com/cockroachdb/pebble/v2). One Pebble database per data
// directory holds every queue. The memory backend is the same store over
// Pebble's in-memory filesystem (Config.InMemory; ADR 0014).
//
// # Key layout
//
// Each key starts with a one-byte prefix naming its key space. Integers in
// keys are big-endian so that byte order is numeric order; qid is the
// queue's QueueInfo.ID (8 bytes), part the partition (int32 as 4 bytes),
// id an item ID and bodyID an ItemMeta.BodyID (8 bytes each).
//
//	0x00                  → "styx-store-2"   format marker, checked by Open
//	0x01 name             → queue info       catalog, in name order
//	0x02                  → uint64 BE        last queue ID assigned
//	0x03 qid              → uint64 BE        the queue's LastID
//	0x04 id               → task record      background tasks, in ID order
//	0x05 name             → API key record   (hash, scopes, queues; no secret)
//	0x06 key id           → API key name     index for the lookup of a request's key
//	0x07 qid              → uint64 BE        last item ID written in format 1 (upgraded stores)
//	0x10 qid part id      → item meta        (21-byte key), as inserted or requeued
//	0x11 qid part bodyID  → item body
//	0x12 qid part bodyID  → item errors      (absent when empty)
//	0x13 qid part id      → item meta        the item's state once leased or changed
//	0x14 qid dedup id     → uint64 BE        a deduplication id's deadline (Unix ns)
//	0x15 qid minute node  → history minute   a server's counts of a minute (store.HistoryStore;
//	                                         minute: Unix seconds, 8-byte BE; node: its id)
//	0x16 qid part group   → held group       a group held by a dead item (queue.HeldGroup: dead
//	                                         key, seq, held at), written in the batch that holds
//	                                         or releases it
//
// LoadItems therefore scans two contiguous ranges holding only metadata, and
// DeleteQueue removes a queue with one range deletion per item key space
// plus three point deletions, all in one batch.
//
// # Records written once (format 2, ADR 0020)
//
// A meta (0x10) or body (0x11) record is set once and deleted with
// SingleDelete, so that a flush that sees both drops both instead of
// keeping a tombstone. A change to an item's meta after its insert goes to
// its state record (0x13), which supersedes the meta: the lease sets it
// (an item is leased at most once under one ID), later changes delete it
// and set it again, and deletes of the item single-delete it. An edited
// body is deleted before it is set again. Errors (0x12), rewritten by every
// retry, keep Delete. Stores of format 1 (marker "styx-store-1") rewrote
// metas in place; Open upgrades them by recording each queue's last item
// ID (0x07): records up to it are deleted with Delete.
//
// History records (0x15) are written once a minute per queue without a
// sync, deleted with their queue, and pruned after 24 hours by one range
// deletion per queue ID (internal/history; ADR 0025).
//
// Task records (store.TaskStore) are keyed by their string ID (1 to 128
// bytes), so a scan of the 0x04 range lists them in ID order. They belong
// to no queue's ranges: DeleteQueue leaves them alone.
//
// # Value encodings
//
// Values are hand-written binary (see codec.go): a format byte, then
// varints and length-prefixed strings. Item metadata, which start-up loads
// for every item, is the most compact: the ID is only in the key, BodyID is
// stored as its difference from the ID (one byte until the item is
// requeued), a flags byte carries Leased and which times, SourceKey and
// dead-letter decision (DeadReason, DeadAt) are present (zero times and
// empty strings take no bytes), CreatedAt is 8 bytes of Unix
// nanoseconds and the other times are varint differences from it. A ready
// item's meta value is about 19 bytes, a leased one's about 25. Times
// round-trip to the nanosecond but come back in the local time zone, without
// monotonic reading; Write rejects times outside the years 1678-2262.
//
// # Concurrency
//
// Pebble handles concurrent reads and commits. On top of it, catMu
// serialises catalog changes, each queue's queueState.mu serialises Write
// (keeping LastID monotonic) against DeleteQueue of that queue, and mu plus
// a WaitGroup let Close wait for calls in progress, since Pebble must not be
// used after or during its Close.
package pebble

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	pebbledb "github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/styxq/styx/internal/queue"
	"github.com/styxq/styx/internal/store"
)

// Config configures Open.
type Config struct {
	// Dir is the data directory, created 0700 if missing. Required unless
	// InMemory. On the disk, an existing directory that group or others
	// may access is tightened to 0700, or refused if it is not the
	// server's user's or holds something other than a Pebble store; every
	// file in it is 0600, whatever the umask (privateDir, privateFS).
	Dir string
	// InMemory keeps the database in memory (Pebble's vfs.NewMem), for
	// tests and for running without durability (--storage memory): nothing
	// survives the process, writes are not synced, and Dir is ignored. The
	// cache and memtables default to InMemoryCacheBytes and
	// InMemoryMemTableBytes.
	InMemory bool
	// NoSync turns off the fsync of item batches: Write returns before the
	// batch is durable, so acknowledged writes may be lost on power failure
	// (or a crash, for the most recent ones); a clean Close loses nothing.
	// Defaults to false: every Write is fsynced. Queue catalog and task
	// changes are always synced.
	NoSync bool
	// CacheBytes is the size of Pebble's block cache, which serves item
	// bodies that left the memtable. 0 means DefaultCacheBytes.
	CacheBytes int64
	// MemTableBytes is the size of one memtable; up to four may be held
	// while flushes run. 0 means DefaultMemTableBytes, or on a filesystem
	// smaller than 1 GiB a sixteenth of it (at least 4 MiB), so that the
	// log a restart replays and flushes fits beside the data.
	MemTableBytes uint64
	// Logger receives Pebble's log messages. Optional; nil means
	// slog.Default(). Pebble's repeated messages are rate-limited: at most
	// one a second of each kind, with a count of those left out.
	Logger *slog.Logger
	// MinFreeBytes is the free-space watermark, in bytes of the data
	// directory's filesystem: below it, the calls that add items are
	// refused (InsertFault, 453) so that a flush and a restart always have
	// room, and a store opened below it opens read-only (writes refused,
	// reads served) until there is room. 0 means the default: twice
	// MemTableBytes (128 MiB by default), but at most a quarter of the filesystem's
	// size; -1 disables the watermark. Ignored when the filesystem does not
	// report its usage (InMemory).
	MinFreeBytes int64
	// CheckInterval is how often the free space is read and a faulted
	// store tries to heal (ADR 0015). 0 means DefaultCheckInterval (1s).
	CheckInterval time.Duration
	// FS, when set, is the filesystem the database lives on instead of the
	// disk (or, with InMemory, a new in-memory one): fault-injection tests
	// pass Pebble's vfs.NewCrashableMem or an errorfs wrapper.
	FS vfs.FS
	// OnFault, when set, is told of each fault that makes the store refuse
	// writes or inserts, by cause ("write", "sync", "panic", "space"...):
	// the metric styx_storage_faults_total.
	OnFault func(cause string)
	// OnSync, when set, is told of each successful fsync of the
	// write-ahead log, with how long it took: the metrics
	// styx_storage_syncs_total and styx_storage_sync_seconds. It counts
	// at the filesystem (faultFile), the Sync, SyncData and full SyncTo
	// calls on the files Pebble creates in the write category
	// "pebble-wal", so it sees every WAL fsync of every database handle
	// (Pebble's own Metrics().LogWriter.FsyncLatency restarts with each
	// handle a reopen replaces, and Options has no hook for it). Syncs of
	// sstables, the MANIFEST and the directory are not reported, nor a
	// failed sync or one a frozen handle drops. Called on Pebble's
	// log-writer goroutine, once per fsync (a group commit syncs many
	// batches at once): it must be quick. Ignored with InMemory, whose
	// syncs write nothing.
	OnSync func(time.Duration)
}

// Store is the Pebble store.Store. Create it with Open. It is safe for
// concurrent use.
type Store struct {
	// db is the database handle; replaced only by reopen while it holds
	// the gate (no call in progress), read by calls inside the gate.
	db        *pebbledb.DB
	writeOpts *pebbledb.WriteOptions // for item batches, per Config.NoSync
	// gate counts the calls using db (Close and reopen wait for them).
	gate gate
	// fault is the store's health (fault.go); never nil.
	fault atomic.Pointer[faultState]
	// gen counts reopenings (Generation).
	gen atomic.Uint64
	// written counts the bytes written since the free space was last read
	// (InsertFault reads it again after minFree/8).
	written atomic.Int64
	// misused and ineffectual count what Pebble's flushes and compactions
	// report of SingleDelete (apiMisuse), for the tests.
	misused, ineffectual atomic.Int64
	// v1 is set while the marker on disk still says format 1 (the store
	// was opened read-only): the first read-write reopen upgrades it.
	v1 bool
	// What reopen needs, set by Open.
	fs          vfs.FS
	dir         string
	opts        pebbledb.Options
	minFree     int64
	log         *slog.Logger
	onFault     func(string)
	onSync      func(time.Duration)
	poke        chan struct{}
	stopMonitor chan struct{}
	monitorDone chan struct{}
	closing     atomic.Bool

	// catMu serialises catalog changes (CreateQueue, UpdateQueue,
	// DeleteQueue) and guards lastQueueID.
	catMu       sync.Mutex
	lastQueueID uint64

	// keyMu serialises API key changes (CreateKey, DeleteKey), which write
	// two keys (0x05 and 0x06) that must agree.
	keyMu sync.Mutex

	// mu guards queues. It is held only briefly, never across Pebble I/O.
	mu     sync.Mutex
	queues map[uint64]*queueState // live queues by ID
}

// queueState is what the store keeps in memory about a live queue.
type queueState struct {
	// mu is held by Write across building and committing a batch and by
	// DeleteQueue across its commit; it guards lastID and deleted.
	mu      sync.Mutex
	lastID  uint64 // the stored LastID
	deleted bool
	// legacy is the last item ID the queue had when its store was
	// upgraded from format 1 (0 for a queue created since): records of
	// items up to it are deleted with Delete, not SingleDelete.
	legacy uint64
}

var _ store.Store = (*Store)(nil)

// Defaults of Config.
const (
	DefaultCacheBytes    = 256 << 20
	DefaultMemTableBytes = 64 << 20
	// InMemoryCacheBytes is the disk default: the blocks of an in-memory
	// store are in memory already, but a cache miss still copies and
	// decompresses a block, and with 64 MB a scan of 100,000 dead items
	// (BenchmarkDeadPage, no-match) took 3 times as long as on disk.
	// Pebble fills the cache as blocks are read, so a small store uses
	// little of it.
	InMemoryCacheBytes    = DefaultCacheBytes
	InMemoryMemTableBytes = 64 << 20
	// minMemTableBytes is the smallest memtable the default picks on a
	// small disk (a sixteenth of the filesystem otherwise).
	minMemTableBytes = 4 << 20
)

// OpenMemory opens an empty store in memory (Config.InMemory).
func OpenMemory() (*Store, error) { return Open(Config{InMemory: true}) }

// Open opens (creating if needed) the store in cfg.Dir. It fails if the
// directory holds a database that is not a Styx store of this format, is
// in use by another process, or is open to other users and not the
// server's to tighten (privateDir).
func Open(cfg Config) (*Store, error) {
	fs := cfg.FS
	if cfg.InMemory {
		if fs == nil {
			fs = vfs.NewMem()
		}
		cfg.Dir, cfg.NoSync, cfg.OnSync = "memory", true, nil
		cfg.CacheBytes = cmp.Or(cfg.CacheBytes, InMemoryCacheBytes)
		cfg.MemTableBytes = cmp.Or(cfg.MemTableBytes, InMemoryMemTableBytes)
	}
	if fs == nil {
		fs = vfs.Default
	}
	if cfg.Dir == "" {
		return nil, errors.New("pebble: open: no directory")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	// Only the server's user may read the items (issues 24 and 36): on the
	// disk, the directory is made 0700 or refused (privateDir), and every
	// file and directory Pebble creates in it is 0600 or 0700 (privateFS).
	pfs := newPrivateFS(fs)
	if pfs.disk {
		if err := privateDir(cfg.Dir, log); err != nil {
			return nil, fmt.Errorf("pebble: open %s: %w", cfg.Dir, err)
		}
	}
	if err := pfs.MkdirAll(cfg.Dir, privateDirMode); err != nil {
		return nil, fmt.Errorf("pebble: open %s: %w", cfg.Dir, err)
	}
	if cfg.CacheBytes == 0 {
		cfg.CacheBytes = DefaultCacheBytes
	}
	usage, usageErr := fs.GetDiskUsage(cfg.Dir)
	if cfg.MemTableBytes == 0 {
		cfg.MemTableBytes = DefaultMemTableBytes
		if usageErr == nil {
			// On a small disk a smaller memtable, so that the log a
			// restart replays and flushes fits beside the data.
			cfg.MemTableBytes = min(cfg.MemTableBytes, max(minMemTableBytes, usage.TotalBytes/16))
		}
	}
	s := &Store{
		writeOpts:   pebbledb.NoSync,
		queues:      make(map[uint64]*queueState),
		dir:         cfg.Dir,
		log:         log.With("component", "pebble", "dir", cfg.Dir),
		onFault:     cfg.OnFault,
		onSync:      cfg.OnSync,
		poke:        make(chan struct{}, 1),
		stopMonitor: make(chan struct{}),
		monitorDone: make(chan struct{}),
	}
	s.gate.init()
	s.fault.Store(&faultState{})
	s.fs = pfs
	s.minFree = cfg.MinFreeBytes
	if s.minFree == 0 {
		s.minFree = 2 * int64(cfg.MemTableBytes)
		if usageErr == nil {
			s.minFree = min(s.minFree, int64(usage.TotalBytes/4))
		}
	}
	if !cfg.NoSync {
		s.writeOpts = pebbledb.Sync
	}
	// The store holds a reference to the cache until Close, so that it
	// outlives the handles a reopen closes; each handle holds its own.
	cache := pebbledb.NewCache(cfg.CacheBytes)
	s.opts = pebbledb.Options{
		FormatMajorVersion: pebbledb.FormatNewest,
		Cache:              cache,
		// A queue's items mostly die young: with a large memtable, an item
		// produced, leased and completed within one memtable's life never
		// reaches an sstable, so it costs no flush and no compaction.
		MemTableSize:                cfg.MemTableBytes,
		MemTableStopWritesThreshold: 4,
		EventListener:               &pebbledb.EventListener{PossibleAPIMisuse: s.apiMisuse},
	}
	// Below the watermark, open read-only: replaying the log read-write
	// flushes it, which needs room (a full disk must not keep Styx from
	// starting: it starts, serves reads and says why it refuses writes).
	_, space := s.space()
	readOnly := space != nil || !s.roomToReopen()
	db, failure, err := s.openDB(readOnly, false)
	if failure != nil && !readOnly {
		// The disk failed while the database opened (a directory sync, the
		// new log: ADR 0022): this handle must not be written through.
		// Open read-only what the disk holds; the monitor retries
		// read-write.
		if err == nil {
			_ = closeDB(db)
		}
		s.log.Warn("storage: the disk failed while opening the database; opening it read-only", "error", failure)
		readOnly = true
		db, _, err = s.openDB(true, false)
		switch {
		case errors.Is(err, pebbledb.ErrDBDoesNotExist):
			cache.Unref()
			return nil, fmt.Errorf("pebble: open %s: the disk failed while creating the store: %w", cfg.Dir, failure)
		case err != nil:
			cache.Unref()
			return nil, fmt.Errorf("pebble: open %s: the disk failed (%w), and opening the store read-only failed too: %v", cfg.Dir, failure, err)
		}
	}
	if err != nil {
		cache.Unref()
		return nil, fmt.Errorf("pebble: open %s: %w", cfg.Dir, err)
	}
	s.db = db
	nf := &faultState{space: space, readOnly: readOnly}
	if readOnly {
		nf.err = s.readOnlyErr(s.fault.Load().err)
	}
	s.fault.Store(nf)
	if readOnly && failure == nil {
		s.log.Warn("storage opened read-only: the disk has no room to replay and flush the log", "error", nf.err)
	}
	if err := s.load(); err != nil {
		_ = db.Close()
		cache.Unref()
		return nil, fmt.Errorf("pebble: open %s: %w", cfg.Dir, err)
	}
	go s.monitor(cmp.Or(cfg.CheckInterval, DefaultCheckInterval))
	return s, nil
}

// openDB opens the database with the store's options, read-only or not,
// through a filesystem of its own (faultFS) that freezes at the first
// failing write, sync or creation; failure is that failure, if one came
// (the store is then faulted, and the handle must not be written
// through). A panic inside Pebble's Open is returned as an error.
//
// With probe, a read-write open then rewrites the format marker with its
// own value, synced: Pebble's Open may write and sync no log at all, so a
// disk whose log syncs fail (and go on failing) opens without a failure,
// and only the probe's sync shows it (issue 48: a reopen that cleared an
// ongoing fault made /health answer 200 until the next write failed). A
// store without a marker (a new one, before load writes it) is not probed.
func (s *Store) openDB(readOnly, probe bool) (db *pebbledb.DB, failure, err error) {
	z := newFreeze(s.setFault)
	opts := s.opts
	opts.ReadOnly = readOnly
	opts.FS = faultFS{FS: s.fs, z: z, onSync: s.onSync}
	// Pebble calls Fatalf when it cannot go on: nothing more is written
	// through this handle either.
	opts.Logger = newLogger(s.log, z.fail)
	defer func() {
		if v := recover(); v != nil {
			db, err = nil, fmt.Errorf("panic in pebble while opening: %v", v)
		}
		if f := z.failure(); f != nil {
			failure = f
		}
	}()
	db, err = pebbledb.Open(s.dir, &opts)
	if err != nil || readOnly || !probe || z.isFrozen() {
		return db, nil, err
	}
	v, closer, gerr := db.Get(formatKey)
	if gerr != nil {
		return db, nil, nil // no marker, or it cannot be read: nothing to rewrite
	}
	v = append([]byte(nil), v...)
	_ = closer.Close()
	if serr := db.Set(formatKey, v, pebbledb.Sync); serr != nil {
		return db, fmt.Errorf("probe write: %w", serr), nil
	}
	return db, nil, nil
}

// load checks the format marker, writing it in a new database, reads the
// queue-ID counter, the catalog and every queue's LastID, and upgrades a
// format 1 store (upgrade).
func (s *Store) load() error {
	v, err := s.get(formatKey)
	v1 := false
	switch {
	case errors.Is(err, pebbledb.ErrNotFound):
		if !s.empty() {
			return errors.New("not a Styx store: no format marker")
		}
		if err := s.writable(); err != nil {
			return fmt.Errorf("new store: %w", err)
		}
		if err := s.commit(func() error { return s.db.Set(formatKey, []byte(formatValue), pebbledb.Sync) }); err != nil {
			return fmt.Errorf("new store: %w", err)
		}
	case err != nil:
		return err
	case string(v) == formatV1Value:
		v1 = true
	case string(v) != formatValue:
		return fmt.Errorf("unknown store format %q", v)
	}

	if v, err := s.get(queueSeqKey); err == nil {
		if s.lastQueueID, err = decodeUint64(v); err != nil {
			return fmt.Errorf("queue id counter: %w", err)
		}
	} else if !errors.Is(err, pebbledb.ErrNotFound) {
		return err
	}

	iter, err := s.db.NewIter(&pebbledb.IterOptions{
		LowerBound: []byte{prefixCatalog},
		UpperBound: []byte{prefixCatalog + 1},
	})
	if err != nil {
		return err
	}
	defer iter.Close()
	for iter.First(); iter.Valid(); iter.Next() {
		v, err := iter.ValueAndErr()
		if err != nil {
			return err
		}
		name := string(iter.Key()[1:])
		info, err := decodeQueueInfo(name, v)
		if err != nil {
			return fmt.Errorf("queue %q: %w", name, err)
		}
		qs := &queueState{}
		if v, err := s.get(queueKey(prefixLastID, info.ID)); err == nil {
			if qs.lastID, err = decodeUint64(v); err != nil {
				return fmt.Errorf("queue %q: last id: %w", name, err)
			}
		} else if !errors.Is(err, pebbledb.ErrNotFound) {
			return err
		}
		if v, err := s.get(queueKey(prefixLegacy, info.ID)); err == nil {
			if qs.legacy, err = decodeUint64(v); err != nil {
				return fmt.Errorf("queue %q: legacy id: %w", name, err)
			}
		} else if !errors.Is(err, pebbledb.ErrNotFound) {
			return err
		}
		if v1 {
			qs.legacy = qs.lastID
		}
		s.queues[info.ID] = qs
		// Belt and braces: never hand out an ID a stored queue has.
		s.lastQueueID = max(s.lastQueueID, info.ID)
	}
	if err := iter.Error(); err != nil {
		return err
	}
	if v1 {
		s.v1 = true
		return s.upgrade()
	}
	return nil
}

// upgrade makes a format 1 store a format 2 one. Format 1 rewrote an
// item's meta in place (a lease, a renewal) and a dead item's body (an
// edit), so its records may have been set more than once and must be
// deleted with Delete; format 2 writes each meta and body record once and
// deletes it with SingleDelete (ADR 0020). The records themselves are the
// same: upgrading stores, for every queue, its last item ID (the records up
// to it are format 1's) and the new marker, in one synced batch. A store
// opened read-only stays format 1 on disk until a later read-write open;
// meanwhile load has set every queue's legacy ID in memory, so nothing it
// writes is deleted wrongly, and reopen upgrades it once it is writable.
// Called with no call in progress (load, or reopen holding the gate).
func (s *Store) upgrade() error {
	if !s.v1 || s.writable() != nil {
		return nil
	}
	b := s.db.NewBatch()
	defer b.Close()
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, qs := range s.queues {
		if qs.legacy == 0 {
			continue
		}
		if err := b.Set(queueKey(prefixLegacy, id), binary.BigEndian.AppendUint64(nil, qs.legacy), nil); err != nil {
			return err
		}
	}
	if err := b.Set(formatKey, []byte(formatValue), nil); err != nil {
		return err
	}
	if err := s.commit(func() error { return b.Commit(pebbledb.Sync) }); err != nil {
		return fmt.Errorf("upgrade to %s: %w", formatValue, err)
	}
	s.v1 = false
	s.log.Info("storage upgraded", "format", formatValue)
	return nil
}

// empty reports whether the database holds no keys.
func (s *Store) empty() bool {
	iter, err := s.db.NewIter(nil)
	if err != nil {
		return false
	}
	defer iter.Close()
	return !iter.First()
}

// get returns a copy of the value stored under key, or an error wrapping
// pebbledb.ErrNotFound.
func (s *Store) get(key []byte) ([]byte, error) {
	v, closer, err := s.db.Get(key)
	if err != nil {
		return nil, err
	}
	defer closer.Close()
	return append([]byte(nil), v...), nil
}

// enter registers a call in progress, failing if the store is closed or
// ctx is done. A successful enter must be paired with s.exit.
func (s *Store) enter(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.enterCall()
}

// enterWrite is enter for a call that writes: a faulted store refuses it
// (WriteFault) before Pebble is called.
func (s *Store) enterWrite(ctx context.Context) error {
	if err := s.writable(); err != nil {
		return err
	}
	if err := s.enter(ctx); err != nil {
		return err
	}
	if err := s.writable(); err != nil {
		s.exit()
		return err
	}
	return nil
}

// queue enters and returns the live queue with the given ID. On success the
// caller must call s.exit.
func (s *Store) queue(ctx context.Context, queueID uint64) (*queueState, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	s.mu.Lock()
	qs, ok := s.queues[queueID]
	s.mu.Unlock()
	if !ok {
		s.exit()
		return nil, store.ErrQueueNotFound
	}
	return qs, nil
}

// CreateQueue implements store.Store. info.ID is ignored and assigned from
// a persisted counter, so IDs are never reused. The change is synced
// whatever Config.NoSync says.
func (s *Store) CreateQueue(ctx context.Context, info queue.QueueInfo) (queue.QueueInfo, error) {
	info, err := s.createQueue(ctx, info)
	if err != nil {
		return queue.QueueInfo{}, fmt.Errorf("pebble: create queue %q: %w", info.Name, err)
	}
	return info, nil
}

func (s *Store) createQueue(ctx context.Context, info queue.QueueInfo) (queue.QueueInfo, error) {
	if err := s.enterWrite(ctx); err != nil {
		return info, err
	}
	defer s.exit()
	s.catMu.Lock()
	defer s.catMu.Unlock()

	key := catalogKey(info.Name)
	if _, err := s.get(key); err == nil {
		return info, store.ErrQueueExists
	} else if !errors.Is(err, pebbledb.ErrNotFound) {
		return info, err
	}
	info.ID = s.lastQueueID + 1
	v, err := appendQueueInfo(nil, &info)
	if err != nil {
		return info, err
	}
	b := s.db.NewBatch()
	defer b.Close()
	if err := b.Set(key, v, nil); err != nil {
		return info, err
	}
	if err := b.Set(queueSeqKey, binary.BigEndian.AppendUint64(nil, info.ID), nil); err != nil {
		return info, err
	}
	if err := s.commit(func() error { return b.Commit(pebbledb.Sync) }); err != nil {
		return info, err
	}
	s.lastQueueID = info.ID
	s.mu.Lock()
	s.queues[info.ID] = &queueState{}
	s.mu.Unlock()
	return info, nil
}

// UpdateQueue implements store.Store. It returns store.ErrQueueNotFound when
// no queue has info.Name or when its ID is not info.ID. The change is synced
// whatever Config.NoSync says.
func (s *Store) UpdateQueue(ctx context.Context, info queue.QueueInfo) error {
	if err := s.updateQueue(ctx, info); err != nil {
		return fmt.Errorf("pebble: update queue %q: %w", info.Name, err)
	}
	return nil
}

func (s *Store) updateQueue(ctx context.Context, info queue.QueueInfo) error {
	if err := s.enterWrite(ctx); err != nil {
		return err
	}
	defer s.exit()
	s.catMu.Lock()
	defer s.catMu.Unlock()

	cur, err := s.getQueue(info.Name)
	if err != nil {
		return err
	}
	if cur.ID != info.ID {
		return store.ErrQueueNotFound
	}
	v, err := appendQueueInfo(nil, &info)
	if err != nil {
		return err
	}
	return s.commit(func() error { return s.db.Set(catalogKey(info.Name), v, pebbledb.Sync) })
}

// GetQueue implements store.Store.
func (s *Store) GetQueue(ctx context.Context, name string) (queue.QueueInfo, error) {
	if err := s.enter(ctx); err != nil {
		return queue.QueueInfo{}, fmt.Errorf("pebble: get queue %q: %w", name, err)
	}
	defer s.exit()
	info, err := s.getQueue(name)
	if err != nil {
		return queue.QueueInfo{}, fmt.Errorf("pebble: get queue %q: %w", name, err)
	}
	return info, nil
}

// getQueue reads a catalog entry, mapping a missing one to
// store.ErrQueueNotFound.
func (s *Store) getQueue(name string) (queue.QueueInfo, error) {
	v, err := s.get(catalogKey(name))
	if errors.Is(err, pebbledb.ErrNotFound) {
		return queue.QueueInfo{}, store.ErrQueueNotFound
	}
	if err != nil {
		return queue.QueueInfo{}, err
	}
	return decodeQueueInfo(name, v)
}

// ListQueues implements store.Store.
func (s *Store) ListQueues(ctx context.Context, p queue.ListQueuesParams) ([]queue.QueueInfo, error) {
	qs, err := s.listQueues(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("pebble: list queues: %w", err)
	}
	return qs, nil
}

// listQueues scans the catalog from the pivot. The namespace is inside each
// entry, so a filtered list reads every entry after the pivot until it has
// p.Limit matches: the catalog is small (one entry per queue).
func (s *Store) listQueues(ctx context.Context, p queue.ListQueuesParams) ([]queue.QueueInfo, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	defer s.exit()
	iter, err := s.db.NewIter(&pebbledb.IterOptions{
		LowerBound: catalogKey(p.Pivot),
		UpperBound: []byte{prefixCatalog + 1},
	})
	if err != nil {
		return nil, err
	}
	defer iter.Close()
	var out []queue.QueueInfo
	for iter.First(); iter.Valid() && (p.Limit <= 0 || len(out) < p.Limit); iter.Next() {
		v, err := iter.ValueAndErr()
		if err != nil {
			return nil, err
		}
		name := string(iter.Key()[1:])
		info, err := decodeQueueInfo(name, v)
		if err != nil {
			return nil, fmt.Errorf("queue %q: %w", name, err)
		}
		if p.Namespace != "" && info.Namespace != p.Namespace {
			continue
		}
		out = append(out, info)
	}
	return out, iter.Error()
}

// DeleteQueue implements store.Store. Items go with one range deletion per
// key space; Pebble reclaims their space in later compactions. The change
// is synced whatever Config.NoSync says.
func (s *Store) DeleteQueue(ctx context.Context, name string) error {
	if err := s.deleteQueue(ctx, name); err != nil {
		return fmt.Errorf("pebble: delete queue %q: %w", name, err)
	}
	return nil
}

func (s *Store) deleteQueue(ctx context.Context, name string) error {
	if err := s.enterWrite(ctx); err != nil {
		return err
	}
	defer s.exit()
	s.catMu.Lock()
	defer s.catMu.Unlock()

	info, err := s.getQueue(name)
	if err != nil {
		return err
	}
	s.mu.Lock()
	qs := s.queues[info.ID]
	s.mu.Unlock()
	if qs == nil {
		return fmt.Errorf("queue id %d: not loaded", info.ID)
	}
	qs.mu.Lock()
	defer qs.mu.Unlock()

	b := s.db.NewBatch()
	defer b.Close()
	for _, prefix := range []byte{prefixMeta, prefixBody, prefixErrors, prefixState, prefixDedup, prefixHistory, prefixHeld} {
		start := queueKey(prefix, info.ID)
		if err := b.DeleteRange(start, prefixEnd(start), nil); err != nil {
			return err
		}
	}
	if err := b.Delete(queueKey(prefixLastID, info.ID), nil); err != nil {
		return err
	}
	if err := b.Delete(queueKey(prefixLegacy, info.ID), nil); err != nil {
		return err
	}
	if err := b.Delete(catalogKey(name), nil); err != nil {
		return err
	}
	if err := s.commit(func() error { return b.Commit(pebbledb.Sync) }); err != nil {
		return err
	}
	qs.deleted = true
	s.mu.Lock()
	delete(s.queues, info.ID)
	s.mu.Unlock()
	return nil
}

// LoadItems implements store.Store. It scans only the partition's meta
// range. fn runs while the call is in progress, so it must not call Close.
func (s *Store) LoadItems(ctx context.Context, queueID uint64, partition int32, fn func(queue.ItemMeta) error) error {
	errFn, err := s.loadItems(ctx, queueID, partition, fn)
	if errFn != nil {
		return errFn
	}
	if err != nil {
		return fmt.Errorf("pebble: load items of queue %d partition %d: %w", queueID, partition, err)
	}
	return nil
}

// LoadDedup implements store.Store: one scan of the queue's deduplication
// records.
func (s *Store) LoadDedup(ctx context.Context, queueID uint64, fn func(id string, deadline int64) error) error {
	return s.loadRange(ctx, queueID, prefixDedup, "deduplication ids", func(k, v []byte) (error, error) {
		if len(v) != 8 {
			return nil, fmt.Errorf("%w: deduplication record of %d bytes", errCorrupt, len(v))
		}
		return fn(string(k[queueKeyLen:]), int64(binary.BigEndian.Uint64(v))), nil
	})
}

// LoadHeldGroups implements store.Store: one scan of the queue's held
// groups.
func (s *Store) LoadHeldGroups(ctx context.Context, queueID uint64, fn func(queue.HeldGroup) error) error {
	return s.loadRange(ctx, queueID, prefixHeld, "held groups", func(k, v []byte) (error, error) {
		if len(k) < partitionKeyLen {
			return nil, fmt.Errorf("%w: held group key of %d bytes", errCorrupt, len(k))
		}
		h, err := decodeHeld(int32(binary.BigEndian.Uint32(k[queueKeyLen:])), string(k[partitionKeyLen:]), v)
		if err != nil {
			return nil, err
		}
		return fn(h), nil
	})
}

// loadRange scans the records of queue queueID under prefix (a key space
// of queue-scoped records), calling record with each key and value:
// record returns its caller's error apart (errFn, passed on unwrapped) from
// a store error (corruption), which is wrapped naming what ("held groups").
func (s *Store) loadRange(ctx context.Context, queueID uint64, prefix byte, what string, record func(k, v []byte) (errFn, err error)) error {
	errFn, err := func() (error, error) {
		if _, err := s.queue(ctx, queueID); err != nil {
			return nil, err
		}
		defer s.exit()
		start := queueKey(prefix, queueID)
		it, err := s.db.NewIterWithContext(ctx, &pebbledb.IterOptions{LowerBound: start, UpperBound: prefixEnd(start)})
		if err != nil {
			return nil, err
		}
		defer it.Close()
		for it.First(); it.Valid(); it.Next() {
			v, err := it.ValueAndErr()
			if err != nil {
				return nil, err
			}
			if errFn, err := record(it.Key(), v); errFn != nil || err != nil {
				return errFn, err
			}
		}
		return nil, it.Error()
	}()
	if errFn != nil {
		return errFn
	}
	if err != nil {
		return fmt.Errorf("pebble: load %s of queue %d: %w", what, queueID, err)
	}
	return nil
}

// loadItems returns fn's error apart, so that it is passed on unwrapped.
func (s *Store) loadItems(ctx context.Context, queueID uint64, partition int32, fn func(queue.ItemMeta) error) (errFn, err error) {
	if _, err := s.queue(ctx, queueID); err != nil {
		return nil, err
	}
	defer s.exit()
	items, err := newMetaIter(ctx, s.db, queueID, partition, 0)
	if err != nil {
		return nil, err
	}
	defer items.close()
	var m queue.ItemMeta
	n := 0
	for items.first(); items.valid(); items.next() {
		if n++; n%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		if err := items.meta(&m); err != nil {
			return nil, err
		}
		if err := fn(m); err != nil {
			return err, nil
		}
	}
	return nil, items.err()
}

// metaIter walks one partition's items in id order: each item's meta record
// (0x10), superseded by its state record (0x13) when it has one (store
// format 2, ADR 0020). LoadItems and ListItems read through it.
type metaIter struct {
	metas, states *pebbledb.Iterator
}

// newMetaIter opens a metaIter on r (the database or a snapshot) over the
// items of partition with ids from from on. Close it.
func newMetaIter(ctx context.Context, r pebbledb.Reader, queueID uint64, partition int32, from uint64) (*metaIter, error) {
	open := func(prefix byte) (*pebbledb.Iterator, error) {
		var kbuf [itemKeyLen]byte
		return r.NewIterWithContext(ctx, &pebbledb.IterOptions{
			LowerBound: itemKey(&kbuf, prefix, queueID, partition, from),
			UpperBound: prefixEnd(partitionKey(prefix, queueID, partition)),
		})
	}
	metas, err := open(prefixMeta)
	if err != nil {
		return nil, err
	}
	states, err := open(prefixState)
	if err != nil {
		metas.Close()
		return nil, err
	}
	states.First()
	return &metaIter{metas: metas, states: states}, nil
}

func (it *metaIter) first()      { it.metas.First() }
func (it *metaIter) valid() bool { return it.metas.Valid() }
func (it *metaIter) next()       { it.metas.Next() }

// err returns the first error either iterator met.
func (it *metaIter) err() error {
	if err := it.states.Error(); err != nil {
		return err
	}
	return it.metas.Error()
}

func (it *metaIter) close() {
	it.states.Close()
	it.metas.Close()
}

// meta decodes the current item's meta into m: its state record when it has
// one, else its meta record.
func (it *metaIter) meta(m *queue.ItemMeta) error {
	id, err := itemID(it.metas.Key())
	if err != nil {
		return err
	}
	v, err := it.metas.ValueAndErr()
	if err != nil {
		return err
	}
	if sv, ok, err := it.stateOf(id); err != nil {
		return err
	} else if ok {
		v = sv
	}
	if err := decodeMeta(v, id, m); err != nil {
		return fmt.Errorf("item %d: %w", id, err)
	}
	return nil
}

// stateOf moves the state iterator, used in ascending item order, to the
// record of item id and returns its value, if there is one. Records of items
// with a lower id (none but strays) are skipped.
func (it *metaIter) stateOf(id uint64) ([]byte, bool, error) {
	states := it.states
	for states.Valid() && binary.BigEndian.Uint64(states.Key()[partitionKeyLen:]) < id {
		states.Next()
	}
	if !states.Valid() || binary.BigEndian.Uint64(states.Key()[partitionKeyLen:]) != id {
		return nil, false, states.Error()
	}
	v, err := states.ValueAndErr()
	return v, err == nil, err
}

// LastID implements store.Store. It is served from memory.
func (s *Store) LastID(ctx context.Context, queueID uint64) (uint64, error) {
	qs, err := s.queue(ctx, queueID)
	if err != nil {
		return 0, fmt.Errorf("pebble: last id of queue %d: %w", queueID, err)
	}
	defer s.exit()
	qs.mu.Lock()
	defer qs.mu.Unlock()
	if qs.deleted {
		return 0, fmt.Errorf("pebble: last id of queue %d: %w", queueID, store.ErrQueueNotFound)
	}
	return qs.lastID, nil
}

// Write implements store.Store: the batch becomes one Pebble batch,
// committed with fsync when Config.Sync is on. The queue's LastID is raised
// to the greatest of its stored value, b.LastID and every Meta.ID the batch
// inserts, updates or requeues. A batch that fails to encode (an unknown op
// kind, a time outside 1678-2262) changes nothing.
func (s *Store) Write(ctx context.Context, b *store.Batch) error {
	if _, err := s.write(ctx, b, false); err != nil {
		return fmt.Errorf("pebble: write queue %d: %w", b.QueueID, err)
	}
	return nil
}

// WriteAsync implements store.AsyncWriter. With Config.NoSync off, the batch
// is applied with Pebble's ApplyNoSyncWait: it is in the write-ahead log's
// buffer and visible to reads when WriteAsync returns, and wait returns once
// the log's fsync covers it (Batch.SyncWait). Pebble's log writer syncs
// whatever the log holds, so batches applied while an fsync is in flight
// share the next one, and a batch is durable only after every batch
// applied before it. With NoSync on, wait is nil.
func (s *Store) WriteAsync(ctx context.Context, b *store.Batch) (func() error, error) {
	wait, err := s.write(ctx, b, true)
	if err != nil {
		return nil, fmt.Errorf("pebble: write queue %d: %w", b.QueueID, err)
	}
	if wait == nil {
		return nil, nil
	}
	return func() error {
		if err := wait(); err != nil {
			return fmt.Errorf("pebble: sync queue %d: %w", b.QueueID, err)
		}
		return nil
	}, nil
}

// write builds and commits the batch. With async and syncing on, it
// applies the batch without waiting for its fsync and returns the wait.
func (s *Store) write(ctx context.Context, b *store.Batch, async bool) (wait func() error, err error) {
	if err := s.writable(); err != nil {
		return nil, err
	}
	qs, err := s.queue(ctx, b.QueueID)
	if err != nil {
		return nil, err
	}
	// The call ends here, or, with a wait to run, when the wait has run:
	// Close and reopen must not close Pebble under a pending sync.
	handoff := false
	defer func() {
		if !handoff {
			s.exit()
		}
	}()
	if err := s.writable(); err != nil {
		return nil, err
	}
	qs.mu.Lock()
	defer qs.mu.Unlock()
	if qs.deleted {
		return nil, store.ErrQueueNotFound
	}

	pb := s.db.NewBatch()
	defer func() {
		if wait == nil {
			_ = pb.Close()
		}
	}()
	w := batchWriter{pb: pb, qid: b.QueueID, legacy: qs.legacy}
	if err := w.write(b.Ops); err != nil {
		return nil, err
	}
	last, qid := max(qs.lastID, b.LastID, w.last), b.QueueID
	if last > qs.lastID {
		if err := pb.Set(queueKey(prefixLastID, qid), binary.BigEndian.AppendUint64(nil, last), nil); err != nil {
			return nil, err
		}
	}
	if pb.Empty() {
		return nil, nil
	}
	if !async || !s.writeOpts.Sync {
		if err := s.commit(func() error { return pb.Commit(s.writeOpts) }); err != nil {
			return nil, err
		}
		s.written.Add(int64(pb.Len()))
		qs.lastID = last
		return nil, nil
	}
	applied := false
	err = s.commit(func() error {
		err := s.db.ApplyNoSyncWait(pb, s.writeOpts)
		applied = err == nil
		return err
	})
	if !applied {
		return nil, err
	}
	// Applied: the batch is Pebble's until its sync is waited for, even
	// when a fault came meanwhile (the wait then reports it).
	s.written.Add(int64(pb.Len()))
	qs.lastID = last
	handoff = true
	return func() error {
		defer s.exit()
		defer pb.Close()
		if err := pb.SyncWait(); err != nil {
			s.setFault("sync", err)
			return err
		}
		// A fault while the batch synced (Pebble's Fatalf returns): its
		// durability is not known, so it is not acknowledged.
		return s.writable()
	}, nil
}

// apiMisuse is told by Pebble's flushes and compactions of a SingleDelete
// that met a key set more than once (NondeterministicSingleDelete: the
// older value could come back; a bug, since format 2 sets each record it
// single-deletes once, ADR 0020), or that deleted nothing
// (IneffectualSingleDelete: harmless, as when a requeue deletes a state
// record that was never written).
func (s *Store) apiMisuse(info pebbledb.PossibleAPIMisuseInfo) {
	switch info.Kind {
	case pebbledb.NondeterministicSingleDelete:
		s.misused.Add(1)
		s.log.Error("storage: a record deleted with SingleDelete was set more than once", "event", info.String())
	case pebbledb.IneffectualSingleDelete:
		s.ineffectual.Add(1)
	default:
		s.log.Warn("storage: pebble reports a possible misuse", "event", info.String())
	}
}

// commit runs a Pebble commit, turning its failure, its panic (a commit
// after the log failed panics inside Pebble) or a fault reported while it
// ran into an error that also faults the store: nothing is acknowledged
// that may not be durable, and nothing is written through this handle
// again.
func (s *Store) commit(fn func() error) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("panic in pebble: %v", v)
			s.setFault("panic", err)
			// The panic may hold Pebble's commit lock: the handle cannot be
			// closed, so it will not be reopened.
			s.markBroken(err)
		}
	}()
	if err := fn(); err != nil {
		s.setFault("write", err)
		return err
	}
	return s.writable()
}

// ReadBodies implements store.Store. All reads come from one snapshot.
func (s *Store) ReadBodies(ctx context.Context, queueID uint64, partition int32, bodyIDs []uint64) ([]queue.ItemBody, []queue.ItemErrors, error) {
	bodies, errs, err := s.readBodies(ctx, queueID, partition, bodyIDs, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("pebble: read bodies of queue %d partition %d: %w", queueID, partition, err)
	}
	return bodies, errs, nil
}

// ReadBodiesWithin implements store.Store. All reads come from one
// snapshot.
func (s *Store) ReadBodiesWithin(ctx context.Context, queueID uint64, partition int32, bodyIDs []uint64, maxBytes int) ([]queue.ItemBody, []queue.ItemErrors, error) {
	bodies, errs, err := s.readBodies(ctx, queueID, partition, bodyIDs, maxBytes)
	if err != nil {
		return nil, nil, fmt.Errorf("pebble: read bodies of queue %d partition %d: %w", queueID, partition, err)
	}
	return bodies, errs, nil
}

// readBodies reads the bodies of bodyIDs, stopping after the one that
// brings their size to maxBytes or more (maxBytes <= 0: no bound).
func (s *Store) readBodies(ctx context.Context, queueID uint64, partition int32, bodyIDs []uint64, maxBytes int) ([]queue.ItemBody, []queue.ItemErrors, error) {
	if _, err := s.queue(ctx, queueID); err != nil {
		return nil, nil, err
	}
	defer s.exit()
	snap := s.db.NewSnapshot()
	defer snap.Close()
	r := bodyReader{snap: snap, queueID: queueID, partition: partition}
	n := len(bodyIDs)
	if maxBytes > 0 {
		n = min(n, 256) // the bound, not len(bodyIDs), decides how many
	}
	bodies := make([]queue.ItemBody, 0, n)
	errs := make([]queue.ItemErrors, 0, n)
	size := 0
	for _, id := range bodyIDs {
		if maxBytes > 0 && size >= maxBytes {
			break
		}
		b, e, err := r.read(id)
		if err != nil {
			return nil, nil, err
		}
		bodies, errs = append(bodies, b), append(errs, e)
		size += queue.ItemBytes(&queue.Item{Body: b, Errors: e})
	}
	return bodies, errs, nil
}

// ListItems implements store.Store. All reads come from one snapshot.
func (s *Store) ListItems(ctx context.Context, queueID uint64, partition int32, afterID uint64, limit int) ([]queue.Item, error) {
	return s.ListItemsWithin(ctx, queueID, partition, afterID, limit, 0)
}

// ListItemsWithin implements store.Store. All reads come from one
// snapshot; it reads a body only for an item it returns.
func (s *Store) ListItemsWithin(ctx context.Context, queueID uint64, partition int32, afterID uint64, limit, maxBytes int) ([]queue.Item, error) {
	items, err := s.listItems(ctx, queueID, partition, afterID, limit, maxBytes)
	if err != nil {
		return nil, fmt.Errorf("pebble: list items of queue %d partition %d: %w", queueID, partition, err)
	}
	return items, nil
}

func (s *Store) listItems(ctx context.Context, queueID uint64, partition int32, afterID uint64, limit, maxBytes int) ([]queue.Item, error) {
	if limit <= 0 {
		return nil, fmt.Errorf("limit %d must be > 0", limit)
	}
	if _, err := s.queue(ctx, queueID); err != nil {
		return nil, err
	}
	defer s.exit()
	if afterID == ^uint64(0) {
		return nil, nil
	}
	snap := s.db.NewSnapshot()
	defer snap.Close()
	metas, err := newMetaIter(ctx, snap, queueID, partition, afterID+1)
	if err != nil {
		return nil, err
	}
	defer metas.close()
	r := bodyReader{snap: snap, queueID: queueID, partition: partition}
	var items []queue.Item
	size := 0
	for metas.first(); metas.valid() && len(items) < limit && (maxBytes <= 0 || size < maxBytes); metas.next() {
		it := queue.Item{Partition: partition}
		if err := metas.meta(&it.Meta); err != nil {
			return nil, err
		}
		if it.Body, it.Errors, err = r.read(it.Meta.BodyID); err != nil {
			return nil, err
		}
		items = append(items, it)
		size += queue.ItemBytes(&it)
	}
	return items, metas.err()
}

// bodyReader reads bodies and errors of one partition from a snapshot.
type bodyReader struct {
	snap      *pebbledb.Snapshot
	queueID   uint64
	partition int32
	kbuf      [itemKeyLen]byte
}

// read returns the body and errors stored under bodyID, zero values for
// missing ones.
func (r *bodyReader) read(bodyID uint64) (queue.ItemBody, queue.ItemErrors, error) {
	var body queue.ItemBody
	var errs queue.ItemErrors
	err := r.get(prefixBody, bodyID, func(v []byte) (err error) {
		body, err = decodeBody(v)
		return err
	})
	if err == nil {
		err = r.get(prefixErrors, bodyID, func(v []byte) (err error) {
			errs, err = decodeErrors(v)
			return err
		})
	}
	if err != nil {
		return queue.ItemBody{}, queue.ItemErrors{}, fmt.Errorf("body %d: %w", bodyID, err)
	}
	return body, errs, nil
}

// get calls decode with the value under an item key, if there is one.
// decode must not keep v.
func (r *bodyReader) get(prefix byte, id uint64, decode func(v []byte) error) error {
	v, closer, err := r.snap.Get(itemKey(&r.kbuf, prefix, r.queueID, r.partition, id))
	if errors.Is(err, pebbledb.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	defer closer.Close()
	return decode(v)
}

// PutTask implements store.TaskStore. The change is synced whatever
// Config.NoSync says, as catalog changes are.
func (s *Store) PutTask(ctx context.Context, t store.TaskRecord) error {
	if err := s.putTask(ctx, t); err != nil {
		if len(t.ID) > maxTaskID {
			return fmt.Errorf("pebble: put task: %w", err)
		}
		return fmt.Errorf("pebble: put task %q: %w", t.ID, err)
	}
	return nil
}

func (s *Store) putTask(ctx context.Context, t store.TaskRecord) error {
	if t.ID == "" || len(t.ID) > maxTaskID {
		return fmt.Errorf("task id of %d bytes: want 1 to %d", len(t.ID), maxTaskID)
	}
	if err := s.enterWrite(ctx); err != nil {
		return err
	}
	defer s.exit()
	return s.commit(func() error { return s.db.Set(taskKey(t.ID), appendTask(nil, &t), pebbledb.Sync) })
}

// ListTasks implements store.TaskStore. It reads the 0x04 range.
func (s *Store) ListTasks(ctx context.Context) ([]store.TaskRecord, error) {
	tasks, err := s.listTasks(ctx)
	if err != nil {
		return nil, fmt.Errorf("pebble: list tasks: %w", err)
	}
	return tasks, nil
}

func (s *Store) listTasks(ctx context.Context) ([]store.TaskRecord, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	defer s.exit()
	iter, err := s.db.NewIterWithContext(ctx, &pebbledb.IterOptions{
		LowerBound: []byte{prefixTask},
		UpperBound: []byte{prefixTask + 1},
	})
	if err != nil {
		return nil, err
	}
	defer iter.Close()
	var out []store.TaskRecord
	for iter.First(); iter.Valid(); iter.Next() {
		v, err := iter.ValueAndErr()
		if err != nil {
			return nil, err
		}
		id := string(iter.Key()[1:])
		t, err := decodeTask(id, v)
		if err != nil {
			return nil, fmt.Errorf("task %q: %w", id, err)
		}
		out = append(out, t)
	}
	return out, iter.Error()
}

// DeleteTask implements store.TaskStore. The change is synced whatever
// Config.NoSync says.
func (s *Store) DeleteTask(ctx context.Context, id string) error {
	if err := s.enterWrite(ctx); err != nil {
		return fmt.Errorf("pebble: delete task %q: %w", id, err)
	}
	defer s.exit()
	if err := s.commit(func() error { return s.db.Delete(taskKey(id), pebbledb.Sync) }); err != nil {
		return fmt.Errorf("pebble: delete task %q: %w", id, err)
	}
	return nil
}

// Close implements store.Store. It waits for calls in progress, then closes
// the database, which syncs its write-ahead log: with Sync off, writes
// acknowledged before a clean Close are durable too.
func (s *Store) Close() error {
	if !s.closing.CompareAndSwap(false, true) {
		return fmt.Errorf("pebble: close: %w", store.ErrClosed)
	}
	close(s.stopMonitor)
	<-s.monitorDone
	s.gate.close()
	defer s.opts.Cache.Unref()
	if s.fault.Load().broken {
		return fmt.Errorf("pebble: close: %w", s.fault.Load().err)
	}
	if s.db == nil {
		return nil
	}
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("pebble: close: %w", err)
	}
	return nil
}

func decodeUint64(v []byte) (uint64, error) {
	if len(v) != 8 {
		return 0, fmt.Errorf("%w: %d bytes for a uint64", errCorrupt, len(v))
	}
	return binary.BigEndian.Uint64(v), nil
}

// logger adapts slog to Pebble's Logger, at most one line a second of each
// format (a failing flush retries many times a second; the lines left out
// are counted in the next one), and turns Fatalf into a fault.
type logger struct {
	l       *slog.Logger
	onFatal func(kind string, err error)
	mu      sync.Mutex
	last    map[string]*logRate
}

// logRate is the rate limit of one format.
type logRate struct {
	at      time.Time
	dropped int
}

func newLogger(l *slog.Logger, onFatal func(string, error)) *logger {
	return &logger{l: l, onFatal: onFatal, last: make(map[string]*logRate)}
}

// allow reports whether a line of format may be logged now, and how many
// were left out since the last one.
func (l *logger) allow(format string) (bool, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := l.last[format]
	if r == nil {
		if len(l.last) > 1000 {
			clear(l.last)
		}
		r = &logRate{}
		l.last[format] = r
	}
	now := time.Now()
	if now.Sub(r.at) < time.Second {
		r.dropped++
		return false, 0
	}
	n := r.dropped
	r.at, r.dropped = now, 0
	return true, n
}

func (l *logger) Infof(format string, args ...any) {
	if ok, n := l.allow(format); ok {
		l.l.Info(fmt.Sprintf(format, args...), suppressed(n)...)
	}
}

func (l *logger) Errorf(format string, args ...any) {
	if ok, n := l.allow(format); ok {
		l.l.Error(fmt.Sprintf(format, args...), suppressed(n)...)
	}
}

// Fatalf logs and marks the store faulted. Pebble calls it when it cannot
// go on safely (a failed MANIFEST write, a failed commit, an invariant
// violation); panicking would take every queue down with it, often in a
// goroutine of Pebble's where nothing can recover. The store instead never
// writes through this handle again: a write that completes while the store
// is faulted is reported failed (Store.write checks after committing), and
// the monitor reopens the database from what is on disk (ADR 0015).
func (l *logger) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	l.l.Error(msg, "fatal", true)
	l.onFatal("pebble", errors.New(msg))
}

// suppressed returns the log attributes counting lines left out.
func suppressed(n int) []any {
	if n == 0 {
		return nil
	}
	return []any{"suppressed", n}
}

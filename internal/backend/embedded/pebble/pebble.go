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
//	0x17 id               → activity record  an audited call (store.ActivityStore; id: 8-byte BE,
//	                                         growing), synced, kept when its queue is deleted
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
// Activity records (0x17) are pruned by one range deletion from the start
// of the range (internal/activity's retention).
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
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	pebbledb "github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

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
	// unclean says the store was not closed cleanly before Open (Unclean);
	// cleanPending, that the marker saying it was is still to be deleted
	// (Open was read-only): the first read-write reopen deletes it. Set
	// by Open and reopen, with no call in progress.
	unclean, cleanPending bool
	// written counts the bytes written since the free space was last read
	// (InsertFault reads it again after minFree/8).
	written atomic.Int64
	// misused and ineffectual count what Pebble's flushes and compactions
	// report of SingleDelete (apiMisuse), for the tests.
	misused, ineffectual atomic.Int64
	// v1 is set while the marker on disk still says format 1 (the store
	// was opened read-only): the first read-write reopen upgrades it.
	v1 bool
	// lateClose, set by a reopen that abandoned the Close of the faulted
	// handle (closeDB), is closed when that Close ends; nil otherwise.
	// Used by the monitor goroutine only.
	lateClose <-chan struct{}
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

	// activityMu serialises PutActivity and guards lastActivity, the
	// highest activity record ID written, once activityLoaded (read from
	// the 0x17 range at the first PutActivity). A leaf.
	activityMu     sync.Mutex
	lastActivity   uint64
	activityLoaded bool

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

func decodeUint64(v []byte) (uint64, error) {
	if len(v) != 8 {
		return 0, fmt.Errorf("%w: %d bytes for a uint64", errCorrupt, len(v))
	}
	return binary.BigEndian.Uint64(v), nil
}

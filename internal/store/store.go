// Package store holds Styx's record-level storage contracts and their
// sentinel errors: Store, the item log beneath the embedded backend
// (internal/backend/embedded, on Pebble: internal/backend/embedded/pebble),
// and the catalog, task, claim, key, history and activity stores that both
// backends implement.
// The records are the domain's types (queue.QueueInfo, queue.Item); nothing
// here is specific to a backend, and every implementation passes the
// conformance suite in storetest.
//
// Two contracts sit under the engine (ADR 0014). engine.Tx is the
// decision-level one: what an iteration of the one queue engine
// (internal/engine) asks of any backend. This package is the record-level
// one beneath the embedded backend (internal/backend/embedded): its logical queue
// keeps every partition's ready, leased and scheduled sets in memory, makes
// the engine's decisions there, and uses a Store as the durable log of them:
// it loads item metadata once at start-up, then writes one Batch per
// iteration. A Store never decides anything about an item's life. The
// PostgreSQL backend (internal/backend/postgres) implements engine.Tx in SQL and,
// from this package, only the catalog, task, claim, key, history and activity stores,
// which every backend shares.
//
// Items are stored in three parts, so that start-up reads no payloads:
//   - ItemMeta: the small, fixed state the logical queue keeps in memory,
//     keyed by the item's current ID (which changes on every requeue);
//   - ItemBody: payload and descriptive fields, keyed by BodyID (fixed for the
//     item's life in one queue, so a requeue does not rewrite the payload);
//   - ItemErrors: the attempt history, also keyed by BodyID, rewritten when a
//     retry records an error.
package store

import (
	"context"
	"errors"
	"time"

	"github.com/styxq/styx/internal/queue"
)

// Sentinel errors. Backends map their driver errors onto these; callers test
// them with errors.Is.
var (
	// ErrQueueNotFound: the named queue does not exist.
	ErrQueueNotFound = errors.New("queue not found")
	// ErrQueueExists: CreateQueue was given a name already in use.
	ErrQueueExists = errors.New("queue already exists")
	// ErrClosed: the store has been closed.
	ErrClosed = errors.New("store closed")
	// ErrKeyExists: CreateKey was given a name or an ID already in use.
	ErrKeyExists = errors.New("api key already exists")
	// ErrKeyNotFound: no API key has the given name or ID.
	ErrKeyNotFound = errors.New("api key not found")
)

// OpKind says what an Op does.
type OpKind uint8

const (
	// OpInsert writes Meta, Body and (when not zero) Errors of a new item.
	OpInsert OpKind = iota + 1
	// OpUpdate overwrites the Meta stored under Meta.ID.
	OpUpdate
	// OpRequeue deletes the Meta stored under OldID and writes Meta under
	// Meta.ID; the body stays where it is.
	OpRequeue
	// OpDelete deletes the Meta under Meta.ID and the body and errors under
	// Meta.BodyID.
	OpDelete
	// OpSetErrors overwrites the ItemErrors under Meta.BodyID.
	OpSetErrors
	// OpSetBody overwrites the ItemBody under Meta.BodyID (dead.edit).
	OpSetBody
	// OpLease records the lease of the item under Meta.ID (Meta is the
	// item's meta once leased). An item is leased at most once under one ID
	// (it gets a new ID when it is requeued), so a store may keep the lease
	// as a record written once; later changes of the same ID's meta are
	// OpUpdate.
	OpLease // OpDedup records that the queue accepted deduplication id DedupID
	// until DedupDeadline (Unix nanoseconds), replacing any record of the
	// id (queue.Deduplicate). Partition and Meta are not read.
	OpDedup
	// OpDedupForget deletes the record of deduplication id DedupID (its
	// window is over).
	OpDedupForget
	// OpHoldGroup records that group Held.Group of partition Partition is
	// held by a dead item (queue.HeldGroup, GroupHold), replacing any
	// record of the group. Meta is not read.
	OpHoldGroup
	// OpReleaseGroup deletes the record of held group Held.Group of
	// partition Partition (released, or dropped with its queue's items);
	// deleting a record the store does not hold is not an error.
	OpReleaseGroup
)

// Op is one change in a Batch. Which fields are read depends on Kind.
type Op struct {
	Kind      OpKind
	Partition int32
	Meta      queue.ItemMeta
	OldID     uint64
	Body      *queue.ItemBody
	Errors    *queue.ItemErrors
	// NoErrors, on OpDelete, says that no ItemErrors are stored under
	// Meta.BodyID (none were ever written), so the store need not delete
	// them. False means they may exist.
	NoErrors      bool // DedupID and DedupDeadline are read by OpDedup and OpDedupForget.
	DedupID       string
	DedupDeadline int64
	// Held is read by OpHoldGroup (the whole record) and OpReleaseGroup
	// (its Group).
	Held *queue.HeldGroup
}

// Batch is a group of changes to one queue, applied atomically by Write.
// Build it with the methods below; the zero value is empty and usable.
type Batch struct {
	// QueueID is the QueueInfo.ID of the queue the batch changes.
	QueueID uint64
	Ops     []Op
	// LastID, when non-zero, is persisted as the queue's id high-water mark
	// (see Store.LastID). Set it whenever the batch uses new ids.
	LastID uint64
	// Lazy tells an AsyncWriter that nothing waits on the batch: it may
	// apply it without starting a sync (WriteAsync then returns no wait);
	// it becomes durable with the next batch applied without Lazy, or
	// with Syncer.Sync. Stores that always sync, or never, ignore it.
	Lazy bool
}

// Insert adds a new item.
func (b *Batch) Insert(partition int32, m queue.ItemMeta, body queue.ItemBody, errs queue.ItemErrors) {
	b.Ops = append(b.Ops, Op{Kind: OpInsert, Partition: partition, Meta: m, Body: &body, Errors: &errs})
}

// InsertBody adds a new item with no attempt errors, taking body by
// reference (the hot path of produce: no copy of the body struct). The
// caller must not change *body afterwards.
func (b *Batch) InsertBody(partition int32, m queue.ItemMeta, body *queue.ItemBody) {
	b.Ops = append(b.Ops, Op{Kind: OpInsert, Partition: partition, Meta: m, Body: body})
}

// Dedup records deduplication id id as accepted until deadline (Unix
// nanoseconds).
func (b *Batch) Dedup(id string, deadline int64) {
	b.Ops = append(b.Ops, Op{Kind: OpDedup, DedupID: id, DedupDeadline: deadline})
}

// DedupForget deletes the record of deduplication id id.
func (b *Batch) DedupForget(id string) {
	b.Ops = append(b.Ops, Op{Kind: OpDedupForget, DedupID: id})
}

// HoldGroup records held group h (OpHoldGroup) in partition h.Partition.
func (b *Batch) HoldGroup(h queue.HeldGroup) {
	b.Ops = append(b.Ops, Op{Kind: OpHoldGroup, Partition: h.Partition, Held: &h})
}

// ReleaseGroup deletes the record of held group g of partition partition
// (OpReleaseGroup).
func (b *Batch) ReleaseGroup(partition int32, g string) {
	b.Ops = append(b.Ops, Op{Kind: OpReleaseGroup, Partition: partition, Held: &queue.HeldGroup{Partition: partition, Group: g}})
}

// Update overwrites an item's metadata.
func (b *Batch) Update(partition int32, m queue.ItemMeta) {
	b.Ops = append(b.Ops, Op{Kind: OpUpdate, Partition: partition, Meta: m})
}

// Requeue moves an item's metadata from oldID to m.ID.
func (b *Batch) Requeue(partition int32, oldID uint64, m queue.ItemMeta) {
	b.Ops = append(b.Ops, Op{Kind: OpRequeue, Partition: partition, Meta: m, OldID: oldID})
}

// Lease records the lease of an item (m is its meta once leased): the
// first change of m.ID's meta after its insert or requeue (OpLease).
func (b *Batch) Lease(partition int32, m queue.ItemMeta) {
	b.Ops = append(b.Ops, Op{Kind: OpLease, Partition: partition, Meta: m})
}

// Delete removes an item: metadata, body and errors. hasErrors false
// promises that no errors were ever stored for it (Op.NoErrors).
func (b *Batch) Delete(partition int32, m queue.ItemMeta, hasErrors bool) {
	b.Ops = append(b.Ops, Op{Kind: OpDelete, Partition: partition, Meta: m, NoErrors: !hasErrors})
}

// SetErrors overwrites an item's attempt history.
func (b *Batch) SetErrors(partition int32, m queue.ItemMeta, errs queue.ItemErrors) {
	b.Ops = append(b.Ops, Op{Kind: OpSetErrors, Partition: partition, Meta: m, Errors: &errs})
}

// SetBody overwrites an item's body (a dead item edited).
func (b *Batch) SetBody(partition int32, m queue.ItemMeta, body queue.ItemBody) {
	b.Ops = append(b.Ops, Op{Kind: OpSetBody, Partition: partition, Meta: m, Body: &body})
}

// Len is the number of ops.
func (b *Batch) Len() int { return len(b.Ops) }

// Store is the storage contract. Every method may be called concurrently
// from any goroutine, but the item methods of one queue are called by that
// queue's owner goroutine only (the logical queue), and ListItems may run
// beside it.
//
// Unless noted, methods return ErrClosed after Close, and wrap backend
// errors with the operation ("pebble: write queue 7: ...").
//
// The item methods (LoadItems, LastID, Write, ReadBodies, ListItems) return
// ErrQueueNotFound for a queue ID no live queue has: never assigned, or
// deleted. A Write racing DeleteQueue thus either lands before the delete
// (and is deleted with the queue) or fails; it never leaves items behind
// under a dead ID.
type Store interface {
	// TaskStore persists background tasks (redrives) beside the queues;
	// tasks are independent of them (DeleteQueue does not delete tasks).
	TaskStore

	// Catalog stores the queue definitions.
	Catalog

	// KeyStore stores the API keys (internal/auth).
	KeyStore

	// HistoryStore keeps the queues' per-minute history
	// (internal/history); DeleteQueue deletes the queue's.
	HistoryStore

	// ActivityStore keeps the activity log (internal/activity); records
	// outlive their queue (DeleteQueue keeps them).
	ActivityStore

	// LoadItems calls fn with the metadata of every item in one partition of
	// a queue, in ID order. It reads no payloads. An error from fn stops the
	// scan and is returned.
	LoadItems(ctx context.Context, queueID uint64, partition int32, fn func(queue.ItemMeta) error) error
	// LoadDedup calls fn with every deduplication id the queue has a
	// record of (OpDedup, not yet OpDedupForget), with its deadline, in no
	// particular order; expired ones included. An error from fn stops the
	// scan and is returned.
	LoadDedup(ctx context.Context, queueID uint64, fn func(id string, deadline int64) error) error
	// LoadHeldGroups calls fn with every held group the queue has a record
	// of (OpHoldGroup, not yet OpReleaseGroup), in no particular order. An
	// error from fn stops the scan and is returned.
	LoadHeldGroups(ctx context.Context, queueID uint64, fn func(queue.HeldGroup) error) error
	// LastID returns the highest id the queue has ever persisted through
	// Batch.LastID or the Meta.ID of an inserted, requeued or updated item
	// (0 for a new queue), so ids are never reused after a restart. It
	// never decreases.
	LastID(ctx context.Context, queueID uint64) (uint64, error)
	// Write applies the batch atomically: all of it or none. When it
	// returns nil the batch is durable (fsynced) unless the backend was
	// opened with sync off. Ops apply in order. The store keeps nothing
	// of b (it copies what it stores), so the caller may reuse it.
	Write(ctx context.Context, b *Batch) error
	// ReadBodies returns the bodies and errors of the given items of one
	// partition, in the order given. A missing body is returned as zero
	// values (the caller owns consistency).
	ReadBodies(ctx context.Context, queueID uint64, partition int32, bodyIDs []uint64) ([]queue.ItemBody, []queue.ItemErrors, error)
	// ListItems returns up to limit items of one partition whose ID is >
	// afterID, in ID order, with bodies and errors. limit must be > 0.
	ListItems(ctx context.Context, queueID uint64, partition int32, afterID uint64, limit int) ([]queue.Item, error)
	// ListItemsWithin is ListItems bounded by size as well: it stops after
	// the item that brings the total queue.ItemBytes of the items it
	// returns to maxBytes or more, and reads no body past it (maxBytes <=
	// 0: no bound). It returns at least one item when there is one; fewer
	// than limit items totalling less than maxBytes means none is left.
	ListItemsWithin(ctx context.Context, queueID uint64, partition int32, afterID uint64, limit, maxBytes int) ([]queue.Item, error)
	// ReadBodiesWithin is ReadBodies bounded by size: it reads the bodies
	// and errors of bodyIDs in order and stops after the one that brings
	// their total size (queue.ItemBytes) to maxBytes or more (maxBytes <=
	// 0: no bound), returning those of a prefix of bodyIDs, at least one
	// when bodyIDs is not empty.
	ReadBodiesWithin(ctx context.Context, queueID uint64, partition int32, bodyIDs []uint64, maxBytes int) ([]queue.ItemBody, []queue.ItemErrors, error)

	// Close flushes and releases the store. Further calls return ErrClosed.
	Close() error
}

// Guard is implemented by a store that can refuse writes while the rest
// of the server stays up (the Pebble store; ADR 0015): after a failed
// write or sync it refuses every write until it heals, and below its
// free-space watermark it refuses the calls that add items. Its methods
// are cheap (an atomic load) and safe for concurrent use.
type Guard interface {
	// WriteFault returns the error (ErrUnavailable naming the cause)
	// every write is refused with, or nil when the store is writable.
	WriteFault() error
	// InsertFault returns the error a call that adds items is refused
	// with: WriteFault's, or the free-space watermark's; nil when it may.
	InsertFault() error
	// Generation changes each time the store's state may have gone back
	// to what is durable (a reopen after a fault): a queue that keeps
	// state in memory reloads it when it changes.
	Generation() uint64
	// Health says why the store is degraded, "" when it is not.
	Health() string
}

// Recovery is implemented by a store that knows whether it was closed
// cleanly before it was opened (the Pebble store). After a shutdown that
// was not clean (a crash, a kill, a power cut, a restore of a copy taken
// while it ran), what it holds is what was durable: writes applied but not
// yet synced may be gone. A logical queue then holds the items a lease
// answered before its sync may have dealt (ADR 0034).
type Recovery interface {
	// Unclean reports whether the store's last shutdown before this open
	// was not clean; it does not change while the store is open.
	Unclean() bool
}

// Find returns the first store of type T among s and the stores it wraps
// (a store that wraps another says so with Unwrap, as the fault-injection
// wrapper does), or false when there is none.
func Find[T any](s Store) (T, bool) {
	for s != nil {
		if t, ok := s.(T); ok {
			return t, true
		}
		u, ok := s.(interface{ Unwrap() Store })
		if !ok {
			break
		}
		s = u.Unwrap()
	}
	var zero T
	return zero, false
}

// AsyncWriter is implemented by stores that can pipeline durability: apply
// a batch now and make it durable later, so that the logical queue can build
// its next batch while the previous one syncs (ADR 0012). The logical queue
// uses it when the store offers it and Write otherwise.
type AsyncWriter interface {
	// WriteAsync applies b as Write does (atomically, in order with the
	// queue's other writes; ReadBodies, ListItems and LoadItems see it at
	// once) but may return before b is durable. When wait is nil, b is
	// durable (or the store does not sync, as Write with sync off) when
	// WriteAsync returns. Otherwise the caller must call wait exactly once;
	// it blocks until b is durable and returns nil, or returns the error
	// that kept it from being so. Batches become durable in the order they
	// were applied: when wait returns nil, every batch the store applied
	// before b is durable too. An error from WriteAsync itself means b was
	// not applied.
	WriteAsync(ctx context.Context, b *Batch) (wait func() error, err error)
}

// Syncer is implemented by an AsyncWriter that applies Batch.Lazy batches
// without a sync: Sync makes every batch applied before it durable, or
// returns the error that kept them from being so.
type Syncer interface {
	Sync(ctx context.Context) error
}

// Catalog stores queue definitions. Its methods may be called concurrently
// from any goroutine; they return ErrClosed after the store is closed.
// Implemented by every Store and by the PostgreSQL backend (postgres), which
// shares the conformance suite's catalog and task tests.
type Catalog interface {
	// CreateQueue stores a new queue, assigning info.ID, and returns it.
	// Returns ErrQueueExists if the name is taken.
	CreateQueue(ctx context.Context, info queue.QueueInfo) (queue.QueueInfo, error)
	// UpdateQueue overwrites the queue named info.Name; info.ID must be the
	// stored one. Returns ErrQueueNotFound if there is no such queue or its
	// ID is not info.ID (it was deleted and re-created).
	UpdateQueue(ctx context.Context, info queue.QueueInfo) error
	// GetQueue returns ErrQueueNotFound if there is no such queue.
	GetQueue(ctx context.Context, name string) (queue.QueueInfo, error)
	// ListQueues returns the queues of p.Namespace (every namespace when
	// empty) whose names are >= p.Pivot, in bytewise name order, at most
	// p.Limit of them (no limit when <= 0).
	ListQueues(ctx context.Context, p queue.ListQueuesParams) ([]queue.QueueInfo, error)
	// DeleteQueue removes the queue and every item it holds. Returns
	// ErrQueueNotFound.
	DeleteQueue(ctx context.Context, name string) error
}

// TaskRecord is a persisted background task (a redrive), stored opaquely:
// the store keeps Data and indexes the task by ID.
type TaskRecord struct {
	// ID is unique among tasks, at most 128 bytes.
	ID string
	// Queue is the queue the task belongs to (a redrive's dead-letter
	// queue).
	Queue string
	// Data is the task's encoding, owned by its package (internal/redrive).
	Data []byte
}

// TaskStore persists background tasks so that they survive restarts. Its
// methods may be called concurrently from any goroutine.
type TaskStore interface {
	// PutTask creates or overwrites the task with t.ID. When it returns nil
	// the task is durable (as Write).
	PutTask(ctx context.Context, t TaskRecord) error
	// ListTasks returns every task, in ID order.
	ListTasks(ctx context.Context) ([]TaskRecord, error)
	// DeleteTask removes a task; an unknown id is not an error.
	DeleteTask(ctx context.Context, id string) error
}

// TaskClaimer is implemented by task stores that several servers share (the
// PostgreSQL backend): a task runs on the one server that holds its claim,
// and a task whose server died can be claimed by another.
type TaskClaimer interface {
	// ClaimTask claims key (internal/redrive uses the dead-letter queue's
	// name: one redrive runs per dead-letter queue) for this server. ok is
	// false when a claim on key is held elsewhere, by another server or
	// another call of this one. The claim lasts until release is called,
	// or until this server's session with the store ends (the server died
	// or lost the database).
	ClaimTask(ctx context.Context, key string) (release func(), ok bool, err error)
}

// ClaimChecker is implemented by a TaskClaimer whose claims can be lost
// while the server runs: PostgreSQL's claim is a session's advisory lock,
// gone with its connection (cut by the database, an administrator or a
// restart), and another server may then claim the key.
type ClaimChecker interface {
	// ClaimHeld reports whether this server still holds the claim on key
	// that ClaimTask gave it: false once it is lost, or when that cannot be
	// told (the store is away: a claim must not be assumed). Only the
	// goroutine that works under the claim calls it, never concurrently
	// with the claim's release.
	ClaimHeld(ctx context.Context, key string) bool
}

// KeyRecord is a stored API key (internal/auth). It holds no secret in
// clear: the SHA-256 hash of the key string, which the server compares in
// constant time (docs/security.md), and, when the server has a secret key
// file, the key string sealed under it for SigV4 (Sealed; ADR 0016).
type KeyRecord struct {
	// Name is the key's unique, user-chosen name (1 to 128 bytes), shown in
	// audit logs and redrive tasks.
	Name string
	// ID is the key's public identifier, unique among keys (1 to 64 bytes):
	// the part of the key string a request is looked up by.
	ID string
	// Hash is the SHA-256 hash of the whole key string (32 bytes).
	Hash []byte
	// Scopes are the key's scopes (auth.Scope values), at least one.
	Scopes []string
	// Queues are queue-name patterns ('*' matches any run of characters);
	// empty means every queue.
	Queues []string
	// CreatedAt is when the key was created.
	CreatedAt time.Time
	// CreatedBy is the name of the key that created this one.
	CreatedBy string
	// Sealed is the key string encrypted (AES-256-GCM, the key id as
	// additional data) under the server's secret key file, which SigV4
	// verification of the SQS API needs (auth.Keys.SigV4Secret). Nil for a
	// key created without a secret key file: it cannot sign SigV4
	// requests. Opaque to stores.
	Sealed []byte `json:",omitempty"`
}

// KeyStore stores API keys. Its methods may be called concurrently from any
// goroutine; they return ErrClosed after the store is closed. A change is
// durable when the method returns nil, and on a shared store (PostgreSQL)
// visible to every server at once.
type KeyStore interface {
	// CreateKey stores a new key. Returns ErrKeyExists if k.Name or k.ID is
	// in use.
	CreateKey(ctx context.Context, k KeyRecord) error
	// GetKey returns the key with the given ID, or ErrKeyNotFound.
	GetKey(ctx context.Context, id string) (KeyRecord, error)
	// ListKeys returns every key, in name order.
	ListKeys(ctx context.Context) ([]KeyRecord, error)
	// DeleteKey removes the key with the given name. Returns
	// ErrKeyNotFound.
	DeleteKey(ctx context.Context, name string) error
}

// HistoryMinute is one minute of one queue's history as one server counted
// it (internal/history). Several servers on one store (PostgreSQL) each
// write a record of their own for the minute; a reader merges them
// (ADR 0025): the counts (arrivals by group included, since issue 49)
// add up; depth is one server's observation of the shared queue.
type HistoryMinute struct {
	// Queue is the queue's name.
	Queue string
	// At is the start of the minute (whole minutes; stores keep Unix
	// seconds, UTC).
	At time.Time
	// Node identifies the server process that counted the minute (1 to 64
	// bytes, e.g. history.Recorder's node id).
	Node string
	// Produced, Completed and DeadLettered count the items the node
	// produced to the queue, completed from it and moved from it to its
	// dead-letter queue in the minute (>= 0).
	Produced, Completed, DeadLettered int64
	// Depth is the queue's items (ready, leased, scheduled) at the node's
	// last sample of the minute; -1 when it took none.
	Depth int64
	// DeadByGroup, on a dead-letter queue, counts the items that arrived
	// in the minute by error group fingerprint, as the node's dead-letter
	// moves counted them when the items died; nil when none.
	DeadByGroup map[string]int64
	// GroupPatterns holds the error pattern of each fingerprint of
	// DeadByGroup (when known), so that a chart names a group whose items
	// are gone; nil when none. Records written before issue 49 have none.
	GroupPatterns map[string]string
}

// HistoryStore keeps the queues' per-minute history (internal/history), so
// that it survives restarts and, on a shared store, every server reads the
// same. Records are small and written once a minute per queue and server,
// off the queues' loops; a lost write costs a minute of a chart, never an
// item, so implementations need not sync them. Its methods may be called
// concurrently from any goroutine; they return ErrClosed after the store
// is closed, and backend errors wrapped with the operation.
type HistoryStore interface {
	// PutHistory stores each minute, replacing any record of the same
	// queue, minute and node (so a write retried after a lost answer
	// counts nothing twice). Minutes of a queue that does not exist are
	// dropped without an error. Not atomic across minutes: after an error
	// some may be stored.
	PutHistory(ctx context.Context, minutes []HistoryMinute) error
	// ReadHistory returns the stored minutes of the named queues (every
	// node's record) whose At is in [from, to], ordered by queue, minute
	// and node. Unknown queues have none.
	ReadHistory(ctx context.Context, queues []string, from, to time.Time) ([]HistoryMinute, error)
	// PruneHistory deletes every queue's minutes whose At is before
	// before.
	PruneHistory(ctx context.Context, before time.Time) error
}

// ActivityRecord is one audited call as the activity log keeps it
// (internal/activity, issue 49): who did what to which queue, and when.
// Records are small (a few hundred bytes) and written once.
type ActivityRecord struct {
	// ID orders the records: assigned by PutActivity, greater than every
	// record's the store held when it was written (newest first is ID
	// descending). Ignored by PutActivity.
	ID uint64
	// At is when the call was answered (stores keep Unix nanoseconds).
	At time.Time
	// Key is the name of the API key that made the call ("" without
	// --auth).
	Key string
	// Door is the door the call came through ("v1", "sqs"); Action the
	// door's own name for it ("DeleteQueue"), empty on /v1.
	Door, Action string
	// Op is the /v1 call the call was made as ("/v1/dead.delete").
	Op string
	// Queue is the queue the call acted on ("" when it named none).
	Queue string
	// Details are what the call did, in the order the call recorded them
	// ("deleted" "6"); nil when none.
	Details []ActivityDetail
}

// ActivityDetail is one thing an audited call did: a name ("deleted",
// "task", "matched") and its value as text ("6").
type ActivityDetail struct {
	Name, Value string
}

// ActivityListParams selects a page of the activity log.
type ActivityListParams struct {
	// Queue keeps the records of one queue; "" keeps every record.
	Queue string
	// Before keeps the records whose ID is below it (the last ID of the
	// previous page); 0 starts at the newest.
	Before uint64
	// Limit is the most records returned; must be > 0.
	Limit int
}

// ActivityStore keeps the activity log (internal/activity): the records of
// audited calls, so that they survive restarts and, on a shared store
// (PostgreSQL), every server reads every server's. Records are kept apart
// from queues: a queue's delete keeps its records (who deleted it is one).
// Its methods may be called concurrently from any goroutine; they return
// ErrClosed after the store is closed, and backend errors wrapped with the
// operation.
type ActivityStore interface {
	// PutActivity stores r under a new ID, which it returns. When it
	// returns nil the record is durable (synced, whatever the item log's
	// sync setting says, as task records are).
	PutActivity(ctx context.Context, r ActivityRecord) (uint64, error)
	// ListActivity returns up to p.Limit records of p.Queue (every queue
	// when empty) whose ID is below p.Before (any when 0), newest (highest
	// ID) first.
	ListActivity(ctx context.Context, p ActivityListParams) ([]ActivityRecord, error)
	// PruneActivity deletes the records whose At is before before, and
	// every record but the keep newest (keep <= 0: no bound by count).
	// On a shared store, rows another server is pruning at the same time
	// may be left to the next prune.
	PruneActivity(ctx context.Context, before time.Time, keep int) error
}

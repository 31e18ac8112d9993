package engine

import (
	"context"

	"github.com/styxq/styx/internal/queue"
)

// The engine's contract: what a backend implements so that the engine can
// run a queue on it (ADR 0014, ADR 0019). It has two halves: the write
// half, Tx, which runs in the loop, and the read half, Reads, which does
// not. The backend gives each iteration a Tx, the
// decision-level storage contract: it reads the items the rules need and
// stores what the engine decided (the embedded backends from their
// in-memory index and one batch write, PostgreSQL with statements in one
// transaction). The optional interfaces (Locker, Deduplicator,
// DeduplicationLimiter) are the steps a backend adds to an iteration; the
// rules themselves are in internal/queue/rules.go, the iteration that
// applies them in iterate.go.

// Item is what the engine reads of an item: plain values, no backend
// handle (a backend finds its own record by Partition and ID).
type Item struct {
	Partition int32
	ID        uint64
	Attempts  int32
	// Leased reports a lease, live or not; LeaseDeadline is then set (Unix
	// ns).
	Leased        bool
	LeaseDeadline int64
	// Expire is the expire deadline (Unix ns; 0 for none).
	Expire int64
	// HasHistory is false when the item surely has no attempt history (so
	// the engine need not read one).
	HasHistory bool
	// DeadCopy reports a dead item resting in a dead-letter queue (its
	// source key is a dead copy's: queue.IsDeadCopyKey). Its leases that
	// end without a complete are DLQ attempts: recorded apart
	// (queue.RecordDeadLetterAttempt), never as its last error.
	DeadCopy bool
	// Redrive is the id of the tracked redrive task that moved the item
	// into the queue (queue.RedriveTaskOf of its source key), "" for any
	// other item: the engine reports what becomes of it (outcomes.go).
	Redrive string
}

// Tx is one iteration of a queue on its backend. Methods are called by the
// loop goroutine, in the order the engine decides; an error from any of
// them is a storage failure and fails the whole iteration (Commit gets it).
type Tx interface {
	// Info is the queue's configuration for this iteration.
	Info() queue.QueueInfo
	// Due ends what is due by now: scheduled items due become ready, and it
	// returns the leased items whose lease deadline passed and the ready
	// or scheduled items past their expire deadline, for the engine to end
	// and kill.
	Due() (leases, expired []Item, err error)
	// Item returns item id of partition n as this iteration sees it (an
	// item ended earlier in the iteration is gone); false when there is
	// none.
	Item(n int32, id uint64) (Item, bool)
	// Histories returns the attempt histories of xs, in order.
	Histories(xs []Item) ([]queue.ItemErrors, error)
	// Requeue puts x back after its lease ended, by e (Attempts; ready at
	// once or scheduled for e.At), under a new id it writes to *newID
	// (before Commit returns; newID may be nil). h, when not nil, is x's
	// new attempt history.
	Requeue(x Item, e queue.Ending, h *queue.ItemErrors, newID *uint64) error
	// Kill makes x dead for reason: it moves to the queue's dead-letter
	// queue (or is dropped without one), h (when not nil) its new history.
	// moving is true when the move is not done when the iteration commits
	// (the embedded backends' ADR 0003 protocol): the answer to a retry
	// then waits for it (Reply.Moving).
	Kill(x Item, reason string, h *queue.ItemErrors) (moving bool, err error)
	// Complete deletes xs (a complete).
	Complete(xs []Item) error
	// Requeued returns the item of partition n that entered the queue
	// under id first (queue.LeasedItem.FirstID) when it has been requeued
	// since (its id is no longer first) and is ready or scheduled now, as
	// this iteration sees it; false when there is none (it left the queue,
	// is leased or dying, or was never requeued). PostgreSQL passes over a
	// row another transaction holds (it is being leased or changed) and
	// reports false. The engine may then Complete the item.
	Requeued(n int32, first uint64) (Item, bool, error)
	// Renew sets the lease deadline of xs (Unix ns). holders[i], when
	// holders is not nil, is the consumer the engine knows holds xs[i]'s
	// lease (zero: not known), for a backend that rewrites a lease's
	// record whole (the embedded backends): the holder stored with the
	// lease stays.
	Renew(xs []Item, deadline int64, holders []queue.Holder) error
	// ReadyCounts returns each partition's ready items, for the engine's
	// partition choice only: exact on the embedded backends; PostgreSQL
	// counts at most 1,000 per partition, and a queue with one partition
	// gets 1,000 without a count (there is nothing to choose).
	ReadyCounts() ([]int, error)
	// Produce inserts items into partition n under new ids, created now,
	// as the engine decided them: scheduled at EnqueueAt when it is set
	// (the engine cleared the ones due now: queue.EnqueueNow), ready
	// otherwise; expire is every item's expire deadline (Unix ns; 0 for
	// none).
	Produce(n int32, items []queue.ProduceItem, expire int64) error
	// Redrive inserts redriven items into partition n, ready, under new
	// ids, created now, with the bodies and histories as given (the engine
	// built each body and counted the redrive in its RedriveCount) and
	// expire as their expire deadline (Unix ns; 0 for none); one whose
	// SourceKey the queue holds already is skipped.
	Redrive(n int32, items []queue.RedriveItem, expire int64) error
	// Lease leases up to max of partition n's oldest ready items until
	// deadline (attempts + 1) and returns them; durable reports that every
	// one was stored by a batch already durable (ADR 0013). maxBytes, when
	// not 0, bounds the items' payload and attributes together: it stops
	// before the first item that would take them over it (the first item
	// is leased whatever its size) and reports more, that ready items were
	// left for that reason alone; those are not leased (no attempt). A
	// partition leased by the rules of its item groups is bounded the same
	// way, in the order the lease hands its items out: a group's run may
	// be cut (its items left wait for the group, as after a full batch),
	// and more may then report items that no lease can take until the
	// group's run is done (Serve counts again). holder(k) is the consumer
	// the k-th item of items goes to, which the backend stores with its
	// lease (queue.ItemMeta.Holder; issue 49); nil means unknown.
	Lease(n int32, max int, maxBytes, deadline int64, holder func(k int) queue.Holder) (items []queue.LeasedItem, durable, more bool, err error)
	// Held returns the items of partition n that hold the given source
	// keys (queue.ItemMeta.SourceKey), as stored, by key.
	Held(n int32, keys []string) (map[string]queue.Item, error)
	// Import inserts items into partition n under new ids, as given (the
	// engine decided their state, deadlines and source keys), and returns
	// each as stored: the new item, or the one that holds its source key
	// when another node's transaction stored one first.
	Import(n int32, items []queue.Item) ([]queue.Item, error)
	// Delete removes the items of refs, in any state (or, exceptLeased,
	// those not leased), and returns how many it removed; unknown ids are
	// skipped. The engine checked the partitions.
	Delete(refs []queue.ItemRef, exceptLeased bool) (int, error)
	// Clear removes the items p selects.
	Clear(p queue.ClearParams) error
	// Edit reads the item ref in full, lets edit change its Body and
	// Errors, stores them and returns the item as stored. The engine
	// checked the partition. An unknown id is apierr.NotFound, a leased item
	// apierr.Conflict; edit's error is returned as it is, nothing changed.
	Edit(ref queue.ItemRef, edit func(*queue.Item) error) (queue.Item, error)
	// Stats describes the queue as this iteration sees it (queue.Stats;
	// the engine sets LeaseWaiting): the embedded backends from the loop's
	// bookkeeping, PostgreSQL from its count tables in the iteration's
	// transaction.
	Stats() (queue.Stats, error)
	// Scheduled lists a page of partition p.Partition's scheduled items
	// (queue.Queue.ListPage with p.Scheduled): which items are scheduled
	// is the loop's state on the embedded backends. The engine checked the
	// partition.
	Scheduled(p queue.ListParams) ([]queue.Item, error)
	// ErrorGroups returns the error groups of the queue's dead items that
	// f selects, largest first, at most limit (>= 1), with their sample
	// errors and patterns (queue.Queue.ErrorGroups).
	ErrorGroups(f queue.ErrorGroupFilter, limit int) (queue.ErrorGroups, error)
	// Reload rebuilds the backend's state from storage once this iteration
	// is stored (its pending writes would be lost by a reload before), and
	// then calls done, in the loop, with the reload's outcome: nil, or the
	// storage failure, or the error of apierr NotFound when the queue is
	// gone. PostgreSQL holds no state to rebuild: it checks the queue.
	Reload(done func(error))
	// Commit stores the iteration (err nil) or drops it (err: a storage
	// failure; the backend rolls back or reloads) and answers replies, in
	// order: each with its own error if it has one, else with err, else
	// with success once the iteration is durable (a Reply.Mode may allow
	// earlier). When the iteration fails (err, or its own write), it also
	// answers every waiting lease with the failure (Waiters.Fail), as the
	// client-facing error it makes of it (453).
	Commit(replies []Reply, err error)
}

// Reads is a backend's read half (ADR 0019): reads of committed state
// made on the caller's goroutine, never in the loop, so a long page or a
// slow scan does not hold up the queue's requests. What they return is a
// snapshot of storage: an iteration in progress is not in it. The reads
// that need the loop's state are Tx's (Stats, Scheduled, ErrorGroups).
type Reads interface {
	// Page lists a page of partition p.Partition's items that are not
	// scheduled (ready, leased, dead), with ids above p.After, in id
	// order, bounded by p.Limit and p.MaxBytes (queue.Queue.ListPage with
	// p.Scheduled false). A partition the queue does not have lists none.
	Page(ctx context.Context, p queue.ListParams) ([]queue.Item, error)
	// Scan reads the queue's items that f selects in id order across its
	// partitions (queue.Scan; queue.Queue.Scan).
	Scan(ctx context.Context, partitions int32, f *queue.DeadFilter, p queue.ScanParams) ([]queue.Item, uint64, error)
	// Consumers returns the queue's consumers given own, those this node's
	// loop recorded (Consumers.Snapshot): own on the embedded backends;
	// PostgreSQL merges those the other live nodes wrote.
	Consumers(ctx context.Context, own []queue.Consumer) ([]queue.Consumer, error)
}

// LeaseCommitter is implemented by a Tx that can send its commit with the
// iteration's last lease, in one round trip (PostgreSQL: the lease's
// statement and COMMIT in one pipeline, issue 53). The engine calls
// LeaseAndCommit instead of Lease for a lease that Serve makes last (its
// only one, whatever it returns: one partition, every waiter dealt its
// items); nothing but Commit follows it. It leases as Lease does and then
// stores the iteration as Commit would, without answering anything (Commit
// still answers the replies, and finds the iteration stored), or, when the
// iteration holds work that must run between the two, leases only and
// leaves the commit to Commit. An error is the iteration's, as Lease's and
// a commit's are: nothing it leased is given to anyone.
type LeaseCommitter interface {
	LeaseAndCommit(n int32, max int, maxBytes, deadline int64, holder func(k int) queue.Holder) (items []queue.LeasedItem, durable, more bool, err error)
}

// Locker is implemented by a Tx that must prepare the items an iteration's
// requests name before anything else runs: PostgreSQL locks their rows, in
// id order, in the iteration's first statement (its lock order). The
// engine calls Lock first when the Tx has it and the requests name items.
type Locker interface {
	// Lock prepares the items ids name and those the clear c selects
	// (when not nil).
	Lock(ids []uint64, c *queue.ClearParams) error
}

// Deduplicator is implemented by a Tx that claims the deduplication ids of
// an iteration's produces (queue.ProduceItem.DeduplicationID) in one step,
// right after Lock and before anything else: PostgreSQL inserts them in
// sorted order, its lock order for them, so that two nodes' transactions
// never wait for each other. Its Produce then stores, of the items with an
// id, the first of each id it claimed, and it releases at commit the claims
// no item used (a produce refused by a rule after the claim).
type Deduplicator interface {
	// Claim claims ids (sorted, distinct, not empty) for this iteration.
	Claim(ids []string) error
}

// DeduplicationLimiter is implemented by a Tx that bounds the deduplication
// ids a queue holds (the embedded backends, which keep them in memory). The
// engine calls AdmitDeduplication once per produce, with all its items,
// before any of them is stored (Produce), so that a produce it refuses
// stores nothing. It returns the apierr error of queue.DeduplicationLimitError
// when the produce's new ids do not fit; it may forget ids whose window
// ended to make room.
type DeduplicationLimiter interface {
	AdmitDeduplication(items []queue.ProduceItem) error
}

// Lazy is implemented by a Tx that can write an iteration without a sync
// of its own (the embedded backend on Pebble, ADR 0030). The engine calls
// Lazy before Commit when nothing waits on the iteration's writes: its
// requests were all leases that completed first and wait on
// (LeaseWait.WaitAfterComplete), no lifecycle ran and nothing was
// answered. The backend must then make those writes durable before it
// sends any later answer (a later iteration's replies, DurableAnswerer),
// so that no answer ever rests on them before they are durable; until
// then a crash may undo them, and nobody was told they happened.
type Lazy interface {
	Lazy()
}

// ReplyMode says when a reply may leave.
type ReplyMode uint8

const (
	// Durable replies leave once the iteration is durable.
	Durable ReplyMode = iota
	// Consume replies (complete, retry, renew) leave once written when the
	// backend answers consumes before sync (ADR 0013).
	Consume
	// DurableItems replies (a lease of items all stored by durable
	// batches) leave once written under the same setting.
	DurableItems
	// Undoable replies (complete, SQS's DeleteMessage) leave once written
	// on a backend that syncs after it writes (Pebble) unless its settings
	// make completes wait for their sync (SyncCompletes): a crash before
	// that sync can only bring the completed items back, to be delivered
	// again (ADR 0033). Under ADR 0013's setting they leave once written
	// too, as Consume replies. Elsewhere they are Durable ones.
	Undoable
)

// Reply is an answer of the iteration: its request's result is in its Op
// (or LeaseWait) already; Err, when set, is the request's own error.
type Reply struct {
	R    *Request
	Err  error
	Mode ReplyMode
	// Moving lists dead items whose move must end before the reply leaves
	// (Tx.Kill's moving).
	Moving []Item
}

// Op is what a request asks of its queue's loop: one of the engine's
// operations, which the Engine's methods build and Iterate runs over the
// Tx, or a backend's housekeeping (Housekeeping). The set is closed: a
// type outside this package is an Op only by embedding HousekeepingOp.
type Op interface{ isOp() }

// Housekeeping is a backend's own work in its loop, never an API call: the
// embedded backends' dead-letter moves (ADR 0003), the held-group checker
// and the metrics gauges. Iterate runs it in arrival order with the other
// requests, in the iteration the backend began (the backend reaches its
// own state directly: the op runs on the loop goroutine), and knows
// nothing else of it. Its result goes into the op itself. Run's apierr
// error is the requester's (nothing changed); another fails the
// iteration; answered says Run has taken the answer on itself (it answers
// r later, once, via r.Answer).
type Housekeeping interface {
	Op
	Run(now int64, r *Request) (answered bool, err error)
}

// HousekeepingOp, embedded in a backend's request type, makes it an Op.
type HousekeepingOp struct{}

func (HousekeepingOp) isOp() {}

package engine

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/styxq/styx/internal/apierr"
	"github.com/styxq/styx/internal/clock"
	"github.com/styxq/styx/internal/queue"
	"github.com/styxq/styx/metrics"
)

// The engine's iteration: what one loop iteration decides, on every
// backend (ADR 0014). The backend gives each iteration a Tx, the
// decision-level storage contract: it reads the items the rules need and
// stores what the engine decided (the embedded backends from their
// in-memory index and one batch write, PostgreSQL with statements in one
// transaction). The rules themselves are in internal/queue/rules.go.

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
	// Renew sets the lease deadline of xs (Unix ns).
	Renew(xs []Item, deadline int64) error
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
	// group's run is done (Serve counts again).
	Lease(n int32, max int, maxBytes, deadline int64) (items []queue.LeasedItem, durable, more bool, err error)
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
	// Commit stores the iteration (err nil) or drops it (err: a storage
	// failure; the backend rolls back or reloads) and answers replies, in
	// order: each with its own error if it has one, else with err, else
	// with success once the iteration is durable (a Reply.Mode may allow
	// earlier). When the iteration fails (err, or its own write), it also
	// answers every waiting lease with the failure (Waiters.Fail), as the
	// client-facing error it makes of it (453).
	Commit(replies []Reply, err error)
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
// Tx, or a backend's own (Local). The set is closed: a type outside this
// package is an Op only by embedding LocalOp.
type Op interface{ isOp() }

// Local is a backend's own request (the embedded backend's statistics,
// configuration, reload and dead-letter moves; a contract test's steps:
// Engine.Do): Iterate runs it in arrival order with the others, on the
// iteration's Tx, and knows nothing else of it. Its result goes into the
// op itself. Run's apierr error is the client's (it answers the request,
// nothing changed); another fails the iteration; answered says Run has
// taken the answer on itself (it answers r later, once, via r.Answer).
type Local interface {
	Op
	Run(tx Tx, now int64, r *Request) (answered bool, err error)
}

// LocalOp, embedded in a backend's request type, makes it an Op.
type LocalOp struct{}

func (LocalOp) isOp() {}

// The requests every backend runs the same way; each carries its result.
type (
	produceOp  struct{ items []queue.ProduceItem }
	completeOp struct {
		partition int32
		ids       []uint64
	}
	retryOp struct {
		partition int32
		items     []queue.RetryItem
		out       []queue.RetryOutcome
	}
	renewOp struct {
		partition int32
		ids       []uint64
		timeout   time.Duration
		out       []time.Time
	}
	importOp struct {
		partition int32
		items     []queue.Item
		out       []queue.Item
	}
	// receivedOp deletes the items of receipts (DeleteReceived).
	receivedOp struct {
		partition int32
		rs        []queue.Receipt
		deleted   []bool
	}
	deleteOp struct {
		refs         []queue.ItemRef
		exceptLeased bool // DeleteDead: skip leased items
		n            int
	}
	clearOp   struct{ p queue.ClearParams }
	redriveOp struct{ items []queue.RedriveItem }
	editOp    struct {
		ref  queue.ItemRef
		edit func(*queue.Item) error
		out  queue.Item
	}
	// doOp runs f (Engine.Do).
	doOp struct {
		LocalOp
		ids []uint64
		f   func(tx Tx, now int64) error
	}
)

func (*produceOp) isOp()  {}
func (*completeOp) isOp() {}
func (*retryOp) isOp()    {}
func (*renewOp) isOp()    {}
func (*importOp) isOp()   {}
func (*deleteOp) isOp()   {}
func (*receivedOp) isOp() {}
func (*clearOp) isOp()    {}
func (*redriveOp) isOp()  {}
func (*editOp) isOp()     {}

// Run implements Local.
func (op *doOp) Run(tx Tx, now int64, _ *Request) (bool, error) { return false, op.f(tx, now) }

// Engine is the request side of a queue, the same on every backend: the
// Queue methods that run in the loop, and the iteration (Iterate). A
// backend embeds it and gives each iteration a Tx.
type Engine struct {
	Loop *Loop
	// Admit, when set (by a backend whose store can refuse writes:
	// store.Guard), is asked before each call that writes, with inserts
	// true for the calls that add items (produce, import, a redrive into
	// the queue); its error refuses the call at once (453), so nothing
	// reaches an iteration that would fail.
	Admit func(inserts bool) error
	// produceNext and leaseNext are the tie-break cursors of the partition
	// choice (engine/distribution.go): the partition after the one chosen
	// last. Owned by the loop.
	produceNext, leaseNext int
	// completed observes the attempts of completed items
	// (styx_item_attempts{outcome="completed"}); nil in tests without
	// metrics.
	completed func(n int32)
}

// NewEngine returns the engine of the queue name, with its loop (not
// started: the backend calls Loop.Start), which runs the iterations the
// backend begins. m, when not nil, receives the attempts of completed
// items.
func NewEngine(name string, clk clock.Clock, m *metrics.Metrics) *Engine {
	e := &Engine{Loop: NewLoop(name, clk)}
	e.Loop.engine = e
	if m != nil {
		e.completed = func(n int32) { m.ItemAttempts.WithLabelValues("completed").Observe(float64(n)) }
		e.Loop.OnPanic = func(q string, _ any) { m.LoopPanics.WithLabelValues(q).Inc() }
	}
	return e
}

// Name returns the queue's name.
func (e *Engine) Name() string { return e.Loop.Name() }

// QueueLoop returns the queue's loop (CloseAll).
func (e *Engine) QueueLoop() *Loop { return e.Loop }

// Pending returns how many requests wait in the queue's channel; a
// background task (a redrive) backs off while it is not 0.
func (e *Engine) Pending() int { return e.Loop.Pending() }

// admit returns the error a call is refused with before it reaches the
// loop: the storage refuses writes (a fault), or, for a call that adds
// items (inserts), is below its free-space watermark (ADR 0015). Nil
// without an Admit.
func (e *Engine) admit(inserts bool) error {
	if e.Admit == nil {
		return nil
	}
	return e.Admit(inserts)
}

// Produce adds items to one partition, the one with the fewest ready items
// (ties take turns; see engine/distribution.go). It returns when they are
// durable.
func (e *Engine) Produce(ctx context.Context, items []queue.ProduceItem) error {
	if err := e.admit(true); err != nil {
		return err
	}
	return e.Loop.Call(ctx, &produceOp{items: items}, false)
}

// Lease waits up to p.Timeout for ready items and leases up to p.BatchSize
// of them from one partition: the one with the most ready items, shared
// item by item with the other leases waiting on it when there are not
// enough for all (Serve). Returns an apierr.Retry error when none
// came. A lease whose ctx ends after the loop served it but before the
// answer reached it gives its items back, attempts not counted (giveBack).
func (e *Engine) Lease(ctx context.Context, p queue.LeaseParams) (queue.LeaseResult, error) {
	if err := e.admit(false); err != nil {
		return queue.LeaseResult{}, err
	}
	w := &LeaseWait{ClientID: p.ClientID, Owner: p.Owner, BatchSize: p.BatchSize, Timeout: p.Timeout, MaxBytes: p.MaxBytes,
		Abandoned: e.giveBack}
	if err := e.Loop.CallLease(ctx, w); err != nil {
		return queue.LeaseResult{}, err
	}
	return w.Result, nil
}

// Complete deletes leased items. Every id must be leased in the partition,
// or nothing changes and an apierr.Invalid error names the first that is not.
func (e *Engine) Complete(ctx context.Context, partition int32, ids []uint64) error {
	if err := e.admit(false); err != nil {
		return err
	}
	return e.Loop.Call(ctx, &completeOp{partition: partition, ids: ids}, false)
}

// DeleteReceived deletes, for each receipt of rs, the item of the lease it
// names (the SQS API's DeleteMessage, whose receipt handle outlives the
// lease) unless the item has been leased again since: it deletes the item when it is still under
// that lease (live, or expired and not yet ended), or when the lease ended
// (it expired, or a retry ended it) and the item waits, ready or
// scheduled, with the attempts it had under that lease. The check and the
// delete are one step of the queue's loop (one transaction on
// PostgreSQL), so an item leased in between is never deleted. It reports,
// in rs order, whether it deleted each item: false when the item was
// leased again, completed, dead-lettered or deleted since (or by an earlier
// receipt of rs). A partition the
// queue does not have is an apierr.Invalid error. A retry that released
// the lease (RetryItem.Release) gives the attempt back, so a receipt of
// the lease before it deletes the item after it is leased again and that
// lease ends too (the SQS API never releases).
func (e *Engine) DeleteReceived(ctx context.Context, partition int32, rs []queue.Receipt) ([]bool, error) {
	if err := e.admit(false); err != nil {
		return nil, err
	}
	op := &receivedOp{partition: partition, rs: rs}
	if err := e.Loop.Call(ctx, op, false); err != nil {
		return nil, err
	}
	return op.deleted, nil
}

// Retry ends leases without completion: each item is requeued with a new
// id, scheduled, released or dead-lettered (see RetryItem), and the returned
// outcomes, in request order, say which. Every id must be leased in the
// partition, or nothing changes and an apierr.Invalid error names the first
// that is not. A dead-lettered item has been taken by the dead-letter queue
// (or its move is durably recorded and will be retried) when Retry returns.
func (e *Engine) Retry(ctx context.Context, partition int32, items []queue.RetryItem) ([]queue.RetryOutcome, error) {
	if err := e.admit(false); err != nil {
		return nil, err
	}
	op := &retryOp{partition: partition, items: items}
	if err := e.Loop.Call(ctx, op, false); err != nil {
		return nil, err
	}
	return op.out, nil
}

// Renew extends live leases: each item's lease deadline becomes now +
// timeout (the queue's lease_timeout when timeout is 0), and the new
// deadlines are returned in ids order once durable. Every id must be leased
// in the partition with a lease that has not expired, and appear once, or
// nothing changes and an apierr.Invalid error names every id that is not
// (see NotLeased). An item past its expire deadline may be renewed; it dies
// of expiry when its lease ends.
func (e *Engine) Renew(ctx context.Context, partition int32, ids []uint64, timeout time.Duration) ([]time.Time, error) {
	if err := e.admit(false); err != nil {
		return nil, err
	}
	op := &renewOp{partition: partition, ids: ids, timeout: timeout}
	if err := e.Loop.Call(ctx, op, false); err != nil {
		return nil, err
	}
	return op.out, nil
}

// Clear removes the items selected by p.
func (e *Engine) Clear(ctx context.Context, p queue.ClearParams) error {
	if err := e.admit(false); err != nil {
		return err
	}
	return e.Loop.Call(ctx, &clearOp{p: p}, false)
}

// Import adds items to a partition as given, under new ids: leased (Leased,
// until LeaseDeadline, or for the queue's lease_timeout from now when that
// is zero; a deadline in the past ends at the next iteration as an expired
// lease), scheduled (EnqueueAt in the future) or ready, with their attempts.
// An item whose Body.SourceID the partition already holds on an imported
// item (or that an earlier item of the same call holds) is skipped: the
// first copy is kept. It returns, for each item in order, the item as
// stored: the new one, or the one that holds its source_id.
func (e *Engine) Import(ctx context.Context, partition int32, items []queue.Item) ([]queue.Item, error) {
	if err := e.admit(true); err != nil {
		return nil, err
	}
	op := &importOp{partition: partition, items: items}
	if err := e.Loop.Call(ctx, op, false); err != nil {
		return nil, err
	}
	return op.out, nil
}

// Delete removes items, in any state, and returns how many it found.
// Unknown ids are ignored; a partition that does not exist is an
// apierr.Invalid error and nothing is deleted.
func (e *Engine) Delete(ctx context.Context, refs []queue.ItemRef) (int, error) {
	if err := e.admit(false); err != nil {
		return 0, err
	}
	op := &deleteOp{refs: refs}
	if err := e.Loop.Call(ctx, op, false); err != nil {
		return 0, err
	}
	return op.n, nil
}

// DeleteDead removes the items of refs that are at rest: leased items (a
// consumer of the dead-letter queue is working on them) are skipped, and so
// are unknown ids. It returns how many it deleted; a partition that does
// not exist is an apierr.Invalid error and nothing is deleted. The dead.*
// calls and redrive tasks delete through it, so they never take an item
// from under a consumer.
func (e *Engine) DeleteDead(ctx context.Context, refs []queue.ItemRef) (int, error) {
	if err := e.admit(false); err != nil {
		return 0, err
	}
	op := &deleteOp{refs: refs, exceptLeased: true}
	if err := e.Loop.Call(ctx, op, false); err != nil {
		return 0, err
	}
	return op.n, nil
}

// EditDead changes the body and history of the item ref, which must be at
// rest: edit gets the item in full and changes its Body and Errors (its
// error is the call's answer, nothing changed). It returns the item as
// stored. An unknown id is apierr.NotFound, a leased item apierr.Conflict
// (a consumer of the dead-letter queue holds it).
func (e *Engine) EditDead(ctx context.Context, ref queue.ItemRef, edit func(*queue.Item) error) (queue.Item, error) {
	if err := e.admit(false); err != nil {
		return queue.Item{}, err
	}
	op := &editOp{ref: ref, edit: edit}
	if err := e.Loop.Call(ctx, op, false); err != nil {
		return queue.Item{}, err
	}
	return op.out, nil
}

// TakeRedriven inserts redriven dead items (see RedriveItem) into one
// partition, the one with the fewest ready items; an item whose SourceKey
// the queue holds already is skipped (a redrive step run twice).
func (e *Engine) TakeRedriven(ctx context.Context, items []queue.RedriveItem) error {
	if err := e.admit(true); err != nil {
		return err
	}
	return e.Loop.Call(ctx, &redriveOp{items: items}, false)
}

// Do runs f inside one of the queue's iterations, in arrival order with
// the other requests, on the iteration's Tx at the iteration's now (Unix
// ns), and returns once the iteration is durable: the contract suite's way
// in (internal/engine/enginetest). ids are the items f reads with Tx.Item,
// prepared (Locker) as a complete's are. f's apierr error is the call's
// answer and must change nothing; another error fails the iteration, whose
// Commit drops it.
func (e *Engine) Do(ctx context.Context, ids []uint64, f func(tx Tx, now int64) error) error {
	return e.Loop.Call(ctx, &doOp{ids: ids, f: f}, false)
}

// pass is the engine's state of one iteration.
type pass struct {
	tx      Tx
	info    queue.QueueInfo
	now     int64
	ready   []int // the ready counts, nil until needed (and after a change the engine does not track)
	replies []Reply
	handled int // how many of the iteration's requests have run (replied, or answered by the backend)
}

func (it *pass) reply(r *Request, mode ReplyMode) {
	it.replies = append(it.replies, Reply{R: r, Mode: mode})
}

// iteration runs one iteration at now over reqs (leases are among the
// loop's waiters) on tx, which the backend began (Backend.Begin): Lock,
// the lifecycle (when lifecycle), the requests in arrival order, the
// waiting leases, and the commit.
func (e *Engine) iteration(tx Tx, now int64, reqs []*Request, lifecycle bool) {
	it := &pass{tx: tx, info: tx.Info(), now: now}
	err := e.iterate(it, reqs, lifecycle)
	if err != nil {
		// The iteration failed at reqs[it.handled] (or before the first,
		// in Lock or the lifecycle): that request and those after it get
		// the failure too, from Commit. Left out, they were never
		// answered and their callers, which may not abandon a write,
		// waited forever (a PostgreSQL connection cut mid-transaction).
		for _, r := range reqs[it.handled:] {
			it.replies = append(it.replies, Reply{R: r})
		}
	}
	tx.Commit(it.replies, err)
}

func (e *Engine) iterate(it *pass, reqs []*Request, lifecycle bool) error {
	if l, ok := it.tx.(Locker); ok {
		if ids, clr := lockSet(reqs); len(ids) > 0 || clr != nil {
			if err := l.Lock(ids, clr); err != nil {
				return err
			}
		}
	}
	if d, ok := it.tx.(Deduplicator); ok {
		if ids := dedupSet(reqs); len(ids) > 0 {
			if err := d.Claim(ids); err != nil {
				return err
			}
		}
	}
	if lifecycle {
		if err := e.lifecycle(it); err != nil {
			return err
		}
	}
	for _, r := range reqs {
		mode, err := e.handle(it, r)
		switch {
		case err == nil:
			if mode != noReply {
				it.reply(r, mode)
			}
		case isClient(err):
			it.replies = append(it.replies, Reply{R: r, Err: err})
		default:
			return err
		}
		it.handled++
	}
	if e.Loop.Waiters.Len() == 0 {
		return nil
	}
	deadline := it.now + int64(it.info.LeaseTimeout)
	var durable bool // of the partition last leased from: Serve gives its items next
	return Serve(&e.Loop.Waiters, &e.leaseNext,
		func() ([]int, error) { return it.tx.ReadyCounts() },
		func(n int32, want int, maxBytes int64) (items []queue.LeasedItem, more bool, err error) {
			items, durable, more, err = it.tx.Lease(n, want, maxBytes, deadline)
			return items, more, err
		},
		func(w *Request, n int32, items []queue.LeasedItem) {
			mode := Durable
			if durable {
				mode = DurableItems
			}
			w.Lease.Result = queue.LeaseResult{Partition: n, Items: items}
			e.Loop.Consumers.leased(w.Lease.ClientID, w.Lease.Owner, n, items, it.now, deadline)
			it.reply(w, mode)
		}, it.info.Ordered)
}

// noReply marks a request the backend answers itself (Local.Run's
// answered) or whose reply Retry already queued.
const noReply ReplyMode = 255

// handle runs one request: its result goes into its op, and the mode says
// when its reply may leave.
func (e *Engine) handle(it *pass, r *Request) (ReplyMode, error) {
	switch op := r.Op.(type) {
	case *produceOp:
		// The service refuses these times; checked again here so that one
		// request's bad time fails that request, not the iteration's commit.
		for i, pi := range op.items {
			if !queue.TimeInRange(pi.EnqueueAt) {
				return 0, queue.CheckTime("items["+strconv.Itoa(i)+"].enqueue_at", pi.EnqueueAt)
			}
			if queue.EnqueueNow(pi.EnqueueAt, it.now) {
				op.items[i].EnqueueAt = time.Time{} // ready now: not scheduled
			}
		}
		n, err := e.produceTo(it)
		if err != nil {
			return 0, err
		}
		if d, ok := it.tx.(DeduplicationLimiter); ok {
			if err := d.AdmitDeduplication(op.items); err != nil {
				return 0, err
			}
		}
		expire := queue.ExpireDeadline(it.info, it.now)
		for _, part := range splitByGroup(op.items, func(pi *queue.ProduceItem) string { return pi.Group }, n, it.info.Partitions) {
			if err := it.tx.Produce(part.n, part.items, expire); err != nil {
				return 0, err
			}
			for _, pi := range part.items {
				if pi.EnqueueAt.IsZero() {
					it.ready[part.n]++
				}
			}
		}
		return Durable, nil
	case *completeOp:
		xs, err := it.leased(op.partition, op.ids)
		if err != nil {
			return 0, err
		}
		if err := it.tx.Complete(xs); err != nil {
			return 0, err
		}
		e.Loop.Consumers.ended(op.partition, op.ids...)
		if e.completed != nil {
			for _, x := range xs {
				e.completed(x.Attempts)
			}
		}
		return Consume, nil
	case *retryOp:
		return noReply, e.retry(it, r, op)
	case *renewOp:
		if err := queue.CheckPartition(it.info.Name, it.info.Partitions, op.partition); err != nil {
			return 0, err
		}
		deadline, err := queue.CheckRenew(it.info, op.partition, op.ids, op.timeout, it.now, func(id uint64) bool {
			_, ok := it.live(op.partition, id)
			return ok
		})
		if err != nil {
			return 0, err
		}
		xs := make([]Item, len(op.ids))
		op.out = make([]time.Time, len(op.ids))
		for i, id := range op.ids {
			xs[i], _ = it.tx.Item(op.partition, id)
			op.out[i] = queue.FromNanos(deadline)
		}
		e.Loop.Consumers.renewed(op.partition, op.ids, deadline)
		return Consume, it.tx.Renew(xs, deadline)
	case *importOp:
		var err error
		op.out, err = e.importItems(it, op)
		it.ready = nil
		return Durable, err
	case *redriveOp:
		n, err := e.produceTo(it)
		if err != nil {
			return 0, err
		}
		// The redriven item's body: what its producer gave, the redrive
		// counted; the dead item's history fields stay with the dead item.
		items := make([]queue.RedriveItem, len(op.items))
		for i, ri := range op.items {
			b := ri.Body
			items[i] = queue.RedriveItem{SourceKey: ri.SourceKey, Errors: ri.Errors, Group: ri.Group, DeadKey: ri.DeadKey, Body: queue.ItemBody{Reference: b.Reference,
				Kind: b.Kind, Encoding: b.Encoding, Payload: b.Payload, Attributes: b.Attributes, RedriveCount: b.RedriveCount + 1}}
		}
		expire := queue.ExpireDeadline(it.info, it.now)
		for _, part := range splitByGroup(items, func(ri *queue.RedriveItem) string { return ri.Group }, n, it.info.Partitions) {
			if err := it.tx.Redrive(part.n, part.items, expire); err != nil {
				return 0, err
			}
			it.ready[part.n] += len(part.items)
		}
		return Durable, nil
	case *receivedOp:
		return Consume, e.deleteReceived(it, op)
	case *deleteOp:
		for _, ref := range op.refs {
			if err := queue.CheckPartition(it.info.Name, it.info.Partitions, ref.Partition); err != nil {
				return 0, err
			}
		}
		if !op.exceptLeased {
			for _, ref := range op.refs {
				e.Loop.Consumers.ended(ref.Partition, ref.ID)
			}
		}
		var err error
		op.n, err = it.tx.Delete(op.refs, op.exceptLeased)
		it.ready = nil
		return Durable, err
	case *clearOp:
		it.ready = nil
		if op.p.Destructive {
			e.Loop.Consumers.endedAll()
		}
		return Durable, it.tx.Clear(op.p)
	case *editOp:
		if err := queue.CheckPartition(it.info.Name, it.info.Partitions, op.ref.Partition); err != nil {
			return 0, err
		}
		var err error
		op.out, err = it.tx.Edit(op.ref, op.edit)
		return Durable, err
	case Local:
		answered, err := op.Run(it.tx, it.now, r)
		// A backend's own request may change the ready counts in ways the
		// engine does not follow.
		it.ready = nil
		if err != nil || !answered {
			return Durable, err
		}
		return noReply, nil
	}
	return 0, fmt.Errorf("queue '%s': unknown request %T", it.info.Name, r.Op)
}

// importItems runs an import (see Engine.Import): the items whose source_id
// the partition holds already, or an earlier item of the call holds, are
// answered with that copy; the others are inserted, leased (until their
// lease deadline, or for lease_timeout from now), scheduled (enqueue_at in
// the future) or ready, keeping their attempts, created_at and expire
// deadline (or expiring after expire_timeout from now). An item with a
// group must be imported into its group's partition (queue.GroupPartition;
// else apierr.Invalid, nothing imported).
func (e *Engine) importItems(it *pass, op *importOp) ([]queue.Item, error) {
	n := op.partition
	if err := queue.CheckPartition(it.info.Name, it.info.Partitions, n); err != nil {
		return nil, err
	}
	for i := range op.items { // as a produce's enqueue_at
		if err := queue.CheckItemTimes(i, &op.items[i]); err != nil {
			return nil, err
		}
		// A group lives in one partition (itemgroups.go): an item imported
		// elsewhere would be a second place of its group.
		if g := op.items[i].Meta.Group; g != "" {
			if p := queue.GroupPartition(g, it.info.Partitions); p != n {
				return nil, apierr.Invalidf("invalid items[%d].group; the items of group '%s' go to partition %d of queue '%s', not %d: import them there",
					i, g, p, it.info.Name, n)
			}
		}
	}
	keys := make([]string, len(op.items))
	first := map[string]int{} // source key -> the first item of the call with it
	var wanted []string
	for i, si := range op.items {
		if si.Body.SourceID == "" {
			continue
		}
		keys[i] = queue.ImportKey(n, si.Body.SourceID)
		if _, ok := first[keys[i]]; !ok {
			first[keys[i]] = i
			wanted = append(wanted, keys[i])
		}
	}
	held := map[string]queue.Item{}
	if len(wanted) > 0 {
		var err error
		if held, err = it.tx.Held(n, wanted); err != nil {
			return nil, err
		}
	}
	out := make([]queue.Item, len(op.items))
	var news []queue.Item
	var pos []int // the call's index of each new item
	for i, si := range op.items {
		if k := keys[i]; k != "" && (first[k] != i || held[k].Meta.ID != 0) {
			continue
		}
		m := queue.ItemMeta{Attempts: si.Meta.Attempts, SourceKey: keys[i], Group: si.Meta.Group,
			CreatedAt: queue.FromNanos(queue.Nanos(si.Meta.CreatedAt)), ExpireDeadline: queue.FromNanos(queue.Nanos(si.Meta.ExpireDeadline))}
		if m.CreatedAt.IsZero() {
			m.CreatedAt = queue.FromNanos(it.now)
		}
		if m.ExpireDeadline.IsZero() {
			m.ExpireDeadline = queue.FromNanos(queue.ExpireDeadline(it.info, it.now))
		}
		switch {
		case si.Meta.Leased:
			m.Leased, m.LeaseDeadline = true, queue.FromNanos(queue.Nanos(si.Meta.LeaseDeadline))
			if m.LeaseDeadline.IsZero() {
				m.LeaseDeadline = queue.FromNanos(it.now + int64(it.info.LeaseTimeout))
			}
		case queue.Nanos(si.Meta.EnqueueAt) > it.now:
			m.EnqueueAt = queue.FromNanos(queue.Nanos(si.Meta.EnqueueAt))
		}
		news = append(news, queue.Item{Partition: n, Meta: m, Body: si.Body, Errors: si.Errors})
		pos = append(pos, i)
	}
	if len(news) > 0 {
		stored, err := it.tx.Import(n, news)
		if err != nil {
			return nil, err
		}
		for j, i := range pos {
			out[i] = stored[j]
		}
	}
	for i, k := range keys {
		switch {
		case k == "":
		case held[k].Meta.ID != 0:
			out[i] = held[k]
		case first[k] != i:
			out[i] = out[first[k]]
		}
	}
	return out, nil
}

// partItems are the items of a produce or redrive that go to partition n.
type partItems[T any] struct {
	n     int32
	items []T
}

// splitByGroup returns items by partition, each part in request order:
// those with a group (group returns it) go to their group's partition
// (queue.GroupPartition), the others to n. The common cases (no group, one
// partition) return items as they are, in one part.
func splitByGroup[T any](items []T, group func(*T) string, n, partitions int32) []partItems[T] {
	grouped := false
	for i := range items {
		if group(&items[i]) != "" {
			grouped = true
			break
		}
	}
	if partitions <= 1 || !grouped {
		return []partItems[T]{{n, items}}
	}
	var parts []partItems[T]
	at := map[int32]int{}
	for i := range items {
		p := n
		if g := group(&items[i]); g != "" {
			p = queue.GroupPartition(g, partitions)
		}
		j, ok := at[p]
		if !ok {
			j = len(parts)
			at[p] = j
			parts = append(parts, partItems[T]{n: p})
		}
		parts[j].items = append(parts[j].items, items[i])
	}
	return parts
}

// produceTo returns the partition a produce (or redrive) request goes to:
// the one with the fewest ready items (FewestReady), and moves the
// cursor past it. The counts are read once per iteration and kept up to
// date with the iteration's produces.
func (e *Engine) produceTo(it *pass) (int32, error) {
	if it.ready == nil {
		ready, err := it.tx.ReadyCounts()
		if err != nil {
			return 0, err
		}
		it.ready = ready
	}
	n := FewestReady(it.ready, e.produceNext)
	e.produceNext = n + 1
	return int32(n), nil
}

// deleteReceived runs a DeleteReceived: for each receipt, the item under
// its lease, or the one it became when that lease ended, if it has not
// been leased since (same attempts, and ready or scheduled: Tx.Requeued).
func (e *Engine) deleteReceived(it *pass, op *receivedOp) error {
	if err := queue.CheckPartition(it.info.Name, it.info.Partitions, op.partition); err != nil {
		return err
	}
	op.deleted = make([]bool, len(op.rs))
	for i, r := range op.rs {
		ok, err := e.deleteReceipt(it, op.partition, r)
		if err != nil {
			return err
		}
		op.deleted[i] = ok
	}
	return nil
}

// deleteReceipt deletes the item of one receipt (deleteReceived).
func (e *Engine) deleteReceipt(it *pass, n int32, r queue.Receipt) (bool, error) {
	x, ok := it.tx.Item(n, r.ID)
	if ok {
		// Ids change only at a requeue: an item leased under r.ID is
		// under r's lease.
		ok = x.Leased
	} else if r.FirstID != 0 {
		var err error
		if x, ok, err = it.tx.Requeued(n, r.FirstID); err != nil {
			return false, err
		}
		ok = ok && x.ID > r.ID && x.Attempts == r.Attempts
	}
	if !ok {
		return false, nil
	}
	if err := it.tx.Complete([]Item{x}); err != nil {
		return false, err
	}
	e.Loop.Consumers.ended(n, x.ID)
	it.ready = nil
	if e.completed != nil {
		e.completed(x.Attempts)
	}
	return true, nil
}

// live returns item id of partition n when it is under a live lease.
func (it *pass) live(n int32, id uint64) (Item, bool) {
	x, ok := it.tx.Item(n, id)
	return x, ok && x.Leased && x.LeaseDeadline > it.now
}

// leased returns the items of ids, each under a live lease in partition n,
// or an apierr.Invalid error naming the first that is not (CheckLeased).
func (it *pass) leased(n int32, ids []uint64) ([]Item, error) {
	if err := queue.CheckPartition(it.info.Name, it.info.Partitions, n); err != nil {
		return nil, err
	}
	xs := make([]Item, 0, len(ids))
	err := queue.CheckLeased(it.info.Name, n, ids, func(id uint64) bool {
		x, ok := it.live(n, id)
		xs = append(xs, x)
		return ok
	})
	return xs, err
}

// retry ends the leases of op's items (see Engine.Retry) and queues the
// reply: once the dead items' moves ended when any is moving.
func (e *Engine) retry(it *pass, r *Request, op *retryOp) error {
	ids := make([]uint64, len(op.items))
	for i, ri := range op.items {
		if !queue.TimeInRange(ri.RetryAt) { // as a produce's enqueue_at
			return queue.CheckTime("items["+strconv.Itoa(i)+"].retry_at", ri.RetryAt)
		}
		ids[i] = ri.ID
	}
	xs, err := it.leased(op.partition, ids)
	if err != nil {
		return err
	}
	// Attempt history: the stored histories of the items that record an
	// error, and of the dead items of a dead-letter queue whose attempt
	// counts (a DLQ attempt, recorded with or without an error).
	var errs []Item
	for i, ri := range op.items {
		if ri.Error != "" || dlqAttempt(xs[i], ri.Release) {
			errs = append(errs, xs[i])
		}
	}
	history, err := it.histories(errs)
	if err != nil {
		return err
	}
	outcomes := make([]queue.RetryOutcome, len(op.items))
	var moving []Item
	for i, ri := range op.items {
		x := xs[i]
		var h *queue.ItemErrors
		switch {
		case dlqAttempt(x, ri.Release):
			hh := queue.RecordDeadLetterAttempt(history[x.ID], ri.Error, it.now)
			h = &hh
		case ri.Error != "" && !x.DeadCopy:
			hh := queue.RecordError(history[x.ID], x.Attempts, ri.Error, it.now)
			h = &hh
		}
		e := queue.Ending{Attempts: x.Attempts, Reason: queue.ReasonExplicit}
		if !ri.Dead {
			e = queue.EndLease(it.info, x.Attempts, x.Expire, ri.Release, ri.RetryAt, it.now)
		}
		if e.Reason == "" {
			outcomes[i] = e.Requeued(0)
			err = it.tx.Requeue(x, e, h, &outcomes[i].NewID)
		} else {
			outcomes[i] = queue.KillOutcome(it.info, e.Reason, e.Attempts)
			x.Attempts = e.Attempts
			var m bool
			if m, err = it.tx.Kill(x, e.Reason, h); m {
				moving = append(moving, x)
			}
		}
		if err != nil {
			return err
		}
		outcomes[i].ID = ri.ID
	}
	op.out = outcomes
	e.Loop.Consumers.ended(op.partition, ids...)
	it.replies = append(it.replies, Reply{R: r, Mode: Consume, Moving: moving})
	return nil
}

// dlqAttempt reports whether the end of x's lease is a DLQ attempt to
// record: x is a dead item in a dead-letter queue and the lease was not
// released (a released lease is no attempt).
func dlqAttempt(x Item, release bool) bool { return x.DeadCopy && !release }

// histories returns the stored attempt histories of those of xs that may
// have one, by id.
func (it *pass) histories(xs []Item) (map[uint64]queue.ItemErrors, error) {
	var read []Item
	for _, x := range xs {
		if x.HasHistory {
			read = append(read, x)
		}
	}
	out := make(map[uint64]queue.ItemErrors, len(read))
	if len(read) == 0 {
		return out, nil
	}
	hs, err := it.tx.Histories(read)
	for i, x := range read {
		if err == nil {
			out[x.ID] = hs[i]
		}
	}
	return out, err
}

// lifecycle ends the leases that expired (a failed attempt, recorded in the
// item's history, or in its DLQ attempt history for a dead item in a
// dead-letter queue) and kills the items past their expire deadline that are
// not leased (a leased one dies when its lease ends).
func (e *Engine) lifecycle(it *pass) error {
	leases, expired, err := it.tx.Due()
	if err != nil {
		return err
	}
	if len(leases) > 0 {
		history, err := it.histories(leases)
		if err != nil {
			return err
		}
		msg := queue.LeaseExpiredError(it.info.LeaseTimeout)
		for _, x := range leases {
			e.Loop.Consumers.ended(x.Partition, x.ID)
			var h queue.ItemErrors
			if x.DeadCopy {
				h = queue.RecordDeadLetterAttempt(history[x.ID], msg, it.now)
			} else {
				h = queue.RecordError(history[x.ID], x.Attempts, msg, it.now)
			}
			e := queue.EndLease(it.info, x.Attempts, x.Expire, false, time.Time{}, it.now)
			if e.Reason == "" {
				err = it.tx.Requeue(x, e, &h, nil)
			} else {
				_, err = it.tx.Kill(x, e.Reason, &h)
			}
			if err != nil {
				return err
			}
		}
	}
	for _, x := range expired {
		if _, err := it.tx.Kill(x, queue.ReasonExpired, nil); err != nil {
			return err
		}
	}
	return nil
}

// isClient reports whether err is the client's (an apierr error): it
// answers its request and changes nothing.
func isClient(err error) bool {
	_, ok := apierr.As(err)
	return ok
}

// lockSet returns the ids the requests name (complete, retry, renew,
// delete-received, delete, Do) and the union of their clears, for Tx.Lock.
// dedupSet returns the deduplication ids of the produces among reqs,
// sorted and distinct (Deduplicator).
func dedupSet(reqs []*Request) []string {
	var ids []string
	for _, r := range reqs {
		if op, ok := r.Op.(*produceOp); ok {
			for _, pi := range op.items {
				if pi.DeduplicationID != "" {
					ids = append(ids, pi.DeduplicationID)
				}
			}
		}
	}
	slices.Sort(ids)
	return slices.Compact(ids)
}

func lockSet(reqs []*Request) ([]uint64, *queue.ClearParams) {
	var ids []uint64
	var clr *queue.ClearParams
	for _, r := range reqs {
		switch op := r.Op.(type) {
		case *completeOp:
			ids = append(ids, op.ids...)
		case *retryOp:
			for _, ri := range op.items {
				ids = append(ids, ri.ID)
			}
		case *renewOp:
			ids = append(ids, op.ids...)
		case *receivedOp:
			for _, r := range op.rs {
				ids = append(ids, r.ID)
			}
		case *deleteOp:
			for _, ref := range op.refs {
				ids = append(ids, ref.ID)
			}
		case *doOp:
			ids = append(ids, op.ids...)
		case *clearOp:
			if clr == nil {
				clr = &queue.ClearParams{}
			}
			clr.Destructive = clr.Destructive || op.p.Destructive
			clr.Queue = clr.Queue || op.p.Queue
			clr.Scheduled = clr.Scheduled || op.p.Scheduled
		}
	}
	return ids, clr
}

package engine

import (
	"context"
	"time"

	"github.com/styxq/styx/internal/clock"
	"github.com/styxq/styx/internal/queue"
	"github.com/styxq/styx/metrics"
)

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
func (*doOp) isOp()       {}

// Engine is the request side of a queue, the same on every backend: the
// Queue methods that run in the loop, and the iteration (Iterate). A
// backend embeds it and gives each iteration a Tx.
type Engine struct {
	Loop *Loop
	// Reads is the backend's read half (contract.go), set by the backend
	// before the first call.
	Reads Reads
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
	// outcomes receives the outcomes of redriven items
	// (metrics.RedriveOutcomes; outcomes.go); nil in tests without
	// metrics.
	outcomes func(metrics.RedriveOutcome)
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
		e.outcomes = m.RedriveOutcomes
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
// of them from one partition (with p.Complete, it first completes those
// items, in the same iteration, and answers at once unless
// p.WaitAfterComplete: see queue.LeaseParams.Complete): the one with the most ready items, shared
// item by item with the other leases waiting on it when there are not
// enough for all (Serve). Returns an apierr.Retry error when none
// came. A lease whose ctx ends after the loop served it but before the
// answer reached it gives its items back, attempts not counted (giveBack).
func (e *Engine) Lease(ctx context.Context, p queue.LeaseParams) (queue.LeaseResult, error) {
	if err := e.admit(false); err != nil {
		return queue.LeaseResult{}, err
	}
	w := &LeaseWait{ClientID: p.ClientID, Owner: p.Owner, BatchSize: p.BatchSize, Timeout: p.Timeout, MaxBytes: p.MaxBytes,
		LeaseTimeout: p.LeaseTimeout, Abandoned: e.giveBack, WaitAfterComplete: p.WaitAfterComplete}
	if len(p.Complete) > 0 {
		// One iteration completes and leases (handleCompleteThenLease).
		// One that may wait is given up when its caller goes away, as a
		// plain lease is (its completes' outcome is then unknown to it).
		if err := e.Loop.callLeaseAfter(ctx, w, &completeOp{partition: p.CompletePartition, ids: p.Complete}); err != nil {
			return queue.LeaseResult{}, err
		}
		if ctx.Err() != nil && len(w.Result.Items) > 0 {
			// The caller went away: nobody will see these items.
			go e.giveBack(w.Result)
			return queue.LeaseResult{}, ctx.Err()
		}
		return w.Result, nil
	}
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

// Items is how many items the request names or carries (produced,
// imported, redriven, completed, retried, renewed, deleted); 0 for a lease
// and for the requests that name none (a clear, a read, housekeeping). A
// backend sizes what an iteration may take by it: the PostgreSQL backend's
// bound on a loop transaction grows with it (postgres.ItemAllowance).
func (r *Request) Items() int {
	switch op := r.Op.(type) {
	case *produceOp:
		return len(op.items)
	case *importOp:
		return len(op.items)
	case *redriveOp:
		return len(op.items)
	case *completeOp:
		return len(op.ids)
	case *retryOp:
		return len(op.items)
	case *renewOp:
		return len(op.ids)
	case *receivedOp:
		return len(op.rs)
	case *deleteOp:
		return len(op.refs)
	}
	return 0
}

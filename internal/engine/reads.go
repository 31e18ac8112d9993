package engine

import (
	"context"

	"github.com/styxq/styx/internal/fingerprint"
	"github.com/styxq/styx/internal/queue"
)

// The read side of the queue API (ADR 0019): every read is an Engine
// method, on every backend. The reads that need the loop's state run in
// the loop as ops over the Tx's read methods (Stats, Scheduled,
// ErrorGroups, Reload); the others are the backend's read half (Reads),
// made on the caller's goroutine.

type (
	statsOp     struct{ out queue.Stats }
	scheduledOp struct {
		p   queue.ListParams
		out []queue.Item
	}
	errorGroupsOp struct {
		f     queue.ErrorGroupFilter
		limit int
		out   queue.ErrorGroups
	}
	reloadOp struct{}
)

func (*statsOp) isOp()       {}
func (*scheduledOp) isOp()   {}
func (*errorGroupsOp) isOp() {}
func (*reloadOp) isOp()      {}

// ReadOnly reports whether op changes nothing in storage (the engine's
// reads: stats, scheduled pages, error groups, reload), so that a backend
// whose storage refuses writes still runs it (ADR 0015).
func ReadOnly(op Op) bool {
	switch op.(type) {
	case *statsOp, *scheduledOp, *errorGroupsOp, *reloadOp:
		return true
	}
	return false
}

// Stats describes the queue now: its items by partition and state, their
// ages, its dead items by reason and source, and the leases waiting on
// this node (queue.Stats). It runs in the loop (Tx.Stats); a caller whose
// ctx ends first leaves the answer behind.
func (e *Engine) Stats(ctx context.Context) (queue.Stats, error) {
	op := &statsOp{}
	if err := e.Loop.Call(ctx, op, true); err != nil {
		return queue.Stats{}, err
	}
	return op.out, nil
}

// Reload rebuilds the queue's state from storage (Tx.Reload) and returns
// once it is rebuilt: nil, a storage failure, or apierr NotFound when the
// queue is gone.
func (e *Engine) Reload(ctx context.Context) error {
	return e.Loop.Call(ctx, &reloadOp{}, false)
}

// ListPage lists a page of partition p.Partition's items with ids above
// p.After, in id order (queue.Queue.ListPage): its scheduled items, by the
// loop (Tx.Scheduled), when p.Scheduled; else the others, from the read
// half (Reads.Page) without waiting for the loop. A scheduled listing of a
// partition the queue does not have is the error of queue.CheckPartition.
func (e *Engine) ListPage(ctx context.Context, p queue.ListParams) ([]queue.Item, error) {
	if !p.Scheduled {
		return e.Reads.Page(ctx, p)
	}
	op := &scheduledOp{p: p}
	if err := e.Loop.Call(ctx, op, false); err != nil {
		return nil, err
	}
	return op.out, nil
}

// Scheduled lists up to limit of a partition's scheduled items with ids
// above after (ListPage with no byte bound).
func (e *Engine) Scheduled(ctx context.Context, partition int32, after uint64, limit int) ([]queue.Item, error) {
	return e.ListPage(ctx, queue.ListParams{Partition: partition, After: after, Limit: limit, Scheduled: true})
}

// List lists up to limit of a partition's other items (ListPage with no
// byte bound).
func (e *Engine) List(ctx context.Context, partition int32, after uint64, limit int) ([]queue.Item, error) {
	return e.ListPage(ctx, queue.ListParams{Partition: partition, After: after, Limit: limit})
}

// Scan reads the queue's items that f selects, in id order across its
// partitions (queue.Scan), from the read half (Reads.Scan).
func (e *Engine) Scan(ctx context.Context, partitions int32, f *queue.DeadFilter, p queue.ScanParams) ([]queue.Item, uint64, error) {
	return e.Reads.Scan(ctx, partitions, f, p)
}

// ErrorGroups returns the error groups of the queue's dead items that f
// selects (items of one source queue, dead reason and fingerprint of their
// last error), largest first, at most limit (at least 1), each with its
// first item's error and that error's pattern (fingerprint.Pattern). It
// runs in the loop (Tx.ErrorGroups).
func (e *Engine) ErrorGroups(ctx context.Context, f queue.ErrorGroupFilter, limit int) (queue.ErrorGroups, error) {
	op := &errorGroupsOp{f: f, limit: max(limit, 1)}
	if err := e.Loop.Call(ctx, op, false); err != nil {
		return queue.ErrorGroups{}, err
	}
	return op.out, nil
}

// Consumers returns the queue's consumers (queue.Consumer), by client_id
// and key name, most recently seen first: those this loop recorded
// (Consumers.Snapshot at the loop clock's now) as the read half completes
// them (Reads.Consumers: PostgreSQL adds the other nodes').
func (e *Engine) Consumers(ctx context.Context) ([]queue.Consumer, error) {
	return e.Reads.Consumers(ctx, e.Loop.Consumers.Snapshot(e.Loop.clock.Now()))
}

// handleStats runs a stats request (Engine.Stats).
func (e *Engine) handleStats(it *pass, op *statsOp) (ReplyMode, error) {
	var err error
	op.out, err = it.tx.Stats()
	op.out.LeaseWaiting = e.Loop.Waiters.Len()
	return Durable, err
}

// handleScheduled runs a scheduled listing (Engine.ListPage).
func (e *Engine) handleScheduled(it *pass, op *scheduledOp) (ReplyMode, error) {
	if err := queue.CheckPartition(it.info.Name, it.info.Partitions, op.p.Partition); err != nil {
		return 0, err
	}
	var err error
	op.out, err = it.tx.Scheduled(op.p)
	return Durable, err
}

// handleErrorGroups runs an error-groups request (Engine.ErrorGroups).
func (e *Engine) handleErrorGroups(it *pass, op *errorGroupsOp) (ReplyMode, error) {
	var err error
	op.out, err = it.tx.ErrorGroups(op.f, op.limit)
	for i := range op.out.Groups {
		g := &op.out.Groups[i]
		g.Pattern = fingerprint.Pattern(g.SampleError)
	}
	return Durable, err
}

// handleReload runs a reload (Engine.Reload): the backend answers it once
// the reload is done (Tx.Reload).
func (e *Engine) handleReload(it *pass, r *Request) (ReplyMode, error) {
	it.ready = nil
	it.tx.Reload(r.Answer)
	return noReply, nil
}

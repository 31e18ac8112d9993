package pgqueue

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/styxq/styx/internal/apierr"
	"github.com/styxq/styx/internal/engine"
	"github.com/styxq/styx/internal/queue"
	"github.com/styxq/styx/internal/store"
)

const (
	// pollInterval is how often a loop with waiting leases looks for items
	// without being told of any: a safety net for notifications lost while
	// a node's LISTEN connection reconnects, not the wake-up path.
	pollInterval = time.Second
	// busyBackoff is how long a loop waits before retrying lifecycle work
	// that another node holds locked.
	busyBackoff = 50 * time.Millisecond
)

// Queue is one queue as served by this node: the engine.Backend of its
// engine.Loop, which runs the requests arriving together, with due
// lifecycle work and the waiting leases it can serve, as one transaction. Other nodes
// run their own loop for the same queue; PostgreSQL arbitrates. Methods may
// be called from any goroutine; they implement queue.Queue with the
// semantics documented on queue.Logical, except that Reload has nothing to
// reload and Stats counts the waiting leases of this node only.
type Queue struct {
	m    *Manager
	name string
	id   uint64
	loop *engine.Loop

	// The loop is woken (signal) when items may have become ready
	// (readyHint) or lifecycle work may be due (dueHint).
	readyHint atomic.Bool
	dueHint   atomic.Int64

	// Owned by the loop.
	// joined is the count of leases that had joined the waiters when the
	// loop last looked: a new one makes the iteration serve.
	joined uint64
	// produceNext and leaseNext are the tie-break cursors of the partition
	// choice (engine/distribution.go): the partition after the one chosen
	// last by this node.
	produceNext int
	leaseNext   int
	// deadNext is the tie-break cursor of this queue's dead-letter moves
	// (deadPartitions): the dead-letter queue partition after the one the
	// last dead item of this queue went to on this node. It is this
	// queue's, not the dead-letter queue's (whose loop takes no part in a
	// move here), so equals take turns per source queue and node.
	deadNext int
	// nextDue is the earliest known lifecycle time (Unix ns, 0: none).
	nextDue  int64
	lastPoll int64
}

type (
	produceOp  struct{ items []queue.ProduceItem }
	completeOp struct {
		partition int32
		ids       []uint64
	}
	retryOp struct {
		partition int32
		items     []queue.RetryItem
	}
	renewOp struct {
		partition int32
		ids       []uint64
		timeout   time.Duration
	}
	importOp struct {
		partition int32
		items     []store.Item
	}
	deleteOp struct {
		refs         []queue.ItemRef
		exceptLeased bool // DeleteDead
	}
	clearOp   struct{ p queue.ClearParams }
	redriveOp struct{ items []queue.RedriveItem }
)

func newQueue(m *Manager, info store.QueueInfo) *Queue {
	q := &Queue{m: m, name: info.Name, id: info.ID, loop: engine.NewLoop(info.Name, m.cfg.Clock)}
	// Lifecycle work may be due from before this node started.
	q.nextDue = 1
	q.loop.Start(q)
	return q
}

// Name returns the queue's name.
func (q *Queue) Name() string { return q.name }

// Pending returns how many requests wait in the queue's channel.
func (q *Queue) Pending() int { return q.loop.Pending() }

// signal wakes the loop: ready says items may be ready, due (Unix ns, 0:
// none) that lifecycle work is due then.
func (q *Queue) signal(ready bool, due int64) {
	if ready {
		q.readyHint.Store(true)
	}
	if due != 0 {
		for {
			old := q.dueHint.Load()
			if (old != 0 && old <= due) || q.dueHint.CompareAndSwap(old, due) {
				break
			}
		}
	}
	q.loop.Wake()
}

// call sends op to the loop and waits for its answer (engine.Loop.Call).
func (q *Queue) call(ctx context.Context, op any, abandonable bool) (any, error) {
	return q.loop.Call(ctx, op, abandonable)
}

// Produce implements queue.Queue: the items go to one partition, the one
// with the fewest ready items as this node's transaction counts them (see
// produceTo), and are committed when it returns.
func (q *Queue) Produce(ctx context.Context, items []queue.ProduceItem) error {
	_, err := q.call(ctx, &produceOp{items: items}, false)
	return err
}

// Lease implements queue.Queue.
func (q *Queue) Lease(ctx context.Context, p queue.LeaseParams) (queue.LeaseResult, error) {
	v, err := q.loop.CallLease(ctx, nil, engine.LeaseWait{ClientID: p.ClientID, BatchSize: p.BatchSize, Timeout: p.Timeout})
	if err != nil {
		return queue.LeaseResult{}, err
	}
	return v.(queue.LeaseResult), nil
}

// Complete implements queue.Queue.
func (q *Queue) Complete(ctx context.Context, partition int32, ids []uint64) error {
	_, err := q.call(ctx, &completeOp{partition: partition, ids: ids}, false)
	return err
}

// Retry implements queue.Queue. A dead-lettered item is in the dead-letter
// queue when it returns: the move is part of the same transaction.
func (q *Queue) Retry(ctx context.Context, partition int32, items []queue.RetryItem) ([]queue.RetryOutcome, error) {
	v, err := q.call(ctx, &retryOp{partition: partition, items: items}, false)
	if err != nil {
		return nil, err
	}
	return v.([]queue.RetryOutcome), nil
}

// Renew implements queue.Queue: the rows are locked with the iteration's
// other named rows and updated in its transaction.
func (q *Queue) Renew(ctx context.Context, partition int32, ids []uint64, timeout time.Duration) ([]time.Time, error) {
	v, err := q.call(ctx, &renewOp{partition: partition, ids: ids, timeout: timeout}, false)
	if err != nil {
		return nil, err
	}
	return v.([]time.Time), nil
}

// Clear implements queue.Queue.
func (q *Queue) Clear(ctx context.Context, p queue.ClearParams) error {
	_, err := q.call(ctx, &clearOp{p: p}, false)
	return err
}

// Reload implements queue.Queue: the database is the state, so there is
// nothing to rebuild; it checks that the queue still exists.
func (q *Queue) Reload(ctx context.Context) error {
	_, err := q.m.Info(ctx, q.name)
	return err
}

// Import implements queue.Queue.
func (q *Queue) Import(ctx context.Context, partition int32, items []store.Item) ([]store.Item, error) {
	v, err := q.call(ctx, &importOp{partition: partition, items: items}, false)
	if err != nil {
		return nil, err
	}
	return v.([]store.Item), nil
}

// Delete implements queue.Queue.
func (q *Queue) Delete(ctx context.Context, refs []queue.ItemRef) (int, error) {
	v, err := q.call(ctx, &deleteOp{refs: refs}, false)
	if err != nil {
		return 0, err
	}
	return v.(int), nil
}

// DeleteDead implements queue.Queue: leased items are skipped. The
// iteration locks the named rows first (lock), so the state the delete
// checks is current: an item another node leased meanwhile is skipped.
func (q *Queue) DeleteDead(ctx context.Context, refs []queue.ItemRef) (int, error) {
	v, err := q.call(ctx, &deleteOp{refs: refs, exceptLeased: true}, false)
	if err != nil {
		return 0, err
	}
	return v.(int), nil
}

// TakeRedriven implements queue.Queue.
func (q *Queue) TakeRedriven(ctx context.Context, items []queue.RedriveItem) error {
	_, err := q.call(ctx, &redriveOp{items: items}, false)
	return err
}

// Open is a no-op: the database is the state (engine.Backend).
func (q *Queue) Open() {}

// Stopped is a no-op: every request is answered in its iteration
// (engine.Backend).
func (q *Queue) Stopped() {}

// NextWake returns when the lifecycle is next due, and while leases wait,
// when to look for items without a hint (engine.Backend).
func (q *Queue) NextWake(int64) int64 {
	next := q.nextDue
	if q.loop.Waiters.Len() > 0 {
		next = engine.Earliest(next, q.lastPoll+int64(pollInterval))
	}
	return next
}

// iteration is the work of one loop iteration, applied in one transaction.
type iteration struct {
	now  int64
	info store.QueueInfo
	// after runs once the transaction ended, with its error.
	after []func(error)
	// Changes gathered from the lifecycle and from complete and retry.
	completed []int64
	requeues  []requeue
	deaths    []death
	// notify lists the queues whose waiting leases should look again.
	notify []uint64
	// metrics run after commit (counts of completed, dead-lettered and
	// dropped items).
	metrics []func()
	// more says the lifecycle hit its batch size: run it again at once.
	more bool
	// ready counts each partition's ready items for produceTo (nil until
	// a produce or redrive needs it, and again after an import, delete or
	// clear).
	ready []int
}

func (it *iteration) reply(r *engine.Request, v any) {
	it.after = append(it.after, func(err error) {
		if err != nil {
			r.Answer(nil, err)
			return
		}
		r.Answer(v, nil)
	})
}

func (it *iteration) wakeQueue(id uint64) {
	if !slices.Contains(it.notify, id) {
		it.notify = append(it.notify, id)
	}
}

// Iterate runs one loop iteration (engine.Backend): poll says the timer
// fired (look for items for the waiting leases even without a hint).
func (q *Queue) Iterate(now int64, work []*engine.Request, poll bool) {
	info, ok := q.m.cachedInfo(q.id)
	if !ok {
		for _, r := range work {
			r.Answer(nil, queue.NotFound(q.name))
		}
		q.loop.Waiters.Fail(queue.NotFound(q.name))
		return
	}
	serve := poll || q.readyHint.Swap(false)
	if j := q.loop.Waiters.Joined(); j != q.joined {
		serve, q.joined = true, j
	}
	if due := q.dueHint.Swap(0); due != 0 {
		q.nextDue = engine.Earliest(q.nextDue, due)
	}
	lifecycle := q.nextDue != 0 && q.nextDue <= now
	if len(work) == 0 && !lifecycle && !(serve && q.loop.Waiters.Len() > 0) {
		return
	}
	it := &iteration{now: now, info: info}
	ctx, cancel := context.WithTimeout(context.Background(), q.m.cfg.StatementTimeout)
	defer cancel()
	err := pgx.BeginFunc(ctx, q.m.st.pool, func(tx pgx.Tx) error {
		rows, err := q.lock(ctx, tx, work)
		if err != nil {
			return err
		}
		if lifecycle {
			if err := q.lifecycle(ctx, tx, it); err != nil {
				return err
			}
		}
		if err := q.apply(ctx, tx, it, work, rows); err != nil {
			return err
		}
		if err := q.flush(ctx, tx, it); err != nil {
			return err
		}
		if lifecycle {
			if err := q.learnDue(ctx, tx, it); err != nil {
				return err
			}
		}
		if q.loop.Waiters.Len() > 0 {
			if err := q.serve(ctx, tx, it); err != nil {
				return err
			}
			q.lastPoll = now
		}
		if len(it.notify) > 0 {
			return notify(ctx, tx, q.m.st.channel, it.notify)
		}
		return nil
	})
	if err != nil {
		err = wrap("queue '"+q.name+"'", err)
		if errors.Is(err, store.ErrQueueNotFound) {
			err = queue.NotFound(q.name)
		}
		q.m.cfg.Log.Warn("transaction failed", "queue", q.name, "error", err)
		// Every request of the iteration fails with it (one that was
		// answered already, with a client error, is left alone), and so
		// do the waiting leases: a database that is down answers 453 at
		// once, not at the request timeout.
		for _, r := range work {
			r.Answer(nil, err)
		}
		q.loop.Waiters.Fail(err)
		if lifecycle {
			q.nextDue = now + int64(busyBackoff)
		}
	} else {
		for _, f := range it.metrics {
			f()
		}
	}
	for _, f := range it.after {
		f(err)
	}
}

// lifecycle ends expired leases, kills expired items and makes due
// scheduled items ready.
func (q *Queue) lifecycle(ctx context.Context, tx pgx.Tx, it *iteration) error {
	leases, err := expiredLeases(ctx, tx, q.id, it.now)
	if err != nil {
		return err
	}
	msg := queue.LeaseExpiredError(it.info.LeaseTimeout)
	for _, x := range leases {
		// An expired lease is a failed attempt (counted when leased),
		// recorded in the item's attempt history.
		h, err := recordError(x, msg, it.now)
		if err != nil {
			return fmt.Errorf("queue '%s': %w", q.name, err)
		}
		q.endLease(it, x, false, time.Time{}, &h)
	}
	expired, err := expiredItems(ctx, tx, q.id, it.now)
	if err != nil {
		return err
	}
	for _, x := range expired {
		q.kill(it, x, queue.ReasonExpired, nil)
	}
	readied, err := readyScheduled(ctx, tx, q.id, it.now)
	if err != nil {
		return err
	}
	if readied > 0 {
		it.wakeQueue(q.id)
	}
	it.more = len(leases) == lifecycleBatch || len(expired) == lifecycleBatch || readied == lifecycleBatch
	return nil
}

// learnDue sets when the lifecycle is next due, once the iteration's
// changes are written (so the statement sees them). An item that is due
// already is held by another node's transaction: look again shortly.
func (q *Queue) learnDue(ctx context.Context, tx pgx.Tx, it *iteration) error {
	if it.more {
		q.nextDue = it.now // more is due: run again at once
		return nil
	}
	next, err := nextDue(ctx, tx, q.id)
	if err != nil {
		return err
	}
	if next != 0 && next <= it.now {
		next = it.now + int64(busyBackoff)
	}
	q.nextDue = next
	return nil
}

// history is an attempt history about to be stored.
type history struct {
	set       bool
	lastError string
	errors    []byte
}

// recordError appends an attempt error to the item's history
// (queue.RecordError).
func recordError(x row, msg string, now int64) (history, error) {
	errs, err := decodeErrors(x.errors)
	if err != nil {
		return history{}, err
	}
	h := queue.RecordError(store.ItemErrors{Errors: errs}, x.attempts, msg, now)
	return history{set: true, lastError: h.LastError, errors: encodeErrors(h.Errors)}, nil
}

// endLease ends a lease without completion, as queue.Logical does: the item
// is requeued (new id, at the tail or at retryAt) unless it is dead by
// max_attempts or expiry. With release the attempt is not counted. It
// returns what it did, without ids: a requeued item is the last of
// it.requeues and gets its new id when flushed, unless the caller sets one.
func (q *Queue) endLease(it *iteration, x row, release bool, retryAt time.Time, h *history) queue.RetryOutcome {
	e := queue.EndLease(it.info, x.attempts, x.expire, release, retryAt, it.now)
	x.attempts = e.Attempts
	if e.Reason != "" {
		return q.kill(it, x, e.Reason, h)
	}
	r := requeue{id: x.id, state: stateReady, attempts: x.attempts}
	if e.At != 0 {
		r.state, r.deadline = stateScheduled, e.At
		q.nextDue = engine.Earliest(q.nextDue, e.At)
	} else {
		it.wakeQueue(q.id)
	}
	if h != nil {
		r.setErrors, r.lastError, r.errors = true, h.lastError, h.errors
	}
	it.requeues = append(it.requeues, r)
	return e.Requeued(0)
}

// kill makes the item dead: moved to the dead-letter queue in this
// transaction, or dropped without one. It returns what it did (without the
// item's id).
func (q *Queue) kill(it *iteration, x row, reason string, h *history) queue.RetryOutcome {
	d := death{id: x.id, reason: reason, attempts: x.attempts, sourceKey: x.sourceKey}
	if h != nil {
		d.setErrors, d.lastError, d.errors = true, h.lastError, h.errors
	}
	it.deaths = append(it.deaths, d)
	return queue.KillOutcome(it.info, reason, x.attempts)
}

// Lock order. Two nodes run transactions on the same rows, so a
// transaction must never wait for a row lock while it holds one that the
// other may wait for. An iteration therefore waits in one statement only,
// its first (lock): it locks every row its requests name (complete, retry,
// renew, delete) or select (clear), in id order, so two such statements never wait
// for each other in a cycle. Everything after it either skips rows other
// transactions hold (the lifecycle, leases, clear: SKIP LOCKED) or touches
// rows it holds already or created itself. The one exception is an insert
// whose source key another transaction has just inserted and not yet
// committed (a dead-letter move, a redrive, an import with a source_id):
// PostgreSQL makes it wait for that transaction on the unique index. Such
// a wait holds no row lock the other may want; an import inserts in key
// order, so two imports of the same keys wait in one order (two
// iterations that insert the same keys in different statements could
// still wait in a cycle, which PostgreSQL breaks by failing one with
// 40P01; it needs concurrent imports that repeat source_ids). The lifecycle
// runs after the lock: a lease that expired by the time its complete
// arrives is refused (leased) and then ended by the lifecycle, in the same
// transaction.
// The item-count triggers (counts.go) that every item statement fires
// write only the counts rows of the transaction's own backend, which no
// other live transaction writes, so they never wait either.

// lock locks the rows the iteration's requests act on and returns those
// named by id (complete, retry, renew, delete), by id.
func (q *Queue) lock(ctx context.Context, tx pgx.Tx, work []*engine.Request) (map[int64]row, error) {
	var ids []int64
	var clr *queue.ClearParams
	for _, r := range work {
		switch op := r.Op.(type) {
		case *completeOp:
			for _, id := range op.ids {
				ids = append(ids, int64(id))
			}
		case *retryOp:
			for _, ri := range op.items {
				ids = append(ids, int64(ri.ID))
			}
		case *renewOp:
			for _, id := range op.ids {
				ids = append(ids, int64(id))
			}
		case *deleteOp:
			for _, ref := range op.refs {
				ids = append(ids, int64(ref.ID))
			}
		case *clearOp:
			if clr == nil {
				clr = &queue.ClearParams{}
			}
			clr.Destructive = clr.Destructive || op.p.Destructive
			clr.Queue = clr.Queue || op.p.Queue
			clr.Scheduled = clr.Scheduled || op.p.Scheduled
		}
	}
	rows := map[int64]row{}
	if len(ids) == 0 && clr == nil {
		return rows, nil
	}
	locked, err := lockRows(ctx, tx, q.id, ids, clr)
	if err != nil {
		return nil, err
	}
	for _, x := range locked {
		rows[x.id] = x
	}
	return rows, nil
}

// apply runs the requests other than leases, in order, on the rows lock
// locked.
func (q *Queue) apply(ctx context.Context, tx pgx.Tx, it *iteration, work []*engine.Request, rows map[int64]row) error {
	var inserts []insert
	for _, r := range work {
		switch op := r.Op.(type) {
		case *produceOp:
			p, err := q.produceTo(ctx, tx, it)
			if err != nil {
				return err
			}
			for _, pi := range op.items {
				in := insert{partition: p, state: stateReady, created: it.now,
					body: store.ItemBody{Reference: pi.Reference, Kind: pi.Kind, Encoding: pi.Encoding, Payload: pi.Payload}}
				q.place(it, &in, queue.Nanos(pi.EnqueueAt), 0)
				if in.state == stateReady {
					it.ready[p]++
				}
				inserts = append(inserts, in)
			}
			it.reply(r, nil)
		case *redriveOp:
			p, err := q.produceTo(ctx, tx, it)
			if err != nil {
				return err
			}
			it.ready[p] += len(op.items)
			for _, ri := range op.items {
				key := ri.SourceKey
				in := insert{partition: p, state: stateReady, created: it.now, sourceKey: &key,
					body: store.ItemBody{Reference: ri.Body.Reference, Kind: ri.Body.Kind, Encoding: ri.Body.Encoding,
						Payload: ri.Body.Payload, RedriveCount: ri.Body.RedriveCount + 1}}
				if !ri.Errors.IsZero() {
					in.lastError, in.errors = ri.Errors.LastError, encodeErrors(ri.Errors.Errors)
				}
				q.place(it, &in, 0, 0)
				inserts = append(inserts, in)
			}
			it.reply(r, nil)
		case *completeOp:
			xs, err := q.leased(it, rows, op.partition, op.ids)
			if err != nil {
				r.Answer(nil, err)
				continue
			}
			for _, x := range xs {
				it.completed = append(it.completed, x.id)
				attempts := x.attempts
				it.metrics = append(it.metrics, func() {
					q.m.cfg.Metrics.ItemAttempts.WithLabelValues("completed").Observe(float64(attempts))
				})
			}
			it.reply(r, nil)
		case *retryOp:
			outcomes, err := q.retry(ctx, tx, it, rows, op)
			if err != nil {
				if _, ok := apierr.As(err); ok {
					r.Answer(nil, err)
					continue
				}
				return err
			}
			it.reply(r, outcomes)
		case *renewOp:
			deadlines, err := q.renew(ctx, tx, it, rows, op)
			if err != nil {
				if _, ok := apierr.As(err); ok {
					r.Answer(nil, err)
					continue
				}
				return err
			}
			it.reply(r, deadlines)
		case *importOp, *deleteOp, *clearOp:
			// These run in request order, after the changes gathered so far.
			if err := q.flushInserts(ctx, tx, it, &inserts); err != nil {
				return err
			}
			if err := q.flush(ctx, tx, it); err != nil {
				return err
			}
			v, err := q.applyStorage(ctx, tx, it, op)
			// The ready counts changed: a later produce reads them again.
			it.ready = nil
			if err != nil {
				if _, ok := apierr.As(err); ok {
					r.Answer(nil, err)
					continue
				}
				return err
			}
			it.reply(r, v)
		default:
			r.Answer(nil, fmt.Errorf("queue '%s': unknown request %T", q.name, op))
		}
	}
	return q.flushInserts(ctx, tx, it, &inserts)
}

// produceTo returns the partition for the next produced batch: the one with
// the fewest ready items (engine.FewestReady), and moves the cursor past it.
// The counts are read once per iteration (readyCounts, so they saturate at
// readyCountCap) and then kept up to date with the iteration's own
// produces; other nodes' transactions in flight are not seen.
func (q *Queue) produceTo(ctx context.Context, tx pgx.Tx, it *iteration) (int32, error) {
	if it.ready == nil {
		ready, err := readyCounts(ctx, tx, q.id, max(it.info.Partitions, 1))
		if err != nil {
			return 0, err
		}
		it.ready = ready
	}
	p := engine.FewestReady(it.ready, q.produceNext)
	q.produceNext = p + 1
	return int32(p), nil
}

// deadPartitions returns the dead-letter queue partition of each of the n
// items of a move, in the order they are placed: the produce rule item by
// item (docs/ARCHITECTURE.md "Partitions"), the same as the embedded
// engine's. Each item goes to the partition with the fewest ready items
// (engine.FewestReady), counting the items placed before it in the same
// move, ties to the first partition at or after deadNext, which moves past
// each partition chosen. The counts are the dead-letter queue's as this
// transaction sees them (readyCounts: capped at readyCountCap, a plain read
// that takes no row lock, so the lock order holds); moves and produces of
// other transactions in flight are not seen.
func (q *Queue) deadPartitions(ctx context.Context, tx pgx.Tx, dlqID uint64, partitions int32, n int) ([]int32, error) {
	ready, err := readyCounts(ctx, tx, dlqID, partitions)
	if err != nil {
		return nil, err
	}
	parts := make([]int32, n)
	for i := range parts {
		p := engine.FewestReady(ready, q.deadNext)
		ready[p]++
		q.deadNext = p + 1
		parts[i] = int32(p)
	}
	return parts, nil
}

// place sets a new item's state and expiry: scheduled when enqueueAt is in
// the future, expiring expireTimeout after creation (or at expire when set).
func (q *Queue) place(it *iteration, in *insert, enqueueAt, expire int64) {
	if enqueueAt > it.now {
		in.state, in.deadline = stateScheduled, enqueueAt
		q.nextDue = engine.Earliest(q.nextDue, enqueueAt)
	} else {
		it.wakeQueue(q.id)
	}
	in.expire = expire
	if in.expire == 0 && it.info.ExpireTimeout > 0 {
		in.expire = it.now + int64(it.info.ExpireTimeout)
	}
	q.nextDue = engine.Earliest(q.nextDue, in.expire)
}

func (q *Queue) flushInserts(ctx context.Context, tx pgx.Tx, it *iteration, inserts *[]insert) error {
	if len(*inserts) == 0 {
		return nil
	}
	err := insertItems(ctx, tx, q.id, *inserts, nil)
	*inserts = (*inserts)[:0]
	return err
}

// leased returns the rows of ids, each under a live lease in partition n
// and not yet used by this iteration, or an Invalid error naming the first
// that is not.
func (q *Queue) leased(it *iteration, rows map[int64]row, n int32, ids []uint64) ([]row, error) {
	if err := queue.CheckPartition(q.name, it.info.Partitions, n); err != nil {
		return nil, err
	}
	if err := queue.CheckLeased(q.name, n, ids, func(id uint64) bool { return live(it, rows, n, id) }); err != nil {
		return nil, err
	}
	out := make([]row, len(ids))
	for i, id := range ids {
		out[i] = rows[int64(id)]
	}
	// An item completed or retried by an earlier request of this
	// iteration is no longer leased.
	for _, x := range out {
		delete(rows, x.id)
	}
	return out, nil
}

// live reports whether item id is under a live lease in partition n, among
// the rows lock locked and no earlier request of the iteration used.
func live(it *iteration, rows map[int64]row, n int32, id uint64) bool {
	x, ok := rows[int64(id)]
	return ok && x.state == stateLeased && x.partition == n && x.deadline > it.now
}

// retry ends the leases of op's items and returns what became of each. A
// client mistake is an apierr error and changes nothing; any other error
// fails the transaction.
func (q *Queue) retry(ctx context.Context, tx pgx.Tx, it *iteration, rows map[int64]row, op *retryOp) ([]queue.RetryOutcome, error) {
	ids := make([]uint64, len(op.items))
	for i, ri := range op.items {
		ids[i] = ri.ID
	}
	xs, err := q.leased(it, rows, op.partition, ids)
	if err != nil {
		return nil, err
	}
	outcomes := make([]queue.RetryOutcome, len(op.items))
	// requeued pairs an outcome with its entry in it.requeues, which gets
	// its new id here so that the outcome can name it.
	type requeued struct{ outcome, requeue int }
	var back []requeued
	for i, ri := range op.items {
		x := xs[i]
		var h *history
		if ri.Error != "" {
			hh, err := recordError(x, ri.Error, it.now)
			if err != nil {
				return nil, fmt.Errorf("queue '%s': %w", q.name, err)
			}
			h = &hh
		}
		if ri.Dead {
			outcomes[i] = q.kill(it, x, queue.ReasonExplicit, h)
		} else {
			outcomes[i] = q.endLease(it, x, ri.Release, ri.RetryAt, h)
		}
		outcomes[i].ID = ri.ID
		switch outcomes[i].Outcome {
		case queue.OutcomeRequeued, queue.OutcomeReleased, queue.OutcomeScheduled:
			back = append(back, requeued{outcome: i, requeue: len(it.requeues) - 1})
		}
	}
	if len(back) > 0 {
		newIDs, err := newIDs(ctx, tx, len(back))
		if err != nil {
			return nil, err
		}
		for k, b := range back {
			it.requeues[b.requeue].newID = newIDs[k]
			outcomes[b.outcome].NewID = uint64(newIDs[k])
		}
	}
	return outcomes, nil
}

// renew extends the leases of op.ids (see queue.Logical.Renew) on the rows
// lock locked. An id completed or retried by an earlier request of this
// iteration is no longer leased; one renewed stays leased.
func (q *Queue) renew(ctx context.Context, tx pgx.Tx, it *iteration, rows map[int64]row, op *renewOp) ([]time.Time, error) {
	n := op.partition
	if err := queue.CheckPartition(q.name, it.info.Partitions, n); err != nil {
		return nil, err
	}
	deadline, err := queue.CheckRenew(it.info, n, op.ids, op.timeout, it.now, func(id uint64) bool { return live(it, rows, n, id) })
	if err != nil {
		return nil, err
	}
	ids := make([]int64, len(op.ids))
	for i, id := range op.ids {
		ids[i] = int64(id)
	}
	if err := renewLeases(ctx, tx, q.id, ids, deadline); err != nil {
		return nil, err
	}
	// A shorter lease than the one it replaces is due sooner.
	q.nextDue = engine.Earliest(q.nextDue, deadline)
	out := make([]time.Time, len(ids))
	for i, id := range ids {
		x := rows[id]
		x.deadline = deadline
		rows[id] = x
		out[i] = queue.FromNanos(deadline)
	}
	return out, nil
}

// flush writes the completes, requeues and deaths gathered so far.
func (q *Queue) flush(ctx context.Context, tx pgx.Tx, it *iteration) error {
	if len(it.completed) > 0 {
		if _, err := deleteIDs(ctx, tx, q.id, it.completed); err != nil {
			return err
		}
		it.completed = it.completed[:0]
	}
	if len(it.requeues) > 0 {
		if err := requeueItems(ctx, tx, q.id, it.requeues); err != nil {
			return err
		}
		it.requeues = it.requeues[:0]
	}
	if len(it.deaths) > 0 {
		if err := q.bury(ctx, tx, it, it.deaths); err != nil {
			return err
		}
		it.deaths = it.deaths[:0]
	}
	return nil
}

// bury moves dead items to the dead-letter queue, or drops them when the
// queue has none (or is itself a dead-letter queue whose retention ended).
func (q *Queue) bury(ctx context.Context, tx pgx.Tx, it *iteration, ds []death) error {
	reasons := map[string]int{}
	var attempts []int32
	for _, d := range ds {
		reasons[d.reason]++
		attempts = append(attempts, d.attempts)
	}
	if it.info.DeadQueue == "" {
		ids := make([]int64, len(ds))
		for i, d := range ds {
			ids[i] = d.id
		}
		if _, err := deleteIDs(ctx, tx, q.id, ids); err != nil {
			return err
		}
		dropped := slices.Clone(ds)
		it.metrics = append(it.metrics, func() {
			for _, d := range dropped {
				msg := "dead item dropped: the queue has no dead_queue"
				if queue.IsDeadCopyKey(d.sourceKey) {
					msg = "dead item dropped: its retention in the dead-letter queue ended"
				}
				q.m.cfg.Log.Warn(msg, "queue", q.name, "id", queue.FormatID(uint64(d.id)), "reason", d.reason, "attempts", d.attempts)
				q.m.cfg.Metrics.ItemsDropped.WithLabelValues(q.name, d.reason).Inc()
				q.m.cfg.Metrics.ItemAttempts.WithLabelValues("dropped").Observe(float64(d.attempts))
			}
		})
		return nil
	}
	to, ok := q.m.cachedInfoByName(it.info.DeadQueue)
	if !ok {
		// Created on another node and not yet heard of here: read it in
		// this transaction (a plain read, no lock) and serve it from now on.
		info, err := scanQueue(tx.QueryRow(ctx, `SELECT `+queueColumns+` FROM styx_queues WHERE name=$1`, it.info.DeadQueue))
		if errors.Is(err, pgx.ErrNoRows) {
			return apierr.New(apierr.Retry, "dead-letter queue '%s' of queue '%s' not found; retry", it.info.DeadQueue, q.name)
		}
		if err != nil {
			return err
		}
		if _, err := q.m.adopt(info); err != nil {
			return err
		}
		to = info
	}
	// Placed and numbered in id order, the order the dead-letter queue's new
	// ids follow (moveDead).
	ds = slices.Clone(ds)
	slices.SortFunc(ds, func(a, b death) int { return cmp.Compare(a.id, b.id) })
	parts, err := q.deadPartitions(ctx, tx, to.ID, max(to.Partitions, 1), len(ds))
	if err != nil {
		return err
	}
	if _, err := moveDead(ctx, tx, q.id, q.name, dlq{id: to.ID, name: to.Name, expire: int64(to.ExpireTimeout)}, ds, parts, it.now); err != nil {
		return err
	}
	it.wakeQueue(to.ID)
	it.metrics = append(it.metrics, func() {
		for reason, n := range reasons {
			q.m.cfg.Metrics.DeadLettered.WithLabelValues(q.name, to.Name, reason).Add(float64(n))
		}
		for _, a := range attempts {
			q.m.cfg.Metrics.ItemAttempts.WithLabelValues("dead_lettered").Observe(float64(a))
		}
		if to.ExpireTimeout > 0 {
			q.m.signalQueue(to.ID, false, it.now+int64(to.ExpireTimeout))
		}
	})
	return nil
}

// applyStorage runs import, delete and clear.
func (q *Queue) applyStorage(ctx context.Context, tx pgx.Tx, it *iteration, op any) (any, error) {
	switch op := op.(type) {
	case *importOp:
		if err := queue.CheckPartition(q.name, it.info.Partitions, op.partition); err != nil {
			return nil, err
		}
		return q.importItems(ctx, tx, it, op)
	case *deleteOp:
		for _, ref := range op.refs {
			if err := queue.CheckPartition(q.name, it.info.Partitions, ref.Partition); err != nil {
				return nil, err
			}
		}
		n, err := deleteRefs(ctx, tx, q.id, op.refs, op.exceptLeased)
		return int(n), err
	case *clearOp:
		return nil, clearItems(ctx, tx, q.id, op.p)
	}
	return nil, fmt.Errorf("queue '%s': unknown request %T", q.name, op)
}

// importItems inserts the items of an import (see queue.Logical.Import for
// the rules). An item with a source_id gets the source key
// queue.ImportKey, so the unique source-key index keeps one imported item
// per source_id and partition, even when two nodes import at once.
func (q *Queue) importItems(ctx context.Context, tx pgx.Tx, it *iteration, op *importOp) ([]store.Item, error) {
	out := make([]store.Item, len(op.items))
	if len(op.items) == 0 {
		return out, nil
	}
	keys := make([]string, len(op.items))
	first := map[string]int{} // source key -> the first item of the request with it
	var wanted []string
	for i, si := range op.items {
		if si.Body.SourceID == "" {
			continue
		}
		keys[i] = queue.ImportKey(op.partition, si.Body.SourceID)
		if _, ok := first[keys[i]]; !ok {
			first[keys[i]] = i
			wanted = append(wanted, keys[i])
		}
	}
	held, err := heldKeys(ctx, tx, q.id, wanted)
	if err != nil {
		return nil, err
	}
	var ins []insert
	var pos []int // request index of each insert
	for i, si := range op.items {
		if keys[i] != "" && (first[keys[i]] != i || held[keys[i]] != nil) {
			continue
		}
		in := insert{partition: op.partition, state: stateReady, created: queue.Nanos(si.Meta.CreatedAt), attempts: si.Meta.Attempts,
			body: si.Body, lastError: si.Errors.LastError, errors: encodeErrors(si.Errors.Errors)}
		if keys[i] != "" {
			in.sourceKey = &keys[i]
		}
		if in.created == 0 {
			in.created = it.now
		}
		if si.Meta.Leased {
			q.place(it, &in, 0, queue.Nanos(si.Meta.ExpireDeadline))
			in.state, in.deadline = stateLeased, queue.Nanos(si.Meta.LeaseDeadline)
			if in.deadline == 0 {
				in.deadline = it.now + int64(it.info.LeaseTimeout)
			}
			q.nextDue = engine.Earliest(q.nextDue, in.deadline)
		} else {
			q.place(it, &in, queue.Nanos(si.Meta.EnqueueAt), queue.Nanos(si.Meta.ExpireDeadline))
		}
		ins = append(ins, in)
		pos = append(pos, i)
	}
	ids, err := newIDs(ctx, tx, len(ins))
	if err != nil {
		return nil, err
	}
	for j, in := range ins {
		m := store.ItemMeta{ID: uint64(ids[j]), BodyID: uint64(ids[j]), Attempts: in.attempts,
			ExpireDeadline: queue.FromNanos(in.expire), CreatedAt: queue.FromNanos(in.created)}
		switch in.state {
		case stateLeased:
			m.Leased, m.LeaseDeadline = true, queue.FromNanos(in.deadline)
		case stateScheduled:
			m.EnqueueAt = queue.FromNanos(in.deadline)
		}
		if in.sourceKey != nil {
			m.SourceKey = *in.sourceKey
		}
		si := op.items[pos[j]]
		out[pos[j]] = store.Item{Partition: op.partition, Meta: m, Body: si.Body, Errors: si.Errors}
	}
	inserted, err := importInsert(ctx, tx, q.id, ins, ids)
	if err != nil {
		return nil, err
	}
	// An insert that another transaction's copy beat (committed since the
	// look-up above) was skipped: answer with that copy.
	var lost []string
	for j, in := range ins {
		if in.sourceKey != nil && !inserted[ids[j]] {
			lost = append(lost, *in.sourceKey)
		}
	}
	if len(lost) > 0 {
		more, err := heldKeys(ctx, tx, q.id, lost)
		if err != nil {
			return nil, err
		}
		for k, v := range more {
			held[k] = v
		}
	}
	for i := range op.items {
		if keys[i] == "" {
			continue
		}
		if h := held[keys[i]]; h != nil {
			out[i] = *h
		} else if j := first[keys[i]]; j != i {
			out[i] = out[j]
		}
	}
	return out, nil
}

// serve hands ready items to the waiting leases (engine.Serve): each
// partition's ready items are counted in the transaction (readyCounts, so
// another node's commits since are seen, not its transactions in flight),
// and a partition's share is leased in one statement (lease, SKIP LOCKED:
// rows another node holds are passed over). Served waiters are answered
// after commit.
func (q *Queue) serve(ctx context.Context, tx pgx.Tx, it *iteration) error {
	parts := max(it.info.Partitions, 1)
	deadline := it.now + int64(it.info.LeaseTimeout)
	return engine.Serve(&q.loop.Waiters, &q.leaseNext,
		func() ([]int, error) { return readyCounts(ctx, tx, q.id, parts) },
		func(p int32, n int) ([]queue.LeasedItem, error) {
			items, err := lease(ctx, tx, q.id, p, n, deadline, it.now)
			if len(items) > 0 {
				q.nextDue = engine.Earliest(q.nextDue, deadline)
			}
			return items, err
		},
		func(w *engine.Request, p int32, items []queue.LeasedItem) {
			it.reply(w, queue.LeaseResult{Partition: p, Items: items})
		})
}

// Stats implements queue.Queue from the database; LeaseWaiting counts this
// node's waiting leases only, and no item is ever dying (moves are atomic).
func (q *Queue) Stats(ctx context.Context) (queue.Stats, error) {
	info, err := q.m.Info(ctx, q.name)
	if err != nil {
		return queue.Stats{}, err
	}
	now := q.m.now()
	s := queue.Stats{LeaseWaiting: q.loop.Waiters.Len(), DeadByReason: map[string]int{}, DeadBySource: map[string]int{}}
	s.Partitions = make([]queue.PartitionStats, info.Partitions)
	for i := range s.Partitions {
		s.Partitions[i].Partition = int32(i)
	}
	rows, err := q.m.st.pool.Query(ctx, `SELECT partition, count(*), count(*) FILTER (WHERE state=1), count(*) FILTER (WHERE state=2),
		count(*) FILTER (WHERE attempts>0 AND state<>1 AND dead_reason=''),
		coalesce(avg($2 - created_at), 0)::bigint,
		coalesce(avg($2 - (deadline - $3)) FILTER (WHERE state=1), 0)::bigint,
		min(created_at)
		FROM styx_items WHERE queue_id=$1 GROUP BY partition`, int64(info.ID), now, int64(info.LeaseTimeout))
	if err != nil {
		return s, wrap("stats", err)
	}
	var oldest int64
	for rows.Next() {
		var p, total, leasedN, sched, failures int32
		var age, leasedAge, minCreated int64
		if err := rows.Scan(&p, &total, &leasedN, &sched, &failures, &age, &leasedAge, &minCreated); err != nil {
			rows.Close()
			return s, wrap("stats", err)
		}
		if p < 0 || p >= info.Partitions {
			continue
		}
		s.Partitions[p] = queue.PartitionStats{Partition: p, Total: int(total), Leased: int(leasedN), Scheduled: int(sched),
			Failures: int(failures), AverageAge: time.Duration(age), AverageLeasedAge: time.Duration(leasedAge)}
		oldest = engine.Earliest(oldest, minCreated)
	}
	if err := rows.Err(); err != nil {
		return s, wrap("stats", err)
	}
	s.Oldest = queue.FromNanos(oldest)
	if !s.Oldest.IsZero() {
		s.Oldest = s.Oldest.Local()
	}
	rows, err = q.m.st.pool.Query(ctx, `SELECT dead_reason, source_queue, count(*) FROM styx_items
		WHERE queue_id=$1 AND dead_reason<>'' GROUP BY 1, 2`, int64(info.ID))
	if err != nil {
		return s, wrap("stats", err)
	}
	for rows.Next() {
		var reason, src string
		var n int
		if err := rows.Scan(&reason, &src, &n); err != nil {
			rows.Close()
			return s, wrap("stats", err)
		}
		s.DeadByReason[reason] += n
		s.DeadBySource[src] += n
	}
	return s, wrap("stats", rows.Err())
}

// List implements queue.Queue: a committed snapshot, straight from the
// database.
func (q *Queue) List(ctx context.Context, partition int32, after uint64, limit int) ([]store.Item, error) {
	items, err := collectItems(q.m.st.pool.Query(ctx, `SELECT `+itemColumns+` FROM styx_items
		WHERE queue_id=$1 AND partition=$2 AND id>$3 ORDER BY id LIMIT $4`, int64(q.id), partition, int64(after), limit))
	return items, q.readErr(err)
}

// Scheduled implements queue.Queue.
func (q *Queue) Scheduled(ctx context.Context, partition int32, after uint64, limit int) ([]store.Item, error) {
	info, err := q.m.Info(ctx, q.name)
	if err != nil {
		return nil, err
	}
	if err := queue.CheckPartition(q.name, info.Partitions, partition); err != nil {
		return nil, err
	}
	items, err := collectItems(q.m.st.pool.Query(ctx, `SELECT `+itemColumns+` FROM styx_items
		WHERE queue_id=$1 AND partition=$2 AND state=2 AND id>$3 ORDER BY id LIMIT $4`, int64(q.id), partition, int64(after), limit))
	return items, q.readErr(err)
}

// scanChunk is how many items Scan reads per statement.
const scanChunk = 500

// Scan implements queue.Queue: the queue's items in id order across
// partitions, filtered as queue.Logical.Scan filters them.
func (q *Queue) Scan(ctx context.Context, _ int32, f *queue.DeadFilter, p queue.ScanParams) ([]store.Item, uint64, error) {
	if p.MaxScanned <= 0 {
		p.MaxScanned = 10_000
	}
	if len(f.IDs) > 0 {
		ids := make([]int64, 0, len(f.IDs))
		for _, id := range f.IDs {
			if id > p.After && id != 0 {
				ids = append(ids, int64(id))
			}
		}
		got, err := collectItems(q.m.st.pool.Query(ctx, `SELECT `+itemColumns+` FROM styx_items
			WHERE queue_id=$1 AND id = ANY($2) ORDER BY id`, int64(q.id), ids))
		if err != nil {
			return nil, 0, q.readErr(err)
		}
		var items []store.Item
		for i := range got {
			if !f.Match(&got[i]) {
				continue
			}
			if len(items) == p.Limit {
				return items, items[len(items)-1].Meta.ID, nil
			}
			items = append(items, got[i])
		}
		return items, 0, nil
	}
	var items []store.Item
	after, scanned := p.After, 0
	for len(items) < p.Limit && scanned < p.MaxScanned {
		chunk := min(scanChunk, p.MaxScanned-scanned)
		got, err := collectItems(q.m.st.pool.Query(ctx, `SELECT `+itemColumns+` FROM styx_items
			WHERE queue_id=$1 AND id>$2 ORDER BY id LIMIT $3`, int64(q.id), int64(after), chunk))
		if err != nil {
			return nil, 0, q.readErr(err)
		}
		for i := range got {
			scanned++
			after = got[i].Meta.ID
			if f.Match(&got[i]) {
				items = append(items, got[i])
				if len(items) == p.Limit {
					return items, after, nil
				}
			}
		}
		if len(got) < chunk {
			return items, 0, nil
		}
	}
	return items, after, nil
}

func (q *Queue) readErr(err error) error {
	if err == nil {
		return nil
	}
	return wrap("queue '"+q.name+"'", err)
}

package queue

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/styxq/styx/internal/apierr"
	"github.com/styxq/styx/internal/clock"
	"github.com/styxq/styx/internal/engine"
	"github.com/styxq/styx/internal/store"
	"github.com/styxq/styx/metrics"
)

const (
	// maxMovesInFlight bounds the dead-letter moves a queue has awaiting
	// confirmation; it is also the capacity of its result channel, so a
	// dead-letter queue never blocks answering.
	maxMovesInFlight = 8
	// maxItemsPerMove bounds the items of one dead-letter move.
	maxItemsPerMove = 500
	// moveRetryDelay is how long a failed or refused move waits.
	moveRetryDelay = time.Second
	// maxAttemptErrors is how many attempt errors an item keeps.
	maxAttemptErrors = 10
)

// Config configures a logical queue or a Manager.
type Config struct {
	Store   store.Store
	Clock   clock.Clock
	Log     *slog.Logger
	Metrics *metrics.Metrics
	// ConsumeBeforeSync answers lease, complete, retry and renew once
	// their batch is written, before its sync (ADR 0013); produce, every
	// dead-letter decision and move, and the other calls still wait for
	// it. A lease is answered early only when every item it hands out was
	// stored by a batch already durable. Off by default; it changes
	// nothing on a store that writes synchronously (memory, sync off).
	ConsumeBeforeSync bool
}

// Logical is the logical queue: the engine.Backend of one queue on memory
// and Pebble, owning the state of every partition in memory. Its requests
// reach it through its engine.Loop; each iteration runs the item lifecycle
// (lease expiry, scheduled items, expiry, dead-lettering), applies the
// requests, serves waiting leases and writes everything as one storage
// batch (one fsync) before answering. See docs/ARCHITECTURE.md.
//
// Methods may be called from any goroutine.
type Logical struct {
	name    string
	cfg     Config
	queueID uint64
	lookup  func(name string) *Logical
	loop    *engine.Loop
	results chan moveResult

	// Fields below are owned by the loop goroutine.
	info    store.QueueInfo
	parts   []*partition
	lastID  uint64
	loadErr error
	// produceNext and leaseNext are the tie-break cursors of the partition
	// choice (distribution.go): the partition after the one chosen last.
	produceNext int
	leaseNext   int
	inflight    int
	// moveAfter is the earliest time (nanos) to send the next move.
	moveAfter int64
	// sourceKeys maps the source key of every item that has one (a dead
	// item in a dead-letter queue, a redriven item, an item imported with a
	// source_id) to the item: a second copy is ignored.
	sourceKeys map[string]*item
	// groups are the error groups of the dead items the queue holds as a
	// dead-letter queue (groups.go).
	groups map[groupKey]*group
	// toSend lists dying items to send to the dead-letter queue (entries
	// may be stale; see dying.valid).
	toSend []dying
	// confirmed holds items the dead-letter queue has taken, to delete.
	confirmed []*deadItem
	// deferred holds retry requests answered once their dead items moved.
	deferred map[*item]*deferredReply
	// bodies caches recently stored bodies for leases.
	bodies *bodyCache
	// pipe releases the replies of written batches once durable.
	pipe *pipeline
	// ops and fresh are the buffers of the last iteration's batch and
	// fresh bodies, reused (emptied) by the next: a store does not keep a
	// batch once written.
	ops   []store.Op
	fresh map[uint64]*store.ItemBody
}

// deferredReply is a retry's answer (v, its outcomes) held until the n
// dead items it waits on have moved.
type deferredReply struct {
	n int
	r *engine.Request
	v any
}

// answer answers a request with an error, through the channel its kind
// uses: a move's on the source's result channel.
func answer(r *engine.Request, err error) {
	if op, ok := r.Op.(*deadLetterOp); ok {
		op.done(moveResult{op: op, err: err})
		return
	}
	r.Send(nil, err)
}

type (
	produceOp  struct{ items []ProduceItem }
	completeOp struct {
		partition int32
		ids       []uint64
	}
	retryOp struct {
		partition int32
		items     []RetryItem
	}
	renewOp struct {
		partition int32
		ids       []uint64
		timeout   time.Duration
	}
	statsOp  struct{}
	gaugeOp  struct{}
	clearOp  struct{ p ClearParams }
	reloadOp struct{}
	configOp struct{ info store.QueueInfo }
	importOp struct {
		partition int32
		items     []store.Item
	}
	deleteOp struct {
		refs []ItemRef
		// exceptLeased skips leased items (DeleteDead).
		exceptLeased bool
	}
	scheduledOp struct {
		partition int32
		after     uint64
		limit     int
	}
)

// newLogical starts the logical queue of info. lookup finds other queues'
// logical queues (for dead-lettering); it must not block.
func newLogical(cfg Config, info store.QueueInfo, lookup func(string) *Logical) *Logical {
	l := &Logical{
		name:       info.Name,
		cfg:        cfg,
		queueID:    info.ID,
		lookup:     lookup,
		info:       info,
		loop:       engine.NewLoop(info.Name, cfg.Clock),
		results:    make(chan moveResult, maxMovesInFlight),
		sourceKeys: make(map[string]*item),
		groups:     make(map[groupKey]*group),
		deferred:   make(map[*item]*deferredReply),
	}
	l.pipe = newPipeline(info.Name, l.loop.Wake)
	cfg.Metrics.InitQueue(info.Name, info.DeadQueue)
	l.loop.Start(l)
	return l
}

// Name returns the queue's name.
func (l *Logical) Name() string { return l.name }

// Pending returns how many requests wait in the queue's channel.
func (l *Logical) Pending() int { return l.loop.Pending() }

// call sends op to the loop and waits for its answer (engine.Loop.Call).
func (l *Logical) call(ctx context.Context, op any, abandonable bool) (any, error) {
	return l.loop.Call(ctx, op, abandonable)
}

// Produce adds items to one partition, the one with the fewest ready items
// (ties take turns; see distribution.go). It returns when they are durable.
func (l *Logical) Produce(ctx context.Context, items []ProduceItem) error {
	_, err := l.call(ctx, &produceOp{items: items}, false)
	return err
}

// Lease waits up to p.Timeout for ready items and leases up to p.BatchSize
// of them from one partition: the one with the most ready items, shared
// item by item with the other leases waiting on it when there are not
// enough for all (see distribution.go). Returns an apierr.Retry error when
// none came.
func (l *Logical) Lease(ctx context.Context, p LeaseParams) (LeaseResult, error) {
	v, err := l.loop.CallLease(ctx, nil, engine.LeaseWait{ClientID: p.ClientID, BatchSize: p.BatchSize, Timeout: p.Timeout})
	if err != nil {
		return LeaseResult{}, err
	}
	return v.(LeaseResult), nil
}

// Complete deletes leased items. Every id must be leased in the partition,
// or nothing changes and an apierr.Invalid error names the first that is not.
func (l *Logical) Complete(ctx context.Context, partition int32, ids []uint64) error {
	_, err := l.call(ctx, &completeOp{partition: partition, ids: ids}, false)
	return err
}

// Retry ends leases without completion: each item is requeued with a new
// id, scheduled, released or dead-lettered (see RetryItem), and the returned
// outcomes, in request order, say which. Every id must be leased in the
// partition, or nothing changes and an apierr.Invalid error names the first
// that is not. A dead-lettered item has been taken by the dead-letter queue
// (or its move is durably recorded and will be retried) when Retry returns.
func (l *Logical) Retry(ctx context.Context, partition int32, items []RetryItem) ([]RetryOutcome, error) {
	v, err := l.call(ctx, &retryOp{partition: partition, items: items}, false)
	if err != nil {
		return nil, err
	}
	return v.([]RetryOutcome), nil
}

// Renew extends live leases: each item's lease deadline becomes now +
// timeout (the queue's lease_timeout when timeout is 0), and the new
// deadlines are returned in ids order once durable. Every id must be leased
// in the partition with a lease that has not expired, and appear once, or
// nothing changes and an apierr.Invalid error names every id that is not
// (see NotLeased). An item past its expire deadline may be renewed; it dies
// of expiry when its lease ends.
func (l *Logical) Renew(ctx context.Context, partition int32, ids []uint64, timeout time.Duration) ([]time.Time, error) {
	v, err := l.call(ctx, &renewOp{partition: partition, ids: ids, timeout: timeout}, false)
	if err != nil {
		return nil, err
	}
	return v.([]time.Time), nil
}

// Stats describes the queue now.
func (l *Logical) Stats(ctx context.Context) (Stats, error) {
	v, err := l.call(ctx, &statsOp{}, true)
	if err != nil {
		return Stats{}, err
	}
	return v.(Stats), nil
}

// Clear removes the items selected by p.
func (l *Logical) Clear(ctx context.Context, p ClearParams) error {
	_, err := l.call(ctx, &clearOp{p: p}, false)
	return err
}

// Reload rebuilds the in-memory state from storage.
func (l *Logical) Reload(ctx context.Context) error {
	_, err := l.call(ctx, &reloadOp{}, false)
	return err
}

// Import adds items to a partition as given, under new ids: leased (Leased,
// until LeaseDeadline, or for the queue's lease_timeout from now when that
// is zero; a deadline in the past ends at the next iteration as an expired
// lease), scheduled (EnqueueAt in the future) or ready, with their attempts.
// An item whose Body.SourceID the partition already holds on an imported
// item (or that an earlier item of the same call holds) is skipped: the
// first copy is kept. It returns, for each item in order, the item as
// stored: the new one, or the one that holds its source_id.
func (l *Logical) Import(ctx context.Context, partition int32, items []store.Item) ([]store.Item, error) {
	v, err := l.call(ctx, &importOp{partition: partition, items: items}, false)
	if err != nil {
		return nil, err
	}
	return v.([]store.Item), nil
}

// ItemRef names an item of a queue.
type ItemRef struct {
	Partition int32
	ID        uint64
}

// Delete removes items, in any state, and returns how many it found.
// Unknown ids are ignored; a partition that does not exist is an
// apierr.Invalid error and nothing is deleted.
func (l *Logical) Delete(ctx context.Context, refs []ItemRef) (int, error) {
	v, err := l.call(ctx, &deleteOp{refs: refs}, false)
	if err != nil {
		return 0, err
	}
	return v.(int), nil
}

// DeleteDead removes the items of refs that are at rest: leased items (a
// consumer of the dead-letter queue is working on them) are skipped, and so
// are unknown ids. It returns how many it deleted; a partition that does
// not exist is an apierr.Invalid error and nothing is deleted. The dead.*
// calls and redrive tasks delete through it, so they never take an item
// from under a consumer.
func (l *Logical) DeleteDead(ctx context.Context, refs []ItemRef) (int, error) {
	v, err := l.call(ctx, &deleteOp{refs: refs, exceptLeased: true}, false)
	if err != nil {
		return 0, err
	}
	return v.(int), nil
}

// Scheduled lists up to limit scheduled items of a partition with ids
// greater than after, in id order.
func (l *Logical) Scheduled(ctx context.Context, partition int32, after uint64, limit int) ([]store.Item, error) {
	v, err := l.call(ctx, &scheduledOp{partition: partition, after: after, limit: limit}, false)
	if err != nil {
		return nil, err
	}
	return v.([]store.Item), nil
}

// List reads up to limit items of a partition with ids greater than after,
// straight from storage (a committed snapshot; it does not wait for the loop).
func (l *Logical) List(ctx context.Context, partition int32, after uint64, limit int) ([]store.Item, error) {
	items, err := l.cfg.Store.ListItems(ctx, l.queueID, partition, after, limit)
	return items, readErr(l.name, err)
}

// setConfig hands the loop a new configuration (queues.update).
func (l *Logical) setConfig(ctx context.Context, info store.QueueInfo) error {
	_, err := l.call(ctx, &configOp{info: info}, false)
	return err
}

// Open loads the queue: the first work of its loop goroutine
// (engine.Backend).
func (l *Logical) Open() {
	go l.pipe.run()
	l.load()
}

// Iterate runs one loop iteration (engine.Backend): the answers of moves and
// a failed sync first, then the requests.
func (l *Logical) Iterate(now int64, reqs []*engine.Request, _ bool) {
	select {
	case <-l.pipe.failed:
		l.syncFailed()
	default:
	}
	for {
		select {
		case res := <-l.results:
			l.moved(res)
			continue
		default:
		}
		break
	}
	l.iterate(now, reqs)
}

// Stopped finishes the queue once its loop stopped (engine.Backend): every
// reply of the requests taken leaves, and retries waiting on moves are
// answered (their dead items are durably recorded and move on restart).
func (l *Logical) Stopped() {
	l.pipe.close()
	for it, d := range l.deferred {
		delete(l.deferred, it)
		if d.n > 0 {
			d.n = 0
			d.r.Send(d.v, nil)
		}
	}
}

// load rebuilds the in-memory state from storage. On failure every request
// is answered with the error until a later load succeeds.
func (l *Logical) load() {
	ctx := context.Background()
	now := l.cfg.Clock.Now().UnixNano()
	parts := make([]*partition, l.info.Partitions)
	keys := make(map[string]*item)
	var dead []loadedDead
	last, err := l.cfg.Store.LastID(ctx, l.queueID)
	for i := range parts {
		if err != nil {
			break
		}
		p := newPartition(int32(i))
		err = l.cfg.Store.LoadItems(ctx, l.queueID, int32(i), func(m store.ItemMeta) error {
			it := itemFromMeta(m, now)
			p.add(it)
			if it.src != nil {
				keys[it.src.key] = it
				if it.isDeadCopy() {
					dead = append(dead, loadedDead{x: it, part: int32(i), fp: m.Fingerprint, deadAt: Nanos(m.DeadAt)})
				}
			}
			last = max(last, m.ID)
			return nil
		})
		parts[i] = p
	}
	if err == nil {
		err = l.loadGroups(ctx, dead)
	}
	if err != nil {
		l.loadErr = unavailable(l.name, fmt.Errorf("load: %w", err))
		l.cfg.Log.Error("load failed", "queue", l.name, "error", err)
		return
	}
	l.loadErr = nil
	l.parts, l.sourceKeys, l.lastID = parts, keys, last
	// What storage holds counts as durable for early lease answers.
	l.pipe.durableID.Store(last)
	l.bodies = newBodyCache(defaultBodyCacheBytes)
	// Moves in flight are answered later against the old items and
	// ignored; dying items are sent again (the dead-letter queue ignores
	// copies it holds). Retries waiting on old items were durable: answer.
	l.toSend, l.confirmed, l.moveAfter = l.toSend[:0], l.confirmed[:0], 0
	for _, p := range parts {
		for _, x := range p.items {
			if x.state == stateDying {
				l.toSend = append(l.toSend, dying{p: p, x: x})
			}
		}
	}
	for x, d := range l.deferred {
		delete(l.deferred, x)
		l.settle(d)
	}
}

// iteration collects the effects of one loop iteration.
type iteration struct {
	now   int64
	batch store.Batch
	// fresh holds bodies inserted in this iteration, not yet readable from
	// storage, by body id.
	fresh map[uint64]*store.ItemBody
	// replies are the answers to send once the batch is durable (or with
	// the error of its write), in order.
	replies []pendingReply
	// early are answers sent once the batch is written, before its sync
	// (Config.ConsumeBeforeSync).
	early []pendingReply
	// after runs in the loop once the batch is durable (err nil) or has
	// failed; the loop waits for the batch before its next iteration.
	after []func(err error)
	// deferrals are retry replies to defer until their items moved.
	deferrals []deferral
	// wait makes the loop wait for the batch to be durable before its next
	// iteration (it recorded a dead-letter decision, whose move may start
	// only once durable).
	wait bool
	err  error
}

// addBody records the body of an item inserted in this iteration.
func (l *Logical) addBody(it *iteration, id uint64, b *store.ItemBody) {
	if it.fresh == nil {
		it.fresh = make(map[uint64]*store.ItemBody)
	}
	it.fresh[id] = b
	l.bodies.put(id, b)
}

type deferral struct {
	r     *engine.Request
	items []*item
	v     any
}

// reply answers r with v once the iteration's batch is durable.
func (l *Logical) reply(it *iteration, r *engine.Request, v any) {
	it.replies = append(it.replies, pendingReply{r: r, v: v})
}

// replyConsume answers a complete, retry or renew: once the batch is
// written with Config.ConsumeBeforeSync, else once it is durable.
func (l *Logical) replyConsume(it *iteration, r *engine.Request, v any) {
	if l.cfg.ConsumeBeforeSync {
		it.early = append(it.early, pendingReply{r: r, v: v})
		return
	}
	l.reply(it, r, v)
}

// iterate runs one loop iteration over the given requests.
func (l *Logical) iterate(now int64, reqs []*engine.Request) {
	if l.loadErr != nil {
		l.load()
		if l.loadErr != nil {
			for _, r := range reqs {
				answer(r, l.loadErr)
			}
			l.loop.Waiters.Fail(l.loadErr)
			return
		}
	}
	it := &iteration{
		now:   now,
		batch: store.Batch{QueueID: l.queueID, Ops: l.ops},
		fresh: l.fresh,
	}
	l.lifecycle(it)
	for _, d := range l.confirmed {
		if p := l.parts[d.partition]; d.item.state == stateDying && p.items[d.id] == d.item {
			l.removeItem(it, p, d.item)
		}
	}
	l.confirmed = l.confirmed[:0]
	for _, r := range reqs {
		if err := l.handle(it, r); err != nil {
			// Answered in order with the batch's other replies, so that
			// it reveals nothing of a state not yet durable. An error that
			// is not the client's is a read the storage failed (453).
			it.replies = append(it.replies, pendingReply{r: r, err: unavailable(l.name, err)})
		}
	}
	l.serveWaiters(it)
	l.commit(it)
}

// handle applies one request. A returned error is answered at once and
// means the request changed nothing.
func (l *Logical) handle(it *iteration, r *engine.Request) error {
	switch op := r.Op.(type) {
	case *produceOp:
		l.produce(it, op)
		l.reply(it, r, nil)
	case *completeOp:
		p, items, err := l.leased(op.partition, op.ids)
		if err != nil {
			return err
		}
		for _, x := range items {
			l.removeItem(it, p, x)
			l.cfg.Metrics.ItemAttempts.WithLabelValues("completed").Observe(float64(x.attempts))
		}
		l.replyConsume(it, r, nil)
	case *retryOp:
		return l.retry(it, r, op)
	case *renewOp:
		deadlines, err := l.renew(it, op)
		if err != nil {
			return err
		}
		l.replyConsume(it, r, deadlines)
	case *statsOp:
		l.reply(it, r, l.stats(it.now))
	case *gaugeOp:
		l.reply(it, r, l.gauges(it.now))
	case *clearOp:
		l.clearItems(it, op.p)
		l.reply(it, r, nil)
	case *reloadOp:
		// Pending writes of this iteration would be lost by a reload
		// before the write, so the reload runs after it.
		it.after = append(it.after, func(err error) {
			if err == nil {
				l.load()
				err = l.loadErr
			}
			r.Send(nil, err)
		})
	case *configOp:
		if op.info.ID != l.queueID {
			return fmt.Errorf("queue '%s': config for queue id %d", l.name, op.info.ID)
		}
		l.info = op.info
		l.cfg.Metrics.InitQueue(op.info.Name, op.info.DeadQueue)
		for n := int32(len(l.parts)); n < op.info.Partitions; n++ {
			l.parts = append(l.parts, newPartition(n))
		}
		l.reply(it, r, nil)
	case *importOp:
		p, err := l.partition(op.partition)
		if err != nil {
			return err
		}
		items, err := l.importItems(it, p, op.items)
		if err != nil {
			return err
		}
		l.reply(it, r, items)
	case *deleteOp:
		for _, ref := range op.refs {
			if _, err := l.partition(ref.Partition); err != nil {
				return err
			}
		}
		n := 0
		for _, ref := range op.refs {
			p := l.parts[ref.Partition]
			if x, ok := p.items[ref.ID]; ok && !(op.exceptLeased && x.state == stateLeased) {
				l.removeItem(it, p, x)
				n++
			}
		}
		l.reply(it, r, n)
	case *redriveOp:
		l.takeRedriven(it, op)
		l.reply(it, r, nil)
	case *scheduledOp:
		items, err := l.scheduledItems(it, op)
		if err != nil {
			return err
		}
		l.reply(it, r, items)
	case *deadLetterOp:
		l.takeDead(it, r, op)
	case *groupsOp:
		l.reply(it, r, l.listGroups(op))
	default:
		return fmt.Errorf("queue '%s': unknown request %T", l.name, op)
	}
	return nil
}

// partition returns partition n or an Invalid error.
func (l *Logical) partition(n int32) (*partition, error) {
	if err := CheckPartition(l.name, int32(len(l.parts)), n); err != nil {
		return nil, err
	}
	return l.parts[n], nil
}

// leased returns the items of ids, each leased in partition n, or an
// Invalid error naming the first that is not.
func (l *Logical) leased(n int32, ids []uint64) (*partition, []*item, error) {
	p, err := l.partition(n)
	if err != nil {
		return nil, nil, err
	}
	// The lifecycle of this iteration has ended the leases that expired:
	// an item still leased has a live lease.
	err = CheckLeased(l.name, n, ids, func(id uint64) bool {
		x, ok := p.items[id]
		return ok && x.state == stateLeased
	})
	if err != nil {
		return nil, nil, err
	}
	items := make([]*item, len(ids))
	for i, id := range ids {
		items[i] = p.items[id]
	}
	return p, items, nil
}

// allocID returns a new id and records it as the batch's high-water mark.
func (l *Logical) allocID(it *iteration) uint64 {
	l.lastID = nextID(l.lastID, time.Unix(0, it.now))
	it.batch.LastID = l.lastID
	return l.lastID
}

// produceTo returns the partition for the next produced batch: the one
// with the fewest ready items (FewestReady), and moves the cursor past it.
func (l *Logical) produceTo() *partition {
	n := engine.FewestReady(l.readyCounts(), l.produceNext)
	l.produceNext = n + 1
	return l.parts[n]
}

// readyCounts returns each partition's number of ready items.
func (l *Logical) readyCounts() []int {
	ready := make([]int, len(l.parts))
	for i, p := range l.parts {
		ready[i] = p.nReady
	}
	return ready
}

func (l *Logical) produce(it *iteration, op *produceOp) {
	p := l.produceTo()
	for _, pi := range op.items {
		id := l.allocID(it)
		x := &item{id: id, bodyID: id, created: it.now, state: stateReady}
		if l.info.ExpireTimeout > 0 {
			x.expire = it.now + int64(l.info.ExpireTimeout)
		}
		if at := Nanos(pi.EnqueueAt); at > it.now {
			x.state, x.deadline = stateScheduled, at
		}
		p.add(x)
		body := &store.ItemBody{Reference: pi.Reference, Kind: pi.Kind, Encoding: pi.Encoding, Payload: pi.Payload}
		it.batch.InsertBody(p.num, x.meta(), body)
		l.addBody(it, x.bodyID, body)
	}
}

// lifecycle ends expired leases, makes scheduled items ready and kills
// expired items that are not leased.
func (l *Logical) lifecycle(it *iteration) {
	for _, p := range l.parts {
		var expired []*item
		for x := p.timed.popDue(it.now); x != nil; x = p.timed.popDue(it.now) {
			if x.state == stateScheduled {
				x.deadline = 0
				p.setState(x, stateReady)
				continue
			}
			expired = append(expired, x)
		}
		if len(expired) > 0 {
			// An expired lease is a failed attempt (counted when leased),
			// recorded in the item's attempt history.
			if err := l.recordExpiredLeases(it, p, expired); err != nil {
				it.err = err
				return
			}
			for _, x := range expired {
				l.endLease(it, p, x, false, time.Time{})
			}
		}
		for x := p.expiries.popDue(it.now); x != nil; x = p.expiries.popDue(it.now) {
			// A leased item dies of expiry when its lease ends.
			if x.state == stateReady || x.state == stateScheduled {
				l.kill(it, p, x, ReasonExpired)
			}
		}
	}
	if l.info.DeadQueue == "" && len(l.toSend) > 0 {
		// The dead-letter queue was removed from the configuration while
		// moves were pending: drop them.
		for _, d := range l.toSend {
			if d.valid() {
				l.drop(it, d.p, d.x)
			}
		}
		l.toSend = l.toSend[:0]
	}
}

// LeaseExpiredError is the attempt error recorded when a lease ends by its
// deadline: "lease expired after 1m0s", with the queue's lease_timeout.
func LeaseExpiredError(leaseTimeout time.Duration) string {
	return "lease expired after " + leaseTimeout.String()
}

// recordExpiredLeases appends LeaseExpiredError to the attempt history of
// each item (leased, in p, its lease past its deadline) and makes it the
// item's last error, in this iteration's batch. It reads the stored history
// of the items that may have one.
func (l *Logical) recordExpiredLeases(it *iteration, p *partition, items []*item) error {
	var withErr []uint64
	for _, x := range items {
		if x.hasErrs {
			withErr = append(withErr, x.bodyID)
		}
	}
	history := make(map[uint64]store.ItemErrors, len(withErr))
	if len(withErr) > 0 {
		_, errs, err := l.cfg.Store.ReadBodies(context.Background(), l.queueID, p.num, withErr)
		if err != nil {
			return fmt.Errorf("queue '%s': read errors: %w", l.name, err)
		}
		for i, id := range withErr {
			history[id] = errs[i]
		}
	}
	msg := LeaseExpiredError(l.info.LeaseTimeout)
	for _, x := range items {
		h := RecordError(history[x.bodyID], x.attempts, msg, it.now)
		it.batch.SetErrors(p.num, x.meta(), h)
		x.hasErrs = true
	}
	return nil
}

// endLease ends a lease without completion: the item is requeued (new id,
// at the tail or at retryAt) unless it is dead by max_attempts or expiry.
// With release the attempt is not counted and max_attempts does not apply.
// It returns what it did (without the item's old id).
func (l *Logical) endLease(it *iteration, p *partition, x *item, release bool, retryAt time.Time) RetryOutcome {
	e := EndLease(l.info, x.attempts, x.expire, release, retryAt, it.now)
	x.attempts = e.Attempts
	if e.Reason != "" {
		return l.kill(it, p, x, e.Reason)
	}
	old := x.id
	p.rekey(x, l.allocID(it))
	l.moveToGroupTail(x)
	x.deadline = e.At
	if e.At != 0 {
		p.setState(x, stateScheduled)
	} else {
		p.setState(x, stateReady)
	}
	it.batch.Requeue(p.num, old, x.meta())
	return e.Requeued(x.id)
}

// kill makes the item dead. With a dead-letter queue the decision is
// recorded durably in this iteration's batch and the move starts after it
// (sendDeadLetters); without one the item is dropped. It returns what it
// did (without the item's id).
func (l *Logical) kill(it *iteration, p *partition, x *item, reason string) RetryOutcome {
	x.reason, x.deadAt, x.deadline = reason, it.now, 0
	p.setState(x, stateDying)
	if l.info.DeadQueue == "" {
		l.drop(it, p, x)
	} else {
		it.batch.Update(p.num, x.meta())
		l.toSend = append(l.toSend, dying{p: p, x: x})
		it.wait = true // the move starts once the decision is durable
	}
	return KillOutcome(l.info, reason, x.attempts)
}

// drop deletes a dead item that has no dead-letter queue to go to: the
// queue has no dead_queue, or the item is in a dead-letter queue and its
// retention ended.
func (l *Logical) drop(it *iteration, p *partition, x *item) {
	msg := "dead item dropped: the queue has no dead_queue"
	if x.isDeadCopy() {
		msg = "dead item dropped: its retention in the dead-letter queue ended"
	}
	l.cfg.Log.Warn(msg, "queue", l.name, "id", FormatID(x.id), "reason", x.reason, "attempts", x.attempts)
	l.cfg.Metrics.ItemsDropped.WithLabelValues(l.name, x.reason).Inc()
	l.cfg.Metrics.ItemAttempts.WithLabelValues("dropped").Observe(float64(x.attempts))
	l.removeItem(it, p, x)
}

// removeItem deletes an item from memory and, in the batch, from storage.
func (l *Logical) removeItem(it *iteration, p *partition, x *item) {
	p.remove(x)
	l.removeFromGroup(x)
	l.bodies.drop(x.bodyID)
	if x.src != nil && l.sourceKeys[x.src.key] == x {
		delete(l.sourceKeys, x.src.key)
	}
	if d, ok := l.deferred[x]; ok {
		// A retry waiting on this dead item is answered once the delete
		// is written.
		delete(l.deferred, x)
		it.after = append(it.after, func(error) { l.settle(d) })
	}
	it.batch.Delete(p.num, x.meta())
}

// settle counts one item of a deferred retry reply as done.
func (l *Logical) settle(d *deferredReply) {
	d.n--
	if d.n == 0 {
		d.r.Send(d.v, nil)
	}
}

func (l *Logical) retry(it *iteration, r *engine.Request, op *retryOp) error {
	ids := make([]uint64, len(op.items))
	for i, ri := range op.items {
		ids[i] = ri.ID
	}
	p, items, err := l.leased(op.partition, ids)
	if err != nil {
		return err
	}
	// Attempt history: read the stored errors of the items that record one
	// and may have earlier errors.
	var withErr []uint64
	for i, ri := range op.items {
		if ri.Error != "" && items[i].hasErrs {
			withErr = append(withErr, items[i].bodyID)
		}
	}
	var history map[uint64]store.ItemErrors
	if len(withErr) > 0 {
		_, errs, err := l.cfg.Store.ReadBodies(context.Background(), l.queueID, p.num, withErr)
		if err != nil {
			return fmt.Errorf("queue '%s': read errors: %w", l.name, err)
		}
		history = make(map[uint64]store.ItemErrors, len(withErr))
		for i, id := range withErr {
			history[id] = errs[i]
		}
	}
	var dead []*item
	outcomes := make([]RetryOutcome, len(op.items))
	for i, ri := range op.items {
		x := items[i]
		if ri.Error != "" {
			h := RecordError(history[x.bodyID], x.attempts, ri.Error, it.now)
			it.batch.SetErrors(p.num, x.meta(), h)
			x.hasErrs = true
		}
		if ri.Dead {
			outcomes[i] = l.kill(it, p, x, ReasonExplicit)
		} else {
			outcomes[i] = l.endLease(it, p, x, ri.Release, ri.RetryAt)
		}
		outcomes[i].ID = ri.ID
		if x.state == stateDying && p.items[x.id] == x {
			dead = append(dead, x)
		}
	}
	if len(dead) == 0 {
		l.replyConsume(it, r, outcomes)
		return nil
	}
	it.deferrals = append(it.deferrals, deferral{r: r, items: dead, v: outcomes})
	return nil
}

// renew extends the leases of op.ids (see Renew).
func (l *Logical) renew(it *iteration, op *renewOp) ([]time.Time, error) {
	p, err := l.partition(op.partition)
	if err != nil {
		return nil, err
	}
	deadline, err := CheckRenew(l.info, op.partition, op.ids, op.timeout, it.now, func(id uint64) bool {
		x, ok := p.items[id]
		return ok && x.state == stateLeased && x.deadline > it.now
	})
	if err != nil {
		return nil, err
	}
	out := make([]time.Time, len(op.ids))
	for i, id := range op.ids {
		x := p.items[id]
		p.setDeadline(x, deadline)
		it.batch.Update(p.num, x.meta())
		out[i] = time.Unix(0, deadline).UTC()
	}
	return out, nil
}

// serveWaiters hands ready items to the waiting leases (engine.Serve): a
// partition's share is leased at once, its bodies read in one go, and each
// waiter answered once the leases are durable. A failed body read fails the
// iteration and every waiting lease (453).
func (l *Logical) serveWaiters(it *iteration) {
	if it.err != nil {
		return
	}
	deadline := it.now + int64(l.info.LeaseTimeout)
	err := engine.Serve(&l.loop.Waiters, &l.leaseNext,
		func() ([]int, error) { return l.readyCounts(), nil },
		func(n int32, want int) ([]LeasedItem, error) {
			p := l.parts[n]
			var items []*item
			for len(items) < want {
				x := p.popReady()
				if x == nil {
					break
				}
				x.attempts++
				x.deadline = deadline
				p.setState(x, stateLeased)
				it.batch.Update(p.num, x.meta())
				items = append(items, x)
			}
			bodies, err := l.leasedBodies(it, p, items)
			if err != nil {
				return nil, fmt.Errorf("read bodies: %w", err)
			}
			out := make([]LeasedItem, len(items))
			for i, x := range items {
				b := bodies[x.bodyID]
				out[i] = LeasedItem{ID: x.id, Attempts: x.attempts, LeaseDeadline: time.Unix(0, deadline).UTC(),
					Encoding: b.Encoding, Kind: b.Kind, Reference: b.Reference, Payload: b.Payload}
			}
			return out, nil
		},
		func(w *engine.Request, n int32, xs []LeasedItem) {
			res := LeaseResult{Partition: n, Items: xs}
			var newest uint64
			for _, x := range xs {
				newest = max(newest, x.ID)
			}
			if l.cfg.ConsumeBeforeSync && newest <= l.pipe.durableID.Load() {
				// Every item was stored by a durable batch: only the
				// lease itself may be lost (ADR 0013).
				it.early = append(it.early, pendingReply{r: w, v: res})
			} else {
				l.reply(it, w, res)
			}
		})
	if err != nil {
		it.err = err
		l.loop.Waiters.Fail(unavailable(l.name, err))
	}
}

// leasedBodies returns the bodies of items by body id: from this
// iteration's inserts, the body cache, or else storage (one read).
func (l *Logical) leasedBodies(it *iteration, p *partition, items []*item) (map[uint64]*store.ItemBody, error) {
	out := make(map[uint64]*store.ItemBody, len(items))
	var missing []uint64
	for _, x := range items {
		b := it.fresh[x.bodyID]
		if b == nil {
			b = l.bodies.get(x.bodyID)
		}
		if b == nil {
			missing = append(missing, x.bodyID)
			continue
		}
		out[x.bodyID] = b
	}
	if len(missing) == 0 {
		return out, nil
	}
	bodies, _, err := l.cfg.Store.ReadBodies(context.Background(), l.queueID, p.num, missing)
	if err != nil {
		return nil, err
	}
	for i, id := range missing {
		out[id] = &bodies[i]
	}
	return out, nil
}

// NextWake returns when lifecycle work is next due (engine.Backend).
func (l *Logical) NextWake(int64) int64 {
	var next int64
	earliest := func(t int64) {
		if t != 0 && (next == 0 || t < next) {
			next = t
		}
	}
	for _, p := range l.parts {
		earliest(p.nextTimed())
		earliest(p.nextExpiry())
	}
	if len(l.toSend) > 0 && l.inflight < maxMovesInFlight {
		earliest(max(l.moveAfter, 1))
	}
	return next
}

// Gauges returns the queue's item counts and oldest item's age for the
// queue gauges, from counts the loop keeps: O(partitions), never a scan.
func (l *Logical) Gauges(ctx context.Context) (metrics.QueueSample, error) {
	v, err := l.call(ctx, &gaugeOp{}, true)
	if err != nil {
		return metrics.QueueSample{}, err
	}
	return v.(metrics.QueueSample), nil
}

func (l *Logical) gauges(now int64) metrics.QueueSample {
	s := metrics.QueueSample{Queue: l.name}
	var oldest int64
	for _, p := range l.parts {
		s.Ready += p.nReady
		s.Leased += p.nLeased
		s.Scheduled += p.nScheduled
		if o := p.oldest(); o != 0 && (oldest == 0 || o < oldest) {
			oldest = o
		}
	}
	if oldest != 0 {
		s.OldestAge = time.Duration(now - oldest)
	}
	return s
}

func (l *Logical) stats(now int64) Stats {
	s := Stats{LeaseWaiting: l.loop.Waiters.Len(), MovesInFlight: l.inflight,
		DeadByReason: map[string]int{}, DeadBySource: map[string]int{}}
	for _, x := range l.sourceKeys {
		if x.isDeadCopy() {
			why, src := parseSourceKey(x.src.key)
			s.DeadByReason[why]++
			s.DeadBySource[src]++
		}
	}
	for _, p := range l.parts {
		ps := PartitionStats{Partition: p.num, Total: p.total(), Leased: p.nLeased, Scheduled: p.nScheduled, Dying: p.nDying}
		var age, leasedAge int64
		for _, x := range p.items {
			age += now - x.created
			if s.Oldest.IsZero() || x.created < s.Oldest.UnixNano() {
				s.Oldest = time.Unix(0, x.created)
			}
			if x.state == stateLeased {
				leasedAge += now - (x.deadline - int64(l.info.LeaseTimeout))
			} else if x.attempts > 0 && x.state != stateDying && !x.isDeadCopy() {
				ps.Failures++
			}
		}
		if ps.Total > 0 {
			ps.AverageAge = time.Duration(age / int64(ps.Total))
		}
		if ps.Leased > 0 {
			ps.AverageLeasedAge = time.Duration(leasedAge / int64(ps.Leased))
		}
		s.Partitions = append(s.Partitions, ps)
	}
	return s
}

func (l *Logical) clearItems(it *iteration, c ClearParams) {
	for _, p := range l.parts {
		for _, x := range p.items {
			if c.Destructive || (c.Queue && x.state == stateReady) || (c.Scheduled && x.state == stateScheduled) {
				l.removeItem(it, p, x)
			}
		}
	}
}

func (l *Logical) importItems(it *iteration, p *partition, in []store.Item) ([]store.Item, error) {
	// The items already held whose source_id an item repeats are answered
	// as stored: read their bodies first, so that a failed read changes
	// nothing.
	var read []uint64
	for _, si := range in {
		if si.Body.SourceID == "" {
			continue
		}
		if x := l.sourceKeys[importKey(p.num, si.Body.SourceID)]; x != nil && it.fresh[x.bodyID] == nil {
			read = append(read, x.bodyID)
		}
	}
	held := make(map[uint64]store.Item, len(read))
	if len(read) > 0 {
		bodies, errs, err := l.cfg.Store.ReadBodies(context.Background(), l.queueID, p.num, read)
		if err != nil {
			return nil, fmt.Errorf("queue '%s': read bodies: %w", l.name, err)
		}
		for i, id := range read {
			held[id] = store.Item{Partition: p.num, Body: bodies[i], Errors: errs[i]}
		}
	}
	out := make([]store.Item, len(in))
	first := make(map[string]int) // source key -> index of the item of this call that holds it
	for i, si := range in {
		var key string
		if si.Body.SourceID != "" {
			key = importKey(p.num, si.Body.SourceID)
			if j, ok := first[key]; ok {
				out[i] = out[j]
				continue
			}
			if x := l.sourceKeys[key]; x != nil {
				h, ok := held[x.bodyID]
				if !ok { // inserted earlier in this iteration
					h = store.Item{Partition: p.num, Body: *it.fresh[x.bodyID]}
				}
				h.Meta = x.meta()
				out[i] = h
				continue
			}
			first[key] = i
		}
		id := l.allocID(it)
		x := &item{id: id, bodyID: id, created: Nanos(si.Meta.CreatedAt), expire: Nanos(si.Meta.ExpireDeadline),
			attempts: si.Meta.Attempts, state: stateReady, hasErrs: !si.Errors.IsZero(), src: newSource(key)}
		if x.created == 0 {
			x.created = it.now
		}
		if x.expire == 0 && l.info.ExpireTimeout > 0 {
			x.expire = it.now + int64(l.info.ExpireTimeout)
		}
		switch {
		case si.Meta.Leased:
			x.state, x.deadline = stateLeased, Nanos(si.Meta.LeaseDeadline)
			if x.deadline == 0 {
				x.deadline = it.now + int64(l.info.LeaseTimeout)
			}
		case Nanos(si.Meta.EnqueueAt) > it.now:
			x.state, x.deadline = stateScheduled, Nanos(si.Meta.EnqueueAt)
		}
		p.add(x)
		if key != "" {
			l.sourceKeys[key] = x
		}
		body := si.Body
		it.batch.Insert(p.num, x.meta(), body, si.Errors)
		l.addBody(it, x.bodyID, &body)
		out[i] = store.Item{Partition: p.num, Meta: x.meta(), Body: body, Errors: si.Errors}
	}
	return out, nil
}

func (l *Logical) scheduledItems(it *iteration, op *scheduledOp) ([]store.Item, error) {
	p, err := l.partition(op.partition)
	if err != nil {
		return nil, err
	}
	var sel []*item
	for _, x := range p.items {
		if x.state == stateScheduled && x.id > op.after {
			sel = append(sel, x)
		}
	}
	slices.SortFunc(sel, func(a, b *item) int {
		if a.id < b.id {
			return -1
		}
		return 1
	})
	if len(sel) > op.limit {
		sel = sel[:op.limit]
	}
	ids := make([]uint64, len(sel))
	for i, x := range sel {
		ids[i] = x.bodyID
	}
	bodies, errs, err := l.cfg.Store.ReadBodies(context.Background(), l.queueID, p.num, ids)
	if err != nil {
		return nil, fmt.Errorf("queue '%s': read bodies: %w", l.name, err)
	}
	out := make([]store.Item, len(sel))
	for i, x := range sel {
		b := bodies[i]
		if f := it.fresh[x.bodyID]; f != nil {
			b = *f
		}
		out[i] = store.Item{Partition: p.num, Meta: x.meta(), Body: b, Errors: errs[i]}
	}
	return out, nil
}

// unavailable is the answer to a request that storage failed (a write, a
// sync, a read or the queue's load): the failure classified as
// store.ErrUnavailable (453, transport's storage table) naming the queue and
// the cause, the kind the PostgreSQL backend gives for a database that
// fails, so the same outage is the same answer on every backend. A
// client-facing apierr, or a failure already classified, is returned as is.
// Nothing of the request is acknowledged; after a failed sync the queue
// reloads what storage holds, so a retried produce may be stored twice
// (at-least-once, as on PostgreSQL when a commit's answer is lost).
func unavailable(queue string, err error) error {
	if _, ok := apierr.As(err); ok {
		return err
	}
	return store.Unavailable("queue '"+queue+"'", err)
}

// Package embedded is the storage backend of the engine for the embedded
// stores (Pebble on disk, and Pebble in memory for --storage memory): one
// Logical per queue owns an in-memory index of its items (ready FIFO,
// lease/schedule and expiry heaps, source keys, error groups) and uses
// store.Store as its durable log, one batch per iteration, written with a
// pipelined fsync (ADR 0012). It implements engine.Tx on that index
// (logtx.go), the dead-letter move between two queues' loops (ADR 0003,
// deadletter.go) and the Manager of one server's queues.
package embedded

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"sync/atomic"
	"time"

	"github.com/styxq/styx/internal/apierr"
	"github.com/styxq/styx/internal/clock"
	"github.com/styxq/styx/internal/engine"
	"github.com/styxq/styx/internal/queue"
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
	// resumeTimeout bounds how long a queue that loaded dead decisions
	// waits for their moves before it serves (resumeMoves).
	resumeTimeout = 5 * time.Second
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
	// SyncCompletes makes complete (and SQS's DeleteMessage) wait for
	// their batch's sync before they are answered, as produce does. Off by
	// default: they are answered once their batch is written, and the next
	// sync covers it; a crash before that sync can only bring the
	// completed items back (leased until their deadline, then delivered
	// again), never lose or duplicate anything else (ADR 0033). It changes
	// nothing on a store that writes synchronously (memory, sync off).
	SyncCompletes bool
	// SyncLeases makes every lease wait for its batch's sync before it is
	// answered. Off by default: on a store that can tell an unclean
	// shutdown (store.Recovery), a lease of recently produced items with a
	// lease timeout of at most EarlyLeaseTimeout is answered once its
	// batch is written, and after an unclean shutdown the recent items are
	// held until such leases have ended (ADR 0034). The hold after an
	// unclean shutdown applies whatever this says.
	SyncLeases bool
	// MaxDeduplicationIDs bounds the deduplication ids each queue holds in
	// memory within their window: a produce whose new ids would take them
	// over it is refused (queue.DeduplicationLimitError, 454) and stores
	// nothing (dedup.go). 0 means DefaultMaxDeduplicationIDs (100,000); -1
	// means no limit.
	MaxDeduplicationIDs int
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
	results chan moveResult
	// Engine runs the requests (the same on every backend); the logical
	// queue gives each of its iterations a Tx (logtx.go).
	*engine.Engine

	// Fields below are owned by the loop goroutine.

	// cur is the iteration Begin began last: the one a housekeeping op
	// (engine.Housekeeping) runs in.
	cur     *iteration
	info    queue.QueueInfo
	parts   []*partition
	lastID  uint64
	loadErr error
	// deadNext is the tie-break cursor of the partition choice for dead
	// items taken (takeDead).
	deadNext int
	inflight int
	// moveAfter is the earliest time (nanos) to send the next move.
	moveAfter int64
	// sourceKeys maps the source key of every item that has one (a dead
	// item in a dead-letter queue, a redriven item, an item imported with a
	// source_id) to the item: a second copy is ignored. Keyed by
	// queue.OnceKey (a redrive task's key without the task).
	sourceKeys map[string]*item
	// dead counts the dead items of sourceKeys by reason and source
	// (setSourceKey, dropSourceKey; rebuilt by load).
	dead deadCounts
	// removed remembers the source keys of the items with one that the
	// queue removed, for a while (removedKeys); kept across reloads.
	removed removedKeys
	// dedup is the record of the deduplication ids accepted within their
	// window (dedup.go); rebuilt by load.
	dedup dedupIDs
	// groups are the error groups of the dead items the queue holds as a
	// dead-letter queue (groups.go).
	groups map[groupKey]*group
	// held are the item groups a dead item holds (heldgroups.go); nHeld
	// is their number, read by the Manager's checker.
	held  map[heldKey]*heldGroup
	nHeld atomic.Int64
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
	// unsynced: a lazy batch (store.Batch.Lazy) was applied and no sync
	// has been started since; the next reply must wait for one, and a sync
	// starts by unsyncedAt + LazySyncDelay (Unix ns; NextWake). Loop
	// goroutine only.
	unsynced   bool
	unsyncedAt int64
	// earlySeq counts the batches with leases answered before their sync
	// (ADR 0034); pipe.earlyDurable is the count of those known durable.
	// lostEarly says a write or sync failed while some were not: the
	// reload after the store's reopen holds the recent items.
	earlySeq  uint64
	lostEarly bool
	// guard is the store's, when it can refuse writes (store.Guard); gen
	// is its Generation when the state was last loaded (written by the
	// loop, read by ListPage).
	guard store.Guard
	// recovery is the store's, when it can tell an unclean shutdown
	// (store.Recovery): leases may then be answered before their sync.
	recovery store.Recovery
	// holdUntil (Unix ns) is the end of the hold of recent items after an
	// unclean shutdown or a reopen of the store (ADR 0034): every load
	// before it holds them (hold); 0 when there is none.
	holdUntil int64
	// heldWrite lists the items the last load held, whose lease the next
	// iteration writes (Begin): listings and a later load see them held.
	heldWrite []heldItem
	gen       atomic.Uint64
	// resuming is set while the state loaded from storage holds dead
	// decisions whose moves the loop has not resumed yet: from the load
	// until the write of the iteration that resumed them (resumeMoves,
	// commit); written by the loop, read by ListPage.
	resuming atomic.Bool
	// config is a definition handed over by queues.update (setConfig),
	// applied at the start of the loop's next iteration.
	config atomic.Pointer[pendingConfig]
	// ops and fresh are the buffers of the last iteration's batch and
	// fresh bodies, reused (emptied) by the next: a store does not keep a
	// batch once written.
	ops   []store.Op
	fresh map[uint64]*queue.ItemBody
}

// deferredReply is a retry's answer held until the n dead items it waits
// on have moved.
type deferredReply struct {
	n int
	r *engine.Request
}

// answer answers a request with an error, through the channel its kind
// uses: a move's on the source's result channel.
func answer(r *engine.Request, err error) {
	if op, ok := r.Op.(*deadLetterOp); ok {
		if r.Claim() {
			op.done(moveResult{op: op, err: err})
		}
		return
	}
	r.Answer(err)
}

// The logical queue's housekeeping (engine.Housekeeping), run by the
// engine in arrival order with the other requests; each carries its
// result. The dead-letter moves (deadmove.go) and the held-group checker's
// requests (heldgroups.go) are the others.
type (
	gaugeOp struct {
		engine.HousekeepingOp
		l   *Logical
		out metrics.QueueSample
	}
	// resumeOp changes nothing: it makes the loop run an iteration, whose
	// Begin reloads a reopened store and resumes interrupted moves first.
	resumeOp struct{ engine.HousekeepingOp }
)

// newLogical starts the logical queue of info. lookup finds other queues'
// logical queues (for dead-lettering); it must not block.
func newLogical(cfg Config, info queue.QueueInfo, lookup func(string) *Logical) *Logical {
	l := &Logical{
		name:       info.Name,
		cfg:        cfg,
		queueID:    info.ID,
		lookup:     lookup,
		info:       info,
		results:    make(chan moveResult, maxMovesInFlight),
		sourceKeys: make(map[string]*item),
		dead:       newDeadCounts(),
		groups:     make(map[groupKey]*group),
		held:       make(map[heldKey]*heldGroup),
		deferred:   make(map[*item]*deferredReply),
	}
	l.Engine = engine.NewEngine(info.Name, cfg.Clock, cfg.Metrics)
	l.Loop.Log = cfg.Log
	l.Reads = reads{l}
	if g, ok := cfg.Store.(store.Guard); ok {
		l.guard = g
		l.gen.Store(g.Generation())
		l.Engine.Admit = func(inserts bool) error {
			if inserts {
				return g.InsertFault()
			}
			return g.WriteFault()
		}
	}
	l.recovery = storeRecovery(cfg.Store)
	l.pipe = newPipeline(info.Name, l.Loop.Wake)
	cfg.Metrics.InitQueue(info.Name, info.DeadQueue)
	l.Loop.Start(l)
	return l
}

// call sends op to the loop and waits for its answer (engine.Loop.Call).
func (l *Logical) call(ctx context.Context, op engine.Op, abandonable bool) error {
	return l.Loop.Call(ctx, op, abandonable)
}

// reads is the logical queue's read half (engine.Reads): straight from
// storage, a committed snapshot.
type reads struct{ l *Logical }

// Consumers implements engine.Reads: the loop's record is every consumer
// of the queue.
func (reads) Consumers(_ context.Context, own []queue.Consumer) ([]queue.Consumer, error) {
	return own, nil
}

// Page implements engine.Reads: the items are read straight from storage
// (a committed snapshot; it does not wait for the loop, except after a
// load that found interrupted dead-letter moves: see awaitResume), and
// the scheduled ones left out by their enqueue_at. The bodies read are
// bounded by the page's bytes left (store.Store.ListItemsWithin): at most
// one item past the page is read.
func (r reads) Page(ctx context.Context, p queue.ListParams) ([]queue.Item, error) {
	l := r.l
	l.awaitResume(ctx)
	now := l.cfg.Clock.Now().UnixNano()
	page := queue.Page{MaxBytes: p.MaxBytes}
	var out []queue.Item
	for after := p.After; len(out) < p.Limit; {
		left := page.Left()
		items, err := l.cfg.Store.ListItemsWithin(ctx, l.queueID, p.Partition, after, p.Limit, left)
		if err != nil {
			return nil, readErr(l.name, err)
		}
		read := 0
		for i := range items {
			read += queue.ItemBytes(&items[i])
			if queue.IsScheduled(items[i].Meta, now) {
				continue
			}
			if len(out) == p.Limit || !page.Take(&items[i]) {
				return out, nil
			}
			out = append(out, items[i])
		}
		if len(items) < p.Limit && (left == 0 || read < left) {
			break // the partition has no more items
		}
		after = items[len(items)-1].Meta.ID
	}
	return out, nil
}

// awaitResume keeps a listing from showing a dead-letter move a load
// interrupted half-done (ADR 0003): when the queue loaded dead decisions it
// has not resumed yet, or the store was reopened since the queue last
// loaded, it waits for one iteration of the loop, whose Begin reloads and
// finishes those moves first. While the store refuses writes the moves
// cannot finish, and the listing shows what storage holds. Best effort: a
// loop that does not answer (overloaded, stopped) leaves the listing to
// storage as it is.
func (l *Logical) awaitResume(ctx context.Context) {
	if l.resuming.Load() || (l.guard != nil && l.guard.Generation() != l.gen.Load()) {
		_ = l.call(ctx, &resumeOp{}, true)
	}
}

// pendingConfig is a definition on its way to the loop; applied receives
// the outcome.
type pendingConfig struct {
	info    queue.QueueInfo
	applied chan error
}

// setConfig hands the loop a new configuration (queues.update) and waits
// until the loop has applied it, before any request of its next iteration.
// It never refuses for load (no request channel is involved), so a stored
// definition always reaches the running queue: a loop that has ended
// (server shutting down, or a panic) serves nothing more, and loads the
// stored definition at the next start, so setConfig returns nil then.
// Only a definition of another queue id is an error.
func (l *Logical) setConfig(info queue.QueueInfo) error {
	c := &pendingConfig{info: info, applied: make(chan error, 1)}
	l.config.Store(c)
	l.Loop.Wake()
	select {
	case err := <-c.applied:
		return err
	case <-l.Loop.Done():
		return nil
	}
}

// applyConfig applies a definition handed over by setConfig. Runs in the
// loop.
func (l *Logical) applyConfig(info queue.QueueInfo) error {
	if info.ID != l.queueID {
		return fmt.Errorf("queue '%s': config for queue id %d", l.name, info.ID)
	}
	regroup := info.Ordered != l.info.Ordered
	l.info = info
	l.cfg.Metrics.InitQueue(info.Name, info.DeadQueue)
	for n := int32(len(l.parts)); n < info.Partitions; n++ {
		l.parts = append(l.parts, newPartition(n, info.Ordered))
	}
	if regroup {
		for _, p := range l.parts {
			p.regroup(info.Ordered)
		}
	}
	return nil
}

// Open loads the queue: the first work of its loop goroutine
// (engine.Backend).
func (l *Logical) Open() {
	go l.pipe.run()
	if l.recovery != nil && l.recovery.Unclean() {
		// The store holds what was durable: leases answered before their
		// sync may be gone while their consumers work (ADR 0034).
		l.holdUntil = l.cfg.Clock.Now().Add(EarlyLeaseTimeout).UnixNano()
	}
	l.load()
}

// Begin starts one loop iteration (engine.Backend): a new configuration,
// the answers of moves and a failed sync first; while the store refuses
// writes only the reads run (the others are answered the fault here) and
// the lifecycle waits. After a load that found dead decisions, their moves
// are finished before anything else runs (resumeMoves).
func (l *Logical) Begin(now int64, reqs []*engine.Request, _ bool) (engine.Tx, []*engine.Request, bool) {
	if c := l.config.Swap(nil); c != nil {
		c.applied <- l.applyConfig(c.info)
	}
	select {
	case <-l.pipe.failed:
		l.syncFailed()
	default:
	}
	lifecycle := true
	if l.guard != nil {
		if g := l.guard.Generation(); g != l.gen.Load() {
			// The store was reopened: what it holds is what is durable.
			// (gen changes after the load has set resuming: awaitResume.)
			l.cfg.Log.Warn("storage reopened; reloading the queue", "queue", l.name)
			if l.noteLostEarly(); l.lostEarly {
				// Leases answered before their sync may be gone (ADR 0034).
				l.holdUntil = max(l.holdUntil, now+int64(EarlyLeaseTimeout))
			}
			l.lostEarly = false
			l.load()
			l.gen.Store(g)
		}
		if err := l.guard.WriteFault(); err != nil {
			// Read-only: the reads run, the writes and the lifecycle wait
			// for the store to heal (ADR 0015).
			reqs = readsOnly(reqs, err)
			l.Loop.Waiters.Fail(err)
			lifecycle = false
		}
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
	if l.loadErr != nil {
		l.load()
		if l.loadErr != nil {
			for _, r := range reqs {
				answer(r, l.loadErr)
			}
			l.Loop.Waiters.Fail(l.loadErr)
			return nil, nil, false
		}
	}
	resumed := lifecycle && l.resuming.Load()
	if resumed {
		l.resumeMoves(now)
	}
	it := &iteration{
		l:       l,
		now:     now,
		resumed: resumed,
		batch:   store.Batch{QueueID: l.queueID, Ops: l.ops},
		fresh:   l.fresh,
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
	if lifecycle {
		for _, d := range l.confirmed {
			if p := l.parts[d.partition]; d.item.state == stateDying && p.items[d.id] == d.item {
				l.removeItem(it, p, d.item)
			}
		}
		l.confirmed = l.confirmed[:0]
	}
	if lifecycle {
		for _, h := range l.heldWrite {
			if h.p.items[h.x.id] == h.x && h.x.state == stateLeased {
				// Update, not Lease: the item may have a state record
				// already (an earlier lease), which must stay deletable
				// (ADR 0020).
				it.batch.Update(h.p.num, h.p.meta(h.x))
			}
		}
		l.heldWrite = nil
	}
	it.eager = resumed || len(it.batch.Ops) > 0
	l.cur = it
	return it, reqs, lifecycle
}

// readsOnly answers err to the requests of reqs that would write and
// returns the others (stats, listings, groups, reload, configuration).
func readsOnly(reqs []*engine.Request, err error) []*engine.Request {
	kept := reqs[:0:0]
	for _, r := range reqs {
		switch r.Op.(type) {
		case *gaugeOp, *resumeOp, *heldListOp, *holdsKeysOp, *resolveOp:
			kept = append(kept, r)
		default:
			if engine.ReadOnly(r.Op) {
				kept = append(kept, r)
				continue
			}
			answer(r, err)
		}
	}
	return kept
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
			d.r.Answer(nil)
		}
	}
}

// Recover answers err to the requests of a panicked iteration not answered
// yet and rebuilds the state from storage (engine.Backend). The syncer may
// still hold replies of earlier, written batches: they are sent as usual.
func (l *Logical) Recover(reqs []*engine.Request, err error) {
	for _, r := range reqs {
		answer(r, err)
	}
	l.Loop.Waiters.Fail(err)
	// A panic inside commit may leave the iteration's buffers half-used.
	l.ops, l.fresh = nil, nil
	l.load()
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
	holding := now < l.holdUntil
	from := holdFrom(last)
	var heldWrite []heldItem
	for i := range parts {
		if err != nil {
			break
		}
		p := newPartition(int32(i), l.info.Ordered)
		err = l.cfg.Store.LoadItems(ctx, l.queueID, int32(i), func(m queue.ItemMeta) error {
			x := itemFromMeta(m, now)
			// Ordered groups: never leased early; a held group is a
			// record of its own, which a hold would not write.
			if holding && (m.Group == "" || !l.info.Ordered) {
				if hold(x, from, l.holdUntil) {
					heldWrite = append(heldWrite, heldItem{p: p, x: x})
				}
			}
			if m.Group != "" {
				p.index().loading = true
			}
			p.addGrouped(x, m.Group, m.GroupSeq)
			if x.state == stateLeased {
				// The lease's holder, stored with it (issue 49): the
				// queue's consumers know it again after a restart.
				l.Loop.Consumers.Restore(p.num, x.id, m.Holder, x.deadline)
			}
			if x.src != nil {
				keys[queue.OnceKey(x.src.key)] = x
				if x.isDeadCopy() {
					dead = append(dead, loadedDead{x: x, p: p, fp: m.Fingerprint, deadAt: queue.Nanos(m.DeadAt)})
				}
			}
			last = max(last, m.ID)
			return nil
		})
		if p.groups != nil {
			p.groups.endLoad()
		}
		parts[i] = p
	}
	var held map[heldKey]*heldGroup
	if err == nil {
		held, err = l.loadHeld(ctx, parts)
	}
	if err == nil {
		err = l.loadGroups(ctx, dead)
	}
	var dedup dedupIDs
	if err == nil {
		dedup, err = l.loadDedup(ctx)
	}
	if err != nil {
		l.loadErr = unavailable(l.name, fmt.Errorf("load: %w", err))
		l.cfg.Log.Error("load failed", "queue", l.name, "error", err)
		return
	}
	l.loadErr = nil
	l.heldWrite = heldWrite
	if len(heldWrite) > 0 {
		l.cfg.Log.Warn("holding recent items: a lease answered before its sync may have dealt them, and the store restarted or reopened without it (ADR 0034)",
			"queue", l.name, "items", len(heldWrite), "until", time.Unix(0, l.holdUntil).UTC())
	}
	l.parts, l.sourceKeys, l.lastID = parts, keys, last
	l.setHeld(held)
	l.dedup = dedup
	l.dead = newDeadCounts()
	for k := range keys {
		l.dead.count(k, 1)
	}
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
	// Set before the retries below are answered: a listing that follows
	// one waits for the moves (awaitResume).
	l.resuming.Store(len(l.toSend) > 0 && l.info.DeadQueue != "")
	for x, d := range l.deferred {
		delete(l.deferred, x)
		l.settle(d)
	}
}

// iteration collects the effects of one loop iteration: the logical
// queue's Tx.
type iteration struct {
	l     *Logical
	now   int64
	batch store.Batch
	// fresh holds bodies inserted in this iteration, not yet readable from
	// storage, by body id.
	fresh map[uint64]*queue.ItemBody
	// replies are the answers to send once the batch is durable (or with
	// the error of its write), in order.
	replies []pendingReply
	// early are answers sent once the batch is written, before its sync
	// (Config.ConsumeBeforeSync, ADR 0033's completes, ADR 0034's leases).
	early []pendingReply
	// earlyLease says early holds a lease answered under ADR 0034
	// (Logical.earlySeq counts the batch once written).
	earlyLease bool
	// after runs in the loop once the batch is durable (err nil) or has
	// failed; the loop waits for the batch before its next iteration.
	after []func(err error)
	// deferrals are retry replies to defer until their items moved.
	deferrals []deferral
	// wait makes the loop wait for the batch to be durable before its next
	// iteration (it recorded a dead-letter decision, whose move may start
	// only once durable).
	wait bool
	// resumed: Begin finished the moves a load found (resumeMoves); the
	// batch deletes the items the dead-letter queue took.
	resumed bool
	// lazy: nothing waits on the batch (engine.Lazy); eager: Begin wrote
	// into it (it is then synced whatever the engine says).
	lazy, eager bool
	err         error
}

// addBody records the body of an item inserted in this iteration.
func (l *Logical) addBody(it *iteration, id uint64, b *queue.ItemBody) {
	if it.fresh == nil {
		it.fresh = make(map[uint64]*queue.ItemBody)
	}
	it.fresh[id] = b
	l.bodies.put(id, b)
}

type deferral struct {
	r     *engine.Request
	items []*item
}

// partition returns partition n or an Invalid error.
func (l *Logical) partition(n int32) (*partition, error) {
	if err := queue.CheckPartition(l.name, int32(len(l.parts)), n); err != nil {
		return nil, err
	}
	return l.parts[n], nil
}

// allocID returns a new id and records it as the batch's high-water mark.
func (l *Logical) allocID(it *iteration) uint64 {
	l.lastID = queue.NextID(l.lastID, time.Unix(0, it.now))
	it.batch.LastID = l.lastID
	return l.lastID
}

// deadTo returns the partition the next dead item taken goes to: the one
// with the fewest ready items (engine.FewestReady), and moves the cursor
// past it.
func (l *Logical) deadTo() *partition {
	n := engine.FewestReady(l.readyCounts(), l.deadNext)
	l.deadNext = n + 1
	return l.parts[n]
}

// readyCounts returns each partition's number of items a lease may take
// (partition.leasable: its ready items, unless groups hold some back).
func (l *Logical) readyCounts() []int {
	ready := make([]int, len(l.parts))
	for i, p := range l.parts {
		ready[i] = p.leasable()
	}
	return ready
}

// kill makes the item dead. With a dead-letter queue the decision is
// recorded durably in this iteration's batch and the move starts after it
// (sendDeadLetters); without one the item is dropped. It returns what it
// did (without the item's id).
func (l *Logical) kill(it *iteration, p *partition, x *item, reason string) queue.RetryOutcome {
	x.reason = reasonCode(reason)
	p.setStateAt(x, stateDying, it.now)
	if l.info.DeadQueue == "" {
		l.drop(it, p, x)
	} else {
		it.batch.Update(p.num, p.meta(x))
		l.toSend = append(l.toSend, dying{p: p, x: x})
		it.wait = true // the move starts once the decision is durable
	}
	return queue.KillOutcome(l.info, reason, x.attempts)
}

// drop deletes a dead item that has no dead-letter queue to go to: the
// queue has no dead_queue, or the item is in a dead-letter queue and its
// retention ended.
func (l *Logical) drop(it *iteration, p *partition, x *item) {
	msg := "dead item dropped: the queue has no dead_queue"
	if x.isDeadCopy() {
		msg = "dead item dropped: its retention in the dead-letter queue ended"
	}
	reason := reasonName(x.reason)
	l.cfg.Log.Warn(msg, "queue", l.name, "id", queue.FormatID(x.id), "reason", reason, "attempts", x.attempts)
	l.cfg.Metrics.ItemsDropped.WithLabelValues(l.name, reason).Inc()
	l.cfg.Metrics.ItemAttempts.WithLabelValues("dropped").Observe(float64(x.attempts))
	l.removeItem(it, p, x)
}

// removeItem deletes an item from memory and, in the batch, from storage.
func (l *Logical) removeItem(it *iteration, p *partition, x *item) {
	m := p.meta(x) // before remove: it takes x's group entry
	p.remove(x)
	l.removeFromGroup(x)
	l.bodies.drop(x.bodyID)
	if x.src != nil && l.sourceKeys[queue.OnceKey(x.src.key)] == x {
		k := queue.OnceKey(x.src.key)
		l.dropSourceKey(k)
		if !queue.IsImportKey(k) {
			l.removed.add(k, it.now)
		}
	}
	if d, ok := l.deferred[x]; ok {
		// A retry waiting on this dead item is answered once the delete
		// is written.
		delete(l.deferred, x)
		it.after = append(it.after, func(error) { l.settle(d) })
	}
	it.batch.Delete(p.num, m, x.hasErrs)
}

// setSourceKey records x as the item of source key k (by its
// queue.OnceKey: sourceKeys is keyed so).
func (l *Logical) setSourceKey(k string, x *item) {
	k = queue.OnceKey(k)
	if _, held := l.sourceKeys[k]; !held {
		l.dead.count(k, 1)
	}
	l.sourceKeys[k] = x
}

// dropSourceKey forgets source key k (by its queue.OnceKey).
func (l *Logical) dropSourceKey(k string) {
	k = queue.OnceKey(k)
	if _, held := l.sourceKeys[k]; held {
		l.dead.count(k, -1)
		delete(l.sourceKeys, k)
	}
}

// settle counts one item of a deferred retry reply as done.
func (l *Logical) settle(d *deferredReply) {
	d.n--
	if d.n == 0 {
		d.r.Answer(nil)
	}
}

// leasedBodies returns the bodies of items by body id: from this
// iteration's inserts, the body cache, or else storage (one read).
func (l *Logical) leasedBodies(it *iteration, p *partition, items []*item) (map[uint64]*queue.ItemBody, error) {
	out := make(map[uint64]*queue.ItemBody, len(items))
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

// bodyOf returns the body of x, an item of partition p, as leasedBodies
// finds it: from this iteration's inserts, the body cache, or one read.
func (l *Logical) bodyOf(it *iteration, p *partition, x *item) (*queue.ItemBody, error) {
	if b := it.fresh[x.bodyID]; b != nil {
		return b, nil
	}
	if b := l.bodies.get(x.bodyID); b != nil {
		return b, nil
	}
	bodies, _, err := l.cfg.Store.ReadBodies(context.Background(), l.queueID, p.num, []uint64{x.bodyID})
	if err != nil {
		return nil, err
	}
	return &bodies[0], nil
}

// NextWake returns when lifecycle work is next due (engine.Backend).
func (l *Logical) NextWake(int64) int64 {
	var next int64
	for _, p := range l.parts {
		next = engine.Earliest(next, p.nextTimed(), p.nextExpiry())
	}
	if len(l.toSend) > 0 && l.inflight < maxMovesInFlight {
		next = engine.Earliest(next, max(l.moveAfter, 1))
	}
	if l.unsynced {
		// An iteration then finds the lazy batches unsynced and syncs them
		// (commit), whether or not it writes.
		next = engine.Earliest(next, l.unsyncedAt+int64(LazySyncDelay))
	}
	return next
}

// Gauges returns the queue's item counts and oldest item's age for the
// queue gauges, from counts the loop keeps: O(partitions), never a scan.
func (l *Logical) Gauges(ctx context.Context) (metrics.QueueSample, error) {
	op := &gaugeOp{l: l}
	if err := l.call(ctx, op, true); err != nil {
		return metrics.QueueSample{}, err
	}
	return op.out, nil
}

func (l *Logical) gauges(now int64) metrics.QueueSample {
	s := metrics.QueueSample{Queue: l.name, DeduplicationIDs: l.dedup.held(), InMemoryDeduplication: true, Paused: l.info.Paused()}
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
	s.ExpiringDeadItems = l.expiringWithin(now)
	return s
}

// stats describes the queue from the counts its partitions and dead
// counts keep (counts.go, ADR 0024): O(partitions + dead reasons and
// sources), never a scan of the items; but for a queue that holds dead
// items, its items expiring within a day, counted by a walk of the expiry
// indexes up to the cutoff (expiringWithin).
func (l *Logical) stats(now int64) queue.Stats {
	s := queue.Stats{LeaseWaiting: l.Loop.Waiters.Len(), MovesInFlight: l.inflight,
		DeadByReason: maps.Clone(l.dead.byReason), DeadBySource: maps.Clone(l.dead.bySource)}
	var oldest int64
	found := false
	for _, p := range l.parts {
		ps := queue.PartitionStats{Partition: p.num, Total: p.total(), Leased: p.nLeased, Scheduled: p.nScheduled, Dying: p.nDying,
			Failures: p.nFailures}
		if ps.Total > 0 {
			ps.AverageAge = meanAge(p.sumCreated, ps.Total, now)
		}
		if ps.Leased > 0 {
			// A lease began LeaseTimeout before its deadline.
			ps.AverageLeasedAge = meanAge(p.sumLeased, ps.Leased, now+int64(l.info.LeaseTimeout))
		}
		if c, ok := p.oldestCreated(); ok && (!found || c < oldest) {
			oldest, found = c, true
		}
		s.Partitions = append(s.Partitions, ps)
	}
	if found {
		s.Oldest = time.Unix(0, oldest)
	}
	s.HeldGroups, s.HeldTotal = l.heldList(), len(l.held)
	s.ExpiringWithinDay = l.expiringWithin(now)
	return s
}

// clearItems removes the items c selects; a clear of the ready items or of
// every item releases the held groups too.
func (l *Logical) clearItems(it *iteration, c queue.ClearParams) {
	for _, p := range l.parts {
		for _, x := range p.items {
			if c.Destructive || (c.Queue && x.state == stateReady) || (c.Scheduled && x.state == stateScheduled) {
				l.removeItem(it, p, x)
			}
		}
	}
	if c.Destructive || c.Queue {
		for _, h := range l.held {
			l.release(it, h)
		}
	}
}

// scheduledItems lists a page of a partition's scheduled items (ListPage)
// from its index of scheduled ids (schedIndex): it reads the bodies of the
// page and at most one more.
func (l *Logical) scheduledItems(it *iteration, lp queue.ListParams) ([]queue.Item, error) {
	p, err := l.partition(lp.Partition)
	if err != nil {
		return nil, err
	}
	var sel []*item
	p.scheduled.page(lp.After, p.isScheduled, func(id uint64) bool {
		if len(sel) == lp.Limit {
			return false
		}
		sel = append(sel, p.items[id])
		return true
	})
	ids := make([]uint64, len(sel))
	for i, x := range sel {
		ids[i] = x.bodyID
	}
	bodies, errs, err := l.cfg.Store.ReadBodiesWithin(context.Background(), l.queueID, p.num, ids, lp.MaxBytes)
	if err != nil {
		return nil, fmt.Errorf("queue '%s': read bodies: %w", l.name, err)
	}
	page := queue.Page{MaxBytes: lp.MaxBytes}
	out := make([]queue.Item, 0, len(bodies))
	for i, b := range bodies {
		x := sel[i]
		if f := it.fresh[x.bodyID]; f != nil {
			b = *f
		}
		item := queue.Item{Partition: p.num, Meta: p.meta(x), Body: b, Errors: errs[i]}
		if !page.Take(&item) {
			break
		}
		out = append(out, item)
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
func unavailable(name string, err error) error {
	if _, ok := apierr.As(err); ok {
		return err
	}
	return store.Unavailable("queue '"+name+"'", err)
}

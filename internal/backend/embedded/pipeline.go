package embedded

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/styxq/styx/internal/engine"
	"github.com/styxq/styx/internal/store"
)

// The commit pipeline (ADR 0012). The loop applies each iteration's batch
// with store.AsyncWriter.WriteAsync and goes on with the next requests while
// the batch syncs; the pipeline's syncer goroutine waits for each batch's
// sync, in the order the batches were applied, and only then sends the
// batch's replies. So:
//
//   - no reply leaves before the write it answers is durable;
//   - replies leave in batch order: a later batch (say, a lease of an item
//     produced by an earlier batch still syncing) is never answered before
//     an earlier one;
//   - batches applied while an fsync is in flight share the next one.
//
// Work that must run in the loop after a batch is durable (a reload, a
// dead-letter move started from a recorded decision, a retry waiting on a
// move) makes the loop wait for its batch before its next iteration, as it
// always did. When a sync fails, the syncer fails the replies of that batch
// and of every batch after it until the loop, told on failed, has reloaded
// its state from storage and sent a reset marker.

// pipelineDepth is how many written batches may await their sync before the
// loop blocks.
const pipelineDepth = 64

// LazySyncDelay bounds how long a batch written without a sync of its own
// (a lazy one: nothing waits on it, or every answer it holds left before
// its sync) stays unsynced when no later batch starts a sync that covers
// it: 5 ms. Under load the next produce's sync covers it first, so the
// answers that leave early do not make fsyncs of their own that a produce
// would then wait behind (issue 52; ADR 0033, ADR 0034).
const LazySyncDelay = 5 * time.Millisecond

// pendingReply is one reply of a batch: success (its result is in its
// request's op), or an error answer (a request that broke a rule and
// changed nothing).
type pendingReply struct {
	r   *engine.Request
	err error
}

// send answers the request: with its own error, else with werr (the batch's
// write or sync failed), else with success.
func (p *pendingReply) send(werr error) {
	err := p.err
	if err == nil {
		err = werr
	}
	if err != nil {
		answer(p.r, err)
		return
	}
	if op, ok := p.r.Op.(*deadLetterOp); ok {
		if p.r.Claim() {
			op.done(moveResult{op: op})
		}
		return
	}
	p.r.Answer(nil)
}

// commit is one entry of the pipeline: a written batch's wait and replies,
// or a reset marker.
type commit struct {
	// wait blocks until the batch is durable; nil when it already is.
	wait    func() error
	replies []pendingReply
	// notify, when set, receives the batch's outcome after its replies are
	// sent (the loop waits on it).
	notify chan error
	// lastID is the loop's id high-water mark when the batch was written:
	// once the batch is durable, so is every item of an id up to it.
	lastID uint64
	// early is the loop's count of batches with leases answered before
	// their sync (Logical.earlySeq) when the batch was written.
	early uint64
	// reset ends a failure: the loop has reloaded from storage.
	reset bool
}

// pipeline is a logical queue's syncer: entries are sent by the loop and
// handled in order by one goroutine.
type pipeline struct {
	name    string
	entries chan *commit
	// pending counts entries sent and not yet handled; when it is 0 every
	// earlier reply has been sent, so the loop may answer inline, unless
	// failing: a sync failed and the loop has not reset the failure yet
	// (its state may hold the failed batches' changes).
	pending atomic.Int64
	failing atomic.Bool
	// failed receives a notice when a sync fails (buffered 1); wake then
	// wakes the loop.
	failed chan struct{}
	wake   func()
	// durableID is the id high-water mark of the last batch known durable
	// (Config.ConsumeBeforeSync answers a lease early only for items up to
	// it).
	durableID atomic.Uint64
	// earlyDurable is the count of batches with leases answered before
	// their sync (Logical.earlySeq) known durable.
	earlyDurable atomic.Uint64
	done         chan struct{}
}

// newPipeline returns the syncer of queue name; wake wakes the queue's
// loop after a failed sync. run starts it.
func newPipeline(name string, wake func()) *pipeline {
	p := &pipeline{name: name, wake: wake, done: make(chan struct{})}
	p.entries, p.failed = make(chan *commit, pipelineDepth), make(chan struct{}, 1)
	return p
}

// idle reports whether every entry sent has been handled and no sync
// failure awaits its reset: a batch may then be answered inline.
func (p *pipeline) idle() bool { return p.pending.Load() == 0 && !p.failing.Load() }

// push hands an entry to the syncer, blocking while pipelineDepth entries
// wait.
func (p *pipeline) push(c *commit) {
	p.pending.Add(1)
	p.entries <- c
}

// close stops the syncer once it has handled every entry, and waits for it.
func (p *pipeline) close() {
	close(p.entries)
	<-p.done
}

// run is the syncer goroutine.
func (p *pipeline) run() {
	defer close(p.done)
	var ferr error // the failure being handled, until a reset
	for c := range p.entries {
		if c.reset {
			ferr = nil
			p.failing.Store(false)
			p.pending.Add(-1)
			continue
		}
		var err error
		if c.wait != nil {
			err = c.wait()
		}
		if err != nil && ferr == nil {
			ferr = unavailable(p.name, fmt.Errorf("sync: %w", err))
			p.failing.Store(true) // before pending drops: idle never hides it
			select {
			case p.failed <- struct{}{}:
			default:
			}
			p.wake()
		}
		if ferr == nil {
			p.durableID.Store(c.lastID)
			p.earlyDurable.Store(c.early)
		}
		for i := range c.replies {
			c.replies[i].send(ferr)
		}
		if c.notify != nil {
			c.notify <- ferr
		}
		p.pending.Add(-1)
	}
}

// write applies the iteration's batch: through WriteAsync when the store
// offers it (wait then makes it durable), else with Write.
func (l *Logical) write(b *store.Batch) (wait func() error, err error) {
	if aw, ok := l.cfg.Store.(store.AsyncWriter); ok {
		return aw.WriteAsync(context.Background(), b)
	}
	return nil, l.cfg.Store.Write(context.Background(), b)
}

// commit writes the iteration's batch and releases its replies once the
// batch is durable: at once when it is and no earlier batch still syncs,
// else through the pipeline. Loop work that needs the batch durable (see
// iteration.after, deferrals, wait) makes it wait for the batch here.
func (l *Logical) commit(it *iteration) {
	err := it.err
	var wait func() error
	// A batch nothing waits on (engine.Lazy), or whose every answer leaves
	// before its sync (early), is applied without a sync of its own: the
	// next batch's sync covers it, every reply after it waits for a sync
	// (unsynced), and a sync starts at the latest LazySyncDelay later
	// (NextWake) when no batch came to start one.
	lazy := (it.lazy || len(it.early) > 0) && !it.eager && len(it.replies) == 0 && !it.wait && len(it.after) == 0 &&
		len(it.deferrals) == 0 && l.syncer() != nil
	if err == nil && (it.batch.Len() > 0 || it.batch.LastID != 0) {
		it.batch.Lazy = lazy
		wait, err = l.write(&it.batch)
		it.batch.Lazy = false
		if err == nil && lazy && !l.unsynced {
			l.unsynced, l.unsyncedAt = true, it.now
		}
	}
	// The store is done with the batch: keep its buffers for the next.
	clear(it.batch.Ops)
	l.ops = it.batch.Ops[:0]
	if it.fresh != nil {
		clear(it.fresh)
		l.fresh = it.fresh
	}
	if err == nil && it.earlyLease {
		l.earlySeq++
	}
	if err == nil && it.resumed {
		// The resumed moves' deletes are written (readable): listings need
		// not wait for the loop any more (awaitResume).
		l.resuming.Store(false)
	}
	if err == nil {
		// Written: the answers that need not wait for the sync go now.
		for i := range it.early {
			it.early[i].send(nil)
		}
		it.early = nil
	}
	if err != nil {
		// Nothing of this batch was applied: rebuild the state its changes
		// were made to, then fail its requests (a retry waiting on a move
		// is answered once the reload has marked the moves to resume: see
		// awaitResume). Earlier batches still syncing are answered by the
		// syncer.
		// A waiting lease that completed first may have had its completes
		// in this batch: it is failed, never answered later as if they were
		// stored.
		l.cfg.Log.Error("write failed; reloading the queue from storage", "queue", l.name, "error", err)
		l.noteLostEarly()
		l.load()
		werr := unavailable(l.name, err)
		l.Loop.Waiters.FailCompleted(werr)
		l.finish(it, werr)
		return
	}
	if lazy {
		l.finish(it, nil) // nothing to answer
		return
	}
	if wait == nil && l.unsynced {
		wait = l.syncWait()
	}
	if wait != nil {
		l.unsynced = false
	}
	if wait == nil && l.pipe.idle() {
		l.pipe.durableID.Store(l.lastID)
		l.pipe.earlyDurable.Store(l.earlySeq)
		l.finish(it, nil)
		return
	}
	loopWork := it.wait || len(it.after) > 0 || len(it.deferrals) > 0
	c := &commit{wait: wait, replies: it.replies, lastID: l.lastID, early: l.earlySeq}
	if loopWork {
		c.notify = make(chan error, 1)
	}
	l.pipe.push(c)
	if !loopWork {
		l.sendDeadLetters(it.now)
		return
	}
	err = <-c.notify
	it.replies = nil // sent by the syncer
	if err != nil {
		l.syncFailed() // reload first, as above
	}
	l.finish(it, err)
}

// finish answers the iteration's requests and runs its after-durable work:
// err nil means the batch is durable, else it failed.
func (l *Logical) finish(it *iteration, err error) {
	for i := range it.early {
		it.early[i].send(err)
	}
	for i := range it.replies {
		it.replies[i].send(err)
	}
	for _, f := range it.after {
		f(err)
	}
	if err != nil {
		for _, d := range it.deferrals {
			d.r.Answer(err)
		}
		return
	}
	for _, d := range it.deferrals {
		dr := &deferredReply{n: len(d.items), r: d.r}
		for _, x := range d.items {
			l.deferred[x] = dr
		}
	}
	l.sendDeadLetters(it.now)
}

// syncFailed handles a failed sync: the syncer is failing every batch from
// the failed one on, so the loop's state, built on them, is rebuilt from
// storage, and the reset marker ends the failure.
func (l *Logical) syncFailed() {
	l.noteLostEarly()
	select {
	case <-l.pipe.failed:
	default:
	}
	l.cfg.Log.Error("sync failed; reloading the queue from storage", "queue", l.name)
	l.load()
	l.pipe.push(&commit{reset: true})
}

// AnswerDurable implements engine.DurableAnswerer: r is answered once every
// batch written so far is durable (at once when none is still syncing or
// unsynced), or with the failure of one of them. The loop calls it between
// iterations, so every id up to lastID is in a written batch.
func (l *Logical) AnswerDurable(r *engine.Request) {
	if l.pipe.idle() && !l.unsynced {
		r.Answer(nil)
		return
	}
	var wait func() error
	if l.unsynced {
		wait, l.unsynced = l.syncWait(), false
	}
	l.pipe.push(&commit{wait: wait, replies: []pendingReply{{r: r}}, lastID: l.lastID, early: l.earlySeq})
}

// syncer returns the store's store.Syncer, or nil: lazy batches
// (store.Batch.Lazy) are written only to a store that has one.
func (l *Logical) syncer() store.Syncer {
	s, _ := l.cfg.Store.(store.Syncer)
	return s
}

// syncWait returns a wait that syncs the store (store.Syncer), making the
// lazy batches applied before it durable.
func (l *Logical) syncWait() func() error {
	s := l.syncer()
	if s == nil {
		return nil
	}
	return func() error { return s.Sync(context.Background()) }
}

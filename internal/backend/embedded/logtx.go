package embedded

import (
	"context"
	"fmt"
	"time"

	"github.com/styxq/styx/internal/apierr"
	"github.com/styxq/styx/internal/engine"
	"github.com/styxq/styx/internal/queue"
)

// The logical queue's Tx (memory and Pebble): the engine's decisions are
// applied to the in-memory index at once and collected in one store.Batch,
// written by Commit. A failed write or sync makes the queue reload its
// index from storage (storage is the truth).

var (
	_ engine.Tx              = (*iteration)(nil)
	_ engine.DurableAnswerer = (*Logical)(nil)
)

// Info implements Tx.
func (it *iteration) Info() queue.QueueInfo { return it.l.info }

// view is the engine's Item of x, in partition p.
func view(p *partition, x *item) engine.Item {
	v := engine.Item{Partition: p.num, ID: x.id, Attempts: x.attempts, Expire: x.expire, HasHistory: x.hasErrs,
		DeadCopy: x.isDeadCopy()}
	if x.src != nil {
		v.Redrive = queue.RedriveTaskOf(x.src.key)
	}
	if x.state == stateLeased {
		v.Leased, v.LeaseDeadline = true, x.deadline
	}
	return v
}

// Due implements Tx from each partition's heaps.
func (it *iteration) Due() (leases, expired []engine.Item, err error) {
	for _, p := range it.l.parts {
		for x := p.timed.popDue(it.now); x != nil; x = p.timed.popDue(it.now) {
			if x.state == stateScheduled {
				p.setStateAt(x, stateReady, 0)
				continue
			}
			leases = append(leases, view(p, x))
		}
		for x := p.expiries.popDue(it.now); x != nil; x = p.expiries.popDue(it.now) {
			// A leased item dies of expiry when its lease ends.
			if x.state == stateReady || x.state == stateScheduled {
				expired = append(expired, view(p, x))
			}
		}
	}
	return leases, expired, nil
}

// own returns the record of v, which the engine had from this iteration
// (Due, Item): an error when it is gone (a contract violation, failing the
// iteration).
func (it *iteration) own(v engine.Item) (*partition, *item, error) {
	if v.Partition >= 0 && int(v.Partition) < len(it.l.parts) {
		p := it.l.parts[v.Partition]
		if x, ok := p.items[v.ID]; ok {
			return p, x, nil
		}
	}
	return nil, nil, fmt.Errorf("queue '%s': item %d of partition %d is not in the index", it.l.name, v.ID, v.Partition)
}

// Item implements Tx.
func (it *iteration) Item(n int32, id uint64) (engine.Item, bool) {
	if n < 0 || int(n) >= len(it.l.parts) {
		return engine.Item{}, false
	}
	p := it.l.parts[n]
	x, ok := p.items[id]
	if !ok {
		return engine.Item{}, false
	}
	return view(p, x), true
}

// Histories implements Tx: one read per partition.
func (it *iteration) Histories(xs []engine.Item) ([]queue.ItemErrors, error) {
	out := make([]queue.ItemErrors, len(xs))
	byPart := map[int32][]int{}
	for i, x := range xs {
		byPart[x.Partition] = append(byPart[x.Partition], i)
	}
	for n, idx := range byPart {
		ids := make([]uint64, len(idx))
		for k, i := range idx {
			_, x, err := it.own(xs[i])
			if err != nil {
				return nil, err
			}
			ids[k] = x.bodyID
		}
		_, errs, err := it.l.cfg.Store.ReadBodies(context.Background(), it.l.queueID, n, ids)
		if err != nil {
			return nil, fmt.Errorf("read errors: %w", err)
		}
		for k, i := range idx {
			out[i] = errs[k]
		}
	}
	return out, nil
}

// setHistory stores x's new history.
func (it *iteration) setHistory(p *partition, x *item, h *queue.ItemErrors) {
	if h != nil {
		it.batch.SetErrors(p.num, p.meta(x), *h)
		x.hasErrs = true
	}
}

// Requeue implements Tx: the item gets a new id at the tail of its
// partition, or is scheduled.
func (it *iteration) Requeue(v engine.Item, e queue.Ending, h *queue.ItemErrors, newID *uint64) error {
	l := it.l
	p, x, err := it.own(v)
	if err != nil {
		return err
	}
	it.setHistory(p, x, h)
	x.attempts = e.Attempts
	old := x.id
	p.rekey(x, l.allocID(it))
	l.moveToGroupTail(x)
	if e.At != 0 {
		p.setStateAt(x, stateScheduled, e.At)
	} else {
		p.setStateAt(x, stateReady, 0)
	}
	it.batch.Requeue(p.num, old, p.meta(x))
	if newID != nil {
		*newID = x.id
	}
	return nil
}

// Kill implements Tx: with a dead-letter queue the decision is recorded
// in the batch and the move starts once it is durable (ADR 0003); without
// one the item is dropped.
func (it *iteration) Kill(v engine.Item, reason string, h *queue.ItemErrors) (bool, error) {
	p, x, err := it.own(v)
	if err != nil {
		return false, err
	}
	it.setHistory(p, x, h)
	x.attempts = v.Attempts
	it.l.kill(it, p, x, reason)
	dying := x.state == stateDying && p.items[x.id] == x
	if dying && x.grouped {
		it.l.holdGroup(it, p, x, reason)
	}
	return dying, nil
}

// Complete implements Tx.
func (it *iteration) Complete(xs []engine.Item) error {
	for _, v := range xs {
		p, x, err := it.own(v)
		if err != nil {
			return err
		}
		it.l.removeItem(it, p, x)
	}
	return nil
}

// Requeued implements Tx from the partition's index of requeued items.
func (it *iteration) Requeued(n int32, first uint64) (engine.Item, bool, error) {
	if n < 0 || int(n) >= len(it.l.parts) {
		return engine.Item{}, false, nil
	}
	p := it.l.parts[n]
	x := p.requeuedItem(first)
	if x == nil || x.state != stateReady && x.state != stateScheduled {
		return engine.Item{}, false, nil
	}
	return view(p, x), true, nil
}

// Renew implements Tx: the lease's state record is rewritten whole, its
// holder with it (from holders: the engine's record of the lease).
func (it *iteration) Renew(xs []engine.Item, deadline int64, holders []queue.Holder) error {
	for i, v := range xs {
		p, x, err := it.own(v)
		if err != nil {
			return err
		}
		p.setDeadline(x, deadline)
		m := p.meta(x)
		if holders != nil {
			m.Holder = holders[i]
		}
		it.batch.Update(p.num, m)
	}
	return nil
}

// holderOf returns holder(k), the zero Holder when holder is nil.
func holderOf(holder func(k int) queue.Holder, k int) queue.Holder {
	if holder == nil {
		return queue.Holder{}
	}
	return holder(k)
}

// ReadyCounts implements Tx.
func (it *iteration) ReadyCounts() ([]int, error) { return it.l.readyCounts(), nil }

// Produce implements Tx. Items whose deduplication id the queue accepted
// within its window are acknowledged and not stored (dedup.go).
func (it *iteration) Produce(n int32, items []queue.ProduceItem, expire int64) error {
	l, p := it.l, it.l.parts[n]
	for _, pi := range l.dedup.deduplicate(it, items) {
		id := l.allocID(it)
		x := &item{id: id, bodyID: id, created: it.now, expire: expire, state: stateReady}
		if !pi.EnqueueAt.IsZero() {
			x.state, x.deadline = stateScheduled, queue.Nanos(pi.EnqueueAt)
		}
		p.addGrouped(x, pi.Group, id)
		body := &queue.ItemBody{Reference: pi.Reference, Kind: pi.Kind, Encoding: pi.Encoding, Payload: pi.Payload, Attributes: pi.Attributes}
		it.batch.InsertBody(p.num, p.meta(x), body)
		l.addBody(it, x.bodyID, body)
	}
	return nil
}

// Lease implements Tx: the oldest ready items of the partition (by the
// rules of their groups when the partition holds grouped items:
// itemgroups.go), with their bodies (from this iteration's inserts, the
// body cache or one read). With maxBytes, the items without a group are
// taken from the ready FIFO first, their bodies found, and only those
// within the bound leased; the others go back to the FIFO's head, as they
// were (leaseBytes). A grouped lease finds each item's body before it
// takes the item, and stops at the first that would pass the bound
// (leaseGrouped).
func (it *iteration) Lease(n int32, want int, maxBytes, deadline int64, holder func(k int) queue.Holder) ([]queue.LeasedItem, bool, bool, error) {
	l, p := it.l, it.l.parts[n]
	var items []*item
	var bodies map[uint64]*queue.ItemBody
	more := false
	if p.groups == nil {
		for len(items) < want {
			x := p.popReady()
			if x == nil {
				break
			}
			items = append(items, x)
		}
		var err error
		if bodies, err = l.leasedBodies(it, p, items); err != nil {
			return nil, false, false, fmt.Errorf("read bodies: %w", err)
		}
		if maxBytes > 0 {
			items, more = leaseBytes(p, items, bodies, maxBytes)
		}
		for k, x := range items {
			x.attempts++
			if x.firstLeased == 0 {
				x.firstLeased = it.now
			}
			p.setStateAt(x, stateLeased, deadline)
			m := x.baseMeta()
			m.Holder = holderOf(holder, k)
			it.batch.Lease(p.num, m)
		}
	} else {
		var err error
		if items, bodies, more, err = it.leaseGrouped(p, want, maxBytes, deadline, holder); err != nil {
			return nil, false, false, fmt.Errorf("read bodies: %w", err)
		}
	}
	out := make([]queue.LeasedItem, len(items))
	var newest uint64
	for i, x := range items {
		b := bodies[x.bodyID]
		out[i] = queue.LeasedItem{ID: x.id, FirstID: x.bodyID, Attempts: x.attempts, LeaseDeadline: time.Unix(0, deadline).UTC(),
			Encoding: b.Encoding, Kind: b.Kind, Reference: b.Reference, Payload: b.Payload, Attributes: b.Attributes,
			SourceQueue: b.SourceQueue, Group: p.groupOf(x), FirstLeasedAt: queue.FromNanos(x.firstLeased)}
		newest = max(newest, x.id)
	}
	return out, newest <= l.pipe.durableID.Load(), more, nil
}

// leaseBytes returns the first of items (popped from p's ready FIFO, still
// ready) whose payloads and attributes sum to at most maxBytes, the first
// whatever its size, and puts the others back at the FIFO's head in their
// order; more reports that some went back.
func leaseBytes(p *partition, items []*item, bodies map[uint64]*queue.ItemBody, maxBytes int64) ([]*item, bool) {
	var sum int64
	for i, x := range items {
		b := bodies[x.bodyID]
		sum += int64(len(b.Payload) + len(b.Attributes))
		if i > 0 && sum > maxBytes {
			back := make([]uint64, len(items)-i)
			for j, y := range items[i:] {
				back[j] = y.id
			}
			p.ready.unpop(back)
			return items[:i], true
		}
	}
	return items, false
}

// leaseGrouped leases up to want items of partition p, which holds grouped
// items, by the rules of their groups (Lease), and returns them with their
// bodies. With maxBytes (0: none) each item's body is found before the
// item is taken, and the lease stops before the first item that would take
// the items' payloads and attributes over maxBytes (the first is taken
// whatever its size; leaseItems leaves it as it was): more reports that it
// stopped so. Apart from Lease so that the closures' captures cost the
// leases of other partitions nothing.
func (it *iteration) leaseGrouped(p *partition, want int, maxBytes, deadline int64, holder func(k int) queue.Holder) ([]*item, map[uint64]*queue.ItemBody, bool, error) {
	var items []*item
	var fits func(*item) bool
	var sized map[uint64]*queue.ItemBody // the bodies fits found
	var sum int64
	var err error
	if maxBytes > 0 {
		sized = make(map[uint64]*queue.ItemBody, min(want, 64))
		fits = func(x *item) bool {
			var b *queue.ItemBody
			if b, err = it.l.bodyOf(it, p, x); err != nil {
				return false
			}
			size := int64(len(b.Payload) + len(b.Attributes))
			if len(items) > 0 && sum+size > maxBytes {
				return false
			}
			sized[x.bodyID] = b
			sum += size
			return true
		}
	}
	more := p.groups.leaseItems(p, want, fits, func(x *item) {
		x.attempts++
		if x.firstLeased == 0 {
			x.firstLeased = it.now
		}
		p.setStateAt(x, stateLeased, deadline)
		m := p.meta(x)
		m.Holder = holderOf(holder, len(items))
		it.batch.Lease(p.num, m)
		items = append(items, x)
	})
	if err != nil {
		return nil, nil, false, err
	}
	if fits != nil {
		return items, sized, more, nil
	}
	bodies, err := it.l.leasedBodies(it, p, items)
	return items, bodies, false, err
}

// Redrive implements Tx.
func (it *iteration) Redrive(n int32, items []queue.RedriveItem, expire int64) error {
	it.l.takeRedriven(it, it.l.parts[n], items, expire)
	return nil
}

// Held implements engine.Tx from the source keys the queue holds (bodies
// from this iteration's inserts, or one read).
func (it *iteration) Held(n int32, keys []string) (map[string]queue.Item, error) {
	l := it.l
	var xs []*item
	var read []uint64
	for _, k := range keys {
		if x := l.sourceKeys[k]; x != nil {
			xs = append(xs, x)
			if it.fresh[x.bodyID] == nil {
				read = append(read, x.bodyID)
			}
		}
	}
	stored := make(map[uint64]queue.Item, len(read))
	if len(read) > 0 {
		bodies, errs, err := l.cfg.Store.ReadBodies(context.Background(), l.queueID, n, read)
		if err != nil {
			return nil, fmt.Errorf("read bodies: %w", err)
		}
		for i, id := range read {
			stored[id] = queue.Item{Body: bodies[i], Errors: errs[i]}
		}
	}
	out := make(map[string]queue.Item, len(xs))
	for _, x := range xs {
		h, ok := stored[x.bodyID]
		if !ok { // inserted earlier in this iteration
			h = queue.Item{Body: *it.fresh[x.bodyID]}
		}
		h.Partition, h.Meta = n, l.partOf(x, n).meta(x)
		out[x.src.key] = h
	}
	return out, nil
}

// Import implements engine.Tx.
func (it *iteration) Import(n int32, items []queue.Item) ([]queue.Item, error) {
	l, p := it.l, it.l.parts[n]
	out := make([]queue.Item, len(items))
	for i, si := range items {
		id := l.allocID(it)
		m := si.Meta
		x := &item{id: id, bodyID: id, created: queue.Nanos(m.CreatedAt), expire: queue.Nanos(m.ExpireDeadline),
			attempts: m.Attempts, state: stateReady, hasErrs: !si.Errors.IsZero(), src: newSource(m.SourceKey)}
		switch {
		case m.Leased:
			x.state, x.deadline = stateLeased, queue.Nanos(m.LeaseDeadline)
		case !m.EnqueueAt.IsZero():
			x.state, x.deadline = stateScheduled, queue.Nanos(m.EnqueueAt)
		}
		p.addGrouped(x, m.Group, id)
		if x.src != nil {
			l.setSourceKey(m.SourceKey, x)
		}
		body := si.Body
		meta := p.meta(x)
		it.batch.Insert(p.num, meta, body, si.Errors)
		l.addBody(it, x.bodyID, &body)
		out[i] = queue.Item{Partition: p.num, Meta: meta, Body: body, Errors: si.Errors}
	}
	return out, nil
}

// Commit implements Tx: the replies join the iteration's, and the batch is
// written (commit).
func (it *iteration) Commit(replies []engine.Reply, err error) {
	cfg := &it.l.cfg
	for _, r := range replies {
		var moving []*item
		for _, v := range r.Moving {
			// A later request of the iteration may have deleted it.
			if _, x, err := it.own(v); err == nil && x.state == stateDying {
				moving = append(moving, x)
			}
		}
		switch {
		case len(moving) > 0 && r.Err == nil:
			it.deferrals = append(it.deferrals, deferral{r: r.R, items: moving})
		case r.Err == nil && answersEarly(cfg, r.Mode):
			it.early = append(it.early, pendingReply{r: r.R})
		case r.Err == nil && r.Mode == engine.DurableItems && it.l.leasesEarly(r.R, it.now):
			it.early = append(it.early, pendingReply{r: r.R})
			it.earlyLease = true
		default:
			it.replies = append(it.replies, pendingReply{r: r.R, err: r.Err})
		}
	}
	if err != nil && it.err == nil {
		it.err = err
	}
	if it.err != nil {
		it.l.Loop.Waiters.Fail(unavailable(it.l.name, it.err))
	}
	it.l.commit(it)
}

// answersEarly reports whether a reply of mode leaves once its batch is
// written, before its sync: Undoable ones unless cfg.SyncCompletes (ADR
// 0033), and every one but Durable under cfg.ConsumeBeforeSync (ADR 0013).
func answersEarly(cfg *Config, mode engine.ReplyMode) bool {
	return cfg.ConsumeBeforeSync && mode != engine.Durable || mode == engine.Undoable && !cfg.SyncCompletes
}

// Delete implements Tx.
func (it *iteration) Delete(refs []queue.ItemRef, exceptLeased bool) (int, error) {
	n := 0
	for _, ref := range refs {
		p := it.l.parts[ref.Partition]
		if x, ok := p.items[ref.ID]; ok && !(exceptLeased && x.state == stateLeased) {
			it.l.removeItem(it, p, x)
			n++
		}
	}
	return n, nil
}

// Clear implements Tx.
func (it *iteration) Clear(c queue.ClearParams) error {
	it.l.clearItems(it, c)
	return nil
}

// Edit implements Tx.
func (it *iteration) Edit(ref queue.ItemRef, edit func(*queue.Item) error) (queue.Item, error) {
	return it.l.editItem(it, ref, edit)
}

// Stats implements Tx from the counts the loop keeps (stats).
func (it *iteration) Stats() (queue.Stats, error) { return it.l.stats(it.now), nil }

// Scheduled implements Tx from the partition's index of scheduled ids
// (scheduledItems).
func (it *iteration) Scheduled(p queue.ListParams) ([]queue.Item, error) {
	return it.l.scheduledItems(it, p)
}

// Reload implements Tx: the load runs after the iteration's batch (its
// pending writes would be lost by a load before it).
func (it *iteration) Reload(done func(error)) {
	l := it.l
	it.after = append(it.after, func(err error) {
		if err == nil {
			l.load()
			err = l.loadErr
		}
		done(err)
	})
}

// The logical queue's housekeeping (engine.Housekeeping): each runs in the
// iteration Begin began (Logical.cur).

// Run implements engine.Housekeeping.
func (op *gaugeOp) Run(now int64, _ *engine.Request) (bool, error) {
	op.out = op.l.gauges(now)
	return false, nil
}

// Run implements engine.Housekeeping: nothing; Begin did the work.
func (op *resumeOp) Run(int64, *engine.Request) (bool, error) {
	return false, nil
}

// Run implements engine.Housekeeping: this (dead-letter) queue takes the
// items.
func (op *deadLetterOp) Run(int64, *engine.Request) (bool, error) {
	op.to.takeDead(op.to.cur, op)
	return false, nil
}

// editItem runs a dead.edit (Tx.Edit): it reads the item's body and
// history (this iteration's, the body cache's, or storage's), lets op.Edit
// change them, and writes both.
func (l *Logical) editItem(it *iteration, ref queue.ItemRef, edit func(*queue.Item) error) (queue.Item, error) {
	p, err := l.partition(ref.Partition)
	if err != nil {
		return queue.Item{}, err
	}
	x, ok := p.items[ref.ID]
	if !ok {
		return queue.Item{}, apierr.New(apierr.NotFound, "no such item; '%s' is not in partition %d of queue '%s'",
			queue.FormatID(ref.ID), ref.Partition, l.name)
	}
	if x.state == stateLeased {
		return queue.Item{}, apierr.New(apierr.Conflict, "item is leased; a consumer of queue '%s' holds '%s'", l.name, queue.FormatID(x.id))
	}
	bodies, errs, err := l.cfg.Store.ReadBodies(context.Background(), l.queueID, p.num, []uint64{x.bodyID})
	if err != nil {
		return queue.Item{}, fmt.Errorf("read item %d: %w", x.id, err)
	}
	cur := queue.Item{Partition: p.num, Meta: p.meta(x), Body: bodies[0], Errors: errs[0]}
	if b := it.fresh[x.bodyID]; b != nil {
		cur.Body = *b
	} else if b := l.bodies.get(x.bodyID); b != nil {
		cur.Body = *b
	}
	if err := edit(&cur); err != nil {
		return queue.Item{}, err
	}
	it.batch.SetBody(p.num, p.meta(x), cur.Body)
	it.batch.SetErrors(p.num, p.meta(x), cur.Errors)
	x.hasErrs = true
	l.bodies.drop(x.bodyID)
	if it.fresh[x.bodyID] != nil {
		b := cur.Body
		it.fresh[x.bodyID] = &b
	}
	return cur, nil
}

// Lazy implements engine.Lazy: the batch is applied without a sync of its
// own when nothing else in it needs one (Logical.commit).
func (it *iteration) Lazy() { it.lazy = true }

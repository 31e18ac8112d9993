package embedded

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/styxq/styx/internal/engine"
	"github.com/styxq/styx/internal/queue"
)

// Held groups (queue.GroupHold; rule 5 of queue/itemgroups.go). When an
// item of a group dies in an ordered queue with GroupHold and a dead-letter
// queue, the loop holds the group in the item's partition: a record
// (queue.HeldGroup) in the batch that records the dead decision (store
// OpHoldGroup), and the group's itemGroup.held, which keeps it out of the
// leasable heap. The group is released:
//
//   - by a redriven item of the group arriving in the partition
//     (takeRedriven): it takes the dead item's GroupSeq, and the release is
//     in the batch that inserts it;
//   - once the dead-letter queue the dead item went to (HeldGroup.DeadQueue,
//     not the queue's dead_queue of the moment) no longer holds it (deleted,
//     expired, redriven elsewhere, or the queue deleted): the Manager's
//     held-group checker
//     (checkHeld), a goroutine of its own, asks each queue holding groups
//     for the holds whose dead item has left it (its move is done), asks
//     the dead-letter queue's loop which of their dead keys it still
//     holds, and sends the source's loop a release of the others, each
//     checked again there against the hold's dead key. No loop ever waits
//     on another (a dead-letter queue's loop may be calling its source's).
//   - by a clear of the queue's ready items or of all of them, and with the
//     queue when it is deleted (its records are in its key range).

// heldCheckInterval is how often the Manager checks the held groups of its
// queues for release.
const heldCheckInterval = time.Second

// heldKey names a held group: its partition and group.
type heldKey struct {
	partition int32
	group     string
}

// holdsGroups reports whether a dead item holds its group in this queue:
// ordered, GroupHold, with a dead-letter queue.
func (l *Logical) holdsGroups() bool {
	return l.info.Ordered && l.info.GroupDeadPolicy == queue.GroupHold && l.info.DeadQueue != ""
}

// holdGroup holds the group of x, which has just died for reason in
// partition p (Tx.Kill), when the queue's policy says so and the group is
// not held already (the first dead item holds it).
func (l *Logical) holdGroup(it *iteration, p *partition, x *item, reason string) {
	if !l.holdsGroups() {
		return
	}
	e := p.groups.entries[x]
	if e.g.held != nil {
		return
	}
	h := &heldGroup{HeldGroup: queue.HeldGroup{Partition: p.num, Group: e.g.name, DeadKey: queue.SourceKey(reason, l.name, x.id),
		DeadQueue: l.info.DeadQueue, Seq: e.seq, HeldAt: it.now}, deadID: x.id}
	l.held[heldKey{p.num, e.g.name}] = h
	l.nHeld.Store(int64(len(l.held)))
	e.g.held = h
	p.groups.fix(e.g)
	it.batch.HoldGroup(h.HeldGroup)
}

// release releases held group h, in the iteration's batch.
func (l *Logical) release(it *iteration, h *heldGroup) {
	k := heldKey{h.Partition, h.Group}
	if l.held[k] != h {
		return
	}
	delete(l.held, k)
	l.nHeld.Store(int64(len(l.held)))
	if p := l.parts[h.Partition]; p.groups != nil {
		if g := p.groups.byName[h.Group]; g != nil && g.held == h {
			g.held = nil
			p.groups.fix(g)
			p.groups.drop(g)
			p.dropIndex()
		}
	}
	it.batch.ReleaseGroup(h.Partition, h.Group)
}

// loadHeld reads the queue's held groups and holds them in parts.
func (l *Logical) loadHeld(ctx context.Context, parts []*partition) (map[heldKey]*heldGroup, error) {
	held := make(map[heldKey]*heldGroup)
	err := l.cfg.Store.LoadHeldGroups(ctx, l.queueID, func(hg queue.HeldGroup) error {
		if hg.Partition < 0 || int(hg.Partition) >= len(parts) {
			return nil // a partition the queue no longer has
		}
		h := &heldGroup{HeldGroup: hg, deadID: deadKeyID(hg.DeadKey)}
		held[heldKey{hg.Partition, hg.Group}] = h
		gi := parts[hg.Partition].index()
		g := gi.group(hg.Group)
		g.held = h
		if gi.ordered {
			gi.fix(g)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("held groups: %w", err)
	}
	return held, nil
}

// setHeld makes held the queue's held groups (load).
func (l *Logical) setHeld(held map[heldKey]*heldGroup) {
	l.held = held
	l.nHeld.Store(int64(len(held)))
}

// deadKeyID returns the id of the dead item in the source key k
// (queue.SourceKey), 0 when k does not end with one.
func deadKeyID(k string) uint64 {
	i := strings.LastIndexByte(k, '~')
	if i < 0 {
		return 0
	}
	id, err := queue.ParseID("dead key", k[i+1:])
	if err != nil {
		return 0
	}
	return id
}

// heldList returns the held groups, oldest first, at most
// queue.MaxHeldGroupsListed (queue.Stats).
func (l *Logical) heldList() []queue.HeldGroup {
	if len(l.held) == 0 {
		return nil
	}
	out := make([]queue.HeldGroup, 0, len(l.held))
	for _, h := range l.held {
		out = append(out, h.HeldGroup)
	}
	slices.SortFunc(out, func(a, b queue.HeldGroup) int {
		return cmp.Or(cmp.Compare(a.HeldAt, b.HeldAt), cmp.Compare(a.Partition, b.Partition), cmp.Compare(a.Group, b.Group))
	})
	return out[:min(len(out), queue.MaxHeldGroupsListed)]
}

// partOf returns the partition that holds x, looking in partition n first.
func (l *Logical) partOf(x *item, n int32) *partition {
	if n >= 0 && int(n) < len(l.parts) && l.parts[n].items[x.id] == x {
		return l.parts[n]
	}
	for _, p := range l.parts {
		if p.items[x.id] == x {
			return p
		}
	}
	return l.parts[n]
}

// regroup rebuilds the partition's group index for a queue whose Ordered
// changed (applyConfig): its entries, as load would find them.
func (p *partition) regroup(ordered bool) {
	p.ordered = ordered
	old := p.groups
	if old == nil {
		return
	}
	type grouped struct {
		x    *item
		name string
		seq  uint64
	}
	xs := make([]grouped, 0, len(old.entries))
	for x, e := range old.entries {
		xs = append(xs, grouped{x, e.g.name, e.seq})
	}
	slices.SortFunc(xs, func(a, b grouped) int { return cmp.Compare(a.x.id, b.x.id) })
	gi := newGroupIndex(ordered)
	gi.loading = true
	p.groups = gi
	for _, g := range xs {
		gi.enter(g.x, g.name, g.seq)
		gi.filed(p, g.x)
	}
	for _, g := range old.byName {
		if g.held != nil {
			gi.group(g.name).held = g.held
		}
	}
	gi.endLoad()
}

// The held-group requests the Manager's checker sends (engine.Housekeeping).
type (
	// heldListOp asks for the holds whose dead item has left the queue.
	heldListOp struct {
		engine.HousekeepingOp
		l   *Logical
		out []queue.HeldGroup
	}
	// holdsKeysOp asks a dead-letter queue which of keys it holds.
	holdsKeysOp struct {
		engine.HousekeepingOp
		l    *Logical
		keys []string
		out  []bool
	}
	// releaseOp releases the held groups of holds whose dead key is still
	// the one given.
	releaseOp struct {
		engine.HousekeepingOp
		l     *Logical
		holds []queue.HeldGroup
	}
)

// Run implements engine.Housekeeping.
func (op *heldListOp) Run(int64, *engine.Request) (bool, error) {
	l := op.l
	for _, h := range l.held {
		if h.deadID != 0 && l.parts[h.Partition].items[h.deadID] != nil {
			continue // its move to the dead-letter queue is not done
		}
		op.out = append(op.out, h.HeldGroup)
	}
	return false, nil
}

// Run implements engine.Housekeeping.
func (op *holdsKeysOp) Run(int64, *engine.Request) (bool, error) {
	l := op.l
	op.out = make([]bool, len(op.keys))
	for i, k := range op.keys {
		_, op.out[i] = l.sourceKeys[k]
	}
	return false, nil
}

// Run implements engine.Housekeeping.
func (op *releaseOp) Run(int64, *engine.Request) (bool, error) {
	l := op.l
	it := l.cur
	for _, hg := range op.holds {
		if h := l.held[heldKey{hg.Partition, hg.Group}]; h != nil && h.DeadKey == hg.DeadKey {
			l.release(it, h)
		}
	}
	return false, nil
}

// heldChecker is the Manager's goroutine that releases held groups whose
// dead item has left the dead-letter queue.
type heldChecker struct {
	stop chan struct{}
	done chan struct{}
	once sync.Once
}

// runHeldChecks checks, every heldCheckInterval until stopped, the queues
// that hold groups (checkHeld).
func (m *Manager) runHeldChecks() {
	defer close(m.checker.done)
	t := time.NewTicker(heldCheckInterval)
	defer t.Stop()
	for {
		select {
		case <-m.checker.stop:
			return
		case <-t.C:
			m.checkHeld()
		}
	}
}

// stopHeldChecks stops the checker and waits for it.
func (m *Manager) stopHeldChecks() {
	m.checker.once.Do(func() { close(m.checker.stop) })
	<-m.checker.done
}

// checkHeld releases, in each queue that holds groups, the groups whose
// dead item the dead-letter queue no longer holds: it asks the queue for
// its holds (heldListOp), the dead-letter queue for their keys
// (holdsKeysOp), and the queue to release the others (releaseOp). A queue
// that does not answer within a second is checked at the next round.
func (m *Manager) checkHeld() {
	m.mu.RLock()
	var ls []*Logical
	for _, l := range m.queues {
		if l.nHeld.Load() > 0 {
			ls = append(ls, l)
		}
	}
	m.mu.RUnlock()
	for _, l := range ls {
		if err := m.checkQueue(l); err != nil {
			m.cfg.Log.Debug("held groups: check failed; retried at the next round", "queue", l.name, "error", err)
		}
	}
}

func (m *Manager) checkQueue(l *Logical) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	list := &heldListOp{l: l}
	if err := l.call(ctx, list, true); err != nil {
		return err
	}
	if len(list.out) == 0 {
		return nil
	}
	byDLQ := map[string][]queue.HeldGroup{}
	for _, h := range list.out {
		byDLQ[h.DeadQueue] = append(byDLQ[h.DeadQueue], h)
	}
	var gone []queue.HeldGroup
	for name, hs := range byDLQ {
		d := m.lookup(name)
		if d == nil { // deleted: it holds nothing
			gone = append(gone, hs...)
			continue
		}
		keys := make([]string, len(hs))
		for i, h := range hs {
			keys[i] = h.DeadKey
		}
		q := &holdsKeysOp{l: d, keys: keys}
		if err := d.call(ctx, q, true); err != nil {
			return err
		}
		for i, held := range q.out {
			if !held {
				gone = append(gone, hs[i])
			}
		}
	}
	if len(gone) == 0 {
		return nil
	}
	return l.call(ctx, &releaseOp{l: l, holds: gone}, false)
}

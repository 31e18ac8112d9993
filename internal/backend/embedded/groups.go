package embedded

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/styxq/styx/internal/fingerprint"
	"github.com/styxq/styx/internal/queue"
	"github.com/styxq/styx/internal/store"
)

// Error groups (dead.groups): a dead-letter queue's logical queue keeps, in
// memory, its dead items grouped by source queue, dead reason and the
// fingerprint of their last error, each group with its count and its items
// in queue order, so dead.groups answers from counts, not by reading items.
// The groups are rebuilt at load from the items' metadata
// (queue.ItemMeta.Fingerprint); a dead item stored before fingerprints
// existed gets one derived from its stored last error, written back.

// groupKey identifies a group.
type groupKey struct {
	source, reason, fingerprint string
}

// group is an error group's bookkeeping. Owned by the loop.
type group struct {
	key   groupKey
	count int
	// head and tail are the group's first and last item (a list through
	// deadEntry.prev/next in queue order).
	head, tail *item
	// sample is the last error of some item of the group when known
	// (learnt from a move), "" otherwise.
	sample string
}

// deadEntry is a dead item's place in its group.
type deadEntry struct {
	g          *group
	prev, next *item
	partition  int32
	deadAt     int64
}

// addToGroup files dead item x of partition part, which died at deadAt with
// last-error fingerprint fp, at the tail of its group.
func (l *Logical) addToGroup(x *item, part int32, fp string, deadAt int64, sample string) {
	why, src := queue.ParseSourceKey(x.key())
	k := groupKey{source: src, reason: why, fingerprint: fp}
	g := l.groups[k]
	if g == nil {
		g = &group{key: k}
		l.groups[k] = g
	}
	if g.sample == "" {
		g.sample = sample
	}
	x.src.dead = &deadEntry{g: g, partition: part, deadAt: deadAt, prev: g.tail}
	if g.tail != nil {
		g.tail.src.dead.next = x
	} else {
		g.head = x
	}
	g.tail = x
	g.count++
}

// removeFromGroup takes x out of its group (if any); an empty group goes.
func (l *Logical) removeFromGroup(x *item) {
	d := x.deadEntry()
	if d == nil {
		return
	}
	g := d.g
	if d.prev != nil {
		d.prev.src.dead.next = d.next
	} else {
		g.head = d.next
	}
	if d.next != nil {
		d.next.src.dead.prev = d.prev
	} else {
		g.tail = d.prev
	}
	x.src.dead = nil
	if g.count--; g.count == 0 {
		delete(l.groups, g.key)
	}
}

// moveToGroupTail moves x to the end of its group, after a requeue gave it
// a new (larger) id.
func (l *Logical) moveToGroupTail(x *item) {
	if d := x.deadEntry(); d != nil && d.g.tail != x {
		g, part, at, fp := d.g, d.partition, d.deadAt, d.g.key.fingerprint
		sample := g.sample
		l.removeFromGroup(x)
		l.addToGroup(x, part, fp, at, sample)
	}
}

// loadedDead is a dead item found by load, in partition p, with what its
// metadata says.
type loadedDead struct {
	x      *item
	p      *partition
	fp     string
	deadAt int64
}

// loadGroups rebuilds the groups from the dead items load found. Dead items
// without a stored fingerprint (stored before fingerprints existed) get one
// from their stored last error; it is written back so the next load is
// quick.
func (l *Logical) loadGroups(ctx context.Context, dead []loadedDead) error {
	missing := map[int32][]int{}
	for i, d := range dead {
		if d.fp == "" {
			missing[d.p.num] = append(missing[d.p.num], i)
		}
	}
	for part, idx := range missing {
		for chunk := range slices.Chunk(idx, 1000) {
			ids := make([]uint64, len(chunk))
			for j, i := range chunk {
				ids[j] = dead[i].x.bodyID
			}
			bodies, errs, err := l.cfg.Store.ReadBodies(ctx, l.queueID, part, ids)
			if err != nil {
				return fmt.Errorf("fingerprint old dead items: %w", err)
			}
			batch := store.Batch{QueueID: l.queueID}
			for j, i := range chunk {
				d := &dead[i]
				d.fp = fingerprint.Of(errs[j].LastError)
				if d.deadAt == 0 {
					d.deadAt = queue.Nanos(bodies[j].DeadAt)
				}
				m := d.p.meta(d.x)
				m.Fingerprint = d.fp
				if m.DeadAt.IsZero() {
					m.DeadAt = queue.FromNanos(d.deadAt)
				}
				batch.Update(part, m)
			}
			if err := l.cfg.Store.Write(ctx, &batch); err != nil {
				return fmt.Errorf("fingerprint old dead items: %w", err)
			}
		}
	}
	slices.SortFunc(dead, func(a, b loadedDead) int { return cmp.Compare(a.x.id, b.x.id) })
	l.groups = make(map[groupKey]*group)
	for _, d := range dead {
		l.addToGroup(d.x, d.p.num, d.fp, d.deadAt, "")
	}
	return nil
}

// groupSample is where to read a group's sample error.
type groupSample struct {
	partition int32
	bodyID    uint64
}

type groupsResult struct {
	queue.ErrorGroups
	samples []groupSample
}

// listGroups selects the groups that match f, largest first, at most
// limit, from the loop's bookkeeping.
func (l *Logical) listGroups(f queue.ErrorGroupFilter, limit int) groupsResult {
	var sel []*group
	var res groupsResult
	for _, g := range l.groups {
		k := g.key
		if (f.SourceQueue != "" && k.source != f.SourceQueue) || (f.Reason != "" && k.reason != f.Reason) ||
			(f.Fingerprint != "" && k.fingerprint != f.Fingerprint) {
			continue
		}
		sel = append(sel, g)
		res.TotalItems += int64(g.count)
	}
	res.TotalGroups = len(sel)
	slices.SortFunc(sel, func(a, b *group) int {
		return cmp.Or(cmp.Compare(b.count, a.count), cmp.Compare(a.key.source, b.key.source),
			cmp.Compare(a.key.reason, b.key.reason), cmp.Compare(a.key.fingerprint, b.key.fingerprint))
	})
	for _, g := range sel[:min(len(sel), limit)] {
		res.ErrorGroups.Groups = append(res.ErrorGroups.Groups, queue.ErrorGroup{
			SourceQueue: g.key.source, Reason: g.key.reason, Fingerprint: g.key.fingerprint, SampleError: g.sample,
			Count: int64(g.count), FirstDeadAt: queue.FromNanos(g.head.src.dead.deadAt), LastDeadAt: queue.FromNanos(g.tail.src.dead.deadAt),
			SampleID: g.head.id,
		})
		res.samples = append(res.samples, groupSample{partition: g.head.src.dead.partition, bodyID: g.head.bodyID})
	}
	return res
}

// ErrorGroups implements Tx: the counts come from the loop's bookkeeping;
// the sample error of a group whose items all came from storage at load
// is read from storage (one read per partition of such groups).
func (it *iteration) ErrorGroups(f queue.ErrorGroupFilter, limit int) (queue.ErrorGroups, error) {
	l := it.l
	res := l.listGroups(f, limit)
	byPart := map[int32][]int{}
	for i, g := range res.ErrorGroups.Groups {
		if g.SampleError == "" {
			byPart[res.samples[i].partition] = append(byPart[res.samples[i].partition], i)
		}
	}
	for part, idx := range byPart {
		ids := make([]uint64, len(idx))
		for j, i := range idx {
			ids[j] = res.samples[i].bodyID
		}
		_, errs, err := l.cfg.Store.ReadBodies(context.Background(), l.queueID, part, ids)
		if err != nil {
			return queue.ErrorGroups{}, readErr(l.name, fmt.Errorf("read sample errors: %w", err))
		}
		for j, i := range idx {
			res.ErrorGroups.Groups[i].SampleError = errs[j].LastError
		}
	}
	return res.ErrorGroups, nil
}

package embedded

import (
	"context"
	"fmt"
	"iter"

	"github.com/styxq/styx/internal/engine"
	"github.com/styxq/styx/internal/queue"
)

// scanChunk is how many items Scan reads from each partition at a time:
// 256, fewer when there are many partitions, so a scan holds at most about
// 8192 items in memory.
func scanChunk(partitions int32) int {
	return max(16, min(256, 8192/int(max(partitions, 1))))
}

// scanBytes bounds the items (queue.ItemBytes) Scan reads ahead from all
// partitions together: 16 MiB, so it holds at most that much read ahead
// plus one item per partition, whatever their payloads.
const scanBytes = 16 << 20

// scanChunkBytes is the bound of one partition's chunk: scanBytes shared
// among the partitions.
func scanChunkBytes(partitions int32) int {
	return max(1, scanBytes/int(max(partitions, 1)))
}

// Scan implements engine.Reads (queue.Scan) straight from storage, holding
// at most one chunk per partition in memory at a time.
func (r reads) Scan(ctx context.Context, partitions int32, f *queue.DeadFilter, p queue.ScanParams) ([]queue.Item, uint64, error) {
	l := r.l
	return queue.Scan(f, p, func(ids []uint64) iter.Seq2[queue.Item, error] {
		return l.byID(ctx, partitions, ids)
	}, func(after uint64) iter.Seq2[queue.Item, error] {
		return l.inOrder(ctx, partitions, after)
	})
}

// inOrder yields the queue's items after an id in id order, merging its
// partitions' item lists a chunk at a time.
func (l *Logical) inOrder(ctx context.Context, partitions int32, after uint64) iter.Seq2[queue.Item, error] {
	return func(yield func(queue.Item, error) bool) {
		type cursor struct {
			buf   []queue.Item
			after uint64
			done  bool
		}
		chunk, chunkBytes := scanChunk(partitions), scanChunkBytes(partitions)
		cur := make([]cursor, partitions)
		for i := range cur {
			cur[i].after = after
		}
		for {
			// Pick the partition whose next item has the smallest id.
			best := -1
			for i := range cur {
				c := &cur[i]
				if len(c.buf) == 0 && !c.done {
					var err error
					if c.buf, err = l.cfg.Store.ListItemsWithin(ctx, l.queueID, int32(i), c.after, chunk, chunkBytes); err != nil {
						yield(queue.Item{}, readErr(l.name, fmt.Errorf("scan partition %d: %w", i, err)))
						return
					}
					c.done = len(c.buf) < chunk && itemsBytes(c.buf) < chunkBytes
					if len(c.buf) > 0 {
						c.after = c.buf[len(c.buf)-1].Meta.ID
					}
				}
				if len(c.buf) > 0 && (best < 0 || c.buf[0].Meta.ID < cur[best].buf[0].Meta.ID) {
					best = i
				}
			}
			if best < 0 {
				return // every partition is exhausted
			}
			next := cur[best].buf[0]
			cur[best].buf = cur[best].buf[1:]
			if !yield(next, nil) {
				return
			}
		}
	}
}

// itemsBytes is the total queue.ItemBytes of items.
func itemsBytes(items []queue.Item) int {
	n := 0
	for i := range items {
		n += queue.ItemBytes(&items[i])
	}
	return n
}

// byID yields, for each of ids in order, the item it names (its current
// id or its first id: queue.ItemMeta.HasID; ADR 0031) when there is one.
// The loop says where each id's item is now (resolveOp, one call for all
// of them: the store keys items by their current id only); an item
// requeued between that answer and its read is looked for again, up to
// lookUpTries times.
func (l *Logical) byID(ctx context.Context, partitions int32, ids []uint64) iter.Seq2[queue.Item, error] {
	return func(yield func(queue.Item, error) bool) {
		found := make(map[uint64]queue.Item, len(ids))
		left := ids
		for try := 0; try < lookUpTries && len(left) > 0; try++ {
			op := &resolveOp{l: l, ids: left}
			if err := l.call(ctx, op, true); err != nil {
				// Without the loop's answer (a store that refuses writes
				// still gives it; a stopped queue does not), each id is
				// looked up as a current id, in every partition.
				op.where = make([]engine.ItemKey, len(left))
				for i, id := range left {
					op.where[i] = engine.ItemKey{Partition: -1, ID: id}
				}
				try = lookUpTries
			}
			var again []uint64
			for i, id := range left {
				w := op.where[i]
				if w.ID == 0 {
					continue // the queue holds no such item
				}
				for part := range partitions {
					if w.Partition >= 0 && part != w.Partition {
						continue
					}
					got, err := l.cfg.Store.ListItems(ctx, l.queueID, part, w.ID-1, 1)
					if err != nil {
						yield(queue.Item{}, readErr(l.name, fmt.Errorf("look up %s: %w", queue.FormatID(id), err)))
						return
					}
					if len(got) == 1 && got[0].Meta.ID == w.ID && got[0].Meta.HasID(id) {
						found[id] = got[0]
						break
					}
				}
				if _, ok := found[id]; !ok && w.Partition >= 0 {
					again = append(again, id) // requeued since the loop answered
				}
			}
			left = again
		}
		for _, id := range ids {
			if it, ok := found[id]; ok && !yield(it, nil) {
				return
			}
		}
	}
}

// lookUpTries bounds how often byID asks the loop where items are.
const lookUpTries = 3

// resolveOp asks the loop where the items ids name are (Logical.byID):
// where[i] is the partition and current id of ids[i]'s item, zero when
// the queue holds none.
type resolveOp struct {
	engine.HousekeepingOp
	l     *Logical
	ids   []uint64
	where []engine.ItemKey
}

// Run implements engine.Housekeeping: for each id, the item whose current
// id it is, or the requeued item that entered its partition under it
// (requeuedItem).
func (op *resolveOp) Run(int64, *engine.Request) (bool, error) {
	op.where = make([]engine.ItemKey, len(op.ids))
	for i, id := range op.ids {
		for _, p := range op.l.parts {
			x := p.items[id]
			if x == nil {
				x = p.requeuedItem(id)
			}
			if x != nil {
				op.where[i] = engine.ItemKey{Partition: p.num, ID: x.id}
				break
			}
		}
	}
	return false, nil
}

// takeRedriven inserts redriven items into partition p (Tx.Redrive). The
// copy of the dead item that holds its group (GroupHold; RedriveItem.DeadKey
// is the hold's DeadKey) takes the dead item's GroupSeq, so that it is its
// group's head, and releases the group in the same batch; another redriven
// item of a held group joins its end.
func (l *Logical) takeRedriven(it *iteration, p *partition, items []queue.RedriveItem, expire int64) {
	for _, ri := range items {
		if l.duplicate(ri.SourceKey, it.now) {
			continue // a copy from an earlier run of the redrive's step
		}
		id := l.allocID(it)
		x := &item{id: id, bodyID: id, created: it.now, expire: expire, state: stateReady, src: newSource(ri.SourceKey)}
		var h *heldGroup // the group's hold, which the redriven item releases
		if ri.Group != "" {
			if h = l.held[heldKey{p.num, ri.Group}]; h != nil && h.DeadKey != ri.DeadKey {
				h = nil // not the dead item that holds the group
			}
		}
		seq := id
		if h != nil {
			seq = h.Seq // its group's head again
		}
		p.addGrouped(x, ri.Group, seq)
		if h != nil {
			l.release(it, h)
		}
		l.setSourceKey(ri.SourceKey, x)
		body := ri.Body
		it.batch.Insert(p.num, p.meta(x), body, ri.Errors)
		x.hasErrs = !ri.Errors.IsZero()
		l.addBody(it, x.bodyID, &body)
	}
}

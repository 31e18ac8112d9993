package embedded

import (
	"context"
	"fmt"
	"slices"

	"github.com/styxq/styx/internal/queue"
	"github.com/styxq/styx/internal/store"
)

// scanChunk is how many items Scan reads from each partition at a time:
// 256, fewer when there are many partitions, so a scan holds at most about
// 8192 items (and their payloads) in memory.
func scanChunk(partitions int32) int {
	return max(16, min(256, 8192/int(max(partitions, 1))))
}

// Scan reads the items of a queue in id order (oldest first) across all its
// partitions, straight from storage, and returns up to p.Limit that match f.
// next is the id to pass as After to continue, 0 when the queue has no more
// items. It holds at most one chunk per partition in memory at a time.
func (l *Logical) Scan(ctx context.Context, partitions int32, f *queue.DeadFilter, p queue.ScanParams) (items []store.Item, next uint64, err error) {
	if p.MaxScanned <= 0 {
		p.MaxScanned = 10_000
	}
	if len(f.IDs) > 0 {
		return l.scanIDs(ctx, partitions, f, p)
	}
	type cursor struct {
		buf   []store.Item
		after uint64
		done  bool
	}
	chunk := scanChunk(partitions)
	cur := make([]cursor, partitions)
	for i := range cur {
		cur[i].after = p.After
	}
	scanned := 0
	last := p.After
	for len(items) < p.Limit && scanned < p.MaxScanned {
		// Pick the partition whose next item has the smallest id.
		best := -1
		for i := range cur {
			c := &cur[i]
			if len(c.buf) == 0 && !c.done {
				c.buf, err = l.cfg.Store.ListItems(ctx, l.queueID, int32(i), c.after, chunk)
				if err != nil {
					return nil, 0, readErr(l.name, fmt.Errorf("scan partition %d: %w", i, err))
				}
				if len(c.buf) < chunk {
					c.done = true
				}
				if len(c.buf) > 0 {
					c.after = c.buf[len(c.buf)-1].Meta.ID
				}
			}
			if len(c.buf) > 0 && (best < 0 || c.buf[0].Meta.ID < cur[best].buf[0].Meta.ID) {
				best = i
			}
		}
		if best < 0 {
			return items, 0, nil // every partition is exhausted
		}
		it := cur[best].buf[0]
		cur[best].buf = cur[best].buf[1:]
		scanned++
		last = it.Meta.ID
		if f.Match(&it) {
			items = append(items, it)
		}
	}
	return items, last, nil
}

// scanIDs is Scan for a filter with ids: it looks each id up in every
// partition instead of reading the queue in order.
func (l *Logical) scanIDs(ctx context.Context, partitions int32, f *queue.DeadFilter, p queue.ScanParams) ([]store.Item, uint64, error) {
	ids := slices.Sorted(slices.Values(f.IDs))
	var items []store.Item
	for i, id := range ids {
		if id <= p.After || id == 0 {
			continue
		}
		if len(items) == p.Limit {
			return items, ids[i-1], nil
		}
		for part := range partitions {
			got, err := l.cfg.Store.ListItems(ctx, l.queueID, part, id-1, 1)
			if err != nil {
				return nil, 0, readErr(l.name, fmt.Errorf("look up %s: %w", queue.FormatID(id), err))
			}
			if len(got) == 1 && got[0].Meta.ID == id {
				if f.Match(&got[0]) {
					items = append(items, got[0])
				}
				break
			}
		}
	}
	return items, 0, nil
}

// takeRedriven inserts redriven items into partition p (Tx.Redrive).
func (l *Logical) takeRedriven(it *iteration, p *partition, items []queue.RedriveItem) {
	for _, ri := range items {
		if _, dup := l.sourceKeys[ri.SourceKey]; dup {
			continue
		}
		id := l.allocID(it)
		x := &item{id: id, bodyID: id, created: it.now, state: stateReady, src: newSource(ri.SourceKey)}
		if l.info.ExpireTimeout > 0 {
			x.expire = it.now + int64(l.info.ExpireTimeout)
		}
		p.add(x)
		l.sourceKeys[ri.SourceKey] = x
		body := store.ItemBody{
			Reference: ri.Body.Reference, Kind: ri.Body.Kind, Encoding: ri.Body.Encoding, Payload: ri.Body.Payload,
			RedriveCount: ri.Body.RedriveCount + 1,
		}
		it.batch.Insert(p.num, x.meta(), body, ri.Errors)
		x.hasErrs = !ri.Errors.IsZero()
		l.addBody(it, x.bodyID, &body)
	}
}

package embedded

import (
	"cmp"
	"context"
	"slices"

	"github.com/styxq/styx/internal/queue"
)

// dedupIDs is a logical queue's record of the deduplication ids it accepted
// within their window (queue.Deduplicate): in memory for the produce path,
// and in the store (store.OpDedup, written in the batch of the items it
// accepted, so that one is never durable without the other), loaded by
// load. Owned by the loop goroutine.
type dedupIDs struct {
	// deadline is each id's window deadline, Unix nanoseconds.
	deadline map[string]int64
	// order lists the ids by deadline, soonest first; an entry whose
	// deadline differs from deadline[id] is stale (the id was accepted
	// again) and skipped.
	order []dedupEntry
}

type dedupEntry struct {
	id       string
	deadline int64
}

// maxForget bounds how many ended windows one iteration forgets, so that a
// burst of expiries spreads over several batches.
const maxForget = 1024

// loadDedup reads the queue's deduplication records from the store.
func (l *Logical) loadDedup(ctx context.Context) (dedupIDs, error) {
	d := dedupIDs{deadline: map[string]int64{}}
	err := l.cfg.Store.LoadDedup(ctx, l.queueID, func(id string, deadline int64) error {
		d.deadline[id] = deadline
		d.order = append(d.order, dedupEntry{id: id, deadline: deadline})
		return nil
	})
	slices.SortFunc(d.order, func(a, b dedupEntry) int { return cmp.Compare(a.deadline, b.deadline) })
	return d, err
}

// deduplicate returns the items of a produce that are to be stored (those
// without a deduplication id, or with one the queue has not accepted within
// its window, once per id) and records their ids in memory and in the
// iteration's batch. It first forgets ids whose window ended.
func (d *dedupIDs) deduplicate(it *iteration, items []queue.ProduceItem) []queue.ProduceItem {
	d.forget(it)
	kept := queue.Deduplicate(items, func(id string) bool { return d.deadline[id] > it.now })
	for _, pi := range kept {
		if pi.DeduplicationID == "" {
			continue
		}
		deadline := it.now + int64(it.l.info.Window())
		if d.deadline == nil {
			d.deadline = map[string]int64{}
		}
		d.deadline[pi.DeduplicationID] = deadline
		d.order = append(d.order, dedupEntry{id: pi.DeduplicationID, deadline: deadline})
		it.batch.Dedup(pi.DeduplicationID, deadline)
	}
	return kept
}

// forget deletes, from memory and (in the iteration's batch) from the
// store, up to maxForget ids whose window ended by it.now.
func (d *dedupIDs) forget(it *iteration) {
	n := 0
	for n < len(d.order) && n < maxForget && d.order[n].deadline <= it.now {
		if e := d.order[n]; d.deadline[e.id] == e.deadline {
			delete(d.deadline, e.id)
			it.batch.DedupForget(e.id)
		}
		n++
	}
	if n == 0 {
		return
	}
	d.order = d.order[n:]
	if cap(d.order) > 1024 && len(d.order) < cap(d.order)/4 {
		d.order = slices.Clone(d.order) // let the dropped head go
	}
}

package embedded

import (
	"cmp"
	"context"
	"slices"

	"github.com/styxq/styx/internal/engine"
	"github.com/styxq/styx/internal/queue"
)

// DefaultMaxDeduplicationIDs is Config.MaxDeduplicationIDs' default: the
// ids a queue holds within their window, at about 100 bytes of heap each
// (ids of 36 bytes; see BenchmarkDedupHeap), some 10 MiB per queue.
const DefaultMaxDeduplicationIDs = 100_000

// dedupIDs is a logical queue's record of the deduplication ids it accepted
// within their window (queue.Deduplicate): in memory for the produce path,
// and in the store (store.OpDedup, written in the batch of the items it
// accepted, so that one is never durable without the other), loaded by
// load. The ids held are bounded (Config.MaxDeduplicationIDs,
// AdmitDeduplication). Owned by the loop goroutine.
type dedupIDs struct {
	// deadline is each id's window deadline, Unix nanoseconds.
	deadline map[string]int64
	// deleted counts the ids deleted from deadline since it was last
	// rebuilt: a Go map keeps the room of its largest size and of the
	// entries it deleted (tombstones), so forget rebuilds it once it
	// deleted as many as it holds.
	deleted int
	// runs list the ids by deadline, soonest first within each run: an id
	// whose deadline is not before the last run's last joins that run, any
	// other (a window shortened by queues.update) starts a run. An entry
	// whose deadline differs from deadline[id] is stale (the id was
	// accepted again once its window ended) and skipped.
	runs []dedupRun
}

type dedupEntry struct {
	id       string
	deadline int64
}

// dedupRun is a first-in first-out list of entries in deadline order:
// e[head:] are live, e[:head] cleared (so that their ids can be freed).
type dedupRun struct {
	e    []dedupEntry
	head int
}

const (
	// maxForget bounds how many ended windows one iteration forgets, so
	// that a burst of expiries spreads over several batches; a produce
	// that needs the room forgets more (AdmitDeduplication).
	maxForget = 1024
	// maxDedupRuns bounds dedupIDs.runs: a run more merges them all.
	maxDedupRuns = 16
	// minShrink is the size (entries) below which neither the map nor a
	// run is rebuilt smaller.
	minShrink = 1024
)

// maxDeduplicationIDs is the limit of Config.MaxDeduplicationIDs; -1: none.
func (c Config) maxDeduplicationIDs() int {
	if c.MaxDeduplicationIDs == 0 {
		return DefaultMaxDeduplicationIDs
	}
	return c.MaxDeduplicationIDs
}

// loadDedup reads the queue's deduplication records from the store, all of
// them: one whose window ended is forgotten by the iterations that follow,
// and a queue that holds more than Config.MaxDeduplicationIDs (the limit
// was lowered) accepts no new id until enough windows end.
func (l *Logical) loadDedup(ctx context.Context) (dedupIDs, error) {
	d := dedupIDs{deadline: map[string]int64{}}
	var order []dedupEntry
	err := l.cfg.Store.LoadDedup(ctx, l.queueID, func(id string, deadline int64) error {
		d.deadline[id] = deadline
		order = append(order, dedupEntry{id: id, deadline: deadline})
		return nil
	})
	slices.SortFunc(order, func(a, b dedupEntry) int { return cmp.Compare(a.deadline, b.deadline) })
	if len(order) > 0 {
		d.runs = []dedupRun{{e: order}}
	}
	return d, err
}

// held returns how many ids the queue holds in memory, ended windows not
// yet forgotten included.
func (d *dedupIDs) held() int { return len(d.deadline) }

var _ engine.DeduplicationLimiter = (*iteration)(nil)

// AdmitDeduplication implements engine.DeduplicationLimiter: it refuses a
// produce whose ids the queue does not hold within their window would take
// the ids it holds over Config.MaxDeduplicationIDs, after forgetting as
// many ended windows as that needs.
func (it *iteration) AdmitDeduplication(items []queue.ProduceItem) error {
	limit := it.l.cfg.maxDeduplicationIDs()
	if limit < 0 {
		return nil
	}
	d := &it.l.dedup
	over := d.held() + d.growth(items) - limit
	if over <= 0 {
		return nil
	}
	d.forget(it, over)
	if d.held()+d.growth(items) <= limit {
		return nil
	}
	return queue.DeduplicationLimitError(it.l.name, limit, d.soonest())
}

// growth returns by how many ids items would grow the map: their distinct
// ids it does not hold.
func (d *dedupIDs) growth(items []queue.ProduceItem) int {
	n := 0
	var counted map[string]bool
	for _, pi := range items {
		id := pi.DeduplicationID
		if id == "" || counted[id] {
			continue
		}
		if _, ok := d.deadline[id]; ok {
			continue
		}
		if counted == nil {
			counted = map[string]bool{}
		}
		counted[id] = true
		n++
	}
	return n
}

// soonest returns the soonest deadline of the entries (0 when none).
func (d *dedupIDs) soonest() int64 {
	if i := d.first(); i >= 0 {
		r := d.runs[i]
		return r.e[r.head].deadline
	}
	return 0
}

// first returns the index of the run whose first entry ends soonest, or -1
// when there are none.
func (d *dedupIDs) first() int {
	best := -1
	for i, r := range d.runs {
		if best < 0 || r.e[r.head].deadline < d.runs[best].e[d.runs[best].head].deadline {
			best = i
		}
	}
	return best
}

// deduplicate returns the items of a produce that are to be stored (those
// without a deduplication id, or with one the queue has not accepted within
// its window, once per id) and records their ids in memory and in the
// iteration's batch. It first forgets ids whose window ended.
func (d *dedupIDs) deduplicate(it *iteration, items []queue.ProduceItem) []queue.ProduceItem {
	d.forget(it, maxForget)
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
		d.push(dedupEntry{id: pi.DeduplicationID, deadline: deadline})
		it.batch.Dedup(pi.DeduplicationID, deadline)
	}
	return kept
}

// push adds e after the entries.
func (d *dedupIDs) push(e dedupEntry) {
	n := len(d.runs)
	if n > 0 {
		if last := d.runs[n-1].e; e.deadline >= last[len(last)-1].deadline {
			d.runs[n-1].e = append(last, e)
			return
		}
	}
	if n == maxDedupRuns {
		d.merge()
		d.push(e)
		return
	}
	d.runs = append(d.runs, dedupRun{e: []dedupEntry{e}})
}

// merge makes the runs one.
func (d *dedupIDs) merge() {
	n := 0
	for _, r := range d.runs {
		n += len(r.e) - r.head
	}
	all := make([]dedupEntry, 0, n)
	for _, r := range d.runs {
		all = append(all, r.e[r.head:]...)
	}
	slices.SortStableFunc(all, func(a, b dedupEntry) int { return cmp.Compare(a.deadline, b.deadline) })
	d.runs = []dedupRun{{e: all}}
}

// forget deletes, from memory and (in the iteration's batch) from the
// store, up to n ids whose window ended by it.now, soonest first, and the
// stale entries it meets.
func (d *dedupIDs) forget(it *iteration, n int) {
	for n > 0 {
		i := d.first()
		if i < 0 {
			break
		}
		r := &d.runs[i]
		e := r.e[r.head]
		if e.deadline > it.now {
			break
		}
		r.e[r.head] = dedupEntry{}
		r.head++
		if d.deadline[e.id] == e.deadline {
			delete(d.deadline, e.id)
			it.batch.DedupForget(e.id)
			d.deleted++
			n--
		}
		switch live := len(r.e) - r.head; {
		case live == 0:
			d.runs = slices.Delete(d.runs, i, i+1)
		case cap(r.e) > minShrink && live < cap(r.e)/4:
			r.e, r.head = slices.Clone(r.e[r.head:]), 0 // a smaller array
		case r.head > minShrink && r.head > live/4:
			r.e = r.e[:copy(r.e, r.e[r.head:])] // reuse the array's room
			clear(r.e[len(r.e):cap(r.e)][:r.head])
			r.head = 0
		}
	}
	if d.deleted > minShrink && d.deleted >= len(d.deadline) {
		m := make(map[string]int64, len(d.deadline))
		for id, deadline := range d.deadline {
			m[id] = deadline
		}
		d.deadline, d.deleted = m, 0
	}
}

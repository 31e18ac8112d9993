package embedded

import "github.com/styxq/styx/internal/queue"

// countBefore counts the items of the index whose key is below limit and
// that keep accepts: the run from its head until a key reaches limit (the
// run is in key order), and the heap's items. It costs O(items counted +
// the run's empty slots among them + the heap), never the whole run.
func (x *keyIndex) countBefore(limit int64, keep func(*item) bool) int {
	n := 0
	for _, e := range x.run[x.head:] {
		if e == nil {
			continue
		}
		if x.key(e) >= limit {
			break
		}
		if keep(e) {
			n++
		}
	}
	for _, e := range x.heap.items {
		if x.key(e) < limit && keep(e) {
			n++
		}
	}
	return n
}

// expiringWithin counts the dead items of the queue (a dead-letter queue's;
// those deadCounts counts) that are not leased and whose expire deadline is
// before now + queue.ExpiringWindow: those its retention deletes within a
// day (issue 49; queue.Stats.ExpiringWithinDay). 0 at once when it holds
// none; else a walk of each partition's expiry index up to the cutoff
// (countBefore).
func (l *Logical) expiringWithin(now int64) int {
	held := 0
	for _, n := range l.dead.byReason {
		held += n
	}
	if held == 0 {
		return 0
	}
	limit := now + int64(queue.ExpiringWindow)
	dead := func(it *item) bool { return it.state != stateLeased && it.state != stateDying && it.isDeadCopy() }
	n := 0
	for _, p := range l.parts {
		n += p.expiries.countBefore(limit, dead)
	}
	return n
}

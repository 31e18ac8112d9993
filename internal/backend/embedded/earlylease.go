package embedded

import (
	"time"

	"github.com/styxq/styx/internal/engine"
	"github.com/styxq/styx/internal/store"
)

// A lease is answered before its batch's fsync when nothing a crash can
// then undo puts its items in two consumers' hands (ADR 0034). The store
// tells whether its last shutdown was clean (store.Recovery); after one
// that was not, every item a lease answered early may have dealt is held,
// leased to nobody, until every such lease's deadline has passed.
const (
	// EarlyLeaseWindow: a lease is answered early only when every item it
	// deals has an id within this much (of the id space, whose ids follow
	// the wall clock in nanoseconds: queue.NextID) of the queue's newest
	// id when its batch is written: 2 s. After an unclean shutdown the
	// items within it of the newest stored id are held.
	EarlyLeaseWindow = uint64(2 * time.Second)
	// EarlyLeaseTimeout bounds the lease deadline of a lease answered
	// early (its lease timeout or visibility, from the iteration's time):
	// 1 minute, the default lease_timeout. It is also how long the items
	// are held after an unclean shutdown, from when the queue loads.
	EarlyLeaseTimeout = time.Minute
)

// leasesEarly reports whether r, a lease reply of mode DurableItems (every
// item it deals stored by a durable batch), may leave once its batch is
// written: the store can tell an unclean shutdown, the partition is not
// ordered, and every item has no source, an id within EarlyLeaseWindow of
// the newest id (l.lastID, the one this batch stores) and a lease deadline
// within EarlyLeaseTimeout of now. A lease that completes first
// (complete_ids, r.Op) may leave too: a crash that undoes it undoes its
// completes with it, each as a complete answered before its fsync is
// undone (ADR 0033: back under the lease its consumer held).
//
// Why that is enough (ADR 0034): Pebble's log is durable in order, so if
// the store recovers a last id above this batch's, a batch written after
// it was durable, and this one too. Otherwise every item dealt has an id
// above the recovered last id less the window, and load holds it until
// EarlyLeaseTimeout after the queue loads, which is after the deadline of
// any lease answered before the crash.
func (l *Logical) leasesEarly(r *engine.Request, now int64) bool {
	if l.recovery == nil || r.Lease == nil || l.cfg.SyncLeases {
		return false
	}
	res := r.Lease.Result
	if int(res.Partition) >= len(l.parts) || l.parts[res.Partition].groups != nil || len(res.Items) == 0 {
		return false
	}
	limit := now + int64(EarlyLeaseTimeout)
	p := l.parts[res.Partition]
	for _, x := range res.Items {
		if x.ID+EarlyLeaseWindow <= l.lastID || x.LeaseDeadline.UnixNano() > limit {
			return false
		}
		// An item with a source (a dead item, a redriven or imported one)
		// is never held (hold): its lease waits.
		if y := p.items[x.ID]; y == nil || y.src != nil {
			return false
		}
	}
	return true
}

// noteLostEarly records, when a write or sync fails or the store reopens,
// that leases answered before their sync may not be durable: the reload
// after the store's reopen then holds the recent items (Begin).
func (l *Logical) noteLostEarly() {
	if l.earlySeq > l.pipe.earlyDurable.Load() {
		l.lostEarly = true
	}
}

// holdFrom returns the smallest id load holds (above it, items a lease
// answered early may have dealt) when the store's newest id is last.
func holdFrom(last uint64) uint64 {
	if last < EarlyLeaseWindow {
		return 0
	}
	return last - EarlyLeaseWindow
}

// hold makes x, loaded from storage while the queue holds recent items
// (until, Unix ns), leased to nobody until then if it has an id above
// from and could be leased at all before then: ready, scheduled before
// then, or leased with an earlier deadline; it reports whether it did.
// Its attempts stay as stored, so that its hold's end is not counted as an
// attempt; a lease's id still completes, renews or retries it. Dying items
// stay as they are.
func hold(x *item, from uint64, until int64) bool {
	// An item with a source is never leased early (leasesEarly): a redrive
	// deletes its dead items except those leased, after copying them.
	if x.id <= from || x.src != nil || x.state == stateDying || x.state == stateLeased && x.deadline >= until ||
		x.state == stateScheduled && x.deadline >= until {
		return false
	}
	x.state, x.deadline = stateLeased, until
	return true
}

// heldItem is an item a load held (hold), in its partition.
type heldItem struct {
	p *partition
	x *item
}

// storeRecovery is the store's store.Recovery (the Pebble store's, beneath
// a wrapper too), nil when it has none.
func storeRecovery(s store.Store) store.Recovery {
	r, _ := store.Find[store.Recovery](s)
	return r
}

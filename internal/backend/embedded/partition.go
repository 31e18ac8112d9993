package embedded

import (
	"slices"
	"time"

	"github.com/styxq/styx/internal/queue"
)

// state is where an item is in its life within one queue.
type state uint8

const (
	stateReady     state = iota + 1 // waiting in the ready FIFO
	stateLeased                     // handed to a consumer until its lease deadline
	stateScheduled                  // waiting for its enqueue time
	stateDying                      // dead, waiting for the dead-letter queue to confirm the move
)

// item is the in-memory state of one item: 80 bytes (an 80-byte
// allocation, as at 72 before firstLeased), plus its map entry and heap and
// FIFO entries. Times are Unix nanoseconds (0: unset). Owned by the logical
// queue's goroutine.
type item struct {
	id      uint64
	bodyID  uint64
	created int64
	expire  int64 // expire deadline
	// firstLeased is when the item was first leased in this queue
	// (queue.ItemMeta.FirstLeasedAt), kept through requeues.
	firstLeased int64
	// deadline is the lease deadline (leased), the enqueue time
	// (scheduled) or the time the item died (dying).
	deadline int64
	attempts int32
	// timedIdx, expireIdx and ageIdx are the item's places in its
	// partition's key indexes (keyIndex): a slot of the run (-3 and
	// below), a heap index, or -1 when absent.
	timedIdx  int32
	expireIdx int32
	ageIdx    int32
	state     state
	moving    bool // a dead-letter move is in flight (dying only)
	hasErrs   bool // the item may have stored attempt errors (ItemErrors)
	// failed says the item is counted in its partition's failures (file).
	failed bool
	// reason is the dead reason (dying only), as a code (reasonCode).
	reason uint8
	// grouped says the item has a group: its entry is in its partition's
	// groupIndex (itemgroups.go). A flag in the struct's padding, so that
	// the items without a group pay nothing for groups.
	grouped bool
	// src is set on dead items in a dead-letter queue, redriven items and
	// items imported with a source_id: their source key and error group.
	// A pointer, so that the other items (most of them) pay 8 bytes for it.
	src *itemSource
}

// itemSource is where an item came from.
type itemSource struct {
	// key is the item's source key (queue.ItemMeta.SourceKey).
	key string
	// dead is the item's place in its error group (groups.go); set on dead
	// items in a dead-letter queue only.
	dead *deadEntry
}

// newSource returns the source of an item with source key key, nil for
// none.
func newSource(key string) *itemSource {
	if key == "" {
		return nil
	}
	return &itemSource{key: key}
}

// key returns the item's source key, "" for none.
func (it *item) key() string {
	if it.src == nil {
		return ""
	}
	return it.src.key
}

// deadEntry returns the item's place in its error group, nil for none.
func (it *item) deadEntry() *deadEntry {
	if it.src == nil {
		return nil
	}
	return it.src.dead
}

// baseMeta returns the item's stored form without its group: use
// partition.meta, which adds it.
func (it *item) baseMeta() queue.ItemMeta {
	m := queue.ItemMeta{
		ID:             it.id,
		BodyID:         it.bodyID,
		Attempts:       it.attempts,
		FirstLeasedAt:  queue.FromNanos(it.firstLeased),
		ExpireDeadline: queue.FromNanos(it.expire),
		CreatedAt:      queue.FromNanos(it.created),
		SourceKey:      it.key(),
		DeadReason:     reasonName(it.reason),
	}
	if it.state == stateDying {
		m.DeadAt = queue.FromNanos(it.deadline)
	}
	if d := it.deadEntry(); d != nil {
		m.Fingerprint = d.g.key.fingerprint
		if m.DeadAt.IsZero() {
			m.DeadAt = queue.FromNanos(d.deadAt)
		}
	}
	switch it.state {
	case stateLeased:
		m.Leased = true
		m.LeaseDeadline = queue.FromNanos(it.deadline)
	case stateScheduled:
		m.EnqueueAt = queue.FromNanos(it.deadline)
	}
	return m
}

// itemFromMeta rebuilds an item loaded from storage at time now (nanos).
func itemFromMeta(m queue.ItemMeta, now int64) *item {
	x := &item{
		id:          m.ID,
		bodyID:      m.BodyID,
		created:     queue.Nanos(m.CreatedAt),
		expire:      queue.Nanos(m.ExpireDeadline),
		attempts:    m.Attempts,
		firstLeased: queue.Nanos(m.FirstLeasedAt),
		reason:      reasonCode(m.DeadReason),
		src:         newSource(m.SourceKey),
		hasErrs:     true, // unknown until read: assume so
	}
	switch {
	case m.DeadReason != "":
		x.state = stateDying
		x.deadline = queue.Nanos(m.DeadAt)
	case m.Leased:
		// A lease survives a restart: the item stays leased until its
		// deadline, even if that deadline has passed (the lifecycle then
		// ends it as an expired lease, counting the attempt).
		x.state = stateLeased
		x.deadline = queue.Nanos(m.LeaseDeadline)
	case !m.EnqueueAt.IsZero() && queue.Nanos(m.EnqueueAt) > now:
		x.state = stateScheduled
		x.deadline = queue.Nanos(m.EnqueueAt)
	default:
		x.state = stateReady
	}
	return x
}

// meta returns x's stored form, with its group.
func (p *partition) meta(x *item) queue.ItemMeta {
	m := x.baseMeta()
	if x.grouped {
		e := p.groups.entries[x]
		m.Group, m.GroupSeq = e.g.name, e.seq
	}
	return m
}

// partition is one partition's in-memory state. Owned by the logical
// queue's goroutine.
type partition struct {
	num   int32
	items map[uint64]*item
	// ready is the FIFO of ready item ids without a group (those with one
	// are in groups). Entries whose item has left the ready state are
	// skipped when popped (lazy deletion).
	ready fifo
	// ordered is the queue's QueueInfo.Ordered: how groups lease.
	ordered bool
	// groups indexes the items with a group and the held groups
	// (itemgroups.go); nil until the partition holds one.
	groups *groupIndex
	// timed orders leased items by lease deadline and scheduled items by
	// enqueue time; expiries orders every item by expire deadline. An item
	// leaves them the moment it changes state.
	timed    keyIndex
	expiries keyIndex
	// ages orders every item by creation time, so the oldest is known
	// without a scan (queue.stats, the styx_queue_oldest_item_age_seconds
	// gauge).
	ages keyIndex
	// scheduled lists the scheduled items by id (scheduled.list).
	scheduled schedIndex
	// requeued maps the id an item entered the partition under (its
	// bodyID) to its id now, for items requeued since (requeued.go); nil
	// until the first.
	requeued map[uint64]uint64
	// counts by state
	nReady, nLeased, nScheduled, nDying int
	// nFailures counts the items waiting for another attempt after a
	// failed one (item.failed); sumCreated sums every item's creation
	// time and sumLeased the lease deadlines of the leased items, so that
	// queue.stats' average ages need no scan (ADR 0024).
	nFailures  int
	sumCreated wideSum
	sumLeased  wideSum
}

func newPartition(num int32, ordered bool) *partition {
	return &partition{
		num:      num,
		ordered:  ordered,
		items:    make(map[uint64]*item),
		timed:    newKeyIndex(func(it *item) int64 { return it.deadline }, func(it *item) *int32 { return &it.timedIdx }),
		expiries: newKeyIndex(func(it *item) int64 { return it.expire }, func(it *item) *int32 { return &it.expireIdx }),
		ages:     newKeyIndex(func(it *item) int64 { return it.created }, func(it *item) *int32 { return &it.ageIdx }),
	}
}

// total is the number of items held, in every state.
func (p *partition) total() int { return len(p.items) }

// add files a new or reloaded item by its state.
func (p *partition) add(it *item) {
	p.items[it.id] = it
	p.link(it)
	it.timedIdx, it.expireIdx, it.ageIdx = -1, -1, -1
	p.ages.push(it)
	p.sumCreated.add(it.created)
	p.file(it)
	if it.expire != 0 && it.state != stateDying {
		p.expiries.push(it)
	}
}

// file enters the item in the structure of its state and counts it: by
// state, as a failure (an item that had an attempt and waits for another:
// neither leased, dying nor a dead item in a dead-letter queue), and in the
// lease deadlines' sum. Every count file adds, unfile takes back, so a
// field a count depends on (state, attempts, a leased item's deadline)
// changes only between the two (setStateAt, setDeadline).
func (p *partition) file(it *item) {
	switch it.state {
	case stateReady:
		if !it.grouped {
			p.ready.push(it.id)
		}
		p.nReady++
	case stateLeased:
		p.timed.push(it)
		p.nLeased++
		p.sumLeased.add(it.deadline)
	case stateScheduled:
		p.timed.push(it)
		p.nScheduled++
		p.scheduled.add(it.id)
	case stateDying:
		p.nDying++
	}
	it.failed = it.attempts > 0 && (it.state == stateReady || it.state == stateScheduled) && !it.isDeadCopy()
	if it.failed {
		p.nFailures++
	}
	if it.grouped {
		p.groups.filed(p, it)
	}
}

// unfile takes the item out of its state's structure and counts (a ready
// item's FIFO entry and a scheduled item's entry in scheduled go stale and
// are skipped later).
func (p *partition) unfile(it *item) {
	switch it.state {
	case stateReady:
		p.nReady--
	case stateLeased:
		p.nLeased--
		p.sumLeased.add(-it.deadline)
	case stateScheduled:
		p.nScheduled--
		p.scheduled.stale(p.nScheduled)
		if p.scheduled.due() {
			p.scheduled.compact(func(id uint64) bool { x := p.items[id]; return x != it && p.isScheduled(id) })
		}
	case stateDying:
		p.nDying--
	}
	if it.failed {
		p.nFailures--
		it.failed = false
	}
	p.timed.remove(it)
	if it.grouped {
		p.groups.unfiled(it)
	}
}

// setStateAt moves an item to another state with a new deadline (the lease
// deadline, the enqueue time or the time it died). A dying item leaves the
// expiry heap: it is already dead.
func (p *partition) setStateAt(it *item, s state, deadline int64) {
	p.unfile(it)
	it.state, it.deadline = s, deadline
	if s == stateDying {
		p.expiries.remove(it)
	}
	p.file(it)
}

// remove deletes the item from the partition.
func (p *partition) remove(it *item) {
	p.unfile(it)
	p.expiries.remove(it)
	p.ages.remove(it)
	p.sumCreated.add(-it.created)
	delete(p.items, it.id)
	if it.grouped {
		p.groups.removed(it)
		p.dropIndex()
	}
}

// setDeadline changes a leased or scheduled item's deadline and its place
// in the timed heap.
func (p *partition) setDeadline(it *item, deadline int64) {
	if it.state == stateLeased {
		p.sumLeased.add(deadline - it.deadline)
	}
	it.deadline = deadline
	if it.timedIdx != -1 {
		p.timed.fix(it)
	}
}

// rekey gives the item a new id (a requeue). Call it while the item is out
// of the ready FIFO (leased or scheduled), then setState.
func (p *partition) rekey(it *item, id uint64) {
	delete(p.items, it.id)
	it.id = id
	p.items[id] = it
	p.link(it)
	if it.grouped {
		p.groups.rekeyed(it)
	}
}

// isScheduled reports whether the item of id is scheduled.
func (p *partition) isScheduled(id uint64) bool {
	x := p.items[id]
	return x != nil && x.state == stateScheduled
}

// popReady returns the oldest ready item without a group, or nil.
func (p *partition) popReady() *item {
	for p.ready.len() > 0 {
		id := p.ready.pop()
		if it, ok := p.items[id]; ok && it.state == stateReady {
			return it
		}
	}
	return nil
}

// peekReady returns the oldest ready item without a group, or nil, and
// leaves it first in the FIFO.
func (p *partition) peekReady() *item {
	for p.ready.len() > 0 {
		if it, ok := p.items[p.ready.ids[p.ready.head]]; ok && it.state == stateReady {
			return it
		}
		p.ready.pop()
	}
	return nil
}

// leasable returns how many of the partition's items a lease may take now
// (Tx.ReadyCounts): its ready items, but on an ordered queue a group whose
// head is leasable counts once and the other ready items of groups not at
// all (they wait for their group).
func (p *partition) leasable() int {
	if g := p.groups; g != nil && g.ordered {
		return p.nReady - g.nReady + len(g.leasable)
	}
	return p.nReady
}

// nextTimed returns the earliest lease deadline or enqueue time, or 0.
func (p *partition) nextTimed() int64 { return p.timed.peek() }

// oldest returns the creation time of the partition's oldest item,
// truncated to the second, or 0 when it is empty (the gauge).
func (p *partition) oldest() int64 {
	c, ok := p.oldestCreated()
	if !ok || c == 0 {
		return 0
	}
	return c / int64(time.Second) * int64(time.Second)
}

// oldestCreated returns the creation time of the partition's oldest item,
// false when it is empty.
func (p *partition) oldestCreated() (int64, bool) {
	x := p.ages.min()
	if x == nil {
		return 0, false
	}
	return x.created, true
}

// nextExpiry returns the earliest expire deadline, or 0.
func (p *partition) nextExpiry() int64 { return p.expiries.peek() }

// itemHeap is a min-heap of items by key, which records each item's index
// (through idx) so that an item can be removed from the middle: a
// keyIndex's items that came out of order.
type itemHeap struct {
	items []*item
	key   func(*item) int64
	idx   func(*item) *int32
}

func (h *itemHeap) Len() int { return len(h.items) }
func (h *itemHeap) Less(i, j int) bool {
	a, b := h.key(h.items[i]), h.key(h.items[j])
	if a != b {
		return a < b
	}
	return h.items[i].id < h.items[j].id
}
func (h *itemHeap) Swap(i, j int) {
	h.items[i], h.items[j] = h.items[j], h.items[i]
	*h.idx(h.items[i]) = int32(i)
	*h.idx(h.items[j]) = int32(j)
}
func (h *itemHeap) Push(x any) {
	e := x.(*item)
	*h.idx(e) = int32(len(h.items))
	h.items = append(h.items, e)
}
func (h *itemHeap) Pop() any {
	n := len(h.items) - 1
	x := h.items[n]
	h.items[n] = nil
	h.items = h.items[:n]
	*h.idx(x) = -1
	return x
}

// fifo is a queue of ids on a slice that is compacted as it drains.
type fifo struct {
	ids  []uint64
	head int
}

func (f *fifo) len() int       { return len(f.ids) - f.head }
func (f *fifo) push(id uint64) { f.ids = append(f.ids, id) }

// unpop puts ids back at the head, in their order: the ids last popped,
// none pushed since.
func (f *fifo) unpop(ids []uint64) {
	if f.head >= len(ids) {
		f.head -= len(ids)
		copy(f.ids[f.head:], ids)
		return
	}
	f.ids = slices.Insert(f.ids[f.head:], 0, ids...)
	f.head = 0
}

func (f *fifo) pop() uint64 {
	id := f.ids[f.head]
	f.head++
	if f.head >= 1024 && f.head*2 >= len(f.ids) {
		n := copy(f.ids, f.ids[f.head:])
		f.ids = f.ids[:n]
		f.head = 0
	}
	return id
}

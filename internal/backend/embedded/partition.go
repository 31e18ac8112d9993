package embedded

import (
	"container/heap"
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

// item is the in-memory state of one item: about 90 bytes, plus its map
// entry and heap and FIFO entries. Times are Unix nanoseconds (0: unset).
// Owned by the logical queue's goroutine.
type item struct {
	id       uint64
	bodyID   uint64
	created  int64
	expire   int64 // expire deadline
	deadline int64 // lease deadline (leased) or enqueue time (scheduled)
	deadAt   int64 // set with deadReason
	attempts int32
	// timedIdx and expireIdx are the item's positions in its partition's
	// heaps, -1 when absent.
	timedIdx  int32
	expireIdx int32
	state     state
	moving    bool   // a dead-letter move is in flight (dying only)
	hasErrs   bool   // the item may have stored attempt errors (ItemErrors)
	reason    string // dead reason (dying only)
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

// meta returns the item's stored form.
func (it *item) meta() queue.ItemMeta {
	m := queue.ItemMeta{
		ID:             it.id,
		BodyID:         it.bodyID,
		Attempts:       it.attempts,
		ExpireDeadline: queue.FromNanos(it.expire),
		CreatedAt:      queue.FromNanos(it.created),
		SourceKey:      it.key(),
		DeadReason:     it.reason,
		DeadAt:         queue.FromNanos(it.deadAt),
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
	it := &item{
		id:       m.ID,
		bodyID:   m.BodyID,
		created:  queue.Nanos(m.CreatedAt),
		expire:   queue.Nanos(m.ExpireDeadline),
		deadAt:   queue.Nanos(m.DeadAt),
		attempts: m.Attempts,
		reason:   m.DeadReason,
		src:      newSource(m.SourceKey),
		hasErrs:  true, // unknown until read: assume so
	}
	switch {
	case m.DeadReason != "":
		it.state = stateDying
	case m.Leased:
		// A lease survives a restart: the item stays leased until its
		// deadline, even if that deadline has passed (the lifecycle then
		// ends it as an expired lease, counting the attempt).
		it.state = stateLeased
		it.deadline = queue.Nanos(m.LeaseDeadline)
	case !m.EnqueueAt.IsZero() && queue.Nanos(m.EnqueueAt) > now:
		it.state = stateScheduled
		it.deadline = queue.Nanos(m.EnqueueAt)
	default:
		it.state = stateReady
	}
	return it
}

// partition is one partition's in-memory state. Owned by the logical
// queue's goroutine.
type partition struct {
	num   int32
	items map[uint64]*item
	// ready is the FIFO of ready item ids. Entries whose item has left the
	// ready state are skipped when popped (lazy deletion).
	ready fifo
	// timed orders leased items by lease deadline and scheduled items by
	// enqueue time; expiries orders every item by expire deadline. Both are
	// indexed heaps: an item leaves them the moment it changes state.
	timed    itemHeap
	expiries itemHeap
	// ages counts items by creation second, so the oldest is known without
	// a scan (the styx_queue_oldest_item_age_seconds gauge).
	ages ageIndex
	// counts by state
	nReady, nLeased, nScheduled, nDying int
}

func newPartition(num int32) *partition {
	return &partition{
		num:      num,
		items:    make(map[uint64]*item),
		timed:    itemHeap{key: func(it *item) int64 { return it.deadline }, idx: func(it *item) *int32 { return &it.timedIdx }},
		expiries: itemHeap{key: func(it *item) int64 { return it.expire }, idx: func(it *item) *int32 { return &it.expireIdx }},
		ages:     ageIndex{counts: map[int64]int32{}},
	}
}

// total is the number of items held, in every state.
func (p *partition) total() int { return len(p.items) }

// add files a new or reloaded item by its state.
func (p *partition) add(it *item) {
	p.items[it.id] = it
	it.timedIdx, it.expireIdx = -1, -1
	p.ages.add(it.created)
	p.file(it)
	if it.expire != 0 && it.state != stateDying {
		heap.Push(&p.expiries, it)
	}
}

// file enters the item in the structure of its state and counts it.
func (p *partition) file(it *item) {
	switch it.state {
	case stateReady:
		p.ready.push(it.id)
		p.nReady++
	case stateLeased:
		heap.Push(&p.timed, it)
		p.nLeased++
	case stateScheduled:
		heap.Push(&p.timed, it)
		p.nScheduled++
	case stateDying:
		p.nDying++
	}
}

// unfile takes the item out of its state's structure and count (a ready
// item's FIFO entry goes stale and is skipped later).
func (p *partition) unfile(it *item) {
	switch it.state {
	case stateReady:
		p.nReady--
	case stateLeased:
		p.nLeased--
	case stateScheduled:
		p.nScheduled--
	case stateDying:
		p.nDying--
	}
	if it.timedIdx >= 0 {
		heap.Remove(&p.timed, int(it.timedIdx))
	}
}

// setState moves an item to another state. A dying item leaves the expiry
// heap: it is already dead.
func (p *partition) setState(it *item, s state) {
	p.unfile(it)
	it.state = s
	if s == stateDying && it.expireIdx >= 0 {
		heap.Remove(&p.expiries, int(it.expireIdx))
	}
	p.file(it)
}

// remove deletes the item from the partition.
func (p *partition) remove(it *item) {
	p.unfile(it)
	if it.expireIdx >= 0 {
		heap.Remove(&p.expiries, int(it.expireIdx))
	}
	p.ages.remove(it.created)
	delete(p.items, it.id)
}

// setDeadline changes a leased or scheduled item's deadline and its place
// in the timed heap.
func (p *partition) setDeadline(it *item, deadline int64) {
	it.deadline = deadline
	if it.timedIdx >= 0 {
		heap.Fix(&p.timed, int(it.timedIdx))
	}
}

// rekey gives the item a new id (a requeue). Call it while the item is out
// of the ready FIFO (leased or scheduled), then setState.
func (p *partition) rekey(it *item, id uint64) {
	delete(p.items, it.id)
	it.id = id
	p.items[id] = it
}

// popReady returns the oldest ready item, or nil.
func (p *partition) popReady() *item {
	for p.ready.len() > 0 {
		id := p.ready.pop()
		if it, ok := p.items[id]; ok && it.state == stateReady {
			return it
		}
	}
	return nil
}

// nextTimed returns the earliest lease deadline or enqueue time, or 0.
func (p *partition) nextTimed() int64 { return p.timed.peek() }

// oldest returns the creation time of the partition's oldest item,
// truncated to the second, or 0 when it is empty.
func (p *partition) oldest() int64 { return p.ages.oldest() }

// nextExpiry returns the earliest expire deadline, or 0.
func (p *partition) nextExpiry() int64 { return p.expiries.peek() }

// itemHeap is a min-heap of items by key, which records each item's index
// (through idx) so that an item can be removed from the middle.
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
	it := x.(*item)
	*h.idx(it) = int32(len(h.items))
	h.items = append(h.items, it)
}
func (h *itemHeap) Pop() any {
	n := len(h.items) - 1
	it := h.items[n]
	h.items[n] = nil
	h.items = h.items[:n]
	*h.idx(it) = -1
	return it
}

// peek returns the smallest key, or 0 when empty.
func (h *itemHeap) peek() int64 {
	if len(h.items) == 0 {
		return 0
	}
	return h.key(h.items[0])
}

// popDue removes and returns the top item if its key is at or before now.
func (h *itemHeap) popDue(now int64) *item {
	if len(h.items) == 0 || h.key(h.items[0]) > now {
		return nil
	}
	return heap.Pop(h).(*item)
}

// fifo is a queue of ids on a slice that is compacted as it drains.
type fifo struct {
	ids  []uint64
	head int
}

func (f *fifo) len() int       { return len(f.ids) - f.head }
func (f *fifo) push(id uint64) { f.ids = append(f.ids, id) }
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

// ageIndex counts items by creation second: O(1) per item added or removed
// (a map update; items mostly arrive in creation order, so the second is
// appended), and the oldest second with items is the first of keys.
type ageIndex struct {
	// counts holds the items per creation second (Unix seconds); a second
	// whose count fell to 0 stays until it reaches the front of keys.
	counts map[int64]int32
	// keys are the seconds of counts, ascending, from head.
	keys []int64
	head int
}

func (a *ageIndex) add(created int64) {
	sec := created / int64(time.Second)
	n, ok := a.counts[sec]
	a.counts[sec] = n + 1
	if ok {
		return
	}
	keys := a.keys[a.head:]
	if len(keys) == 0 || sec > keys[len(keys)-1] {
		a.keys = append(a.keys, sec)
		return
	}
	// An older item (imported, dead-lettered, loaded): insert in order.
	i, _ := slices.BinarySearch(keys, sec)
	a.keys = slices.Insert(a.keys, a.head+i, sec)
}

func (a *ageIndex) remove(created int64) {
	sec := created / int64(time.Second)
	if n := a.counts[sec]; n > 0 {
		a.counts[sec] = n - 1
	}
	a.trim()
}

// trim drops the empty seconds at the front.
func (a *ageIndex) trim() {
	for a.head < len(a.keys) && a.counts[a.keys[a.head]] == 0 {
		delete(a.counts, a.keys[a.head])
		a.head++
	}
	if a.head >= 1024 && a.head*2 >= len(a.keys) {
		n := copy(a.keys, a.keys[a.head:])
		a.keys = a.keys[:n]
		a.head = 0
	}
}

// oldest returns the earliest second with items, in Unix nanoseconds, or
// 0 when there are none.
func (a *ageIndex) oldest() int64 {
	a.trim()
	if a.head == len(a.keys) {
		return 0
	}
	return a.keys[a.head] * int64(time.Second)
}

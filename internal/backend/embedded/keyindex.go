package embedded

import "container/heap"

// keyIndex finds a partition's item of smallest key (a lease deadline, an
// expire deadline, a creation time) for keys that mostly arrive in
// increasing order. An item keyed no lower than the last one appended joins
// run, a FIFO kept in key order, in O(1); only an item that comes out of
// order (a scheduled item, an import, a lease of a shorter timeout) joins
// the heap. Leaving is O(1) from the run (the item's slot is emptied, and
// empty slots are dropped once they reach the head) and O(log n) from the
// heap.
//
// Items that come and go in order, a queue's common case, so never touch
// the heap: an itemHeap alone paid a sift down for every removal of its
// top, about 0.3 µs an item at a few thousand items (ADR 0024's amendment,
// docs/benchmarks.md).
//
// An item's place is its idx field: -1 when out, a heap index (>= 0), or
// its slot i of run encoded as -3-i. Empty slots behind a long-lived head
// are compacted away once they outnumber the live ones (plus 64), so run
// holds at most about twice its items, 8 bytes a slot as the heap's. Owned
// by the logical queue's goroutine.
type keyIndex struct {
	key func(*item) int64
	idx func(*item) *int32
	// run holds the in-order items from head on, nil where one left;
	// live counts the others, and last is the key of the last appended.
	run  []*item
	head int
	live int
	last int64
	heap itemHeap
}

func newKeyIndex(key func(*item) int64, idx func(*item) *int32) keyIndex {
	return keyIndex{key: key, idx: idx, heap: itemHeap{key: key, idx: idx}}
}

// slot encodes run slot i as an idx, and back.
func slot(i int) int32     { return int32(-3 - i) }
func slotOf(idx int32) int { return int(-3 - idx) }

// push places the item, which must be out (idx -1).
func (x *keyIndex) push(it *item) {
	k := x.key(it)
	if x.head < len(x.run) && k < x.last {
		heap.Push(&x.heap, it)
		return
	}
	*x.idx(it) = slot(len(x.run))
	x.run = append(x.run, it)
	x.last = k
	x.live++
	if len(x.run)-x.head > 2*x.live+64 {
		x.compact()
	}
}

// remove takes the item out; an item already out is left alone.
func (x *keyIndex) remove(it *item) {
	switch i := *x.idx(it); {
	case i >= 0:
		heap.Remove(&x.heap, int(i))
	case i <= -3:
		x.run[slotOf(i)] = nil
		*x.idx(it) = -1
		x.live--
		x.trim()
	}
}

// fix places the item again after its key changed.
func (x *keyIndex) fix(it *item) {
	if i := *x.idx(it); i >= 0 {
		heap.Fix(&x.heap, int(i))
		return
	}
	x.remove(it)
	x.push(it)
}

// peek returns the smallest key, or 0 when the index is empty.
func (x *keyIndex) peek() int64 {
	e := x.min()
	if e == nil {
		return 0
	}
	return x.key(e)
}

// popDue removes and returns the item of smallest key if that key is at or
// before now, else nil.
func (x *keyIndex) popDue(now int64) *item {
	e := x.min()
	if e == nil || x.key(e) > now {
		return nil
	}
	x.remove(e)
	return e
}

// min returns the item of smallest key (of equal keys, the run's first),
// or nil.
func (x *keyIndex) min() *item {
	var it *item
	if x.head < len(x.run) {
		it = x.run[x.head] // trim keeps the head's slot filled
	}
	if len(x.heap.items) > 0 && (it == nil || x.key(x.heap.items[0]) < x.key(it)) {
		it = x.heap.items[0]
	}
	return it
}

// trim drops the empty slots at the head of the run, and reuses or shrinks
// the run's array as it empties.
func (x *keyIndex) trim() {
	for x.head < len(x.run) && x.run[x.head] == nil {
		x.head++
	}
	switch {
	case x.head == len(x.run):
		x.run, x.head = x.run[:0], 0
	case x.head >= 1024 && x.head*2 >= len(x.run):
		x.moveDown(x.run[x.head:])
	}
}

// compact keeps the run's items, in order, without the empty slots: they
// would otherwise pile up behind a long-lived head.
func (x *keyIndex) compact() {
	kept := x.run[x.head:x.head]
	for _, e := range x.run[x.head:] {
		if e != nil {
			kept = append(kept, e)
		}
	}
	x.moveDown(kept)
}

// moveDown makes items, a part of run in order, the whole run from slot
// 0, and gives each item its new slot.
func (x *keyIndex) moveDown(items []*item) {
	n := copy(x.run, items)
	clear(x.run[n:])
	x.run, x.head, x.live = x.run[:n], 0, 0
	for i, e := range x.run {
		if e != nil {
			*x.idx(e) = slot(i)
			x.live++
		}
	}
}

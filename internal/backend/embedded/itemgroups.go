package embedded

import (
	"cmp"
	"container/heap"
	"slices"

	"github.com/styxq/styx/internal/queue"
)

// Item groups (queue/itemgroups.go; issue 37) on the in-memory index. A
// partition that holds an item with a group, or a held group, has a
// groupIndex: each group's bookkeeping (itemGroup) and each grouped item's
// entry (groupEntry), found from the item through a map, so that an item
// without a group pays nothing (item.grouped is a flag in its padding) and
// a queue without groups runs the code it ran before groups existed.
// Grouped items are never in the partition's ready FIFO:
//
//   - On an ordered queue a group keeps its live items (ready, scheduled,
//     leased; not dying) in GroupSeq order, and a heap orders the groups
//     whose head may be leased (no item leased, not held, the head ready)
//     by the head's id. A lease takes, oldest first, either the next item
//     without a group or the leasable group whose head is oldest, and of a
//     group its head and the ready items after it. Blocked items are never
//     visited: a hot group costs its head, not its length.
//   - On a fair queue each group keeps a FIFO of its ready ids, and the
//     groups with ready items form a ring with one turn (none) for the
//     items without a group; a lease takes one item per turn, round-robin,
//     from where the last lease stopped.

// groupIndex is a partition's index of its item groups, nil until the
// partition holds a grouped item or a held group. Owned by the loop.
type groupIndex struct {
	ordered bool
	byName  map[string]*itemGroup
	entries map[*item]*groupEntry
	// nReady counts the ready items with a group (partition.nReady counts
	// them too).
	nReady int
	// leasable (ordered) is a min-heap of the groups whose head a lease
	// may take, by the head's id.
	leasable groupHeap
	// none (fair) is the turn of the items without a group in the ring of
	// groups with ready items; cursor is the next turn.
	none, cursor *itemGroup
	// loading defers the order of the entries to endLoad (load).
	loading bool
}

// itemGroup is one group of a partition: it exists while the partition
// holds an item of the group or holds the group.
type itemGroup struct {
	name string
	// head and tail (ordered) are the group's live items in GroupSeq order.
	head, tail *groupEntry
	// n counts the group's items in every state.
	n               int
	nReady, nLeased int
	// held is set while a dead item holds the group (GroupHold).
	held *heldGroup
	// heapIdx is the group's place in leasable, -1 when absent; headID is
	// its key there.
	heapIdx int
	headID  uint64
	// ready (fair) holds the ids of the group's ready items (lazy
	// deletion, as partition.ready); prev and next link the ring, nil out
	// of it.
	ready      fifo
	prev, next *itemGroup
	// pending (ordered) holds the entries load found, ordered by endLoad.
	pending []*groupEntry
}

// groupEntry is a grouped item's place in its group.
type groupEntry struct {
	x   *item
	g   *itemGroup
	seq uint64 // queue.ItemMeta.GroupSeq
	// prev and next link the group's live items in GroupSeq order
	// (ordered); linked says the entry is in that list.
	prev, next *groupEntry
	linked     bool
}

func newGroupIndex(ordered bool) *groupIndex {
	gi := &groupIndex{ordered: ordered, byName: make(map[string]*itemGroup), entries: make(map[*item]*groupEntry)}
	if !ordered {
		gi.none = &itemGroup{heapIdx: -1}
		gi.none.prev, gi.none.next = gi.none, gi.none
		gi.cursor = gi.none
	}
	return gi
}

// index returns the partition's group index, made on first use.
func (p *partition) index() *groupIndex {
	if p.groups == nil {
		p.groups = newGroupIndex(p.ordered)
	}
	return p.groups
}

// dropIndex forgets the partition's group index once it indexes nothing
// (no grouped item, no held group): the partition leases as one that never
// held a group.
func (p *partition) dropIndex() {
	if gi := p.groups; gi != nil && len(gi.byName) == 0 && !gi.loading {
		p.groups = nil
	}
}

// addGrouped adds x (as partition.add) in group g ("" for none) at seq.
func (p *partition) addGrouped(x *item, g string, seq uint64) {
	if g != "" {
		p.index().enter(x, g, seq)
	}
	p.add(x)
}

// group returns the group of name, made when missing.
func (gi *groupIndex) group(name string) *itemGroup {
	g := gi.byName[name]
	if g == nil {
		g = &itemGroup{name: name, heapIdx: -1}
		gi.byName[name] = g
	}
	return g
}

// enter records x's entry in group name at seq, before the partition
// files it.
func (gi *groupIndex) enter(x *item, name string, seq uint64) {
	g := gi.group(name)
	gi.entries[x] = &groupEntry{x: x, g: g, seq: seq}
	g.n++
	x.grouped = true
}

// groupOf returns x's group name, "" for none.
func (p *partition) groupOf(x *item) string {
	if !x.grouped {
		return ""
	}
	return p.groups.entries[x].g.name
}

// filed follows partition.file: x, grouped, entered the structures of its
// state.
func (gi *groupIndex) filed(p *partition, x *item) {
	e := gi.entries[x]
	g := e.g
	switch x.state {
	case stateReady:
		g.nReady++
		gi.nReady++
		if !gi.ordered {
			g.ready.push(x.id)
			if g.nReady == 1 {
				gi.enterRing(g)
			}
		}
	case stateLeased:
		g.nLeased++
	}
	if !gi.ordered {
		return
	}
	switch {
	case x.state == stateDying:
		gi.unlink(e)
	case !e.linked && gi.loading:
		e.linked = true
		g.pending = append(g.pending, e)
		return
	case !e.linked:
		gi.insert(e)
	}
	if !gi.loading {
		gi.fix(g)
	}
}

// unfiled follows partition.unfile: x, grouped, left its state (file
// follows, or the item goes: removed).
func (gi *groupIndex) unfiled(x *item) {
	g := gi.entries[x].g
	switch x.state {
	case stateReady:
		g.nReady--
		gi.nReady--
		if !gi.ordered && g.nReady == 0 {
			gi.leaveRing(g)
		}
	case stateLeased:
		g.nLeased--
	}
}

// removed follows partition.remove: x left the partition, and its entry
// goes with it. x.grouped is cleared: the index (or the partition's next
// one) no longer has an entry for it to find.
func (gi *groupIndex) removed(x *item) {
	e := gi.entries[x]
	delete(gi.entries, x)
	x.grouped = false
	g := e.g
	gi.unlink(e)
	g.n--
	if gi.ordered {
		gi.fix(g)
	}
	gi.drop(g)
}

// rekeyed follows partition.rekey: x has a new id.
func (gi *groupIndex) rekeyed(x *item) {
	if gi.ordered {
		gi.fix(gi.entries[x].g)
	}
}

// drop forgets g once it holds nothing: no item, not held.
func (gi *groupIndex) drop(g *itemGroup) {
	if g.n == 0 && g.held == nil {
		delete(gi.byName, g.name)
	}
}

// insert links e into its group's list in GroupSeq order, searching from
// the tail (new items come last) or taking the head at once (a redriven
// head).
func (gi *groupIndex) insert(e *groupEntry) {
	g := e.g
	e.linked = true
	at := g.tail // e goes after at
	if g.head != nil && e.seq < g.head.seq {
		at = nil
	}
	for at != nil && at.seq > e.seq {
		at = at.prev
	}
	e.prev = at
	if at == nil {
		e.next = g.head
		g.head = e
	} else {
		e.next = at.next
		at.next = e
	}
	if e.next != nil {
		e.next.prev = e
	} else {
		g.tail = e
	}
}

// unlink takes e out of its group's list, if it is in.
func (gi *groupIndex) unlink(e *groupEntry) {
	if !e.linked {
		return
	}
	g := e.g
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		g.head = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		g.tail = e.prev
	}
	e.prev, e.next, e.linked = nil, nil, false
}

// endLoad orders the entries load found (by GroupSeq) and files the
// leasable groups.
func (gi *groupIndex) endLoad() {
	gi.loading = false
	if !gi.ordered {
		return
	}
	for _, g := range gi.byName {
		slices.SortFunc(g.pending, func(a, b *groupEntry) int { return cmp.Compare(a.seq, b.seq) })
		for _, e := range g.pending {
			e.prev, e.next = g.tail, nil
			if g.tail != nil {
				g.tail.next = e
			} else {
				g.head = e
			}
			g.tail = e
		}
		g.pending = nil
		gi.fix(g)
	}
}

// canLease reports whether a lease may take g's head (ordered).
func (g *itemGroup) canLease() bool {
	return g.held == nil && g.nLeased == 0 && g.head != nil && g.head.x.state == stateReady
}

// fix puts g in, out of or in its place in the heap of leasable groups
// (ordered).
func (gi *groupIndex) fix(g *itemGroup) {
	ok := g.canLease()
	switch {
	case ok && g.heapIdx < 0:
		g.headID = g.head.x.id
		heap.Push(&gi.leasable, g)
	case ok && g.headID != g.head.x.id:
		g.headID = g.head.x.id
		heap.Fix(&gi.leasable, g.heapIdx)
	case !ok && g.heapIdx >= 0:
		heap.Remove(&gi.leasable, g.heapIdx)
	}
}

// enterRing gives g a turn (fair), last in the current round.
func (gi *groupIndex) enterRing(g *itemGroup) {
	at := gi.cursor
	g.prev, g.next = at.prev, at
	at.prev.next = g
	at.prev = g
}

// leaveRing takes g's turn away (fair).
func (gi *groupIndex) leaveRing(g *itemGroup) {
	if g.next == nil {
		return
	}
	if gi.cursor == g {
		gi.cursor = g.next
	}
	g.prev.next = g.next
	g.next.prev = g.prev
	g.prev, g.next = nil, nil
}

// popReady returns the oldest ready item of g (fair), or nil.
func (g *itemGroup) popReady(p *partition) *item {
	for g.ready.len() > 0 {
		if x, ok := p.items[g.ready.pop()]; ok && x.state == stateReady && x.grouped {
			return x
		}
	}
	return nil
}

// leaseItems calls take (which leases the item) on up to want ready items
// of the partition by the rules of its groups, in the order a lease hands
// them out. fits, when not nil, is asked before each item is taken: at its
// first false the lease stops there, the item left as it was (ready, at
// its place: first in its FIFO, its group still leasable or its run cut,
// the turn it would have taken first in the next lease), and leaseItems
// reports more. A run cut so is a group's run all the same: the group has
// an item leased, and its items left wait for it.
func (gi *groupIndex) leaseItems(p *partition, want int, fits func(*item) bool, take func(*item)) (more bool) {
	n := 0
	if !gi.ordered {
		// Round-robin: one item per turn, the items without a group
		// taking one turn; each full round takes at least one item while
		// any is ready (misses guards against a broken count).
		for misses := 0; n < want && p.nReady > 0 && misses <= len(gi.byName); {
			g := gi.cursor
			gi.cursor = g.next
			var x *item
			var from *fifo
			switch {
			case g != gi.none:
				x, from = g.popReady(p), &g.ready
			case p.nReady > gi.nReady:
				x, from = p.popReady(), &p.ready
			}
			if x == nil {
				misses++
				continue
			}
			if fits != nil && !fits(x) {
				from.unpop([]uint64{x.id})
				gi.cursor = g
				return true
			}
			misses = 0
			take(x)
			n++
		}
		return false
	}
	for n < want {
		u := p.peekReady()
		var g *itemGroup
		if len(gi.leasable) > 0 {
			g = gi.leasable[0]
		}
		switch {
		case u == nil && g == nil:
			return false
		case g == nil || u != nil && u.id < g.headID:
			if fits != nil && !fits(u) {
				return true
			}
			p.ready.pop()
			take(u)
			n++
		default:
			// The head, then the ready items after it: taking the head
			// takes g out of the heap.
			for e := g.head; e != nil && n < want && e.x.state == stateReady; {
				if fits != nil && !fits(e.x) {
					return true
				}
				next := e.next
				take(e.x)
				n++
				e = next
			}
			if g.heapIdx >= 0 {
				return false // a broken index: never loop on it
			}
		}
	}
	return false
}

// groupHeap is a min-heap of groups by headID.
type groupHeap []*itemGroup

func (h groupHeap) Len() int { return len(h) }
func (h groupHeap) Less(i, j int) bool {
	return h[i].headID < h[j].headID
}
func (h groupHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].heapIdx = i
	h[j].heapIdx = j
}
func (h *groupHeap) Push(x any) {
	g := x.(*itemGroup)
	g.heapIdx = len(*h)
	*h = append(*h, g)
}
func (h *groupHeap) Pop() any {
	old := *h
	n := len(old) - 1
	g := old[n]
	old[n] = nil
	*h = old[:n]
	g.heapIdx = -1
	return g
}

// heldGroup is a group held by a dead item (queue.HeldGroup), with the id
// the dead item had in this queue: while the queue still holds that item
// (its move to the dead-letter queue is not done), the group is not
// checked for release.
type heldGroup struct {
	queue.HeldGroup
	deadID uint64
}

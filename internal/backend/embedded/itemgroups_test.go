package embedded

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// TestItemSize: groups live beside the items (groupIndex), so an item
// without a group costs what it did before groups existed; 80 bytes is
// still an 80-byte allocation, as 72 was before firstLeased.
func TestItemSize(t *testing.T) {
	require.Equal(t, uintptr(80), unsafe.Sizeof(item{}))
}

// groupModel drives a partition's group index through random changes, as
// the logical queue makes them, and checks it against a recount after each.
type groupModel struct {
	t      *testing.T
	p      *partition
	rnd    *rand.Rand
	nextID uint64
	seqs   map[*item]uint64
	groups map[*item]string
	// gone lists the items removed from the partition.
	gone []*item
}

func newGroupModel(t *testing.T, ordered bool, seed uint64) *groupModel {
	return &groupModel{t: t, p: newPartition(0, ordered), rnd: rand.New(rand.NewPCG(seed, 1)), nextID: 1,
		seqs: map[*item]uint64{}, groups: map[*item]string{}}
}

func (m *groupModel) add(g string, s state) *item {
	id := m.nextID
	m.nextID++
	x := &item{id: id, bodyID: id, created: int64(id), state: s}
	if s == stateScheduled || s == stateLeased {
		x.deadline = int64(id) + 1000
	}
	m.p.addGrouped(x, g, id)
	m.seqs[x], m.groups[x] = id, g
	return x
}

// step makes one random change.
func (m *groupModel) step() {
	p := m.p
	var xs []*item
	for _, x := range p.items {
		xs = append(xs, x)
	}
	slices.SortFunc(xs, func(a, b *item) int { return int(a.id) - int(b.id) })
	if len(xs) < 5 || m.rnd.IntN(4) == 0 {
		g := ""
		if m.rnd.IntN(5) > 0 {
			g = fmt.Sprint("g", m.rnd.IntN(6))
		}
		m.add(g, []state{stateReady, stateReady, stateScheduled}[m.rnd.IntN(3)])
		return
	}
	x := xs[m.rnd.IntN(len(xs))]
	switch x.state {
	case stateReady:
		switch m.rnd.IntN(3) {
		case 0:
			p.setStateAt(x, stateLeased, 1)
		case 1:
			p.setStateAt(x, stateDying, 1)
		default:
			m.remove(x)
		}
	case stateScheduled:
		p.setStateAt(x, stateReady, 0)
	case stateLeased:
		switch m.rnd.IntN(3) {
		case 0: // retried, at once or later
			p.rekey(x, m.nextID)
			m.nextID++
			p.setStateAt(x, []state{stateReady, stateScheduled}[m.rnd.IntN(2)], 5)
		case 1:
			p.setStateAt(x, stateDying, 1)
		default:
			m.remove(x)
		}
	case stateDying:
		m.remove(x)
	}
}

func (m *groupModel) remove(x *item) {
	m.p.remove(x)
	delete(m.seqs, x)
	delete(m.groups, x)
	m.gone = append(m.gone, x)
}

// check recounts the index.
func (m *groupModel) check(step string) {
	t, p := m.t, m.p
	t.Helper()
	// An item that left the partition keeps no mark of its group: its
	// entry went with it, and the index may be gone too.
	for _, x := range m.gone {
		require.False(t, x.grouped, "%s: item %d removed but still marked grouped", step, x.id)
	}
	gi := p.groups
	if gi == nil {
		return
	}
	type counts struct{ n, ready, leased int }
	want := map[string]*counts{}
	live := map[string][]uint64{}
	readyGrouped, readyPlain := 0, 0
	for x, g := range m.groups {
		require.Equal(t, g != "", x.grouped, step)
		if g == "" {
			if x.state == stateReady {
				readyPlain++
			}
			continue
		}
		require.Equal(t, g, p.groupOf(x), step)
		require.Equal(t, m.seqs[x], p.meta(x).GroupSeq, step)
		c := want[g]
		if c == nil {
			c = &counts{}
			want[g] = c
		}
		c.n++
		switch x.state {
		case stateReady:
			c.ready++
			readyGrouped++
		case stateLeased:
			c.leased++
		}
		if x.state != stateDying {
			live[g] = append(live[g], m.seqs[x])
		}
	}
	require.Equal(t, readyGrouped, gi.nReady, step)
	inRing := 0
	for name, g := range gi.byName {
		c := want[name]
		if c == nil {
			require.NotNil(t, g.held, "%s: group %s has no item and is not held", step, name)
			c = &counts{}
		}
		require.Equal(t, *c, counts{g.n, g.nReady, g.nLeased}, "%s: group %s", step, name)
		if gi.ordered {
			var seqs []uint64
			for e := g.head; e != nil; e = e.next {
				seqs = append(seqs, e.seq)
				if e.next != nil {
					require.Same(t, e, e.next.prev, step)
				} else {
					require.Same(t, e, g.tail, step)
				}
			}
			w := live[name]
			slices.Sort(w)
			require.Equal(t, w, seqs, "%s: group %s in GroupSeq order", step, name)
			require.Equal(t, g.canLease(), g.heapIdx >= 0, "%s: group %s leasable", step, name)
			if g.heapIdx >= 0 {
				require.Equal(t, g.head.x.id, g.headID, step)
			}
		} else if g.next != nil {
			inRing++
			require.Positive(t, g.nReady, "%s: group %s in the ring without ready items", step, name)
		} else {
			require.Zero(t, g.nReady, "%s: group %s has ready items and no turn", step, name)
		}
	}
	for name := range want {
		require.Contains(t, gi.byName, name, step)
	}
	if gi.ordered {
		for i := 1; i < len(gi.leasable); i++ {
			require.LessOrEqual(t, gi.leasable[(i-1)/2].headID, gi.leasable[i].headID, "%s: heap order", step)
		}
		require.Equal(t, readyPlain+len(gi.leasable), p.leasable(), step)
	} else {
		n := 0
		for g := gi.none.next; g != gi.none; g = g.next {
			n++
		}
		require.Equal(t, inRing, n, "%s: ring length", step)
		require.Equal(t, p.nReady, p.leasable(), step)
	}
}

// lease leases up to want items through the index and checks each one the
// rules allow: on an ordered queue, an item of a group only when nothing of
// its group is leased or held and every live item of the group before it
// is taken by this lease.
func (m *groupModel) lease(want int) []*item {
	t, p := m.t, m.p
	t.Helper()
	before := map[string]bool{} // groups with a leased item before this lease
	for x, g := range m.groups {
		if g != "" && x.state == stateLeased {
			before[g] = true
		}
	}
	var got []*item
	p.index().leaseItems(p, want, nil, func(x *item) {
		require.Equal(t, stateReady, x.state)
		if g := m.groups[x]; g != "" && p.ordered {
			require.False(t, before[g], "group %s has a leased item", g)
			require.Nil(t, p.groups.byName[g].held, "group %s is held", g)
			for y, yg := range m.groups {
				if yg == g && y.state != stateDying && m.seqs[y] < m.seqs[x] {
					require.Contains(t, got, y, "group %s: seq %d before %d", g, m.seqs[y], m.seqs[x])
				}
			}
		}
		x.attempts++
		p.setStateAt(x, stateLeased, 1)
		got = append(got, x)
	})
	return got
}

func TestGroupIndexModel(t *testing.T) {
	for _, ordered := range []bool{true, false} {
		for seed := range uint64(20) {
			t.Run(fmt.Sprint("ordered=", ordered, "/", seed), func(t *testing.T) {
				m := newGroupModel(t, ordered, seed)
				for i := range 400 {
					m.step()
					m.check(fmt.Sprint("step ", i))
					if i%7 == 0 {
						m.lease(1 + m.rnd.IntN(5))
						m.check(fmt.Sprint("lease after step ", i))
					}
					if ordered && i%50 == 25 {
						// Hold and release a group, as a dead item does.
						gi := m.p.index()
						g := gi.group("g1")
						if g.held == nil {
							g.held = &heldGroup{}
						} else {
							g.held = nil
						}
						gi.fix(g)
						gi.drop(g)
						m.p.dropIndex()
						m.check(fmt.Sprint("hold after step ", i))
					}
				}
			})
		}
	}
}

// TestGroupFairRoundRobin: on a queue that is not ordered a lease takes one
// item per group in turn, the items without a group taking one turn, and
// the next lease goes on from where the last stopped.
func TestGroupFairRoundRobin(t *testing.T) {
	m := newGroupModel(t, false, 1)
	for range 100 {
		m.add("hot", stateReady)
	}
	for i := range 3 {
		m.add(fmt.Sprint("s", i), stateReady)
	}
	m.add("", stateReady)
	m.add("", stateReady)
	names := func(xs []*item) []string {
		var out []string
		for _, x := range xs {
			out = append(out, m.groups[x])
		}
		return out
	}
	first := names(m.lease(5))
	require.ElementsMatch(t, []string{"hot", "s0", "s1", "s2", ""}, first)
	second := names(m.lease(3))
	require.ElementsMatch(t, []string{"hot", "", "hot"}, second, "the small groups are empty: hot and the items without a group take turns")
	m.check("after")
}

// TestGroupLoadOrder: load files the items of a group in id order, but a
// requeued item has a larger id than the items behind it; the group's
// order is GroupSeq's, whatever the load order.
func TestGroupLoadOrder(t *testing.T) {
	p := newPartition(0, true)
	seqs := []uint64{5, 2, 9, 1, 7}
	for i, seq := range seqs {
		x := &item{id: uint64(10 + i), bodyID: seq, state: stateReady}
		p.index().loading = true
		p.addGrouped(x, "g", seq)
	}
	p.groups.endLoad()
	var got []uint64
	p.groups.leaseItems(p, 10, nil, func(x *item) {
		got = append(got, p.meta(x).GroupSeq)
		p.setStateAt(x, stateLeased, 1)
	})
	require.Equal(t, []uint64{1, 2, 5, 7, 9}, got)
}

// TestGroupIndexDropped: once a partition holds no grouped item and no held
// group, it forgets its group index and leases as before groups.
func TestGroupIndexDropped(t *testing.T) {
	p := newPartition(0, true)
	x := &item{id: 1, bodyID: 1, state: stateReady}
	y := &item{id: 2, bodyID: 2, state: stateReady}
	p.addGrouped(x, "g", 1)
	p.addGrouped(y, "", 2)
	require.NotNil(t, p.groups)
	p.remove(x)
	require.Nil(t, p.groups)
	require.Same(t, y, p.popReady())
}

package embedded

import (
	"math"
	"math/big"
	"testing"
	"time"
)

func TestPartitionOldest(t *testing.T) {
	p := newPartition(0, false)
	sec := func(s int64) int64 { return s * int64(time.Second) }
	if got := p.oldest(); got != 0 {
		t.Fatalf("empty: oldest %d, want 0", got)
	}
	items := map[int64]*item{}
	for i, c := range []int64{sec(10) + 5, sec(10) + 7, sec(12), sec(8) + 3} { // the last older, out of order (an import)
		x := &item{id: uint64(i + 1), created: c, state: stateReady}
		items[c] = x
		p.add(x)
	}
	for _, step := range []struct {
		remove      int64
		want, exact int64
	}{
		{-1, sec(8), sec(8) + 3},
		{sec(8) + 3, sec(10), sec(10) + 5},
		{sec(10) + 5, sec(10), sec(10) + 7}, // one item of second 10 is left
		{sec(10) + 7, sec(12), sec(12)},
		{sec(12), 0, 0},
	} {
		if step.remove >= 0 {
			p.remove(items[step.remove])
		}
		if got := p.oldest(); got != step.want {
			t.Fatalf("after removing %d: oldest %d, want %d", step.remove, got, step.want)
		}
		if got, _ := p.oldestCreated(); got != step.exact {
			t.Fatalf("after removing %d: oldest created %d, want %d", step.remove, got, step.exact)
		}
	}
}

// TestPartitionCounts changes items through every state and checks the
// partition's counts against a recount after each change.
func TestPartitionCounts(t *testing.T) {
	p := newPartition(0, false)
	check := func(step string) {
		t.Helper()
		var failures, leased, sched int
		var created, deadlines wideSum
		for _, x := range p.items {
			created.add(x.created)
			if x.state == stateLeased {
				leased++
				deadlines.add(x.deadline)
			}
			if x.state == stateScheduled {
				sched++
			}
			if x.attempts > 0 && (x.state == stateReady || x.state == stateScheduled) && !x.isDeadCopy() {
				failures++
			}
		}
		if failures != p.nFailures || leased != p.nLeased || sched != p.nScheduled || created != p.sumCreated || deadlines != p.sumLeased {
			t.Fatalf("%s: counts %d failures, %d leased, %d scheduled, sums %v %v; recount %d, %d, %d, %v %v", step,
				p.nFailures, p.nLeased, p.nScheduled, p.sumCreated, p.sumLeased, failures, leased, sched, created, deadlines)
		}
		var listed []uint64
		p.scheduled.page(0, p.isScheduled, func(id uint64) bool { listed = append(listed, id); return true })
		if len(listed) != sched {
			t.Fatalf("%s: scheduled index lists %d of %d", step, len(listed), sched)
		}
	}
	x := &item{id: 1, created: 100, state: stateReady}
	y := &item{id: 2, created: 200, state: stateScheduled, deadline: 500}
	p.add(x)
	p.add(y)
	check("add")
	x.attempts++
	p.setStateAt(x, stateLeased, 1000)
	check("lease")
	p.setDeadline(x, 2000)
	check("renew")
	x.attempts = 1
	p.rekey(x, 3)
	p.setStateAt(x, stateScheduled, 3000)
	check("requeue scheduled")
	p.setStateAt(y, stateReady, 0)
	check("due")
	p.setStateAt(x, stateReady, 0)
	check("due with a failure")
	p.setStateAt(x, stateDying, 4000)
	check("kill")
	p.remove(x)
	p.remove(y)
	check("remove")
	for i := uint64(10); i < 300; i++ {
		p.add(&item{id: i, created: int64(i), state: stateScheduled, deadline: int64(i)})
	}
	for i := uint64(10); i < 300; i += 2 {
		p.setStateAt(p.items[i], stateReady, 0)
	}
	check("many due")
	if p.scheduled.nStale > len(p.scheduled.ids)/2+1 {
		t.Fatalf("scheduled index keeps %d stale of %d entries", p.scheduled.nStale, len(p.scheduled.ids))
	}
	var page []uint64
	p.scheduled.page(100, p.isScheduled, func(id uint64) bool { page = append(page, id); return len(page) < 3 })
	if len(page) != 3 || page[0] != 101 || page[1] != 103 || page[2] != 105 {
		t.Fatalf("page after 100: %v", page)
	}
}

func TestWideSum(t *testing.T) {
	var s wideSum
	want := new(big.Int)
	for _, v := range []int64{math.MaxInt64, math.MaxInt64, 5, -7, math.MinInt64, 1 << 62, -(1 << 62), math.MaxInt64} {
		s.add(v)
		want.Add(want, big.NewInt(v))
		if s.big().Cmp(want) != 0 {
			t.Fatalf("after %d: %v, want %v", v, s.big(), want)
		}
	}
	var a wideSum
	for _, c := range []int64{10, 20, 31} {
		a.add(c)
	}
	if got := meanAge(a, 3, 100); got != time.Duration((90+80+69)/3) {
		t.Fatalf("meanAge %d", got)
	}
}

package embedded

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestKeyIndexModel runs random changes through a keyIndex and checks each
// answer against a recount of the items it holds: mostly increasing keys
// (the run), some out of order (the heap), equal keys, removals from the
// middle, key changes that go back to an earlier key, and pops of what is
// due. It also checks that the run holds at most about twice its live
// items, so that entries left behind a long-lived head do not pile up.
func TestKeyIndexModel(t *testing.T) {
	for seed := range uint64(20) {
		rnd := rand.New(rand.NewPCG(seed, 38))
		x := newKeyIndex(func(it *item) int64 { return it.deadline }, func(it *item) *int32 { return &it.timedIdx })
		in := map[*item]bool{}
		var all []*item
		var last, now int64
		minKey := func() (int64, bool) {
			var m int64
			found := false
			for it := range in {
				if !found || it.deadline < m {
					m, found = it.deadline, true
				}
			}
			return m, found
		}
		pick := func() *item {
			for it := range in {
				return it
			}
			return nil
		}
		nextKey := func() int64 {
			switch r := rnd.IntN(10); {
			case r == 0: // out of order
				return last - rnd.Int64N(50)
			case r < 3: // equal to the last
				return last
			default:
				last += rnd.Int64N(5)
				return last
			}
		}
		for step := range 5000 {
			switch op := rnd.IntN(10); {
			case op < 4 || len(in) == 0:
				var it *item
				if len(all) > 0 && rnd.IntN(4) == 0 {
					it = all[rnd.IntN(len(all))] // an item that left comes back
				}
				if it == nil || in[it] {
					it = &item{timedIdx: -1}
					all = append(all, it)
				}
				it.deadline = nextKey()
				x.push(it)
				in[it] = true
				require.LessOrEqual(t, len(x.run)-x.head, 2*x.live+64, "seed %d step %d", seed, step)
			case op < 6:
				it := pick()
				x.remove(it)
				delete(in, it)
				require.Equal(t, int32(-1), it.timedIdx)
			case op < 7:
				it := pick()
				if rnd.IntN(2) == 0 {
					it.deadline = nextKey()
				} else {
					it.deadline -= rnd.Int64N(3) // maybe back to a key it had
				}
				x.fix(it)
			default:
				now = last - 20 + rnd.Int64N(30)
				m, ok := minKey()
				got := x.popDue(now)
				if !ok || m > now {
					require.Nil(t, got, "seed %d step %d: popped %v, min %d, now %d", seed, step, got, m, now)
					break
				}
				require.NotNil(t, got, "seed %d step %d: min %d due at %d", seed, step, m, now)
				require.True(t, in[got], "seed %d step %d: popped an item not held", seed, step)
				require.Equal(t, m, got.deadline, "seed %d step %d", seed, step)
				require.Equal(t, int32(-1), got.timedIdx)
				delete(in, got)
			}
			m, ok := minKey()
			if !ok {
				require.Nil(t, x.min(), "seed %d step %d", seed, step)
				require.Zero(t, x.peek())
			} else {
				require.Equal(t, m, x.peek(), "seed %d step %d", seed, step)
			}
			live := 0
			for it := range in {
				require.NotEqual(t, int32(-1), it.timedIdx, "seed %d step %d: a held item is out", seed, step)
				if it.timedIdx <= -3 { // in the run
					live++
				}
			}
			require.Equal(t, live, x.live, "seed %d step %d", seed, step)
		}
		// Everything held comes out, in key order.
		prev := int64(-1 << 62)
		for len(in) > 0 {
			got := x.popDue(1 << 62)
			require.NotNil(t, got)
			require.True(t, in[got])
			require.GreaterOrEqual(t, got.deadline, prev)
			prev = got.deadline
			delete(in, got)
		}
		require.Nil(t, x.popDue(1<<62))
		require.Zero(t, x.live)
	}
}

// TestKeyIndexCompactsBehindAHead keeps one item at the head of the run
// while others come and go behind it with the key they had, each leaving
// an empty slot: the run must stay bounded and hold each item once.
func TestKeyIndexCompactsBehindAHead(t *testing.T) {
	x := newKeyIndex(func(it *item) int64 { return it.deadline }, func(it *item) *int32 { return &it.timedIdx })
	head := &item{timedIdx: -1}
	x.push(head)
	others := make([]*item, 8)
	for i := range others {
		others[i] = &item{timedIdx: -1, deadline: 5}
		x.push(others[i])
	}
	for range 10_000 {
		for _, it := range others {
			x.remove(it)
			x.push(it)
		}
	}
	require.LessOrEqual(t, len(x.run), 2*x.live+64)
	require.Equal(t, 9, x.live)
	require.Same(t, head, x.popDue(0))
	for range others {
		require.NotNil(t, x.popDue(5))
	}
	require.Nil(t, x.popDue(5), "an item came out twice")
	require.Zero(t, x.live)
}

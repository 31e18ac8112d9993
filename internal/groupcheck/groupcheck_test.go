package groupcheck

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestCheck: the checker accepts a history that keeps the rules and finds
// each kind of violation.
func TestCheck(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	good := func() *History {
		h := New()
		h.Produced("a", 3)
		h.Add(Lease{Group: "a", Items: []int{0, 1}, Got: at(0), End: at(10), Completed: []int{0}}) // 1 retried
		h.Add(Lease{Group: "a", Items: []int{1}, Got: at(11), End: at(20)})                        // expired
		h.Add(Lease{Group: "a", Items: []int{1, 2}, Got: at(21), End: at(30), Completed: []int{1, 2}})
		return h
	}
	require.Empty(t, good().Check(true, 0))

	h := good()
	h.Add(Lease{Group: "a", Items: []int{2}, Got: at(25), End: at(26)})
	require.NotEmpty(t, h.Check(false, 0), "two leases at once")

	h = New()
	h.Produced("a", 2)
	h.Add(Lease{Group: "a", Items: []int{1}, Got: at(0), End: at(1), Completed: []int{1}})
	require.NotEmpty(t, h.Check(false, 0), "out of order")

	h = New()
	h.Produced("a", 3)
	h.Add(Lease{Group: "a", Items: []int{0, 2}, Got: at(0), End: at(1)})
	require.NotEmpty(t, h.Check(false, 0), "a batch that skips an item")

	h = New()
	h.Produced("a", 2)
	h.Add(Lease{Group: "a", Items: []int{0, 1}, Got: at(0), End: at(1), Completed: []int{1}})
	require.NotEmpty(t, h.Check(false, 0), "a later item completed while an earlier one goes back")

	h = New()
	h.Produced("a", 2)
	h.Add(Lease{Group: "a", Items: []int{0}, Got: at(0), End: at(1), Completed: []int{0}})
	require.NotEmpty(t, h.Check(true, 0), "an item never completed")
	require.Empty(t, h.Check(false, 0))

	// A complete without an answer: done or not, either next lease is in
	// order; anything else is not.
	for _, c := range []struct {
		next int
		ok   bool
	}{{1, true}, {2, true}, {0, false}, {3, false}} {
		h = New()
		h.Produced("a", 4)
		h.Add(Lease{Group: "a", Items: []int{0, 1}, Got: at(0), End: at(1), Completed: []int{0}, Unknown: []int{1}})
		h.Add(Lease{Group: "a", Items: []int{c.next}, Got: at(2), End: at(3)})
		require.Equal(t, c.ok, len(h.Check(false, 0)) == 0, "next lease gives item %d", c.next)
	}
	require.Equal(t, at(1), EndAt(at(1), at(2)))
	require.Equal(t, at(2), EndAt(at(3), at(2)))
}

// TestRuns: an answer's items split into one lease per group, in the order
// the groups first appear, each with its indexes and their positions in
// the answer in answer order, and the answer's times and node.
func TestRuns(t *testing.T) {
	got, deadline := time.Unix(1000, 0), time.Unix(1030, 0)
	require.Nil(t, Runs(nil, got, deadline, "n0"))
	runs := Runs([]Item{{"b", 0}, {"a", 0}, {"b", 1}, {"c", 0}, {"a", 1}, {"b", 2}}, got, deadline, "n0")
	lease := func(g string, items ...int) Lease {
		return Lease{Group: g, Items: items, Got: got, End: deadline, Node: "n0"}
	}
	require.Equal(t, []Run{
		{Lease: lease("b", 0, 1, 2), At: []int{0, 2, 5}},
		{Lease: lease("a", 0, 1), At: []int{1, 4}},
		{Lease: lease("c", 0), At: []int{3}},
	}, runs)

	// The records, completed, are a history the checker accepts.
	h := New()
	h.Produced("a", 2)
	h.Produced("b", 3)
	h.Produced("c", 1)
	for _, r := range runs {
		r.Lease.Completed = r.Lease.Items
		h.Add(r.Lease)
	}
	require.Empty(t, h.Check(true, 0))
}

package engine

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func waiter(t *testing.T, ws *Waiters, client string, batch int) *Request {
	t.Helper()
	r := &Request{Ctx: context.Background(), Lease: &LeaseWait{ClientID: client, BatchSize: batch, Timeout: 1e9}, done: make(chan error, 1)}
	require.NoError(t, ws.add(r, 0))
	return r
}

// TestServeRecountsStaleCounts: when a partition hands out fewer items than
// counted (another node took them), the waiters left without items are
// assigned again from fresh counts in the same call.
func TestServeRecountsStaleCounts(t *testing.T) {
	ws := &Waiters{queue: "q"}
	a, b := waiter(t, ws, "a", 1), waiter(t, ws, "b", 1)
	counts := [][]int{{5, 0}, {0, 3}} // the first count is stale: partition 0 holds 1 item
	stock := []int{1, 3}
	rounds := 0
	got := map[*Request]int32{}
	next := 0
	err := Serve(ws, &next,
		func() ([]int, error) { c := counts[rounds]; rounds++; return c, nil },
		func(p int32, n int, _ int64, _ time.Duration, _ func(int) *Request, _ bool) ([]int, bool, error) {
			k := min(n, stock[p])
			stock[p] -= k
			return make([]int, k), false, nil
		},
		func(r *Request, p int32, items []int) { got[r] = p }, false)
	require.NoError(t, err)
	assert.Equal(t, 2, rounds)
	assert.Equal(t, map[*Request]int32{a: 0, b: 1}, got)
	assert.Zero(t, ws.Len(), "served waiters leave")
}

// TestServeApart: with apart (an ordered queue), the waiters of a
// partition each get a lease of their own, in waiter order, not the dealt
// items of one lease (which would split a group's run between two
// consumers); once a lease comes short, the later waiters get nothing.
func TestServeApart(t *testing.T) {
	ws := &Waiters{queue: "q"}
	a, b := waiter(t, ws, "a", 3), waiter(t, ws, "b", 2)
	waiter(t, ws, "c", 2)
	next, stock := 0, 4
	var calls []int
	got := map[*Request][]int{}
	err := Serve(ws, &next,
		func() ([]int, error) { return []int{10}, nil },
		func(p int32, n int, _ int64, _ time.Duration, _ func(int) *Request, _ bool) ([]int, bool, error) {
			calls = append(calls, n)
			var items []int
			for range min(n, stock) {
				items = append(items, 5-stock) // 1, 2, 3, 4 in lease order
				stock--
			}
			return items, false, nil
		},
		func(r *Request, p int32, items []int) { got[r] = items }, true)
	require.NoError(t, err)
	assert.Equal(t, []int{3, 2}, calls, "a lease per waiter, until one comes short")
	assert.Equal(t, map[*Request][]int{a: {1, 2, 3}, b: {4}}, got, "each waiter its lease's items, in order")
	assert.Equal(t, 1, ws.Len(), "c waits on")
}

// TestWaitersRefuseDuplicateClient: one waiting lease per client_id.
func TestWaitersRefuseDuplicateClient(t *testing.T) {
	ws := &Waiters{queue: "q"}
	waiter(t, ws, "a", 1)
	r := &Request{Ctx: context.Background(), Lease: &LeaseWait{ClientID: "a", BatchSize: 1}, done: make(chan error, 1)}
	assert.ErrorContains(t, ws.add(r, 0), "duplicate client id; a client cannot make multiple leased requests to the same queue")
	ws.expire(2e9, func(*Request) { t.Fatal("no lease completed first") }) // past the request timeout
	assert.Zero(t, ws.Len())
}

// TestServeBytesBound: a partition's lease is bounded by the smallest
// MaxBytes of its waiters; when it stops at the bound (more), the waiters
// left without items are served in another round, from the same
// partition.
func TestServeBytesBound(t *testing.T) {
	ws := &Waiters{queue: "q"}
	a, b, c := waiter(t, ws, "a", 10), waiter(t, ws, "b", 10), waiter(t, ws, "c", 10)
	a.Lease.MaxBytes, b.Lease.MaxBytes, c.Lease.MaxBytes = 3, 2, 5
	stock := 10 // items of 1 byte
	var bounds []int64
	got := map[*Request]int{}
	next := 0
	err := Serve(ws, &next,
		func() ([]int, error) { return []int{stock}, nil },
		func(p int32, n int, maxBytes int64, _ time.Duration, _ func(int) *Request, _ bool) ([]int, bool, error) {
			bounds = append(bounds, maxBytes)
			k := min(n, stock, int(maxBytes))
			stock -= k
			return make([]int, k), k < n && stock > 0, nil
		},
		func(r *Request, p int32, items []int) { got[r] = len(items) }, false)
	require.NoError(t, err)
	assert.Equal(t, []int64{2, 5}, bounds, "the smallest bound of the waiters, then c's alone")
	assert.Equal(t, map[*Request]int{a: 1, b: 1, c: 5}, got)
	assert.Zero(t, ws.Len())
}

// TestServeLastLease: Serve says which lease is its only one whatever it
// returns (a backend may commit with it: LeaseCommitter), and makes no
// other after it: one partition with every waiter dealt one lease's items
// and no bytes bound. Two partitions, or a bound that may leave items for
// another round, are not last.
func TestServeLastLease(t *testing.T) {
	type call struct {
		n    int
		last bool
	}
	serve := func(counts []int, stock []int, wants []int, maxBytes int64) ([]call, int) {
		ws := &Waiters{queue: "q"}
		for i, w := range wants {
			r := waiter(t, ws, string(rune('a'+i)), w)
			r.Lease.MaxBytes = maxBytes
		}
		var calls []call
		next := 0
		require.NoError(t, Serve(ws, &next,
			func() ([]int, error) { return counts, nil },
			func(p int32, n int, _ int64, _ time.Duration, _ func(int) *Request, last bool) ([]int, bool, error) {
				calls = append(calls, call{n, last})
				k := min(n, stock[p])
				stock[p] -= k
				return make([]int, k), false, nil
			},
			func(*Request, int32, []int) {}, false))
		return calls, ws.Len()
	}
	calls, left := serve([]int{1000}, []int{1}, []int{1, 1}, 0)
	assert.Equal(t, []call{{2, true}}, calls, "one partition, both waiters dealt one lease: last, and no second round")
	assert.Equal(t, 1, left, "the waiter dealt nothing waits on")

	calls, _ = serve([]int{1000}, []int{5}, []int{3}, 64)
	assert.Equal(t, []call{{3, false}}, calls, "a bytes bound over several items may leave some for another round")

	calls, _ = serve([]int{1000}, []int{5}, []int{1}, 64)
	assert.Equal(t, []call{{1, true}}, calls, "a lease of one item takes it whatever its size")

	calls, _ = serve([]int{1, 1}, []int{1, 1}, []int{1, 1}, 0)
	assert.Equal(t, []call{{1, false}, {1, false}}, calls, "two partitions")

	calls, _ = serve([]int{1}, []int{1}, []int{1, 1}, 0)
	assert.Equal(t, []call{{2, true}}, calls, "the exact count of the embedded backends: still one lease for both")

	calls, _ = serve([]int{0}, []int{0}, []int{1}, 0)
	assert.Empty(t, calls, "nothing ready: no lease")
}

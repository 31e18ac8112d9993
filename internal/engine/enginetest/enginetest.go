// Package enginetest is the engine's contract suite: it exercises engine.Tx,
// the decision-level storage contract every backend implements, method by
// method, on a real backend, the way River's riverdrivertest exercises its
// drivers. Where queuetest (internal/queue/queuetest) checks what clients
// see of the queue's behaviour, enginetest checks what the engine may rely
// on from a Tx: a new backend passes both.
//
// Each row opens fresh queues on a fake clock and runs its steps inside
// real iterations with engine.Engine.Do (each Do is one iteration, durable
// when it returns), reading results through the Tx and the queue's public
// calls. A backend's test calls Run with its queuetest.Open (see
// internal/backend/embedded and internal/backend/postgres).
package enginetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/apierr"
	"github.com/styxq/styx/internal/clock"
	"github.com/styxq/styx/internal/engine"
	"github.com/styxq/styx/internal/queue"
	"github.com/styxq/styx/internal/queue/queuetest"
)

// Doer is what a backend's queue (queue.Queue) offers the suite: the
// engine's Do.
type Doer interface {
	Do(ctx context.Context, ids []uint64, f func(tx engine.Tx, now int64) error) error
}

// Run runs every row as a parallel subtest of t, each on its own queues
// from open and its own clock.Fake set to queuetest.Start.
func Run(t *testing.T, open queuetest.Open) {
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			t.Parallel()
			clk := clock.NewFake(queuetest.Start)
			r.run(&env{t: t, ctx: t.Context(), clk: clk, qs: open(t, clk)})
		})
	}
}

type row struct {
	name string
	run  func(e *env)
}

// env is one row's world.
type env struct {
	t   *testing.T
	ctx context.Context
	clk *clock.Fake
	qs  queue.Queues
	// leased is every item leaseBytes leased.
	leased []queue.LeasedItem
}

const (
	leaseTimeout  = 10 * time.Second
	expireTimeout = time.Hour
	// waitTimeout bounds, in real time, a wait for the engine (a move to a
	// dead-letter queue).
	waitTimeout = 10 * time.Second
)

// tq is a queue under test: its public calls and its Do.
type tq struct {
	queue.Queue
	Doer
}

// create creates a queue (1 partition unless change says otherwise).
func (e *env) create(name string, change func(*queue.QueueInfo)) tq {
	e.t.Helper()
	info := queue.QueueInfo{Name: name, LeaseTimeout: leaseTimeout, ExpireTimeout: expireTimeout, Partitions: 1}
	if change != nil {
		change(&info)
	}
	require.NoError(e.t, e.qs.Create(e.ctx, info))
	q, err := e.qs.Get(name)
	require.NoError(e.t, err)
	d, ok := q.(Doer)
	require.True(e.t, ok, "%T has no Do: a backend's queue embeds engine.Engine", q)
	return tq{Queue: q, Doer: d}
}

// do runs f in one iteration of q, preparing ids for Tx.Item, and fails the
// row on an error. f runs on the loop goroutine: it returns errors and
// leaves its results in variables the row checks after do returns.
func (e *env) do(q tq, ids []uint64, f func(tx engine.Tx, now int64) error) {
	e.t.Helper()
	require.NoError(e.t, q.Do(e.ctx, ids, f))
}

// produce stores payloads (ready) in partition 0 in one iteration, expiring
// at expire (0: never).
func (e *env) produce(q tq, expire int64, payloads ...string) {
	e.t.Helper()
	items := make([]queue.ProduceItem, len(payloads))
	for i, p := range payloads {
		items[i] = queue.ProduceItem{Payload: []byte(p), Kind: "k", Reference: "ref-" + p}
	}
	e.do(q, nil, func(tx engine.Tx, _ int64) error { return tx.Produce(0, items, expire) })
}

// lease leases up to n items of partition 0 for leaseTimeout.
func (e *env) lease(q tq, n int) []queue.LeasedItem {
	e.t.Helper()
	var out []queue.LeasedItem
	e.do(q, nil, func(tx engine.Tx, now int64) error {
		var err error
		out, _, _, err = tx.Lease(0, n, 0, now+int64(leaseTimeout), nil)
		return err
	})
	return out
}

// produceGrouped stores items given as "group:payload" (ready) in partition
// 0 in one iteration.
func (e *env) produceGrouped(q tq, items ...string) {
	e.t.Helper()
	pis := make([]queue.ProduceItem, len(items))
	for i, s := range items {
		g, p, ok := strings.Cut(s, ":")
		require.True(e.t, ok, "%q is not group:payload", s)
		pis[i] = queue.ProduceItem{Payload: []byte(p), Kind: "k", Reference: "ref-" + p, Group: g}
	}
	e.do(q, nil, func(tx engine.Tx, _ int64) error { return tx.Produce(0, pis, 0) })
}

// leaseBytes leases up to n items of partition 0 bounded by maxBytes, and
// returns them and Tx.Lease's more. Every item leased must be on its first
// attempt (the rows that call it lease each item once): an item a bound
// left had no attempt counted.
func (e *env) leaseBytes(q tq, n int, maxBytes int64) ([]queue.LeasedItem, bool) {
	e.t.Helper()
	var got []queue.LeasedItem
	var more bool
	e.do(q, nil, func(tx engine.Tx, now int64) error {
		var err error
		got, _, more, err = tx.Lease(0, n, maxBytes, now+int64(leaseTimeout), nil)
		return err
	})
	for _, x := range got {
		require.Equal(e.t, int32(1), x.Attempts, "item %q: an item left by the bound had no attempt", x.Payload)
	}
	e.leased = append(e.leased, got...)
	return got, more
}

// complete completes the items of partition 0 that leaseBytes leased with
// the given payloads.
func (e *env) complete(q tq, payloads ...string) {
	e.t.Helper()
	var ids []uint64
	for _, p := range payloads {
		i := slices.IndexFunc(e.leased, func(x queue.LeasedItem) bool { return string(x.Payload) == p })
		require.GreaterOrEqual(e.t, i, 0, "%q was not leased", p)
		ids = append(ids, e.leased[i].ID)
	}
	e.do(q, ids, func(tx engine.Tx, _ int64) error {
		xs := make([]engine.Item, len(ids))
		for i, id := range ids {
			x, ok := tx.Item(0, id)
			if !ok {
				return fmt.Errorf("item %d is gone", id)
			}
			xs[i] = x
		}
		return tx.Complete(xs)
	})
}

// item returns Tx.Item of id in partition 0, and whether it exists.
func (e *env) item(q tq, id uint64) (engine.Item, bool) {
	e.t.Helper()
	var x engine.Item
	var ok bool
	e.do(q, []uint64{id}, func(tx engine.Tx, _ int64) error {
		x, ok = tx.Item(0, id)
		return nil
	})
	return x, ok
}

// history returns Tx.Histories of item id of partition 0.
func (e *env) history(q tq, id uint64) queue.ItemErrors {
	e.t.Helper()
	var hs []queue.ItemErrors
	e.do(q, []uint64{id}, func(tx engine.Tx, _ int64) error {
		x, ok := tx.Item(0, id)
		if !ok {
			return errors.New("no such item")
		}
		var err error
		hs, err = tx.Histories([]engine.Item{x})
		return err
	})
	require.Len(e.t, hs, 1)
	return hs[0]
}

// advance moves the clock by d and runs an iteration of q, so that its
// lifecycle (Due) has run.
func (e *env) advance(q tq, d time.Duration) {
	e.t.Helper()
	e.clk.Advance(d)
	e.do(q, nil, func(engine.Tx, int64) error { return nil })
}

// ready returns the ready items of each partition, from the queue's Stats
// (Tx.ReadyCounts is exact only on some backends).
func (e *env) ready(q tq) []int {
	e.t.Helper()
	st, err := q.Stats(e.ctx)
	require.NoError(e.t, err)
	out := make([]int, len(st.Partitions))
	for i, p := range st.Partitions {
		out[i] = p.Total - p.Leased - p.Scheduled - p.Dying
	}
	return out
}

// total returns how many items q holds, in every state.
func (e *env) total(q tq) int {
	e.t.Helper()
	st, err := q.Stats(e.ctx)
	require.NoError(e.t, err)
	n := 0
	for _, p := range st.Partitions {
		n += p.Total
	}
	return n
}

func payloads(items []queue.LeasedItem) []string {
	out := make([]string, len(items))
	for i, x := range items {
		out[i] = string(x.Payload)
	}
	return out
}

var rows = []row{
	{"InfoIsTheQueuesConfiguration", func(e *env) {
		q := e.create("q", func(i *queue.QueueInfo) { i.Partitions = 3; i.MaxAttempts = 4 })
		var info queue.QueueInfo
		e.do(q, nil, func(tx engine.Tx, _ int64) error { info = tx.Info(); return nil })
		require.Equal(e.t, "q", info.Name)
		require.Equal(e.t, int32(3), info.Partitions)
		require.Equal(e.t, int32(4), info.MaxAttempts)
		require.Equal(e.t, leaseTimeout, info.LeaseTimeout)
		require.Len(e.t, e.ready(q), 3, "ReadyCounts has one count per partition")
	}},
	{"ProduceCountsReadyNotScheduled", func(e *env) {
		q := e.create("q", func(i *queue.QueueInfo) { i.Partitions = 2 })
		var within []int
		e.do(q, nil, func(tx engine.Tx, now int64) error {
			items := []queue.ProduceItem{{Payload: []byte("a")}, {Payload: []byte("b")},
				{Payload: []byte("later"), EnqueueAt: queue.FromNanos(now + int64(time.Minute))}}
			if err := tx.Produce(1, items, 0); err != nil {
				return err
			}
			var err error
			within, err = tx.ReadyCounts()
			return err
		})
		require.Equal(e.t, []int{0, 2}, within, "ReadyCounts sees the iteration's own produces, not the scheduled one")
		require.Equal(e.t, []int{0, 2}, e.ready(q))
		require.Equal(e.t, 3, e.total(q))
	}},
	{"LeaseTakesOldestReadyFirst", func(e *env) {
		q := e.create("q", nil)
		expire := queue.Nanos(queuetest.Start) + int64(expireTimeout)
		e.produce(q, expire, "a", "b", "c")
		var got []queue.LeasedItem
		var deadline int64
		e.do(q, nil, func(tx engine.Tx, now int64) error {
			deadline = now + int64(leaseTimeout)
			var err error
			got, _, _, err = tx.Lease(0, 2, 0, deadline, nil)
			return err
		})
		require.Equal(e.t, []string{"a", "b"}, payloads(got))
		for _, x := range got {
			require.Equal(e.t, int32(1), x.Attempts, "a lease is an attempt")
			require.Equal(e.t, deadline, queue.Nanos(x.LeaseDeadline))
			require.Equal(e.t, "k", x.Kind)
			require.Equal(e.t, "ref-"+string(x.Payload), x.Reference)
		}
		require.Equal(e.t, []int{1}, e.ready(q))
		x, ok := e.item(q, got[0].ID)
		require.True(e.t, ok)
		require.Equal(e.t, engine.Item{Partition: 0, ID: got[0].ID, Attempts: 1, Leased: true, LeaseDeadline: deadline,
			Expire: expire, HasHistory: x.HasHistory}, x)
		require.Equal(e.t, []string{"c"}, payloads(e.lease(q, 5)), "fewer than asked when fewer are ready")
		require.Empty(e.t, e.lease(q, 5))
	}},
	{"LeaseStopsAtMaxBytes", func(e *env) {
		q := e.create("q", nil)
		e.produce(q, 0, "aaaa", "bbbb", "cccc", "dd", "eeeeeeee", "f")
		lease := func(n int, maxBytes int64) ([]string, bool) {
			var got []queue.LeasedItem
			var more bool
			e.do(q, nil, func(tx engine.Tx, now int64) error {
				var err error
				got, _, more, err = tx.Lease(0, n, maxBytes, now+int64(leaseTimeout), nil)
				return err
			})
			for _, x := range got {
				require.Equal(e.t, int32(1), x.Attempts, "an item left by the bound had no attempt")
			}
			return payloads(got), more
		}
		got, more := lease(10, 9)
		require.Equal(e.t, []string{"aaaa", "bbbb"}, got, "stops before the item that would pass the bound")
		require.True(e.t, more)
		require.Equal(e.t, []int{4}, e.ready(q), "the items left are ready")
		got, more = lease(2, 6)
		require.Equal(e.t, []string{"cccc", "dd"}, got, "the bound reached exactly")
		require.False(e.t, more, "stopped by the count")
		got, more = lease(10, 3)
		require.Equal(e.t, []string{"eeeeeeee"}, got, "the first item whatever its size")
		require.True(e.t, more)
		got, more = lease(10, 3)
		require.Equal(e.t, []string{"f"}, got)
		require.False(e.t, more, "none left")
		require.Equal(e.t, []int{0}, e.ready(q))
	}},
	{"GroupedLeaseStopsAtMaxBytes", func(e *env) {
		// An ordered queue: a group's run is cut at the bound, its items
		// left stay ready and wait for the group (one lease at a time);
		// the first item is leased whatever its size.
		q := e.create("ordered", func(i *queue.QueueInfo) { i.Ordered = true })
		e.produceGrouped(q, "a:aaaa", "a:aa", "a:aaa", "b:bbbb", "b:bb")
		got, more := e.leaseBytes(q, 10, 3)
		require.Equal(e.t, []string{"aaaa"}, payloads(got), "the group's head whatever its size, and no more")
		require.True(e.t, more)
		got, more = e.leaseBytes(q, 10, 5)
		require.Equal(e.t, []string{"bbbb"}, payloads(got), "group a waits for its head; b's run cut at the bound")
		require.True(e.t, more)
		got, more = e.leaseBytes(q, 10, 100)
		require.Empty(e.t, got, "both groups have an item leased")
		require.False(e.t, more)
		require.Equal(e.t, []int{3}, e.ready(q), "the items left are ready")
		e.complete(q, "aaaa", "bbbb")
		got, more = e.leaseBytes(q, 10, 6)
		require.Equal(e.t, []string{"aa", "aaa"}, payloads(got), "group a's run, then b's head would pass the bound")
		require.True(e.t, more)
		got, more = e.leaseBytes(q, 10, 6)
		require.Equal(e.t, []string{"bb"}, payloads(got))
		require.False(e.t, more, "none left")

		// A fair queue: round-robin across groups, cut at the bound; the
		// next lease takes the items left.
		f := e.create("fair", nil)
		e.produceGrouped(f, "a:aaaa", "a:aa", "b:bbbb", "b:bb")
		got, more = e.leaseBytes(f, 10, 9)
		require.Equal(e.t, []string{"aaaa", "bbbb"}, payloads(got), "a's second turn would pass the bound")
		require.True(e.t, more)
		require.Equal(e.t, []int{2}, e.ready(f))
		got, more = e.leaseBytes(f, 10, 9)
		require.Equal(e.t, []string{"aa", "bb"}, payloads(got))
		require.False(e.t, more)
		require.Equal(e.t, []int{0}, e.ready(f))
	}},
	{"ItemUnknownIsFalse", func(e *env) {
		q := e.create("q", nil)
		_, ok := e.item(q, 1<<60)
		require.False(e.t, ok)
	}},
	{"CompleteDeletes", func(e *env) {
		q := e.create("q", nil)
		e.produce(q, 0, "a", "b")
		got := e.lease(q, 2)
		ids := []uint64{got[0].ID, got[1].ID}
		e.do(q, ids, func(tx engine.Tx, _ int64) error {
			x, _ := tx.Item(0, ids[0])
			return tx.Complete([]engine.Item{x})
		})
		_, ok := e.item(q, ids[0])
		require.False(e.t, ok, "a completed item is gone")
		_, ok = e.item(q, ids[1])
		require.True(e.t, ok)
		require.Equal(e.t, 1, e.total(q))
	}},
	{"RenewSetsTheLeaseDeadline", func(e *env) {
		q := e.create("q", nil)
		e.produce(q, 0, "a")
		id := e.lease(q, 1)[0].ID
		var deadline int64
		e.do(q, []uint64{id}, func(tx engine.Tx, now int64) error {
			x, _ := tx.Item(0, id)
			deadline = now + int64(time.Hour)
			return tx.Renew([]engine.Item{x}, deadline, nil)
		})
		x, ok := e.item(q, id)
		require.True(e.t, ok)
		require.True(e.t, x.Leased)
		require.Equal(e.t, deadline, x.LeaseDeadline)
	}},
	{"LeaseAndRenewStoreTheHolder", func(e *env) {
		// Issue 49, point 4: Lease stores each item's holder (holder(k)
		// for the k-th item it returns), and a Renew given the holder keeps
		// it; a listing of the queue (the read half) shows it.
		q := e.create("q", nil)
		e.produce(q, 0, "a", "b", "c")
		holders := []queue.Holder{{ClientID: "w1", KeyName: "k"}, {ClientID: "w2"}, {ClientID: "w1", KeyName: "k"}}
		var out []queue.LeasedItem
		e.do(q, nil, func(tx engine.Tx, now int64) error {
			var err error
			out, _, _, err = tx.Lease(0, 3, 0, now+int64(leaseTimeout), func(k int) queue.Holder { return holders[k] })
			return err
		})
		require.Len(e.t, out, 3)
		stored := func() map[uint64]queue.Holder {
			items, err := q.ListPage(e.ctx, queue.ListParams{Limit: 10})
			require.NoError(e.t, err)
			got := map[uint64]queue.Holder{}
			for _, it := range items {
				got[it.Meta.ID] = it.Meta.Holder
			}
			return got
		}
		want := map[uint64]queue.Holder{out[0].ID: holders[0], out[1].ID: holders[1], out[2].ID: holders[2]}
		require.Equal(e.t, want, stored())
		e.do(q, []uint64{out[1].ID}, func(tx engine.Tx, now int64) error {
			x, _ := tx.Item(0, out[1].ID)
			return tx.Renew([]engine.Item{x}, now+int64(time.Hour), []queue.Holder{holders[1]})
		})
		require.Equal(e.t, want, stored())
	}},
	{"CompleteAndRenewRefuseAnItemNotHeld", func(e *env) {
		// Issue 41: Complete and Renew act only on an item the iteration
		// holds, in its partition (on PostgreSQL, a row it locked); any
		// other fails the iteration and changes nothing, on every backend.
		q := e.create("q", func(i *queue.QueueInfo) { i.Partitions = 2 })
		e.produce(q, 0, "a")
		id := e.lease(q, 1)[0].ID
		held, ok := e.item(q, id)
		require.True(e.t, ok)
		unknown := engine.Item{Partition: 0, ID: 1 << 60, Leased: true, LeaseDeadline: held.LeaseDeadline}
		otherPartition := held
		otherPartition.Partition = 1
		for _, v := range []engine.Item{unknown, otherPartition} {
			calls := map[string]func(tx engine.Tx, now int64) error{
				"Complete": func(tx engine.Tx, _ int64) error { return tx.Complete([]engine.Item{v}) },
				"Renew":    func(tx engine.Tx, now int64) error { return tx.Renew([]engine.Item{v}, now+int64(time.Hour), nil) },
			}
			for name, call := range calls {
				err := q.Do(e.ctx, []uint64{id, v.ID}, func(tx engine.Tx, now int64) error {
					if _, ok := tx.Item(0, id); !ok {
						return errors.New("the leased item is not seen")
					}
					return call(tx, now)
				})
				require.Error(e.t, err, "%s of item %d in partition %d, which the iteration does not hold", name, v.ID, v.Partition)
				x, ok := e.item(q, id)
				require.True(e.t, ok, "%s of item %d in partition %d deleted the item of partition 0", name, v.ID, v.Partition)
				x.HasHistory = held.HasHistory // a hint, which a reload may change
				require.Equal(e.t, held, x, "%s of item %d in partition %d changed the item of partition 0", name, v.ID, v.Partition)
			}
		}
		require.Equal(e.t, 1, e.total(q))
	}},
	{"RequeueGivesANewIDAndKeepsTheHistory", func(e *env) {
		q := e.create("q", nil)
		e.produce(q, 0, "a")
		id := e.lease(q, 1)[0].ID
		var newID uint64
		var h queue.ItemErrors
		e.do(q, []uint64{id}, func(tx engine.Tx, now int64) error {
			x, _ := tx.Item(0, id)
			h = queue.RecordError(queue.ItemErrors{}, x.Attempts, "boom", now)
			return tx.Requeue(x, queue.Ending{Attempts: x.Attempts}, &h, &newID)
		})
		require.NotZero(e.t, newID, "the new id is written by Commit")
		require.NotEqual(e.t, id, newID)
		_, ok := e.item(q, id)
		require.False(e.t, ok, "the old id is gone")
		x, ok := e.item(q, newID)
		require.True(e.t, ok)
		require.False(e.t, x.Leased)
		require.Equal(e.t, int32(1), x.Attempts)
		require.True(e.t, x.HasHistory)
		requireHistory(e.t, h, e.history(q, newID))
		require.Equal(e.t, []int{1}, e.ready(q))
	}},
	{"RequeueAtSchedulesUntilDue", func(e *env) {
		q := e.create("q", nil)
		e.produce(q, 0, "a")
		id := e.lease(q, 1)[0].ID
		e.do(q, []uint64{id}, func(tx engine.Tx, now int64) error {
			x, _ := tx.Item(0, id)
			return tx.Requeue(x, queue.Ending{Attempts: x.Attempts, At: now + int64(time.Minute)}, nil, nil)
		})
		require.Equal(e.t, []int{0}, e.ready(q), "scheduled, not ready")
		require.Equal(e.t, 1, e.total(q))
		e.advance(q, time.Minute)
		require.Equal(e.t, []int{1}, e.ready(q), "Due made it ready")
		require.Equal(e.t, []string{"a"}, payloads(e.lease(q, 1)))
	}},
	{"LeaseKeepsTheFirstLeaseTime", func(e *env) {
		// Tx.Lease answers when the item was first leased in its queue:
		// this lease's time at the first, the first's through a requeue
		// and an expired lease, carried by a dead-letter move; a redriven
		// item is leased anew.
		dlq := e.create("dlq", nil)
		q := e.create("q", func(i *queue.QueueInfo) { i.DeadQueue = "dlq" })
		e.produce(q, 0, "a")
		first := e.clk.Now()
		got := e.lease(q, 1)
		require.True(e.t, first.Equal(got[0].FirstLeasedAt), "the first lease: now, got %v", got[0].FirstLeasedAt)
		e.clk.Advance(time.Second)
		id := got[0].ID
		e.do(q, []uint64{id}, func(tx engine.Tx, _ int64) error {
			x, _ := tx.Item(0, id)
			return tx.Requeue(x, queue.Ending{Attempts: x.Attempts}, nil, nil)
		})
		got = e.lease(q, 1)
		require.Equal(e.t, int32(2), got[0].Attempts)
		require.True(e.t, first.Equal(got[0].FirstLeasedAt), "kept by a requeue, got %v", got[0].FirstLeasedAt)
		e.advance(q, leaseTimeout) // the lease expires: requeued by Due
		got = e.lease(q, 1)
		require.Equal(e.t, int32(3), got[0].Attempts)
		require.True(e.t, first.Equal(got[0].FirstLeasedAt), "kept through an expired lease, got %v", got[0].FirstLeasedAt)

		id = got[0].ID
		e.do(q, []uint64{id}, func(tx engine.Tx, _ int64) error {
			x, _ := tx.Item(0, id)
			_, err := tx.Kill(x, queue.ReasonExplicit, nil)
			return err
		})
		require.Eventually(e.t, func() bool { return e.total(dlq) == 1 && e.total(q) == 0 }, waitTimeout, time.Millisecond)
		e.clk.Advance(time.Second)
		got = e.lease(dlq, 1)
		require.Equal(e.t, int32(4), got[0].Attempts, "a dead item keeps its attempts")
		require.True(e.t, first.Equal(got[0].FirstLeasedAt), "and its first lease, got %v", got[0].FirstLeasedAt)

		ri := []queue.RedriveItem{{SourceKey: queue.RedriveKey("dlq", got[0].ID), Body: queue.ItemBody{Payload: []byte("a"), RedriveCount: 1}}}
		e.do(q, nil, func(tx engine.Tx, now int64) error { return tx.Redrive(0, ri, now+int64(time.Hour)) })
		e.clk.Advance(time.Second)
		again := e.clk.Now()
		got = e.lease(q, 1)
		require.Equal(e.t, int32(1), got[0].Attempts)
		require.True(e.t, again.Equal(got[0].FirstLeasedAt), "a redriven item is leased anew, got %v", got[0].FirstLeasedAt)

		// A grouped lease (the group index; PostgreSQL's group statements)
		// sets it too.
		e.produceGrouped(q, "g:b")
		e.clk.Advance(time.Second)
		again = e.clk.Now()
		got = e.lease(q, 1)
		require.Equal(e.t, []string{"b"}, payloads(got))
		require.True(e.t, again.Equal(got[0].FirstLeasedAt), "got %v", got[0].FirstLeasedAt)
	}},
	{"DueEndsExpiredLeasesAndItems", func(e *env) {
		q := e.create("q", nil)
		start := queue.Nanos(queuetest.Start)
		e.produce(q, start+int64(time.Hour), "leased", "expiring")
		id := e.lease(q, 1)[0].ID
		e.clk.Advance(leaseTimeout)
		// The lifecycle (Due, then Requeue or Kill) runs before the
		// iteration's requests.
		_, ok := e.item(q, id)
		require.False(e.t, ok, "an expired lease ends")
		require.Equal(e.t, []int{2}, e.ready(q), "its item is ready again")
		got := e.lease(q, 2)
		require.Equal(e.t, []string{"expiring", "leased"}, payloads(got), "requeued at the tail")
		require.Equal(e.t, int32(2), got[1].Attempts, "the expired lease was an attempt")
		require.Equal(e.t, queue.LeaseExpiredError(leaseTimeout), e.history(q, got[1].ID).LastError)
		for _, x := range got {
			e.do(q, []uint64{x.ID}, func(tx engine.Tx, _ int64) error {
				v, _ := tx.Item(0, x.ID)
				return tx.Requeue(v, queue.Ending{Attempts: v.Attempts}, nil, nil)
			})
		}
		e.advance(q, time.Hour)
		require.Equal(e.t, []int{0}, e.ready(q), "items past their expire deadline die")
		require.Zero(e.t, e.total(q), "without a dead-letter queue, dropped")
	}},
	{"KillMovesToTheDeadLetterQueue", func(e *env) {
		dlq := e.create("dlq", nil)
		q := e.create("q", func(i *queue.QueueInfo) { i.DeadQueue = "dlq" })
		e.produce(q, 0, "a")
		id := e.lease(q, 1)[0].ID
		var h queue.ItemErrors
		e.do(q, []uint64{id}, func(tx engine.Tx, now int64) error {
			x, _ := tx.Item(0, id)
			h = queue.RecordError(queue.ItemErrors{}, x.Attempts, "bad", now)
			_, err := tx.Kill(x, queue.ReasonExplicit, &h)
			return err
		})
		require.Eventually(e.t, func() bool { return e.total(dlq) == 1 && e.total(q) == 0 }, waitTimeout, time.Millisecond,
			"the dead item moves (at once, or once its move ends)")
		items, err := dlq.List(e.ctx, 0, 0, 10)
		require.NoError(e.t, err)
		require.Len(e.t, items, 1)
		require.Equal(e.t, "a", string(items[0].Body.Payload))
		require.Equal(e.t, queue.ReasonExplicit, items[0].Body.DeadReason)
		require.Equal(e.t, "q", items[0].Body.SourceQueue)
		require.Equal(e.t, h.LastError, items[0].Errors.LastError)
		require.Equal(e.t, int32(1), items[0].Meta.Attempts)
	}},
	{"KillWithoutADeadLetterQueueDrops", func(e *env) {
		q := e.create("q", nil)
		e.produce(q, 0, "a")
		id := e.lease(q, 1)[0].ID
		e.do(q, []uint64{id}, func(tx engine.Tx, _ int64) error {
			x, _ := tx.Item(0, id)
			_, err := tx.Kill(x, queue.ReasonMaxAttempts, nil)
			return err
		})
		require.Zero(e.t, e.total(q))
	}},
	{"ImportAndHeld", func(e *env) {
		q := e.create("q", nil)
		key := queue.ImportKey(0, "src-1")
		var stored []queue.Item
		var within map[string]queue.Item
		e.do(q, nil, func(tx engine.Tx, now int64) error {
			items := []queue.Item{{Partition: 0, Meta: queue.ItemMeta{Attempts: 2, SourceKey: key, CreatedAt: queue.FromNanos(now - 1000),
				ExpireDeadline: queue.FromNanos(now + int64(time.Hour))}, Body: queue.ItemBody{Payload: []byte("x"), SourceID: "src-1"},
				Errors: queue.ItemErrors{LastError: "earlier"}}}
			var err error
			if stored, err = tx.Import(0, items); err != nil {
				return err
			}
			within, err = tx.Held(0, []string{key, queue.ImportKey(0, "other")})
			return err
		})
		require.Len(e.t, stored, 1)
		require.NotZero(e.t, stored[0].Meta.ID)
		require.Equal(e.t, int32(2), stored[0].Meta.Attempts)
		require.Equal(e.t, "x", string(stored[0].Body.Payload))
		require.Contains(e.t, within, key, "Held sees the iteration's own imports")
		require.Len(e.t, within, 1)
		var held map[string]queue.Item
		e.do(q, nil, func(tx engine.Tx, _ int64) error {
			var err error
			held, err = tx.Held(0, []string{key})
			return err
		})
		require.Equal(e.t, stored[0].Meta.ID, held[key].Meta.ID)
		require.Equal(e.t, "x", string(held[key].Body.Payload))
		require.Equal(e.t, "earlier", held[key].Errors.LastError)
		require.Equal(e.t, []int{1}, e.ready(q))
	}},
	{"RedriveSkipsAKeyTheQueueHolds", func(e *env) {
		q := e.create("q", nil)
		ri := []queue.RedriveItem{{SourceKey: queue.RedriveKey("dlq", 7), Body: queue.ItemBody{Payload: []byte("r"), RedriveCount: 1},
			Errors: queue.ItemErrors{LastError: "was dead"}}}
		for range 2 { // a redrive step run twice
			e.do(q, nil, func(tx engine.Tx, now int64) error { return tx.Redrive(0, ri, now+int64(time.Hour)) })
		}
		require.Equal(e.t, 1, e.total(q))
		got := e.lease(q, 1)
		require.Equal(e.t, []string{"r"}, payloads(got))
		items, err := q.List(e.ctx, 0, 0, 10)
		require.NoError(e.t, err)
		require.Equal(e.t, int32(1), items[0].Body.RedriveCount, "stored as the engine gave it")
		require.Equal(e.t, "was dead", items[0].Errors.LastError)
	}},
	{"DeleteSkipsLeasedWhenAsked", func(e *env) {
		q := e.create("q", nil)
		e.produce(q, 0, "a", "b")
		leased := e.lease(q, 1)[0].ID
		refs := []queue.ItemRef{{Partition: 0, ID: leased}, {Partition: 0, ID: 1 << 60}}
		var n int
		e.do(q, []uint64{leased}, func(tx engine.Tx, _ int64) error {
			var err error
			n, err = tx.Delete(refs, true)
			return err
		})
		require.Zero(e.t, n, "a leased item is skipped, an unknown id too")
		e.do(q, []uint64{leased}, func(tx engine.Tx, _ int64) error {
			var err error
			n, err = tx.Delete(refs, false)
			return err
		})
		require.Equal(e.t, 1, n)
		require.Equal(e.t, 1, e.total(q))
	}},
	{"ClearSelectsByState", func(e *env) {
		q := e.create("q", nil)
		e.produce(q, 0, "leased", "ready")
		e.lease(q, 1)
		e.do(q, nil, func(tx engine.Tx, now int64) error {
			return tx.Produce(0, []queue.ProduceItem{{Payload: []byte("s"), EnqueueAt: queue.FromNanos(now + int64(time.Hour))}}, 0)
		})
		clear := func(p queue.ClearParams) {
			e.do(q, nil, func(tx engine.Tx, _ int64) error { return tx.Clear(p) })
		}
		clear(queue.ClearParams{Queue: true})
		require.Equal(e.t, 2, e.total(q), "ready items go")
		clear(queue.ClearParams{Scheduled: true})
		require.Equal(e.t, 1, e.total(q), "scheduled items go")
		clear(queue.ClearParams{Queue: true, Scheduled: true})
		require.Equal(e.t, 1, e.total(q), "a leased item stays")
		clear(queue.ClearParams{Destructive: true})
		require.Zero(e.t, e.total(q))
	}},
	{"EditChangesBodyAndHistory", func(e *env) {
		q := e.create("q", nil)
		e.produce(q, 0, "a", "b")
		leased := e.lease(q, 1)[0].ID
		items, err := q.List(e.ctx, 0, 0, 10)
		require.NoError(e.t, err)
		rest := items[1].Meta.ID
		var out queue.Item
		e.do(q, nil, func(tx engine.Tx, _ int64) error {
			var err error
			out, err = tx.Edit(queue.ItemRef{Partition: 0, ID: rest}, func(it *queue.Item) error {
				it.Body.Payload = []byte("edited")
				it.Errors = queue.ItemErrors{LastError: "noted"}
				return nil
			})
			return err
		})
		require.Equal(e.t, "edited", string(out.Body.Payload))
		items, err = q.List(e.ctx, 0, 0, 10)
		require.NoError(e.t, err)
		require.Equal(e.t, "edited", string(items[1].Body.Payload))
		require.Equal(e.t, "noted", items[1].Errors.LastError)
		edit := func(id uint64, f func(*queue.Item) error) error {
			return q.Do(e.ctx, nil, func(tx engine.Tx, _ int64) error {
				_, err := tx.Edit(queue.ItemRef{Partition: 0, ID: id}, f)
				return err
			})
		}
		nop := func(*queue.Item) error { return nil }
		requireCode(e.t, edit(1<<60, nop), apierr.NotFound)
		requireCode(e.t, edit(leased, nop), apierr.Conflict)
		refuse := apierr.Invalidf("refused")
		require.ErrorIs(e.t, edit(rest, func(it *queue.Item) error { it.Body.Payload = []byte("no"); return refuse }), refuse)
		items, err = q.List(e.ctx, 0, 0, 10)
		require.NoError(e.t, err)
		require.Equal(e.t, "edited", string(items[1].Body.Payload), "edit's error changes nothing")
	}},
	{"ReadsSeeTheIterationsOwnWrites", func(e *env) {
		// Tx.Stats, Tx.Scheduled and Tx.ErrorGroups read the queue as the
		// iteration sees it: its own produces and deaths count.
		dlq := e.create("dlq", nil)
		q := e.create("q", func(i *queue.QueueInfo) { i.DeadQueue = "dlq" })
		e.produce(q, 0, "a")
		var st queue.Stats
		var sched []queue.Item
		e.do(q, nil, func(tx engine.Tx, now int64) error {
			items := []queue.ProduceItem{{Payload: []byte("b")}, {Payload: []byte("later"), EnqueueAt: queue.FromNanos(now + int64(time.Minute))}}
			if err := tx.Produce(0, items, 0); err != nil {
				return err
			}
			var err error
			if st, err = tx.Stats(); err != nil {
				return err
			}
			sched, err = tx.Scheduled(queue.ListParams{Partition: 0, Limit: 10})
			return err
		})
		require.Len(e.t, st.Partitions, 1)
		require.Equal(e.t, 3, st.Partitions[0].Total, "the iteration's own produces count")
		require.Equal(e.t, 1, st.Partitions[0].Scheduled)
		require.Equal(e.t, []string{"later"}, func() (out []string) {
			for _, x := range sched {
				out = append(out, string(x.Body.Payload))
			}
			return out
		}())
		id := e.lease(q, 1)[0].ID
		e.do(q, []uint64{id}, func(tx engine.Tx, now int64) error {
			x, _ := tx.Item(0, id)
			h := queue.RecordError(queue.ItemErrors{}, x.Attempts, "boom 42", now)
			_, err := tx.Kill(x, queue.ReasonExplicit, &h)
			return err
		})
		require.Eventually(e.t, func() bool { return e.total(dlq) == 1 }, waitTimeout, time.Millisecond)
		var g queue.ErrorGroups
		e.do(dlq, nil, func(tx engine.Tx, _ int64) error {
			var err error
			g, err = tx.ErrorGroups(queue.ErrorGroupFilter{}, 10)
			return err
		})
		require.Len(e.t, g.Groups, 1)
		require.Equal(e.t, "q", g.Groups[0].SourceQueue)
		require.Equal(e.t, queue.ReasonExplicit, g.Groups[0].Reason)
		require.Equal(e.t, "boom 42", g.Groups[0].SampleError)
		require.EqualValues(e.t, 1, g.Groups[0].Count)
		require.Equal(e.t, 1, g.TotalGroups)
	}},
	{"ReloadAnswersOnceDone", func(e *env) {
		q := e.create("q", nil)
		e.produce(q, 0, "a")
		require.NoError(e.t, q.Reload(e.ctx))
		require.Equal(e.t, 1, e.total(q), "a reload keeps what is stored")
		require.NoError(e.t, e.qs.Delete(e.ctx, "q"))
		err := q.Reload(e.ctx)
		require.Error(e.t, err, "the reload of a deleted queue fails")
	}},
	{"FailedIterationIsDropped", func(e *env) {
		q := e.create("q", nil)
		e.produce(q, 0, "kept")
		broken := errors.New("storage broke")
		err := q.Do(e.ctx, nil, func(tx engine.Tx, _ int64) error {
			if err := tx.Produce(0, []queue.ProduceItem{{Payload: []byte("lost")}}, 0); err != nil {
				return err
			}
			return broken
		})
		require.Error(e.t, err, "a failed iteration is never answered success")
		require.Equal(e.t, []string{"kept"}, payloads(e.lease(q, 5)), "and nothing of it is stored")
		require.Equal(e.t, 1, e.total(q))
	}},
}

// requireCode fails unless err is an apierr error with code.
func requireCode(t *testing.T, err error, code apierr.Code) {
	t.Helper()
	ae, ok := apierr.As(err)
	require.True(t, ok, "%v", err)
	require.Equal(t, code, ae.Code, "%v", err)
}

// requireHistory fails unless got is want (times compared as instants).
func requireHistory(t *testing.T, want, got queue.ItemErrors) {
	t.Helper()
	require.Equal(t, want.LastError, got.LastError)
	require.Len(t, got.Errors, len(want.Errors))
	for i, w := range want.Errors {
		g := got.Errors[i]
		require.Equal(t, w.Attempt, g.Attempt)
		require.Equal(t, w.Error, g.Error)
		require.True(t, w.At.Equal(g.At), "at %v, want %v", g.At, w.At)
	}
}

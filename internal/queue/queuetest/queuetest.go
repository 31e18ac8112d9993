// Package queuetest is the queue-semantics conformance suite: a table of
// named behaviours that every backend (embedded.Manager on memory and
// Pebble, postgres.Manager on PostgreSQL) must show through the
// queue.Queues/queue.Queue API, without HTTP. The semantics of Querator's v1
// API that Styx keeps (inclusive list pivots, namespaces, import idempotent
// on source_id, queue.clear) and the rules of the item lifecycle (leases,
// attempts, retry outcomes, dead-letter queues, redrive) are the source of
// every row; the HTTP tests in service stay for the wire itself.
// docs/conformance.md lists every rule of the wire contract with the row
// (or the service test) that checks it: a new rule gets its row there.
//
// The partition a dead item enters is asserted (one rule on every engine:
// the produce rule, item by item; DeadItemsEnterFewestReadyPartition). The
// partition a produced item goes to follows the same rule, but on
// PostgreSQL from each node's own view (ADR 0014), so it is never asserted;
// neither are Stats.Dying and Stats.MovesInFlight (always 0 on PostgreSQL,
// where a move is one statement; ADR 0014).
//
// Time is a clock.Fake: rows move it with Advance and never sleep. The
// engines' loops sleep on real timers computed from the clock, so a
// lifecycle step that Advance makes due (an expired lease, a scheduled
// item, an expire deadline) runs at the loop's next iteration, which the
// suite starts with a request that goes through the loop (see tick). Moves
// to a dead-letter queue that the lifecycle starts are asynchronous on the
// embedded engine, so rows that wait for one poll with a deadline.
package queuetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/apierr"
	"github.com/styxq/styx/internal/clock"
	"github.com/styxq/styx/internal/queue"
)

// Open returns a fresh, empty set of queues reading time from clk, closed
// when t ends (t.Cleanup).
type Open func(t *testing.T, clk clock.Clock) queue.Queues

// Skip names a row that a backend does not pass and why. Reason must name
// the divergence and the issue that tracks it; the row is skipped with it.
type Skip struct {
	Row    string
	Reason string
}

// Start is the time every row's fake clock starts at.
var Start = time.Date(2030, time.January, 2, 3, 4, 5, 0, time.UTC)

// Run runs every row of the suite as a parallel subtest of t, each on its
// own queues from open and its own clock.Fake set to Start. skips lists the rows this
// backend skips (see Skip); a skip naming no row fails the run, so a stale
// skip cannot hide.
func Run(t *testing.T, open Open, skips ...Skip) {
	reasons := map[string]string{}
	for _, s := range skips {
		reasons[s.Row] = s.Reason
	}
	for _, r := range slices.Concat(rows, coverageRows, dedupRows, groupRows) {
		why, skip := reasons[r.name]
		t.Run(r.name, func(t *testing.T) {
			if skip {
				t.Skip(why)
			}
			t.Parallel()
			clk := clock.NewFake(Start)
			r.run(&env{t: t, ctx: t.Context(), clk: clk, qs: open(t, clk)})
		})
		delete(reasons, r.name)
	}
	for name := range reasons {
		t.Errorf("queuetest: skip names no row: %q", name)
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
	// clients numbers lease client ids.
	clients atomic.Int64
}

// Queue settings of the rows unless they say otherwise.
const (
	leaseTimeout  = 10 * time.Second
	expireTimeout = 24 * time.Hour
	dlqExpire     = 30 * 24 * time.Hour
	// waitTimeout bounds, in real time, how long a row waits for the
	// engine (a lease it expects to be served, a move to a dead-letter
	// queue). Only a broken rule or a stalled machine reaches it.
	waitTimeout = 10 * time.Second
	// probeTimeout is how long, in real time, a lease that must find
	// nothing waits before the row accepts that nothing came.
	probeTimeout = 50 * time.Millisecond
)

// create creates a queue named name (1 partition, the lease and expire
// timeouts above, no max_attempts) after change edits it, and returns it.
func (e *env) create(name string, change func(*queue.QueueInfo)) queue.Queue {
	e.t.Helper()
	info := queue.QueueInfo{Name: name, LeaseTimeout: leaseTimeout, ExpireTimeout: expireTimeout, Partitions: 1}
	if change != nil {
		change(&info)
	}
	require.NoError(e.t, e.qs.Create(e.ctx, info))
	q, err := e.qs.Get(name)
	require.NoError(e.t, err)
	return q
}

// withDLQ creates the dead-letter queue dlq and a queue q that sends its
// dead items there.
func (e *env) withDLQ(change func(*queue.QueueInfo)) (q, dlq queue.Queue) {
	e.t.Helper()
	dlq = e.create("dlq", func(i *queue.QueueInfo) { i.ExpireTimeout = dlqExpire })
	q = e.create("q", func(i *queue.QueueInfo) {
		i.DeadQueue = "dlq"
		if change != nil {
			change(i)
		}
	})
	return q, dlq
}

// produce adds one ready item per payload, in order, in one call.
func (e *env) produce(q queue.Queue, payloads ...string) {
	e.t.Helper()
	items := make([]queue.ProduceItem, len(payloads))
	for i, p := range payloads {
		items[i] = queue.ProduceItem{Kind: "k", Payload: []byte(p)}
	}
	require.NoError(e.t, q.Produce(e.ctx, items))
}

// lease leases up to n items and requires at least one.
func (e *env) lease(q queue.Queue, n int) queue.LeaseResult {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.ctx, waitTimeout)
	defer cancel()
	res, err := q.Lease(ctx, queue.LeaseParams{BatchSize: n, ClientID: e.client(), Timeout: time.Minute})
	require.NoError(e.t, err, "lease from queue '%s'", q.Name())
	require.NotEmpty(e.t, res.Items)
	return res
}

// leaseOne leases one item and requires its payload to be want.
func (e *env) leaseOne(q queue.Queue, want string) (int32, queue.LeasedItem) {
	e.t.Helper()
	res := e.lease(q, 1)
	require.Len(e.t, res.Items, 1)
	require.Equal(e.t, want, string(res.Items[0].Payload))
	return res.Partition, res.Items[0]
}

// leaseNone requires that a lease finds nothing to hand out: it waits
// probeTimeout of real time (the fake clock does not move, so the lease's
// own request timeout never passes) and must get nothing.
func (e *env) leaseNone(q queue.Queue) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.ctx, probeTimeout)
	defer cancel()
	res, err := q.Lease(ctx, queue.LeaseParams{BatchSize: 1000, ClientID: e.client(), Timeout: time.Minute})
	require.Error(e.t, err, "lease from queue '%s' got %d items", q.Name(), len(res.Items))
	require.Empty(e.t, res.Items)
	require.True(e.t, errors.Is(err, context.DeadlineExceeded), "lease from queue '%s': %v", q.Name(), err)
}

func (e *env) client() string { return fmt.Sprintf("c%d", e.clients.Add(1)) }

// leasableAfter requires that q hands out nothing now and nothing 1 ms
// before d has passed, then moves the clock to d, when the row expects an
// item to be leasable.
func (e *env) leasableAfter(q queue.Queue, d time.Duration) {
	e.t.Helper()
	e.leaseNone(q)
	e.advance(d-time.Millisecond, q)
	e.leaseNone(q)
	e.advance(time.Millisecond, q)
}

// tick sends q's loop a request that changes nothing (a delete of an id
// that does not exist), so that the lifecycle work the clock made due runs.
// Stats does not do it on every engine: postgres reads Stats straight from
// the database.
func (e *env) tick(q queue.Queue) {
	e.t.Helper()
	n, err := q.Delete(e.ctx, []queue.ItemRef{{Partition: 0, ID: 1 << 60}})
	require.NoError(e.t, err)
	require.Zero(e.t, n)
}

// advance moves the clock by d and ticks each queue.
func (e *env) advance(d time.Duration, qs ...queue.Queue) {
	e.t.Helper()
	e.clk.Advance(d)
	for _, q := range qs {
		e.tick(q)
	}
}

// items returns every item q holds, in id order, as stored.
func (e *env) items(q queue.Queue) []queue.Item {
	e.t.Helper()
	info, err := e.qs.Info(e.ctx, q.Name())
	require.NoError(e.t, err)
	items, _, err := q.Scan(e.ctx, info.Partitions, &queue.DeadFilter{}, queue.ScanParams{Limit: 10_000})
	require.NoError(e.t, err)
	return items
}

// eventuallyItems waits until q holds n items and returns them: moves to
// a dead-letter queue that the lifecycle decides are asynchronous on the
// embedded engine.
func (e *env) eventuallyItems(q queue.Queue, n int) []queue.Item {
	e.t.Helper()
	var items []queue.Item
	require.Eventually(e.t, func() bool {
		items = e.items(q)
		return len(items) == n
	}, waitTimeout, 5*time.Millisecond, "queue '%s' should hold %d items", q.Name(), n)
	return items
}

// waitLeaseWaiting waits until n leases wait on q (Stats.LeaseWaiting).
// leaseWaiting starts a lease of up to batch items on q (client "w", a
// minute's request timeout) in the background, waits until it is waiting,
// and returns a function that waits for its answer.
func (e *env) leaseWaiting(q queue.Queue, batch int) func() (queue.LeaseResult, error) {
	e.t.Helper()
	type answer struct {
		res queue.LeaseResult
		err error
	}
	done := make(chan answer, 1)
	ctx, cancel := context.WithTimeout(e.ctx, waitTimeout)
	e.t.Cleanup(cancel)
	go func() {
		res, err := q.Lease(ctx, queue.LeaseParams{BatchSize: batch, ClientID: "w", Timeout: time.Minute})
		done <- answer{res, err}
	}()
	e.waitLeaseWaiting(q, 1)
	return func() (queue.LeaseResult, error) { a := <-done; return a.res, a.err }
}

func (e *env) waitLeaseWaiting(q queue.Queue, n int) {
	e.t.Helper()
	require.Eventually(e.t, func() bool {
		st, err := q.Stats(e.ctx)
		return err == nil && st.LeaseWaiting == n
	}, waitTimeout, time.Millisecond, "queue '%s' should have %d waiting leases", q.Name(), n)
}

// counts sums q's partition stats.
type counts struct{ total, ready, leased, scheduled, failures int }

func (e *env) counts(q queue.Queue) (counts, queue.Stats) {
	e.t.Helper()
	st, err := q.Stats(e.ctx)
	require.NoError(e.t, err)
	var c counts
	for _, p := range st.Partitions {
		c.total += p.Total
		c.leased += p.Leased
		c.scheduled += p.Scheduled
		c.failures += p.Failures
		c.ready += p.Total - p.Leased - p.Scheduled - p.Dying
	}
	return c, st
}

// requireNotLeased requires err to be the 400 of queue.NotLeased naming id.
func requireNotLeased(t *testing.T, err error, id uint64) {
	t.Helper()
	require.Error(t, err)
	ae, ok := apierr.As(err)
	require.True(t, ok, "want a client error, got %v", err)
	require.Equal(t, apierr.Invalid, ae.Code)
	require.Contains(t, ae.Message, "'"+queue.FormatID(id)+"'")
	require.Contains(t, ae.Message, "not leased")
	require.ErrorIs(t, err, queue.ErrNotLeased, "the doors recognise it by its sentinel")
}

func payloads(items []queue.LeasedItem) []string {
	out := make([]string, len(items))
	for i, x := range items {
		out[i] = string(x.Payload)
	}
	return out
}

func errorTexts(h queue.ItemErrors) []string {
	out := make([]string, len(h.Errors))
	for i, x := range h.Errors {
		out[i] = fmt.Sprintf("%d:%s", x.Attempt, x.Error)
	}
	return out
}

// deadLetter leases the item with payload p from q (one partition) and
// retries it dead with error msg.
func (e *env) deadLetter(q queue.Queue, p, msg string) queue.RetryOutcome {
	e.t.Helper()
	part, x := e.leaseOne(q, p)
	out, err := q.Retry(e.ctx, part, []queue.RetryItem{{ID: x.ID, Dead: true, Error: msg}})
	require.NoError(e.t, err)
	require.Len(e.t, out, 1)
	return out[0]
}

var rows = []row{
	{"FIFOWithinPartition", func(e *env) {
		q := e.create("q", nil)
		e.produce(q, "a", "b", "c")
		e.produce(q, "d")
		e.produce(q, "e", "f", "g")
		first := e.lease(q, 3)
		require.Equal(e.t, []string{"a", "b", "c"}, payloads(first.Items))
		rest := e.lease(q, 10)
		require.Equal(e.t, []string{"d", "e", "f", "g"}, payloads(rest.Items))
		ids := slices.Concat(first.Items, rest.Items)
		for i := 1; i < len(ids); i++ {
			require.Greater(e.t, ids[i].ID, ids[i-1].ID, "ids increase in FIFO order")
		}
	}},
	{"FIFOWithinEachPartition", func(e *env) {
		// Which partition an item goes to is not asserted (on PostgreSQL
		// each node places from its own view; ADR 0014): only the order
		// within each.
		q := e.create("q", func(i *queue.QueueInfo) { i.Partitions = 3 })
		for i := range 12 {
			e.produce(q, fmt.Sprintf("%02d", i))
		}
		byPart := map[int32][]string{}
		for n := 0; n < 12; {
			res := e.lease(q, 2)
			byPart[res.Partition] = append(byPart[res.Partition], payloads(res.Items)...)
			n += len(res.Items)
		}
		for p, got := range byPart {
			require.True(e.t, slices.IsSorted(got), "partition %d handed out %v", p, got)
		}
		e.leaseNone(q)
	}},
	{"WaitingLeaseServedByProduce", func(e *env) {
		q := e.create("q", nil)
		wait := e.leaseWaiting(q, 5)
		// client_id is unique among the queue's waiting leases.
		_, err := q.Lease(e.ctx, queue.LeaseParams{BatchSize: 1, ClientID: "w", Timeout: time.Minute})
		ae, ok := apierr.As(err)
		require.True(e.t, ok, "duplicate client_id: %v", err)
		require.Equal(e.t, apierr.Invalid, ae.Code)
		require.Equal(e.t, "duplicate client id; a client cannot make multiple leased requests to the same queue", ae.Message)
		e.produce(q, "a")
		res, err := wait()
		require.NoError(e.t, err)
		require.Equal(e.t, []string{"a"}, payloads(res.Items))
	}},
	{"WaitingLeaseTimesOut", func(e *env) {
		q := e.create("q", nil)
		errc := make(chan error, 1)
		ctx, cancel := context.WithTimeout(e.ctx, waitTimeout)
		defer cancel()
		go func() {
			_, err := q.Lease(ctx, queue.LeaseParams{BatchSize: 1, ClientID: "w", Timeout: 5 * time.Second})
			errc <- err
		}()
		e.waitLeaseWaiting(q, 1)
		e.advance(5*time.Second-time.Millisecond, q)
		select {
		case err := <-errc:
			require.FailNow(e.t, "lease answered before its request timeout", "%v", err)
		default:
		}
		e.advance(time.Millisecond, q)
		err := <-errc
		ae, ok := apierr.As(err)
		require.True(e.t, ok, "%v", err)
		require.Equal(e.t, apierr.Retry, ae.Code)
		require.Equal(e.t, "request timeout; no items are in the queue, try again", ae.Message)
		require.ErrorIs(e.t, err, queue.ErrNoItems, "the doors recognise it by its sentinel")
		e.waitLeaseWaiting(q, 0)
	}},
	{"LeaseIsExclusive", func(e *env) {
		q := e.create("q", nil)
		e.produce(q, "a")
		_, x := e.leaseOne(q, "a")
		require.Equal(e.t, int32(1), x.Attempts)
		require.True(e.t, x.LeaseDeadline.Equal(Start.Add(leaseTimeout)), "lease deadline %v", x.LeaseDeadline)
		e.leaseNone(q)
		// Still exclusive just before the lease ends.
		e.advance(leaseTimeout-time.Millisecond, q)
		e.leaseNone(q)
		c, _ := e.counts(q)
		require.Equal(e.t, counts{total: 1, leased: 1}, c)
	}},
	{"LeaseExpiryCountsAttemptAndRequeues", func(e *env) {
		q := e.create("q", nil)
		e.produce(q, "a", "b")
		part, x := e.leaseOne(q, "a")
		e.advance(leaseTimeout, q)
		// The expired item went to the tail: b first, then a again with
		// its second attempt.
		e.leaseOne(q, "b")
		_, again := e.leaseOne(q, "a")
		require.Equal(e.t, int32(2), again.Attempts)
		require.NotEqual(e.t, x.ID, again.ID, "a requeued item gets a new id")
		// The old lease is gone.
		requireNotLeased(e.t, q.Complete(e.ctx, part, []uint64{x.ID}), x.ID)
		var a queue.Item
		for _, it := range e.items(q) {
			if string(it.Body.Payload) == "a" {
				a = it
			}
		}
		want := queue.LeaseExpiredError(leaseTimeout)
		require.Equal(e.t, "lease expired after 10s", want)
		require.Equal(e.t, want, a.Errors.LastError)
		require.Equal(e.t, []string{"1:" + want}, errorTexts(a.Errors))
		require.True(e.t, a.Errors.Errors[0].At.Equal(Start.Add(leaseTimeout)), "recorded at %v", a.Errors.Errors[0].At)
	}},
	{"CompleteRemoves", func(e *env) {
		q := e.create("q", nil)
		e.produce(q, "a", "b")
		res := e.lease(q, 2)
		require.Len(e.t, res.Items, 2)
		require.NoError(e.t, q.Complete(e.ctx, res.Partition, []uint64{res.Items[0].ID}))
		items := e.items(q)
		require.Len(e.t, items, 1)
		require.Equal(e.t, "b", string(items[0].Body.Payload))
		c, _ := e.counts(q)
		require.Equal(e.t, counts{total: 1, leased: 1}, c)
		// Completed items are gone: a second complete is refused.
		requireNotLeased(e.t, q.Complete(e.ctx, res.Partition, []uint64{res.Items[0].ID}), res.Items[0].ID)
		require.NoError(e.t, q.Complete(e.ctx, res.Partition, []uint64{res.Items[1].ID}))
		require.Empty(e.t, e.items(q))
	}},
	{"DeleteReceivedUnlessLeasedSince", func(e *env) {
		q, dlq := e.withDLQ(func(i *queue.QueueInfo) { i.MaxAttempts = 3 })
		receipt := func(x queue.LeasedItem) queue.Receipt {
			require.NotZero(e.t, x.FirstID)
			return queue.Receipt{ID: x.ID, FirstID: x.FirstID, Attempts: x.Attempts}
		}
		deleted := func(part int32, r queue.Receipt, want bool) {
			e.t.Helper()
			ok, err := q.DeleteReceived(e.ctx, part, []queue.Receipt{r})
			require.NoError(e.t, err)
			require.Equal(e.t, []bool{want}, ok)
		}
		// Under its lease.
		e.produce(q, "a")
		part, a := e.leaseOne(q, "a")
		require.Equal(e.t, a.ID, a.FirstID, "an item never requeued has its first id")
		deleted(part, receipt(a), true)
		require.Empty(e.t, e.items(q))
		deleted(part, receipt(a), false)
		// After its lease expired, nobody having leased it since: the
		// lease ends in the same iteration as the delete.
		e.produce(q, "b")
		part, b := e.leaseOne(q, "b")
		e.clk.Advance(leaseTimeout)
		deleted(part, receipt(b), true)
		require.Empty(e.t, e.items(q))
		// After a retry ended the lease, and after a second requeue.
		e.produce(q, "c")
		part, c := e.leaseOne(q, "c")
		out, err := q.Retry(e.ctx, part, []queue.RetryItem{{ID: c.ID}})
		require.NoError(e.t, err)
		require.NotEqual(e.t, c.ID, out[0].NewID)
		deleted(part, receipt(c), true)
		require.Empty(e.t, e.items(q))
		// Leased again since: the old receipt deletes nothing, whether the
		// new lease is live or has ended too; the new one deletes it.
		e.produce(q, "d")
		part, d1 := e.leaseOne(q, "d")
		e.advance(leaseTimeout, q)
		_, d2 := e.leaseOne(q, "d")
		require.Equal(e.t, d1.FirstID, d2.FirstID, "the first id stays across requeues")
		require.NotEqual(e.t, d1.ID, d2.ID)
		deleted(part, receipt(d1), false)
		e.advance(leaseTimeout, q)
		deleted(part, receipt(d1), false)
		c0, _ := e.counts(q)
		require.Equal(e.t, counts{total: 1, ready: 1, failures: 1}, c0)
		deleted(part, receipt(d2), true)
		c0, _ = e.counts(q)
		require.Equal(e.t, counts{}, c0)
		// A dead-lettered item is not deleted from its dead-letter queue.
		e.produce(q, "e")
		var x queue.LeasedItem
		for range 3 { // max_attempts 3: the third lease's end kills it
			part, x = e.leaseOne(q, "e")
			e.advance(leaseTimeout, q)
		}
		e.eventuallyItems(dlq, 1)
		deleted(part, receipt(x), false)
		require.Len(e.t, e.items(dlq), 1)
		// Several receipts in one call, the same one twice among them:
		// the second finds the item gone.
		e.produce(q, "f", "g")
		res := e.lease(q, 2)
		require.Len(e.t, res.Items, 2)
		f, g := receipt(res.Items[0]), receipt(res.Items[1])
		e.advance(leaseTimeout, q)
		ok, err := q.DeleteReceived(e.ctx, res.Partition, []queue.Receipt{f, g, f})
		require.NoError(e.t, err)
		require.Equal(e.t, []bool{true, true, false}, ok)
		require.Empty(e.t, e.items(q))
		// A partition the queue lacks is the client's error.
		_, err = q.DeleteReceived(e.ctx, 3, []queue.Receipt{receipt(x)})
		ae, isClient := apierr.As(err)
		require.True(e.t, isClient, "want a client error, got %v", err)
		require.Equal(e.t, apierr.Invalid, ae.Code)
	}},
	{"NotLeasedIsInvalid", func(e *env) {
		q := e.create("q", nil)
		e.produce(q, "a", "b")
		part, x := e.leaseOne(q, "a")
		ready := e.items(q)
		require.Len(e.t, ready, 2)
		var readyID uint64
		for _, it := range ready {
			if !it.Meta.Leased {
				readyID = it.Meta.ID
			}
		}
		require.NotZero(e.t, readyID)
		unknown := x.ID + 1000
		for _, id := range []uint64{readyID, unknown} {
			requireNotLeased(e.t, q.Complete(e.ctx, part, []uint64{id}), id)
			_, err := q.Retry(e.ctx, part, []queue.RetryItem{{ID: id}})
			requireNotLeased(e.t, err, id)
			_, err = q.Renew(e.ctx, part, []uint64{id}, 0)
			requireNotLeased(e.t, err, id)
		}
		// A request with one bad id changes nothing: the leased item is
		// still leased.
		requireNotLeased(e.t, q.Complete(e.ctx, part, []uint64{x.ID, readyID}), readyID)
		c, _ := e.counts(q)
		require.Equal(e.t, counts{total: 2, ready: 1, leased: 1}, c)
		require.NoError(e.t, q.Complete(e.ctx, part, []uint64{x.ID}))
	}},
	{"RetryRequeuesAtTail", func(e *env) {
		q := e.create("q", nil)
		e.produce(q, "a", "b")
		part, x := e.leaseOne(q, "a")
		out, err := q.Retry(e.ctx, part, []queue.RetryItem{{ID: x.ID, Error: "boom"}})
		require.NoError(e.t, err)
		require.Len(e.t, out, 1)
		require.Equal(e.t, queue.OutcomeRequeued, out[0].Outcome)
		require.Equal(e.t, x.ID, out[0].ID)
		require.Equal(e.t, int32(1), out[0].Attempts)
		require.NotZero(e.t, out[0].NewID)
		require.NotEqual(e.t, x.ID, out[0].NewID)
		c, _ := e.counts(q)
		require.Equal(e.t, counts{total: 2, ready: 2, failures: 1}, c)
		e.leaseOne(q, "b")
		_, again := e.leaseOne(q, "a")
		require.Equal(e.t, out[0].NewID, again.ID)
		require.Equal(e.t, int32(2), again.Attempts)
	}},
	{"RetryReleaseDoesNotCountAttempt", func(e *env) {
		q := e.create("q", func(i *queue.QueueInfo) { i.MaxAttempts = 1 })
		e.produce(q, "a")
		part, x := e.leaseOne(q, "a")
		out, err := q.Retry(e.ctx, part, []queue.RetryItem{{ID: x.ID, Release: true}})
		require.NoError(e.t, err)
		require.Equal(e.t, queue.OutcomeReleased, out[0].Outcome)
		require.Equal(e.t, int32(0), out[0].Attempts)
		// max_attempts 1 does not kill it: the released lease was not an
		// attempt.
		_, again := e.leaseOne(q, "a")
		require.Equal(e.t, int32(1), again.Attempts)
	}},
	{"RetryAtSchedules", func(e *env) {
		q := e.create("q", nil)
		e.produce(q, "a")
		part, x := e.leaseOne(q, "a")
		at := Start.Add(time.Minute)
		out, err := q.Retry(e.ctx, part, []queue.RetryItem{{ID: x.ID, RetryAt: at}})
		require.NoError(e.t, err)
		require.Equal(e.t, queue.OutcomeScheduled, out[0].Outcome)
		require.True(e.t, out[0].RetryAt.Equal(at), "retry_at %v", out[0].RetryAt)
		c, _ := e.counts(q)
		require.Equal(e.t, counts{total: 1, scheduled: 1, failures: 1}, c)
		sched, err := q.Scheduled(e.ctx, 0, 0, 10)
		require.NoError(e.t, err)
		require.Len(e.t, sched, 1)
		require.Equal(e.t, out[0].NewID, sched[0].Meta.ID)
		e.leasableAfter(q, time.Minute)
		_, again := e.leaseOne(q, "a")
		require.Equal(e.t, int32(2), again.Attempts)
	}},
	{"RetryDeadGoesToDeadQueue", func(e *env) {
		q, dlq := e.withDLQ(nil)
		e.produce(q, "a")
		out := e.deadLetter(q, "a", "bad input")
		require.Equal(e.t, queue.OutcomeDeadLettered, out.Outcome)
		require.Equal(e.t, queue.ReasonExplicit, out.Reason)
		require.Equal(e.t, "dlq", out.DeadQueue)
		require.Equal(e.t, int32(1), out.Attempts)
		require.Zero(e.t, out.NewID)
		// Taken by the dead-letter queue when Retry returns.
		dead := e.items(dlq)
		require.Len(e.t, dead, 1)
		d := dead[0]
		require.Equal(e.t, "a", string(d.Body.Payload))
		require.Equal(e.t, "q", d.Body.SourceQueue)
		require.Equal(e.t, queue.ReasonExplicit, d.Body.DeadReason)
		require.True(e.t, d.Body.DeadAt.Equal(Start), "dead_at %v", d.Body.DeadAt)
		require.Equal(e.t, int32(1), d.Meta.Attempts)
		require.Equal(e.t, "bad input", d.Errors.LastError)
		e.eventuallyItems(q, 0)
		e.leaseNone(q)
	}},
	{"RetryDeadWithoutDeadQueueDrops", func(e *env) {
		q := e.create("q", nil)
		e.produce(q, "a")
		out := e.deadLetter(q, "a", "bad input")
		require.Equal(e.t, queue.OutcomeDropped, out.Outcome)
		require.Equal(e.t, queue.ReasonExplicit, out.Reason)
		require.Empty(e.t, out.DeadQueue)
		require.Empty(e.t, e.items(q))
		e.leaseNone(q)
	}},
	{"MaxAttemptsDeadLettersWithHistory", func(e *env) {
		q, dlq := e.withDLQ(func(i *queue.QueueInfo) { i.MaxAttempts = 2 })
		e.produce(q, "a")
		part, x := e.leaseOne(q, "a")
		out, err := q.Retry(e.ctx, part, []queue.RetryItem{{ID: x.ID, Error: "e1"}})
		require.NoError(e.t, err)
		require.Equal(e.t, queue.OutcomeRequeued, out[0].Outcome)
		e.clk.Advance(time.Second)
		part, x = e.leaseOne(q, "a")
		require.Equal(e.t, int32(2), x.Attempts)
		out, err = q.Retry(e.ctx, part, []queue.RetryItem{{ID: x.ID, Error: "e2"}})
		require.NoError(e.t, err)
		require.Equal(e.t, queue.OutcomeDeadLettered, out[0].Outcome)
		require.Equal(e.t, queue.ReasonMaxAttempts, out[0].Reason)
		require.Equal(e.t, int32(2), out[0].Attempts)
		dead := e.items(dlq)
		require.Len(e.t, dead, 1)
		d := dead[0]
		require.Equal(e.t, "q", d.Body.SourceQueue)
		require.Equal(e.t, queue.ReasonMaxAttempts, d.Body.DeadReason)
		require.Equal(e.t, int32(2), d.Meta.Attempts)
		require.Equal(e.t, "e2", d.Errors.LastError)
		require.Equal(e.t, []string{"1:e1", "2:e2"}, errorTexts(d.Errors))
		require.True(e.t, d.Errors.Errors[1].At.Equal(Start.Add(time.Second)))
		e.eventuallyItems(q, 0)
	}},
	{"DeadItemsEnterFewestReadyPartition", func(e *env) {
		// The produce rule, item by item (docs/ARCHITECTURE.md
		// "Partitions"): each dead item of a move goes to the dead-letter
		// queue's partition with the fewest ready items, counting the items
		// placed before it in the same move; ties go to the first partition
		// at or after the one chosen last. With 4, 1, 4 and 0 ready items the
		// first goes to 3 (the only fewest); every tie after it (1 and 3)
		// comes right after a choice of 3, so it is broken from partition 0
		// and goes to 1: 3, 1, 3, 1, 3, whatever the ids and the cursor
		// before the move.
		dlq := e.create("dlq", func(i *queue.QueueInfo) { i.ExpireTimeout = dlqExpire; i.Partitions = 4 })
		q := e.create("q", func(i *queue.QueueInfo) { i.DeadQueue = "dlq"; i.MaxAttempts = 1 })
		for p, n := range []int{4, 1, 4, 0} {
			var items []queue.Item
			for i := range n {
				items = append(items, queue.Item{Body: queue.ItemBody{Kind: "k", Payload: fmt.Appendf(nil, "old%d-%d", p, i)}})
			}
			if n > 0 {
				_, err := dlq.Import(e.ctx, int32(p), items)
				require.NoError(e.t, err)
			}
		}
		e.produce(q, "a", "b", "c", "d", "e")
		res := e.lease(q, 5)
		require.Len(e.t, res.Items, 5)
		retry := make([]queue.RetryItem, len(res.Items))
		for i, x := range res.Items {
			retry[i] = queue.RetryItem{ID: x.ID, Error: "boom"}
		}
		// One retry call: the five die together (max_attempts 1).
		out, err := q.Retry(e.ctx, res.Partition, retry)
		require.NoError(e.t, err)
		for _, o := range out {
			require.Equal(e.t, queue.OutcomeDeadLettered, o.Outcome)
		}
		byPart := map[int32]int{}
		var placed []int32
		for _, it := range e.items(dlq) { // in id order: the order they were placed in
			byPart[it.Partition]++
			if it.Body.SourceQueue == "q" {
				placed = append(placed, it.Partition)
			}
		}
		require.Equal(e.t, []int32{3, 1, 3, 1, 3}, placed)
		require.Equal(e.t, map[int32]int{0: 4, 1: 3, 2: 4, 3: 3}, byPart)
		e.eventuallyItems(q, 0)
	}},
	{"MaxAttemptsByLeaseExpiry", func(e *env) {
		q, dlq := e.withDLQ(func(i *queue.QueueInfo) { i.MaxAttempts = 1 })
		e.produce(q, "a")
		e.leaseOne(q, "a")
		e.advance(leaseTimeout, q)
		d := e.eventuallyItems(dlq, 1)[0]
		require.Equal(e.t, queue.ReasonMaxAttempts, d.Body.DeadReason)
		require.Equal(e.t, "q", d.Body.SourceQueue)
		require.Equal(e.t, int32(1), d.Meta.Attempts)
		require.Equal(e.t, []string{"1:lease expired after 10s"}, errorTexts(d.Errors))
		e.eventuallyItems(q, 0)
		e.leaseNone(q)
	}},
	{"ExpireDeadlineKills", func(e *env) {
		q, dlq := e.withDLQ(func(i *queue.QueueInfo) { i.ExpireTimeout = time.Minute })
		e.produce(q, "a")
		e.advance(time.Minute-time.Millisecond, q)
		require.Empty(e.t, e.items(dlq))
		require.Len(e.t, e.items(q), 1)
		e.advance(time.Millisecond, q)
		d := e.eventuallyItems(dlq, 1)[0]
		require.Equal(e.t, "a", string(d.Body.Payload))
		require.Equal(e.t, queue.ReasonExpired, d.Body.DeadReason)
		require.Equal(e.t, "q", d.Body.SourceQueue)
		require.Equal(e.t, int32(0), d.Meta.Attempts)
		e.eventuallyItems(q, 0)
		e.leaseNone(q)
	}},
	{"ExpiredLeasedItemDiesWhenLeaseEnds", func(e *env) {
		q, dlq := e.withDLQ(func(i *queue.QueueInfo) { i.ExpireTimeout = time.Minute })
		e.produce(q, "a")
		e.advance(time.Minute-time.Second, q)
		part, x := e.leaseOne(q, "a")
		// Past its expire deadline but leased: it lives until the lease
		// ends, and a retry then kills it.
		e.advance(2*time.Second, q)
		require.Empty(e.t, e.items(dlq))
		out, err := q.Retry(e.ctx, part, []queue.RetryItem{{ID: x.ID}})
		require.NoError(e.t, err)
		require.Equal(e.t, queue.OutcomeDeadLettered, out[0].Outcome)
		require.Equal(e.t, queue.ReasonExpired, out[0].Reason)
		require.Equal(e.t, queue.ReasonExpired, e.items(dlq)[0].Body.DeadReason)
	}},
	{"EnqueueAtSchedules", func(e *env) {
		q := e.create("q", nil)
		at := Start.Add(time.Hour)
		require.NoError(e.t, q.Produce(e.ctx, []queue.ProduceItem{{Payload: []byte("later"), EnqueueAt: at}}))
		e.produce(q, "now")
		c, _ := e.counts(q)
		require.Equal(e.t, counts{total: 2, ready: 1, scheduled: 1}, c)
		sched, err := q.Scheduled(e.ctx, 0, 0, 10)
		require.NoError(e.t, err)
		require.Len(e.t, sched, 1)
		require.Equal(e.t, "later", string(sched[0].Body.Payload))
		require.True(e.t, sched[0].Meta.EnqueueAt.Equal(at), "enqueue_at %v", sched[0].Meta.EnqueueAt)
		part, now := e.leaseOne(q, "now")
		require.NoError(e.t, q.Complete(e.ctx, part, []uint64{now.ID}))
		e.leasableAfter(q, time.Hour)
		_, x := e.leaseOne(q, "later")
		require.Equal(e.t, int32(1), x.Attempts)
	}},
	{"EnqueueAtWithinResolutionIsReady", func(e *env) {
		// queue.ScheduleResolution (100ms, Querator's): an enqueue_at less
		// than that ahead enqueues at once, with no enqueue_at; List leaves
		// out the scheduled item, which Scheduled lists.
		q := e.create("q", nil)
		require.NoError(e.t, q.Produce(e.ctx, []queue.ProduceItem{
			{Payload: []byte("past"), EnqueueAt: Start.Add(-time.Hour)},
			{Payload: []byte("soon"), EnqueueAt: Start.Add(queue.ScheduleResolution - time.Nanosecond)},
			{Payload: []byte("later"), EnqueueAt: Start.Add(queue.ScheduleResolution)},
		}))
		c, _ := e.counts(q)
		require.Equal(e.t, counts{total: 3, ready: 2, scheduled: 1}, c)
		listed, err := q.List(e.ctx, 0, 0, 10)
		require.NoError(e.t, err)
		require.Len(e.t, listed, 2)
		for _, it := range listed {
			require.True(e.t, it.Meta.EnqueueAt.IsZero(), "%s: enqueue_at %v", it.Body.Payload, it.Meta.EnqueueAt)
		}
		sched, err := q.Scheduled(e.ctx, 0, 0, 10)
		require.NoError(e.t, err)
		require.Len(e.t, sched, 1)
		require.Equal(e.t, "later", string(sched[0].Body.Payload))
	}},
	{"RenewExtendsLease", func(e *env) {
		q := e.create("q", nil)
		e.produce(q, "a")
		part, x := e.leaseOne(q, "a")
		e.advance(8*time.Second, q)
		dl, err := q.Renew(e.ctx, part, []uint64{x.ID}, 0)
		require.NoError(e.t, err)
		require.Len(e.t, dl, 1)
		require.True(e.t, dl[0].Equal(Start.Add(8*time.Second+leaseTimeout)), "renewed deadline %v", dl[0])
		// Past the original deadline: still leased.
		e.advance(8*time.Second, q)
		e.leaseNone(q)
		c, _ := e.counts(q)
		require.Equal(e.t, counts{total: 1, leased: 1}, c)
		dl, err = q.Renew(e.ctx, part, []uint64{x.ID}, time.Minute)
		require.NoError(e.t, err)
		require.True(e.t, dl[0].Equal(Start.Add(16*time.Second+time.Minute)), "renewed deadline %v", dl[0])
		// Past the renewed deadline: expired, and no longer renewable.
		e.advance(time.Minute, q)
		_, err = q.Renew(e.ctx, part, []uint64{x.ID}, 0)
		requireNotLeased(e.t, err, x.ID)
		_, again := e.leaseOne(q, "a")
		require.Equal(e.t, int32(2), again.Attempts)
	}},
	{"HistoryKeepsTenMostRecent", func(e *env) {
		q := e.create("q", nil)
		e.produce(q, "a")
		for i := 1; i <= 12; i++ {
			part, x := e.leaseOne(q, "a")
			require.Equal(e.t, int32(i), x.Attempts)
			_, err := q.Retry(e.ctx, part, []queue.RetryItem{{ID: x.ID, Error: fmt.Sprintf("e%d", i)}})
			require.NoError(e.t, err)
		}
		items := e.items(q)
		require.Len(e.t, items, 1)
		h := items[0].Errors
		require.Equal(e.t, "e12", h.LastError)
		want := make([]string, 0, queue.MaxAttemptErrors)
		for i := 3; i <= 12; i++ {
			want = append(want, fmt.Sprintf("%d:e%d", i, i))
		}
		require.Equal(e.t, 10, queue.MaxAttemptErrors)
		require.Equal(e.t, want, errorTexts(h))
	}},
	{"DeleteDeadSkipsLeased", func(e *env) {
		q, dlq := e.withDLQ(nil)
		e.produce(q, "a", "b")
		e.deadLetter(q, "a", "x")
		e.deadLetter(q, "b", "x")
		dead := e.items(dlq)
		require.Len(e.t, dead, 2)
		part, x := e.leaseOne(dlq, "a")
		refs := []queue.ItemRef{{Partition: dead[0].Partition, ID: dead[0].Meta.ID}, {Partition: dead[1].Partition, ID: dead[1].Meta.ID}}
		n, err := dlq.DeleteDead(e.ctx, refs)
		require.NoError(e.t, err)
		require.Equal(e.t, 1, n)
		left := e.items(dlq)
		require.Len(e.t, left, 1)
		require.Equal(e.t, x.ID, left[0].Meta.ID)
		require.NoError(e.t, dlq.Complete(e.ctx, part, []uint64{x.ID}))
	}},
	{"Clear", func(e *env) {
		q := e.create("q", nil)
		e.produce(q, "leased", "r1", "r2")
		require.NoError(e.t, q.Produce(e.ctx, []queue.ProduceItem{{Payload: []byte("s"), EnqueueAt: Start.Add(time.Hour)}}))
		part, x := e.leaseOne(q, "leased")
		require.NoError(e.t, q.Clear(e.ctx, queue.ClearParams{Queue: true}))
		c, _ := e.counts(q)
		require.Equal(e.t, counts{total: 2, leased: 1, scheduled: 1}, c, "queue: true keeps leased and scheduled items")
		require.NoError(e.t, q.Clear(e.ctx, queue.ClearParams{Scheduled: true}))
		c, _ = e.counts(q)
		require.Equal(e.t, counts{total: 1, leased: 1}, c, "scheduled: true removes scheduled items only")
		require.NoError(e.t, q.Clear(e.ctx, queue.ClearParams{Queue: true, Destructive: true}))
		require.Empty(e.t, e.items(q), "destructive removes leased items too")
		requireNotLeased(e.t, q.Complete(e.ctx, part, []uint64{x.ID}), x.ID)
	}},
	{"StatsCounts", func(e *env) {
		q, dlq := e.withDLQ(nil)
		e.produce(q, "a", "b", "c", "d", "e")
		require.NoError(e.t, q.Produce(e.ctx, []queue.ProduceItem{{Payload: []byte("s"), EnqueueAt: Start.Add(time.Hour)}}))
		part, a := e.leaseOne(q, "a")
		_, err := q.Retry(e.ctx, part, []queue.RetryItem{{ID: a.ID}})
		require.NoError(e.t, err)
		e.deadLetter(q, "b", "x")
		e.leaseOne(q, "c")
		e.eventuallyItems(q, 5)
		c, st := e.counts(q)
		// d, e, a ready (a after a failed attempt); c leased; s scheduled.
		require.Equal(e.t, counts{total: 5, ready: 3, leased: 1, scheduled: 1, failures: 1}, c)
		require.Equal(e.t, 0, st.LeaseWaiting)
		require.True(e.t, st.Oldest.Equal(Start), "oldest %v", st.Oldest)
		dc, dst := e.counts(dlq)
		require.Equal(e.t, counts{total: 1, ready: 1}, dc)
		require.Equal(e.t, map[string]int{queue.ReasonExplicit: 1}, dst.DeadByReason)
		require.Equal(e.t, map[string]int{"q": 1}, dst.DeadBySource)
		require.Empty(e.t, st.DeadByReason)
	}},
	{"DeadGroupsByFingerprint", func(e *env) {
		q, dlq := e.withDLQ(nil)
		e.produce(q, "a", "b", "c")
		e.deadLetter(q, "a", "dial tcp 10.0.0.1:5432: connection refused")
		e.deadLetter(q, "b", "dial tcp 10.0.0.2:5432: connection refused")
		e.deadLetter(q, "c", "disk full")
		g, err := dlq.Groups(e.ctx, queue.GroupFilter{}, 10)
		require.NoError(e.t, err)
		require.Equal(e.t, 2, g.TotalGroups)
		require.Equal(e.t, int64(3), g.TotalItems)
		require.Len(e.t, g.Groups, 2)
		big, small := g.Groups[0], g.Groups[1]
		require.Equal(e.t, int64(2), big.Count, "largest group first")
		require.Equal(e.t, "q", big.SourceQueue)
		require.Equal(e.t, queue.ReasonExplicit, big.Reason)
		require.Contains(e.t, big.SampleError, "connection refused")
		require.Equal(e.t, int64(1), small.Count)
		require.Equal(e.t, "disk full", small.SampleError)
		require.NotEqual(e.t, big.Fingerprint, small.Fingerprint)
		only, err := dlq.Groups(e.ctx, queue.GroupFilter{Fingerprint: small.Fingerprint}, 10)
		require.NoError(e.t, err)
		require.Equal(e.t, 1, only.TotalGroups)
		require.Equal(e.t, int64(1), only.TotalItems)
		// Deleting a dead item leaves its group.
		dead := e.items(dlq)
		n, err := dlq.DeleteDead(e.ctx, []queue.ItemRef{{Partition: dead[0].Partition, ID: dead[0].Meta.ID}})
		require.NoError(e.t, err)
		require.Equal(e.t, 1, n)
		g, err = dlq.Groups(e.ctx, queue.GroupFilter{}, 10)
		require.NoError(e.t, err)
		require.Equal(e.t, int64(2), g.TotalItems)
		require.Equal(e.t, 2, g.TotalGroups)
	}},
	{"AttributesTravelWithTheItem", func(e *env) {
		// ADR 0016: an item's opaque attributes survive a requeue with a new
		// id, an expired lease, a dead-letter move by max_attempts and a
		// redrive back.
		attrs := []byte{0, 1, 2, 'x'}
		q, dlq := e.withDLQ(func(i *queue.QueueInfo) { i.MaxAttempts = 3 })
		require.NoError(e.t, q.Produce(e.ctx, []queue.ProduceItem{{Payload: []byte("a"), Attributes: attrs}}))
		part, x := e.leaseOne(q, "a")
		require.Equal(e.t, attrs, x.Attributes)
		_, err := q.Retry(e.ctx, part, []queue.RetryItem{{ID: x.ID}})
		require.NoError(e.t, err)
		part, x = e.leaseOne(q, "a")
		require.Equal(e.t, attrs, x.Attributes, "after a requeue")
		_, err = q.Retry(e.ctx, part, []queue.RetryItem{{ID: x.ID}})
		require.NoError(e.t, err)
		_, x = e.leaseOne(q, "a")
		require.Equal(e.t, attrs, x.Attributes)
		e.advance(time.Minute, q) // the third lease expires: max_attempts
		d := e.eventuallyItems(dlq, 1)[0]
		require.Equal(e.t, attrs, d.Body.Attributes, "in the dead-letter queue")
		in := []queue.RedriveItem{{SourceKey: queue.RedriveKey("dlq", d.Meta.ID), Body: d.Body,
			Errors: queue.RedrivenHistory(&d, "dlq", "task1", e.clk.Now())}}
		require.NoError(e.t, q.TakeRedriven(e.ctx, in))
		_, x = e.leaseOne(q, "a")
		require.Equal(e.t, attrs, x.Attributes, "after a redrive")
		e.produce(q, "b")
		_, y := e.leaseOne(q, "b")
		require.Nil(e.t, y.Attributes, "an item without attributes has none")
	}},
	{"RedriveKeepsHistory", func(e *env) {
		q, dlq := e.withDLQ(nil)
		e.produce(q, "a")
		part, x := e.leaseOne(q, "a")
		_, err := q.Retry(e.ctx, part, []queue.RetryItem{{ID: x.ID, Error: "e1"}})
		require.NoError(e.t, err)
		e.deadLetter(q, "a", "e2")
		d := e.items(dlq)[0]
		e.clk.Advance(time.Minute)
		in := []queue.RedriveItem{{
			SourceKey: queue.RedriveKey("dlq", d.Meta.ID),
			Body:      d.Body,
			Errors:    queue.RedrivenHistory(&d, "dlq", "task1", e.clk.Now()),
		}}
		require.NoError(e.t, q.TakeRedriven(e.ctx, in))
		// A second copy (a redrive resumed after a crash) is ignored.
		require.NoError(e.t, q.TakeRedriven(e.ctx, in))
		n, err := dlq.DeleteDead(e.ctx, []queue.ItemRef{{Partition: d.Partition, ID: d.Meta.ID}})
		require.NoError(e.t, err)
		require.Equal(e.t, 1, n)
		items := e.items(q)
		require.Len(e.t, items, 1)
		r := items[0]
		require.Equal(e.t, int32(0), r.Meta.Attempts)
		require.Equal(e.t, int32(1), r.Body.RedriveCount)
		require.Empty(e.t, r.Body.DeadReason)
		require.Equal(e.t, []string{"1:e1", "2:e2", "2:redriven from dead-letter queue 'dlq' by task task1"}, errorTexts(r.Errors))
		require.True(e.t, r.Errors.Errors[2].At.Equal(Start.Add(time.Minute)))
		require.Equal(e.t, "e2", r.Errors.LastError)
		require.Empty(e.t, e.items(dlq))
		_, again := e.leaseOne(q, "a")
		require.Equal(e.t, int32(1), again.Attempts)
	}},
	{"ImportIdempotentOnSourceID", func(e *env) {
		q := e.create("q", nil)
		deadline := Start.Add(time.Minute)
		got, err := q.Import(e.ctx, 0, []queue.Item{
			{Meta: queue.ItemMeta{Attempts: 3, Leased: true, LeaseDeadline: deadline}, Body: queue.ItemBody{Payload: []byte("one"), SourceID: "s1"}},
			{Body: queue.ItemBody{Payload: []byte("dup"), SourceID: "s1"}},
		})
		require.NoError(e.t, err)
		require.Len(e.t, got, 2)
		require.Equal(e.t, got[0].Meta.ID, got[1].Meta.ID, "the duplicate answers with the item that holds its source_id")
		_, err = q.Import(e.ctx, 0, []queue.Item{{Body: queue.ItemBody{Payload: []byte("again"), SourceID: "s1"}}})
		require.NoError(e.t, err)
		items := e.items(q)
		require.Len(e.t, items, 1)
		it := items[0]
		require.Equal(e.t, "one", string(it.Body.Payload))
		require.Equal(e.t, int32(3), it.Meta.Attempts)
		require.True(e.t, it.Meta.Leased)
		require.True(e.t, it.Meta.LeaseDeadline.Equal(deadline), "lease deadline %v", it.Meta.LeaseDeadline)
		e.leaseNone(q)
		require.NoError(e.t, q.Complete(e.ctx, 0, []uint64{it.Meta.ID}))
	}},
	{"ListAfterIsExclusive", func(e *env) {
		q := e.create("q", nil)
		e.produce(q, "a", "b", "c")
		all, err := q.List(e.ctx, 0, 0, 10)
		require.NoError(e.t, err)
		require.Len(e.t, all, 3)
		// The wire's pivot is inclusive; the service maps it onto after.
		rest, err := q.List(e.ctx, 0, all[0].Meta.ID, 10)
		require.NoError(e.t, err)
		require.Len(e.t, rest, 2)
		require.Equal(e.t, "b", string(rest[0].Body.Payload))
		one, err := q.List(e.ctx, 0, 0, 1)
		require.NoError(e.t, err)
		require.Len(e.t, one, 1)
	}},
	{"ListQueuesByNamespace", func(e *env) {
		e.create("b1", func(i *queue.QueueInfo) { i.Namespace = "b" })
		e.create("a1", func(i *queue.QueueInfo) { i.Namespace = "a" })
		e.create("a2", func(i *queue.QueueInfo) { i.Namespace = "a" })
		got, err := e.qs.List(e.ctx, queue.ListQueuesParams{Namespace: "a"})
		require.NoError(e.t, err)
		names := make([]string, len(got))
		for i, x := range got {
			names[i] = x.Name
			require.Equal(e.t, "a", x.Namespace)
		}
		require.Equal(e.t, []string{"a1", "a2"}, names)
		all, err := e.qs.List(e.ctx, queue.ListQueuesParams{Pivot: "a2"})
		require.NoError(e.t, err)
		require.Len(e.t, all, 2, "pivot is inclusive, in name order")
		require.Equal(e.t, "a2", all[0].Name)
	}},
	{"NotFound", func(e *env) {
		_, err := e.qs.Get("nope")
		ae, ok := apierr.As(err)
		require.True(e.t, ok, "%v", err)
		require.Equal(e.t, apierr.Invalid, ae.Code)
		require.True(e.t, strings.Contains(ae.Message, "no such queue named 'nope'"), ae.Message)
	}},
}

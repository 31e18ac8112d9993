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
// neither are Stats.Dying and Stats.MovesInFlight (0 on PostgreSQL when a
// move is one statement, ADR 0014; its two-phase move, ADR 0023, counts
// Dying, and the suite runs on both paths).
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
	for _, r := range slices.Concat(cycleRows, adminRows, coverageRows, dedupRows, groupRows, liveRows, idRows) {
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
// Stats does not do it on every engine: it runs in the loop, but
// PostgreSQL's iterations run the lifecycle only when it is due by its own
// reckoning (nextDue).
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
	wait := e.leaseAsync(q, queue.LeaseParams{BatchSize: batch, ClientID: "w", Timeout: time.Minute})
	e.waitLeaseWaiting(q, 1)
	return wait
}

// leaseAsync starts the lease p on q in the background and returns a
// function that waits for its answer.
func (e *env) leaseAsync(q queue.Queue, p queue.LeaseParams) func() (queue.LeaseResult, error) {
	type answer struct {
		res queue.LeaseResult
		err error
	}
	done := make(chan answer, 1)
	ctx, cancel := context.WithTimeout(e.ctx, waitTimeout)
	e.t.Cleanup(cancel)
	go func() {
		res, err := q.Lease(ctx, p)
		done <- answer{res, err}
	}()
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

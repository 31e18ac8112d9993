package postgres_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/apierr"
	"github.com/styxq/styx/internal/backend/postgres"
	"github.com/styxq/styx/internal/clock"
	"github.com/styxq/styx/internal/pgtest"
	"github.com/styxq/styx/internal/queue"
	"github.com/styxq/styx/metrics"
)

// hook is a postgres.DeadLetters for the fault tests: it delivers to the
// Manager it is given (the dead-letter queue's home), or fails as told.
type hook struct {
	mu sync.Mutex
	to *postgres.Manager
	// refuse fails every delivery before it reaches the dead-letter
	// queue; lose delivers and then fails (the answer lost, or the node
	// gone before its delete).
	refuse, lose bool
	calls        atomic.Int64
}

func (h *hook) TakeDead(ctx context.Context, dlq string, items []postgres.DeadItem) error {
	h.calls.Add(1)
	h.mu.Lock()
	to, refuse, lose := h.to, h.refuse, h.lose
	h.mu.Unlock()
	if refuse {
		return errors.New("test: the dead-letter queue's cluster is down")
	}
	if err := to.TakeDead(ctx, dlq, items); err != nil {
		return err
	}
	if lose {
		return errors.New("test: the node stopped before its delete")
	}
	return nil
}

func (h *hook) set(f func(h *hook)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	f(h)
}

// openTwoPhase opens a node on url whose dead-letter moves take the
// two-phase path through h, and points h at it when h has no target.
func openTwoPhase(t *testing.T, url string, clk clock.Clock, h *hook) *postgres.Manager {
	m, err := postgres.Open(t.Context(), postgres.Config{URL: url, Clock: clk, Log: testLog(), Metrics: metrics.New(),
		TwoPhaseDeadLetters: true, DeadLetters: h})
	require.NoError(t, err)
	t.Cleanup(m.Close)
	h.set(func(h *hook) {
		if h.to == nil {
			h.to = m
		}
	})
	return m
}

// both lists queues q and dlq (partition 0).
func both(t *testing.T, q, dlq queue.Queue) (src, dead []queue.Item) {
	t.Helper()
	src, err := q.List(t.Context(), 0, 0, 100)
	require.NoError(t, err)
	dead, err = dlq.List(t.Context(), 0, 0, 100)
	require.NoError(t, err)
	return src, dead
}

// leaseOne produces payload into q and leases it.
func leaseOne(t *testing.T, q queue.Queue, payload string) queue.LeasedItem {
	t.Helper()
	require.NoError(t, q.Produce(t.Context(), []queue.ProduceItem{{Payload: []byte(payload)}}))
	res, err := q.Lease(t.Context(), queue.LeaseParams{BatchSize: 1, ClientID: "c-" + payload, Timeout: 5 * time.Second})
	require.NoError(t, err)
	require.Len(t, res.Items, 1)
	return res.Items[0]
}

// TestTwoPhaseDeadLetterRefused: while the dead-letter queue's cluster
// refuses the items, a retry with dead: true is answered 453 at its
// deadline, the item stays in its queue dying (never leased, counted as
// dying, shown with its dead reason), a redrive back from the dead-letter
// queue works meanwhile, and once the cluster takes items again the
// lifecycle's resend moves it: in the dead-letter queue once, gone from its
// queue, and a retry of the retry finds it not leased (400).
func TestTwoPhaseDeadLetterRefused(t *testing.T) {
	clk := clock.NewFake(time.Now())
	h := &hook{}
	m := openTwoPhase(t, pgtest.SchemaURL(t, pgtest.BaseURL(t)), clk, h)
	ctx := t.Context()
	require.NoError(t, m.Create(ctx, queue.QueueInfo{Name: "dlq", LeaseTimeout: time.Minute, Partitions: 1}))
	require.NoError(t, m.Create(ctx, queue.QueueInfo{Name: "q", LeaseTimeout: time.Minute, Partitions: 1, DeadQueue: "dlq"}))
	q, err := m.Get("q")
	require.NoError(t, err)
	dlq, err := m.Get("dlq")
	require.NoError(t, err)

	// One item moved while the cluster works, for the redrive below.
	first := leaseOne(t, q, "first")
	_, err = q.Retry(ctx, 0, []queue.RetryItem{{ID: first.ID, Dead: true, Error: "bad"}})
	require.NoError(t, err)
	src, dead := both(t, q, dlq)
	require.Empty(t, src, "answered once gone from its queue")
	require.Len(t, dead, 1, "and in the dead-letter queue")

	h.set(func(h *hook) { h.refuse = true })
	x := leaseOne(t, q, "x")
	rctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = q.Retry(rctx, 0, []queue.RetryItem{{ID: x.ID, Dead: true, Error: "worse"}})
	cancel()
	e, ok := apierr.As(err)
	require.True(t, ok, "%v", err)
	require.Equal(t, apierr.Unavailable, e.Code, "453 at the request's deadline: %v", err)

	st, err := q.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, st.Partitions[0].Dying)
	require.Equal(t, 1, st.Partitions[0].Total)
	require.Zero(t, st.Partitions[0].Leased)
	src, dead = both(t, q, dlq)
	require.Len(t, src, 1, "still in its queue")
	require.Equal(t, queue.ReasonExplicit, src[0].Body.DeadReason, "shown with its dead reason")
	require.False(t, src[0].Meta.Leased)
	require.Len(t, dead, 1, "not in the dead-letter queue")
	lctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond) // the fake clock never ends the lease's wait
	res, err := q.Lease(lctx, queue.LeaseParams{BatchSize: 10, ClientID: "probe", Timeout: time.Second})
	cancel()
	if err == nil {
		require.Empty(t, res.Items, "a dying item is never leased")
	}

	// A redrive step back from the dead-letter queue, with a dying item in
	// the destination.
	d := dead[0]
	require.NoError(t, q.TakeRedriven(ctx, []queue.RedriveItem{{SourceKey: queue.RedriveKey("dlq", d.Meta.ID), Body: d.Body, Errors: d.Errors}}))
	n, err := dlq.DeleteDead(ctx, []queue.ItemRef{{Partition: 0, ID: d.Meta.ID}})
	require.NoError(t, err)
	require.Equal(t, 1, n)

	// The cluster is back: the claim runs out and the lifecycle resends.
	h.set(func(h *hook) { h.refuse = false })
	clk.Advance(6 * time.Second)
	require.Eventually(t, func() bool {
		_, _ = q.Stats(ctx) // an iteration, which runs the lifecycle now due
		src, dead := both(t, q, dlq)
		return len(src) == 1 && len(dead) == 1 && string(dead[0].Body.Payload) == "x"
	}, 10*time.Second, 10*time.Millisecond)
	src, dead = both(t, q, dlq)
	require.Equal(t, "first", string(src[0].Body.Payload), "the redriven item, not the dying one")
	require.Equal(t, "worse", dead[0].Errors.LastError)
	require.Equal(t, "q", dead[0].Body.SourceQueue)
	_, err = q.Retry(ctx, 0, []queue.RetryItem{{ID: x.ID, Dead: true}})
	e, ok = apierr.As(err)
	require.True(t, ok, "%v", err)
	require.Equal(t, apierr.Invalid, e.Code, "a retry of the retry: not leased")
}

// TestTwoPhaseDeadLetterResentAfterCrash: a node whose delivery reached the
// dead-letter queue stops before deleting its dying items (the window
// between the two commits); a consumer completes the dead copy; another
// node's lifecycle resends the items, and the dead-letter queue ignores
// them (their source keys were taken within the window): nothing doubled,
// nothing left dying.
func TestTwoPhaseDeadLetterResentAfterCrash(t *testing.T) {
	url := pgtest.SchemaURL(t, pgtest.BaseURL(t))
	clk := clock.NewFake(time.Now())
	ha := &hook{lose: true}
	a := openTwoPhase(t, url, clk, ha)
	ctx := t.Context()
	require.NoError(t, a.Create(ctx, queue.QueueInfo{Name: "dlq", LeaseTimeout: time.Minute, Partitions: 1}))
	require.NoError(t, a.Create(ctx, queue.QueueInfo{Name: "q", LeaseTimeout: time.Minute, Partitions: 1, DeadQueue: "dlq"}))
	qa, err := a.Get("q")
	require.NoError(t, err)
	dlqA, err := a.Get("dlq")
	require.NoError(t, err)
	x, y := leaseOne(t, qa, "x"), leaseOne(t, qa, "y")
	for _, id := range []uint64{x.ID, y.ID} {
		rctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		_, err = qa.Retry(rctx, 0, []queue.RetryItem{{ID: id, Dead: true}})
		cancel()
		e, ok := apierr.As(err)
		require.True(t, ok && e.Code == apierr.Unavailable, "453, not success: the item is still in its queue: %v", err)
	}
	src, dead := both(t, qa, dlqA)
	require.Len(t, src, 2, "dying, in their queue")
	require.Len(t, dead, 2, "and in the dead-letter queue")
	// A consumer of the dead-letter queue completes x's copy.
	res, err := dlqA.Lease(ctx, queue.LeaseParams{BatchSize: 1, ClientID: "dlq-consumer", Timeout: time.Second})
	require.NoError(t, err)
	require.Len(t, res.Items, 1)
	require.Equal(t, "x", string(res.Items[0].Payload))
	require.NoError(t, dlqA.Complete(ctx, res.Partition, []uint64{res.Items[0].ID}))
	a.Close() // the node is gone

	b := openTwoPhase(t, url, clk, &hook{})
	qb, err := b.Get("q")
	require.NoError(t, err)
	dlqB, err := b.Get("dlq")
	require.NoError(t, err)
	clk.Advance(6 * time.Second)
	require.Eventually(t, func() bool {
		st, err := qb.Stats(ctx)
		return err == nil && st.Partitions[0].Total == 0
	}, 10*time.Second, 10*time.Millisecond, "b resends and deletes the dying items")
	src, dead = both(t, qb, dlqB)
	require.Empty(t, src)
	require.Len(t, dead, 1, "x's completed copy did not come back, y's is there once")
	require.Equal(t, "y", string(dead[0].Body.Payload))
	st, err := dlqB.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, st.Partitions[0].Total)
	require.Equal(t, 1, st.DeadByReason[queue.ReasonExplicit])
}

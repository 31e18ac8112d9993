package redrive

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/clock"
	"github.com/styxq/styx/internal/queue"
)

// ctxQueues serves the queues of Queues, each refusing a call whose
// context is done, as PostgreSQL's backend does (pgx cancels a statement
// when its context ends); the first DeleteDead (the destination has its
// items' copies) closes entered and waits for release.
type ctxQueues struct {
	queue.Queues
	entered, release chan struct{}
	once             sync.Once
}

func (q *ctxQueues) Get(name string) (queue.Queue, error) {
	l, err := q.Queues.Get(name)
	if err != nil {
		return l, err
	}
	return &ctxQueue{Queue: l, qs: q}, nil
}

type ctxQueue struct {
	queue.Queue
	qs *ctxQueues
}

func (l *ctxQueue) TakeRedriven(ctx context.Context, items []queue.RedriveItem) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return l.Queue.TakeRedriven(ctx, items)
}

func (l *ctxQueue) DeleteDead(ctx context.Context, refs []queue.ItemRef) (int, error) {
	l.qs.once.Do(func() {
		close(l.qs.entered)
		<-l.qs.release
	})
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	return l.Queue.DeleteDead(ctx, refs)
}

// TestCancelMidStep cancels a task between its step's copies to the
// destination and its delete from the dead-letter queue. The cancel takes effect after the step (Cancel: "stop after its
// current batch"), so the batch leaves the dead-letter queue and is
// counted, and no item is in both queues. Before, Cancel ended the step's
// context: on PostgreSQL the delete from the dead-letter queue was then
// refused and the task ended cancelled with its batch in both queues (seen
// under load in service's TestRedrive/postgres/CancelAndOverlap: 205 of
// 200 items).
func TestCancelMidStep(t *testing.T) {
	ctx := context.Background()
	const n = 30
	f := newFixture(t, n)
	st, qm, dlq, stored, log, m := f.st, f.qm, f.dlq, f.stored, f.log, f.m
	s := &sharedStore{Store: st, claim: func(*sharedStore, int, string) bool { return true }}
	qs := &ctxQueues{Queues: qm, entered: make(chan struct{}), release: make(chan struct{})}
	putTask(t, s, Task{ID: "rd-1", Queue: "q-dead", Status: StatusRunning, Matched: n, StartedAt: time.Now(),
		UpTo: stored[n-1].Meta.ID, MaxRedriveCount: -1, RateLimit: 100})
	r, err := New(ctx, Config{Queues: qs, Store: s, Clock: clock.Real{}, Log: log, Metrics: m})
	require.NoError(t, err)
	t.Cleanup(r.Close)

	<-qs.entered // the first step has copied its items and is about to delete them
	c, err := r.Cancel(ctx, "rd-1")
	require.NoError(t, err)
	require.Equal(t, StatusCancelling, c.Status)
	close(qs.release)
	require.Eventually(t, func() bool { return storedTask(t, s, "rd-1").Status == StatusCancelled }, 10*time.Second, time.Millisecond)
	got := storedTask(t, s, "rd-1")

	dest, err := qm.Get("q")
	require.NoError(t, err)
	moved, err := dest.List(ctx, 0, 0, 2*n)
	require.NoError(t, err)
	left, err := dlq.List(ctx, 0, 0, 2*n)
	require.NoError(t, err)
	require.NotEmpty(t, moved, "the step the cancel met finished")
	require.EqualValues(t, len(moved), got.Moved, "the task counts what it moved")
	require.Empty(t, got.Taken, "no delete is left to do")
	require.Equal(t, n, len(moved)+len(left), "nothing lost or doubled")
}

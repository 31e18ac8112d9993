package redrive

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/clock"
	"github.com/styxq/styx/internal/queue"
	"github.com/styxq/styx/internal/store"
	"github.com/styxq/styx/metrics"
)

// lossyQueues serves the queues of Queues, but the dead-letter queue dead
// loses the answers of its next lose deletes from it: each delete is done,
// and answers 453 "commit outcome unknown", as when the connection or the
// primary is lost while COMMIT is on the wire. onLose runs at each.
type lossyQueues struct {
	queue.Queues
	dead   string
	lose   atomic.Int32
	onLose func()
}

func (q *lossyQueues) Get(name string) (queue.Queue, error) {
	l, err := q.Queues.Get(name)
	if err != nil || name != q.dead {
		return l, err
	}
	return &lossyQueue{Queue: l, qs: q}, nil
}

type lossyQueue struct {
	queue.Queue
	qs *lossyQueues
}

func (l *lossyQueue) DeleteDead(ctx context.Context, refs []queue.ItemRef) (int, error) {
	n, err := l.Queue.DeleteDead(ctx, refs)
	if err != nil || l.qs.lose.Add(-1) < 0 {
		return n, err
	}
	if l.qs.onLose != nil {
		l.qs.onLose()
	}
	return 0, store.Unavailable("test: delete from the dead-letter queue", errors.New("commit outcome unknown: the answer was lost"))
}

// TestLostDeleteCounted (issue 53: "a redrive resumed across a failover
// reported moved 398 of 400"): a step whose delete from the dead-letter
// queue is done but answers 453 (its commit's answer lost) has moved its
// items, and the task counts them: when the step runs again on the same
// server ("retried"), and when the claim is lost with the answer and the
// task resumes on another server ("failover", a runner of its own over the
// same store and queues). Each item reaches the destination once. On main
// the items the lost delete took were never counted (moved 0 of 40: the
// scan run again no longer finds them).
func TestLostDeleteCounted(t *testing.T) {
	for _, failover := range []bool{false, true} {
		name := "retried"
		if failover {
			name = "failover"
		}
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			const n = 40
			f := newFixture(t, n)
			st, qm, dlq, stored, log, m := f.st, f.qm, f.dlq, f.stored, f.log, f.m
			s := &checkingStore{sharedStore: &sharedStore{Store: st, claim: func(*sharedStore, int, string) bool { return true }}}
			s.held.Store(true)
			qs := &lossyQueues{Queues: qm, dead: "q-dead"}
			qs.lose.Store(1)
			if failover {
				qs.onLose = func() { s.held.Store(false) } // the claim's session went with the primary
			}
			putTask(t, s, Task{ID: "rd-1", Queue: "q-dead", Status: StatusRunning, Matched: n, StartedAt: time.Now(),
				UpTo: stored[n-1].Meta.ID, MaxRedriveCount: -1})
			r, err := New(ctx, Config{Queues: qs, Store: s, Clock: clock.Real{}, Log: log, Metrics: m})
			require.NoError(t, err)
			t.Cleanup(r.Close)

			if failover {
				require.Eventually(t, func() bool {
					r.mu.Lock()
					defer r.mu.Unlock()
					return len(r.running) == 0
				}, 10*time.Second, time.Millisecond, "the task stops with its claim")
				left, err := dlq.List(ctx, 0, 0, n)
				require.NoError(t, err)
				require.Empty(t, left, "the lost delete was done")
				s.held.Store(true)
				other, err := New(ctx, Config{Queues: qs, Store: s, Clock: clock.Real{}, Log: log, Metrics: metrics.New()})
				require.NoError(t, err)
				t.Cleanup(other.Close)
			}
			require.Eventually(t, func() bool { return storedTask(t, s, "rd-1").Status == StatusCompleted }, 10*time.Second, time.Millisecond)
			got := storedTask(t, s, "rd-1")
			require.EqualValues(t, n, got.Moved, "every item moved is counted")
			require.EqualValues(t, n, got.ByQueue["q"].Moved)
			require.Zero(t, got.Skipped)
			require.Zero(t, got.Failed)

			dest, err := qm.Get("q")
			require.NoError(t, err)
			items, err := dest.List(ctx, 0, 0, 2*n)
			require.NoError(t, err)
			seen := map[string]int{}
			for _, it := range items {
				seen[string(it.Body.Payload)]++
			}
			require.Len(t, seen, n, "every item reached the destination")
			for p, c := range seen {
				require.Equal(t, 1, c, "item %s reached the destination once", p)
			}
		})
	}
}

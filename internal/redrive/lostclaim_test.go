package redrive

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/backend/embedded"
	"github.com/styxq/styx/internal/backend/embedded/pebble"
	"github.com/styxq/styx/internal/clock"
	"github.com/styxq/styx/internal/queue"
	"github.com/styxq/styx/internal/store"
	"github.com/styxq/styx/metrics"
)

// checkingStore is a shared task store whose claims can be lost, as
// PostgreSQL's are with their session: ClaimHeld reports held.
type checkingStore struct {
	*sharedStore
	held atomic.Bool
}

func (s *checkingStore) ClaimHeld(context.Context, string) bool { return s.held.Load() }

// A task whose claim is lost stops without storing an end (another server
// may run it now) and can be claimed and resumed again, by this server's
// adopt as by any other's; resumed before it counted anything, it counts
// without panicking (its stored record has no by_queue).
func TestLostClaimStopsTheTask(t *testing.T) {
	ctx := context.Background()
	st, err := pebble.OpenMemory()
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	m := metrics.New()
	qm, err := embedded.NewManager(ctx, embedded.Config{Store: st, Clock: clock.Real{}, Log: log, Metrics: m})
	require.NoError(t, err)
	t.Cleanup(qm.Close)
	for _, name := range []string{"q-dead", "q-dest"} {
		require.NoError(t, qm.Create(ctx, queue.QueueInfo{Name: name, LeaseTimeout: time.Minute, Partitions: 1}))
	}
	dlq, err := qm.Get("q-dead")
	require.NoError(t, err)
	stored, err := dlq.Import(ctx, 0, []queue.Item{
		{Body: queue.ItemBody{Payload: []byte("a"), SourceQueue: "q-src", DeadReason: "explicit", DeadAt: time.Now()}},
		{Body: queue.ItemBody{Payload: []byte("b"), SourceQueue: "q-src", DeadReason: "explicit", DeadAt: time.Now()}},
	})
	require.NoError(t, err)

	s := &checkingStore{sharedStore: &sharedStore{Store: st, claim: func(*sharedStore, int, string) bool { return true }}}
	task := Task{ID: "rd-1", Queue: "q-dead", Destination: "q-dest", Status: StatusRunning, Matched: 2, StartedAt: time.Now(),
		UpTo: stored[1].Meta.ID, MaxRedriveCount: -1}
	putTask(t, s, task)
	r, err := New(ctx, Config{Queues: qm, Store: s, Clock: clock.Real{}, Log: log, Metrics: m}) // claims and resumes rd-1
	require.NoError(t, err)
	t.Cleanup(r.Close)

	// The claim is lost at once: the task stops, its record unchanged.
	require.Eventually(t, func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return len(r.running) == 0
	}, 5*time.Second, time.Millisecond, "the task stops")
	require.Equal(t, StatusRunning, storedTask(t, s, "rd-1").Status)
	left, err := dlq.List(ctx, 0, 0, 10)
	require.NoError(t, err)
	require.Len(t, left, 2, "nothing moved under a lost claim")

	// Claimed again, it resumes and ends.
	s.held.Store(true)
	require.NoError(t, r.adopt(ctx))
	require.Eventually(t, func() bool { return storedTask(t, s, "rd-1").Status == StatusCompleted }, 5*time.Second, time.Millisecond)
	got := storedTask(t, s, "rd-1")
	require.EqualValues(t, 2, got.Moved)
	require.EqualValues(t, 2, got.ByQueue["q-dest"].Moved)
}

func storedTask(t *testing.T, s store.TaskStore, id string) Task {
	t.Helper()
	recs, err := s.ListTasks(context.Background())
	require.NoError(t, err)
	for _, rec := range recs {
		if rec.ID == id {
			var task Task
			require.NoError(t, json.Unmarshal(rec.Data, &task))
			return task
		}
	}
	t.Fatalf("task %s is not stored", id)
	return Task{}
}

package redrive

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/apierr"
	"github.com/styxq/styx/internal/backend/embedded/pebble"
	"github.com/styxq/styx/internal/clock"
	"github.com/styxq/styx/internal/queue"
	"github.com/styxq/styx/internal/store"
)

// sharedStore is a task store that claims like a shared one (PostgreSQL's):
// claim decides each ClaimTask, standing in for the other servers.
type sharedStore struct {
	*pebble.Store
	mu     sync.Mutex
	claims int
	claim  func(s *sharedStore, n int, key string) bool // n counts the calls from 1
}

func (s *sharedStore) ClaimTask(_ context.Context, key string) (func(), bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.claims++
	return func() {}, s.claim(s, s.claims, key), nil
}

// newShared returns a runner over a shared-claiming store holding the
// dead-letter queue "q-dead" (of queue "q"), with the tasks given already stored.
func newShared(t *testing.T, claim func(s *sharedStore, n int, key string) bool, tasks ...Task) (*Runner, *sharedStore) {
	t.Helper()
	ctx := context.Background()
	f := newFixture(t, 0)
	st, qm, log, m := f.st, f.qm, f.log, f.m
	s := &sharedStore{Store: st, claim: claim}
	for _, task := range tasks {
		putTask(t, s, task)
	}
	r, err := New(ctx, Config{Queues: qm, Store: s, Clock: clock.Real{}, Log: log, Metrics: m})
	require.NoError(t, err)
	t.Cleanup(r.Close)
	return r, s
}

func putTask(t *testing.T, s store.TaskStore, task Task) {
	t.Helper()
	data, err := json.Marshal(task)
	require.NoError(t, err)
	require.NoError(t, s.PutTask(context.Background(), store.TaskRecord{ID: task.ID, Queue: task.Queue, Data: data}))
}

func requireConflict(t *testing.T, err error, contains string) {
	t.Helper()
	e, ok := apierr.As(err)
	require.True(t, ok, "want an apierr, got %v", err)
	require.Equal(t, apierr.Conflict, e.Code, e.Message)
	require.Contains(t, e.Message, contains)
}

// A start claim held elsewhere is a task starting on another server: Start
// waits for it rather than refusing, then claims its own task.
func TestStartWaitsForAClaimWithoutTask(t *testing.T) {
	r, s := newShared(t, func(_ *sharedStore, n int, _ string) bool { return n > 2 })
	task, err := r.Start(context.Background(), StartParams{Queue: "q-dead"})
	require.NoError(t, err)
	require.NotEmpty(t, task.ID)
	s.mu.Lock()
	defer s.mu.Unlock()
	require.Equal(t, 4, s.claims, "three start claims, then the task's")
}

// A claim that stays held with no task to show is refused after claimWait
// with a message that says where the task is, not an empty task id.
func TestStartRefusesAClaimHeldTooLong(t *testing.T) {
	defer func(w time.Duration) { claimWait = w }(claimWait)
	claimWait = 50 * time.Millisecond
	r, _ := newShared(t, func(*sharedStore, int, string) bool { return false })
	_, err := r.Start(context.Background(), StartParams{Queue: "q-dead"})
	requireConflict(t, err, "starting on queue 'q-dead' on another server")
	require.NotContains(t, err.Error(), "task ''")
}

// A task on another server that holds some of the items a new task would
// match is seen at once (its claim is not needed for that): the new task
// leaves them to it, and one that must not overlap (SQS's, RefuseOverlap)
// is refused with a conflict naming the task and its status as it is
// (issue 49: a paused task was said to be running).
func TestStartSeesTheTaskElsewhere(t *testing.T) {
	for _, status := range []string{StatusRunning, StatusPaused} {
		t.Run(status, func(t *testing.T) {
			other := Task{ID: "rd-other", Queue: "q-dead", Status: status, StartedAt: time.Now(), UpTo: 1 << 62}
			r, _ := newShared(t, func(_ *sharedStore, _ int, key string) bool { return key != taskKey("rd-other") }, other)
			dlq, err := r.cfg.Queues.Get("q-dead")
			require.NoError(t, err)
			_, err = dlq.Import(context.Background(), 0, []queue.Item{{Body: queue.ItemBody{Payload: []byte("a"), SourceQueue: "q", DeadReason: "explicit", DeadAt: time.Now()}}})
			require.NoError(t, err)
			_, err = r.Start(context.Background(), StartParams{Queue: "q-dead", RefuseOverlap: true})
			requireConflict(t, err, "task 'rd-other' is "+status+" on queue 'q-dead' and holds 1 of the 1 matched items")
			dry, err := r.Start(context.Background(), StartParams{Queue: "q-dead", DryRun: true})
			require.NoError(t, err)
			require.Equal(t, map[string]int64{"rd-other": 1}, dry.LeftTo)
			require.EqualValues(t, 1, dry.WouldSkip)
			task, err := r.Start(context.Background(), StartParams{Queue: "q-dead"})
			require.NoError(t, err)
			require.Equal(t, map[string]int64{"rd-other": 1}, task.LeftTo)
			require.EqualValues(t, 1, task.Skipped)
		})
	}
}

// A server stores a task's end before releasing its claim, so a runner
// that loaded the task as running and then gets the claim must look again:
// the task has ended and must not run a second time (which would overwrite
// its stored counts with the stale ones).
func TestAdoptLeavesATaskThatEndedBeforeTheClaim(t *testing.T) {
	stale := Task{ID: "rd-1", Queue: "q-dead", Status: StatusRunning, Matched: 5, StartedAt: time.Now()}
	ended := stale
	ended.Status, ended.Moved, ended.FinishedAt = StatusCompleted, 5, time.Now()
	r, s := newShared(t, func(s *sharedStore, n int, key string) bool {
		if n == 1 && key == taskKey("rd-1") {
			putTask(t, s.Store, ended) // the other server ends the task, then releases
		}
		return true
	}, stale)
	got, err := r.Get(context.Background(), "rd-1")
	require.NoError(t, err)
	require.Equal(t, StatusCompleted, got.Status)
	require.EqualValues(t, 5, got.Moved)

	r.Close() // waits for any task goroutine
	recs, err := s.ListTasks(context.Background())
	require.NoError(t, err)
	require.Len(t, recs, 1)
	var stored Task
	require.NoError(t, json.Unmarshal(recs[0].Data, &stored))
	require.Equal(t, StatusCompleted, stored.Status)
	require.EqualValues(t, 5, stored.Moved, "the ended task ran again: %s", strings.TrimSpace(string(recs[0].Data)))
}

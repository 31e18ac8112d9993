package service_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	styx "github.com/styxq/styx"
	"github.com/styxq/styx/internal/servertest"
	pb "github.com/styxq/styx/styxpb"
)

// Redrives that fit an incident (issue 39, point 2): several tasks on one
// dead-letter queue when their items are disjoint, single-item redrives
// while a group redrive runs, and pause, resume and re-rate of a running
// task.

// withTwoSources creates the dead-letter queue <name>-dlq of the queues
// <name>-a and <name>-b, holding n dead items of each (payloads a0.., b0..).
func withTwoSources(s *servertest.Server, name string, n int) string {
	s.T.Helper()
	dlq := name + "-dlq"
	s.CreateQueue(&pb.QueueInfo{QueueName: dlq})
	var items []deadItem
	for _, src := range []string{"a", "b"} {
		s.CreateQueue(&pb.QueueInfo{QueueName: name + "-" + src, DeadQueue: dlq})
		for i := range n {
			items = append(items, deadItem{payload: fmt.Sprintf("%s%02d", src, i), source: name + "-" + src, reason: "expired"})
		}
	}
	importDead(s, dlq, items...)
	return dlq
}

// getTask returns a task through the client.
func getTask(s *servertest.Server, id string) *pb.RedriveTask {
	s.T.Helper()
	got, err := s.C.RedrivesGet(ctx, &pb.RedriveTaskRequest{TaskId: id})
	require.NoError(s.T, err)
	return got
}

// requireOnce asserts queue holds exactly the payloads want, each once.
func requireOnce(s *servertest.Server, queue string, want []string) {
	s.T.Helper()
	seen := map[string]int{}
	for _, it := range s.Items(queue) {
		seen[string(it.Payload)]++
	}
	for p, k := range seen {
		require.Equal(s.T, 1, k, "item %s is in %s %d times", p, queue, k)
	}
	require.Equal(s.T, sorted(want), sorted(payloads(s.Items(queue))))
}

func names(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%02d", prefix, i)
	}
	return out
}

// TestRedriveDisjointTasks: two redrives of one dead-letter queue whose
// items are disjoint run together, and each moves exactly its items; one
// over items the running tasks still hold starts and leaves those items to
// them (left_to, skipped as other_task: issue 49); an item that dies after
// a task started is not the task's.
func TestRedriveDisjointTasks(t *testing.T) {
	t.Parallel()
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.Start(t, b)
		dlq := withTwoSources(s, "dj", 30)
		ta, err := s.C.DeadRedrive(ctx, &pb.DeadRedriveRequest{QueueName: dlq, RateLimit: 20, Filter: &pb.DeadFilter{SourceQueue: "dj-a"}})
		require.NoError(t, err)
		tb, err := s.C.DeadRedrive(ctx, &pb.DeadRedriveRequest{QueueName: dlq, RateLimit: 20, Filter: &pb.DeadFilter{SourceQueue: "dj-b"}})
		require.NoError(t, err, "a second redrive of disjoint items starts while the first runs")
		assert.Equal(t, int64(30), ta.Matched)
		assert.Equal(t, int64(30), tb.Matched)
		servertest.Eventually(t, func() bool {
			a, b := getTask(s, ta.TaskId), getTask(s, tb.TaskId)
			return a.Status == "running" && b.Status == "running" && a.Moved > 0 && b.Moved > 0
		}, "both tasks run at once")

		over, err := s.C.DeadRedrive(ctx, &pb.DeadRedriveRequest{QueueName: dlq, All: true})
		require.NoError(t, err, "a redrive over held items starts, leaving them")
		assert.Equal(t, over.Matched, over.Skipped, "every matched item is held by one of the two")
		assert.Equal(t, over.Matched, over.LeftTo[ta.TaskId]+over.LeftTo[tb.TaskId])
		assert.Equal(t, int64(0), waitTask(s, over.TaskId).Moved)

		// An item that dies now is no running task's: it stays.
		importDead(s, dlq, deadItem{payload: "a-late", source: "dj-a", reason: "expired"})

		da, db := waitTask(s, ta.TaskId), waitTask(s, tb.TaskId)
		assert.Equal(t, "completed", da.Status)
		assert.Equal(t, "completed", db.Status)
		assert.Equal(t, int64(30), da.Moved)
		assert.Equal(t, int64(30), db.Moved)
		requireOnce(s, "dj-a", names("a", 30))
		requireOnce(s, "dj-b", names("b", 30))
		assert.Equal(t, []string{"a-late"}, payloads(s.Items(dlq)), "the item that died after the start stays")
	})
}

// TestRedriveSingleItemWhileGroupRuns: while a throttled group redrive
// runs, a redrive of one item (named by id) starts, whether the item is
// outside the group or one the group has not reached yet; every item is
// moved exactly once.
func TestRedriveSingleItemWhileGroupRuns(t *testing.T) {
	t.Parallel()
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.Start(t, b)
		dlq := withTwoSources(s, "si", 20)
		group, err := s.C.DeadRedrive(ctx, &pb.DeadRedriveRequest{QueueName: dlq, RateLimit: 10, Filter: &pb.DeadFilter{SourceQueue: "si-a"}})
		require.NoError(t, err)
		ids := map[string]string{}
		for _, it := range deadList(s, dlq, nil, 100) {
			ids[string(it.Payload)] = it.Id
		}
		// One outside the group, one the group holds but has not reached.
		for _, p := range []string{"b07", "a19"} {
			one, err := s.C.DeadRedrive(ctx, &pb.DeadRedriveRequest{QueueName: dlq, Filter: &pb.DeadFilter{Ids: []string{ids[p]}}})
			require.NoError(t, err, "redrive of %s while the group runs", p)
			done := waitTask(s, one.TaskId)
			assert.Equal(t, int64(1), done.Moved, p)
		}
		assert.Equal(t, "running", getTask(s, group.TaskId).Status, "the group redrive still runs")
		done := waitTask(s, group.TaskId)
		assert.Equal(t, "completed", done.Status)
		assert.Equal(t, int64(19), done.Moved+done.Skipped, "the group's items but the one moved by id")
		requireOnce(s, "si-a", names("a", 20))
		requireOnce(s, "si-b", []string{"b07"})
	})
}

// TestRedriveOverlapNeverTwice: redrives by id of items a running group
// redrive holds, started while it runs, never move an item twice nor lose
// one.
func TestRedriveOverlapNeverTwice(t *testing.T) {
	t.Parallel()
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.Start(t, b)
		dlq := withExpiredDead(s, "ov", 60)
		group, err := s.C.DeadRedrive(ctx, &pb.DeadRedriveRequest{QueueName: dlq, RateLimit: 100, All: true})
		require.NoError(t, err)
		dead := deadList(s, dlq, nil, 100)
		var wg sync.WaitGroup
		var mu sync.Mutex
		var started []string
		for i := len(dead) - 1; i >= 0; i -= 3 {
			wg.Go(func() {
				one, err := s.C.DeadRedrive(ctx, &pb.DeadRedriveRequest{QueueName: dlq, Filter: &pb.DeadFilter{Ids: []string{dead[i].Id}}})
				if assert.NoError(t, err) {
					mu.Lock()
					started = append(started, one.TaskId)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		var moved int64
		for _, id := range append(started, group.TaskId) {
			done := waitTask(s, id)
			assert.Equal(t, "completed", done.Status)
			moved += done.Moved
		}
		assert.Equal(t, int64(60), moved, "every item counted moved once")
		seen := map[string]int{}
		for _, it := range s.Items("ov") {
			seen[string(it.Payload)]++
		}
		require.Len(t, seen, 60, "no item lost")
		for p, k := range seen {
			require.Equal(t, 1, k, "item %s moved %d times", p, k)
		}
		assert.Empty(t, s.Items(dlq))
	})
}

// TestRedrivePauseResume: a paused task moves nothing, stays paused across
// a restart, and once resumed moves the rest, each item once. The task is
// paced by the server's fake clock (1 item per second): only moving the
// clock lets it go on.
func TestRedrivePauseResume(t *testing.T) {
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.StartFake(t, b)
		dlq := withExpiredDead(s, "pr", 6)
		task, err := s.C.DeadRedrive(ctx, &pb.DeadRedriveRequest{QueueName: dlq, RateLimit: 1, All: true})
		require.NoError(t, err)
		servertest.Eventually(t, func() bool { return getTask(s, task.TaskId).Moved == 1 }, "the first item moves at once")

		p, err := s.C.RedrivesPause(ctx, &pb.RedriveTaskRequest{TaskId: task.TaskId})
		require.NoError(t, err)
		assert.Contains(t, []string{"pausing", "paused"}, p.Status)
		servertest.Eventually(t, func() bool { return getTask(s, task.TaskId).Status == "paused" }, "the task pauses")
		s.Advance(time.Hour)
		got := getTask(s, task.TaskId)
		assert.Equal(t, "paused", got.Status)
		assert.Equal(t, int64(1), got.Moved, "a paused task moves nothing")
		assert.Len(t, s.Items(dlq), 5)
		// Pausing again changes nothing.
		p, err = s.C.RedrivesPause(ctx, &pb.RedriveTaskRequest{TaskId: task.TaskId})
		require.NoError(t, err)
		assert.Equal(t, "paused", p.Status)

		s.Restart()
		s.Advance(time.Hour)
		got = getTask(s, task.TaskId)
		assert.Equal(t, "paused", got.Status, "the pause survives a restart")
		assert.Equal(t, int64(1), got.Moved)
		assert.Len(t, s.Items(dlq), 5)

		r, err := s.C.RedrivesResume(ctx, &pb.RedriveTaskRequest{TaskId: task.TaskId})
		require.NoError(t, err)
		assert.Equal(t, "running", r.Status)
		for moved := int64(2); moved <= 6; moved++ {
			servertest.Eventually(t, func() bool { return getTask(s, task.TaskId).Moved >= moved-1 }, "moved %d", moved-1)
			s.Advance(time.Second)
			servertest.Eventually(t, func() bool { return getTask(s, task.TaskId).Moved >= moved }, "one more item each second: %d", moved)
		}
		done := waitTask(s, task.TaskId)
		assert.Equal(t, "completed", done.Status)
		assert.Equal(t, int64(6), done.Moved)
		assert.Len(t, s.Items("pr"), 6)
		assert.Empty(t, s.Items(dlq))

		_, err = s.C.RedrivesPause(ctx, &pb.RedriveTaskRequest{TaskId: task.TaskId})
		servertest.RequireCode(t, err, styx.CodeConflict, task.TaskId, "completed")
		_, err = s.C.RedrivesResume(ctx, &pb.RedriveTaskRequest{TaskId: "rd-nope"})
		servertest.RequireCode(t, err, styx.CodeNotFound, "rd-nope")
		_, err = s.C.RedrivesPause(ctx, &pb.RedriveTaskRequest{})
		servertest.RequireCode(t, err, styx.CodeBadRequest, "task_id")
	})
}

// TestRedriveReRate: a running task's rate changes from its next step:
// at 1 item per second of the fake clock a tenth of a second moves
// nothing; at 10 each tenth moves one.
func TestRedriveReRate(t *testing.T) {
	t.Parallel()
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.StartFake(t, b)
		dlq := withExpiredDead(s, "rr8", 20)
		task, err := s.C.DeadRedrive(ctx, &pb.DeadRedriveRequest{QueueName: dlq, RateLimit: 1, All: true})
		require.NoError(t, err)
		servertest.Eventually(t, func() bool { return getTask(s, task.TaskId).Moved == 1 }, "the first item moves at once")
		s.Advance(time.Second)
		servertest.Eventually(t, func() bool { return getTask(s, task.TaskId).Moved == 2 }, "one item a second")

		_, err = s.C.RedrivesUpdate(ctx, &pb.RedrivesUpdateRequest{TaskId: task.TaskId, RateLimit: -1})
		servertest.RequireCode(t, err, styx.CodeBadRequest, "rate_limit", "0..1000000")
		u, err := s.C.RedrivesUpdate(ctx, &pb.RedrivesUpdateRequest{TaskId: task.TaskId, RateLimit: 10})
		require.NoError(t, err)
		assert.Equal(t, int32(10), u.RateLimit)
		// The new rate starts with a full burst of one item.
		servertest.Eventually(t, func() bool { return getTask(s, task.TaskId).Moved == 3 }, "the new rate applies at once")
		for want := int64(4); want <= 8; want++ {
			s.Advance(100 * time.Millisecond)
			servertest.Eventually(t, func() bool { return getTask(s, task.TaskId).Moved == want }, "one item each tenth of a second: %d", want)
		}
		got := getTask(s, task.TaskId)
		assert.Equal(t, int32(10), got.RateLimit)
		assert.Equal(t, "running", got.Status)

		// Unthrottled, the rest go without the clock moving.
		_, err = s.C.RedrivesUpdate(ctx, &pb.RedrivesUpdateRequest{TaskId: task.TaskId, RateLimit: 0})
		require.NoError(t, err)
		done := waitTask(s, task.TaskId)
		assert.Equal(t, int64(20), done.Moved)
		assert.Len(t, s.Items("rr8"), 20)
		_, err = s.C.RedrivesUpdate(ctx, &pb.RedrivesUpdateRequest{TaskId: task.TaskId, RateLimit: 5})
		servertest.RequireCode(t, err, styx.CodeConflict, "completed")
	})
}

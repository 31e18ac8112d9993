package service_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	styx "github.com/styxq/styx"
	"github.com/styxq/styx/internal/servertest"
	pb "github.com/styxq/styx/styxpb"
)

// Redrive outcomes and the canary (issue 49, "Redrive outcomes" and "Safer
// redrives"): a task counts what became of the items it moved, after it
// ended and across a restart, and a canary moves a few items, waits for
// their outcome, then goes on or pauses.

// outcomesOf returns task id's outcomes, or zero ones when it has none.
func outcomesOf(s *servertest.Server, id string) *pb.RedriveOutcomes {
	s.T.Helper()
	o := getTask(s, id).Outcomes
	if o == nil {
		return &pb.RedriveOutcomes{}
	}
	return o
}

// requireOutcomes waits until task id's outcomes are want (10 s at most).
func requireOutcomes(s *servertest.Server, id string, want *pb.RedriveOutcomes, msg string) {
	s.T.Helper()
	counts := func(o *pb.RedriveOutcomes) [4]int64 { return [4]int64{o.Completed, o.Retried, o.DeadAgain, o.Pending} }
	var got *pb.RedriveOutcomes
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		got = outcomesOf(s, id)
		if counts(got) == counts(want) || time.Now().After(deadline) {
			break
		}
	}
	require.Equal(s.T, counts(want), counts(got), "%s: completed, retried, dead again, pending", msg)
}

// TestRedriveOutcomes: 5 items redriven; a consumer completes 2, retries 1
// (it is pending again), fails 1 for good (dead again) and holds 1: the
// task shows completed 2, retried 1, dead again 1, pending 2, after it
// ended, and after a restart, when it goes on counting (the held item
// completes), until a day after it ended (OutcomeWindow).
func TestRedriveOutcomes(t *testing.T) {
	t.Parallel()
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.StartFake(t, b)
		dlq := withExpiredDead(s, "ro", 5)
		task, err := s.C.DeadRedrive(ctx, &pb.DeadRedriveRequest{QueueName: dlq, All: true})
		require.NoError(t, err)
		done := waitTask(s, task.TaskId)
		require.Equal(t, int64(5), done.Moved)
		require.NotNil(t, done.Outcomes, "a task counts its outcomes")
		assert.Equal(t, int64(5), done.Outcomes.Pending, "nothing happened to the items yet")
		require.NotNil(t, done.OutcomesUntil)
		assert.Equal(t, done.FinishedAt.AsTime().Add(24*time.Hour), done.OutcomesUntil.AsTime(), "counted for a day after the task ended")

		leased := s.Lease("ro", 5)
		require.Len(t, leased.Items, 5)
		p := leased.Partition
		ids := make([]string, 5)
		for i, it := range leased.Items {
			ids[i] = it.Id
		}
		s.Complete("ro", p, ids[0], ids[1])
		s.Retry("ro", p, &pb.QueueRetryItem{Id: ids[2], Error: "flaky"})
		s.Retry("ro", p, &pb.QueueRetryItem{Id: ids[3], Error: "bad order", Dead: true})
		want := &pb.RedriveOutcomes{Completed: 2, Retried: 1, DeadAgain: 1, Pending: 2}
		requireOutcomes(s, task.TaskId, want, "after the consumer's calls")
		s.WaitItems(dlq, 1) // the item that died again is back

		s.Restart()
		requireOutcomes(s, task.TaskId, want, "after a restart")
		s.Complete("ro", p, ids[4]) // its lease survived the restart
		requireOutcomes(s, task.TaskId, &pb.RedriveOutcomes{Completed: 3, Retried: 1, DeadAgain: 1, Pending: 1}, "counted after the restart")

		list, err := s.C.RedrivesList(ctx, &pb.RedrivesListRequest{QueueName: dlq})
		require.NoError(t, err)
		require.Len(t, list.Tasks, 1)
		assert.Equal(t, int64(3), list.Tasks[0].Outcomes.Completed, "redrives.list shows the outcomes too")

		// A day after the task ended, its outcomes are no longer counted:
		// the item retried once completes, and the task still shows it
		// pending (the tick runs after the complete's iteration, whose
		// report it would have made).
		s.Advance(24*time.Hour + time.Second)
		again := s.Lease("ro", 1)
		require.Len(t, again.Items, 1)
		s.Complete("ro", again.Partition, again.Items[0].Id)
		s.Tick("ro")
		requireOutcomes(s, task.TaskId, &pb.RedriveOutcomes{Completed: 3, Retried: 1, DeadAgain: 1, Pending: 1}, "not counted after the window")

		dry, err := s.C.DeadRedrive(ctx, &pb.DeadRedriveRequest{QueueName: dlq, DryRun: true})
		require.NoError(t, err)
		assert.Nil(t, dry.Outcomes, "a dry run has no outcomes")
	})
}

// TestRedriveCanary: a canary of 2 moves 2 items and waits; both completed,
// the task goes on and moves the rest. A canary whose item is retried
// pauses the task (canary failed), which stays paused across a restart and
// goes on when resumed; one whose items nobody takes pauses when its
// timeout passes (canary timed_out).
func TestRedriveCanary(t *testing.T) {
	t.Parallel()
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.StartFake(t, b)

		dlq := withExpiredDead(s, "rc", 6)
		task, err := s.C.DeadRedrive(ctx, &pb.DeadRedriveRequest{QueueName: dlq, All: true, Canary: 2})
		require.NoError(t, err)
		assert.Equal(t, int32(2), task.Canary)
		assert.Equal(t, "5m0s", task.CanaryTimeout, "the default wait")
		var got *pb.RedriveTask
		servertest.Eventually(t, func() bool { got = getTask(s, task.TaskId); return got.CanaryStatus == "waiting" }, "the canary waits")
		assert.Equal(t, int64(2), got.Moved, "the canary moves its items, no more")
		assert.Equal(t, int64(2), got.CanaryMoved)
		assert.Equal(t, s.Now().Add(5*time.Minute).Unix(), got.CanaryDeadline.AsTime().Unix())
		assert.Equal(t, "running", got.Status)
		assert.Len(t, s.Items(dlq), 4)
		leased := s.Lease("rc", 2)
		require.Len(t, leased.Items, 2)
		s.Complete("rc", leased.Partition, leased.Items[0].Id, leased.Items[1].Id)
		done := waitTask(s, task.TaskId)
		assert.Equal(t, "completed", done.Status)
		assert.Equal(t, "passed", done.CanaryStatus)
		assert.Equal(t, int64(6), done.Moved, "the canary passed: the task moved the rest")

		dlq = withExpiredDead(s, "rf", 4)
		task, err = s.C.DeadRedrive(ctx, &pb.DeadRedriveRequest{QueueName: dlq, All: true, Canary: 1, CanaryTimeout: "1m"})
		require.NoError(t, err)
		servertest.Eventually(t, func() bool { return getTask(s, task.TaskId).CanaryStatus == "waiting" }, "the canary waits")
		leased = s.Lease("rf", 1)
		require.Len(t, leased.Items, 1)
		s.Retry("rf", leased.Partition, &pb.QueueRetryItem{Id: leased.Items[0].Id, Error: "still broken"})
		servertest.Eventually(t, func() bool { got = getTask(s, task.TaskId); return got.Status == "paused" }, "a failed canary pauses the task")
		assert.Equal(t, "failed", got.CanaryStatus)
		assert.Equal(t, int64(1), got.Moved)
		s.Restart()
		got = getTask(s, task.TaskId)
		assert.Equal(t, "paused", got.Status, "the canary's pause survives a restart")
		assert.Equal(t, "failed", got.CanaryStatus)
		_, err = s.C.RedrivesResume(ctx, &pb.RedriveTaskRequest{TaskId: task.TaskId})
		require.NoError(t, err)
		done = waitTask(s, task.TaskId)
		assert.Equal(t, "completed", done.Status)
		assert.Equal(t, int64(4), done.Moved, "resumed after its canary failed, the task goes on")

		dlq = withExpiredDead(s, "rt", 3)
		task, err = s.C.DeadRedrive(ctx, &pb.DeadRedriveRequest{QueueName: dlq, All: true, Canary: 1, CanaryTimeout: "1m"})
		require.NoError(t, err)
		servertest.Eventually(t, func() bool { return getTask(s, task.TaskId).CanaryStatus == "waiting" }, "the canary waits")
		s.Advance(time.Minute)
		servertest.Eventually(t, func() bool { got = getTask(s, task.TaskId); return got.Status == "paused" }, "a canary nobody completes times out")
		assert.Equal(t, "timed_out", got.CanaryStatus)
		assert.Equal(t, int64(1), got.Moved)

		for _, bad := range []*pb.DeadRedriveRequest{
			{QueueName: dlq, All: true, Canary: -1},
			{QueueName: dlq, All: true, Canary: 10_001},
		} {
			_, err := s.C.DeadRedrive(ctx, bad)
			servertest.RequireCode(t, err, styx.CodeBadRequest, "canary")
		}
		_, err = s.C.DeadRedrive(ctx, &pb.DeadRedriveRequest{QueueName: dlq, All: true, Canary: 1, CanaryTimeout: "25h"})
		servertest.RequireCode(t, err, styx.CodeBadRequest, "canary_timeout")
	})
}

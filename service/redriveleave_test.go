package service_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/servertest"
	pb "github.com/styxq/styx/styxpb"
)

// Redrive tasks that see each other (issue 49, points 1, 2 and 7): a new
// task leaves the items an unfinished task holds to it instead of being
// refused, a dry run counts them as the real run will, and a paused task is
// shown as paused, its pauses apart from its running time.

// withReferences creates the dead-letter queue <name>-dlq of the queues
// <name>-a and <name>-b, holding n dead items of each: payloads a00.. and
// b00.., references <name>-a-0.. and <name>-b-0...
func withReferences(s *servertest.Server, name string, n int) string {
	s.T.Helper()
	dlq := name + "-dlq"
	s.CreateQueue(&pb.QueueInfo{QueueName: dlq})
	req := &pb.StorageItemsImportRequest{QueueName: dlq}
	for _, src := range []string{"a", "b"} {
		s.CreateQueue(&pb.QueueInfo{QueueName: name + "-" + src, DeadQueue: dlq})
		for i := range n {
			req.Items = append(req.Items, &pb.StorageItem{
				Payload: fmt.Appendf(nil, "%s%02d", src, i), Reference: fmt.Sprintf("%s-%s-%d", name, src, i),
				SourceQueue: name + "-" + src, DeadReason: "expired", DeadAt: servertest.At(time.Now()), Attempts: 3,
			})
		}
	}
	_, err := s.C.StorageItemsImport(ctx, req)
	require.NoError(s.T, err)
	return dlq
}

// TestRedriveLeavesHeldItems (point 1): while a throttled redrive of one
// source runs, a redrive by business reference of an item it holds starts
// (it was refused with 409) and leaves the item to it, saying so (left_to,
// skipped as other_task); the throttled task moves it. A redrive of the
// items no task holds moves them.
func TestRedriveLeavesHeldItems(t *testing.T) {
	t.Parallel()
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.StartFake(t, b)
		dlq := withReferences(s, "lr", 10)
		held, err := s.C.DeadRedrive(ctx, &pb.DeadRedriveRequest{QueueName: dlq, RateLimit: 1, Filter: &pb.DeadFilter{SourceQueue: "lr-a"}})
		require.NoError(t, err)
		servertest.Eventually(t, func() bool { return getTask(s, held.TaskId).Moved == 1 }, "the first item moves at once")

		ref, err := s.C.DeadRedrive(ctx, &pb.DeadRedriveRequest{QueueName: dlq, Filter: &pb.DeadFilter{Reference: "lr-a-5"}})
		require.NoError(t, err, "a redrive by reference of an item a running task holds starts")
		assert.Equal(t, int64(1), ref.Matched)
		assert.Equal(t, int64(1), ref.Skipped)
		assert.Equal(t, map[string]int64{held.TaskId: 1}, ref.LeftTo)
		assert.Equal(t, map[string]int64{"other_task": 1}, ref.SkipReasons)
		done := waitTask(s, ref.TaskId)
		assert.Equal(t, "completed", done.Status)
		assert.Equal(t, int64(0), done.Moved)
		assert.Contains(t, done.Warning, "1 held by another redrive task")
		assert.Equal(t, "running", getTask(s, held.TaskId).Status)

		free, err := s.C.DeadRedrive(ctx, &pb.DeadRedriveRequest{QueueName: dlq, Filter: &pb.DeadFilter{Reference: "lr-b-5"}})
		require.NoError(t, err)
		assert.Empty(t, free.LeftTo)
		assert.Equal(t, int64(1), waitTask(s, free.TaskId).Moved)

		_, err = s.C.RedrivesUpdate(ctx, &pb.RedrivesUpdateRequest{TaskId: held.TaskId, RateLimit: 0})
		require.NoError(t, err)
		done = waitTask(s, held.TaskId)
		assert.Equal(t, int64(10), done.Moved, "the throttled task moves every item of its own")
		requireOnce(s, "lr-a", names("a", 10))
		requireOnce(s, "lr-b", []string{"b05"})
	})
}

// TestRedriveDryRunSeesOtherTasks (point 2): while a paused task holds
// items, a dry run of every item counts them as skipped (other_task, by
// the task in left_to), and the real run confirmed with that dry run's
// count starts (it was refused with 409) and does exactly what the dry run
// said; the paused task, resumed, moves its items. Every item is moved
// once.
func TestRedriveDryRunSeesOtherTasks(t *testing.T) {
	t.Parallel()
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.StartFake(t, b)
		dlq := withReferences(s, "lv", 20)
		held, err := s.C.DeadRedrive(ctx, &pb.DeadRedriveRequest{QueueName: dlq, RateLimit: 1, Filter: &pb.DeadFilter{SourceQueue: "lv-a"}})
		require.NoError(t, err)
		servertest.Eventually(t, func() bool { return getTask(s, held.TaskId).Moved == 1 }, "the first item moves at once")
		_, err = s.C.RedrivesPause(ctx, &pb.RedriveTaskRequest{TaskId: held.TaskId})
		require.NoError(t, err)
		servertest.Eventually(t, func() bool { return getTask(s, held.TaskId).Status == "paused" }, "the task pauses")
		holds := 20 - getTask(s, held.TaskId).Moved
		dry, err := s.C.DeadRedrive(ctx, &pb.DeadRedriveRequest{QueueName: dlq, DryRun: true})
		require.NoError(t, err)
		assert.Equal(t, 20+holds, dry.Matched)
		assert.Equal(t, int64(20), dry.WouldMove, "only the items no task holds")
		assert.Equal(t, holds, dry.WouldSkip)
		assert.Equal(t, map[string]int64{"other_task": holds}, dry.SkipReasons)
		assert.Equal(t, map[string]int64{held.TaskId: holds}, dry.LeftTo)
		require.Contains(t, dry.ByDestination, "lv-a")
		assert.Equal(t, holds, dry.ByDestination["lv-a"].WouldSkip)
		assert.Equal(t, int64(20), dry.ByDestination["lv-b"].WouldMove)

		expect := dry.Matched
		all, err := s.C.DeadRedrive(ctx, &pb.DeadRedriveRequest{QueueName: dlq, All: true, UpTo: dry.UpTo, ExpectMatched: &expect})
		require.NoError(t, err, "the real run starts as the dry run said")
		assert.Equal(t, dry.LeftTo, all.LeftTo)
		done := waitTask(s, all.TaskId)
		assert.Equal(t, "completed", done.Status)
		assert.Equal(t, dry.WouldMove, done.Moved, "moved what the dry run said")
		assert.Equal(t, dry.WouldSkip, done.Skipped, "left what the dry run said")
		assert.Equal(t, dry.SkipReasons, done.SkipReasons)
		requireOnce(s, "lv-b", names("b", 20))
		assert.Len(t, s.Items(dlq), int(holds), "the paused task's items stay for it")
		assert.Equal(t, "paused", getTask(s, held.TaskId).Status)

		_, err = s.C.RedrivesUpdate(ctx, &pb.RedrivesUpdateRequest{TaskId: held.TaskId, RateLimit: 0})
		require.NoError(t, err)
		_, err = s.C.RedrivesResume(ctx, &pb.RedriveTaskRequest{TaskId: held.TaskId})
		require.NoError(t, err)
		done = waitTask(s, held.TaskId)
		assert.Equal(t, "completed", done.Status)
		assert.Equal(t, int64(20), done.Moved, "the held task moves every item of its own")
		requireOnce(s, "lv-a", names("a", 20))
		assert.Empty(t, s.Items(dlq))
	})
}

// TestRedriveByIDTakesHeldItems: a redrive naming an item by id still
// takes it from a paused task that holds it (it reaches it first), and its
// dry run says it would move it; the paused task, resumed, does not move
// it again.
func TestRedriveByIDTakesHeldItems(t *testing.T) {
	t.Parallel()
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.StartFake(t, b)
		dlq := withReferences(s, "bi", 5)
		held, err := s.C.DeadRedrive(ctx, &pb.DeadRedriveRequest{QueueName: dlq, RateLimit: 1, Filter: &pb.DeadFilter{SourceQueue: "bi-a"}})
		require.NoError(t, err)
		servertest.Eventually(t, func() bool { return getTask(s, held.TaskId).Moved == 1 }, "the first item moves at once")
		_, err = s.C.RedrivesPause(ctx, &pb.RedriveTaskRequest{TaskId: held.TaskId})
		require.NoError(t, err)
		servertest.Eventually(t, func() bool { return getTask(s, held.TaskId).Status == "paused" }, "the task pauses")
		var id string
		for _, it := range deadList(s, dlq, &pb.DeadFilter{Reference: "bi-a-3"}, 10) {
			id = it.Id
		}
		require.NotEmpty(t, id)
		dry, err := s.C.DeadRedrive(ctx, &pb.DeadRedriveRequest{QueueName: dlq, DryRun: true, Filter: &pb.DeadFilter{Ids: []string{id}}})
		require.NoError(t, err)
		assert.Equal(t, int64(1), dry.WouldMove)
		assert.Empty(t, dry.LeftTo)
		one, err := s.C.DeadRedrive(ctx, &pb.DeadRedriveRequest{QueueName: dlq, Filter: &pb.DeadFilter{Ids: []string{id}}})
		require.NoError(t, err)
		assert.Equal(t, int64(1), waitTask(s, one.TaskId).Moved)
		_, err = s.C.RedrivesUpdate(ctx, &pb.RedrivesUpdateRequest{TaskId: held.TaskId, RateLimit: 0})
		require.NoError(t, err)
		_, err = s.C.RedrivesResume(ctx, &pb.RedriveTaskRequest{TaskId: held.TaskId})
		require.NoError(t, err)
		assert.Equal(t, "completed", waitTask(s, held.TaskId).Status)
		requireOnce(s, "bi-a", names("a", 5))
	})
}

// TestRedrivePausedTime: a paused task says since when it is paused
// (paused_at), and the time its pauses took (paused_ms) once they end, by
// resume or by a cancel, which ends a paused task at once (cancelled).
func TestRedrivePausedTime(t *testing.T) {
	t.Parallel()
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.StartFake(t, b)
		dlq := withExpiredDead(s, "pt", 6)
		task, err := s.C.DeadRedrive(ctx, &pb.DeadRedriveRequest{QueueName: dlq, RateLimit: 1, All: true})
		require.NoError(t, err)
		servertest.Eventually(t, func() bool { return getTask(s, task.TaskId).Moved == 1 }, "the first item moves at once")
		assert.Nil(t, getTask(s, task.TaskId).PausedAt, "a running task has no paused_at")

		_, err = s.C.RedrivesPause(ctx, &pb.RedriveTaskRequest{TaskId: task.TaskId})
		require.NoError(t, err)
		servertest.Eventually(t, func() bool { return getTask(s, task.TaskId).Status == "paused" }, "the task pauses")
		got := getTask(s, task.TaskId)
		require.NotNil(t, got.PausedAt, "a paused task says since when")
		assert.Equal(t, s.Now().UTC(), got.PausedAt.AsTime())
		assert.Zero(t, got.PausedMs)

		s.Advance(17 * time.Second)
		r, err := s.C.RedrivesResume(ctx, &pb.RedriveTaskRequest{TaskId: task.TaskId})
		require.NoError(t, err)
		assert.Equal(t, "running", r.Status)
		assert.Nil(t, r.PausedAt)
		assert.Equal(t, int64(17_000), r.PausedMs, "the pause took 17 s")

		_, err = s.C.RedrivesPause(ctx, &pb.RedriveTaskRequest{TaskId: task.TaskId})
		require.NoError(t, err)
		servertest.Eventually(t, func() bool { return getTask(s, task.TaskId).Status == "paused" }, "the task pauses again")
		s.Advance(3 * time.Second)
		c, err := s.C.RedrivesCancel(ctx, &pb.RedriveTaskRequest{TaskId: task.TaskId})
		require.NoError(t, err)
		assert.Equal(t, "cancelled", c.Status, "a paused task is cancelled at once")
		assert.Nil(t, c.PausedAt)
		assert.Equal(t, int64(20_000), c.PausedMs, "both pauses, the last ended by the cancel")
		s.Restart()
		got = getTask(s, task.TaskId)
		assert.Equal(t, "cancelled", got.Status)
		assert.Equal(t, int64(20_000), got.PausedMs, "stored")
	})
}

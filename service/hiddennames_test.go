package service_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/styxq/styx/internal/servertest"
	pb "github.com/styxq/styx/styxpb"
)

// TestRedriveSummariesHideOtherQueues (issue 36, finding 8): a key limited
// to some queues that redrives a dead-letter queue shared with other
// queues sees how many items were skipped, but never the names of the
// queues it does not cover, in the dry run, the task, or the task list.
func TestRedriveSummariesHideOtherQueues(t *testing.T) {
	t.Parallel()
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s, _ := servertest.StartAuth(t, b)
		s.CreateQueue(&pb.QueueInfo{QueueName: "shared-dead"})
		s.CreateQueue(&pb.QueueInfo{QueueName: "orders", DeadQueue: "shared-dead"})
		s.CreateQueue(&pb.QueueInfo{QueueName: "payroll-secret", DeadQueue: "shared-dead"})
		importDead(s, "shared-dead",
			deadItem{payload: "o1", source: "orders", reason: "expired"},
			deadItem{payload: "o2", source: "orders", reason: "expired"},
			deadItem{payload: "p1", source: "payroll-secret", reason: "expired"},
		)
		c := s.Client(s.NewKey("orders-oncall", []string{"dead"}, "orders*", "shared-*"))
		seen := func(m *pb.RedriveTask) string {
			b, err := protojson.Marshal(m)
			require.NoError(t, err)
			return string(b)
		}
		dry, err := c.DeadRedrive(ctx, &pb.DeadRedriveRequest{QueueName: "shared-dead", DryRun: true, All: true})
		require.NoError(t, err)
		// A dry run answers its plan at once.
		require.EqualValues(t, 2, dry.WouldMove, seen(dry))
		require.EqualValues(t, 1, dry.WouldSkip, seen(dry))
		require.NotContains(t, seen(dry), "payroll")

		task, err := c.DeadRedrive(ctx, &pb.DeadRedriveRequest{QueueName: "shared-dead", All: true})
		require.NoError(t, err)
		task = waitTaskWith(s, c, task.TaskId)
		require.EqualValues(t, 2, task.Moved, seen(task))
		require.EqualValues(t, 1, task.Skipped, seen(task))
		require.NotContains(t, seen(task), "payroll")
		list, err := c.RedrivesList(ctx, &pb.RedrivesListRequest{QueueName: "shared-dead"})
		require.NoError(t, err)
		for _, lt := range list.Tasks {
			require.NotContains(t, seen(lt), "payroll")
		}
		// An admin sees every queue by name.
		all, err := s.C.RedrivesGet(ctx, &pb.RedriveTaskRequest{TaskId: task.TaskId})
		require.NoError(t, err)
		require.Contains(t, seen(all), "payroll-secret")
	})
}

// waitTaskWith polls a redrive task through c until it is finished.
func waitTaskWith(s *servertest.Server, c interface {
	RedrivesGet(context.Context, *pb.RedriveTaskRequest) (*pb.RedriveTask, error)
}, id string) *pb.RedriveTask {
	s.T.Helper()
	var t *pb.RedriveTask
	servertest.Eventually(s.T, func() bool {
		var err error
		t, err = c.RedrivesGet(ctx, &pb.RedriveTaskRequest{TaskId: id})
		require.NoError(s.T, err)
		return t.Status == "completed" || t.Status == "cancelled" || t.Status == "failed"
	}, "task %s should finish", id)
	return t
}

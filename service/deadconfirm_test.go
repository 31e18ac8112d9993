package service_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	styx "github.com/styxq/styx"
	"github.com/styxq/styx/internal/servertest"
	pb "github.com/styxq/styx/styxpb"
)

// TestDeadConfirmedMatched (issue 48, 5): dead.delete and dead.redrive act
// on the items a client counted and confirmed, or on none. A dry run gives
// the count (matched) and the newest item it saw (up_to); sent back with
// the action, up_to leaves out the items that died after the count and
// expect_matched refuses the action (409, both counts named) when the items
// up to it are no longer as many. On every backend.
func TestDeadConfirmedMatched(t *testing.T) {
	t.Parallel()
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.Start(t, b)
		// count is a dry run over dlq's items of source src.
		count := func(dlq, src string) *pb.RedriveTask {
			t.Helper()
			task, err := s.C.DeadRedrive(ctx, &pb.DeadRedriveRequest{QueueName: dlq, Filter: &pb.DeadFilter{SourceQueue: src}, DryRun: true})
			require.NoError(t, err)
			require.NotEmpty(t, task.UpTo, "an exact dry run says the newest item it saw")
			return task
		}
		// later makes n more items of src die, with payloads prefix-0 and on.
		later := func(dlq, src, prefix string, n int) {
			t.Helper()
			items := make([]deadItem, n)
			for i := range items {
				items[i] = deadItem{payload: fmt.Sprintf("%s-%d", prefix, i), source: src, reason: "expired"}
			}
			importDead(s, dlq, items...)
		}

		t.Run("Delete", func(t *testing.T) {
			dlq := withExpiredDead(s, "orders", 5)
			dry := count(dlq, "orders")
			require.EqualValues(t, 5, dry.Matched)
			later(dlq, "orders", "late", 3)

			// The 5 counted are deleted; the 3 that died after stay.
			res, err := s.C.DeadDelete(ctx, &pb.DeadDeleteRequest{QueueName: dlq, Filter: &pb.DeadFilter{SourceQueue: "orders"},
				ExpectMatched: proto.Int64(5), UpTo: dry.UpTo})
			require.NoError(t, err)
			require.EqualValues(t, 5, res.Deleted)
			require.Equal(t, []string{"late-0", "late-1", "late-2"}, payloads(deadList(s, dlq, nil, 0)))

			// A count that is no longer true: nothing is deleted.
			_, err = s.C.DeadDelete(ctx, &pb.DeadDeleteRequest{QueueName: dlq, Filter: &pb.DeadFilter{SourceQueue: "orders"}, ExpectMatched: proto.Int64(2)})
			servertest.RequireCode(t, err, styx.CodeConflict, "3 items match now, 2 were confirmed", "nothing was deleted")
			dry = count(dlq, "orders")
			ids := deadList(s, dlq, nil, 0)
			res, err = s.C.DeadDelete(ctx, &pb.DeadDeleteRequest{QueueName: dlq, Filter: &pb.DeadFilter{Ids: []string{ids[0].Id}}})
			require.NoError(t, err)
			require.EqualValues(t, 1, res.Deleted)
			_, err = s.C.DeadDelete(ctx, &pb.DeadDeleteRequest{QueueName: dlq, All: true, ExpectMatched: proto.Int64(3), UpTo: dry.UpTo})
			servertest.RequireCode(t, err, styx.CodeConflict, "2 items match now, 3 were confirmed")
			require.Equal(t, []string{"late-1", "late-2"}, payloads(deadList(s, dlq, nil, 0)))

			// Bad values name their field.
			_, err = s.C.DeadDelete(ctx, &pb.DeadDeleteRequest{QueueName: dlq, All: true, UpTo: "nope"})
			servertest.RequireCode(t, err, styx.CodeBadRequest, "up_to")
			_, err = s.C.DeadDelete(ctx, &pb.DeadDeleteRequest{QueueName: dlq, All: true, ExpectMatched: proto.Int64(-1)})
			servertest.RequireCode(t, err, styx.CodeBadRequest, "expect_matched")

			// all with up_to and the count as it is: every item counted.
			dry = count(dlq, "orders")
			later(dlq, "orders", "later", 1)
			res, err = s.C.DeadDelete(ctx, &pb.DeadDeleteRequest{QueueName: dlq, All: true, ExpectMatched: proto.Int64(dry.Matched), UpTo: dry.UpTo})
			require.NoError(t, err)
			require.EqualValues(t, 2, res.Deleted)
			require.Equal(t, []string{"later-0"}, payloads(deadList(s, dlq, nil, 0)))
		})

		t.Run("Redrive", func(t *testing.T) {
			dlq := withExpiredDead(s, "billing", 4)
			dry := count(dlq, "billing")
			require.EqualValues(t, 4, dry.Matched)
			later(dlq, "billing", "late", 2)

			task, err := s.C.DeadRedrive(ctx, &pb.DeadRedriveRequest{QueueName: dlq, Filter: &pb.DeadFilter{SourceQueue: "billing"},
				ExpectMatched: proto.Int64(4), UpTo: dry.UpTo})
			require.NoError(t, err)
			require.EqualValues(t, 4, task.Matched)
			require.Equal(t, dry.UpTo, task.UpTo)
			task = waitTask(s, task.TaskId)
			require.Equal(t, "completed", task.Status)
			require.EqualValues(t, 4, task.Moved)
			require.Equal(t, []string{"late-0", "late-1"}, payloads(deadList(s, dlq, nil, 0)), "the items that died after the count stay")
			back, err := s.C.StorageItemsList(ctx, &pb.StorageItemsListRequest{QueueName: "billing", Limit: 100})
			require.NoError(t, err)
			require.Len(t, back.Items, 4, "the 4 counted are back in their source queue")

			// A count that is no longer true: no task starts.
			before, err := s.C.RedrivesList(ctx, &pb.RedrivesListRequest{QueueName: dlq})
			require.NoError(t, err)
			_, err = s.C.DeadRedrive(ctx, &pb.DeadRedriveRequest{QueueName: dlq, Filter: &pb.DeadFilter{SourceQueue: "billing"}, ExpectMatched: proto.Int64(4)})
			servertest.RequireCode(t, err, styx.CodeConflict, "2 items match now, 4 were confirmed", "nothing was redriven")
			after, err := s.C.RedrivesList(ctx, &pb.RedrivesListRequest{QueueName: dlq})
			require.NoError(t, err)
			require.Len(t, after.Tasks, len(before.Tasks))
			_, err = s.C.DeadRedrive(ctx, &pb.DeadRedriveRequest{QueueName: dlq, All: true, UpTo: "0000000000001"})
			servertest.RequireCode(t, err, styx.CodeBadRequest, "up_to")
			require.Len(t, deadList(s, dlq, nil, 0), 2)
		})
	})
}

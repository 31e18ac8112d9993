package service_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	styx "github.com/styxq/styx"
	"github.com/styxq/styx/internal/servertest"
	pb "github.com/styxq/styx/styxpb"
)

// TestOrphanedDeadLetterQueue (issue 49, 6): a queue is a dead-letter queue
// while a queue names it or while it holds dead items, so a DLQ that the
// last queue naming it dropped (the README's retirement step), or whose
// only source was deleted, can still be listed, grouped, redriven and
// emptied; once its dead items are gone it is an ordinary queue.
func TestOrphanedDeadLetterQueue(t *testing.T) {
	t.Parallel()
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.Start(t, b)
		for _, c := range []struct {
			name   string
			orphan func(src string)
		}{
			{"SourceDropsIt", func(src string) {
				require.NoError(t, s.C.QueuesUpdate(ctx, &pb.QueueInfo{QueueName: src, UpdateMask: []string{"dead_queue"}}))
			}},
			{"SourceDeleted", func(src string) {
				require.NoError(t, s.C.QueuesDelete(ctx, &pb.QueuesDeleteRequest{QueueName: src}))
			}},
		} {
			t.Run(c.name, func(t *testing.T) {
				src := "od-" + c.name
				dlq := withDLQ(s, src, &pb.QueueInfo{})
				deadItemsIn(s, src, dlq, 3)
				c.orphan(src)

				list, err := s.C.DeadList(ctx, &pb.DeadListRequest{QueueName: dlq})
				require.NoError(t, err, "dead.list of a DLQ no queue names, holding dead items")
				require.Len(t, list.Items, 3)
				groups, err := s.C.DeadGroups(ctx, &pb.DeadGroupsRequest{QueueName: dlq})
				require.NoError(t, err)
				require.Len(t, groups.Groups, 1)
				assert.EqualValues(t, 3, groups.Groups[0].Count)

				s.CreateQueue(&pb.QueueInfo{QueueName: src + "-new"})
				task, err := s.C.DeadRedrive(ctx, &pb.DeadRedriveRequest{QueueName: dlq, Destination: src + "-new",
					Filter: &pb.DeadFilter{Ids: []string{list.Items[0].Id}}})
				require.NoError(t, err)
				assert.EqualValues(t, 1, waitTask(s, task.TaskId).Moved)
				del, err := s.C.DeadDelete(ctx, &pb.DeadDeleteRequest{QueueName: dlq, All: true})
				require.NoError(t, err)
				assert.EqualValues(t, 2, del.Deleted)

				// Empty and named by no queue: an ordinary queue again.
				_, err = s.C.DeadList(ctx, &pb.DeadListRequest{QueueName: dlq})
				servertest.RequireCode(t, err, styx.CodeBadRequest, "is not a dead-letter queue", "holds no dead items")
			})
		}
	})
}

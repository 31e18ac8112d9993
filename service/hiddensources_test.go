package service_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/styxq/styx/internal/auth"
	pb "github.com/styxq/styx/styxpb"
)

// TestUncoveredSourcesHidden (issue 48, 6): a key limited to "orders*" and
// "shared-*" reads a dead-letter queue that also takes the dead items of
// "payroll-secret", a queue it does not cover. No answer or error names
// that queue: a dead item's source_queue reads auth.HiddenQueue in
// dead.list, storage/items.list and dead.groups; queue.stats folds its
// dead_by_source count into auth.HiddenQueue (the counts still sum to the
// dead items); the refusals of queues.delete, queues.update and
// queues.create count the queues they would name instead of naming them.
// An admin key sees every name.
func TestUncoveredSourcesHidden(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		s, _ := startAuth(t, b)
		s.createQueue(&pb.QueueInfo{QueueName: "shared-dead"})
		s.createQueue(&pb.QueueInfo{QueueName: "orders", DeadQueue: "shared-dead", MaxAttempts: 1})
		s.createQueue(&pb.QueueInfo{QueueName: "payroll-secret", DeadQueue: "shared-dead", MaxAttempts: 1})
		s.createQueue(&pb.QueueInfo{QueueName: "payroll-dlq"})
		s.createQueue(&pb.QueueInfo{QueueName: "shared-mid", DeadQueue: "payroll-dlq"})
		for q, payloads := range map[string][]string{"orders": {"o1", "o2"}, "payroll-secret": {"p1"}} {
			s.produce(q, payloads...)
			for range payloads {
				it := s.lease(q, 1).Items[0]
				s.retry(q, 0, &pb.QueueRetryItem{Id: it.Id, Dead: true, Error: "timeout"})
			}
		}
		s.waitItems("shared-dead", 3)
		eventually(t, func() bool {
			g, err := s.C.DeadGroups(ctx, &pb.DeadGroupsRequest{QueueName: "shared-dead"})
			require.NoError(t, err)
			return g.TotalItems == 3
		}, "shared-dead's groups should count its 3 dead items")
		c := s.client(s.newKey("orders-oncall", []string{"admin"}, "orders*", "shared-*"))
		seen := func(m proto.Message) string {
			b, err := protojson.Marshal(m)
			require.NoError(t, err)
			return string(b)
		}
		sources := func(items []*pb.StorageItem) map[string]int {
			out := map[string]int{}
			for _, it := range items {
				out[it.SourceQueue]++
			}
			return out
		}

		t.Run("DeadList", func(t *testing.T) {
			res, err := c.DeadList(ctx, &pb.DeadListRequest{QueueName: "shared-dead"})
			require.NoError(t, err)
			require.NotContains(t, seen(res), "payroll")
			require.Equal(t, map[string]int{"orders": 2, auth.HiddenQueue: 1}, sources(res.Items))
		})
		t.Run("StorageItemsList", func(t *testing.T) {
			res, err := c.StorageItemsList(ctx, &pb.StorageItemsListRequest{QueueName: "shared-dead"})
			require.NoError(t, err)
			require.NotContains(t, seen(res), "payroll")
			require.Equal(t, map[string]int{"orders": 2, auth.HiddenQueue: 1}, sources(res.Items))
		})
		t.Run("DeadGroups", func(t *testing.T) {
			res, err := c.DeadGroups(ctx, &pb.DeadGroupsRequest{QueueName: "shared-dead"})
			require.NoError(t, err)
			require.NotContains(t, seen(res), "payroll")
			got := map[string]int64{}
			for _, g := range res.Groups {
				got[g.SourceQueue] += g.Count
			}
			require.Equal(t, map[string]int64{"orders": 2, auth.HiddenQueue: 1}, got)
		})
		t.Run("QueueStats", func(t *testing.T) {
			res, err := c.QueueStats(ctx, &pb.QueueStatsRequest{QueueName: "shared-dead"})
			require.NoError(t, err)
			require.NotContains(t, seen(res), "payroll")
			require.Equal(t, map[string]int64{"orders": 2, auth.HiddenQueue: 1}, res.DeadBySource)
		})
		t.Run("QueuesDelete", func(t *testing.T) {
			err := c.QueuesDelete(ctx, &pb.QueuesDeleteRequest{QueueName: "shared-dead"})
			requireCode(t, err, 400, "queue 'shared-dead' cannot be deleted; it is the dead_queue of 'orders' and a queue the key does not cover")
			require.NotContains(t, err.Error(), "payroll")
		})
		t.Run("QueuesUpdateOfADeadLetterQueue", func(t *testing.T) {
			s.createQueue(&pb.QueueInfo{QueueName: "shared-other"})
			err := c.QueuesUpdate(ctx, &pb.QueueInfo{QueueName: "shared-dead", DeadQueue: "shared-other"})
			requireCode(t, err, 400, "is the dead_queue of 'orders' and a queue the key does not cover")
			require.NotContains(t, err.Error(), "payroll")
		})
		t.Run("QueuesCreateWithAChainedDeadQueue", func(t *testing.T) {
			err := c.QueuesCreate(ctx, &pb.QueueInfo{QueueName: "orders-new", DeadQueue: "shared-mid"})
			requireCode(t, err, 400, "'shared-mid' has a dead_queue of its own (a queue the key does not cover)")
			require.NotContains(t, err.Error(), "payroll")
		})

		// An admin key of every queue sees every name.
		stats, err := s.C.QueueStats(ctx, &pb.QueueStatsRequest{QueueName: "shared-dead"})
		require.NoError(t, err)
		require.Equal(t, map[string]int64{"orders": 2, "payroll-secret": 1}, stats.DeadBySource)
		list, err := s.C.DeadList(ctx, &pb.DeadListRequest{QueueName: "shared-dead"})
		require.NoError(t, err)
		require.Equal(t, map[string]int{"orders": 2, "payroll-secret": 1}, sources(list.Items))
		err = s.C.QueuesDelete(ctx, &pb.QueuesDeleteRequest{QueueName: "shared-dead"})
		requireCode(t, err, 400, "it is the dead_queue of 'orders', 'payroll-secret'")
	})
}

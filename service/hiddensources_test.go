package service_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/styxq/styx/internal/auth"
	"github.com/styxq/styx/internal/servertest"
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
	t.Parallel()
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s, _ := servertest.StartAuth(t, b)
		s.CreateQueue(&pb.QueueInfo{QueueName: "shared-dead"})
		s.CreateQueue(&pb.QueueInfo{QueueName: "orders", DeadQueue: "shared-dead", MaxAttempts: 1})
		s.CreateQueue(&pb.QueueInfo{QueueName: "payroll-secret", DeadQueue: "shared-dead", MaxAttempts: 1})
		s.CreateQueue(&pb.QueueInfo{QueueName: "payroll-other", DeadQueue: "shared-dead", MaxAttempts: 1})
		s.CreateQueue(&pb.QueueInfo{QueueName: "payroll-dlq"})
		s.CreateQueue(&pb.QueueInfo{QueueName: "shared-mid", DeadQueue: "payroll-dlq"})
		for q, payloads := range map[string][]string{"orders": {"o1", "o2"}, "payroll-secret": {"p1"}, "payroll-other": {"p2"}} {
			s.Produce(q, payloads...)
			for range payloads {
				it := s.Lease(q, 1).Items[0]
				s.Retry(q, 0, &pb.QueueRetryItem{Id: it.Id, Dead: true, Error: "timeout"})
			}
		}
		s.WaitItems("shared-dead", 4)
		servertest.Eventually(t, func() bool {
			g, err := s.C.DeadGroups(ctx, &pb.DeadGroupsRequest{QueueName: "shared-dead"})
			require.NoError(t, err)
			return g.TotalItems == 4
		}, "shared-dead's groups should count its 4 dead items")
		c := s.Client(s.NewKey("orders-oncall", []string{"admin"}, "orders*", "shared-*"))
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
			require.Equal(t, map[string]int{"orders": 2, auth.HiddenQueue: 2}, sources(res.Items))
		})
		t.Run("StorageItemsList", func(t *testing.T) {
			res, err := c.StorageItemsList(ctx, &pb.StorageItemsListRequest{QueueName: "shared-dead"})
			require.NoError(t, err)
			require.NotContains(t, seen(res), "payroll")
			require.Equal(t, map[string]int{"orders": 2, auth.HiddenQueue: 2}, sources(res.Items))
		})
		t.Run("DeadGroups", func(t *testing.T) {
			res, err := c.DeadGroups(ctx, &pb.DeadGroupsRequest{QueueName: "shared-dead"})
			require.NoError(t, err)
			require.NotContains(t, seen(res), "payroll")
			got := map[string]int64{}
			for _, g := range res.Groups {
				got[g.SourceQueue] += g.Count
			}
			require.Equal(t, map[string]int64{"orders": 2, auth.HiddenQueue: 2}, got)
		})
		t.Run("QueueStats", func(t *testing.T) {
			res, err := c.QueueStats(ctx, &pb.QueueStatsRequest{QueueName: "shared-dead"})
			require.NoError(t, err)
			require.NotContains(t, seen(res), "payroll")
			require.Equal(t, map[string]int64{"orders": 2, auth.HiddenQueue: 2}, res.DeadBySource)
		})
		t.Run("QueuesDelete", func(t *testing.T) {
			err := c.QueuesDelete(ctx, &pb.QueuesDeleteRequest{QueueName: "shared-dead"})
			servertest.RequireCode(t, err, 400, "queue 'shared-dead' cannot be deleted; it is the dead_queue of 'orders' and one or more queues the key does not cover")
			require.NotContains(t, err.Error(), "payroll")
		})
		t.Run("QueuesUpdateOfADeadLetterQueue", func(t *testing.T) {
			s.CreateQueue(&pb.QueueInfo{QueueName: "shared-other"})
			err := c.QueuesUpdate(ctx, &pb.QueueInfo{QueueName: "shared-dead", DeadQueue: "shared-other"})
			servertest.RequireCode(t, err, 400, "is the dead_queue of 'orders' and one or more queues the key does not cover")
			require.NotContains(t, err.Error(), "payroll")
		})
		t.Run("QueuesCreateWithAChainedDeadQueue", func(t *testing.T) {
			err := c.QueuesCreate(ctx, &pb.QueueInfo{QueueName: "orders-new", DeadQueue: "shared-mid"})
			servertest.RequireCode(t, err, 400, "'shared-mid' has a dead_queue of its own (a queue the key does not cover)")
			require.NotContains(t, err.Error(), "payroll")
		})

		// The dead_queue of a queue the key covers, when the key does not
		// cover it (shared-mid sends its dead items to payroll-dlq).
		t.Run("DeadQueueInQueuesInfoAndList", func(t *testing.T) {
			info, err := c.QueuesInfo(ctx, &pb.QueuesInfoRequest{QueueName: "shared-mid"})
			require.NoError(t, err)
			require.Equal(t, auth.HiddenQueue, info.DeadQueue)
			info, err = c.QueuesInfo(ctx, &pb.QueuesInfoRequest{QueueName: "orders"})
			require.NoError(t, err)
			require.Equal(t, "shared-dead", info.DeadQueue, "a covered dead_queue is named")
			list, err := c.QueuesList(ctx, &pb.QueuesListRequest{Limit: 100})
			require.NoError(t, err)
			require.NotContains(t, seen(list), "payroll")
			dead := map[string]string{}
			for _, q := range list.Items {
				dead[q.QueueName] = q.DeadQueue
			}
			require.Equal(t, auth.HiddenQueue, dead["shared-mid"])
			require.Equal(t, "shared-dead", dead["orders"])
		})
		t.Run("DeadQueueInQueueRetry", func(t *testing.T) {
			require.NoError(t, c.QueueProduce(ctx, &pb.QueueProduceRequest{QueueName: "shared-mid", RequestTimeout: "1m",
				Items: []*pb.QueueProduceItem{{Bytes: []byte("m1")}}}))
			leased, err := c.QueueLease(ctx, &pb.QueueLeaseRequest{QueueName: "shared-mid", BatchSize: 1, ClientId: "oncall", RequestTimeout: "5s"})
			require.NoError(t, err)
			require.Len(t, leased.Items, 1)
			res, err := c.QueueRetry(ctx, &pb.QueueRetryRequest{QueueName: "shared-mid", Partition: leased.Partition,
				Items: []*pb.QueueRetryItem{{Id: leased.Items[0].Id, Dead: true, Error: "bad"}}})
			require.NoError(t, err)
			require.NotContains(t, seen(res), "payroll")
			require.Len(t, res.Outcomes, 1)
			require.Equal(t, "dead_lettered", res.Outcomes[0].Outcome)
			require.Equal(t, auth.HiddenQueue, res.Outcomes[0].DeadQueue)
			stats, err := c.QueueStats(ctx, &pb.QueueStatsRequest{QueueName: "shared-mid"})
			require.NoError(t, err)
			require.NotContains(t, seen(stats), "payroll")
		})
		// A redrive task an admin started, by a source queue and to a
		// destination the key does not cover (it matches no item: the dead
		// items stay for the other subtests).
		t.Run("RedriveTask", func(t *testing.T) {
			task, err := s.C.DeadRedrive(ctx, &pb.DeadRedriveRequest{QueueName: "shared-dead",
				Filter: &pb.DeadFilter{SourceQueue: "payroll-secret", Reason: "expired"}, Destination: "payroll-dlq"})
			require.NoError(t, err)
			got, err := c.RedrivesGet(ctx, &pb.RedriveTaskRequest{TaskId: task.TaskId})
			require.NoError(t, err)
			require.NotContains(t, seen(got), "payroll")
			require.Equal(t, auth.HiddenQueue, got.Filter.SourceQueue)
			require.Equal(t, auth.HiddenQueue, got.Destination)
			list, err := c.RedrivesList(ctx, &pb.RedrivesListRequest{QueueName: "shared-dead"})
			require.NoError(t, err)
			require.NotEmpty(t, list.Tasks)
			require.NotContains(t, seen(list), "payroll")
			// The admin key sees them.
			got, err = s.C.RedrivesGet(ctx, &pb.RedriveTaskRequest{TaskId: task.TaskId})
			require.NoError(t, err)
			require.Equal(t, "payroll-secret", got.Filter.SourceQueue)
			require.Equal(t, "payroll-dlq", got.Destination)
		})
		// A filter by a source queue the key does not cover is refused like
		// any other uncovered queue name, whether that queue exists or not:
		// the counts would tell whether it has dead items there.
		t.Run("FilterBySourceQueueNotCovered", func(t *testing.T) {
			for _, src := range []string{"payroll-secret", "payroll-none"} {
				f := &pb.DeadFilter{SourceQueue: src}
				want := []string{"forbidden; key 'orders-oncall'", "not for '" + src + "'"}
				_, err := c.DeadList(ctx, &pb.DeadListRequest{QueueName: "shared-dead", Filter: f})
				servertest.RequireCode(t, err, 403, want...)
				_, err = c.DeadGroups(ctx, &pb.DeadGroupsRequest{QueueName: "shared-dead", Filter: f})
				servertest.RequireCode(t, err, 403, want...)
				_, err = c.DeadDelete(ctx, &pb.DeadDeleteRequest{QueueName: "shared-dead", Filter: f})
				servertest.RequireCode(t, err, 403, want...)
				_, err = c.DeadRedrive(ctx, &pb.DeadRedriveRequest{QueueName: "shared-dead", Filter: f, DryRun: true})
				servertest.RequireCode(t, err, 403, want...)
			}
			res, err := c.DeadList(ctx, &pb.DeadListRequest{QueueName: "shared-dead", Filter: &pb.DeadFilter{SourceQueue: "orders"}})
			require.NoError(t, err)
			require.Len(t, res.Items, 2, "a covered source queue filters as before")
		})
		// Two hidden sources' groups of one reason and fingerprint are one
		// group: the key cannot tell how many queues it does not cover send
		// items there.
		t.Run("DeadGroupsMergesHiddenSources", func(t *testing.T) {
			res, err := c.DeadGroups(ctx, &pb.DeadGroupsRequest{QueueName: "shared-dead"})
			require.NoError(t, err)
			require.Len(t, res.Groups, 2)
			require.Equal(t, int64(2), res.TotalGroups)
			require.Equal(t, int64(4), res.TotalItems)
			got := map[string]int64{}
			for _, g := range res.Groups {
				got[g.SourceQueue] = g.Count
				require.Equal(t, "explicit", g.Reason)
				require.Equal(t, "timeout", g.SampleError)
			}
			require.Equal(t, map[string]int64{"orders": 2, auth.HiddenQueue: 2}, got)
			require.Equal(t, res.Groups[0].Fingerprint, res.Groups[1].Fingerprint)
			// One group asked for: the total still counts the hidden sources
			// as one.
			res, err = c.DeadGroups(ctx, &pb.DeadGroupsRequest{QueueName: "shared-dead", Limit: 1})
			require.NoError(t, err)
			require.Len(t, res.Groups, 1)
			require.Equal(t, int64(2), res.TotalGroups)
			// The admin key sees three groups.
			res, err = s.C.DeadGroups(ctx, &pb.DeadGroupsRequest{QueueName: "shared-dead"})
			require.NoError(t, err)
			require.Equal(t, int64(3), res.TotalGroups)
		})

		// An admin key of every queue sees every name.
		stats, err := s.C.QueueStats(ctx, &pb.QueueStatsRequest{QueueName: "shared-dead"})
		require.NoError(t, err)
		require.Equal(t, map[string]int64{"orders": 2, "payroll-secret": 1, "payroll-other": 1}, stats.DeadBySource)
		list, err := s.C.DeadList(ctx, &pb.DeadListRequest{QueueName: "shared-dead"})
		require.NoError(t, err)
		require.Equal(t, map[string]int{"orders": 2, "payroll-secret": 1, "payroll-other": 1}, sources(list.Items))
		err = s.C.QueuesDelete(ctx, &pb.QueuesDeleteRequest{QueueName: "shared-dead"})
		servertest.RequireCode(t, err, 400, "it is the dead_queue of 'orders', 'payroll-other', 'payroll-secret'")
	})
}

package service_test

import (
	"maps"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	styx "github.com/styxq/styx"
	"github.com/styxq/styx/internal/auth"
	"github.com/styxq/styx/internal/servertest"
	pb "github.com/styxq/styx/styxpb"
)

// TestDeadEditChecksSourceQueue (issue 36, finding 5): dead.edit needs a
// key that covers the dead item's source queue, where a redrive to the
// source delivers the edited payload, and not only the dead-letter queue.
// A key whose dead scope covers orders* is refused (403, a message that
// does not name the source queue) the edit of an item that died in billing
// and went to the shared dead-letter queue orders-dead; the payload stays
// as it was, and an admin's routine redrive delivers the original bytes to
// billing. The same key still edits orders' own dead items. Before, the
// edit succeeded and the redrive delivered the key's bytes into billing.
func TestDeadEditChecksSourceQueue(t *testing.T) {
	t.Parallel()
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s, _ := servertest.StartAuth(t, b)
		s.CreateQueue(&pb.QueueInfo{QueueName: "orders-dead"})
		s.CreateQueue(&pb.QueueInfo{QueueName: "orders", DeadQueue: "orders-dead", MaxAttempts: 1})
		s.CreateQueue(&pb.QueueInfo{QueueName: "billing", DeadQueue: "orders-dead", MaxAttempts: 1})
		for q, payload := range map[string]string{"orders": "order 1", "billing": "pay 10 to alice"} {
			s.Produce(q, payload)
			it := s.Lease(q, 1)
			s.Retry(q, it.Partition, &pb.QueueRetryItem{Id: it.Items[0].Id, Dead: true})
		}
		s.WaitItems("orders-dead", 2)

		limited := s.Client(s.NewKey("orders-dead-editor", []string{"dead"}, "orders*"))
		list, err := limited.DeadList(ctx, &pb.DeadListRequest{QueueName: "orders-dead"})
		require.NoError(t, err)
		require.Len(t, list.Items, 2)
		ids := map[string]string{} // source queue, as the key sees it → id
		for _, it := range list.Items {
			ids[it.SourceQueue] = it.Id
		}
		// billing, which the key does not cover, is not named (issue 48).
		require.Equal(t, []string{"orders", auth.HiddenQueue}, slices.Sorted(maps.Keys(ids)))
		ids["billing"] = ids[auth.HiddenQueue]

		_, err = limited.DeadEdit(ctx, &pb.DeadEditRequest{QueueName: "orders-dead", Id: ids["billing"], Payload: []byte("pay 10000 to mallory")})
		servertest.RequireCode(t, err, styx.CodeForbidden, "key 'orders-dead-editor' does not cover the source queue of dead item '"+ids["billing"]+"'")
		require.NotContains(t, err.Error(), "billing", "the error names no queue the key cannot see")

		edited, err := limited.DeadEdit(ctx, &pb.DeadEditRequest{QueueName: "orders-dead", Id: ids["orders"], Payload: []byte("order 1, fixed")})
		require.NoError(t, err)
		require.Equal(t, "order 1, fixed", string(edited.Payload))

		// Without --auth nothing changes: covered by the other dead.edit
		// tests. An admin's routine redrive: each item to its source.
		task, err := s.C.DeadRedrive(ctx, &pb.DeadRedriveRequest{QueueName: "orders-dead", All: true})
		require.NoError(t, err)
		servertest.Eventually(t, func() bool {
			task, err = s.C.RedrivesGet(ctx, &pb.RedriveTaskRequest{TaskId: task.TaskId})
			return err == nil && task.Status != "running"
		}, "the redrive ends")
		require.Equal(t, int64(2), task.Moved, "%v", task)
		require.Equal(t, []string{"pay 10 to alice"}, payloads(s.Items("billing")), "billing gets the bytes its item died with")
		require.Equal(t, []string{"order 1, fixed"}, payloads(s.Items("orders")))
	})
}

package service_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	pb "github.com/styxq/styx/styxpb"
)

// TestClusterRedriveOutcomes (issue 49): on two PostgreSQL nodes, a task
// started on node a with a canary of 1 passes it when a consumer of node b
// completes the canary's item (node b counts it, node a reads node b's
// record), and both nodes show the task's outcomes.
func TestClusterRedriveOutcomes(t *testing.T) {
	t.Parallel()
	nodes := cluster(t, 2)
	a, b := nodes[0], nodes[1]
	withExpiredDead(a, "co", 3)
	task, err := a.C.DeadRedrive(ctx, &pb.DeadRedriveRequest{QueueName: "co-dlq", All: true, Canary: 1})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return getTask(a, task.TaskId).CanaryStatus == "waiting" }, 10*time.Second, 20*time.Millisecond)

	leased := b.Lease("co", 1)
	require.Len(t, leased.Items, 1)
	b.Complete("co", leased.Partition, leased.Items[0].Id)
	var done *pb.RedriveTask
	require.Eventually(t, func() bool { done = getTask(a, task.TaskId); return done.Status == "completed" },
		20*time.Second, 50*time.Millisecond, "node a's task passes its canary, completed on node b")
	require.Equal(t, "passed", done.CanaryStatus)
	require.Equal(t, int64(3), done.Moved)
	for i, n := range nodes {
		require.Eventually(t, func() bool {
			o := getTask(n, task.TaskId).Outcomes
			return o != nil && o.Completed == 1 && o.Pending == 2
		}, 10*time.Second, 50*time.Millisecond, "node %d shows the outcomes", i)
	}
}

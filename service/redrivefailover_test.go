package service_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/daemon"
	"github.com/styxq/styx/internal/clock"
	"github.com/styxq/styx/internal/servertest"
	pb "github.com/styxq/styx/styxpb"
)

// TestClusterRedrivePauseFailover: a paused redrive task stays paused when
// its node stops and no node takes it over; resumed through the other
// node, it runs there from where it stopped and every item is moved
// exactly once (ADR 0004, amendment for issue 39, point 2).
//
// Node a runs three tasks, 40 dead items each: p1 is paused through node
// a (stored paused); p2 is paused through node b while it runs on node a
// (a pause request that node a has not read yet: node b's adopt stores the
// task paused); w keeps running. Node a then stops, which ends its
// PostgreSQL sessions and its claims. Node b takes w over: that shows node
// b looked for the stopped node's tasks (every 5 s), and in that pass it
// left p1 and p2 paused. The nodes share a fake clock: a task moves one
// item at once and then one per second of that clock, so nothing moves
// unless the test moves the clock.
func TestClusterRedrivePauseFailover(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Now())
	nodes := clusterWith(t, 2, func(c *daemon.Config) { c.Clock = clk })
	for _, n := range nodes {
		n.Clock = clk
	}
	a, b := nodes[0], nodes[1]
	const n = 40
	run := func(src string) string {
		dlq := withExpiredDead(a, src, n)
		task, err := a.C.DeadRedrive(ctx, &pb.DeadRedriveRequest{QueueName: dlq, RateLimit: 1, All: true})
		require.NoError(t, err)
		servertest.Eventually(t, func() bool { return getTask(b, task.TaskId).Moved == 1 }, "%s moves its first item at once", src)
		return task.TaskId
	}
	p1, p2, w := run("pf1"), run("pf2"), run("pfw")

	got, err := a.C.RedrivesPause(ctx, &pb.RedriveTaskRequest{TaskId: p1})
	require.NoError(t, err)
	assert.Contains(t, []string{"pausing", "paused"}, got.Status)
	servertest.Eventually(t, func() bool { return getTask(b, p1).Status == "paused" }, "p1 pauses on node a")
	got, err = b.C.RedrivesPause(ctx, &pb.RedriveTaskRequest{TaskId: p2})
	require.NoError(t, err)
	assert.Equal(t, "pausing", got.Status, "a pause asked of the node running the task")

	a.Stop()
	// Node b takes w over within an adopt pass (every 5 s): w moves its
	// next item at once. Meanwhile, and after, p1 and p2 move nothing.
	require.Eventually(t, func() bool {
		t1, t2, tw := getTask(b, p1), getTask(b, p2), getTask(b, w)
		if !assert.Equal(t, "paused", t1.Status, "p1 stays paused") ||
			!assert.Equal(t, int64(1), t1.Moved, "p1 moves nothing") ||
			!assert.Contains(t, []string{"pausing", "paused"}, t2.Status, "p2 is not taken over") ||
			!assert.Equal(t, int64(1), t2.Moved, "p2 moves nothing") {
			return true // failed: stop polling
		}
		return tw.Moved == 2 && tw.Status == "running" && t2.Status == "paused"
	}, 15*time.Second, 20*time.Millisecond, "node b takes w over and stores p2 paused")
	require.False(t, t.Failed(), "a paused task was taken over")
	b.Advance(time.Hour)
	servertest.Eventually(t, func() bool { return getTask(b, w).Moved >= 3 }, "w runs on node b")
	for _, id := range []string{p1, p2} {
		got := getTask(b, id)
		assert.Equal(t, "paused", got.Status, "%s stays paused", id)
		assert.Equal(t, int64(1), got.Moved, "%s moves nothing", id)
	}
	assert.Len(t, b.Items("pf1-dlq"), n-1)
	assert.Len(t, b.Items("pf2-dlq"), n-1)

	for _, id := range []string{p1, p2} {
		got, err := b.C.RedrivesResume(ctx, &pb.RedriveTaskRequest{TaskId: id})
		require.NoError(t, err)
		assert.Equal(t, "running", got.Status)
		servertest.Eventually(t, func() bool { return getTask(b, id).Moved == 2 }, "%s resumed on node b moves an item at once", id)
	}
	// One item a second each; w, 1 item ahead, finishes a second early.
	for moved := int64(3); moved <= n; moved++ {
		b.Advance(time.Second)
		servertest.Eventually(t, func() bool {
			return getTask(b, p1).Moved >= moved && getTask(b, p2).Moved >= moved
		}, "one more item each second on node b: %d", moved)
	}
	// w is not waited on above: on a loaded machine it can miss a second's
	// token (the limiter keeps one) and end the loop an item behind, so the
	// clock moves on until it has moved its last item too.
	servertest.Eventually(t, func() bool {
		if getTask(b, w).Moved >= n {
			return true
		}
		b.Advance(time.Second)
		return false
	}, "w moves its last item")
	for _, id := range []string{p1, p2, w} {
		done := waitTask(b, id)
		assert.Equal(t, "completed", done.Status, id)
		assert.Equal(t, int64(n), done.Moved, id)
	}
	for _, src := range []string{"pf1", "pf2", "pfw"} {
		want := make([]string, n)
		for i := range want {
			want[i] = fmt.Sprint(i)
		}
		requireOnce(b, src, want)
		assert.Empty(t, b.Items(src+"-dlq"), src)
	}
}

package web_test

import (
	"context"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	pb "github.com/styxq/styx/styxpb"
	"github.com/styxq/styx/styxtest"
)

// TestBrowserRedrivePauseRerate (issue 39, point 2): the redrives page
// pauses, re-rates and resumes a running redrive, and lists a second
// redrive of the same dead-letter queue (one item, by id) beside it.
func TestBrowserRedrivePauseRerate(t *testing.T) {
	t.Parallel()
	srv := styxtest.Start(t, styxtest.Options{})
	c := srv.Client
	ctx := context.Background()
	styxtest.CreateQueue(t, c, &pb.QueueInfo{QueueName: "pay-dlq"})
	styxtest.CreateQueue(t, c, &pb.QueueInfo{QueueName: "pay", DeadQueue: "pay-dlq"})
	kill(t, c, "pay", 30, "card declined", func(i int) string { return "charge" })
	waitDead(t, c, "pay-dlq", 30)
	dead, err := c.DeadList(ctx, &pb.DeadListRequest{QueueName: "pay-dlq", Limit: 100})
	require.NoError(t, err)
	require.Len(t, dead.Items, 30)
	task, err := c.DeadRedrive(ctx, &pb.DeadRedriveRequest{QueueName: "pay-dlq", All: true, RateLimit: 1})
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = c.RedrivesCancel(ctx, &pb.RedriveTaskRequest{TaskId: task.TaskId}) })
	get := func() *pb.RedriveTask {
		got, err := c.RedrivesGet(ctx, &pb.RedriveTaskRequest{TaskId: task.TaskId})
		require.NoError(t, err)
		return got
	}
	row := `tr[aria-current="true"]`

	b := newBrowser(t, srv.Endpoint)
	b.open("/ui/redrives?task=" + task.TaskId)
	b.waitText(row, "running")
	b.run(chromedp.Click(`button[aria-label="Pause `+task.TaskId+`"]`, chromedp.ByQuery))
	b.waitText(row, "paused")
	paused := get()
	require.Equal(t, "paused", paused.Status)

	b.run(chromedp.Click(`button[aria-label="Change the rate of `+task.TaskId+`"]`, chromedp.ByQuery))
	b.waitDialog("moves 1 item per second now")
	b.run(chromedp.SetValue(`#task-rate`, "5", chromedp.ByQuery), chromedp.Click(`#confirm-ok`, chromedp.ByQuery))
	b.waitText(row, "5/s")
	require.EqualValues(t, 5, get().RateLimit)
	got := get()
	require.Equal(t, "paused", got.Status, "re-rating a paused task leaves it paused")
	require.Equal(t, paused.Moved, got.Moved, "a paused task moves nothing")

	// A redrive of one item, by id, while the group's task is unfinished.
	one, err := c.DeadRedrive(ctx, &pb.DeadRedriveRequest{QueueName: "pay-dlq", Filter: &pb.DeadFilter{Ids: []string{dead.Items[29].Id}}})
	require.NoError(t, err)
	b.waitText("#task-"+one.TaskId, "completed")

	b.run(chromedp.Click(`button[aria-label="Resume `+task.TaskId+`"]`, chromedp.ByQuery))
	b.waitText(row, "running")
	require.Equal(t, "running", get().Status)
	b.waitText(row, "5/s")
	b.screenshot("redrives")
}

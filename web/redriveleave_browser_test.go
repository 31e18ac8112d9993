package web_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	pb "github.com/styxq/styx/styxpb"
	"github.com/styxq/styx/styxtest"
)

// TestBrowserRedrivesSeeEachOther (issue 49, points 2 and 7): with one
// redrive paused and another running on a dead-letter queue, the DLQ
// page's banner lists both with their status (it said "A redrive is
// running" of the first alone, and that one redrive runs per queue); the
// redrive dialog says how many items it will move as the server's dry run
// counts them, the items the two tasks hold left to them and named (it
// said it would move them all, and the start then failed); the redrives
// list and the paused task's page give no ETA while it is paused, and say
// how long it has been paused.
func TestBrowserRedrivesSeeEachOther(t *testing.T) {
	t.Parallel()
	srv := styxtest.Start(t, styxtest.Options{})
	c := srv.Client
	ctx := context.Background()
	styxtest.CreateQueue(t, c, &pb.QueueInfo{QueueName: "see-dlq"})
	styxtest.CreateQueue(t, c, &pb.QueueInfo{QueueName: "see", DeadQueue: "see-dlq"})
	kill(t, c, "see", 10, "card declined", func(int) string { return `{"card":1}` })
	kill(t, c, "see", 10, "gateway timeout", func(int) string { return `{"gw":1}` })
	kill(t, c, "see", 5, "bad json", func(int) string { return `{"bad":1}` })
	waitDead(t, c, "see-dlq", 25)
	// The running task moves its one-item canary and then waits for its
	// outcome (no consumer takes it): it stays running and moves nothing
	// more, so the dialog's count holds however long a loaded machine
	// takes. (A task moving items while the dialog is open changes the
	// matched count, and the start is then refused with 409 and asked
	// again, as it should be: with 10 items at one a second the test
	// failed that way under load.)
	start := func(errText string, canary int32) *pb.RedriveTask {
		task, err := c.DeadRedrive(ctx, &pb.DeadRedriveRequest{QueueName: "see-dlq", RateLimit: 1, Filter: &pb.DeadFilter{ErrorContains: errText},
			Canary: canary, CanaryTimeout: "1h"})
		require.NoError(t, err)
		t.Cleanup(func() { _, _ = c.RedrivesCancel(ctx, &pb.RedriveTaskRequest{TaskId: task.TaskId}) })
		return task
	}
	paused, running := start("card declined", 0), start("gateway timeout", 1)
	require.Eventually(t, func() bool {
		got, err := c.RedrivesGet(ctx, &pb.RedriveTaskRequest{TaskId: running.TaskId})
		return err == nil && got.CanaryStatus == "waiting"
	}, time.Minute, 10*time.Millisecond, "the running task waits for its canary")
	_, err := c.RedrivesPause(ctx, &pb.RedriveTaskRequest{TaskId: paused.TaskId})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		got, err := c.RedrivesGet(ctx, &pb.RedriveTaskRequest{TaskId: paused.TaskId})
		return err == nil && got.Status == "paused"
	}, 10*time.Second, 10*time.Millisecond)

	b := newBrowser(t, srv.Endpoint)
	b.open("/ui/queues/see-dlq/dead")
	b.waitText("#running-redrive", "2 redrives are unfinished (1 paused)")
	b.waitText("#live-"+paused.TaskId, "paused")
	b.waitText("#live-"+running.TaskId, "running")
	require.NotContains(t, b.text("#running-redrive"), "One redrive runs per dead-letter queue")

	b.run(chromedp.Click(`//button[text()="Redrive all…"]`))
	b.waitText("#redrive-summary", "This will move 5 of ")
	b.waitText("#redrive-summary", "held by another redrive task")
	b.waitText("#redrive-left", "held by redrive "+paused.TaskId+" (paused)")
	b.waitText("#redrive-left", "held by redrive "+running.TaskId+" (running)")
	b.waitDialog("Redrive 5 items")
	b.run(chromedp.Click(`#confirm-ok`, chromedp.ByQuery))
	b.waitText("h1", "Redrives")
	b.waitText(`tr[aria-current="true"]`, " moved")
	// The page updates itself every few seconds, slower on a loaded
	// machine: wait for the task through the API, then read the page anew.
	id := strings.Fields(b.text(`tr[aria-current="true"] th`))[0]
	require.Eventually(t, func() bool {
		got, err := c.RedrivesGet(ctx, &pb.RedriveTaskRequest{TaskId: id})
		return err == nil && got.Status == "completed"
	}, time.Minute, 20*time.Millisecond)
	b.run(chromedp.Reload(), chromedp.WaitVisible(`main[data-ready] h1`, chromedp.ByQuery))
	b.waitText(`tr[aria-current="true"]`, "completed")
	b.waitText(`tr[aria-current="true"]`, "5 of ")

	row := "#task-" + paused.TaskId
	b.waitText(row, "paused for ")
	require.NotContains(t, b.text(row), "ETA", "no ETA while paused")
	b.open("/ui/redrives/" + paused.TaskId)
	b.waitText("dl.props", "none while paused")
	b.waitText("dl.props", "Paused")
	require.Regexp(t, `Paused\s+for \d+`, b.text("dl.props"))
	b.screenshot("redrives-see-each-other")
}

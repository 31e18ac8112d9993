package web_test

import (
	"context"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	pb "github.com/styxq/styx/styxpb"
	"github.com/styxq/styx/styxtest"
)

// TestBrowserRedriveOutcomesAndCanary (issue 49, redrive outcomes and safer
// redrives): the redrive dialog starts at the safe default rate (100 items
// a second), shows the destination's depth and consumers and offers a
// canary; the redrives page and the task's page show the canary waiting,
// then passed once the consumer completed its items, and what became of
// the items (outcomes). "No rate limit" is a choice the user makes.
func TestBrowserRedriveOutcomesAndCanary(t *testing.T) {
	t.Parallel()
	srv := styxtest.Start(t, styxtest.Options{})
	c := srv.Client
	ctx := context.Background()
	styxtest.CreateQueue(t, c, &pb.QueueInfo{QueueName: "ship-dlq"})
	styxtest.CreateQueue(t, c, &pb.QueueInfo{QueueName: "ship", DeadQueue: "ship-dlq"})
	kill(t, c, "ship", 4, "carrier down", func(i int) string { return `{"parcel":1}` })
	waitDead(t, c, "ship-dlq", 4)

	b := newBrowser(t, srv.Endpoint)
	b.open("/ui/queues/ship-dlq/dead")
	b.waitText("main table caption", "4 dead items")
	b.run(chromedp.Click(`//button[text()="Redrive all…"]`))
	b.waitDialog("This will move 4 items to their source queue.")
	require.Equal(t, "100", b.eval(`document.querySelector('#redrive-rate').value`), "the dialog's default rate")
	b.waitText("#redrive-destinations", "ship: 0 ready, 0 leased, 0 scheduled; 1 consumer in the last 5 minutes")
	b.run(chromedp.Click(`#redrive-canary-on`, chromedp.ByQuery), chromedp.SetValue(`#redrive-canary`, "2", chromedp.ByQuery))
	b.run(chromedp.Click(`#confirm-ok`, chromedp.ByQuery))
	b.waitText("h1", "Redrives")
	row := `tr[aria-current="true"]`
	b.waitText(row, "Canary 2 items: waiting for the outcome of 2 moved items")
	b.waitText(row, "Outcomes: 2 pending")
	require.NotContains(t, b.text(row), "ETA", "a task waiting for its canary moves nothing: no ETA")
	list, err := c.RedrivesList(ctx, &pb.RedrivesListRequest{QueueName: "ship-dlq"})
	require.NoError(t, err)
	require.Len(t, list.Tasks, 1)
	task := list.Tasks[0]
	require.EqualValues(t, 100, task.RateLimit, "started at the dialog's default rate")
	require.EqualValues(t, 2, task.Canary)
	require.EqualValues(t, 2, task.Moved, "the canary's items, no more")

	res, err := c.QueueLease(ctx, &pb.QueueLeaseRequest{QueueName: "ship", BatchSize: 2, ClientId: "worker", RequestTimeout: "5s"})
	require.NoError(t, err)
	require.Len(t, res.Items, 2)
	require.NoError(t, c.QueueComplete(ctx, &pb.QueueCompleteRequest{QueueName: "ship", Partition: res.Partition,
		Ids: []string{res.Items[0].Id, res.Items[1].Id}, RequestTimeout: "5s"}))
	b.waitText(row, "completed")
	b.waitText(row, "Canary 2 items: passed")
	b.waitText(row, "Outcomes: 2 completed, 2 pending")

	b.open("/ui/redrives/" + task.TaskId)
	b.waitText("dl.props", "Outcomes")
	require.Contains(t, b.prop("Outcomes"), "2 completed, 2 pending (counted until")
	require.Contains(t, b.prop("Canary"), "passed: every canary item completed")

	// No rate limit: the user's explicit choice.
	kill(t, c, "ship", 1, "carrier down", func(i int) string { return `{"parcel":2}` })
	waitDead(t, c, "ship-dlq", 1)
	b.open("/ui/queues/ship-dlq/dead")
	b.waitText("main table caption", "1 dead item")
	b.run(chromedp.Click(`//button[text()="Redrive all…"]`))
	b.waitDialog("This will move 1 item")
	b.run(chromedp.Click(`#redrive-no-limit`, chromedp.ByQuery), chromedp.Click(`#confirm-ok`, chromedp.ByQuery))
	b.waitText("h1", "Redrives")
	b.waitText(row, "completed")
	list, err = c.RedrivesList(ctx, &pb.RedrivesListRequest{QueueName: "ship-dlq"})
	require.NoError(t, err)
	require.Len(t, list.Tasks, 2)
	require.EqualValues(t, 0, list.Tasks[0].RateLimit, "no rate limit, as chosen")
	b.screenshot("redrive-outcomes")
}

package web_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	styx "github.com/styxq/styx"
	"github.com/styxq/styx/daemon"
	pb "github.com/styxq/styx/styxpb"
	"github.com/styxq/styx/styxtest"
)

// kill produces n items to queue q (payloads payloadOf(i), references
// "<q>-ref-<i>"), leases them and retries them dead with the error errText,
// so that they land in q's dead-letter queue.
func kill(t *testing.T, c *styx.Client, q string, n int, errText string, payloadOf func(i int) string) {
	t.Helper()
	ctx := context.Background()
	var items []*pb.QueueProduceItem
	for i := range n {
		items = append(items, &pb.QueueProduceItem{Kind: "payment", Encoding: "application/json",
			Reference: fmt.Sprintf("%s-ref-%d", q, i), Bytes: []byte(payloadOf(i))})
	}
	require.NoError(t, c.QueueProduce(ctx, &pb.QueueProduceRequest{QueueName: q, Items: items, RequestTimeout: "10s"}))
	left := n
	for left > 0 {
		res, err := c.QueueLease(ctx, &pb.QueueLeaseRequest{QueueName: q, BatchSize: int32(left), ClientId: "fixture", RequestTimeout: "5s"})
		require.NoError(t, err)
		var retry []*pb.QueueRetryItem
		for _, it := range res.Items {
			retry = append(retry, &pb.QueueRetryItem{Id: it.Id, Dead: true, Error: errText})
		}
		_, err = c.QueueRetry(ctx, &pb.QueueRetryRequest{QueueName: q, Partition: res.Partition, Items: retry})
		require.NoError(t, err)
		left -= len(res.Items)
	}
}

// TestBrowserRedrivePreview (issue 28, 1): with 3 of 9 dead items whose
// source queue was deleted, the redrive dialog says 6 will move and 3 stay
// and why, by destination; the task then shows as completed with warnings
// and its reason.
func TestBrowserRedrivePreview(t *testing.T) {
	t.Parallel()
	srv := styxtest.Start(t, styxtest.Options{})
	c := srv.Client
	styxtest.CreateQueue(t, c, &pb.QueueInfo{QueueName: "pay-dlq"})
	styxtest.CreateQueue(t, c, &pb.QueueInfo{QueueName: "pay", DeadQueue: "pay-dlq"})
	styxtest.CreateQueue(t, c, &pb.QueueInfo{QueueName: "pay-old", DeadQueue: "pay-dlq"})
	kill(t, c, "pay", 6, "card declined", func(i int) string { return fmt.Sprintf(`{"n":%d}`, i) })
	kill(t, c, "pay-old", 3, "card declined", func(i int) string { return fmt.Sprintf(`{"old":%d}`, i) })
	waitDead(t, c, "pay-dlq", 9)
	require.NoError(t, c.QueuesDelete(context.Background(), &pb.QueuesDeleteRequest{QueueName: "pay-old"}))
	b := newBrowser(t, srv.Endpoint)

	b.open("/ui/queues/pay-dlq/dead")
	b.waitText("main table caption", "9 dead items")
	b.run(chromedp.Click(`//button[text()="Redrive all…"]`))
	b.waitDialog("This will move 6 of 9 items to their source queue; 3 will stay in the dead-letter queue (3 destination queue does not exist).")
	require.Equal(t, "Redrive 6 items", b.text("#confirm-ok"))
	require.Equal(t, "pay | 6 | 0 | –", b.rowIn("#confirm-dialog", "pay"))
	require.Equal(t, "pay-old | 0 | 3 | 3 destination queue does not exist", b.rowIn("#confirm-dialog", "pay-old"))
	b.run(chromedp.Click(`#confirm-ok`, chromedp.ByQuery))
	b.waitText("h1", "Redrives")
	b.waitText(`tr[aria-current="true"]`, "completed with warnings")
	row := b.text(`tr[aria-current="true"]`)
	require.Contains(t, row, "6 of 9 moved")
	require.Contains(t, row, "3 of 9 items stay in the dead-letter queue: 3 whose destination queue does not exist")
	waitDead(t, c, "pay-dlq", 3)
}

// waitDead waits until the dead-letter queue holds n dead items.
func waitDead(t *testing.T, c *styx.Client, dlq string, n int64) {
	t.Helper()
	require.Eventually(t, func() bool {
		g, err := c.DeadGroups(context.Background(), &pb.DeadGroupsRequest{QueueName: dlq})
		return err == nil && g.TotalItems == n
	}, 10*time.Second, 10*time.Millisecond)
}

// rowIn is the text of the row under scope (a selector) whose first cell
// is name, cells separated by " | ".
func (b *browser) rowIn(scope, name string) string {
	b.t.Helper()
	return b.eval(fmt.Sprintf(`(() => { const r = [...document.querySelectorAll(%q)].find((r) => r.cells[0].innerText.trim() === %q);
		return r ? [...r.cells].map((c) => c.innerText.trim()).join(' | ') : ''; })()`, scope+" tbody tr", name))
}

// startAuth starts a server with --auth and returns it with a client of
// its admin key.
func startAuth(t *testing.T) (*daemon.Daemon, *styx.Client) {
	t.Helper()
	keyFile := filepath.Join(t.TempDir(), "admin.key")
	admin := "styx_0123456789abcdef_" + strings.Repeat("cd", 32)
	require.NoError(t, os.WriteFile(keyFile, []byte(admin+"\n"), 0o600))
	d, err := daemon.New(context.Background(), daemon.Config{
		Listen: "127.0.0.1:0", Storage: daemon.StorageMemory, Auth: true, AdminKeyFile: keyFile,
		ShutdownTimeout: 2 * time.Second, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = d.Close(context.Background()) })
	c, err := styx.NewClient(styx.ClientConfig{Endpoint: d.Endpoint(), APIKey: admin})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return d, c
}

// useKey opens path and gives key in the API key prompt.
func (b *browser) useKey(path, key string) {
	b.t.Helper()
	b.run(chromedp.Navigate(b.endpoint + path))
	b.waitText("#key-dialog", "This server asks for an API key.")
	b.run(chromedp.SendKeys(`#key-input`, key, chromedp.ByQuery), chromedp.Click(`#key-dialog button[value=save]`, chromedp.ByQuery))
}

// TestBrowserReadOnlyKey (issue 28, 3): with a key of scope read only, the
// overview shows every queue's counts and marks the running redrives it
// may not see; the DLQ page, the item page and the Redrives page say what
// is not shown instead of failing.
func TestBrowserReadOnlyKey(t *testing.T) {
	t.Parallel()
	d, c := startAuth(t)
	styxtest.CreateQueue(t, c, &pb.QueueInfo{QueueName: "ro-dlq"})
	styxtest.CreateQueue(t, c, &pb.QueueInfo{QueueName: "ro", DeadQueue: "ro-dlq"})
	kill(t, c, "ro", 2, "boom", func(i int) string { return fmt.Sprint(i) })
	waitDead(t, c, "ro-dlq", 2)
	viewer, err := c.KeysCreate(context.Background(), &pb.KeysCreateRequest{Name: "viewer", Scopes: []string{"read"}})
	require.NoError(t, err)

	b := newBrowser(t, d.Endpoint())
	b.useKey("/ui/", viewer.Key)
	b.waitText("main table", "ro-dlq")
	require.Regexp(t, `^ro \| 0 \| 0 \| 0 \| 2 \| – \| – \| ro-dlq \| \? \| `, b.rowText("ro"), "counts shown, redrives unknown")
	b.waitText("main", "Running redrives (?) are not shown: your API key may not see them")
	require.Empty(t, b.eval(`document.querySelector('main .error-box') ? 'error' : ''`))

	b.open("/ui/queues/ro-dlq/dead")
	b.waitText("main", "Error groups are not shown: your API key may not see them")
	b.waitText("main", "Dead items are not shown: your API key may not see them")
	b.open("/ui/redrives")
	b.waitText("main", "Redrive tasks are not shown")
	b.open("/ui/queues/ro")
	b.waitText("main .cards", "Dead (in ro-dlq)")
	require.Contains(t, b.text("main .cards"), "2")

	// A key of the dead scope only: the overview says what it may not see.
	dead, err := c.KeysCreate(context.Background(), &pb.KeysCreateRequest{Name: "dead-only", Scopes: []string{"dead"}})
	require.NoError(t, err)
	b.run(chromedp.Evaluate(`sessionStorage.setItem('styx.apiKey', `+fmt.Sprintf("%q", dead.Key)+`)`, nil))
	b.open("/ui/")
	b.waitText("main", "Queues are not shown: your API key may not see them")
	require.Contains(t, b.text("main"), "Charts are not shown")
	require.Empty(t, b.eval(`document.querySelector('main .error-box') ? 'error' : ''`))
	b.open("/ui/queues/ro-dlq/dead")
	b.waitText("main table caption", "2 dead items in 1 group")
	b.open("/ui/queues/ro")
	b.waitText("main", "The configuration is not shown: your API key may not see it")
}

// TestBrowserDeadBySource (issue 28, 4): a source queue's row and page show
// its own dead items (dead_by_source of its DLQ), linked to the DLQ page
// filtered by source; "Dead items held by" shows only on DLQs.
func TestBrowserDeadBySource(t *testing.T) {
	t.Parallel()
	srv := styxtest.Start(t, styxtest.Options{})
	c := srv.Client
	styxtest.CreateQueue(t, c, &pb.QueueInfo{QueueName: "mail-dlq"})
	styxtest.CreateQueue(t, c, &pb.QueueInfo{QueueName: "mail", DeadQueue: "mail-dlq"})
	styxtest.CreateQueue(t, c, &pb.QueueInfo{QueueName: "sms", DeadQueue: "mail-dlq"})
	kill(t, c, "mail", 4, "smtp 550", func(i int) string { return fmt.Sprint(i) })
	kill(t, c, "sms", 1, "no route", func(i int) string { return fmt.Sprint(i) })
	waitDead(t, c, "mail-dlq", 5)
	b := newBrowser(t, srv.Endpoint)

	b.open("/ui/")
	b.waitText("main table", "mail-dlq")
	require.Regexp(t, `^mail \| 0 \| 0 \| 0 \| 4 \| – \|`, b.rowText("mail"))
	require.Regexp(t, `^sms \| 0 \| 0 \| 0 \| 1 \| – \|`, b.rowText("sms"))
	require.Regexp(t, `^mail-dlq \| – \| 0 \| 0 \| – \| 5 \|`, b.rowText("mail-dlq"))
	b.run(chromedp.Click(`a[aria-label="4 dead items of mail in mail-dlq"]`, chromedp.ByQuery))
	b.waitText("h1", "Dead items of mail-dlq")
	b.waitText("main", "Dead items matching source mail")
	require.Equal(t, 4, strings.Count(b.text(`h2#items ~ table tbody`), "smtp 550"))

	b.open("/ui/queues/mail")
	b.waitText("main .cards", "Dead (in mail-dlq)")
	require.Contains(t, b.text("main .cards"), "4")
	require.NotContains(t, b.text("main"), "Dead items held by", "mail is not a dead-letter queue")
	b.open("/ui/queues/mail-dlq")
	b.waitText("main", "Dead items held by mail-dlq")
}

// TestBrowserFindOneItem (issue 28, 7): the DLQ page finds an item by its
// reference or payload text and shows references; an ordinary queue's
// items are browsable read-only, page by page, in every partition.
func TestBrowserFindOneItem(t *testing.T) {
	t.Parallel()
	srv := styxtest.Start(t, styxtest.Options{})
	c := srv.Client
	ctx := context.Background()
	styxtest.CreateQueue(t, c, &pb.QueueInfo{QueueName: "inv-dlq"})
	styxtest.CreateQueue(t, c, &pb.QueueInfo{QueueName: "inv", DeadQueue: "inv-dlq", RequestedPartitions: 2})
	kill(t, c, "inv", 5, "tax service 503", func(i int) string { return fmt.Sprintf(`{"invoice":"INV-%03d","customer":"cust-%d"}`, i, i%2) })
	waitDead(t, c, "inv-dlq", 5)
	b := newBrowser(t, srv.Endpoint)

	b.open("/ui/queues/inv-dlq/dead")
	b.waitText("main table caption", "5 dead items")
	b.run(chromedp.SetValue(`#f-reference`, "inv-ref-3", chromedp.ByQuery), chromedp.Click(`form.filters button[type=submit]`, chromedp.ByQuery))
	b.waitText("main", "Dead items matching reference inv-ref-3")
	rows := b.eval(`[...document.querySelectorAll('h2#items ~ table tbody tr')].map((r) => r.cells[2].innerText).join(',')`)
	require.Equal(t, "inv-ref-3", rows, "one item, its reference in the Reference column")

	b.open("/ui/queues/inv-dlq/dead")
	b.run(chromedp.SetValue(`#f-payload`, `"customer":"cust-1"`, chromedp.ByQuery), chromedp.Click(`form.filters button[type=submit]`, chromedp.ByQuery))
	b.waitText("main", `payload contains`)
	rows = b.eval(`[...document.querySelectorAll('h2#items ~ table tbody tr')].map((r) => r.cells[2].innerText).sort().join(',')`)
	require.Equal(t, "inv-ref-1,inv-ref-3", rows)
	var loc string
	b.run(chromedp.Location(&loc))
	require.Contains(t, loc, "payload=", "the filter stays in the URL")

	// An ordinary queue's items: 130 in two partitions, 50 a page.
	var items []*pb.QueueProduceItem
	for i := range 130 {
		items = append(items, &pb.QueueProduceItem{Reference: fmt.Sprintf("job-%03d", i), Utf8: fmt.Sprintf("work %d", i)})
	}
	// Two requests: each goes to one partition, the emptier.
	require.NoError(t, c.QueueProduce(ctx, &pb.QueueProduceRequest{QueueName: "inv", Items: items[:65], RequestTimeout: "10s"}))
	require.NoError(t, c.QueueProduce(ctx, &pb.QueueProduceRequest{QueueName: "inv", Items: items[65:], RequestTimeout: "10s"}))
	b.open("/ui/queues/inv")
	b.run(chromedp.Click(`//a[text()="Browse items"]`))
	b.waitText("h1", "Items of inv")
	tabs := b.text(`nav.tabs`)
	require.Contains(t, tabs, "Partition 0 (")
	require.Contains(t, tabs, "Partition 1 (")
	count := func() int {
		var n int
		b.run(chromedp.Evaluate(`document.querySelectorAll('main tbody tr').length`, &n))
		return n
	}
	seen := map[string]bool{}
	collect := func() {
		ids := b.eval(`[...document.querySelectorAll('main tbody tr')].map((r) => r.cells[1].innerText).join(',')`)
		for _, id := range strings.Split(ids, ",") {
			require.False(t, seen[id], "item %s shown twice", id)
			seen[id] = true
		}
	}
	for part := range 2 {
		b.open(fmt.Sprintf("/ui/queues/inv/items?partition=%d", part))
		b.waitText("main table caption", fmt.Sprintf("Items of partition %d (", part))
		for {
			require.LessOrEqual(t, count(), 50)
			collect()
			if b.eval(`document.querySelector('a[rel=next]') ? 'more' : ''`) == "" {
				break
			}
			before := b.eval(`document.querySelector('main tbody tr code').innerText`)
			b.run(chromedp.Click(`a[rel=next]`, chromedp.ByQuery))
			b.run(chromedp.Poll(fmt.Sprintf(`(() => { const c = document.querySelector('main tbody tr code'); return !c || c.innerText !== %q; })()`, before), nil))
		}
	}
	require.Len(t, seen, 130, "every item of every partition, once")
}

// TestBrowserEditDeadItem (issue 28, 8): on a dead item's page, Edit…
// opens the payload in an editor that checks JSON as it is typed (Save is
// disabled while it is not valid); saved, the page shows the new payload,
// reference and the edit in the item's history.
func TestBrowserEditDeadItem(t *testing.T) {
	t.Parallel()
	srv := styxtest.Start(t, styxtest.Options{})
	c := srv.Client
	styxtest.CreateQueue(t, c, &pb.QueueInfo{QueueName: "bill-dlq"})
	styxtest.CreateQueue(t, c, &pb.QueueInfo{QueueName: "bill", DeadQueue: "bill-dlq"})
	kill(t, c, "bill", 1, "parse amount: invalid syntax", func(int) string { return `{"amount":"12,50"}` })
	waitDead(t, c, "bill-dlq", 1)
	b := newBrowser(t, srv.Endpoint)

	b.open("/ui/queues/bill-dlq/dead")
	b.run(chromedp.Click(`h2#items ~ table tbody tr th a`, chromedp.ByQuery))
	b.waitText("h1", "Dead item ")
	b.run(chromedp.Click(`#edit-button`, chromedp.ByQuery))
	b.waitText("#edit-check", "Valid JSON.")
	require.Contains(t, b.eval(`document.getElementById('edit-payload').value`), `"amount": "12,50"`)
	b.run(chromedp.SetValue(`#edit-payload`, `{"amount": 12.50`, chromedp.ByQuery),
		chromedp.Evaluate(`document.getElementById('edit-payload').dispatchEvent(new Event('input'))`, nil))
	b.waitText("#edit-check", "Not valid JSON")
	require.Equal(t, "true", b.eval(`String(document.getElementById('edit-save').disabled)`))
	b.screenshot("edit")
	b.run(chromedp.SetValue(`#edit-payload`, `{"amount": 12.50}`, chromedp.ByQuery),
		chromedp.Evaluate(`document.getElementById('edit-payload').dispatchEvent(new Event('input'))`, nil),
		chromedp.SetValue(`#edit-reference`, "invoice-77", chromedp.ByQuery))
	b.waitText("#edit-check", "Valid JSON.")
	b.run(chromedp.Click(`#edit-save`, chromedp.ByQuery))
	b.waitText("#status", "Saved ")
	b.waitText(`pre[aria-label="Payload (JSON)"]`, `"amount": 12.5`)
	require.Contains(t, b.text("dl.props"), "invoice-77")
	require.Contains(t, b.text("ol.timeline"), "payload edited by an unauthenticated client")

	res, err := c.DeadList(context.Background(), &pb.DeadListRequest{QueueName: "bill-dlq"})
	require.NoError(t, err)
	require.JSONEq(t, `{"amount": 12.50}`, string(res.Items[0].Payload))
	require.Equal(t, "invoice-77", res.Items[0].Reference)
}

// TestBrowserLive (issue 28, 5): pages update on their own: the overview's
// counts change without a reload; the DLQ page shows a running redrive
// (banner, progress, link) and its dead items going, and the redrive
// dialog says a redrive runs already (a second one may run on items it
// does not hold: issue 39).
func TestBrowserLive(t *testing.T) {
	t.Parallel()
	srv := styxtest.Start(t, styxtest.Options{})
	c := srv.Client
	ctx := context.Background()
	styxtest.CreateQueue(t, c, &pb.QueueInfo{QueueName: "live-dlq"})
	styxtest.CreateQueue(t, c, &pb.QueueInfo{QueueName: "live", DeadQueue: "live-dlq"})
	b := newBrowser(t, srv.Endpoint)

	b.open("/ui/")
	b.waitText("main table", "live-dlq")
	require.Regexp(t, `^live \| 0 \|`, b.rowText("live"))
	b.eval(`window.stillHere = 'yes'`)
	require.NoError(t, c.QueueProduce(ctx, &pb.QueueProduceRequest{QueueName: "live", RequestTimeout: "10s",
		Items: []*pb.QueueProduceItem{{Utf8: "a"}, {Utf8: "b"}, {Utf8: "c"}, {Utf8: "d"}}}))
	b.run(chromedp.Poll(`[...document.querySelectorAll('main tbody tr')].some((r) => r.innerText.startsWith('live\t4'))`, nil,
		chromedp.WithPollingInterval(50*time.Millisecond)))
	require.Equal(t, "yes", b.eval(`String(window.stillHere)`), "updated in place, not reloaded")
	require.Equal(t, "Live updates: on", b.text("#live-button"))

	// 40 dead items, redriven at 2 a second (20 s: time to look at it).
	kill(t, c, "live", 4, "boom", func(i int) string { return "x" })
	kill(t, c, "live", 36, "boom", func(i int) string { return fmt.Sprint(i) })
	waitDead(t, c, "live-dlq", 40)
	b.open("/ui/queues/live-dlq/dead")
	b.waitText("main table caption", "40 dead items")
	require.Empty(t, b.eval(`document.getElementById('running-redrive') ? 'banner' : ''`))
	task, err := c.DeadRedrive(ctx, &pb.DeadRedriveRequest{QueueName: "live-dlq", All: true, RateLimit: 2})
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = c.RedrivesCancel(ctx, &pb.RedriveTaskRequest{TaskId: task.TaskId}) })
	b.waitText("#running-redrive", "A redrive is running:")
	b.waitText("#live-"+task.TaskId, "running")
	require.Equal(t, "/ui/redrives/"+task.TaskId, b.eval(`document.querySelector('#running-redrive a').getAttribute('href')`))
	b.screenshot("dead-live")
	b.waitGone("main table caption", "40 dead items") // items leave as the redrive moves them
	b.run(chromedp.Click(`//button[text()="Redrive all…"]`))
	b.waitText("#redrive-running", "Redrive "+task.TaskId+" is running on live-dlq")
	// No redraw while a dialog is open (the page redraws every second while
	// a redrive runs); it goes on once the dialog is closed.
	ready := b.eval(`document.getElementById('main').dataset.ready`)
	b.run(chromedp.Sleep(2500 * time.Millisecond))
	require.Equal(t, ready, b.eval(`document.getElementById('main').dataset.ready`), "the page waits while a dialog is open")
	b.run(chromedp.Click(`#confirm-dialog button[value=cancel]`, chromedp.ByQuery))
	b.run(chromedp.Poll(fmt.Sprintf(`document.getElementById('main').dataset.ready !== %q`, ready), nil, chromedp.WithPollingInterval(50*time.Millisecond)))

	// The task's page: progress, duration, ETA while it runs.
	b.open("/ui/redrives/" + task.TaskId)
	b.waitText("h1", "Redrive "+task.TaskId)
	b.waitText("dl.props", "ETA")
	require.Regexp(t, `Duration\s+\d+s`, b.text("dl.props"))
	_, err = c.RedrivesCancel(ctx, &pb.RedriveTaskRequest{TaskId: task.TaskId})
	require.NoError(t, err)
	b.waitText("dl.props", "cancelled")
}

// TestBrowserCharts (issue 28, 6): the overview and a queue's page chart
// produced, completed and dead-lettered per minute and depth over the last
// hour, and follow new work live; the DLQ page charts arrivals by error
// group.
func TestBrowserCharts(t *testing.T) {
	t.Parallel()
	srv := styxtest.Start(t, styxtest.Options{})
	c := srv.Client
	ctx := context.Background()
	styxtest.CreateQueue(t, c, &pb.QueueInfo{QueueName: "ch-dlq"})
	styxtest.CreateQueue(t, c, &pb.QueueInfo{QueueName: "ch", DeadQueue: "ch-dlq"})
	_, err := c.QueuesHistory(ctx, &pb.QueuesHistoryRequest{QueueName: "ch-dlq"}) // the groups' starting point
	require.NoError(t, err)
	kill(t, c, "ch", 3, "timeout after 30s", func(i int) string { return fmt.Sprint(i) })
	kill(t, c, "ch", 2, "card declined (charge ch_3NqLfe2e)", func(i int) string { return fmt.Sprint(i) })
	waitDead(t, c, "ch-dlq", 5)
	b := newBrowser(t, srv.Endpoint)

	b.open("/ui/")
	b.waitText("#chart-rates", "produced 5 in the last hour")
	require.Contains(t, b.text("#chart-rates"), "dead-lettered 5 in the last hour")
	require.Contains(t, b.eval(`document.querySelector('#chart-rates svg').getAttribute('aria-label')`), "produced 5 in the last hour")
	require.Equal(t, "3", b.eval(`String(document.querySelectorAll('#chart-rates polyline, #chart-rates circle').length)`), "a line per series")
	require.NoError(t, c.QueueProduce(ctx, &pb.QueueProduceRequest{QueueName: "ch", RequestTimeout: "10s",
		Items: []*pb.QueueProduceItem{{Utf8: "a"}, {Utf8: "b"}}}))
	b.waitText("#chart-rates", "produced 7 in the last hour") // live
	b.waitText("#chart-depth", "depth 2 now")                 // 2 in ch; not the 5 dead items ch-dlq holds

	b.open("/ui/queues/ch")
	b.waitText("#chart-rates", "produced 7 in the last hour")
	b.waitText("#chart-depth", "depth 2 now")

	b.open("/ui/queues/ch-dlq/dead")
	b.waitText("#chart-groups", "timeout after <dur> 3 in the last hour")
	require.Contains(t, b.text("#chart-groups"), "card declined (charge ch_<id>) 2 in the last hour")
}

// TestBrowserSmallerTruths (issue 28, 9): times to come read "in …",
// durations are rounded, a large payload shows its start with "Show all"
// and "Download", the DLQ pager gives totals and a way back, the heading
// focused on load has no ring, and redrives name error patterns, not
// fingerprints, and show how long they took.
func TestBrowserSmallerTruths(t *testing.T) {
	t.Parallel()
	srv := styxtest.Start(t, styxtest.Options{})
	c := srv.Client
	styxtest.CreateQueue(t, c, &pb.QueueInfo{QueueName: "st-dlq"})
	styxtest.CreateQueue(t, c, &pb.QueueInfo{QueueName: "st", DeadQueue: "st-dlq"})
	big := `{"blob":"` + strings.Repeat("x", 1<<20) + `"}`
	kill(t, c, "st", 1, "payload too large", func(int) string { return big })
	kill(t, c, "st", 119, "order 17 not found", func(i int) string { return fmt.Sprint(i) })
	waitDead(t, c, "st-dlq", 120)
	b := newBrowser(t, srv.Endpoint)

	// The pager: totals, next, previous.
	b.open("/ui/queues/st-dlq/dead")
	b.waitText("#page-range", "Items 1–50 of 120")
	require.Equal(t, "none", b.eval(`getComputedStyle(document.querySelector('main h1')).outlineStyle`), "no focus ring on the heading")
	require.Equal(t, "H1", b.eval(`document.activeElement.tagName`))
	first := b.eval(`document.querySelector('h2#items ~ table tbody tr th').innerText`)
	b.run(chromedp.Click(`a[rel=next]`, chromedp.ByQuery))
	b.waitText("#page-range", "Items 51–100 of 120")
	b.run(chromedp.Click(`a[rel=next]`, chromedp.ByQuery))
	b.waitText("#page-range", "Items 101–120 of 120")
	b.run(chromedp.Click(`a[rel=prev]`, chromedp.ByQuery))
	b.waitText("#page-range", "Items 51–100 of 120")
	b.run(chromedp.Click(`a[rel=prev]`, chromedp.ByQuery))
	b.waitText("#page-range", "Items 1–50 of 120")
	require.Equal(t, first, b.eval(`document.querySelector('h2#items ~ table tbody tr th').innerText`))

	// The large item: its start, then all of it; its expiry is to come.
	b.run(chromedp.Click(`h2#items ~ table tbody tr th a`, chromedp.ByQuery))
	b.waitText("#payload-truncated", "1,048,587 bytes; the first 65,536 are shown.")
	require.Less(t, len(b.text(`pre[aria-label="Payload (start)"]`)), 70_000)
	require.Contains(t, b.text("#payload"), "Download")
	props := b.text("dl.props")
	require.Regexp(t, `Expires at\s+\S+ \S+ \(in 13d23h\)`, props, "a time to come")
	require.NotContains(t, props, "in 13d23h ago")
	b.run(chromedp.Click(`//button[text()="Show all"]`))
	b.waitText(`pre[aria-label="Payload (JSON)"]`, `"blob": "xxxx`)

	// A redrive of a group: its pattern, not its fingerprint, in the
	// dialog and on the Redrives page, with how long it took.
	b.open("/ui/queues/st-dlq/dead")
	b.run(chromedp.Click(`button[aria-label="Redrive group order <n> not found"]`, chromedp.ByQuery))
	b.waitDialog(`Selected: error "order <n> not found"`)
	b.run(chromedp.Click(`#confirm-ok`, chromedp.ByQuery))
	b.waitText(`tr[aria-current="true"]`, "completed")
	row := b.text(`tr[aria-current="true"]`)
	require.Contains(t, row, `error "order <n> not found"`)
	require.NotRegexp(t, `[0-9a-f]{16}`, row)
	require.Regexp(t, `took \d+s`, row)

	// A queue's partitions: average ages rounded.
	require.NoError(t, c.QueueProduce(context.Background(), &pb.QueueProduceRequest{QueueName: "st", RequestTimeout: "10s",
		Items: []*pb.QueueProduceItem{{Utf8: "a"}}}))
	b.open("/ui/queues/st")
	b.waitText("main", "Average age")
	// The partitions table by its caption: the Activity panel's table
	// follows it once the queue has records (the redrive above).
	age := b.eval(`[...document.querySelectorAll('main table')].find((t) => t.caption.innerText === 'Items by partition').tBodies[0].rows[0].cells[5].innerText`)
	require.Regexp(t, `^(<1s|\d+s|\d+m\d\ds)$`, age)
}

// TestBrowserConfirmOneAction (issue 36, 9): each confirmation is bound to
// the action that opened it. Redrive… on one error group and Delete… on
// another, clicked in the same tick: the Redrive… button is busy (disabled,
// aria-busy) while its dry run runs, the Delete… is refused instead of
// joining the redrive's dialog, and that dialog's OK redrives its group and
// deletes nothing. The next action afterwards confirms and runs as usual.
func TestBrowserConfirmOneAction(t *testing.T) {
	t.Parallel()
	srv := styxtest.Start(t, styxtest.Options{})
	c := srv.Client
	ctx := context.Background()
	styxtest.CreateQueue(t, c, &pb.QueueInfo{QueueName: "one-dlq"})
	styxtest.CreateQueue(t, c, &pb.QueueInfo{QueueName: "one", DeadQueue: "one-dlq"})
	kill(t, c, "one", 3, "smtp 550 mailbox full", func(i int) string { return fmt.Sprint(i) })
	kill(t, c, "one", 2, "card declined", func(i int) string { return fmt.Sprint(i) })
	waitDead(t, c, "one-dlq", 5)
	// declined lists the ids of the dead items of the "card declined" group.
	declined := func() []string {
		t.Helper()
		res, err := c.DeadList(ctx, &pb.DeadListRequest{QueueName: "one-dlq", Limit: 100})
		require.NoError(t, err)
		var ids []string
		for _, it := range res.Items {
			if it.LastError == "card declined" {
				ids = append(ids, it.Id)
			}
		}
		return ids
	}
	before := declined()
	require.Len(t, before, 2)
	b := newBrowser(t, srv.Endpoint)

	b.open("/ui/queues/one-dlq/dead")
	b.waitText("main table caption", "5 dead items in 2 groups")
	// Both clicks in one tick; the redrive's button state is read between
	// them, while its dry run is still on its way, and what the page says
	// right after the second.
	state := b.eval(`(() => {
		const redrive = document.querySelector('button[aria-label="Redrive group smtp <n> mailbox full"]');
		const del = document.querySelector('button[aria-label="Delete group card declined"]');
		redrive.click();
		const busy = redrive.disabled + ' ' + redrive.getAttribute('aria-busy');
		del.click();
		return [busy, document.getElementById('confirm-dialog').open, document.getElementById('status').textContent].join(' | ');
	})()`)
	b.waitDialog("This will move 3 items to their source queue.")
	require.Equal(t, "Redrive 3 items", b.text("#confirm-ok"))
	b.run(chromedp.Click(`#confirm-ok`, chromedp.ByQuery))
	b.waitText("h1", "Redrives")
	b.waitText(`tr[aria-current="true"]`, "completed")
	require.Equal(t, before, declined(), "the other group's dead items are all still there: one OK, one action")
	waitDead(t, c, "one-dlq", 2)
	require.Empty(t, b.eval(`document.querySelector('dialog[open]') ? 'open' : ''`), "no second dialog")
	require.Equal(t, "true true | false | Another action is in progress: finish or cancel it first.", state,
		"the Redrive… button is busy (disabled, aria-busy) while its dry run runs; Delete… is refused, no dialog opened for it")

	// The next action is not refused: Delete… confirms and deletes.
	b.open("/ui/queues/one-dlq/dead")
	b.waitText("main table caption", "2 dead items in 1 group")
	b.run(chromedp.Click(`button[aria-label="Delete group card declined"]`, chromedp.ByQuery))
	b.waitDialog("This will delete 2 items of one-dlq for good.")
	b.run(chromedp.Click(`#confirm-ok`, chromedp.ByQuery))
	b.waitText("#status", "Deleted 2 items.")
	waitDead(t, c, "one-dlq", 0)
}

package web_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	pb "github.com/styxq/styx/styxpb"
	"github.com/styxq/styx/styxtest"
)

// TestBrowserEveryPageWithoutScriptErrors opens every page of the UI (the
// routes app.js knows) and fails on any uncaught exception or console
// error in the browser, and on a page that draws as "Error" or shows an
// object where text belongs: the UI's scripts are several files (core.js,
// a file per page, app.js; issue 50), and a helper a page file calls but
// does not take from window.styx fails only when its page draws.
func TestBrowserEveryPageWithoutScriptErrors(t *testing.T) {
	t.Parallel()
	srv := styxtest.Start(t, styxtest.Options{})
	c := srv.Client
	ctx := context.Background()
	fixture(t, c)
	dead, err := c.DeadList(ctx, &pb.DeadListRequest{QueueName: "orders-dlq", Limit: 2})
	require.NoError(t, err)
	require.Len(t, dead.Items, 2)
	items, err := c.StorageItemsList(ctx, &pb.StorageItemsListRequest{QueueName: "orders", Limit: 1})
	require.NoError(t, err)
	require.NotEmpty(t, items.Items)
	task, err := c.DeadRedrive(ctx, &pb.DeadRedriveRequest{QueueName: "orders-dlq", Filter: &pb.DeadFilter{Ids: []string{dead.Items[1].Id}}})
	require.NoError(t, err)
	b := newBrowser(t, srv.Endpoint)

	var mu sync.Mutex
	var problems []string
	chromedp.ListenTarget(b.ctx, func(ev any) {
		mu.Lock()
		defer mu.Unlock()
		switch ev := ev.(type) {
		case *runtime.EventExceptionThrown:
			d := ev.ExceptionDetails
			msg := d.Text
			if d.Exception != nil && d.Exception.Description != "" {
				msg = d.Exception.Description
			}
			problems = append(problems, fmt.Sprintf("exception at %s:%d: %s", d.URL, d.LineNumber+1, msg))
		case *runtime.EventConsoleAPICalled:
			if ev.Type == runtime.APITypeError || ev.Type == runtime.APITypeAssert {
				var args []string
				for _, a := range ev.Args {
					args = append(args, string(a.Value)+a.Description)
				}
				problems = append(problems, "console error: "+strings.Join(args, " "))
			}
		}
	})
	for _, path := range []string{
		"/ui/", "/ui/queues/orders", "/ui/queues/orders/items", "/ui/queues/orders/items/" + items.Items[0].Id,
		"/ui/queues/orders-dlq", "/ui/queues/orders-dlq/dead", "/ui/queues/orders-dlq/dead?reason=explicit&since=1h",
		"/ui/queues/orders-dlq/dead/" + dead.Items[0].Id, "/ui/redrives", "/ui/redrives/" + task.TaskId, "/ui/nowhere",
	} {
		b.open(path)
		require.NotEqual(t, "Error", b.text("main h1"), path)
		// A helper not taken from window.styx may name a browser global
		// instead (window.when is the Observable API's): it draws as text.
		require.NotContains(t, b.text("main"), "[object ", path)
		mu.Lock()
		got := problems
		problems = nil
		mu.Unlock()
		require.Empty(t, got, path)
	}
}

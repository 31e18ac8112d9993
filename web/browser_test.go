package web_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/target"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	styx "github.com/styxq/styx"
	pb "github.com/styxq/styx/styxpb"
	"github.com/styxq/styx/styxtest"
)

// EnvRequireBrowser, when set (CI sets it in .ci/run), makes the browser
// tests fail instead of skipping when no Chromium is installed.
const EnvRequireBrowser = "STYX_TEST_REQUIRE_BROWSER"

// EnvScreenshots, when set, makes the browser tests write a screenshot of
// each page to docs/ui/ (the README's tour shows them).
const EnvScreenshots = "STYX_UI_SCREENSHOTS"

// chromium returns the path of a Chromium or Chrome binary, or skips the
// test (fails it when EnvRequireBrowser is set).
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv(EnvRequireBrowser) != "" {
		t.Fatalf("no chromium found on PATH and %s is set: install it (apt-get install -y chromium)", EnvRequireBrowser)
	}
	t.Skipf("browser tests skipped: no chromium on PATH (apt-get install -y chromium; set %s=1 to make this a failure)", EnvRequireBrowser)
	return ""
}

// browser is a headless Chromium tab on a test server.
type browser struct {
	t        *testing.T
	ctx      context.Context
	endpoint string
}

// chrome is the package's one Chromium process, started by the first test
// that asks for a window and stopped by TestMain; each test opens a window
// of its own, far cheaper than a browser of its own. Tests share no
// storage: each window's server listens on a port of its own, so each is
// an origin of its own (the UI sets no cookies). The browser tests run in
// parallel (t.Parallel first).
var chrome struct {
	once   sync.Once
	ctx    context.Context
	cancel context.CancelFunc
	err    error
}

// TestMain stops the shared Chromium, if a test started one, after the tests.
func TestMain(m *testing.M) {
	code := m.Run()
	if chrome.cancel != nil {
		chrome.cancel()
	}
	os.Exit(code)
}

// newBrowser opens a window on the shared Chromium, starting it if no test has
// yet; the window closes when t ends.
func newBrowser(t *testing.T, endpoint string) *browser {
	path := chromium(t)
	chrome.once.Do(func() {
		opts := append(chromedp.DefaultExecAllocatorOptions[:],
			chromedp.ExecPath(path), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.WindowSize(1280, 900),
			chromedp.Flag("disable-dev-shm-usage", true))
		actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
		// chromedp logs CDP events newer than it knows as errors: noise here.
		ctx, cancel := chromedp.NewContext(actx, chromedp.WithErrorf(func(string, ...any) {}))
		chrome.ctx, chrome.cancel = ctx, func() { cancel(); cancelAlloc() }
		chrome.err = chromedp.Run(ctx)
	})
	require.NoError(t, chrome.err, "start chromium")
	// A window of its own, not a tab beside the others: a background tab
	// is hidden (document.hidden), and the pages pause their live updates
	// while hidden.
	var id target.ID
	require.NoError(t, chromedp.Run(chrome.ctx, chromedp.ActionFunc(func(ctx context.Context) error {
		var err error
		id, err = target.CreateTarget("about:blank").WithNewWindow(true).Do(cdp.WithExecutor(ctx, chromedp.FromContext(ctx).Browser))
		return err
	})), "open a window")
	ctx, cancel := chromedp.NewContext(chrome.ctx, chromedp.WithTargetID(id))
	t.Cleanup(cancel)
	require.NoError(t, chromedp.Run(ctx), "attach to the window")
	return &browser{t: t, ctx: ctx, endpoint: endpoint}
}

// run runs actions with a deadline of 60 s: it bounds work that never
// ends, not the machine's speed (a shared machine under load took more
// than 20 s for a click's request and the page it opens).
func (b *browser) run(actions ...chromedp.Action) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 60*time.Second)
	defer cancel()
	require.NoError(b.t, chromedp.Run(ctx, actions...))
}

// open loads a UI path and waits until the page has rendered.
func (b *browser) open(path string) {
	b.t.Helper()
	b.run(chromedp.Navigate(b.endpoint+path), chromedp.WaitVisible(`main[data-ready] h1`, chromedp.ByQuery))
}

// waitText waits until the element sel shows text.
func (b *browser) waitText(sel, text string) {
	b.t.Helper()
	js := fmt.Sprintf(`(() => { const el = document.querySelector(%q); return !!el && el.innerText.includes(%q); })()`, sel, text)
	b.run(chromedp.Poll(js, nil, chromedp.WithPollingInterval(20*time.Millisecond)))
}

// waitDialog waits until the confirmation dialog is open and shows text: a
// closed dialog keeps the text of the last one it showed, so its text alone
// says nothing of whether a click opened it again.
func (b *browser) waitDialog(text string) {
	b.t.Helper()
	b.waitText("#confirm-dialog[open]", text)
}

// waitGone waits until no element sel shows text.
func (b *browser) waitGone(sel, text string) {
	b.t.Helper()
	js := fmt.Sprintf(`(() => ![...document.querySelectorAll(%q)].some((el) => el.innerText.includes(%q)))()`, sel, text)
	b.run(chromedp.Poll(js, nil, chromedp.WithPollingInterval(20*time.Millisecond)))
}

// eval evaluates a JavaScript expression and returns its string value.
func (b *browser) eval(js string) string {
	b.t.Helper()
	var s string
	b.run(chromedp.Evaluate(js, &s))
	return s
}

// rowText is the text of the table row whose header cell is name, cells
// separated by " | ".
func (b *browser) rowText(name string) string {
	b.t.Helper()
	return b.eval(fmt.Sprintf(`(() => { const r = [...document.querySelectorAll('main tbody tr')].find((r) => r.cells[0].innerText.trim() === %q);
		return r ? [...r.cells].map((c) => c.innerText.trim()).join(' | ') : ''; })()`, name))
}

// groupRows are the rows of the error groups table: count | reason |
// source | pattern.
func (b *browser) groupRows() []string {
	b.t.Helper()
	s := b.eval(`[...document.querySelectorAll('main table')[0].tBodies[0].rows].map((r) => [...r.cells].slice(0, 4).map((c) => c.innerText.trim()).join(' | ')).join('\n')`)
	return strings.Split(s, "\n")
}

func (b *browser) text(sel string) string {
	b.t.Helper()
	return b.eval(fmt.Sprintf(`document.querySelector(%q).innerText`, sel))
}

// screenshot writes docs/ui/<name>.png when EnvScreenshots is set.
func (b *browser) screenshot(name string) {
	b.t.Helper()
	if os.Getenv(EnvScreenshots) == "" {
		return
	}
	var png []byte
	b.run(chromedp.FullScreenshot(&png, 100)) // quality 100 gives a PNG
	require.NoError(b.t, os.WriteFile(filepath.Join("..", "docs", "ui", name+".png"), png, 0o644))
}

// fixture creates queues orders (with dead-letter queue orders-dlq) and
// billing, and dead items in three error groups.
func fixture(t *testing.T, c *styx.Client) {
	ctx := context.Background()
	styxtest.CreateQueue(t, c, &pb.QueueInfo{QueueName: "orders-dlq"})
	styxtest.CreateQueue(t, c, &pb.QueueInfo{QueueName: "orders", DeadQueue: "orders-dlq", MaxAttempts: 3, RequestedPartitions: 2})
	styxtest.CreateQueue(t, c, &pb.QueueInfo{QueueName: "billing", DeadQueue: "orders-dlq"})
	kill := func(q string, errs ...string) {
		var items []*pb.QueueProduceItem
		for i, e := range errs {
			items = append(items, &pb.QueueProduceItem{Kind: "order.created", Encoding: "application/json",
				Bytes: fmt.Appendf(nil, `{"order_id":%d,"customer":"c-%d","lines":[{"sku":"A-1","qty":2}],"note":%q}`, 1000+i, i, e)})
		}
		require.NoError(t, c.QueueProduce(ctx, &pb.QueueProduceRequest{QueueName: q, Items: items, RequestTimeout: "10s"}))
		res, err := c.QueueLease(ctx, &pb.QueueLeaseRequest{QueueName: q, BatchSize: int32(len(errs)), ClientId: "fixture", RequestTimeout: "5s"})
		require.NoError(t, err)
		require.Len(t, res.Items, len(errs))
		var retry []*pb.QueueRetryItem
		for i, it := range res.Items {
			retry = append(retry, &pb.QueueRetryItem{Id: it.Id, Dead: true, Error: errs[i]})
		}
		_, err = c.QueueRetry(ctx, &pb.QueueRetryRequest{QueueName: q, Partition: res.Partition, Items: retry})
		require.NoError(t, err)
	}
	kill("orders", "order 1001 not found", "order 1002 not found", "order 77 not found")
	kill("orders", "dial tcp 10.0.3.17:5432: connect: connection refused", "dial tcp 10.0.3.18:5432: connect: connection refused")
	kill("billing", "card declined: insufficient funds (charge ch_3NqLfe2eZvKYlo2C)")
	// Some live work in orders, for the overview.
	require.NoError(t, c.QueueProduce(ctx, &pb.QueueProduceRequest{QueueName: "orders", RequestTimeout: "10s",
		Items: []*pb.QueueProduceItem{{Bytes: []byte("a")}, {Bytes: []byte("b")}, {Bytes: []byte("c")}}}))
	// A consumer holding one of them, for the queue page.
	res, err := c.QueueLease(ctx, &pb.QueueLeaseRequest{QueueName: "orders", BatchSize: 1, ClientId: "worker-1", RequestTimeout: "5s"})
	require.NoError(t, err)
	require.Len(t, res.Items, 1)
	require.Eventually(t, func() bool {
		g, err := c.DeadGroups(ctx, &pb.DeadGroupsRequest{QueueName: "orders-dlq"})
		return err == nil && g.TotalItems == 6
	}, 10*time.Second, 10*time.Millisecond)
}

// TestBrowser drives the UI in a real Chromium: overview, a DLQ, its
// filters, an item, a group redriven (dry run, then for real, watched to
// completion), a slow redrive cancelled, a group deleted. It asserts on
// what the pages show.
func TestBrowser(t *testing.T) {
	t.Parallel()
	srv := styxtest.Start(t, styxtest.Options{})
	fixture(t, srv.Client)
	b := newBrowser(t, srv.Endpoint)

	t.Run("Overview", func(t *testing.T) {
		b.t = t
		b.open("/ui/")
		b.waitText("main table", "orders-dlq")
		require.Regexp(t, `^orders \| 2 \| 1 \| 0 \| 5 \| – \| \d+s \| orders-dlq \| 0 \| 8 \| 0 \| 5$`, b.rowText("orders"),
			"ready 2, leased 1, 5 dead items in its dead-letter queue orders-dlq; 8 produced and 5 dead-lettered in 5 minutes")
		require.Regexp(t, `^billing \| 0 \| 0 \| 0 \| 1 \| – \| – \| orders-dlq \| 0 \| 1 \| 0 \| 1$`, b.rowText("billing"))
		require.Regexp(t, `^orders-dlq \| – \| 0 \| 0 \| – \| 6 \| \d+s \| – \| 0 \| 0 \| 0 \| 0$`, b.rowText("orders-dlq"),
			"6 dead items held, not counted as ready")
		b.screenshot("overview")
	})

	t.Run("Queue", func(t *testing.T) {
		b.t = t
		b.open("/ui/")
		b.run(chromedp.Click(`main tbody th a[href="/ui/queues/orders"]`, chromedp.ByQuery))
		b.waitText("h1", "orders")
		b.waitText("main", "Partitions")
		require.Contains(t, b.text("dl.props"), "orders-dlq")
		b.waitText("h2#consumers + table", "worker-1")
		b.screenshot("queue")
	})

	t.Run("DeadLetterQueue", func(t *testing.T) {
		b.t = t
		b.open("/ui/")
		b.run(chromedp.Click(`a[aria-label="6 dead items in orders-dlq"]`, chromedp.ByQuery))
		b.waitText("h1", "Dead items of orders-dlq")
		b.waitText("main table caption", "6 dead items in 3 groups")
		require.Equal(t, []string{
			"3 | explicit | orders | order <n> not found",
			"2 | explicit | orders | dial tcp <ip>: connect: connection refused",
			"1 | explicit | billing | card declined: insufficient funds (charge ch_<id>)",
		}, b.groupRows())
		b.screenshot("dead")

		// Keyboard: a navigation puts the focus on the page's heading, the
		// next Tab reaches the largest group's items, Enter opens them; the
		// filter fields are labelled.
		require.Equal(t, "H1", b.eval(`document.activeElement.tagName`))
		b.run(chromedp.KeyEvent("\t"))
		require.Equal(t, "Items of group order <n> not found", b.eval(`document.activeElement.getAttribute("aria-label")`))
		b.run(chromedp.KeyEvent("\r"))
		b.waitText("main", `Dead items matching error "order <n> not found"`)
		require.Len(t, b.groupRows(), 1, "the group's page shows that group")
		require.Equal(t, "Error contains", b.eval(`document.querySelector('label[for="f-error"]').firstChild.textContent`))
	})

	t.Run("Filter", func(t *testing.T) {
		b.t = t
		b.open("/ui/queues/orders-dlq/dead")
		b.run(chromedp.SetValue(`#f-error`, "refused", chromedp.ByQuery), chromedp.Click(`form.filters button[type=submit]`, chromedp.ByQuery))
		b.waitText("main", "Dead items matching")
		var loc string
		b.run(chromedp.Location(&loc))
		require.Contains(t, loc, "error=refused", "filters stay in the URL")
		items := b.text(`h2#items ~ table tbody`)
		require.Equal(t, 2, strings.Count(items, "connection refused"), items)
		require.NotContains(t, items, "not found")

		// The filtered URL is a deep link: opened afresh, it shows the same.
		b.open("/ui/queues/orders-dlq/dead?reason=explicit&source=billing")
		b.waitText("main", "Dead items matching")
		items = b.text(`h2#items ~ table tbody`)
		require.Contains(t, items, "card declined")
		require.NotContains(t, items, "refused")
		var reason string
		b.run(chromedp.Value(`#f-reason`, &reason, chromedp.ByQuery))
		require.Equal(t, "explicit", reason)
	})

	t.Run("Item", func(t *testing.T) {
		b.t = t
		b.open("/ui/queues/orders-dlq/dead?source=billing")
		b.run(chromedp.Click(`h2#items ~ table tbody tr th a`, chromedp.ByQuery))
		b.waitText("h1", "Dead item ")
		b.waitText("main", "Attempt errors")
		props := b.text("dl.props")
		require.Contains(t, props, "billing")
		require.Contains(t, props, "explicit")
		payload := b.text(`pre[aria-label="Payload (JSON)"]`)
		require.Contains(t, payload, "\"order_id\": 1000,", "JSON is pretty-printed")
		require.Contains(t, b.text("ol.timeline"), "card declined: insufficient funds")
		b.screenshot("item")
	})

	t.Run("RedriveGroup", func(t *testing.T) {
		b.t = t
		b.open("/ui/queues/orders-dlq/dead")
		b.run(chromedp.Click(`button[aria-label="Redrive group order <n> not found"]`, chromedp.ByQuery))
		b.waitDialog("This will move 3 items to their source queue.")
		b.screenshot("redrive-confirm")
		b.run(chromedp.Click(`#confirm-ok`, chromedp.ByQuery))
		b.waitText("h1", "Redrives")
		b.waitText(`tr[aria-current="true"]`, "completed")
		require.Contains(t, b.text(`tr[aria-current="true"]`), "3 of 3 moved")
		b.open("/ui/queues/orders-dlq/dead")
		b.waitText("main table caption", "3 dead items in 2 groups")
		b.waitGone("main table tbody", "order <n> not found")
	})

	t.Run("CancelSlowRedrive", func(t *testing.T) {
		b.t = t
		ctx := context.Background()
		c := srv.Client
		styxtest.CreateQueue(t, c, &pb.QueueInfo{QueueName: "slow-dlq"})
		styxtest.CreateQueue(t, c, &pb.QueueInfo{QueueName: "slow", DeadQueue: "slow-dlq"})
		var items []*pb.QueueProduceItem
		for i := range 50 {
			items = append(items, &pb.QueueProduceItem{Bytes: fmt.Appendf(nil, "job %d", i)})
		}
		require.NoError(t, c.QueueProduce(ctx, &pb.QueueProduceRequest{QueueName: "slow", Items: items, RequestTimeout: "10s"}))
		res, err := c.QueueLease(ctx, &pb.QueueLeaseRequest{QueueName: "slow", BatchSize: 50, ClientId: "t", RequestTimeout: "5s"})
		require.NoError(t, err)
		var retry []*pb.QueueRetryItem
		for _, it := range res.Items {
			retry = append(retry, &pb.QueueRetryItem{Id: it.Id, Dead: true, Error: "timeout after 30s"})
		}
		_, err = c.QueueRetry(ctx, &pb.QueueRetryRequest{QueueName: "slow", Items: retry})
		require.NoError(t, err)

		b.open("/ui/queues/slow-dlq/dead")
		b.waitText("main table caption", "50 dead items in 1 group")
		b.run(chromedp.Click(`button[aria-label="Redrive group timeout after <dur>"]`, chromedp.ByQuery))
		b.waitDialog("This will move 50 items to their source queue.")
		b.run(chromedp.SetValue(`#redrive-rate`, "1", chromedp.ByQuery), chromedp.Click(`#confirm-ok`, chromedp.ByQuery))
		b.waitText(`tr[aria-current="true"]`, "running")
		b.run(chromedp.Click(`tr[aria-current="true"] button.danger`, chromedp.ByQuery))
		b.waitDialog("Stop redrive")
		b.run(chromedp.Click(`#confirm-ok`, chromedp.ByQuery))
		b.waitText(`tr[aria-current="true"]`, "cancelled")
		row := b.text(`tr[aria-current="true"]`)
		require.NotContains(t, row, "50 of 50 moved", "a cancelled redrive stops early")
	})

	t.Run("DeleteGroup", func(t *testing.T) {
		b.t = t
		b.open("/ui/queues/orders-dlq/dead")
		b.run(chromedp.Click(`button[aria-label="Delete group dial tcp <ip>: connect: connection refused"]`, chromedp.ByQuery))
		b.waitDialog("This will delete 2 items of orders-dlq for good.")
		b.run(chromedp.Click(`#confirm-ok`, chromedp.ByQuery))
		b.waitText("#status", "Deleted 2 items.")
		b.waitText("main table caption", "1 dead item in 1 group")
		b.waitGone("main table tbody", "connection refused")
	})

	t.Run("DarkTheme", func(t *testing.T) {
		b.t = t
		b.run(emulation.SetEmulatedMedia().WithFeatures([]*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: "dark"}}))
		b.open("/ui/queues/orders-dlq/dead")
		var bg string
		b.run(chromedp.Evaluate(`getComputedStyle(document.body).backgroundColor`, &bg))
		require.Equal(t, "rgb(15, 18, 23)", bg, "the dark theme follows prefers-color-scheme")
		b.screenshot("dead-dark")
	})
}

// An API key given in the prompt is sent with every call, and the prompt
// appears when a call answers 401. A stand-in for the server's
// authentication (issue 11) sits in front of the API: it answers 401
// unless the request carries "Authorization: Bearer s3cret".
func TestBrowserAPIKey(t *testing.T) {
	t.Parallel()
	srv := styxtest.Start(t, styxtest.Options{})
	styxtest.CreateQueue(t, srv.Client, &pb.QueueInfo{QueueName: "guarded"})
	target, err := url.Parse(srv.Endpoint)
	require.NoError(t, err)
	proxy := httputil.NewSingleHostReverseProxy(target)
	var seen atomic.Int32
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/v1/") {
			if r.Header.Get("Authorization") != "Bearer s3cret" {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusUnauthorized)
				_, _ = w.Write([]byte(`{"code":401,"code_text":"Unauthorized","message":"an API key is required"}`))
				return
			}
			seen.Add(1)
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)
	b := newBrowser(t, front.URL)

	b.run(chromedp.Navigate(front.URL + "/ui/"))
	b.waitText("#key-dialog", "This server asks for an API key.")
	b.run(chromedp.SendKeys(`#key-input`, "wrong", chromedp.ByQuery), chromedp.Click(`#key-dialog button[value=save]`, chromedp.ByQuery))
	b.waitText("main", "an API key is required")
	require.Zero(t, seen.Load())
	b.run(chromedp.Click(`main .error-box button`, chromedp.ByQuery))
	b.run(chromedp.SendKeys(`#key-input`, "s3cret", chromedp.ByQuery), chromedp.Click(`#key-dialog button[value=save]`, chromedp.ByQuery))
	b.waitText("main table", "guarded")
	require.NotZero(t, seen.Load())
	// The key stays for the tab: another page needs no prompt.
	b.open("/ui/queues/guarded")
	b.waitText("h1", "guarded")
	require.Equal(t, "s3cret", b.eval(`sessionStorage.getItem("styx.apiKey")`))
}

// TestBrowserScopedKey runs the UI against a server with --auth and a key
// of scopes dead and read only (an on-call operator's): the DLQ page, whose
// calls include dead.groups, renders its groups and items; no call needs
// admin.
func TestBrowserScopedKey(t *testing.T) {
	t.Parallel()
	d, c := startAuth(t)

	ctx := context.Background()
	styxtest.CreateQueue(t, c, &pb.QueueInfo{QueueName: "pay-dlq"})
	styxtest.CreateQueue(t, c, &pb.QueueInfo{QueueName: "pay", DeadQueue: "pay-dlq"})
	require.NoError(t, c.QueueProduce(ctx, &pb.QueueProduceRequest{QueueName: "pay", Items: []*pb.QueueProduceItem{{Utf8: "p-1"}}}))
	lease, err := c.QueueLease(ctx, &pb.QueueLeaseRequest{QueueName: "pay", BatchSize: 1, ClientId: "w", RequestTimeout: "5s"})
	require.NoError(t, err)
	_, err = c.QueueRetry(ctx, &pb.QueueRetryRequest{QueueName: "pay", Items: []*pb.QueueRetryItem{{Id: lease.Items[0].Id, Error: "card declined for payment 7", Dead: true}}})
	require.NoError(t, err)
	oncall, err := c.KeysCreate(ctx, &pb.KeysCreateRequest{Name: "oncall", Scopes: []string{"dead", "read"}})
	require.NoError(t, err)

	b := newBrowser(t, d.Endpoint())
	b.run(chromedp.Navigate(d.Endpoint() + "/ui/queues/pay-dlq/dead"))
	b.waitText("#key-dialog", "This server asks for an API key.")
	b.run(chromedp.SendKeys(`#key-input`, oncall.Key, chromedp.ByQuery), chromedp.Click(`#key-dialog button[value=save]`, chromedp.ByQuery))
	b.waitText("main table caption", "1 dead item in 1 group")
	b.waitText("main", "card declined for payment <n>")
	require.NotContains(t, b.text("main"), "forbidden")
}

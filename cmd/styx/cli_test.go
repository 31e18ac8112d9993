package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/styxq/styx/daemon"
	pb "github.com/styxq/styx/styxpb"
)

// startDaemon runs an in-memory server for the test's lifetime.
func startDaemon(t *testing.T) *daemon.Daemon {
	t.Helper()
	d, err := daemon.New(t.Context(), daemon.Config{
		Listen: "127.0.0.1:0", Storage: daemon.StorageMemory,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	require.NoError(t, err)
	// Not t.Context(): it is canceled before cleanups run.
	t.Cleanup(func() { require.NoError(t, d.Close(context.Background())) })
	return d
}

// cli runs command lines against one endpoint.
type cli struct {
	t        *testing.T
	endpoint string
}

// run executes args (plus --endpoint) on a fresh root command with stdin
// and returns what it wrote and its error.
func (c cli) runIn(stdin string, args ...string) (stdout, stderr string, err error) {
	c.t.Helper()
	var out, errOut bytes.Buffer
	root := newRootCmd(&out, &errOut)
	root.SetIn(strings.NewReader(stdin))
	root.SetArgs(append(args, "--endpoint", c.endpoint))
	err = root.ExecuteContext(c.t.Context())
	return out.String(), errOut.String(), err
}

func (c cli) run(args ...string) (stdout, stderr string, err error) {
	c.t.Helper()
	return c.runIn("", args...)
}

// ok runs args, requires success and returns stdout.
func (c cli) ok(args ...string) string {
	c.t.Helper()
	out, errOut, err := c.run(args...)
	require.NoError(c.t, err, "styx %s; stderr: %s", strings.Join(args, " "), errOut)
	return out
}

// jsonLines decodes each line of out with unmarshal into a new *T.
func jsonLines[M interface{ *T }, T any](t require.TestingT, out string, unmarshal func([]byte, M) error) []M {
	var msgs []M
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		m := M(new(T))
		require.NoError(t, unmarshal(sc.Bytes(), m), "line %q", sc.Text())
		msgs = append(msgs, m)
	}
	return msgs
}

func unmarshalItem(b []byte, m *pb.StorageItem) error { return protojson.Unmarshal(b, m) }

func TestCLI(t *testing.T) {
	d := startDaemon(t)
	c := cli{t: t, endpoint: d.Endpoint()}

	t.Run("queues", func(t *testing.T) {
		c := cli{t: t, endpoint: c.endpoint}
		require.Equal(t, "created queue orders-dlq\n", c.ok("queues", "create", "orders-dlq"))
		c.ok("queues", "create", "orders", "--dead-queue", "orders-dlq", "--lease-timeout", "30s", "--max-attempts", "5")

		out := c.ok("queues", "info", "orders")
		require.Regexp(t, `dead queue\s+orders-dlq`, out)
		require.Regexp(t, `lease timeout\s+30s`, out)
		require.Regexp(t, `expire timeout\s+336h0m0s`, out, "unset flags take the server's defaults")
		require.Regexp(t, `max attempts\s+5`, out)
		require.Regexp(t, `namespace\s+_system`, out, "the server's default namespace")

		require.Equal(t, "updated queue orders: reference (none) → team-a\n", c.ok("queues", "update", "orders", "--reference", "team-a"))
		out = c.ok("queues", "info", "orders")
		require.Regexp(t, `reference\s+team-a`, out)
		require.Regexp(t, `lease timeout\s+30s`, out, "update keeps the fields it was not given")

		_, _, err := c.run("queues", "update", "orders")
		require.ErrorContains(t, err, "nothing to update")

		out = c.ok("queues", "list")
		require.Regexp(t, `(?m)^NAME\s+NAMESPACE\s+PARTITIONS`, out)
		require.Regexp(t, `(?m)^orders\s+_system\s+1\s+30s\s+336h0m0s\s+5\s+orders-dlq`, out)

		out = c.ok("queues", "list", "--json")
		infos := jsonLines(t, out, func(b []byte, m *pb.QueueInfo) error { return protojson.Unmarshal(b, m) })
		require.Len(t, infos, 2)
		require.Equal(t, "orders", infos[0].QueueName)
		require.Equal(t, "orders-dlq", infos[0].DeadQueue)
		require.Equal(t, "orders-dlq", infos[1].QueueName)

		// The last hour, a minute a row (issue 28, 6).
		c.ok("queues", "create", "hist")
		c.ok("produce", "hist", "a", "b")
		out = c.ok("queues", "history", "hist")
		require.Regexp(t, `(?m)^MINUTE\s+PRODUCED\s+COMPLETED\s+DEAD-LETTERED\s+DEPTH\n\S+Z\s+2\s+0\s+0\s+2$`, out)
		require.Equal(t, 61, strings.Count(c.ok("queues", "history", "--all"), "\n"), "60 minutes and a header")

		// Namespaces: set on create, listed one namespace at a time.
		c.ok("queues", "create", "billing", "--namespace", "team-b")
		out = c.ok("queues", "info", "billing")
		require.Regexp(t, `namespace\s+team-b`, out)
		out = c.ok("queues", "list", "--namespace", "team-b")
		require.Regexp(t, `(?m)^billing\s+team-b\s+1\s`, out)
		require.NotContains(t, out, "orders")
		require.NotContains(t, c.ok("queues", "list"), "billing", "the default lists _system only")
		_, _, err = c.run("queues", "create", "bad", "--namespace", "a:b")
		require.ErrorContains(t, err, "invalid namespace")

		c.ok("queues", "create", "scratch")
		c.ok("queues", "delete", "scratch", "--yes")
		_, _, err = c.run("queues", "info", "scratch")
		require.ErrorContains(t, err, "no such queue named 'scratch'")
	})

	t.Run("produce, lease, retry --dead, items list on the dead-letter queue", func(t *testing.T) {
		c := cli{t: t, endpoint: c.endpoint}
		require.Equal(t, "produced 2 items to orders\n",
			c.ok("produce", "orders", "hello world", "second", "--kind", "email", "--reference", "ref-1"))

		// --json: the whole lease reply, one protojson object on one line.
		out := c.ok("lease", "orders", "--json", "--timeout", "1s")
		require.Equal(t, 1, strings.Count(out, "\n"))
		var lease pb.QueueLeaseResponse
		require.NoError(t, protojson.Unmarshal([]byte(out), &lease))
		require.Len(t, lease.Items, 1)
		first := lease.Items[0]
		require.Equal(t, []byte("hello world"), first.Bytes)
		require.Equal(t, "email", first.Kind)
		require.Equal(t, "ref-1", first.Reference)
		require.EqualValues(t, 1, first.Attempts)
		var generic map[string]any
		require.NoError(t, json.Unmarshal([]byte(out), &generic), "valid JSON for scripts")

		// Human output.
		out = c.ok("lease", "orders", "--timeout", "1s", "--client-id", "test")
		require.Regexp(t, `(?m)^PARTITION\s+ID\s+ATTEMPTS\s+LEASE-DEADLINE\s+KIND\s+REFERENCE\s+PAYLOAD$`, out)
		require.Regexp(t, `(?m)^0\s+\S+\s+1\s+\d{4}-\d\d-\d\dT\S+Z\s+email\s+ref-1\s+second$`, out)
		second := strings.Fields(strings.Split(out, "\n")[1])[1]

		_, _, err := c.run("retry", "orders", first.Id, "--dead", "--release")
		require.ErrorContains(t, err, "--dead and --release cannot be combined")

		require.Equal(t, "dead-lettered 1 item in orders to orders-dlq\n",
			c.ok("retry", "orders", first.Id, "--partition", "0", "--error", "smtp: 550 mailbox unavailable", "--dead"))
		require.Equal(t, "completed 1 item in orders\n", c.ok("complete", "orders", second))

		// The move to the dead-letter queue may finish after the retry
		// returns: poll.
		var dead *pb.StorageItem
		require.EventuallyWithT(t, func(ct *assert.CollectT) {
			out, _, err := c.run("items", "list", "orders-dlq", "--json")
			require.NoError(ct, err)
			items := jsonLines(ct, out, unmarshalItem)
			require.Len(ct, items, 1)
			dead = items[0]
		}, 10*time.Second, 20*time.Millisecond)
		require.Equal(t, "orders", dead.SourceQueue)
		require.Equal(t, "explicit", dead.DeadReason)
		require.Equal(t, "smtp: 550 mailbox unavailable", dead.LastError)
		require.Equal(t, []byte("hello world"), dead.Payload, "--json prints the full item")
		require.NotNil(t, dead.DeadAt)

		out = c.ok("items", "list", "orders-dlq")
		require.Regexp(t, `(?m)^ID\s+STATE\s+ATTEMPTS\s+AGE\s+SOURCE-QUEUE\s+DEAD-REASON\s+DEAD-AT\s+LAST-ERROR\s+REDRIVES$`, out)
		require.Regexp(t, `(?m)^`+dead.Id+`\s+ready\s+\d+\s+\S+ ago\s+orders\s+explicit\s+\S+ ago\s+smtp: 550 mailbox unavailable\s+0$`, out)

		// Nothing left in orders.
		out = c.ok("items", "list", "orders")
		require.Equal(t, 1, strings.Count(out, "\n"), "header only: %q", out)

		// A queue of several partitions: the listing says which it shows.
		c.ok("queues", "create", "parts", "--partitions", "3")
		_, errOut, err := c.run("items", "list", "parts")
		require.NoError(t, err)
		require.Equal(t, "partition 0 of 3 (0..2): --partition N lists another\n", errOut)
		_, errOut, err = c.run("items", "list", "parts", "--partition", "2")
		require.NoError(t, err)
		require.Empty(t, errOut)
		out, errOut, err = c.run("lease", "orders", "--timeout", "50ms")
		require.NoError(t, err, "an empty lease is not a failure")
		require.Empty(t, out)
		require.Equal(t, "no items\n", errOut)
	})

	t.Run("produce --file from stdin, scheduled items, stats", func(t *testing.T) {
		c := cli{t: t, endpoint: c.endpoint}
		c.ok("queues", "create", "batch")
		out, _, err := c.runIn("one\n\ntwo\r\nthree", "produce", "batch", "zero", "--file", "-")
		require.NoError(t, err)
		require.Equal(t, "produced 4 items to batch\n", out)

		later := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
		c.ok("produce", "batch", "later", "--enqueue-at", later)
		out = c.ok("items", "list", "batch", "--scheduled", "--json")
		items := jsonLines(t, out, unmarshalItem)
		require.Len(t, items, 1)
		require.Equal(t, []byte("later"), items[0].Payload)

		out = c.ok("items", "list", "batch")
		require.Equal(t, 4, strings.Count(out, "ready"), out)
		require.Equal(t, 0, strings.Count(out, "scheduled"), "scheduled items are listed by --scheduled only: %s", out)

		// Paging with the hint's --pivot (exclusive, though the server's pivot
		// is inclusive) neither repeats nor skips an item.
		all := jsonLines(t, c.ok("items", "list", "batch", "--json"), unmarshalItem)
		require.Len(t, all, 4)
		_, hint, err := c.run("items", "list", "batch", "--limit", "2")
		require.NoError(t, err)
		require.Equal(t, "more items may follow: --pivot "+all[1].Id+"\n", hint)
		page := jsonLines(t, c.ok("items", "list", "batch", "--limit", "2", "--pivot", all[1].Id, "--json"), unmarshalItem)
		require.Len(t, page, 2)
		require.Equal(t, []string{all[2].Id, all[3].Id}, []string{page[0].Id, page[1].Id})

		out = c.ok("lease", "batch", "--batch", "10", "--json")
		var lease pb.QueueLeaseResponse
		require.NoError(t, protojson.Unmarshal([]byte(out), &lease))
		var payloads []string
		for _, it := range lease.Items {
			payloads = append(payloads, string(it.Bytes))
		}
		require.Equal(t, []string{"zero", "one", "two", "three"}, payloads)

		out = c.ok("stats", "batch")
		require.Regexp(t, `(?m)^PARTITION\s+TOTAL\s+LEASED\s+SCHEDULED`, out)
		require.Regexp(t, `(?m)^0\s+5\s+4\s+1\s`, out)
		require.Regexp(t, `(?m)^CONSUMER\s+KEY\s+LEASES-HELD\s+LEASED\s+LAST-SEEN$`, out)
		require.Regexp(t, `(?m)^\S+\s+-\s+4\s+4\s+\d{4}-\d\d-\d\dT\S+Z \(\S+ ago\)$`, out, "the CLI's lease: 4 held, 4 given")

		out = c.ok("stats", "batch", "--json")
		var stats pb.QueueStatsResponse
		require.NoError(t, protojson.Unmarshal([]byte(out), &stats))
		require.Equal(t, "batch", stats.QueueName)
	})

	t.Run("retry prints outcomes, renew prints lease deadlines", func(t *testing.T) {
		c := cli{t: t, endpoint: c.endpoint}
		c.ok("queues", "create", "jobs", "--max-attempts", "1", "--lease-timeout", "1m")
		c.ok("produce", "jobs", "a", "b", "c")
		out := c.ok("lease", "jobs", "--batch", "3", "--json")
		var lease pb.QueueLeaseResponse
		require.NoError(t, protojson.Unmarshal([]byte(out), &lease))
		require.Len(t, lease.Items, 3)
		a, b, x := lease.Items[0].Id, lease.Items[1].Id, lease.Items[2].Id

		before := time.Now()
		out = c.ok("renew", "jobs", a, b, "--lease-timeout", "10m")
		require.Regexp(t, `(?m)^ID\s+LEASE-DEADLINE$`, out)
		require.Regexp(t, `(?m)^`+a+`\s+\d{4}-\d\d-\d\dT\S+Z$`, out)
		out = c.ok("renew", "jobs", x, "--json")
		renewed := jsonLines(t, out, func(b []byte, m *pb.QueueRenewItem) error { return protojson.Unmarshal(b, m) })
		require.Len(t, renewed, 1)
		require.Equal(t, x, renewed[0].Id)
		require.WithinDuration(t, before.Add(time.Minute), renewed[0].LeaseDeadline.AsTime(), 5*time.Second, "the queue's lease timeout")
		_, _, err := c.run("renew", "jobs", a, "--lease-timeout=-1s")
		require.ErrorContains(t, err, "lease_timeout")

		// max_attempts 1 and no dead-letter queue: a plain retry drops.
		require.Equal(t, "dropped 2 items in jobs: the queue has no dead_queue (reason max_attempts)\n", c.ok("retry", "jobs", a, b))
		require.Equal(t, "released 1 item in jobs\n", c.ok("retry", "jobs", x, "--release"))
		_, _, err = c.run("renew", "jobs", a, x)
		require.ErrorContains(t, err, "'"+a+"', '"+x+"' are not leased")

		c.ok("queues", "create", "mixed")
		c.ok("produce", "mixed", "a", "b")
		out = c.ok("lease", "mixed", "--batch", "2", "--json")
		require.NoError(t, protojson.Unmarshal([]byte(out), &lease))
		out = c.ok("retry", "mixed", lease.Items[0].Id, lease.Items[1].Id, "--json")
		outcomes := jsonLines(t, out, func(b []byte, m *pb.QueueRetryOutcome) error { return protojson.Unmarshal(b, m) })
		require.Len(t, outcomes, 2)
		require.Equal(t, "requeued", outcomes[0].Outcome)
		require.NotEmpty(t, outcomes[0].NewId)
	})

	t.Run("errors and exit status", func(t *testing.T) {
		var out, errOut bytes.Buffer
		code := run(t.Context(), []string{"queues", "info", "missing", "--endpoint", c.endpoint}, &out, &errOut)
		require.Equal(t, 1, code)
		require.Empty(t, out.String())
		require.Equal(t, "styx: queue does not exist; no such queue named 'missing' (code 400 bad request)\n", errOut.String())

		errOut.Reset()
		code = run(t.Context(), []string{"lease"}, &out, &errOut)
		require.Equal(t, 1, code)
		require.Contains(t, errOut.String(), "styx: styx lease takes a QUEUE")

		errOut.Reset()
		code = run(t.Context(), []string{"queues", "list", "--endpoint", "localhost:1"}, &out, &errOut)
		require.Equal(t, 1, code)
		require.True(t, strings.HasPrefix(errOut.String(), "styx: endpoint"), errOut.String())
	})
}

func TestPayloadText(t *testing.T) {
	require.Equal(t, "héllo wörld", payloadText([]byte("héllo wörld")))
	require.Equal(t, "base64:AAE=", payloadText([]byte{0, 1}))
	require.Equal(t, "base64:YQpi", payloadText([]byte("a\nb")))
}

func TestShortDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0: "0s", 1500 * time.Millisecond: "2s", 3*time.Minute + 12*time.Second: "3m12s",
		5*time.Hour + 7*time.Minute: "5h7m", 76 * time.Hour: "3d4h",
	} {
		require.Equal(t, want, shortDuration(d))
	}
	require.Equal(t, "16ms", durationText("16.418798ms"))
	require.Equal(t, "1m5s", durationText("65.2s"))
	require.Equal(t, "-", durationText(""))
}

// syncBuffer is a bytes.Buffer safe to write from one goroutine while
// another reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestServerSIGTERM runs `styx server`, uses it, sends the process SIGTERM
// and expects a graceful shutdown with exit status 0.
func TestServerSIGTERM(t *testing.T) {
	t.Setenv(envConfig, "")
	var out, errOut syncBuffer
	exit := make(chan int, 1)
	go func() {
		exit <- run(t.Context(), []string{"server", "--storage", "memory", "--listen", "127.0.0.1:0",
			"--log-format", "json", "--log-level", "info"}, &out, &errOut)
	}()

	// The server logs its address once it listens (and once it has
	// registered for signals).
	var listen string
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		for line := range strings.Lines(errOut.String()) {
			var rec struct{ Msg, Listen string }
			if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "styx serving" {
				listen = rec.Listen
			}
		}
		require.NotEmpty(ct, listen, "log: %s", errOut.String())
	}, 10*time.Second, 10*time.Millisecond)

	c := cli{t: t, endpoint: "http://" + listen}
	c.ok("queues", "create", "q")
	c.ok("produce", "q", "x")

	require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGTERM))
	select {
	case code := <-exit:
		require.Equal(t, 0, code, "stderr: %s", errOut.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("server did not stop on SIGTERM; stderr: %s", errOut.String())
	}
	require.Contains(t, errOut.String(), `"msg":"shutting down"`)
	require.Contains(t, errOut.String(), `"msg":"stopped"`)
}

func TestRetrySummary(t *testing.T) {
	at := timestamppb.New(time.Date(2026, 1, 2, 15, 4, 5, 0, time.UTC))
	got := retrySummary("q", []*pb.QueueRetryOutcome{
		{Outcome: "dead_lettered", Reason: "explicit", DeadQueue: "q-dead"},
		{Outcome: "requeued"},
		{Outcome: "scheduled", RetryAt: at},
		{Outcome: "requeued"},
		{Outcome: "released"},
		{Outcome: "dead_lettered", Reason: "max_attempts", DeadQueue: "q-dead"},
		{Outcome: "dropped", Reason: "explicit"},
		{Outcome: "teleported"},
	})
	require.Equal(t, []string{
		"retried 2 items in q",
		"released 1 item in q",
		"scheduled 1 item in q for 2026-01-02T15:04:05Z",
		"dead-lettered 2 items in q to q-dead (reason explicit, max_attempts)",
		"dropped 1 item in q: the queue has no dead_queue",
		"teleported 1 item in q",
	}, got)
}

package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/styxq/styx"
	"github.com/styxq/styx/daemon"
	"github.com/styxq/styx/internal/backend/embedded/pebble"
	"github.com/styxq/styx/internal/store/faulty"
	pb "github.com/styxq/styx/styxpb"
)

// leaseOne leases one item of queue through the CLI and returns it.
func (c cli) leaseOne(queue string) *pb.QueueLeaseItem {
	c.t.Helper()
	var res pb.QueueLeaseResponse
	require.NoError(c.t, protojson.Unmarshal([]byte(c.ok("lease", queue, "--json", "--timeout", "1s")), &res))
	require.Len(c.t, res.Items, 1)
	return res.Items[0]
}

// TestQueuesDeleteAsks: queues delete shows what will be lost (items,
// leased, dead) and asks, unless --yes.
func TestQueuesDeleteAsks(t *testing.T) {
	d := startDaemon(t)
	c := cli{t: t, endpoint: d.Endpoint()}
	c.ok("queues", "create", "qd-dlq")
	c.ok("queues", "create", "qd", "--dead-queue", "qd-dlq")
	c.ok("produce", "qd", "a", "b", "c")
	dead := c.leaseOne("qd")
	c.ok("retry", "qd", dead.Id, "--dead")
	c.leaseOne("qd") // a consumer holds one
	c.waitDead("qd-dlq", 1)

	out, errOut, err := c.runIn("n\n", "queues", "delete", "qd")
	require.ErrorContains(t, err, "aborted: nothing deleted")
	require.Empty(t, out)
	require.Equal(t, "Delete queue qd and its 2 items (1 leased, 0 dead)? [y/N] ", errOut)
	_, _, err = c.runIn("", "queues", "delete", "qd")
	require.ErrorContains(t, err, "aborted", "no answer is no")
	c.ok("queues", "info", "qd") // still there

	// The dead-letter queue, once no queue names it: its dead items count.
	require.Equal(t, "updated queue qd: dead_queue qd-dlq → (none)\n", c.ok("queues", "update", "qd", "--dead-queue", ""))
	out, errOut, err = c.runIn("y\n", "queues", "delete", "qd-dlq")
	require.NoError(t, err)
	require.Equal(t, "Delete queue qd-dlq and its 1 item (0 leased, 1 dead)? [y/N] ", errOut)
	require.Equal(t, "deleted queue qd-dlq\n", out)

	out, errOut, err = c.run("queues", "delete", "qd", "--yes")
	require.NoError(t, err)
	require.Empty(t, errOut, "--yes asks nothing")
	require.Equal(t, "deleted queue qd\n", out)
	_, _, err = c.run("queues", "info", "qd")
	require.ErrorContains(t, err, "no such queue named 'qd'")

	c.ok("queues", "create", "empty")
	out, errOut, err = c.runIn("yes\n", "queues", "delete", "empty")
	require.NoError(t, err)
	require.Equal(t, "Delete queue empty (it holds no items)? [y/N] ", errOut)
	require.Equal(t, "deleted queue empty\n", out)
}

// TestQueuesUpdateZeroValues: --max-attempts 0 and --dead-queue "" change
// the queue, and an update that changes nothing says so.
func TestQueuesUpdateZeroValues(t *testing.T) {
	d := startDaemon(t)
	c := cli{t: t, endpoint: d.Endpoint()}
	c.ok("queues", "create", "uz-dlq")
	c.ok("queues", "create", "uz", "--dead-queue", "uz-dlq", "--max-attempts", "3")

	require.Equal(t, "updated queue uz: max_attempts 3 → unlimited, dead_queue uz-dlq → (none)\n",
		c.ok("queues", "update", "uz", "--max-attempts", "0", "--dead-queue", ""))
	out := c.ok("queues", "info", "uz")
	require.Regexp(t, `max attempts\s+unlimited`, out)
	require.Regexp(t, `dead queue\s+-`, out)
	require.Equal(t, "queue uz unchanged: it already had those settings\n", c.ok("queues", "update", "uz", "--max-attempts", "0"))

	var info pb.QueueInfo
	require.NoError(t, protojson.Unmarshal([]byte(c.ok("queues", "update", "uz", "--lease-timeout", "2m", "--json")), &info))
	require.Equal(t, "2m0s", info.LeaseTimeout)

	// retry --dead on a queue without a dead-letter queue: the item is
	// dropped, and the CLI says so.
	c.ok("produce", "uz", "x")
	it := c.leaseOne("uz")
	require.Equal(t, "dropped 1 item in uz: the queue has no dead_queue\n", c.ok("retry", "uz", it.Id, "--dead"))
	require.Equal(t, 1, strings.Count(c.ok("items", "list", "uz"), "\n"), "header only: the item is gone")
}

// TestDeadDeleteAllCLI: dead delete --all sends all: true, never deletes a
// leased item, and is refused on a queue that is no dead-letter queue.
func TestDeadDeleteAllCLI(t *testing.T) {
	d := startDaemon(t)
	c := cli{t: t, endpoint: d.Endpoint()}
	c.ok("queues", "create", "da-dlq")
	c.ok("queues", "create", "da", "--dead-queue", "da-dlq")
	c.ok("produce", "da", "a", "b", "c")
	for range 3 {
		c.ok("retry", "da", c.leaseOne("da").Id, "--dead")
	}
	c.waitDead("da-dlq", 3)
	held := c.leaseOne("da-dlq")

	out, errOut, err := c.runIn("y\n", "dead", "delete", "da-dlq", "--all")
	require.NoError(t, err)
	require.Equal(t, "Delete 2 items from da-dlq? [y/N] ", errOut, "the leased item is not counted")
	require.Equal(t, "deleted 2 items from da-dlq\n", out)
	require.Equal(t, "no items of da-dlq match: nothing deleted\n", c.ok("dead", "delete", "da-dlq", "--all"))
	require.Equal(t, "deleted 0 items from da-dlq\n", c.ok("dead", "delete", "da-dlq", "--all", "--yes"))
	c.ok("complete", "da-dlq", held.Id) // the consumer's lease is intact

	// A work queue with a leased item: refused, nothing deleted.
	c.ok("queues", "create", "work")
	c.ok("produce", "work", "busy")
	busy := c.leaseOne("work")
	_, _, err = c.run("dead", "delete", "work", "--all", "--yes")
	require.ErrorContains(t, err, "queue 'work' is not a dead-letter queue")
	require.Equal(t, styx.CodeBadRequest, styx.ErrorCode(err))
	_, _, err = c.run("dead", "redrive", "work", "--all")
	require.ErrorContains(t, err, "queue 'work' is not a dead-letter queue")
	c.ok("complete", "work", busy.Id)
}

// TestLeaseShutdown: a lease answered 454 "server shutting down" is an
// error with exit status 75, not "no items".
func TestLeaseShutdown(t *testing.T) {
	d, err := daemon.New(t.Context(), daemon.Config{
		Listen: "127.0.0.1:0", Storage: daemon.StorageMemory, ShutdownTimeout: 10 * time.Second,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	require.NoError(t, err)
	closed := false
	t.Cleanup(func() {
		if !closed {
			require.NoError(t, d.Close(context.Background()))
		}
	})
	c := cli{t: t, endpoint: d.Endpoint()}
	c.ok("queues", "create", "ls")

	// Empty: "no items", exit 0.
	var out, errOut bytes.Buffer
	require.Equal(t, 0, run(t.Context(), []string{"lease", "ls", "--timeout", "50ms", "--endpoint", d.Endpoint()}, &out, &errOut))
	require.Equal(t, "no items\n", errOut.String())

	// A lease waiting when the server shuts down.
	type result struct {
		code        int
		out, errOut string
	}
	done := make(chan result, 1)
	go func() {
		var out, errOut bytes.Buffer
		code := run(context.Background(), []string{"lease", "ls", "--timeout", "1m", "--endpoint", d.Endpoint()}, &out, &errOut)
		done <- result{code, out.String(), errOut.String()}
	}()
	client, err := styx.NewClient(styx.ClientConfig{Endpoint: d.Endpoint()})
	require.NoError(t, err)
	defer client.Close()
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		st, err := client.QueueStats(t.Context(), &pb.QueueStatsRequest{QueueName: "ls"})
		require.NoError(ct, err)
		require.EqualValues(ct, 1, st.LogicalQueues[0].LeaseWaiting)
	}, 10*time.Second, 10*time.Millisecond, "the lease waits")
	client.Close()
	closed = true
	require.NoError(t, d.Close(context.Background()))

	select {
	case r := <-done:
		assert.Equal(t, exitRetry, r.code)
		assert.Empty(t, r.out)
		assert.Equal(t, "styx: server shutting down; retry on another node or after restart (code 454 retry)\n", r.errOut)
		assert.NotContains(t, r.errOut, "no items")
	case <-time.After(30 * time.Second):
		t.Fatal("the lease did not return")
	}
}

func TestVersionFlag(t *testing.T) {
	var out, errOut bytes.Buffer
	require.Equal(t, 0, run(t.Context(), []string{"--version"}, &out, &errOut))
	require.Equal(t, "styx "+buildVersion()+"\n", out.String())
	require.NotEmpty(t, buildVersion())

	old := version
	version = "v9.9.9"
	defer func() { version = old }()
	out.Reset()
	require.Equal(t, 0, run(t.Context(), []string{"--version"}, &out, &errOut))
	require.Equal(t, "styx v9.9.9\n", out.String(), "the link-time version wins")
}

// TestQueuesUpdateHelpShowsNoDefaults: update keeps every setting not given,
// so its help must not show create's defaults as if they were applied.
func TestQueuesUpdateHelpShowsNoDefaults(t *testing.T) {
	var out, errOut bytes.Buffer
	require.Equal(t, 0, run(t.Context(), []string{"queues", "update", "--help"}, &out, &errOut))
	own, _, _ := strings.Cut(out.String(), "Global Flags:")
	assert.NotContains(t, own, "(default", own)
	assert.Regexp(t, `--lease-timeout duration +how long a lease lasts before the item is handed out again \(kept when not given\)`, own)

	out.Reset()
	require.Equal(t, 0, run(t.Context(), []string{"queues", "create", "--help"}, &out, &errOut))
	assert.Contains(t, out.String(), "(default 1m0s)", "create still shows its defaults")
}

// TestStorageUnavailableExit: a 453 (storage unavailable) is temporary, as
// a 454 is: the CLI prints the server's message and exits 75 (EX_TEMPFAIL),
// not 1.
func TestStorageUnavailableExit(t *testing.T) {
	mem, err := pebble.OpenMemory()
	require.NoError(t, err)
	t.Cleanup(func() { _ = mem.Close() })
	faults := faulty.New(mem)
	d, err := daemon.New(t.Context(), daemon.Config{
		Listen: "127.0.0.1:0", Store: faults, ShutdownTimeout: 10 * time.Second,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, d.Close(context.Background())) })
	c := cli{t: t, endpoint: d.Endpoint()}
	c.ok("queues", "create", "su")

	faults.SetDown(errors.New("injected: disk gone"))
	for _, args := range [][]string{
		{"produce", "su", "x"},
		{"queues", "list"},
	} {
		var out, errOut bytes.Buffer
		code := run(t.Context(), append(args, "--endpoint", d.Endpoint()), &out, &errOut)
		assert.Equal(t, exitRetry, code, "%v: %s", args, errOut.String())
		assert.Empty(t, out.String())
		assert.Regexp(t, `^styx: storage unavailable; .*injected: disk gone \(code 453 unavailable\)\n$`, errOut.String())
	}
	faults.SetDown(nil)
	c.ok("produce", "su", "x")
}

package main

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/styxq/styx/internal/queue"
	pb "github.com/styxq/styx/styxpb"
)

func unmarshalTask(b []byte, m *pb.RedriveTask) error { return protojson.Unmarshal(b, m) }

// leaseAll leases n items of queue and returns them in order.
func (c cli) leaseAll(queue string, n int) []*pb.QueueLeaseItem {
	c.t.Helper()
	out := c.ok("lease", queue, "--batch", fmt.Sprint(n), "--timeout", "1s", "--json")
	var lease pb.QueueLeaseResponse
	require.NoError(c.t, protojson.Unmarshal([]byte(out), &lease))
	require.Len(c.t, lease.Items, n)
	return lease.Items
}

// waitDead polls until queue lists n items and returns them.
func (c cli) waitDead(queue string, n int) []*pb.StorageItem {
	c.t.Helper()
	var items []*pb.StorageItem
	require.EventuallyWithT(c.t, func(ct *assert.CollectT) {
		out, _, err := c.run("dead", "list", queue, "--all", "--json")
		require.NoError(ct, err)
		items = jsonLines(ct, out, unmarshalItem)
		require.Len(ct, items, n)
	}, 10*time.Second, 20*time.Millisecond)
	return items
}

func TestDeadCLI(t *testing.T) {
	d := startDaemon(t)
	c := cli{t: t, endpoint: d.Endpoint()}

	c.ok("queues", "create", "orders-dlq")
	c.ok("queues", "create", "orders", "--dead-queue", "orders-dlq", "--max-attempts", "1")
	c.ok("produce", "orders", "first", "second", "--kind", "email")
	c.ok("produce", "orders", "\x00\x01\x02binary", "--kind", "blob", "--reference", "ref-3")
	leased := c.leaseAll("orders", 3)
	const refused = "dial tcp 10.0.0.7:25: connection refused"
	// max-attempts 1: a counted retry dead-letters the item (max_attempts);
	// --dead does it at once (explicit).
	c.ok("retry", "orders", leased[0].Id, "--error", refused)
	c.ok("retry", "orders", leased[1].Id, "--error", refused)
	c.ok("retry", "orders", leased[2].Id, "--error", "invalid payload\nat byte 0", "--dead")
	items := c.waitDead("orders-dlq", 3)
	byPayload := map[string]*pb.StorageItem{}
	for _, it := range items {
		byPayload[string(it.Payload)] = it
	}
	first, blob := byPayload["first"], byPayload["\x00\x01\x02binary"]
	require.NotNil(t, first)
	require.NotNil(t, blob)

	t.Run("list", func(t *testing.T) {
		c := cli{t: t, endpoint: c.endpoint}
		out := c.ok("dead", "list", "orders-dlq")
		require.Regexp(t, `(?m)^ID\s+SOURCE\s+REFERENCE\s+REASON\s+ATTEMPTS\s+AGE\s+LAST-ERROR$`, out)
		require.Regexp(t, `(?m)^`+first.Id+`\s+orders\s+-\s+max_attempts\s+1\s+\S+ ago\s+`+refused+`$`, out)
		require.Regexp(t, `(?m)^`+blob.Id+`\s+orders\s+ref-3\s+explicit\s+1\s+\S+ ago\s+invalid payload at byte 0$`, out)

		// Finding one item: by reference (exact) or payload text (issue 28, 7).
		got := jsonLines(t, c.ok("dead", "list", "orders-dlq", "--reference", "ref-3", "--json"), unmarshalItem)
		require.Len(t, got, 1)
		require.Equal(t, blob.Id, got[0].Id)
		require.Empty(t, c.ok("dead", "list", "orders-dlq", "--reference", "ref", "--json"))
		got = jsonLines(t, c.ok("dead", "list", "orders-dlq", "--payload-contains", "seco", "--json"), unmarshalItem)
		require.Len(t, got, 1)
		require.Equal(t, "second", string(got[0].Payload))
		require.Equal(t, 4, strings.Count(out, "\n"), out)

		out = c.ok("dead", "list", "orders-dlq", "--reason", "explicit", "--json")
		got = jsonLines(t, out, unmarshalItem)
		require.Len(t, got, 1)
		require.Equal(t, blob.Id, got[0].Id)

		out = c.ok("dead", "list", "orders-dlq", "--error", "connection refused", "--kind", "email", "--since", "1h", "--json")
		require.Len(t, jsonLines(t, out, unmarshalItem), 2)
		out = c.ok("dead", "list", "orders-dlq", "--since", "3d", "--json")
		require.Len(t, jsonLines(t, out, unmarshalItem), 3, "--since takes days, as the UI does")
		out = c.ok("dead", "list", "orders-dlq", "--until", "1d1h", "--json")
		require.Empty(t, out)
		out = c.ok("dead", "list", "orders-dlq", "--until", "1h", "--json")
		require.Empty(t, out, "nothing died more than an hour ago")
		out = c.ok("dead", "list", "orders-dlq", "--id", first.Id+","+blob.Id, "--json")
		require.Len(t, jsonLines(t, out, unmarshalItem), 2)

		_, _, err := c.run("dead", "list", "orders-dlq", "--reason", "bored")
		require.ErrorContains(t, err, `--reason: "bored" is not one of max_attempts, expired, explicit`)
		_, _, err = c.run("dead", "list", "orders-dlq", "--since", "yesterday")
		require.ErrorContains(t, err, "--since")

		// Pages: one item, then a hint to continue.
		out, errOut, err := c.run("dead", "list", "orders-dlq", "--limit", "1", "--json")
		require.NoError(t, err)
		page := jsonLines(t, out, unmarshalItem)
		require.Len(t, page, 1)
		require.Regexp(t, `^more items may follow: --pivot \S+`, errOut)
		next := strings.Fields(errOut)[5]
		out = c.ok("dead", "list", "orders-dlq", "--limit", "5", "--pivot", next, "--json")
		require.Len(t, jsonLines(t, out, unmarshalItem), 2)

		out, errOut, err = c.run("dead", "list", "orders-dlq", "--limit", "1", "--all")
		require.NoError(t, err)
		require.Empty(t, errOut)
		require.Equal(t, 4, strings.Count(out, "\n"), "--all follows every page: %s", out)
	})

	t.Run("groups", func(t *testing.T) {
		c := cli{t: t, endpoint: c.endpoint}
		out, errOut, err := c.run("dead", "groups", "orders-dlq")
		require.NoError(t, err)
		require.Regexp(t, `^COUNT\s+REASON\s+SOURCE\s+FINGERPRINT\s+LAST-DEAD\s+PATTERN\n`+
			`2\s+max_attempts\s+orders\s+[0-9a-f]{16}\s+\S+ ago\s+dial tcp <ip>: connection refused\n`+
			`1\s+explicit\s+orders\s+[0-9a-f]{16}\s+\S+ ago\s+invalid payload at byte <n>\n$`, out)
		require.Equal(t, "3 items in 2 groups\n", errOut)
		fp := strings.Fields(strings.Split(out, "\n")[1])[3]
		require.Equal(t, first.Fingerprint, fp, "dead list shows each item's fingerprint")

		out = c.ok("dead", "groups", "orders-dlq", "--reason", "explicit", "--json")
		require.Equal(t, 1, strings.Count(out, "\n"), out)
		require.Contains(t, out, `"sample_error":"invalid payload\nat byte 0"`)

		out = c.ok("dead", "list", "orders-dlq", "--fingerprint", fp, "--json")
		require.Len(t, jsonLines(t, out, unmarshalItem), 2)
		out = c.ok("dead", "list", "orders-dlq", "--group-by", "fingerprint")
		require.Regexp(t, `^COUNT\s+FINGERPRINT\n2\s+`+fp+`\n1\s+[0-9a-f]{16}\n$`, out)

		_, _, err = c.run("dead", "groups", "orders-dlq", "--fingerprint", "nope")
		require.ErrorContains(t, err, "filter.fingerprint")
	})

	t.Run("group-by", func(t *testing.T) {
		c := cli{t: t, endpoint: c.endpoint}
		out, errOut, err := c.run("dead", "list", "orders-dlq", "--group-by", "error", "--limit", "1")
		require.NoError(t, err)
		require.Regexp(t, `^COUNT\s+ERROR\n2\s+`+refused+`\n1\s+invalid payload at byte 0\n$`, out)
		require.Equal(t, "3 items in 2 groups\n", errOut)

		out = c.ok("dead", "list", "orders-dlq", "--group-by", "reason")
		require.Regexp(t, `^COUNT\s+REASON\n2\s+max_attempts\n1\s+explicit\n$`, out)

		out = c.ok("dead", "list", "orders-dlq", "--group-by", "source", "--json")
		var group map[string]any
		require.NoError(t, json.Unmarshal([]byte(out), &group))
		require.Equal(t, map[string]any{"count": 3.0, "source": "orders"}, group)

		_, _, err = c.run("dead", "list", "orders-dlq", "--group-by", "kind")
		require.ErrorContains(t, err, "--group-by")
	})

	t.Run("show", func(t *testing.T) {
		c := cli{t: t, endpoint: c.endpoint}
		out := c.ok("dead", "show", "orders-dlq", first.Id)
		require.Regexp(t, `(?m)^id\s+`+first.Id+`$`, out)
		require.Regexp(t, `(?m)^source queue\s+orders$`, out)
		require.Regexp(t, `(?m)^source id\s+`+leased[0].Id+`$`, out)
		require.Regexp(t, `(?m)^reason\s+max_attempts$`, out)
		require.Regexp(t, `(?m)^dead at\s+\d{4}-\d\d-\d\dT\S+Z \(\S+ ago\)$`, out)
		require.Regexp(t, `(?m)^attempts\s+1$`, out)
		require.Regexp(t, `(?m)^redrive count\s+0$`, out)
		require.Regexp(t, `(?m)^kind\s+email$`, out)
		require.Regexp(t, `(?m)^last error\s+`+refused+`$`, out)
		require.Regexp(t, `(?m)^ATTEMPT\s+TIME\s+ERROR\n1\s+\d{4}-\S+Z\s+`+refused+`$`, out)
		require.True(t, strings.HasSuffix(out, "\npayload (5 bytes, text):\nfirst\n"), out)

		out = c.ok("dead", "show", "orders-dlq", blob.Id)
		require.Regexp(t, `(?m)^reference\s+ref-3$`, out)
		require.Contains(t, out, "payload (9 bytes, hex dump):\n00000000  00 01 02 62 69 6e 61 72  79 ")
		out = c.ok("dead", "show", "orders-dlq", blob.Id, "--base64")
		require.True(t, strings.HasSuffix(out, "payload (9 bytes, base64):\nAAECYmluYXJ5\n"), out)

		out = c.ok("dead", "show", "orders-dlq", first.Id, "--json")
		var it pb.StorageItem
		require.NoError(t, protojson.Unmarshal([]byte(out), &it))
		require.Equal(t, first.Id, it.Id)

		var stdout, stderr strings.Builder
		code := run(t.Context(), []string{"dead", "show", "orders-dlq", queue.FormatID(1), "--endpoint", c.endpoint}, &stdout, &stderr)
		require.Equal(t, 1, code)
		require.Regexp(t, `^styx: no item '\S+' in queue 'orders-dlq' \(code 404 not found\)\n$`, stderr.String())
		_, _, err := c.run("dead", "show", "orders-dlq", "nope")
		require.ErrorContains(t, err, `"nope" is not an item id`)
	})

	t.Run("delete", func(t *testing.T) {
		c := cli{t: t, endpoint: c.endpoint}
		_, _, err := c.run("dead", "delete", "orders-dlq")
		require.ErrorContains(t, err, "refusing to delete every item of orders-dlq without --all")

		out, errOut, err := c.runIn("n\n", "dead", "delete", "orders-dlq", "--reason", "explicit")
		require.ErrorContains(t, err, "aborted")
		require.Empty(t, out)
		require.Equal(t, "Delete 1 item from orders-dlq? [y/N] ", errOut)
		_, _, err = c.runIn("", "dead", "delete", "orders-dlq", "--reason", "explicit")
		require.ErrorContains(t, err, "aborted", "no answer is no")
		c.waitDead("orders-dlq", 3)

		out, errOut, err = c.runIn("y\n", "dead", "delete", "orders-dlq", "--reason", "explicit")
		require.NoError(t, err)
		require.Equal(t, "Delete 1 item from orders-dlq? [y/N] ", errOut)
		require.Equal(t, "deleted 1 item from orders-dlq\n", out)

		require.Equal(t, "no items of orders-dlq match: nothing deleted\n",
			c.ok("dead", "delete", "orders-dlq", "--reason", "explicit"))
		out = c.ok("dead", "delete", "orders-dlq", "--reason", "expired", "--yes", "--json")
		var res pb.DeadDeleteResponse
		require.NoError(t, protojson.Unmarshal([]byte(out), &res))
		require.Zero(t, res.Deleted)
		c.waitDead("orders-dlq", 2)
	})

	var taskID string
	t.Run("edit", func(t *testing.T) {
		c := cli{t: t, endpoint: c.endpoint}
		out := c.ok("dead", "edit", "orders-dlq", first.Id, "--payload", "first, fixed", "--reference", "ref-1")
		require.Equal(t, "edited "+first.Id+" of orders-dlq: payload now 12 bytes\n", out)
		out, _, err := c.runIn(`{"fixed":true}`, "dead", "edit", "orders-dlq", first.Id, "--payload-file", "-", "--json")
		require.NoError(t, err)
		var it pb.StorageItem
		require.NoError(t, protojson.Unmarshal([]byte(out), &it))
		require.Equal(t, `{"fixed":true}`, string(it.Payload))
		require.Equal(t, "ref-1", it.Reference, "kept: --reference not given")
		out = c.ok("dead", "show", "orders-dlq", first.Id)
		require.Contains(t, out, "payload edited by an unauthenticated client")
		_, _, err = c.run("dead", "edit", "orders-dlq", first.Id)
		require.ErrorContains(t, err, "either --payload or --payload-file")
		_, _, err = c.run("dead", "edit", "orders-dlq", "33lkevi6gp5gc", "--payload", "x")
		require.ErrorContains(t, err, "404")
	})

	t.Run("redrive", func(t *testing.T) {
		c := cli{t: t, endpoint: c.endpoint}
		out := c.ok("dead", "redrive", "orders-dlq", "--dry-run")
		require.Regexp(t, `^would redrive 2 of 2 matched items from orders-dlq \(0 skipped\)\n\nQUEUE\s+WOULD-MOVE\s+WOULD-SKIP\s+NOTE\norders\s+2\s+0\s+-\n`, out)
		out = c.ok("dead", "redrive", "orders-dlq", "--dry-run", "--max-redrive-count", "-1", "--json")
		var dry pb.RedriveTask
		require.NoError(t, protojson.Unmarshal([]byte(out), &dry))
		require.True(t, dry.DryRun)
		require.EqualValues(t, 2, dry.Matched)
		require.EqualValues(t, -1, dry.MaxRedriveCount)
		_, _, err := c.run("dead", "redrive", "orders-dlq", "--dry-run", "--to", "nowhere")
		require.ErrorContains(t, err, "no such queue named 'nowhere'")
		c.waitDead("orders-dlq", 2)

		_, _, err = c.run("dead", "redrive", "orders-dlq")
		require.ErrorContains(t, err, "refusing to redrive every item of orders-dlq without --all")
		out, errOut, err := c.run("dead", "redrive", "orders-dlq", "--all") // at the default rate, 100 items a second
		require.NoError(t, err)
		require.Regexp(t, `^redriving 2 items from orders-dlq to their source queues \(task (\S+)\); Ctrl-C cancels\n$`, errOut)
		require.Regexp(t, `(?m)^status\s+completed$`, out)
		require.Regexp(t, `(?m)^matched\s+2$`, out)
		require.Regexp(t, `(?m)^moved\s+2$`, out)
		require.Regexp(t, `(?m)^failed\s+0$`, out)
		require.Regexp(t, `(?m)^skipped\s+0$`, out)
		require.Regexp(t, `(?m)^duration\s+\S+$`, out)
		require.Regexp(t, `(?m)^QUEUE\s+MOVED\s+FAILED\s+SKIPPED\norders\s+2\s+0\s+0$`, out)
		taskID = strings.Fields(out)[1]

		c.waitDead("orders-dlq", 0)
		back := c.leaseAll("orders", 2)
		require.ElementsMatch(t, []string{`{"fixed":true}`, "second"}, []string{string(back[0].Bytes), string(back[1].Bytes)})
		require.EqualValues(t, 1, back[0].Attempts, "a redriven item starts over")
	})

	t.Run("redrives list, show, cancel", func(t *testing.T) {
		c := cli{t: t, endpoint: c.endpoint}
		require.NotEmpty(t, taskID)
		out := c.ok("redrives", "list")
		require.Regexp(t, `(?m)^TASK\s+QUEUE\s+STATUS\s+MATCHED\s+MOVED\s+FAILED\s+SKIPPED\s+DESTINATION\s+STARTED\s+DURATION\s+OUTCOMES\s+KEY$`, out)
		require.Regexp(t, `(?m)^`+taskID+`\s+orders-dlq\s+completed\s+2\s+2\s+0\s+0\s+\(source\)\s+\S+ ago\s+\S+\s+2 pending\s+-$`, out)
		require.Len(t, jsonLines(t, c.ok("redrives", "list", "--queue", "orders-dlq", "--json"), unmarshalTask), 1)
		require.Empty(t, c.ok("redrives", "list", "--queue", "orders", "--json"))

		out = c.ok("redrives", "show", taskID)
		for _, re := range []string{`task\s+` + taskID, `queue\s+orders-dlq`, `destination\s+\(source\)`, `filter\s+every item`,
			`rate limit\s+100 items/s`, `max redrive count\s+10`, `outcomes\s+2 pending; counted until \S+Z \(in \S+\)`, `dry run\s+false`, `status\s+completed`, `progress\s+100%`,
			`started\s+\S+Z \(\S+ ago\)`, `finished\s+\S+Z \(\S+ ago\)`, `QUEUE\s+MOVED\s+FAILED\s+SKIPPED\norders\s+2\s+0\s+0`} {
			require.Regexp(t, `(?m)^`+re+`$`, out)
		}
		var task pb.RedriveTask
		require.NoError(t, protojson.Unmarshal([]byte(c.ok("redrives", "show", taskID, "--json")), &task))
		require.Equal(t, "completed", task.Status)
		require.EqualValues(t, 2, task.ByQueue["orders"].Moved)

		require.Equal(t, "redrive task "+taskID+" already ended: completed\n", c.ok("redrives", "cancel", taskID))
		_, _, err := c.run("redrives", "show", "rd-missing")
		require.ErrorContains(t, err, "404")
	})
}

// TestDeadRedriveInterrupt follows a slow redrive and interrupts it: the
// CLI asks the server to cancel the task and reports it cancelled.
func TestDeadRedriveInterrupt(t *testing.T) {
	d := startDaemon(t)
	c := cli{t: t, endpoint: d.Endpoint()}
	c.ok("queues", "create", "dlq")
	c.ok("queues", "create", "work", "--dead-queue", "dlq")
	const n = 20
	payloads := make([]string, n)
	for i := range payloads {
		payloads[i] = fmt.Sprint("item-", i)
	}
	c.ok(append([]string{"produce", "work"}, payloads...)...)
	args := []string{"retry", "work", "--dead"}
	for _, it := range c.leaseAll("work", n) {
		args = append(args, it.Id)
	}
	c.ok(args...)
	c.waitDead("dlq", n)

	// 5 items a second: the task runs for about 4 seconds.
	var stdout, stderr syncBuffer
	done := make(chan error, 1)
	go func() {
		root := newRootCmd(&stdout, &stderr)
		root.SetArgs([]string{"dead", "redrive", "dlq", "--all", "--rate", "5", "--endpoint", c.endpoint})
		done <- root.ExecuteContext(t.Context())
	}()
	// The line is printed once the interrupt is caught.
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		require.Contains(ct, stderr.String(), "Ctrl-C cancels")
	}, 10*time.Second, 10*time.Millisecond)
	require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGINT))
	select {
	case err := <-done:
		require.NoError(t, err, "stderr: %s", stderr.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("redrive still followed after the interrupt; stderr: %s", stderr.String())
	}
	require.Contains(t, stderr.String(), "cancelling task rd-")
	out := stdout.String()
	require.Regexp(t, `(?m)^status\s+cancelled$`, out)
	require.Regexp(t, `(?m)^matched\s+20$`, out)
	var moved int
	_, err := fmt.Sscanf(regexpFind(t, `(?m)^moved\s+(\d+)$`, out), "%d", &moved)
	require.NoError(t, err)
	require.Less(t, moved, n)
	c.waitDead("dlq", n-moved)
}

func regexpFind(t *testing.T, re, s string) string {
	t.Helper()
	m := regexp.MustCompile(re).FindStringSubmatch(s)
	require.NotNil(t, m, "%s not in %q", re, s)
	return m[1]
}

func TestProgressLine(t *testing.T) {
	require.Equal(t, "[>                   ]", progressBar(0))
	require.Equal(t, "[=========>          ]", progressBar(45))
	require.Equal(t, "[====================]", progressBar(100))

	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	task := &pb.RedriveTask{Status: "running", Matched: 119762, StartedAt: timestamppb.New(start)}
	p := &progress{}
	p.add(start, task)
	task.Moved = 45123
	p.add(start.Add(10*time.Second), task)
	require.Equal(t, "[=======>            ] 45123/119762   38%  4512/s  ETA 17s", p.line(task, true))
	task.Moved = 119762
	require.Equal(t, "119762/119762  100%  4512/s  ETA 0s", p.line(task, false))
	task.Skipped, task.Status = 3, "completed"
	require.Equal(t, "119765/119762  100%  4512/s  completed  (failed 0, skipped 3)", p.line(task, false))
}

// TestRedriveWarningCLI (issue 28, 1): the dry run prints the server's plan
// (what stays and why), and a redrive that left items behind prints its
// warning.
func TestRedriveWarningCLI(t *testing.T) {
	d := startDaemon(t)
	c := cli{t: t, endpoint: d.Endpoint()}
	c.ok("queues", "create", "w-dlq")
	c.ok("queues", "create", "w", "--dead-queue", "w-dlq")
	c.ok("queues", "create", "w-old", "--dead-queue", "w-dlq")
	c.ok("produce", "w", "one")
	c.ok("produce", "w-old", "two")
	for _, q := range []string{"w", "w-old"} {
		it := c.leaseAll(q, 1)[0]
		c.ok("retry", q, it.Id, "--dead", "--error", "boom")
	}
	c.waitDead("w-dlq", 2)
	c.ok("queues", "delete", "w-old", "--yes")

	out := c.ok("dead", "redrive", "w-dlq", "--dry-run")
	require.Regexp(t, `^would redrive 1 of 2 matched items from w-dlq \(1 skipped\)\n\nQUEUE\s+WOULD-MOVE\s+WOULD-SKIP\s+NOTE\n`, out)
	require.Regexp(t, `(?m)^w-old\s+0\s+1\s+1 queue does not exist: items stay$`, out)
	require.Regexp(t, `(?m)^w\s+1\s+0\s+-$`, out)

	out = c.ok("dead", "redrive", "w-dlq", "--all")
	require.Regexp(t, `(?m)^status\s+completed$`, out)
	require.Regexp(t, `(?m)^warning\s+1 of 2 items stay in the dead-letter queue: 1 whose destination queue does not exist$`, out)
}

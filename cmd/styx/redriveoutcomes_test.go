package main

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protojson"

	pb "github.com/styxq/styx/styxpb"
)

// TestRedriveCanaryOutcomesCLI (issue 49): 'styx dead redrive --canary 1'
// moves one item and waits ('styx redrives show' says so); once a consumer
// completes it the task moves the rest, and 'redrives show' and 'list'
// say what became of the items (outcomes). The default rate is 100 items
// a second; --rate 0 is no limit.
func TestRedriveCanaryOutcomesCLI(t *testing.T) {
	d := startDaemon(t)
	c := cli{t: t, endpoint: d.Endpoint()}
	c.ok("queues", "create", "cn-dlq")
	c.ok("queues", "create", "cn", "--dead-queue", "cn-dlq")
	for range 3 {
		c.ok("produce", "cn", "x")
		it := c.leaseAll("cn", 1)[0]
		c.ok("retry", "cn", it.Id, "--dead", "--error", "boom")
	}
	c.waitDead("cn-dlq", 3)
	var task pb.RedriveTask
	require.NoError(t, protojson.Unmarshal([]byte(c.ok("dead", "redrive", "cn-dlq", "--all", "--canary", "1", "--canary-timeout", "2m", "--detach", "--json")), &task))
	require.EqualValues(t, 100, task.RateLimit, "the CLI's default rate")
	require.EqualValues(t, 1, task.Canary)
	require.Equal(t, "2m0s", task.CanaryTimeout)
	var out string
	require.Eventually(t, func() bool {
		out = c.ok("redrives", "show", task.TaskId)
		return strings.Contains(out, "waiting for")
	}, 10*time.Second, 20*time.Millisecond)
	require.Regexp(t, `(?m)^canary\s+1 item, wait 2m: waiting for the outcome of 1 item, until \S+Z \(in \S+\)$`, out)

	it := c.leaseAll("cn", 1)[0]
	c.ok("complete", "cn", it.Id)
	require.Eventually(t, func() bool {
		out = c.ok("redrives", "show", task.TaskId)
		return strings.Contains(out, "status             completed")
	}, 10*time.Second, 20*time.Millisecond)
	require.Regexp(t, `(?m)^canary\s+1 item, wait 2m: passed \(every canary item completed\)$`, out)
	require.Regexp(t, `(?m)^outcomes\s+1 completed, 2 pending; counted until \S+Z \(in \S+\)$`, out)
	require.Regexp(t, `(?m)^`+task.TaskId+`\s+cn-dlq\s+completed\s+3\s+3\s+0\s+0\s+\(source\)\s+\S+ ago\s+\S+\s+1 completed, 2 pending\s+-$`, c.ok("redrives", "list"))

	_, _, err := c.run("dead", "redrive", "cn-dlq", "--all", "--canary", "-1")
	require.ErrorContains(t, err, "canary")

	// --rate 0: no limit, the user's choice.
	c.ok("produce", "cn", "y")
	for _, it := range c.leaseAll("cn", 3) {
		c.ok("retry", "cn", it.Id, "--dead", "--error", "boom")
	}
	c.waitDead("cn-dlq", 3)
	require.NoError(t, protojson.Unmarshal([]byte(c.ok("dead", "redrive", "cn-dlq", "--all", "--rate", "0", "--detach", "--json")), &task))
	require.EqualValues(t, 0, task.RateLimit)
}

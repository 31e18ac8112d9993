package main

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protojson"

	pb "github.com/styxq/styx/styxpb"
)

// TestRedrivesPauseResumeUpdateCLI (issue 39, point 2): 'styx redrives
// pause', 'resume' and 'update --rate' act on a running redrive task.
func TestRedrivesPauseResumeUpdateCLI(t *testing.T) {
	d := startDaemon(t)
	c := cli{t: t, endpoint: d.Endpoint()}
	c.ok("queues", "create", "p-dlq")
	c.ok("queues", "create", "p", "--dead-queue", "p-dlq")
	for range 5 {
		c.ok("produce", "p", "x")
		it := c.leaseAll("p", 1)[0]
		c.ok("retry", "p", it.Id, "--dead", "--error", "boom")
	}
	c.waitDead("p-dlq", 5)
	out := c.ok("dead", "redrive", "p-dlq", "--all", "--rate", "1", "--detach", "--json")
	var task pb.RedriveTask
	require.NoError(t, protojson.Unmarshal([]byte(out), &task))

	out = c.ok("redrives", "pause", task.TaskId)
	require.Regexp(t, `^(pausing|paused) redrive task `+task.TaskId+` on p-dlq after \d items? of 5 moved; 'styx redrives resume `+task.TaskId+`' goes on\n$`, out)
	require.Eventually(t, func() bool {
		return strings.Contains(c.ok("redrives", "show", task.TaskId), "paused")
	}, 10*time.Second, 20*time.Millisecond)
	require.Regexp(t, `(?m)^`+task.TaskId+`\s+p-dlq\s+paused\s+5\s`, c.ok("redrives", "list"))

	_, _, err := c.run("redrives", "update", task.TaskId)
	require.ErrorContains(t, err, "give the new rate with --rate N")
	_, _, err = c.run("redrives", "update", task.TaskId, "--rate", "0.5")
	require.ErrorContains(t, err, "0.5 is less than 1 item a second")
	out, errOut, err := c.run("redrives", "update", task.TaskId, "--rate", "2.5")
	require.NoError(t, err)
	require.Equal(t, "--rate 2.5 rounded to 3 items a second: the server moves whole items a second\n", errOut)
	require.Equal(t, "paused redrive task "+task.TaskId+" on p-dlq: now 3 items a second\n", out)
	require.Regexp(t, `(?m)^rate limit\s+3 items/s$`, c.ok("redrives", "show", task.TaskId))

	out = c.ok("redrives", "resume", task.TaskId)
	require.Regexp(t, `^running redrive task `+task.TaskId+` on p-dlq: \d items? of 5 moved so far, 3 items a second\n$`, out)
	out = c.ok("redrives", "update", task.TaskId, "--rate", "0")
	require.Regexp(t, `^(running|completed) redrive task `+task.TaskId+` on p-dlq: now no rate limit\n$`, out)
	require.Eventually(t, func() bool {
		return strings.Contains(c.ok("redrives", "show", task.TaskId), "completed")
	}, 10*time.Second, 20*time.Millisecond)

	_, _, err = c.run("redrives", "pause", task.TaskId)
	require.ErrorContains(t, err, "cannot pause redrive task '"+task.TaskId+"'; it is completed")
	_, _, err = c.run("redrives", "resume", "rd-nope")
	require.ErrorContains(t, err, "rd-nope")
}

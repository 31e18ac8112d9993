package main

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/styxq/styx/styxpb"
)

// TestRedriveLeftToPausedTaskCLI (issue 49, points 1, 2 and 7): while a
// paused task holds the items, 'styx dead redrive --reference' starts (it
// was refused with 409) and says which task it left the item to and how to
// move it, the dry run counts the held items as skipped and says so, and
// 'styx redrives cancel' of the paused task says it cancelled it (it said
// "already ended: cancelled").
func TestRedriveLeftToPausedTaskCLI(t *testing.T) {
	d := startDaemon(t)
	c := cli{t: t, endpoint: d.Endpoint()}
	c.ok("queues", "create", "lt-dlq")
	c.ok("queues", "create", "lt", "--dead-queue", "lt-dlq")
	for i := range 5 {
		c.ok("produce", "lt", "x", "--reference", fmt.Sprintf("bill-%d", i))
		it := c.leaseAll("lt", 1)[0]
		c.ok("retry", "lt", it.Id, "--dead", "--error", "boom")
	}
	c.waitDead("lt-dlq", 5)
	var task pb.RedriveTask
	require.NoError(t, protojson.Unmarshal([]byte(c.ok("dead", "redrive", "lt-dlq", "--all", "--rate", "1", "--detach", "--json")), &task))
	c.ok("redrives", "pause", task.TaskId)
	require.Eventually(t, func() bool {
		return regexp.MustCompile(`(?m)^status\s+paused$`).MatchString(c.ok("redrives", "show", task.TaskId))
	}, 10*time.Second, 20*time.Millisecond)
	var paused pb.RedriveTask
	require.NoError(t, protojson.Unmarshal([]byte(c.ok("redrives", "show", task.TaskId, "--json")), &paused))
	held := paused.Matched - paused.Moved
	require.Positive(t, held)

	out, errOut, err := c.run("dead", "redrive", "lt-dlq", "--reference", "bill-4")
	require.NoError(t, err, "a redrive by reference of an item a paused task holds starts")
	require.Contains(t, errOut, "left 1 of the matched items to other redrive tasks, which held them when this one started: 1 to "+
		task.TaskId+" (paused); a paused task moves them once resumed ('styx redrives resume'); name items by id (--id) to move them now\n")
	require.Regexp(t, `(?m)^skipped\s+1$`, out)
	require.Regexp(t, `(?m)^warning\s+1 of 1 items stay in the dead-letter queue: 1 held by another redrive task$`, out)

	out = c.ok("dead", "redrive", "lt-dlq", "--dry-run")
	require.Contains(t, out, fmt.Sprintf("would redrive 0 of %d matched items from lt-dlq (%d skipped)\n", held, held))
	require.Regexp(t, fmt.Sprintf(`(?m)^lt\s+0\s+%d\s+%d held by another redrive task$`, held, held), out)
	require.Contains(t, out, fmt.Sprintf("would leave %d of the matched items to other redrive tasks, which hold them: %d to %s (paused)", held, held, task.TaskId))

	show := c.ok("redrives", "show", task.TaskId)
	require.Regexp(t, `(?m)^paused since\s+\S+Z \(\S+ ago\)$`, show)
	require.Regexp(t, `(?m)^running time\s+\S+ \(pauses left out\)$`, show)
	var last pb.RedriveTask
	lines := strings.Split(strings.TrimSpace(c.ok("redrives", "list", "--json")), "\n")
	require.NoError(t, protojson.Unmarshal([]byte(lines[0]), &last), "the newest task: the dry run started none, so the --reference one")
	require.Regexp(t, `(?m)^left to other tasks\s+1 to `+task.TaskId+`$`, c.ok("redrives", "show", last.TaskId))

	require.Equal(t, fmt.Sprintf("cancelled paused redrive task %s on lt-dlq after %s of 5 moved\n", task.TaskId, plural(int(paused.Moved), "item")),
		c.ok("redrives", "cancel", task.TaskId))
	require.Equal(t, "redrive task "+task.TaskId+" already ended: cancelled\n", c.ok("redrives", "cancel", task.TaskId))
}

// TestProgressLinePaused (issue 49, point 7): a paused task's progress line
// shows its status, not an ETA (it moves nothing until resumed).
func TestProgressLinePaused(t *testing.T) {
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	task := &pb.RedriveTask{Status: "running", Matched: 100, StartedAt: timestamppb.New(start)}
	p := &progress{}
	p.add(start, task)
	task.Moved = 40
	p.add(start.Add(4*time.Second), task)
	require.True(t, strings.HasSuffix(p.line(task, false), "ETA 6s"), p.line(task, false))
	task.Status = "paused"
	require.Equal(t, "40/100   40%  10/s  paused", p.line(task, false))
}

package main

import (
	"bytes"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protojson"

	pb "github.com/styxq/styx/styxpb"
)

// runTerminal is run with stderr taken for a terminal (a person watching,
// not a script).
func (c cli) runTerminal(args ...string) (stdout, stderr string, err error) {
	c.t.Helper()
	var out, errOut bytes.Buffer
	a := &app{stdout: &out, stderr: &errOut, lookupEnv: os.LookupEnv, now: time.Now,
		isTerminal: func(io.Writer) bool { return true }}
	root := a.rootCmd()
	root.SetArgs(append(args, "--endpoint", c.endpoint))
	err = root.ExecuteContext(c.t.Context())
	return out.String(), errOut.String(), err
}

// TestLeaseSaysItWaits (issue 39, 7): `styx lease` on an empty queue says
// on a terminal that it waits, and for how long, instead of waiting in
// silence; a lease that finds an item at once, and a script's lease, say
// nothing of it.
func TestLeaseSaysItWaits(t *testing.T) {
	d := startDaemon(t)
	c := cli{t: t, endpoint: d.Endpoint()}
	c.ok("queues", "create", "quiet")

	out, errOut, err := c.runTerminal("lease", "quiet", "--timeout", "1s")
	require.NoError(t, err)
	require.Empty(t, out)
	require.Equal(t, "waiting up to 1s for an item in quiet (--timeout); Ctrl-C stops\nno items\n", errOut)

	_, errOut, err = c.run("lease", "quiet", "--timeout", "1s")
	require.NoError(t, err)
	require.Equal(t, "no items\n", errOut, "a script's stderr gets no waiting line")

	c.ok("produce", "quiet", "job")
	out, errOut, err = c.runTerminal("lease", "quiet", "--timeout", "5s")
	require.NoError(t, err)
	require.Contains(t, out, "job")
	require.Empty(t, errOut, "an item at once: nothing to wait for")
}

// TestRedriveCLITruths (issue 39, 7): the dry run's table shows how many
// items would move and how many would stay per queue (not the matched
// count under ITEMS); --rate takes a decimal (rounded, with a note) and
// refuses a rate the server cannot run; one item goes to "its source
// queue"; a rate of 1 is "1 item/s".
func TestRedriveCLITruths(t *testing.T) {
	d := startDaemon(t)
	c := cli{t: t, endpoint: d.Endpoint()}
	c.ok("queues", "create", "r-dlq")
	c.ok("queues", "create", "r", "--dead-queue", "r-dlq")
	c.ok("queues", "create", "r-old", "--dead-queue", "r-dlq")
	for _, q := range []string{"r", "r", "r-old"} {
		c.ok("produce", q, "x")
		it := c.leaseAll(q, 1)[0]
		c.ok("retry", q, it.Id, "--dead", "--error", "boom")
	}
	c.waitDead("r-dlq", 3)
	c.ok("queues", "delete", "r-old", "--yes")

	out := c.ok("dead", "redrive", "r-dlq", "--dry-run")
	require.Regexp(t, `^would redrive 2 of 3 matched items from r-dlq \(1 skipped\)\n\nQUEUE\s+WOULD-MOVE\s+WOULD-SKIP\s+NOTE\n`, out)
	require.Regexp(t, `(?m)^r\s+2\s+0\s+-$`, out)
	require.Regexp(t, `(?m)^r-old\s+0\s+1\s+1 queue does not exist: items stay$`, out, "r-old: nothing would move, 1 would stay")

	for arg, want := range map[string]string{
		"0.5":  "invalid argument \"0.5\" for \"--rate\" flag: 0.5 is less than 1 item a second, which the server cannot run",
		"-1":   "-1 is below 0",
		"fast": `"fast" is not a number of items a second`,
		"2e6":  "2e6 is above the server's limit of 1000000 items a second",
	} {
		_, _, err := c.run("dead", "redrive", "r-dlq", "--all", "--rate", arg)
		require.ErrorContains(t, err, want, "--rate %s", arg)
	}
	out, errOut, err := c.run("dead", "redrive", "r-dlq", "--all", "--rate", "2.5", "--detach", "--json")
	require.NoError(t, err)
	require.Equal(t, "--rate 2.5 rounded to 3 items a second: the server moves whole items a second\n", errOut)
	var task pb.RedriveTask
	require.NoError(t, protojson.Unmarshal([]byte(out), &task))
	require.EqualValues(t, 3, task.RateLimit)
	require.Eventually(t, func() bool {
		return strings.Contains(c.ok("redrives", "show", task.TaskId), "completed")
	}, 10*time.Second, 20*time.Millisecond)

	// One item left (r-old's, which stays): a redrive of one item of r.
	c.ok("produce", "r", "y")
	it := c.leaseAll("r", 1)[0]
	c.ok("retry", "r", it.Id, "--dead", "--error", "boom")
	dead := c.waitDead("r-dlq", 2)
	var id string
	for _, x := range dead {
		if x.SourceQueue == "r" {
			id = x.Id
		}
	}
	require.NotEmpty(t, id)
	out, errOut, err = c.run("dead", "redrive", "r-dlq", "--id", id, "--rate", "1")
	require.NoError(t, err)
	require.Regexp(t, `^redriving 1 item from r-dlq to its source queue \(task (\S+)\); Ctrl-C cancels\n$`, errOut)
	taskID := strings.Fields(out)[1]
	require.Regexp(t, `(?m)^rate limit\s+1 item/s$`, c.ok("redrives", "show", taskID))
}

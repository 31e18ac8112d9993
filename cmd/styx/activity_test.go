package main

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCLIActivityAndExpiring (issue 49): `styx activity [QUEUE]` lists who
// changed a queue, newest first, with what the call did; `styx stats` and
// `styx dead list` warn of dead items that expire within a day.
func TestCLIActivityAndExpiring(t *testing.T) {
	d := startDaemon(t)
	c := cli{t: t, endpoint: d.Endpoint()}
	c.ok("queues", "create", "bills-dead", "--expire-timeout", "12h")
	c.ok("queues", "create", "bills", "--dead-queue", "bills-dead")
	c.ok("produce", "bills", "a", "b")
	out := c.ok("lease", "bills", "--batch", "2", "--timeout", "1s")
	var ids []string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n")[1:] {
		ids = append(ids, strings.Fields(l)[1])
	}
	require.Len(t, ids, 2)
	c.ok(append([]string{"retry", "bills", "--dead", "--error", "boom"}, ids...)...)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		assert.Len(ct, strings.Split(strings.TrimSpace(c.ok("dead", "list", "bills-dead")), "\n"), 3, "header and two items")
	}, 10*time.Second, 10*time.Millisecond)

	// Both dead items expire in 12 hours.
	require.Contains(t, c.ok("stats", "bills-dead"),
		"\nwarning: 2 dead items of bills-dead expire within a day (deleted at the end of the queue's expire timeout, counted from when each died); "+
			"redrive, fix or export them first\n")
	require.NotContains(t, c.ok("stats", "bills"), "warning:")
	_, errOut, err := c.run("dead", "list", "bills-dead")
	require.NoError(t, err)
	require.Contains(t, errOut, "warning: 2 dead items of bills-dead expire within a day")

	require.Equal(t, "deleted 1 item from bills-dead\n", c.ok("dead", "delete", "bills-dead", "--yes", "--id", strings.Fields(
		strings.Split(c.ok("dead", "list", "bills-dead"), "\n")[1])[0]))
	out = c.ok("activity", "bills-dead")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Regexp(t, `^TIME\s+KEY\s+CALL\s+QUEUE\s+WHAT$`, lines[0])
	require.Regexp(t, `^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\s+-\s+dead\.delete\s+bills-dead\s+deleted 1$`, lines[1], out)
	require.Regexp(t, `^\S+\s+-\s+queues\.create\s+bills-dead\s+-$`, lines[2], out)
	require.Len(t, lines, 3, out)
	all := c.ok("activity", "--limit", "1")
	require.Contains(t, all, "dead.delete", "the newest of every queue")
	_, errOut, err = c.run("activity", "--limit", "1")
	require.NoError(t, err)
	require.Regexp(t, `^more records may follow: --pivot \d+\n$`, errOut)
}

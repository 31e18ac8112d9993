package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestQueuesPauseAndClear (issue 49, live queues): styx queues pause and
// resume, the state in queues info and list, and styx queues clear with
// its dry run and its confirmation.
func TestQueuesPauseAndClear(t *testing.T) {
	d := startDaemon(t)
	c := cli{t: t, endpoint: d.Endpoint()}
	c.ok("queues", "create", "lq")
	c.ok("produce", "lq", "a", "b", "c")

	require.Contains(t, c.ok("queues", "pause", "lq"), "paused queue lq since ")
	require.Contains(t, c.ok("queues", "info", "lq"), "paused since ")
	list := c.ok("queues", "list")
	require.Contains(t, strings.Split(list, "\n")[0], "STATE")
	require.Regexp(t, `(?m)^lq .* paused$`, list)
	out, stderr, err := c.run("lease", "lq", "--timeout", "100ms")
	require.NoError(t, err)
	require.Equal(t, "no items\n", stderr, "a paused queue hands nothing out: %s", out)
	require.Equal(t, "resumed queue lq: leases get its items again\n", c.ok("queues", "resume", "lq"))
	require.Regexp(t, `(?m)^lq .* running$`, c.ok("queues", "list"))
	require.Contains(t, c.ok("queues", "info", "lq"), "running")

	c.leaseOne("lq")
	require.Equal(t, "would remove 2 items (2 ready) from queue lq; nothing removed (dry run)\n",
		c.ok("queues", "clear", "lq", "--ready", "--dry-run"))
	require.Equal(t, "would remove 3 items (2 ready, 1 leased) from queue lq; nothing removed (dry run)\n",
		c.ok("queues", "clear", "lq", "--all", "--dry-run"))
	_, stderr, err = c.runIn("n\n", "queues", "clear", "lq", "--ready")
	require.Error(t, err)
	require.Contains(t, stderr, "Remove 2 items (2 ready) from queue lq? [y/N]")
	require.Contains(t, c.ok("queues", "clear", "lq", "--all", "--dry-run"), "would remove 3 items", "nothing was removed")
	out, _, err = c.runIn("y\n", "queues", "clear", "lq", "--ready")
	require.NoError(t, err)
	require.Equal(t, "cleared queue lq (ready items)\n", out)
	require.Equal(t, "would remove 1 item (1 leased) from queue lq; nothing removed (dry run)\n",
		c.ok("queues", "clear", "lq", "--all", "--dry-run"))
	_, _, err = c.run("queues", "clear", "lq")
	require.ErrorContains(t, err, "say what to clear")
}

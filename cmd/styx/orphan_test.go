package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestQueuesDeleteKeepsDeadItems (issue 49, 6): deleting a queue says what
// becomes of its dead items in its (shared) dead-letter queue, and the
// dead-letter queue, which no queue names any more, can still be worked.
func TestQueuesDeleteKeepsDeadItems(t *testing.T) {
	d := startDaemon(t)
	c := cli{t: t, endpoint: d.Endpoint()}
	c.ok("queues", "create", "kd-dlq")
	c.ok("queues", "create", "kd", "--dead-queue", "kd-dlq")
	c.ok("queues", "create", "kd-other", "--dead-queue", "kd-dlq")
	c.ok("produce", "kd", "a", "b")
	for range 2 {
		c.ok("retry", "kd", c.leaseOne("kd").Id, "--dead")
	}
	c.waitDead("kd-dlq", 2)

	require.Equal(t, "deleted queue kd; its 2 dead items stay in dead-letter queue kd-dlq (styx dead list kd-dlq --source kd)\n",
		c.ok("queues", "delete", "kd", "--yes"))
	require.Equal(t, "deleted queue kd-other\n", c.ok("queues", "delete", "kd-other", "--yes"), "no dead items of its own")

	// No queue names kd-dlq now: its dead items can still be worked.
	require.Contains(t, c.ok("dead", "list", "kd-dlq", "--source", "kd"), "kd")
	require.Contains(t, c.ok("dead", "delete", "kd-dlq", "--all", "--yes"), "2")
}

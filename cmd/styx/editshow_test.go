package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDeadShowEditIsNoAttempt (issue 49, 8): styx dead show lists a payload
// edit as an edit in the attempt history, not under an attempt number.
func TestDeadShowEditIsNoAttempt(t *testing.T) {
	d := startDaemon(t)
	c := cli{t: t, endpoint: d.Endpoint()}
	c.ok("queues", "create", "es-dlq")
	c.ok("queues", "create", "es", "--dead-queue", "es-dlq")
	c.ok("produce", "es", "a")
	c.ok("retry", "es", c.leaseOne("es").Id, "--dead", "--error", "parse amount: invalid syntax")
	id := c.waitDead("es-dlq", 1)[0].Id
	c.ok("dead", "edit", "es-dlq", id, "--payload", "fixed")
	out := c.ok("dead", "show", "es-dlq", id)
	require.Regexp(t, `(?m)^1\s+\S+\s+parse amount: invalid syntax$`, out)
	require.Regexp(t, `(?m)^edit\s+\S+\s+payload edited by `, out)
}

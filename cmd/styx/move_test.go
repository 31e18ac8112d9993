package main

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/daemon"
	"github.com/styxq/styx/internal/pgtest"
)

// TestQueuesMoveCLI (issue 47): styx queues move moves a queue between
// two PostgreSQL clusters and says what moved; queues info names the new
// cluster; a second move says the queue is there already; --cluster is
// required, and a server without clusters refuses naming cluster.
func TestQueuesMoveCLI(t *testing.T) {
	base := pgtest.BaseURL(t)
	d, err := daemon.New(t.Context(), daemon.Config{
		Listen: "127.0.0.1:0", Storage: daemon.StoragePostgres, PostgresURL: pgtest.SchemaURL(t, base),
		PostgresClusters: map[string]string{"b": pgtest.SchemaURL(t, base)},
		Log:              slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, d.Close(context.Background())) })
	c := cli{t: t, endpoint: d.Endpoint()}
	c.ok("queues", "create", "mq", "--cluster", "main")
	c.ok("produce", "mq", "a", "b", "c")

	require.Equal(t, "moved queue mq from cluster main to b: 3 items\n", c.ok("queues", "move", "mq", "--cluster", "b"))
	require.Contains(t, c.ok("queues", "info", "mq"), "b")
	require.Equal(t, "queue mq is on cluster b already\n", c.ok("queues", "move", "mq", "--cluster", "b"))
	for _, payload := range []string{"a", "b", "c"} {
		out, _, err := c.run("lease", "mq")
		require.NoError(t, err)
		require.True(t, strings.Contains(out, "a") || strings.Contains(out, "b") || strings.Contains(out, "c"), "%s (%s)", out, payload)
	}
	_, _, err = c.run("queues", "move", "mq")
	require.ErrorContains(t, err, "--cluster is required")
	_, _, err = c.run("queues", "move", "mq", "--cluster", "west")
	require.ErrorContains(t, err, "cluster")

	mem := cli{t: t, endpoint: startDaemon(t).Endpoint()}
	mem.ok("queues", "create", "q")
	_, _, err = mem.run("queues", "move", "q", "--cluster", "b")
	require.ErrorContains(t, err, "invalid cluster; 'b': this server's storage has no PostgreSQL clusters")
}

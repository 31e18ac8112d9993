package main

import (
	"os"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestHistoryKeptSaysSo (issue 49, 8): the history survives restarts (ADR
// 0025), and neither styx queues history --help nor the proto says
// otherwise any more.
func TestHistoryKeptSaysSo(t *testing.T) {
	c := cli{t: t, endpoint: "http://127.0.0.1:1"}
	help := c.ok("queues", "history", "--help")
	require.NotContains(t, help, "restart)", "the old words: (empty after a restart)")
	require.Contains(t, help, "survives restarts")
	proto, err := os.ReadFile("../../proto/styx/v1/styx.proto")
	require.NoError(t, err)
	require.NotContains(t, string(proto), "empty after a restart")
}

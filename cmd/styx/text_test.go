package main

import (
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	styx "github.com/styxq/styx"
)

// TestDeadListEscapesHiddenCharacters (issue 36, 8): a retry's error is
// free text the server keeps as sent, so the CLI escapes its control, bidi
// and zero-width characters wherever it prints one (dead list, dead show
// and its attempt history, dead groups, items list): U+202E would
// otherwise reorder the rest of the line ("exe.pdf" for "fdp.exe") and
// ESC would let a client recolour or clear the operator's terminal.
// Before, dead list printed U+202E as is.
func TestDeadListEscapesHiddenCharacters(t *testing.T) {
	d := startDaemon(t)
	c := cli{t: t, endpoint: d.Endpoint()}
	c.ok("queues", "create", "spoof-dlq")
	c.ok("queues", "create", "spoof", "--dead-queue", "spoof-dlq", "--max-attempts", "1")
	c.ok("produce", "spoof", "payload")
	leased := c.leaseAll("spoof", 1)
	const sent = "invoice\u202efdp.exe\x1b[2J\u200bdone\nline two"
	const shown = `invoice\u202efdp.exe\u001b[2J\u200bdone line two`
	c.ok("retry", "spoof", leased[0].Id, "--error", sent, "--dead")
	items := c.waitDead("spoof-dlq", 1)
	require.Equal(t, sent, items[0].LastError, "--json prints the error as stored")

	hidden := func(t *testing.T, out string) {
		t.Helper()
		for _, r := range []string{"\u202e", "\x1b", "\u200b"} {
			require.NotContains(t, out, r)
		}
	}
	t.Run("list", func(t *testing.T) {
		out := c.ok("dead", "list", "spoof-dlq")
		hidden(t, out)
		require.Regexp(t, `(?m)^`+items[0].Id+`\s+spoof\s+-\s+explicit\s+1\s+\S+ ago\s+`+regexp.QuoteMeta(shown)+`$`, out)
	})
	t.Run("show", func(t *testing.T) {
		out := c.ok("dead", "show", "spoof-dlq", items[0].Id)
		hidden(t, out)
		require.Equal(t, 2, strings.Count(out, shown), "last error and attempt history: %s", out)
	})
	t.Run("groups", func(t *testing.T) {
		out := c.ok("dead", "groups", "spoof-dlq", "--reason", "explicit")
		hidden(t, out)
		require.Contains(t, out, `invoice\u202efdp.exe`)
	})
	t.Run("items", func(t *testing.T) {
		out := c.ok("items", "list", "spoof-dlq")
		hidden(t, out)
		require.Contains(t, out, `invoice\u202efdp.exe`)
	})
}

// TestErrorLineEscapesHiddenCharacters: a server's error message may quote
// what a client sent; the one line the CLI prints escapes it.
func TestErrorLineEscapesHiddenCharacters(t *testing.T) {
	line := errorLine(&styx.Error{Code: styx.CodeBadRequest, Message: "invalid kind; 'a\u202eb\x1b[31m'"})
	require.Equal(t, `styx: invalid kind; 'a\u202eb\u001b[31m' (code 400 bad request)`, line)
}

package daemon

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestServerLogLimitsHandshakeErrors (issue 24, 6): the lines of failed
// TLS handshakes, which anyone who reaches the port can cause, are logged
// at most 5 at once, the rest counted; other lines all go through.
func TestServerLogLimitsHandshakeErrors(t *testing.T) {
	var buf bytes.Buffer
	l := newServerLog(slog.New(slog.NewTextHandler(&buf, nil)))
	for range 100 {
		_, _ = l.Write([]byte("http: TLS handshake error from 10.0.0.1:5000: EOF\n"))
	}
	_, _ = l.Write([]byte("http: Accept error: too many open files\n"))
	out := buf.String()
	require.LessOrEqual(t, strings.Count(out, "TLS handshake error"), 6)
	require.Contains(t, out, "Accept error")
}

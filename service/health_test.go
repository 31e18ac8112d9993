package service_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/servertest"
	pb "github.com/styxq/styx/styxpb"
)

// probe returns the status code and status text of GET path.
func probe(s *servertest.Server, path string) (int, string) {
	s.T.Helper()
	resp, err := http.Get(s.D.Endpoint() + path)
	require.NoError(s.T, err)
	defer resp.Body.Close()
	var h struct{ Status string }
	require.NoError(s.T, json.NewDecoder(resp.Body).Decode(&h))
	return resp.StatusCode, h.Status
}

// TestHealthByStatusCode (issue 41, point 3): /health and /readyz answer
// 503 with the reason while the node refuses writes (its storage down,
// PostgreSQL stopped), so a load balancer that reads only the status code
// takes the node out; /livez stays 200 (the process serves reads and a
// restart would not help); all answer 200 again once storage is back,
// without a restart.
func TestHealthByStatusCode(t *testing.T) {
	for _, b := range servertest.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			b, down, up, cause := outage(t, b)
			s := servertest.Start(t, b)
			if b.Postgres() {
				cause = "postgresql unreachable"
			}
			s.CreateQueue(&pb.QueueInfo{QueueName: "h"})
			for _, path := range []string{"/health", "/readyz", "/livez"} {
				code, status := probe(s, path)
				require.Equal(t, 200, code, path)
				require.Equal(t, "ok", status, path)
			}
			down(s)
			require.Eventually(t, func() bool { code, _ := probe(s, "/health"); return code == 503 }, 15*time.Second, 20*time.Millisecond)
			for _, path := range []string{"/health", "/readyz"} {
				code, status := probe(s, path)
				require.Equal(t, 503, code, path)
				require.Contains(t, status, "degraded: ")
				require.Contains(t, status, cause)
			}
			code, status := probe(s, "/livez")
			require.Equal(t, 200, code)
			require.Contains(t, status, cause)
			up(s)
			require.Eventually(t, func() bool { code, _ := probe(s, "/health"); return code == 200 }, 30*time.Second, 20*time.Millisecond)
			code, status = probe(s, "/readyz")
			require.Equal(t, 200, code, status)
		})
	}
}

package service_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	pb "github.com/styxq/styx/styxpb"
)

// probe returns the status code and status text of GET path.
func (s *server) probe(path string) (int, string) {
	s.t.Helper()
	resp, err := http.Get(s.d.Endpoint() + path)
	require.NoError(s.t, err)
	defer resp.Body.Close()
	var h struct{ Status string }
	require.NoError(s.t, json.NewDecoder(resp.Body).Decode(&h))
	return resp.StatusCode, h.Status
}

// TestHealthByStatusCode (issue 41, point 3): /health and /readyz answer
// 503 with the reason while the node refuses writes (its storage down,
// PostgreSQL stopped), so a load balancer that reads only the status code
// takes the node out; /livez stays 200 (the process serves reads and a
// restart would not help); all answer 200 again once storage is back,
// without a restart.
func TestHealthByStatusCode(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			b, down, up, cause := outage(t, b)
			s := start(t, b)
			if b.postgres() {
				cause = "postgresql unreachable"
			}
			s.createQueue(&pb.QueueInfo{QueueName: "h"})
			for _, path := range []string{"/health", "/readyz", "/livez"} {
				code, status := s.probe(path)
				require.Equal(t, 200, code, path)
				require.Equal(t, "ok", status, path)
			}
			down(s)
			require.Eventually(t, func() bool { code, _ := s.probe("/health"); return code == 503 }, 15*time.Second, 20*time.Millisecond)
			for _, path := range []string{"/health", "/readyz"} {
				code, status := s.probe(path)
				require.Equal(t, 503, code, path)
				require.Contains(t, status, "degraded: ")
				require.Contains(t, status, cause)
			}
			code, status := s.probe("/livez")
			require.Equal(t, 200, code)
			require.Contains(t, status, cause)
			up(s)
			require.Eventually(t, func() bool { code, _ := s.probe("/health"); return code == 200 }, 30*time.Second, 20*time.Millisecond)
			code, status = s.probe("/readyz")
			require.Equal(t, 200, code, status)
		})
	}
}

package clusters

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestHealthNothingRoutes: a node none of whose clusters is open can route
// nothing: Health is not "" (/health answers 503) and names every cluster
// and why; Degraded says the same. (One cluster down while another serves
// is TestTwoClusters': 200 "degraded".)
func TestHealthNothingRoutes(t *testing.T) {
	r := &Router{members: map[string]*member{}, placements: map[string]placement{}}
	for _, name := range []string{Main, "east"} {
		c := &member{Cluster: Cluster{Name: name}}
		why := "connection refused"
		c.failure.Store(&why)
		r.members[name] = c
		r.names = append(r.names, name)
	}
	r.main = r.members[Main]
	h := r.Health()
	require.True(t, strings.HasPrefix(h, "no PostgreSQL cluster can take writes"), h)
	require.Contains(t, h, "cluster 'east'")
	require.Contains(t, h, "cluster 'main'")
	require.Contains(t, h, "connection refused")
	require.NotEmpty(t, r.Degraded())
	require.Len(t, r.State(), 2)
}

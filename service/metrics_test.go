package service_test

import (
	"io"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/servertest"
	pb "github.com/styxq/styx/styxpb"
)

// scrape returns the /metrics text.
func scrape(s *servertest.Server) string {
	s.T.Helper()
	return scrapeEndpoint(s.T, s.D.Endpoint())
}

// scrapeEndpoint returns the /metrics text of the server at endpoint. It
// asks for it uncompressed: the tests that poll the gauges scrape every
// 20 ms, and gzip under -race was a seventh of TestQueueGauges's CPU.
func scrapeEndpoint(t *testing.T, endpoint string) string {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, endpoint+"/metrics", nil)
	require.NoError(t, err)
	req.Header.Set("Accept-Encoding", "identity")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(b)
}

// metric returns the line of the series with the given name and labels.
func metricLine(text, series string) string {
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, series+" ") {
			return l
		}
	}
	return ""
}

// TestMetrics checks the documented metrics (docs/metrics.md) change as
// items move.
func TestMetrics(t *testing.T) {
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.Start(t, b)
		dlq := withDLQ(s, "m", &pb.QueueInfo{MaxAttempts: 1, RequestedPartitions: 2})
		s.Produce("m", "a", "b", "c")
		it := s.Lease("m", 1).Items[0]
		text := scrape(s)
		assert.Equal(t, `styx_queue_items{queue="m",state="ready"} 2`, metricLine(text, `styx_queue_items{queue="m",state="ready"}`))
		assert.Equal(t, `styx_queue_items{queue="m",state="leased"} 1`, metricLine(text, `styx_queue_items{queue="m",state="leased"}`))
		assert.NotEmpty(t, metricLine(text, `styx_queue_oldest_item_age_seconds{queue="m"}`))
		assert.Contains(t, text, `styx_http_requests_total{code="200",path="/v1/queue.lease"} 1`)

		s.Retry("m", 0, &pb.QueueRetryItem{Id: it.Id, Error: "x"})
		it2 := s.Lease("m", 1)
		s.Complete("m", it2.Partition, it2.Items[0].Id)
		text = scrape(s)
		assert.Equal(t, `styx_dead_lettered_total{dead_queue="m-dlq",queue="m",reason="max_attempts"} 1`,
			metricLine(text, `styx_dead_lettered_total{dead_queue="m-dlq",queue="m",reason="max_attempts"}`))
		assert.Equal(t, `styx_queue_items{queue="`+dlq+`",state="ready"} 1`, metricLine(text, `styx_queue_items{queue="`+dlq+`",state="ready"}`))
		assert.Equal(t, `styx_item_attempts_count{outcome="completed"} 1`, metricLine(text, `styx_item_attempts_count{outcome="completed"}`))
		assert.Equal(t, `styx_item_attempts_count{outcome="dead_lettered"} 1`, metricLine(text, `styx_item_attempts_count{outcome="dead_lettered"}`))
	})
}

// documentedFamilies returns the server's metric names from docs/metrics.md
// (the "Styx metrics" section's tables).
func documentedFamilies(t *testing.T) []string {
	t.Helper()
	doc, err := os.ReadFile("../docs/metrics.md")
	require.NoError(t, err)
	text := string(doc)
	start, end := strings.Index(text, "## Styx metrics"), strings.Index(text, "## Worker metrics")
	require.True(t, start >= 0 && end > start, "docs/metrics.md has the sections")
	var names []string
	for _, l := range strings.Split(text[start:end], "\n") {
		if m := regexp.MustCompile("^\\| `(styx_[a-z_]+)` \\|").FindStringSubmatch(l); m != nil {
			names = append(names, m[1])
		}
	}
	require.NotEmpty(t, names)
	return names
}

// TestMetricsOfAFreshServer scrapes a server whose queues exist but have
// seen no traffic: every documented styx_ family is there, its counters at
// 0, so dashboards and rate() see them before the first event; after a
// restart (queues loaded, not created) too; a deleted queue's series go.
func TestMetricsOfAFreshServer(t *testing.T) {
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.Start(t, b)
		dlq := withDLQ(s, "fresh", &pb.QueueInfo{MaxAttempts: 3})
		check := func(when string) {
			if b.Postgres() { // the replication watcher's first sample (every second)
				require.Eventually(t, func() bool { return strings.Contains(scrape(s), "\n# TYPE styx_postgres_standbys ") },
					30*time.Second, 10*time.Millisecond, when)
			}
			text := scrape(s)
			for _, name := range documentedFamilies(t) {
				if name == "styx_queue_deduplication_ids" && b.Postgres() {
					continue // PostgreSQL keeps its ids in its table, not in memory: not exported
				}
				if strings.HasPrefix(name, "styx_postgres_") && (!b.Postgres() || strings.HasPrefix(name, "styx_postgres_standby_lag_")) {
					continue // PostgreSQL only; the lags have a series per standby, and there is none
				}
				if name == "styx_postgres_cluster_up" {
					continue // a node over several clusters only (TestTwoClusters in internal/backend/clusters checks it); servertest runs one
				}
				assert.Contains(t, text, "\n# TYPE "+name+" ", "%s: family %s is missing", when, name)
			}
			for _, series := range []string{
				`styx_dead_lettered_total{dead_queue="` + dlq + `",queue="fresh",reason="max_attempts"}`,
				`styx_dead_lettered_total{dead_queue="` + dlq + `",queue="fresh",reason="explicit"}`,
				`styx_items_dropped_total{queue="fresh",reason="expired"}`,
				`styx_items_dropped_total{queue="` + dlq + `",reason="expired"}`,
				`styx_dead_letter_errors_total{queue="fresh"}`,
				`styx_redrive_items_total{dead_queue="` + dlq + `",queue="fresh",result="moved"}`,
				`styx_redrive_tasks_running{dead_queue="` + dlq + `"}`,
			} {
				assert.Equal(t, series+" 0", metricLine(text, series), when)
			}
		}
		check("created")
		if b.Name != "memory" {
			s.Restart()
			check("restarted")
		}
		require.NoError(t, s.C.QueuesDelete(ctx, &pb.QueuesDeleteRequest{QueueName: "fresh", Force: true}))
		assert.NotContains(t, scrape(s), `queue="fresh"`, "a deleted queue's series are removed")
	})
}

package service_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	styx "github.com/styxq/styx"
	"github.com/styxq/styx/daemon"
	"github.com/styxq/styx/internal/servertest"
	pb "github.com/styxq/styx/styxpb"
)

// metricValue returns the value of the series with the given name and
// labels in a /metrics text, failing the test if it is missing.
func metricValue(t *testing.T, text, series string) float64 {
	t.Helper()
	l := metricLine(text, series)
	require.NotEmpty(t, l, "series %s is missing", series)
	v, err := strconv.ParseFloat(strings.TrimPrefix(l, series+" "), 64)
	require.NoError(t, err, l)
	return v
}

// TestStorageSyncMetrics checks styx_storage_syncs_total and
// styx_storage_sync_seconds (docs/metrics.md) through a server that opens
// its own Pebble store with sync on, as `styx server` does: n produces from
// 4 clients at once, each answered once its batch is fsynced, make at least
// one fsync of the write-ahead log and at most one each (group commit may
// sync several in one); the histogram counts the same fsyncs as the
// counter, both read from one snapshot. The memory and PostgreSQL backends
// never sync a log of Styx's: both stay 0.
func TestStorageSyncMetrics(t *testing.T) {
	t.Run("pebble", func(t *testing.T) {
		t.Parallel()
		d, err := daemon.New(context.Background(), daemon.Config{Listen: "127.0.0.1:0", DataDir: t.TempDir(),
			Log: servertest.TestLogger(), ShutdownTimeout: 5 * time.Second})
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, d.Close(context.Background())) })
		c, err := styx.NewClient(styx.ClientConfig{Endpoint: d.Endpoint()})
		require.NoError(t, err)
		t.Cleanup(c.Close)
		require.NoError(t, c.QueuesCreate(ctx, &pb.QueueInfo{QueueName: "sync", RequestedPartitions: 1}))

		text := scrapeEndpoint(t, d.Endpoint())
		before := metricValue(t, text, "styx_storage_syncs_total")
		require.Equal(t, before, metricValue(t, text, "styx_storage_sync_seconds_count"))

		const clients, each = 4, 10
		var wg sync.WaitGroup
		errs := make(chan error, clients*each)
		for g := range clients {
			wg.Go(func() {
				for i := range each {
					errs <- c.QueueProduce(ctx, &pb.QueueProduceRequest{QueueName: "sync", RequestTimeout: "1m",
						Items: []*pb.QueueProduceItem{{Bytes: fmt.Appendf(nil, "%d-%d", g, i)}}})
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}

		// Nothing else writes now: the server is idle.
		text = scrapeEndpoint(t, d.Endpoint())
		syncs := metricValue(t, text, "styx_storage_syncs_total") - before
		assert.GreaterOrEqual(t, syncs, 1.0, "every produce waits for an fsync of the log")
		// Slack of 2 for a sync of the log's rotation.
		assert.LessOrEqual(t, syncs, float64(clients*each+2), "at most one fsync per produce")
		assert.Equal(t, before+syncs, metricValue(t, text, "styx_storage_sync_seconds_count"),
			"the histogram counts the counter's fsyncs")
		assert.Greater(t, metricValue(t, text, "styx_storage_sync_seconds_sum"), 0.0)
		assert.Equal(t, before+syncs, metricValue(t, text, `styx_storage_sync_seconds_bucket{le="+Inf"}`))
		t.Logf("%d produces, %.0f fsyncs of the log", clients*each, syncs)
	})
	for _, b := range servertest.Backends(t) {
		if b.Name == "pebble" || (b.Name == "postgres" && !b.Postgres()) {
			continue
		}
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			s := servertest.Start(t, b)
			s.CreateQueue(&pb.QueueInfo{QueueName: "sync", RequestedPartitions: 1})
			s.Produce("sync", "a", "b")
			text := scrape(s)
			assert.Equal(t, "styx_storage_syncs_total 0", metricLine(text, "styx_storage_syncs_total"))
			assert.Equal(t, "styx_storage_sync_seconds_count 0", metricLine(text, "styx_storage_sync_seconds_count"))
		})
	}
}

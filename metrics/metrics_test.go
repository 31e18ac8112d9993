package metrics_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/metrics"
)

// TestStorageSyncMetrics: ObserveStorageSync shows as the counter
// styx_storage_syncs_total and the histogram styx_storage_sync_seconds,
// whose count equals the counter; both exist at 0 before the first sync.
func TestStorageSyncMetrics(t *testing.T) {
	m := metrics.New()
	want := func(n int, sum string, le250us int) string {
		return `# HELP styx_storage_sync_seconds Duration of each successful fsync of the write-ahead log, in seconds (Pebble backend).
# TYPE styx_storage_sync_seconds histogram
styx_storage_sync_seconds_bucket{le="5e-05"} 0
styx_storage_sync_seconds_bucket{le="0.0001"} 0
styx_storage_sync_seconds_bucket{le="0.00025"} ` + itoa(le250us) + `
styx_storage_sync_seconds_bucket{le="0.0005"} ` + itoa(n) + `
styx_storage_sync_seconds_bucket{le="0.001"} ` + itoa(n) + `
styx_storage_sync_seconds_bucket{le="0.0025"} ` + itoa(n) + `
styx_storage_sync_seconds_bucket{le="0.005"} ` + itoa(n) + `
styx_storage_sync_seconds_bucket{le="0.01"} ` + itoa(n) + `
styx_storage_sync_seconds_bucket{le="0.025"} ` + itoa(n) + `
styx_storage_sync_seconds_bucket{le="0.1"} ` + itoa(n) + `
styx_storage_sync_seconds_bucket{le="1"} ` + itoa(n) + `
styx_storage_sync_seconds_bucket{le="+Inf"} ` + itoa(n) + `
styx_storage_sync_seconds_sum ` + sum + `
styx_storage_sync_seconds_count ` + itoa(n) + `
# HELP styx_storage_syncs_total Successful fsyncs of the write-ahead log (Pebble backend; 0 on memory and PostgreSQL).
# TYPE styx_storage_syncs_total counter
styx_storage_syncs_total ` + itoa(n) + `
`
	}
	require.NoError(t, testutil.GatherAndCompare(m.Registry, strings.NewReader(want(0, "0", 0)),
		"styx_storage_syncs_total", "styx_storage_sync_seconds"))
	m.ObserveStorageSync(200 * time.Microsecond)
	m.ObserveStorageSync(400 * time.Microsecond)
	require.NoError(t, testutil.GatherAndCompare(m.Registry, strings.NewReader(want(2, "0.0006000000000000001", 1)),
		"styx_storage_syncs_total", "styx_storage_sync_seconds"))
}

func itoa(n int) string { return strconv.Itoa(n) }

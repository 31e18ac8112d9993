package metrics_test

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/metrics"
)

// TestPostgresMetrics: nothing is exported before a first sample (the
// embedded backends); a sample shows as the gauges and adds its waiting
// backends times the interval to the counters; without the details of
// pg_stat_replication the synchronous count and the lags are withheld; a
// failed sample withholds the gauges and keeps the counters.
func TestPostgresMetrics(t *testing.T) {
	m := metrics.New()
	names := []string{"styx_postgres_synchronous_standbys_required", "styx_postgres_synchronous_standbys", "styx_postgres_standbys",
		"styx_postgres_replication_stats_readable", "styx_postgres_standby_lag_bytes", "styx_postgres_standby_lag_seconds",
		"styx_postgres_backends_waiting", "styx_postgres_wait_seconds_total"}
	n, err := testutil.GatherAndCount(m.Registry, names...)
	require.NoError(t, err)
	require.Zero(t, n)

	m.ObservePostgres(metrics.PostgresSample{StandbysRequired: 1, Standbys: 2, StatsReadable: true, SynchronousStandbys: 1,
		Lag:            []metrics.StandbyLag{{Standby: "s1", Bytes: 4096, HasBytes: true, Seconds: 0.25}, {Standby: "s2", Seconds: 3}},
		WaitingSyncRep: 3, WaitingCommitLock: 1}, time.Second)
	m.ObservePostgres(metrics.PostgresSample{StandbysRequired: 1, Standbys: 2, StatsReadable: true, SynchronousStandbys: 1,
		Lag:            []metrics.StandbyLag{{Standby: "s1", Bytes: 8192, HasBytes: true, Seconds: 0.5}, {Standby: "s2", Seconds: 4}},
		WaitingSyncRep: 2}, time.Second)
	require.NoError(t, testutil.GatherAndCompare(m.Registry, strings.NewReader(`
# HELP styx_postgres_backends_waiting Backends of the database waiting in a commit at the last sample: for a synchronous standby (sync_rep) or for the NOTIFY commit lock (commit_lock).
# TYPE styx_postgres_backends_waiting gauge
styx_postgres_backends_waiting{wait="commit_lock"} 0
styx_postgres_backends_waiting{wait="sync_rep"} 2
# HELP styx_postgres_replication_stats_readable 1 when the node's role may read pg_stat_replication's details (pg_monitor or pg_read_all_stats), else 0.
# TYPE styx_postgres_replication_stats_readable gauge
styx_postgres_replication_stats_readable 1
# HELP styx_postgres_standby_lag_bytes WAL written on the primary that the standby has not confirmed flushed, in bytes.
# TYPE styx_postgres_standby_lag_bytes gauge
styx_postgres_standby_lag_bytes{standby="s1"} 8192
# HELP styx_postgres_standby_lag_seconds The standby's flush_lag: time from the primary's flush of recent WAL to the standby's confirmation, in seconds; 0 when caught up.
# TYPE styx_postgres_standby_lag_seconds gauge
styx_postgres_standby_lag_seconds{standby="s1"} 0.5
styx_postgres_standby_lag_seconds{standby="s2"} 4
# HELP styx_postgres_standbys Standbys connected to the primary (pg_stat_replication rows), synchronous or not.
# TYPE styx_postgres_standbys gauge
styx_postgres_standbys 2
# HELP styx_postgres_synchronous_standbys Streaming standbys a commit may wait for now (pg_stat_replication sync_state 'sync' or 'quorum'); not exported when the role cannot read pg_stat_replication's details.
# TYPE styx_postgres_synchronous_standbys gauge
styx_postgres_synchronous_standbys 1
# HELP styx_postgres_synchronous_standbys_required Synchronous standbys each commit of the node waits for (synchronous_standby_names' n); 0 when commits wait for none.
# TYPE styx_postgres_synchronous_standbys_required gauge
styx_postgres_synchronous_standbys_required 1
# HELP styx_postgres_wait_seconds_total Estimated time backends of the database spent waiting in a commit, in seconds summed over backends (each sample adds the backends waiting times the sample interval), by wait (sync_rep, commit_lock).
# TYPE styx_postgres_wait_seconds_total counter
styx_postgres_wait_seconds_total{wait="commit_lock"} 1
styx_postgres_wait_seconds_total{wait="sync_rep"} 5
`), names...))

	// A role without pg_read_all_stats.
	m.ObservePostgres(metrics.PostgresSample{StandbysRequired: 1, Standbys: 2}, time.Second)
	n, err = testutil.GatherAndCount(m.Registry, "styx_postgres_synchronous_standbys", "styx_postgres_standby_lag_bytes", "styx_postgres_standby_lag_seconds")
	require.NoError(t, err)
	require.Zero(t, n)
	require.Equal(t, 1, count(t, m, "styx_postgres_replication_stats_readable"))

	// A failed sample: only the counters.
	m.PostgresSampleFailed()
	n, err = testutil.GatherAndCount(m.Registry, names...)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	require.Equal(t, 2, count(t, m, "styx_postgres_wait_seconds_total"))
}

func count(t *testing.T, m *metrics.Metrics, name string) int {
	t.Helper()
	n, err := testutil.GatherAndCount(m.Registry, name)
	require.NoError(t, err)
	return n
}

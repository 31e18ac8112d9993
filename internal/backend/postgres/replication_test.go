package postgres_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/backend/postgres"
	"github.com/styxq/styx/internal/pgtest"
	"github.com/styxq/styx/metrics"
)

// TestLiveGuarantee (issue 53) runs a primary with a standby listed in a
// quorum, synchronous_standby_names = 'ANY 1 (styx_standby, s2)', and
// checks: the node's log line names the quorum case and which standby to
// promote; the styx_postgres_* metrics show one synchronous standby of the
// one required and the standby's lag; a role without pg_monitor gets the
// counts it can read, no synchronous count, and one log line saying what
// to grant, and the details once granted; a change of the setting is
// logged again with its guarantee; and with the standby stopped the
// synchronous count falls to 0 while 1 is required (the condition of
// StyxPostgresNoSynchronousStandby), and commits waiting for it, or for
// the NOTIFY lock one of them holds, are counted.
func TestLiveGuarantee(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two PostgreSQL clusters")
	}
	primary := pgtest.StartServer(t)
	standby := primary.StartStandby(t, false)
	admin, err := pgx.Connect(t.Context(), primary.URL)
	require.NoError(t, err)
	t.Cleanup(func() { admin.Close(context.Background()) })
	exec := func(sql string) {
		t.Helper()
		_, err := admin.Exec(t.Context(), sql)
		require.NoError(t, err, sql)
	}
	setNames := func(names string) {
		t.Helper()
		exec(`ALTER SYSTEM SET synchronous_standby_names = '` + names + `'`)
		exec(`SELECT pg_reload_conf()`)
	}
	setNames("ANY 1 (" + pgtest.StandbyName + ", s2)")
	require.Eventually(t, func() bool {
		var state string
		err := admin.QueryRow(t.Context(), `SELECT sync_state FROM pg_stat_replication WHERE application_name = $1`, pgtest.StandbyName).Scan(&state)
		return err == nil && state == "quorum"
	}, 30*time.Second, 20*time.Millisecond, "the standby is a quorum candidate")

	var logs lockedLog
	reg := metrics.New()
	m, err := postgres.Open(t.Context(), postgres.Config{URL: pgtest.SchemaURL(t, primary.URL), Metrics: reg,
		Log: slog.New(slog.NewTextHandler(&logs, nil))})
	require.NoError(t, err)
	t.Cleanup(m.Close)
	t.Cleanup(func() { // first: commits that wait for the stopped standby would hold up the rest
		_, _ = admin.Exec(context.Background(), `ALTER SYSTEM RESET synchronous_standby_names`)
		_, _ = admin.Exec(context.Background(), `SELECT pg_reload_conf()`)
	})
	require.Contains(t, logs.String(), `level=INFO msg="postgres: an acknowledged item is flushed on the primary and on any one of the standbys listed in `+
		`synchronous_standby_names = 'ANY 1 (styx_standby, s2)' (quorum commit), not on each: it survives the loss of the primary only when the most caught-up `+
		`listed standby is promoted (the highest pg_last_wal_receive_lsn(), checked on each); another may lack acknowledged items"`)
	require.Contains(t, logs.String(), "standby_method=ANY standbys_required=1 standbys=1")

	eventuallyMetrics(t, reg, map[string]float64{
		"styx_postgres_synchronous_standbys_required": 1,
		"styx_postgres_synchronous_standbys":          1,
		"styx_postgres_standbys":                      1,
		"styx_postgres_replication_stats_readable":    1,
	})
	for _, name := range []string{`styx_postgres_standby_lag_bytes{standby="styx_standby"}`, `styx_postgres_standby_lag_seconds{standby="styx_standby"}`,
		`styx_postgres_backends_waiting{wait="sync_rep"}`, `styx_postgres_backends_waiting{wait="commit_lock"}`,
		`styx_postgres_wait_seconds_total{wait="sync_rep"}`, `styx_postgres_wait_seconds_total{wait="commit_lock"}`} {
		_, ok := metricValue(t, reg, name)
		require.True(t, ok, name)
	}

	// A role without pg_monitor: what it can read, and one line saying so.
	exec(`CREATE ROLE styx_plain LOGIN`)
	exec(`CREATE SCHEMA plain AUTHORIZATION styx_plain`)
	u, err := url.Parse(primary.URL)
	require.NoError(t, err)
	u.User = url.User("styx_plain")
	var plainLogs lockedLog
	plainReg := metrics.New()
	plain, err := postgres.Open(t.Context(), postgres.Config{URL: pgtest.WithSearchPath(u.String(), "plain"), Metrics: plainReg,
		Log: slog.New(slog.NewTextHandler(&plainLogs, nil))})
	require.NoError(t, err)
	t.Cleanup(plain.Close)
	eventuallyMetrics(t, plainReg, map[string]float64{
		"styx_postgres_synchronous_standbys_required": 1,
		"styx_postgres_standbys":                      1,
		"styx_postgres_replication_stats_readable":    0,
	})
	_, ok := metricValue(t, plainReg, "styx_postgres_synchronous_standbys")
	require.False(t, ok, "not exported without pg_read_all_stats")
	exec(`GRANT pg_monitor TO styx_plain`)
	eventuallyMetrics(t, plainReg, map[string]float64{"styx_postgres_replication_stats_readable": 1, "styx_postgres_synchronous_standbys": 1})
	require.Equal(t, 1, strings.Count(plainLogs.String(), "the role cannot read pg_stat_replication's details (GRANT pg_monitor TO the role)"),
		plainLogs.String())

	// A change of the setting is logged again, with what to promote.
	setNames(pgtest.StandbyName)
	require.Eventually(t, func() bool {
		return strings.Contains(logs.String(), `msg="postgres: the durability settings changed: an acknowledged item is flushed on the primary and on a synchronous standby `+
			`(synchronous_standby_names = 'styx_standby', priority: the first listed standby streaming): it survives the loss of the primary when a synchronous standby is promoted`)
	}, 30*time.Second, 20*time.Millisecond, "the change is logged: %s", &logs)

	// The standby gone: 0 synchronous standbys of the 1 required.
	standby.Stop(t)
	eventuallyMetrics(t, reg, map[string]float64{
		"styx_postgres_synchronous_standbys_required": 1,
		"styx_postgres_synchronous_standbys":          0,
		"styx_postgres_standbys":                      0,
	})
	// Two commits that write WAL and NOTIFY: the first waits for the
	// standby holding the NOTIFY lock, the second waits for that lock.
	var wg sync.WaitGroup
	for range 2 {
		conn, err := pgx.Connect(t.Context(), primary.URL)
		require.NoError(t, err)
		t.Cleanup(func() { conn.Close(context.Background()) })
		wg.Go(func() {
			_, err := conn.Exec(context.Background(), `CREATE TEMP TABLE w (x int); SELECT pg_notify('styx_test_waits', 'x')`)
			assert.NoError(t, err)
		})
	}
	// (The nodes' own background commits may wait for the standby too.)
	require.Eventually(t, func() bool {
		for _, name := range []string{`styx_postgres_backends_waiting{wait="sync_rep"}`, `styx_postgres_backends_waiting{wait="commit_lock"}`,
			`styx_postgres_wait_seconds_total{wait="sync_rep"}`, `styx_postgres_wait_seconds_total{wait="commit_lock"}`} {
			if v, _ := metricValue(t, reg, name); v < 1 {
				return false
			}
		}
		return true
	}, 30*time.Second, 20*time.Millisecond, "the waiting commits are seen and counted")
	setNames("") // the commits stop waiting
	wg.Wait()
	eventuallyMetrics(t, reg, map[string]float64{"styx_postgres_synchronous_standbys_required": 0})
}

// eventuallyMetrics polls reg until every series of want has its value.
func eventuallyMetrics(t *testing.T, reg *metrics.Metrics, want map[string]float64) {
	t.Helper()
	require.Eventually(t, func() bool {
		for name, v := range want {
			if got, ok := metricValue(t, reg, name); !ok || got != v {
				return false
			}
		}
		return true
	}, 30*time.Second, 20*time.Millisecond, "want %v", want)
}

// metricValue returns the value of the series name (`metric` or
// `metric{label="value"}`, one label at most) in reg, and whether it is
// exported.
func metricValue(t *testing.T, reg *metrics.Metrics, name string) (float64, bool) {
	t.Helper()
	families, err := reg.Registry.Gather()
	require.NoError(t, err)
	metric, label, _ := strings.Cut(strings.TrimSuffix(name, "}"), "{")
	for _, f := range families {
		if f.GetName() != metric {
			continue
		}
		for _, s := range f.GetMetric() {
			var labels []string
			for _, l := range s.GetLabel() {
				labels = append(labels, l.GetName()+`="`+l.GetValue()+`"`)
			}
			if strings.Join(labels, ",") != label {
				continue
			}
			switch {
			case s.Gauge != nil:
				return s.GetGauge().GetValue(), true
			case s.Counter != nil:
				return s.GetCounter().GetValue(), true
			}
		}
	}
	return 0, false
}

// lockedLog is a log destination safe to read while the node writes.
type lockedLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

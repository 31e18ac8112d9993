package metrics

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// PostgresSample is what a node on the PostgreSQL backend read from the
// primary at one moment (docs/storage/postgres.md, "The live guarantee"):
// the synchronous standbys its commits wait for and have, the standbys'
// lag, and the backends waiting in a commit now.
type PostgresSample struct {
	// StandbysRequired is how many synchronous standbys each commit of
	// the node waits for (synchronous_standby_names' n); 0 when commits
	// wait for none.
	StandbysRequired int
	// Standbys is how many standbys are connected (pg_stat_replication
	// rows; readable by any role).
	Standbys int
	// StatsReadable says whether the node's role may read the details of
	// pg_stat_replication (pg_read_all_stats, which pg_monitor includes,
	// or a superuser). Without it SynchronousStandbys and Lag are unknown
	// and not exported.
	StatsReadable bool
	// SynchronousStandbys is how many streaming standbys a commit may
	// wait for now: sync_state 'sync' (priority) or 'quorum'.
	SynchronousStandbys int
	// Lag is each streaming standby's lag behind the primary.
	Lag []StandbyLag
	// WaitingSyncRep is how many backends of the database wait for a
	// synchronous standby to confirm their commit (wait_event SyncRep).
	WaitingSyncRep int
	// WaitingCommitLock is how many backends of the database wait for a
	// lock on an object (wait_event_type Lock, wait_event object): the
	// lock PostgreSQL takes for a commit that sends a NOTIFY, held through
	// the WAL flush and the synchronous standby's confirmation.
	WaitingCommitLock int
}

// StandbyLag is one standby's lag behind the primary.
type StandbyLag struct {
	// Standby is the standby's application_name (its cluster_name, or
	// primary_conninfo's application_name).
	Standby string
	// Bytes is the WAL the primary has written that the standby has not
	// confirmed flushed (pg_current_wal_lsn() - flush_lsn); HasBytes is
	// false when the standby has reported no flush position yet.
	Bytes    float64
	HasBytes bool
	// Seconds is flush_lag: the time between the primary's flushing of
	// recent WAL and the standby's confirmation that it flushed it, in
	// seconds; 0 once the standby has caught up and WAL is idle (NULL).
	Seconds float64
}

// Label values of the wait series.
const (
	waitSyncRep    = "sync_rep"
	waitCommitLock = "commit_lock"
)

var (
	pgRequiredDesc = prometheus.NewDesc("styx_postgres_synchronous_standbys_required",
		"Synchronous standbys each commit of the node waits for (synchronous_standby_names' n); 0 when commits wait for none.", nil, nil)
	pgSyncDesc = prometheus.NewDesc("styx_postgres_synchronous_standbys",
		"Streaming standbys a commit may wait for now (pg_stat_replication sync_state 'sync' or 'quorum'); not exported when the role cannot read pg_stat_replication's details.", nil, nil)
	pgStandbysDesc = prometheus.NewDesc("styx_postgres_standbys",
		"Standbys connected to the primary (pg_stat_replication rows), synchronous or not.", nil, nil)
	pgReadableDesc = prometheus.NewDesc("styx_postgres_replication_stats_readable",
		"1 when the node's role may read pg_stat_replication's details (pg_monitor or pg_read_all_stats), else 0.", nil, nil)
	pgLagBytesDesc = prometheus.NewDesc("styx_postgres_standby_lag_bytes",
		"WAL written on the primary that the standby has not confirmed flushed, in bytes.", []string{"standby"}, nil)
	pgLagSecondsDesc = prometheus.NewDesc("styx_postgres_standby_lag_seconds",
		"The standby's flush_lag: time from the primary's flush of recent WAL to the standby's confirmation, in seconds; 0 when caught up.", []string{"standby"}, nil)
	pgWaitingDesc = prometheus.NewDesc("styx_postgres_backends_waiting",
		"Backends of the database waiting in a commit at the last sample: for a synchronous standby (sync_rep) or for the NOTIFY commit lock (commit_lock).", []string{"wait"}, nil)
	pgWaitSecondsDesc = prometheus.NewDesc("styx_postgres_wait_seconds_total",
		"Estimated time backends of the database spent waiting in a commit, in seconds summed over backends (each sample adds the backends waiting times the sample interval), by wait (sync_rep, commit_lock).", []string{"wait"}, nil)
)

// postgresCollector exports the last PostgresSample and the wait counters.
// It exports nothing until a node observes a first sample (the embedded
// backends never do); after a failed sample, only the counters.
type postgresCollector struct {
	mu sync.Mutex
	// started is set by the first ObservePostgres.
	started bool
	// last is the last sample; nil when the last sample failed.
	last        *PostgresSample
	waitSeconds map[string]float64
}

func (c *postgresCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{pgRequiredDesc, pgSyncDesc, pgStandbysDesc, pgReadableDesc, pgLagBytesDesc, pgLagSecondsDesc, pgWaitingDesc, pgWaitSecondsDesc} {
		ch <- d
	}
}

func (c *postgresCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.started {
		return
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	for _, w := range []string{waitSyncRep, waitCommitLock} {
		ch <- prometheus.MustNewConstMetric(pgWaitSecondsDesc, prometheus.CounterValue, c.waitSeconds[w], w)
	}
	s := c.last
	if s == nil {
		return
	}
	gauge(pgRequiredDesc, float64(s.StandbysRequired))
	gauge(pgStandbysDesc, float64(s.Standbys))
	gauge(pgWaitingDesc, float64(s.WaitingSyncRep), waitSyncRep)
	gauge(pgWaitingDesc, float64(s.WaitingCommitLock), waitCommitLock)
	if !s.StatsReadable {
		gauge(pgReadableDesc, 0)
		return
	}
	gauge(pgReadableDesc, 1)
	gauge(pgSyncDesc, float64(s.SynchronousStandbys))
	for _, l := range s.Lag {
		if l.HasBytes {
			gauge(pgLagBytesDesc, l.Bytes, l.Standby)
		}
		gauge(pgLagSecondsDesc, l.Seconds, l.Standby)
	}
}

// ObservePostgres records a sample of the PostgreSQL primary taken every
// interval: the styx_postgres_* gauges show it until the next call, and
// styx_postgres_wait_seconds_total adds its waiting backends times
// interval. Safe for concurrent use.
func (m *Metrics) ObservePostgres(s PostgresSample, interval time.Duration) {
	c := m.postgres
	c.mu.Lock()
	defer c.mu.Unlock()
	c.started = true
	c.last = &s
	c.waitSeconds[waitSyncRep] += float64(s.WaitingSyncRep) * interval.Seconds()
	c.waitSeconds[waitCommitLock] += float64(s.WaitingCommitLock) * interval.Seconds()
}

// PostgresSampleFailed records that a sample of the primary failed: the
// styx_postgres_* gauges disappear until the next sample (the counters
// stay). Safe for concurrent use.
func (m *Metrics) PostgresSampleFailed() {
	c := m.postgres
	c.mu.Lock()
	defer c.mu.Unlock()
	c.started = true
	c.last = nil
}

// RegisterClusters registers the gauge styx_postgres_cluster_up{cluster}:
// 1 while the named PostgreSQL cluster takes writes, 0 while it does not
// (ADR 0023; a node over several clusters), read from states at each
// scrape (by cluster name: "" when up, else why not). Call it once.
func (m *Metrics) RegisterClusters(states func() map[string]string) {
	m.Registry.MustRegister(clusterCollector{states: states})
}

var clusterUpDesc = prometheus.NewDesc("styx_postgres_cluster_up",
	"1 while the PostgreSQL cluster takes writes, else 0 (its queues answer 453), by cluster name (ADR 0023).", []string{"cluster"}, nil)

type clusterCollector struct{ states func() map[string]string }

func (c clusterCollector) Describe(ch chan<- *prometheus.Desc) { ch <- clusterUpDesc }

func (c clusterCollector) Collect(ch chan<- prometheus.Metric) {
	for name, why := range c.states() {
		up := 0.0
		if why == "" {
			up = 1
		}
		ch <- prometheus.MustNewConstMetric(clusterUpDesc, prometheus.GaugeValue, up, name)
	}
}

package postgres

import (
	"context"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/styxq/styx/metrics"
)

// replicationSampleInterval is how often a node samples the primary's
// replication state and the backends waiting in a commit (the
// styx_postgres_* metrics). A sample is one cheap statement on a
// connection of the watcher's own, bounded by healthTimeout.
const replicationSampleInterval = time.Second

// replicationSQL reads, in one round trip, the settings commits wait by,
// whether the role may read pg_stat_replication's details, the backends of
// the database waiting in a commit now, and one row per standby (a single
// row of NULLs when there is none). pg_current_wal_lsn() fails on a
// standby, hence the CASE.
const replicationSQL = `SELECT s.recovery, s.sync_commit, s.names, s.readable, s.sync_rep, s.commit_lock,
	r.pid IS NOT NULL, coalesce(r.application_name, ''), coalesce(r.state, ''), coalesce(r.sync_state, ''),
	CASE WHEN s.recovery OR r.flush_lsn IS NULL THEN NULL ELSE pg_wal_lsn_diff(pg_current_wal_lsn(), r.flush_lsn)::float8 END,
	coalesce(extract(epoch FROM r.flush_lag)::float8, 0)
FROM (SELECT pg_is_in_recovery() AS recovery, current_setting('synchronous_commit') AS sync_commit,
		current_setting('synchronous_standby_names') AS names, pg_has_role('pg_read_all_stats', 'USAGE') AS readable,
		count(*) FILTER (WHERE wait_event_type = 'IPC' AND wait_event = 'SyncRep') AS sync_rep,
		count(*) FILTER (WHERE wait_event_type = 'Lock' AND wait_event = 'object') AS commit_lock
	FROM pg_stat_activity WHERE datname = current_database()) s
LEFT JOIN pg_stat_replication r ON true`

// replicationWatch is the state of watchReplication; owned by its
// goroutine.
type replicationWatch struct {
	m    *Manager
	conn *pgx.Conn
	// logged is the durability whose guarantee was logged last.
	logged Durability
	// failing is set after a failed sample, until one succeeds;
	// warnedUnreadable once the role's missing grant was logged.
	failing, warnedUnreadable bool
}

// watchReplication samples the primary every replicationSampleInterval
// into the styx_postgres_* metrics (docs/storage/postgres.md, "The live
// guarantee") until the manager closes, never on a request's path. It
// keeps a connection of its own, outside the pool, so that a pool whose
// every connection waits in a commit (a synchronous standby gone) does not
// hide the waits; it reconnects after an error. It logs the guarantee again
// when synchronous_commit or synchronous_standby_names change, and says
// once when the role cannot read pg_stat_replication's details.
func (m *Manager) watchReplication() {
	w := &replicationWatch{m: m, logged: m.durability}
	defer w.close()
	t := time.NewTicker(replicationSampleInterval)
	defer t.Stop()
	for {
		w.sample()
		select {
		case <-m.ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (w *replicationWatch) close() {
	if w.conn != nil {
		ctx, cancel := context.WithTimeout(context.Background(), healthTimeout)
		defer cancel()
		_ = w.conn.Close(ctx)
		w.conn = nil
	}
}

// sample takes one sample and records it, or records the failure.
func (w *replicationWatch) sample() {
	m := w.m
	ctx, cancel := context.WithTimeout(m.ctx, healthTimeout)
	defer cancel()
	s, d, recovery, err := w.read(ctx)
	if m.ctx.Err() != nil {
		return
	}
	if err != nil || recovery {
		w.close()
		if m.cfg.Metrics != nil && !m.cfg.NoReplicationGauges {
			m.cfg.Metrics.PostgresSampleFailed()
		}
		if !w.failing && m.cfg.Log != nil {
			why := "connected to a standby (read-only)"
			if err != nil {
				why = err.Error()
			}
			m.cfg.Log.Warn("postgres: could not sample the replication state; the styx_postgres_* gauges are withheld until a sample succeeds",
				"error", why)
		}
		w.failing = true
		return
	}
	w.failing = false
	if m.cfg.Metrics != nil && !m.cfg.NoReplicationGauges {
		m.cfg.Metrics.ObservePostgres(s, replicationSampleInterval)
	}
	if m.cfg.Log == nil {
		return
	}
	if d.SynchronousCommit != w.logged.SynchronousCommit || d.StandbyNames != w.logged.StandbyNames {
		prefix := "postgres: the durability settings changed: "
		if w.logged.SynchronousCommit == "" { // not read at Open
			prefix = "postgres: "
		}
		d.log(ctx, m.cfg.Log, prefix)
		w.logged = d
	}
	if !s.StatsReadable && !w.warnedUnreadable && (s.Standbys > 0 || s.StandbysRequired > 0) {
		m.cfg.Log.Warn("postgres: the role cannot read pg_stat_replication's details (GRANT pg_monitor TO the role): "+
			"styx_postgres_synchronous_standbys and the standbys' lag are not exported", "standbys", s.Standbys)
		w.warnedUnreadable = true
	}
}

// read runs replicationSQL on the watcher's connection, connecting first
// if needed. recovery says the server is a standby.
func (w *replicationWatch) read(ctx context.Context) (s metrics.PostgresSample, d Durability, recovery bool, err error) {
	if w.conn == nil {
		if w.conn, err = pgx.ConnectConfig(ctx, w.m.st.pool.Config().ConnConfig.Copy()); err != nil {
			w.conn = nil
			return s, d, false, wrap("sample the replication state", err)
		}
	}
	rows, err := w.conn.Query(ctx, replicationSQL)
	if err != nil {
		return s, d, false, wrap("sample the replication state", err)
	}
	defer rows.Close()
	lag := map[string]int{} // standby name -> index in s.Lag
	for rows.Next() {
		var (
			syncRep, commitLock    int
			standby                bool
			name, state, syncState string
			bytes                  *float64
			seconds                float64
		)
		if err := rows.Scan(&recovery, &d.SynchronousCommit, &d.StandbyNames, &s.StatsReadable, &syncRep, &commitLock,
			&standby, &name, &state, &syncState, &bytes, &seconds); err != nil {
			return s, d, false, wrap("sample the replication state", err)
		}
		s.WaitingSyncRep, s.WaitingCommitLock = syncRep, commitLock
		if !standby {
			continue
		}
		s.Standbys++
		if state != "streaming" || !s.StatsReadable {
			continue
		}
		if syncState == "sync" || syncState == "quorum" {
			s.SynchronousStandbys++
		}
		// Two standbys under one name are one series: the larger lag.
		i, ok := lag[name]
		if !ok {
			i = len(s.Lag)
			lag[name] = i
			s.Lag = append(s.Lag, metrics.StandbyLag{Standby: name})
		}
		l := &s.Lag[i]
		if bytes != nil && (!l.HasBytes || *bytes > l.Bytes) {
			l.Bytes, l.HasBytes = *bytes, true
		}
		l.Seconds = max(l.Seconds, seconds)
	}
	if err := rows.Err(); err != nil {
		return s, d, false, wrap("sample the replication state", err)
	}
	d.StandbyNames = strings.TrimSpace(d.StandbyNames)
	d.Standbys = s.Standbys
	s.StandbysRequired = d.StandbysRequired()
	return s, d, recovery, nil
}

package postgres

import (
	"context"
	"sync"
	"time"
)

// healthTimeout bounds the query behind Health: a database that does not
// answer within it is reported unreachable.
const healthTimeout = 2 * time.Second

// healthEvery is how long a Health answer is reused: probes of several
// load balancers cost the database at most one query a second.
const healthEvery = time.Second

// health caches the last Health answer.
type health struct {
	mu     sync.Mutex
	at     time.Time
	answer string
}

// Health says why the database cannot take writes ("" when it can), for
// /health: it runs a write-capable round trip (a read-write transaction's
// SELECT, so a standby or a read-only session is reported too) at most
// once a second, bounded by healthTimeout. Safe for concurrent use.
func (m *Manager) Health() string {
	m.health.mu.Lock()
	defer m.health.mu.Unlock()
	if time.Since(m.health.at) < healthEvery {
		return m.health.answer
	}
	ctx, cancel := context.WithTimeout(m.ctx, healthTimeout)
	defer cancel()
	m.health.answer = ""
	var readOnly string
	if err := m.st.pool.QueryRow(ctx, "SHOW transaction_read_only").Scan(&readOnly); err != nil {
		m.health.answer = "postgresql unreachable: " + err.Error()
	} else if readOnly == "on" {
		m.health.answer = "postgresql is read-only (a standby, or default_transaction_read_only): writes are refused"
	}
	m.health.at = time.Now()
	return m.health.answer
}

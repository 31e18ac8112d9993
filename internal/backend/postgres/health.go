package postgres

import (
	"context"
	"errors"
	"sync"
	"time"
)

// healthTimeout bounds the probe behind Health: a database that does not
// answer within it is reported as not answering, and no caller of Health
// waits longer.
const healthTimeout = 2 * time.Second

// healthEvery is how long a Health answer is reused: probes of several
// load balancers cost the database at most one query a second.
const healthEvery = time.Second

// healthOverdue is Health's answer while a probe has run for
// healthTimeout or more.
var healthOverdue = "postgresql did not answer within " + healthTimeout.String()

// health is Health's state, guarded by mu. At most one probe runs at a
// time, in a goroutine of its own; mu is never held while it queries.
type health struct {
	mu sync.Mutex
	// answer is the last probe's answer and at when it ended; at is zero
	// before the first probe ends.
	answer string
	at     time.Time
	// probing is set while a probe runs, which began at started; done is
	// closed when it ends.
	probing bool
	started time.Time
	done    chan struct{}
}

// Health says why the database cannot take writes ("" when it can), for
// /health. A probe (a read-write transaction's SELECT, so a standby or a
// read-only session is reported too) runs in the background at most once
// a second, bounded by healthTimeout; a call never waits for it. It returns
// the last probe's answer (at most healthEvery + healthTimeout old) or,
// once the running probe has taken healthTimeout, "postgresql did not
// answer within 2s", whatever the database does (frozen, unreachable with
// no reset, every pooled connection busy). Only the first call after Open
// waits for the first probe, up to healthTimeout. Safe for concurrent use.
func (m *Manager) Health() string {
	h := &m.health
	h.mu.Lock()
	now := time.Now()
	if !h.probing && now.Sub(h.at) >= healthEvery {
		h.probing, h.started, h.done = true, now, make(chan struct{})
		go m.probeHealth(h.done)
	}
	running := now.Sub(h.started)
	switch {
	case h.probing && running >= healthTimeout:
		h.mu.Unlock()
		return healthOverdue
	case !h.at.IsZero():
		answer := h.answer
		h.mu.Unlock()
		return answer
	}
	// No answer yet: wait for the first probe while it is not overdue.
	done := h.done
	h.mu.Unlock()
	t := time.NewTimer(healthTimeout - running)
	defer t.Stop()
	select {
	case <-done:
		h.mu.Lock()
		defer h.mu.Unlock()
		return h.answer
	case <-t.C:
		return healthOverdue
	}
}

// probeHealth runs one probe, records its answer and closes done.
func (m *Manager) probeHealth(done chan struct{}) {
	ctx, cancel := context.WithTimeout(m.ctx, healthTimeout)
	defer cancel()
	answer := ""
	var readOnly string
	if err := m.st.pool.QueryRow(ctx, "SHOW transaction_read_only").Scan(&readOnly); err != nil {
		answer = "postgresql unreachable: " + err.Error()
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			answer = healthOverdue + ": " + err.Error()
		}
	} else if readOnly == "on" {
		answer = "postgresql is read-only (a standby, or default_transaction_read_only): writes are refused"
	}
	h := &m.health
	h.mu.Lock()
	h.answer, h.at, h.probing = answer, time.Now(), false
	h.mu.Unlock()
	close(done)
}

package postgres

import (
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/pgtest"
	"github.com/styxq/styx/metrics"
)

// TestHealthFrozenPrimary (issue 53): with the primary frozen (its
// postmaster and every backend SIGSTOPped: connections open, nothing
// answers), many concurrent Health calls each return within healthTimeout
// (a call never waits for the probe, which runs in the background, one at
// a time), soon answering that PostgreSQL did not answer within 2s; once
// the primary is thawed, Health answers "" again.
func TestHealthFrozenPrimary(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a PostgreSQL cluster")
	}
	srv := pgtest.StartServer(t)
	m, err := Open(t.Context(), Config{URL: pgtest.SchemaURL(t, srv.URL), Metrics: metrics.New(), Log: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	t.Cleanup(m.Close) // after the thaw below (cleanups run last first)
	require.Eventually(t, func() bool { return m.Health() == "" }, 30*time.Second, 10*time.Millisecond)

	thaw := srv.Freeze(t)
	const callers = 16
	const overdue = "postgresql did not answer within 2s"
	var (
		slowest atomic.Int64 // nanoseconds
		saw     [callers]atomic.Bool
		answers sync.Map // every distinct answer heard while frozen, for a failure's message
		stop    atomic.Bool
		wg      sync.WaitGroup
	)
	for i := range callers {
		wg.Go(func() {
			for !stop.Load() {
				began := time.Now()
				answer := m.Health()
				took := int64(time.Since(began))
				for {
					old := slowest.Load()
					if took <= old || slowest.CompareAndSwap(old, took) {
						break
					}
				}
				answers.Store(answer, true)
				if strings.HasPrefix(answer, overdue) {
					saw[i].Store(true)
				}
				time.Sleep(5 * time.Millisecond) // pacing: a probe every 5ms per caller
			}
		})
	}
	allSaw := func() bool {
		for i := range saw {
			if !saw[i].Load() {
				return false
			}
		}
		return true
	}
	ok := assertEventually(allSaw, 30*time.Second)
	stop.Store(true)
	wg.Wait()
	require.Less(t, time.Duration(slowest.Load()), healthTimeout, "the slowest Health call while the primary was frozen")
	t.Logf("slowest Health call while frozen: %s", time.Duration(slowest.Load()))
	var heard []string
	answers.Range(func(k, _ any) bool { heard = append(heard, fmt.Sprintf("%q", k)); return true })
	require.True(t, ok, "every caller hears %q while the primary is frozen; heard: %s; the frozen processes (pid, state, command): %s; the pool's server: %s:%d, the test's: %s",
		overdue, strings.Join(heard, ", "), srv.States(), m.st.pool.Config().ConnConfig.Host, m.st.pool.Config().ConnConfig.Port, srv.URL)

	thaw()
	require.Eventually(t, func() bool { return m.Health() == "" }, 30*time.Second, 10*time.Millisecond, "healthy again once thawed")
}

// assertEventually polls cond every 10ms until it holds (true) or within
// passes (false).
func assertEventually(cond func() bool, within time.Duration) bool {
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}

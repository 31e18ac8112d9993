package postgres

import (
	"time"

	"github.com/styxq/styx/internal/pgtest"
)

// SkipFenceCheck leaves the fence check out of every iteration (true) or
// puts it back (false): BenchmarkFenceCycle's A/B.
func SkipFenceCheck(skip bool) { skipFenceCheck.Store(skip) }

// The tests' schemas come migrated from pgtest's pool (pgtest.Prepare).
func init() { pgtest.Prepare = Migrate }

// SetHelloEvery sets how often a node's LISTEN session says hello until the
// test ends (wakeup.go).
func SetHelloEvery(t interface{ Cleanup(func()) }, d time.Duration) {
	old := helloEvery.Swap(int64(d))
	t.Cleanup(func() { helloEvery.Store(old) })
}

// Channel is the schema's notification channel.
func (m *Manager) Channel() string { return m.st.channel }

// Node is the node's name in its hellos.
func (m *Manager) Node() string { return m.node }

// LeaseCommits returns how many iterations committed with their lease
// (iteration.LeaseAndCommit) in this process.
func LeaseCommits() int64 { return leaseCommits.Load() }

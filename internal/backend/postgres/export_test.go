package postgres

import "github.com/styxq/styx/internal/pgtest"

// SkipFenceCheck leaves the fence check out of every iteration (true) or
// puts it back (false): BenchmarkFenceCycle's A/B.
func SkipFenceCheck(skip bool) { skipFenceCheck.Store(skip) }

// The tests' schemas come migrated from pgtest's pool (pgtest.Prepare).
func init() { pgtest.Prepare = Migrate }

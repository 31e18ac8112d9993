package postgres

// SkipFenceCheck leaves the fence check out of every iteration (true) or
// puts it back (false): BenchmarkFenceCycle's A/B.
func SkipFenceCheck(skip bool) { skipFenceCheck.Store(skip) }

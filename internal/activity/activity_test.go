package activity_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/activity"
	"github.com/styxq/styx/internal/audit"
	"github.com/styxq/styx/internal/backend/embedded/pebble"
	"github.com/styxq/styx/internal/clock"
	"github.com/styxq/styx/internal/store"
)

func newLog(t *testing.T, cfg activity.Config) (*activity.Log, *clock.Fake) {
	t.Helper()
	s, err := pebble.OpenMemory()
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	c := clock.NewFake(time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC))
	cfg.Store, cfg.Clock = s, c
	return activity.New(cfg), c
}

func write(t *testing.T, l *activity.Log, queue string, n int) {
	t.Helper()
	for i := range n {
		l.Write(t.Context(), &audit.Record{Op: "/v1/dead.delete", Door: "v1", Key: "ops", Queue: queue, Attrs: []any{"deleted", i}})
	}
}

func list(t *testing.T, l *activity.Log, p activity.ListParams) []store.ActivityRecord {
	t.Helper()
	if p.Limit == 0 {
		p.Limit = activity.MaxListLimit
	}
	rs, _, err := l.List(t.Context(), p)
	require.NoError(t, err)
	return rs
}

// TestRetention: the log keeps the newest MaxRecords records and none
// older than Retention, pruned by the writes: every PruneEvery writes, and
// the first write after an hour without a prune.
func TestRetention(t *testing.T) {
	t.Run("ByCount", func(t *testing.T) {
		l, _ := newLog(t, activity.Config{MaxRecords: 5, PruneEvery: 1})
		write(t, l, "q", 8)
		rs := list(t, l, activity.ListParams{})
		require.Len(t, rs, 5)
		require.Equal(t, "7", rs[0].Details[0].Value, "the newest are kept")
	})
	t.Run("ByAge", func(t *testing.T) {
		l, c := newLog(t, activity.Config{Retention: 24 * time.Hour, PruneEvery: 1})
		write(t, l, "q", 3)
		c.Advance(25 * time.Hour)
		write(t, l, "q", 1)
		require.Len(t, list(t, l, activity.ListParams{}), 1)
	})
	t.Run("Hourly", func(t *testing.T) {
		l, c := newLog(t, activity.Config{MaxRecords: 1, PruneEvery: 100})
		write(t, l, "q", 3) // the first write prunes; the next two wait their turn
		require.Len(t, list(t, l, activity.ListParams{}), 3)
		c.Advance(61 * time.Minute)
		write(t, l, "q", 1)
		require.Len(t, list(t, l, activity.ListParams{}), 1)
	})
}

// TestListAllowed: records of queues Allowed refuses are skipped, and a
// page is filled from older records (across the store's pages).
func TestListAllowed(t *testing.T) {
	l, _ := newLog(t, activity.Config{})
	write(t, l, "mine", 2)
	write(t, l, "theirs", 5)
	mine := func(q string) bool { return q == "mine" }
	rs, next, err := l.List(t.Context(), activity.ListParams{Limit: 2, Allowed: mine})
	require.NoError(t, err)
	require.Len(t, rs, 2)
	require.Equal(t, "mine", rs[0].Queue)
	require.Equal(t, rs[1].ID, next)
	rs, next, err = l.List(t.Context(), activity.ListParams{Limit: 2, Before: next, Allowed: mine})
	require.NoError(t, err)
	require.Empty(t, rs)
	require.Zero(t, next)
	_, _, err = l.List(t.Context(), activity.ListParams{Limit: activity.MaxListLimit + 1})
	require.Error(t, err)
}

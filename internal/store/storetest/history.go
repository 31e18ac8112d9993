package storetest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/store"
)

// testHistory checks store.HistoryStore: records keyed by queue, minute and
// node, replaced (not added) when written again, read by queue and window,
// pruned by age, deleted with their queue.
func testHistory(t *testing.T, newStore func(*testing.T) CatalogStore) {
	minute := base.Truncate(time.Minute)
	at := func(i int) time.Time { return minute.Add(time.Duration(i) * time.Minute) }

	t.Run("PutReadReplace", func(t *testing.T) {
		s := newStore(t)
		ctx := t.Context()
		createQueue(t, s, "h-a", 1)
		createQueue(t, s, "h-b", 1)
		put := []store.HistoryMinute{
			{Queue: "h-a", At: at(0), Node: "n1", Produced: 5, Completed: 2, DeadLettered: 1, Depth: 3},
			{Queue: "h-a", At: at(0), Node: "n2", Produced: 4, Depth: -1},
			{Queue: "h-a", At: at(1), Node: "n1", Completed: 7, Depth: 0, DeadByGroup: map[string]int64{"fp1": 2, "fp2": 1}},
			{Queue: "h-b", At: at(1), Node: "n1", Produced: 1, Depth: 1},
			{Queue: "gone", At: at(1), Node: "n1", Produced: 9, Depth: 9}, // no such queue: dropped
		}
		require.NoError(t, s.PutHistory(ctx, put))
		got, err := s.ReadHistory(ctx, []string{"h-a"}, at(0), at(1))
		require.NoError(t, err)
		require.Len(t, got, 3)
		for i, want := range put[:3] {
			requireMinute(t, want, got[i])
		}
		got, err = s.ReadHistory(ctx, []string{"h-a", "h-b", "gone"}, at(1), at(5))
		require.NoError(t, err)
		require.Len(t, got, 2)
		requireMinute(t, put[2], got[0])
		requireMinute(t, put[3], got[1])

		// Written again (a retry, or the minute's later count): replaced.
		again := store.HistoryMinute{Queue: "h-a", At: at(0), Node: "n1", Produced: 6, Completed: 2, DeadLettered: 1, Depth: 4}
		require.NoError(t, s.PutHistory(ctx, []store.HistoryMinute{again}))
		got, err = s.ReadHistory(ctx, []string{"h-a"}, at(0), at(0))
		require.NoError(t, err)
		require.Len(t, got, 2)
		requireMinute(t, again, got[0])
		requireMinute(t, put[1], got[1])
	})

	t.Run("Prune", func(t *testing.T) {
		s := newStore(t)
		ctx := t.Context()
		createQueue(t, s, "h-p", 1)
		createQueue(t, s, "h-q", 1)
		var put []store.HistoryMinute
		for i := range 5 {
			put = append(put, store.HistoryMinute{Queue: "h-p", At: at(i), Node: "n", Produced: int64(i), Depth: -1},
				store.HistoryMinute{Queue: "h-q", At: at(i), Node: "n", Produced: int64(i), Depth: -1})
		}
		require.NoError(t, s.PutHistory(ctx, put))
		require.NoError(t, s.PruneHistory(ctx, at(3)))
		got, err := s.ReadHistory(ctx, []string{"h-p", "h-q"}, at(0), at(10))
		require.NoError(t, err)
		require.Len(t, got, 4)
		for _, m := range got {
			require.False(t, m.At.Before(at(3)), "minute %v pruned", m.At)
		}
	})

	t.Run("DeletedWithQueue", func(t *testing.T) {
		s := newStore(t)
		ctx := t.Context()
		createQueue(t, s, "h-d", 1)
		require.NoError(t, s.PutHistory(ctx, []store.HistoryMinute{{Queue: "h-d", At: at(0), Node: "n", Produced: 1, Depth: 1}}))
		require.NoError(t, s.DeleteQueue(ctx, "h-d"))
		createQueue(t, s, "h-d", 1) // re-created: a history of its own
		got, err := s.ReadHistory(ctx, []string{"h-d"}, at(-10), at(10))
		require.NoError(t, err)
		require.Empty(t, got)
	})
}

func requireMinute(t *testing.T, want, got store.HistoryMinute) {
	t.Helper()
	require.Equal(t, want.Queue, got.Queue)
	require.True(t, want.At.Equal(got.At), "at %v, want %v", got.At, want.At)
	require.Equal(t, want.Node, got.Node)
	require.Equal(t, want.Produced, got.Produced)
	require.Equal(t, want.Completed, got.Completed)
	require.Equal(t, want.DeadLettered, got.DeadLettered)
	require.Equal(t, want.Depth, got.Depth)
	if len(want.DeadByGroup) == 0 {
		require.Empty(t, got.DeadByGroup)
	} else {
		require.Equal(t, want.DeadByGroup, got.DeadByGroup)
	}
}

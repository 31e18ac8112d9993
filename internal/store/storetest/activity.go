package storetest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/store"
)

// testActivity checks store.ActivityStore: records get growing IDs, come
// back whole newest first, by queue and by page, outlive their queue, and
// are pruned by age and by count.
func testActivity(t *testing.T, newStore func(*testing.T) CatalogStore) {
	at := func(i int) time.Time { return base.Add(time.Duration(i) * time.Second) }
	rec := func(i int, q string) store.ActivityRecord {
		return store.ActivityRecord{At: at(i), Key: "ops", Door: "v1", Op: "/v1/dead.delete", Queue: q,
			Details: []store.ActivityDetail{{Name: "deleted", Value: "6"}, {Name: "n", Value: string(rune('a' + i))}}}
	}

	t.Run("PutListPage", func(t *testing.T) {
		s := newStore(t)
		ctx := t.Context()
		var ids []uint64
		for i := range 5 {
			q := "a-dlq"
			if i%2 == 1 {
				q = "b-dlq"
			}
			id, err := s.PutActivity(ctx, rec(i, q))
			require.NoError(t, err)
			if len(ids) > 0 {
				require.Greater(t, id, ids[len(ids)-1], "ids grow")
			}
			ids = append(ids, id)
		}
		// An SQS call, with no details and no queue.
		id, err := s.PutActivity(ctx, store.ActivityRecord{At: at(5), Key: "k", Door: "sqs", Action: "CreateQueue", Op: "/v1/queues.create"})
		require.NoError(t, err)
		ids = append(ids, id)

		all, err := s.ListActivity(ctx, store.ActivityListParams{Limit: 100})
		require.NoError(t, err)
		require.Len(t, all, 6)
		for i, r := range all {
			require.Equal(t, ids[5-i], r.ID, "newest first")
		}
		require.Equal(t, "sqs", all[0].Door)
		require.Equal(t, "CreateQueue", all[0].Action)
		require.Empty(t, all[0].Details)
		want := rec(4, "a-dlq")
		got := all[1]
		require.True(t, want.At.Equal(got.At), "at %v, want %v", got.At, want.At)
		require.Equal(t, want.Key, got.Key)
		require.Equal(t, want.Door, got.Door)
		require.Equal(t, want.Op, got.Op)
		require.Equal(t, want.Queue, got.Queue)
		require.Equal(t, want.Details, got.Details)

		a, err := s.ListActivity(ctx, store.ActivityListParams{Queue: "a-dlq", Limit: 2})
		require.NoError(t, err)
		require.Equal(t, []uint64{ids[4], ids[2]}, activityIDs(a))
		a, err = s.ListActivity(ctx, store.ActivityListParams{Queue: "a-dlq", Before: a[1].ID, Limit: 2})
		require.NoError(t, err)
		require.Equal(t, []uint64{ids[0]}, activityIDs(a))
		none, err := s.ListActivity(ctx, store.ActivityListParams{Queue: "nothing", Limit: 2})
		require.NoError(t, err)
		require.Empty(t, none)
	})

	t.Run("OutlivesQueue", func(t *testing.T) {
		s := newStore(t)
		ctx := t.Context()
		createQueue(t, s, "act-q", 1)
		_, err := s.PutActivity(ctx, rec(0, "act-q"))
		require.NoError(t, err)
		require.NoError(t, s.DeleteQueue(ctx, "act-q"))
		got, err := s.ListActivity(ctx, store.ActivityListParams{Queue: "act-q", Limit: 10})
		require.NoError(t, err)
		require.Len(t, got, 1)
	})

	t.Run("Prune", func(t *testing.T) {
		s := newStore(t)
		ctx := t.Context()
		var ids []uint64
		for i := range 6 {
			id, err := s.PutActivity(ctx, rec(i, "p"))
			require.NoError(t, err)
			ids = append(ids, id)
		}
		// By age: records before at(2) go.
		require.NoError(t, s.PruneActivity(ctx, at(2), 0))
		got, err := s.ListActivity(ctx, store.ActivityListParams{Limit: 100})
		require.NoError(t, err)
		require.Equal(t, []uint64{ids[5], ids[4], ids[3], ids[2]}, activityIDs(got))
		// By count: the 3 newest stay.
		require.NoError(t, s.PruneActivity(ctx, at(0), 3))
		got, err = s.ListActivity(ctx, store.ActivityListParams{Limit: 100})
		require.NoError(t, err)
		require.Equal(t, []uint64{ids[5], ids[4], ids[3]}, activityIDs(got))
		// Both: the stricter wins; then everything.
		require.NoError(t, s.PruneActivity(ctx, at(5), 3))
		got, err = s.ListActivity(ctx, store.ActivityListParams{Limit: 100})
		require.NoError(t, err)
		require.Equal(t, []uint64{ids[5]}, activityIDs(got))
		require.NoError(t, s.PruneActivity(ctx, at(10), 0))
		got, err = s.ListActivity(ctx, store.ActivityListParams{Limit: 100})
		require.NoError(t, err)
		require.Empty(t, got)
		require.NoError(t, s.PruneActivity(ctx, at(10), 1)) // an empty log
		// IDs keep growing after a prune of everything.
		id, err := s.PutActivity(ctx, rec(0, "p"))
		require.NoError(t, err)
		require.Greater(t, id, ids[5])
	})
}

func activityIDs(rs []store.ActivityRecord) []uint64 {
	out := make([]uint64, len(rs))
	for i, r := range rs {
		out[i] = r.ID
	}
	return out
}

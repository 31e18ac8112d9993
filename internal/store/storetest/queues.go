package storetest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/queue"
	"github.com/styxq/styx/internal/store"
)

func testQueues(t *testing.T, newStore func(*testing.T) CatalogStore) {
	t.Run("CreateGet", func(t *testing.T) {
		s := newStore(t)
		in := queue.QueueInfo{
			Name:          "orders",
			DeadQueue:     "orders-dead",
			Reference:     "ref 1",
			LeaseTimeout:  30 * time.Second,
			ExpireTimeout: 72 * time.Hour,
			MaxAttempts:   5,
			Partitions:    3,
			CreatedAt:     base,
			UpdatedAt:     base.Add(time.Nanosecond),
			Namespace:     "team-a",
			Attributes:    `{"DelaySeconds":"5"}`,
		}
		got, err := s.CreateQueue(t.Context(), in)
		require.NoError(t, err)
		require.NotZero(t, got.ID)
		in.ID = got.ID
		requireInfo(t, in, got)

		got, err = s.GetQueue(t.Context(), "orders")
		require.NoError(t, err)
		requireInfo(t, in, got)

		// Zero values round-trip too.
		zero, err := s.CreateQueue(t.Context(), queue.QueueInfo{Name: "z", Partitions: 1})
		require.NoError(t, err)
		got, err = s.GetQueue(t.Context(), "z")
		require.NoError(t, err)
		requireInfo(t, queue.QueueInfo{ID: zero.ID, Name: "z", Partitions: 1}, got)
		require.True(t, got.CreatedAt.IsZero())
		require.True(t, got.UpdatedAt.IsZero())
	})

	t.Run("DistinctIDs", func(t *testing.T) {
		s := newStore(t)
		ctx := t.Context()
		seen := map[uint64]string{}
		add := func(q queue.QueueInfo) {
			t.Helper()
			require.NotZero(t, q.ID)
			prev, dup := seen[q.ID]
			require.False(t, dup, "queue %q got the ID %d of %q", q.Name, q.ID, prev)
			seen[q.ID] = q.Name
		}
		for _, name := range []string{"a", "b", "c", "d"} {
			add(createQueue(t, s, name, 1))
		}
		// Delete and re-create, including the most recent: never reuse.
		for _, name := range []string{"b", "d", "b", "d"} {
			require.NoError(t, s.DeleteQueue(ctx, name))
			add(createQueue(t, s, name, 1))
		}
	})

	t.Run("Exists", func(t *testing.T) {
		s := newStore(t)
		first := createQueue(t, s, "q", 1)
		_, err := s.CreateQueue(t.Context(), queue.QueueInfo{Name: "q", Partitions: 4, Reference: "other"})
		require.ErrorIs(t, err, store.ErrQueueExists)
		got, err := s.GetQueue(t.Context(), "q")
		require.NoError(t, err)
		requireInfo(t, first, got)
	})

	t.Run("NotFound", func(t *testing.T) {
		s := newStore(t)
		ctx := t.Context()
		_, err := s.GetQueue(ctx, "missing")
		require.ErrorIs(t, err, store.ErrQueueNotFound)
		err = s.UpdateQueue(ctx, queue.QueueInfo{ID: 1, Name: "missing", Partitions: 1})
		require.ErrorIs(t, err, store.ErrQueueNotFound)
		err = s.DeleteQueue(ctx, "missing")
		require.ErrorIs(t, err, store.ErrQueueNotFound)

		q := createQueue(t, s, "q", 1)
		require.NoError(t, s.DeleteQueue(ctx, "q"))
		_, err = s.GetQueue(ctx, "q")
		require.ErrorIs(t, err, store.ErrQueueNotFound)
		require.ErrorIs(t, s.DeleteQueue(ctx, "q"), store.ErrQueueNotFound)
		require.ErrorIs(t, s.UpdateQueue(ctx, q), store.ErrQueueNotFound)
		_, err = s.ListQueues(ctx, queue.ListQueuesParams{})
		require.NoError(t, err)
	})

	t.Run("UpdateWrongID", func(t *testing.T) {
		// A queue deleted and re-created under the same name is another
		// queue: updating it with the old ID must fail.
		s := newStore(t)
		old := createQueue(t, s, "q", 1)
		require.NoError(t, s.DeleteQueue(t.Context(), "q"))
		cur := createQueue(t, s, "q", 2)
		old.Reference = "stale"
		require.ErrorIs(t, s.UpdateQueue(t.Context(), old), store.ErrQueueNotFound)
		got, err := s.GetQueue(t.Context(), "q")
		require.NoError(t, err)
		requireInfo(t, cur, got)
	})

	t.Run("Update", func(t *testing.T) {
		s := newStore(t)
		q := createQueue(t, s, "q", 1)
		other := createQueue(t, s, "other", 1)
		q.DeadQueue = "dead"
		q.Reference = "changed"
		q.LeaseTimeout = time.Minute + time.Nanosecond
		q.ExpireTimeout = 0
		q.MaxAttempts = 9
		q.Partitions = 4
		q.UpdatedAt = base.Add(time.Hour + 5)
		q.Namespace = "moved" // the service forbids this; the store keeps what it is given
		require.NoError(t, s.UpdateQueue(t.Context(), q))
		got, err := s.GetQueue(t.Context(), "q")
		require.NoError(t, err)
		requireInfo(t, q, got)
		got, err = s.GetQueue(t.Context(), "other")
		require.NoError(t, err)
		requireInfo(t, other, got)
	})

	t.Run("List", func(t *testing.T) {
		s := newStore(t)
		ctx := t.Context()
		all, err := s.ListQueues(ctx, queue.ListQueuesParams{})
		require.NoError(t, err)
		require.Empty(t, all)

		// Byte order: upper case before lower case, "a" before "a-b".
		for _, name := range []string{"c", "a-b", "B", "d", "a", "b"} {
			createQueue(t, s, name, 1)
		}
		names := func(pivot string, limit int) []string {
			t.Helper()
			qs, err := s.ListQueues(ctx, queue.ListQueuesParams{Pivot: pivot, Limit: limit})
			require.NoError(t, err)
			var out []string
			for _, q := range qs {
				require.NotZero(t, q.ID)
				out = append(out, q.Name)
			}
			return out
		}
		require.Equal(t, []string{"B", "a", "a-b", "b", "c", "d"}, names("", 0))
		require.Equal(t, []string{"B", "a", "a-b", "b", "c", "d"}, names("", -1))
		require.Equal(t, []string{"B", "a", "a-b", "b", "c", "d"}, names("", 100))
		require.Equal(t, []string{"B", "a"}, names("", 2))
		require.Equal(t, []string{"b", "c", "d"}, names("b", 0), "pivot is inclusive")
		require.Equal(t, []string{"b", "c"}, names("b", 2))
		require.Equal(t, []string{"c", "d"}, names("bb", 0))
		require.Equal(t, []string{"a-b", "b"}, names("a-", 2))
		require.Empty(t, names("e", 0))

		require.NoError(t, s.DeleteQueue(ctx, "b"))
		require.Equal(t, []string{"c", "d"}, names("b", 0))

		qs, err := s.ListQueues(ctx, queue.ListQueuesParams{Pivot: "d", Limit: 1})
		require.NoError(t, err)
		require.Len(t, qs, 1)
		got, err := s.GetQueue(ctx, "d")
		require.NoError(t, err)
		requireInfo(t, got, qs[0])
	})

	t.Run("ListNamespace", func(t *testing.T) {
		s := newStore(t)
		ctx := t.Context()
		// Names interleave across namespaces; "" is stored as given.
		for _, q := range []struct{ name, ns string }{
			{"a1", "a"}, {"b1", "b"}, {"a2", "a"}, {"x", ""}, {"b2", "b"}, {"a3", "a"}, {"b3", "b"}, {"s1", queue.DefaultNamespace},
		} {
			in := queue.QueueInfo{Name: q.name, Namespace: q.ns, Partitions: 1}
			created, err := s.CreateQueue(ctx, in)
			require.NoError(t, err)
			got, err := s.GetQueue(ctx, q.name)
			require.NoError(t, err)
			require.Equal(t, q.ns, got.Namespace, "namespace of %s", q.name)
			require.Equal(t, q.ns, created.Namespace)
		}
		names := func(p queue.ListQueuesParams) []string {
			t.Helper()
			qs, err := s.ListQueues(ctx, p)
			require.NoError(t, err)
			var out []string
			for _, q := range qs {
				if p.Namespace != "" {
					require.Equal(t, p.Namespace, q.Namespace, q.Name)
				}
				out = append(out, q.Name)
			}
			return out
		}
		require.Equal(t, []string{"a1", "a2", "a3", "b1", "b2", "b3", "s1", "x"}, names(queue.ListQueuesParams{}), "empty namespace lists every one")
		require.Equal(t, []string{"a1", "a2", "a3"}, names(queue.ListQueuesParams{Namespace: "a"}))
		require.Equal(t, []string{"b1", "b2", "b3"}, names(queue.ListQueuesParams{Namespace: "b"}))
		require.Equal(t, []string{"s1"}, names(queue.ListQueuesParams{Namespace: queue.DefaultNamespace}))
		require.Empty(t, names(queue.ListQueuesParams{Namespace: "none"}))
		// The limit counts queues of the namespace, from the pivot on.
		require.Equal(t, []string{"b1", "b2"}, names(queue.ListQueuesParams{Namespace: "b", Limit: 2}))
		require.Equal(t, []string{"b2", "b3"}, names(queue.ListQueuesParams{Namespace: "b", Pivot: "b2", Limit: 2}), "pivot is inclusive")
		require.Equal(t, []string{"b1", "b2"}, names(queue.ListQueuesParams{Namespace: "b", Pivot: "a2", Limit: 2}), "pivot in another namespace")
		require.Equal(t, []string{"a3"}, names(queue.ListQueuesParams{Namespace: "a", Pivot: "a3"}))
		require.Empty(t, names(queue.ListQueuesParams{Namespace: "a", Pivot: "a4"}))

		// A namespace change (the store allows it) moves the queue between lists.
		q, err := s.GetQueue(ctx, "a2")
		require.NoError(t, err)
		q.Namespace = "b"
		require.NoError(t, s.UpdateQueue(ctx, q))
		require.Equal(t, []string{"a1", "a3"}, names(queue.ListQueuesParams{Namespace: "a"}))
		require.Equal(t, []string{"a2", "b1", "b2", "b3"}, names(queue.ListQueuesParams{Namespace: "b"}))
		require.NoError(t, s.DeleteQueue(ctx, "b1"))
		require.Equal(t, []string{"a2", "b2"}, names(queue.ListQueuesParams{Namespace: "b", Limit: 2}))
	})
}

func testDeleteQueue(t *testing.T, newStore func(*testing.T) store.Store) {
	s := newStore(t)
	ctx := t.Context()
	q := createQueue(t, s, "q", 3)
	keep := createQueue(t, s, "keep", 3)
	for _, qi := range []queue.QueueInfo{q, keep} {
		b := &store.Batch{QueueID: qi.ID, LastID: 1000}
		for id := uint64(1); id <= 30; id++ {
			b.Insert(int32(id%3), fullMeta(id), fullBody(id), someErrors(id))
		}
		b.Requeue(0, 3, withID(fullMeta(3), 31))
		write(t, s, b)
	}
	keepBefore := dump(t, s)[0]
	require.Equal(t, "keep", keepBefore.Info.Name)

	require.NoError(t, s.DeleteQueue(ctx, "q"))
	requireItemMethodsNotFound(t, s, q.ID)

	again := createQueue(t, s, "q", 3)
	require.NotEqual(t, q.ID, again.ID)
	requireLastID(t, s, again.ID, 0)
	for p := int32(0); p < 3; p++ {
		require.Empty(t, loadItems(t, s, again.ID, p))
		require.Empty(t, listItems(t, s, again.ID, p, 0, 100))
		bodies, errs := readBodies(t, s, again.ID, p, 1, 2, 3, 4)
		requireBodies(t, make([]queue.ItemBody, 4), bodies)
		requireErrors(t, make([]queue.ItemErrors, 4), errs)
	}
	require.Equal(t, keepBefore, dump(t, s)[0], "deleting a queue changed another")
}

func createQueue(t *testing.T, s store.Catalog, name string, partitions int32) queue.QueueInfo {
	t.Helper()
	q, err := s.CreateQueue(t.Context(), queue.QueueInfo{
		Name:          name,
		Reference:     "ref " + name,
		LeaseTimeout:  time.Minute,
		ExpireTimeout: 24 * time.Hour,
		MaxAttempts:   3,
		Partitions:    partitions,
		CreatedAt:     base,
		UpdatedAt:     base,
	})
	require.NoError(t, err)
	require.NotZero(t, q.ID)
	return q
}

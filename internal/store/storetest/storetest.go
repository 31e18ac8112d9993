// Package storetest is the conformance suite for store.Store backends.
//
// A backend's tests call Run with a function opening a fresh, empty store;
// persistent backends also call RunReopen. Both use nested t.Run subtests,
// so one failing behaviour can be run alone with -run.
//
// Comparisons treat times as instants (time.Time.Equal: location and
// monotonic clock reading are ignored, nanoseconds are not), and an empty
// payload or error list as equal to a nil one.
package storetest

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/queue"
	"github.com/styxq/styx/internal/store"
)

// base is the time most fixtures derive from; its nanoseconds catch
// backends that round.
var base = time.Date(2026, 3, 4, 5, 6, 7, 123456789, time.UTC)

// Run runs the conformance suite. open must return a new, empty, open store
// each time it is called; the suite closes it (the error of a second Close
// is ignored).
func Run(t *testing.T, open func(t *testing.T) store.Store) {
	newStore := func(t *testing.T) store.Store {
		t.Helper()
		s := open(t)
		require.NotNil(t, s)
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	asCatalog := func(t *testing.T) CatalogStore { return newStore(t) }
	t.Run("Queues", func(t *testing.T) { testQueues(t, asCatalog) })
	t.Run("Items", func(t *testing.T) { testItems(t, newStore) })
	t.Run("Groups", func(t *testing.T) { testGroups(t, newStore) })
	t.Run("Isolation", func(t *testing.T) { testIsolation(t, newStore) })
	t.Run("DeleteQueue", func(t *testing.T) { testDeleteQueue(t, newStore) })
	t.Run("LastID", func(t *testing.T) { testLastID(t, newStore) })
	t.Run("Atomicity", func(t *testing.T) { testAtomicity(t, newStore) })
	t.Run("Aliasing", func(t *testing.T) { testAliasing(t, newStore) })
	t.Run("Tasks", func(t *testing.T) { testTasks(t, asCatalog) })
	t.Run("Keys", func(t *testing.T) { testKeys(t, asCatalog) })
	t.Run("History", func(t *testing.T) { testHistory(t, asCatalog) })
	t.Run("Concurrent", func(t *testing.T) { testConcurrent(t, newStore) })
	t.Run("Closed", func(t *testing.T) { testClosed(t, newStore) })
}

// CatalogStore is the part of the contract a backend without an item log
// implements (the PostgreSQL backend, whose items are decided in SQL): queue
// definitions and tasks.
type CatalogStore interface {
	store.Catalog
	store.TaskStore
	store.KeyStore
	store.HistoryStore
	Close() error
}

// RunCatalog runs the suite's queue-definition and task tests. open must
// return a new, empty, open store each time it is called; the suite closes
// it.
func RunCatalog(t *testing.T, open func(t *testing.T) CatalogStore) {
	newStore := func(t *testing.T) CatalogStore {
		t.Helper()
		s := open(t)
		require.NotNil(t, s)
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	t.Run("Queues", func(t *testing.T) { testQueues(t, newStore) })
	t.Run("Tasks", func(t *testing.T) { testTasks(t, newStore) })
	t.Run("Keys", func(t *testing.T) { testKeys(t, newStore) })
	t.Run("History", func(t *testing.T) { testHistory(t, newStore) })
}

// RunReopen checks that a persistent backend keeps everything across Close
// and re-open: queues, items, bodies, errors, LastID, the queue-ID counter
// and tasks. open must open the store kept in dir, creating it if dir is
// empty; the suite closes every store it opens.
func RunReopen(t *testing.T, open func(t *testing.T, dir string) store.Store) {
	dir := t.TempDir()
	ctx := t.Context()
	reopen := func(t *testing.T) store.Store {
		t.Helper()
		s := open(t, dir)
		require.NotNil(t, s)
		t.Cleanup(func() { _ = s.Close() })
		return s
	}

	s := reopen(t)
	a := createQueue(t, s, "a", 2)
	b := createQueue(t, s, "b", 1)
	dlq := createQueue(t, s, "dlq", 1)
	dlq.Namespace = "team-a"
	dlq.UpdatedAt = base.Add(time.Second)
	require.NoError(t, s.UpdateQueue(ctx, dlq))
	gone := createQueue(t, s, "gone", 1) // highest ID so far, then deleted
	used := []uint64{a.ID, b.ID, dlq.ID, gone.ID}

	batch := &store.Batch{QueueID: a.ID, LastID: 500}
	for id := uint64(1); id <= 6; id++ {
		batch.Insert(int32(id%2), fullMeta(id), fullBody(id), queue.ItemErrors{})
	}
	batch.SetErrors(1, fullMeta(1), someErrors(1))
	batch.Requeue(0, 2, withID(fullMeta(2), 7))
	batch.Delete(1, fullMeta(3), true)
	batch.Update(0, dyingMeta(4))
	write(t, s, batch)
	batch = &store.Batch{QueueID: b.ID}
	batch.Insert(0, plainMeta(1), queue.ItemBody{}, queue.ItemErrors{})
	batch.Insert(0, plainMeta(2), fullBody(2), someErrors(2))
	write(t, s, batch)
	batch = &store.Batch{QueueID: dlq.ID, LastID: 9}
	batch.Insert(0, withSourceKey(fullMeta(9), "a~4"), deadBody(9), someErrors(9))
	write(t, s, batch)
	batch = &store.Batch{QueueID: gone.ID, LastID: 77}
	batch.Insert(0, fullMeta(1), fullBody(1), someErrors(1))
	write(t, s, batch)
	// Item groups: a grouped item leased (its state record), a held group.
	batch = &store.Batch{QueueID: b.ID}
	batch.Insert(0, withGroup(plainMeta(3), "g", 1), queue.ItemBody{}, queue.ItemErrors{})
	batch.Lease(0, withGroup(fullMeta(3), "g", 1))
	batch.HoldGroup(queue.HeldGroup{Group: "g", DeadKey: "explicit:b~x", Seq: 1, HeldAt: 42})
	write(t, s, batch)
	// Tasks: one overwritten, one deleted, one of the deleted queue.
	putTask(t, s, taskRecord("t2", "dlq", 2))
	putTask(t, s, taskRecord("t1", "dlq", 1))
	putTask(t, s, taskRecord("t3", "dlq", 3))
	putTask(t, s, taskRecord("t1", "dlq", 11))
	putTask(t, s, taskRecord("t0", "gone", 0))
	require.NoError(t, s.DeleteTask(ctx, "t3"))
	require.NoError(t, s.DeleteQueue(ctx, "gone"))

	want := dump(t, s)
	require.Len(t, want, 3)
	wantTasks := []store.TaskRecord{taskRecord("t0", "gone", 0), taskRecord("t1", "dlq", 11), taskRecord("t2", "dlq", 2)}
	requireTasks(t, wantTasks, listTasks(t, s))
	wantHeld := loadHeld(t, s, b.ID)
	require.Len(t, wantHeld, 1)
	require.NoError(t, s.Close())

	s = reopen(t)
	got := dump(t, s)
	require.Equal(t, want, got, "state after re-open")
	require.Equal(t, wantHeld, loadHeld(t, s, b.ID), "held groups after re-open")
	require.Equal(t, "team-a", got[2].Info.Namespace, "namespace after re-open")
	requireTasks(t, wantTasks, listTasks(t, s), "tasks after re-open")
	lastID, err := s.LastID(ctx, a.ID)
	require.NoError(t, err)
	require.Equal(t, uint64(500), lastID)
	_, err = s.GetQueue(ctx, "gone")
	require.ErrorIs(t, err, store.ErrQueueNotFound)
	_, err = s.LastID(ctx, gone.ID)
	require.ErrorIs(t, err, store.ErrQueueNotFound, "deleted queue's ID after re-open")

	// The queue-ID counter survived: no ID is handed out twice, not even
	// the deleted queue's.
	for _, name := range []string{"gone", "new"} {
		q := createQueue(t, s, name, 1)
		require.NotContains(t, used, q.ID, "queue ID reused after re-open")
		used = append(used, q.ID)
	}

	// The store is fully usable after re-open, and those writes persist too.
	batch = &store.Batch{QueueID: a.ID}
	batch.Insert(0, fullMeta(501), fullBody(501), queue.ItemErrors{})
	batch.SetErrors(1, fullMeta(5), someErrors(5))
	write(t, s, batch)
	requireLastID(t, s, a.ID, 501)
	putTask(t, s, taskRecord("t4", "a", 4))
	require.NoError(t, s.DeleteTask(ctx, "t0"))
	putTask(t, s, taskRecord("t2", "dlq", 22))
	want = dump(t, s)
	wantTasks = []store.TaskRecord{taskRecord("t1", "dlq", 11), taskRecord("t2", "dlq", 22), taskRecord("t4", "a", 4)}
	requireTasks(t, wantTasks, listTasks(t, s))
	require.NoError(t, s.Close())

	s = reopen(t)
	require.Equal(t, want, dump(t, s), "state after second re-open")
	requireTasks(t, wantTasks, listTasks(t, s), "tasks after second re-open")
}

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

func testItems(t *testing.T, newStore func(*testing.T) store.Store) {
	t.Run("InsertLoad", func(t *testing.T) {
		s := newStore(t)
		q := createQueue(t, s, "q", 2)
		metas := []queue.ItemMeta{
			fullMeta(5),
			plainMeta(1),
			withSourceKey(fullMeta(3), "src~3"),
			zeroMeta(2),
			oddTimesMeta(4),
			fullMeta(1 << 60),
			dyingMeta(6),
			withDead(plainMeta(7), "expired", time.Time{}),
			withDead(zeroMeta(8), "", base.Add(-time.Hour)),
		}
		metas[0].Leased = false
		metas[0].LeaseDeadline = time.Time{}
		b := &store.Batch{QueueID: q.ID}
		for _, m := range metas {
			b.Insert(0, m, fullBody(m.ID), queue.ItemErrors{})
		}
		write(t, s, b)

		want := slices.Clone(metas)
		slices.SortFunc(want, func(a, b queue.ItemMeta) int { return cmp.Compare(a.ID, b.ID) })
		got := loadItems(t, s, q.ID, 0)
		requireMetas(t, want, got)
		for _, m := range got {
			if m.ID == 2 {
				require.True(t, m.CreatedAt.IsZero(), "zero CreatedAt")
				require.True(t, m.LeaseDeadline.IsZero(), "zero LeaseDeadline")
				require.True(t, m.EnqueueAt.IsZero(), "zero EnqueueAt")
				require.True(t, m.ExpireDeadline.IsZero(), "zero ExpireDeadline")
				require.True(t, m.DeadAt.IsZero(), "zero DeadAt")
			}
		}
		require.Empty(t, loadItems(t, s, q.ID, 1))
	})

	t.Run("ReadBodies", func(t *testing.T) {
		s := newStore(t)
		q := createQueue(t, s, "q", 1)
		b := &store.Batch{QueueID: q.ID}
		b.Insert(0, fullMeta(1), fullBody(1), someErrors(1))
		b.Insert(0, fullMeta(2), queue.ItemBody{}, queue.ItemErrors{})
		b.Insert(0, fullMeta(3), deadBody(3), queue.ItemErrors{LastError: "only last"})
		b.Insert(0, withBodyID(fullMeta(4), 40), fullBody(40), someErrors(40))
		write(t, s, b)

		bodies, errs := readBodies(t, s, q.ID, 0, 3, 99, 1, 40, 2, 1)
		requireBodies(t, []queue.ItemBody{deadBody(3), {}, fullBody(1), fullBody(40), {}, fullBody(1)}, bodies)
		requireErrors(t, []queue.ItemErrors{{LastError: "only last"}, {}, someErrors(1), someErrors(40), {}, someErrors(1)}, errs)

		// Bodies are keyed by BodyID, not ID.
		bodies, _ = readBodies(t, s, q.ID, 0, 4)
		requireBodies(t, []queue.ItemBody{{}}, bodies)

		bodies, errs = readBodies(t, s, q.ID, 0)
		require.Empty(t, bodies)
		require.Empty(t, errs)
	})

	t.Run("Update", func(t *testing.T) {
		s := newStore(t)
		q := createQueue(t, s, "q", 1)
		b := &store.Batch{QueueID: q.ID}
		b.Insert(0, plainMeta(1), fullBody(1), someErrors(1))
		b.Insert(0, plainMeta(2), fullBody(2), queue.ItemErrors{})
		write(t, s, b)

		leased := fullMeta(1)
		leased.Attempts = 1
		b = &store.Batch{QueueID: q.ID}
		b.Update(0, leased)
		write(t, s, b)
		requireMetas(t, []queue.ItemMeta{leased, plainMeta(2)}, loadItems(t, s, q.ID, 0))

		// Decided dead, then back to zero times, no lease, not dead.
		b = &store.Batch{QueueID: q.ID}
		b.Update(0, dyingMeta(1))
		write(t, s, b)
		requireMetas(t, []queue.ItemMeta{dyingMeta(1), plainMeta(2)}, loadItems(t, s, q.ID, 0))
		b = &store.Batch{QueueID: q.ID}
		b.Update(0, zeroMeta(1))
		write(t, s, b)
		requireMetas(t, []queue.ItemMeta{zeroMeta(1), plainMeta(2)}, loadItems(t, s, q.ID, 0))

		bodies, errs := readBodies(t, s, q.ID, 0, 1)
		requireBodies(t, []queue.ItemBody{fullBody(1)}, bodies)
		requireErrors(t, []queue.ItemErrors{someErrors(1)}, errs)
	})

	t.Run("Lease", func(t *testing.T) {
		// An item's life as the logical queue writes it: insert, lease,
		// then a renewal, a dead decision, a requeue or a delete.
		s := newStore(t)
		q := createQueue(t, s, "q", 1)
		leased := func(m queue.ItemMeta, d time.Duration) queue.ItemMeta {
			m.Attempts++
			m.Leased, m.LeaseDeadline = true, m.CreatedAt.Add(d)
			return m
		}
		b := &store.Batch{QueueID: q.ID}
		for id := uint64(1); id <= 5; id++ {
			b.Insert(0, plainMeta(id), fullBody(id), queue.ItemErrors{})
		}
		write(t, s, b)
		b = &store.Batch{QueueID: q.ID}
		for id := uint64(1); id <= 4; id++ {
			b.Lease(0, leased(plainMeta(id), time.Minute))
		}
		write(t, s, b)
		want := []queue.ItemMeta{leased(plainMeta(1), time.Minute), leased(plainMeta(2), time.Minute),
			leased(plainMeta(3), time.Minute), leased(plainMeta(4), time.Minute), plainMeta(5)}
		requireMetas(t, want, loadItems(t, s, q.ID, 0))
		requireMetas(t, want, mapSlice2(listItems(t, s, q.ID, 0, 0, 10), func(it queue.Item) queue.ItemMeta { return it.Meta }))

		// 1 completed, 2 renewed twice, 3 decided dead, 4 requeued as 6.
		renewed := leased(plainMeta(2), 2*time.Minute)
		dying := withDead(plainMeta(3), "max_attempts", base.Add(time.Hour))
		dying.Attempts = 1
		requeued := withID(plainMeta(4), 6)
		requeued.Attempts = 1
		b = &store.Batch{QueueID: q.ID}
		b.Delete(0, want[0], false)
		b.Update(0, leased(plainMeta(2), 90*time.Second))
		b.Update(0, dying)
		b.Requeue(0, 4, requeued)
		write(t, s, b)
		b = &store.Batch{QueueID: q.ID}
		b.Update(0, renewed)
		write(t, s, b)
		want = []queue.ItemMeta{renewed, dying, plainMeta(5), requeued}
		requireMetas(t, want, loadItems(t, s, q.ID, 0))
		requireMetas(t, want, mapSlice2(listItems(t, s, q.ID, 0, 0, 10), func(it queue.Item) queue.ItemMeta { return it.Meta }))
		requireLastID(t, s, q.ID, 6)

		// 6 leased under its new id, then everything deleted.
		b = &store.Batch{QueueID: q.ID}
		b.Lease(0, leased(requeued, time.Minute))
		write(t, s, b)
		b = &store.Batch{QueueID: q.ID}
		b.Delete(0, renewed, false)
		b.Delete(0, dying, false)
		b.Delete(0, plainMeta(5), false)
		b.Delete(0, leased(requeued, time.Minute), false)
		write(t, s, b)
		require.Empty(t, loadItems(t, s, q.ID, 0))
		require.Empty(t, listItems(t, s, q.ID, 0, 0, 10))
		bodies, _ := readBodies(t, s, q.ID, 0, 1, 2, 3, 4, 5)
		requireBodies(t, make([]queue.ItemBody, 5), bodies)
	})

	t.Run("Requeue", func(t *testing.T) {
		s := newStore(t)
		q := createQueue(t, s, "q", 1)
		b := &store.Batch{QueueID: q.ID}
		for id := uint64(1); id <= 3; id++ {
			b.Insert(0, fullMeta(id), fullBody(id), someErrors(id))
		}
		write(t, s, b)

		moved := withID(fullMeta(1), 10) // BodyID stays 1
		moved.Attempts = 2
		moved.Leased = false
		moved.LeaseDeadline = time.Time{}
		b = &store.Batch{QueueID: q.ID, LastID: 10}
		b.Requeue(0, 1, moved)
		write(t, s, b)

		requireMetas(t, []queue.ItemMeta{fullMeta(2), fullMeta(3), moved}, loadItems(t, s, q.ID, 0))
		bodies, errs := readBodies(t, s, q.ID, 0, 1)
		requireBodies(t, []queue.ItemBody{fullBody(1)}, bodies)
		requireErrors(t, []queue.ItemErrors{someErrors(1)}, errs)

		items := listItems(t, s, q.ID, 0, 3, 10)
		require.Len(t, items, 1)
		requireItem(t, queue.Item{Partition: 0, Meta: moved, Body: fullBody(1), Errors: someErrors(1)}, items[0])

		// Requeue twice more within one batch.
		again := withID(moved, 11)
		third := withID(moved, 12)
		b = &store.Batch{QueueID: q.ID, LastID: 12}
		b.Requeue(0, 10, again)
		b.Requeue(0, 11, third)
		write(t, s, b)
		requireMetas(t, []queue.ItemMeta{fullMeta(2), fullMeta(3), third}, loadItems(t, s, q.ID, 0))
	})

	t.Run("Delete", func(t *testing.T) {
		s := newStore(t)
		q := createQueue(t, s, "q", 1)
		b := &store.Batch{QueueID: q.ID}
		for id := uint64(1); id <= 3; id++ {
			b.Insert(0, fullMeta(id), fullBody(id), someErrors(id))
		}
		moved := withID(fullMeta(3), 30)
		b.Requeue(0, 3, moved)
		write(t, s, b)

		b = &store.Batch{QueueID: q.ID}
		b.Delete(0, fullMeta(2), true)
		b.Delete(0, moved, true) // deletes meta 30 and body/errors 3
		write(t, s, b)
		requireMetas(t, []queue.ItemMeta{fullMeta(1)}, loadItems(t, s, q.ID, 0))
		bodies, errs := readBodies(t, s, q.ID, 0, 1, 2, 3)
		requireBodies(t, []queue.ItemBody{fullBody(1), {}, {}}, bodies)
		requireErrors(t, []queue.ItemErrors{someErrors(1), {}, {}}, errs)

		// Deleting what is not there is not an error.
		b = &store.Batch{QueueID: q.ID}
		b.Delete(0, fullMeta(2), true)
		write(t, s, b)
		requireMetas(t, []queue.ItemMeta{fullMeta(1)}, loadItems(t, s, q.ID, 0))
	})

	t.Run("SetErrors", func(t *testing.T) {
		s := newStore(t)
		q := createQueue(t, s, "q", 1)
		b := &store.Batch{QueueID: q.ID}
		b.Insert(0, fullMeta(1), fullBody(1), queue.ItemErrors{})
		b.Insert(0, fullMeta(2), fullBody(2), someErrors(2))
		write(t, s, b)

		_, errs := readBodies(t, s, q.ID, 0, 1)
		require.True(t, errs[0].IsZero())

		b = &store.Batch{QueueID: q.ID}
		b.SetErrors(0, fullMeta(1), someErrors(11))
		b.SetErrors(0, fullMeta(2), queue.ItemErrors{}) // clears
		write(t, s, b)
		_, errs = readBodies(t, s, q.ID, 0, 1, 2)
		requireErrors(t, []queue.ItemErrors{someErrors(11), {}}, errs)

		// One error.
		one := queue.ItemErrors{LastError: "e1", Errors: []queue.AttemptError{{Attempt: 1, Error: "e1", At: base}}}
		b = &store.Batch{QueueID: q.ID}
		b.SetErrors(0, fullMeta(2), one)
		write(t, s, b)
		_, errs = readBodies(t, s, q.ID, 0, 2)
		requireErrors(t, []queue.ItemErrors{one}, errs)

		// Ten errors, the most the contract keeps.
		ten := queue.ItemErrors{LastError: "e10"}
		for i := int32(1); i <= 10; i++ {
			ten.Errors = append(ten.Errors, queue.AttemptError{Attempt: i, Error: fmt.Sprint("e", i), At: base.Add(time.Duration(i) * time.Second)})
		}
		b = &store.Batch{QueueID: q.ID}
		b.SetErrors(0, fullMeta(1), ten)
		write(t, s, b)
		_, errs = readBodies(t, s, q.ID, 0, 1)
		requireErrors(t, []queue.ItemErrors{ten}, errs)

		// Metadata was not touched by SetErrors.
		requireMetas(t, []queue.ItemMeta{fullMeta(1), fullMeta(2)}, loadItems(t, s, q.ID, 0))
	})

	t.Run("OpsApplyInOrder", func(t *testing.T) {
		s := newStore(t)
		q := createQueue(t, s, "q", 1)
		updated := fullMeta(1)
		updated.Attempts = 7
		b := &store.Batch{QueueID: q.ID}
		b.Insert(0, fullMeta(1), fullBody(1), queue.ItemErrors{})
		b.Update(0, updated)
		b.Insert(0, fullMeta(2), fullBody(2), someErrors(2))
		b.Delete(0, fullMeta(2), true)
		b.Insert(0, fullMeta(3), fullBody(3), someErrors(3))
		b.SetErrors(0, fullMeta(3), queue.ItemErrors{LastError: "x"})
		b.Requeue(0, 3, withID(fullMeta(3), 4))
		b.Update(0, withID(zeroMeta(3), 4))
		write(t, s, b)

		requireMetas(t, []queue.ItemMeta{updated, withBodyID(zeroMeta(4), 3)}, loadItems(t, s, q.ID, 0))
		bodies, errs := readBodies(t, s, q.ID, 0, 1, 2, 3)
		requireBodies(t, []queue.ItemBody{fullBody(1), {}, fullBody(3)}, bodies)
		requireErrors(t, []queue.ItemErrors{{}, {}, {LastError: "x"}}, errs)
	})

	t.Run("ListItems", func(t *testing.T) {
		s := newStore(t)
		q := createQueue(t, s, "q", 2)
		var want []queue.Item
		b := &store.Batch{QueueID: q.ID}
		for id := uint64(2); id <= 50; id += 2 {
			it := queue.Item{Partition: 1, Meta: fullMeta(id), Body: fullBody(id)}
			if id%3 == 0 {
				it.Errors = someErrors(id)
			}
			if id%5 == 0 {
				it.Meta = plainMeta(id)
				it.Body = queue.ItemBody{}
			}
			b.Insert(1, it.Meta, it.Body, it.Errors)
			want = append(want, it)
		}
		b.Insert(0, fullMeta(1), fullBody(1), queue.ItemErrors{}) // other partition
		write(t, s, b)

		// Page through with limit 10.
		var got []queue.Item
		after := uint64(0)
		for page := 0; ; page++ {
			require.Less(t, page, 10, "pagination does not end")
			items := listItems(t, s, q.ID, 1, after, 10)
			require.LessOrEqual(t, len(items), 10)
			if len(items) == 0 {
				break
			}
			got = append(got, items...)
			after = items[len(items)-1].Meta.ID
		}
		requireItems(t, want, got)

		requireItems(t, want[:3], listItems(t, s, q.ID, 1, 0, 3))
		requireItems(t, want[5:8], listItems(t, s, q.ID, 1, 11, 3), "afterID between ids")
		requireItems(t, want[5:8], listItems(t, s, q.ID, 1, 10, 3), "afterID is exclusive")
		requireItems(t, want[20:], listItems(t, s, q.ID, 1, 40, 1000))
		require.Empty(t, listItems(t, s, q.ID, 1, 50, 10))
		require.Empty(t, listItems(t, s, q.ID, 1, 1<<63, 10))

		p0 := listItems(t, s, q.ID, 0, 0, 10)
		requireItems(t, []queue.Item{{Partition: 0, Meta: fullMeta(1), Body: fullBody(1)}}, p0)

		// Requeued items are listed at their new ID, with their body.
		b = &store.Batch{QueueID: q.ID}
		b.Requeue(1, 2, withID(fullMeta(2), 51))
		write(t, s, b)
		items := listItems(t, s, q.ID, 1, 48, 10)
		requireItems(t, []queue.Item{want[24], {Partition: 1, Meta: withID(fullMeta(2), 51), Body: fullBody(2)}}, items)
	})

	t.Run("Within", func(t *testing.T) {
		// ListItemsWithin and ReadBodiesWithin stop after the item that
		// brings the total queue.ItemBytes to maxBytes, and always return
		// the first item there is.
		s := newStore(t)
		q := createQueue(t, s, "q", 1)
		b := &store.Batch{QueueID: q.ID}
		var want []queue.Item
		ids := make([]uint64, 10)
		for i := range ids {
			ids[i] = uint64(i + 1)
			it := queue.Item{Meta: plainMeta(ids[i]), Body: queue.ItemBody{Payload: bytes.Repeat([]byte{'x'}, 100)}}
			b.Insert(0, it.Meta, it.Body, it.Errors)
			want = append(want, it)
		}
		write(t, s, b)
		within := func(after uint64, limit, maxBytes int) []queue.Item {
			t.Helper()
			items, err := s.ListItemsWithin(t.Context(), q.ID, 0, after, limit, maxBytes)
			require.NoError(t, err)
			return items
		}
		requireItems(t, want[:3], within(0, 10, 250), "the third brings 300 bytes")
		requireItems(t, want[:2], within(0, 10, 200), "the second reaches 200 bytes")
		requireItems(t, want[:1], within(0, 10, 1), "at least one")
		requireItems(t, want, within(0, 10, 0), "no bound")
		requireItems(t, want[:4], within(0, 4, 10_000), "limit")
		requireItems(t, want[8:], within(8, 10, 10_000), "the rest")
		require.Empty(t, within(10, 10, 1))

		for _, c := range []struct{ maxBytes, n int }{{250, 3}, {200, 2}, {1, 1}, {0, 10}, {10_000, 10}} {
			bodies, errs, err := s.ReadBodiesWithin(t.Context(), q.ID, 0, ids, c.maxBytes)
			require.NoError(t, err)
			require.Len(t, bodies, c.n, "maxBytes %d", c.maxBytes)
			require.Len(t, errs, c.n, "maxBytes %d", c.maxBytes)
			for i := range bodies {
				require.Equal(t, want[i].Body, bodies[i])
			}
		}
		bodies, _, err := s.ReadBodiesWithin(t.Context(), q.ID, 0, nil, 1)
		require.NoError(t, err)
		require.Empty(t, bodies)
	})

	t.Run("Many", func(t *testing.T) {
		// Enough items to cross any chunking a backend does.
		s := newStore(t)
		q := createQueue(t, s, "q", 1)
		const n = 2500
		var want []queue.ItemMeta
		for start := uint64(1); start <= n; start += 500 {
			b := &store.Batch{QueueID: q.ID, LastID: start + 499}
			for id := start; id < start+500; id++ {
				b.Insert(0, plainMeta(id), fullBody(id), queue.ItemErrors{})
				want = append(want, plainMeta(id))
			}
			write(t, s, b)
		}
		// Leave gaps.
		b := &store.Batch{QueueID: q.ID}
		for id := uint64(1000); id <= 1100; id++ {
			b.Delete(0, plainMeta(id), true)
		}
		write(t, s, b)
		want = slices.Delete(want, 999, 1100)
		requireMetas(t, want, loadItems(t, s, q.ID, 0))

		var listed []queue.ItemMeta
		for after := uint64(0); ; {
			items := listItems(t, s, q.ID, 0, after, 700)
			if len(items) == 0 {
				break
			}
			for _, it := range items {
				listed = append(listed, it.Meta)
			}
			after = items[len(items)-1].Meta.ID
		}
		requireMetas(t, want, listed)
	})

	t.Run("LoadItemsStops", func(t *testing.T) {
		s := newStore(t)
		q := createQueue(t, s, "q", 1)
		b := &store.Batch{QueueID: q.ID}
		for id := uint64(1); id <= 5; id++ {
			b.Insert(0, fullMeta(id), fullBody(id), queue.ItemErrors{})
		}
		write(t, s, b)
		stop := errors.New("stop")
		calls := 0
		err := s.LoadItems(t.Context(), q.ID, 0, func(m queue.ItemMeta) error {
			calls++
			if calls == 2 {
				return stop
			}
			return nil
		})
		require.ErrorIs(t, err, stop)
		require.Equal(t, 2, calls)
	})

	t.Run("EmptyQueue", func(t *testing.T) {
		s := newStore(t)
		q := createQueue(t, s, "q", 1)
		require.Empty(t, loadItems(t, s, q.ID, 0))
		require.Empty(t, loadItems(t, s, q.ID, 7))
		require.Empty(t, listItems(t, s, q.ID, 0, 0, 10))
		bodies, errs := readBodies(t, s, q.ID, 0, 1, 2)
		requireBodies(t, []queue.ItemBody{{}, {}}, bodies)
		requireErrors(t, []queue.ItemErrors{{}, {}}, errs)
		write(t, s, &store.Batch{QueueID: q.ID}) // an empty batch is fine
		requireLastID(t, s, q.ID, 0)
	})

	t.Run("UnknownQueue", func(t *testing.T) {
		s := newStore(t)
		createQueue(t, s, "q", 1)
		requireItemMethodsNotFound(t, s, 1<<40)
	})
}

func testIsolation(t *testing.T, newStore func(*testing.T) store.Store) {
	t.Run("Partitions", func(t *testing.T) {
		s := newStore(t)
		q := createQueue(t, s, "q", 3)
		b := &store.Batch{QueueID: q.ID}
		for id := uint64(1); id <= 9; id++ {
			b.Insert(int32(id%3), fullMeta(id), fullBody(id), someErrors(id))
		}
		write(t, s, b)
		for p := int32(0); p < 3; p++ {
			var want []queue.ItemMeta
			var wantItems []queue.Item
			for id := uint64(1); id <= 9; id++ {
				if int32(id%3) == p {
					want = append(want, fullMeta(id))
					wantItems = append(wantItems, queue.Item{Partition: p, Meta: fullMeta(id), Body: fullBody(id), Errors: someErrors(id)})
				}
			}
			requireMetas(t, want, loadItems(t, s, q.ID, p))
			requireItems(t, wantItems, listItems(t, s, q.ID, p, 0, 100))
		}
		// A partition does not see another's bodies or errors.
		bodies, errs := readBodies(t, s, q.ID, 0, 1, 2, 3)
		requireBodies(t, []queue.ItemBody{{}, {}, fullBody(3)}, bodies)
		requireErrors(t, []queue.ItemErrors{{}, {}, someErrors(3)}, errs)

		// Deleting and updating in one partition leaves the others alone,
		// even when the op names a BodyID another partition holds.
		b = &store.Batch{QueueID: q.ID}
		b.Delete(1, fullMeta(4), true)
		b.Delete(1, withID(fullMeta(5), 100), true) // body 5 lives in partition 2
		b.SetErrors(1, fullMeta(6), queue.ItemErrors{})
		write(t, s, b)
		requireMetas(t, []queue.ItemMeta{fullMeta(1), fullMeta(7)}, loadItems(t, s, q.ID, 1))
		requireMetas(t, []queue.ItemMeta{fullMeta(2), fullMeta(5), fullMeta(8)}, loadItems(t, s, q.ID, 2))
		bodies, errs = readBodies(t, s, q.ID, 2, 5)
		requireBodies(t, []queue.ItemBody{fullBody(5)}, bodies)
		requireErrors(t, []queue.ItemErrors{someErrors(5)}, errs)
		_, errs = readBodies(t, s, q.ID, 0, 6)
		requireErrors(t, []queue.ItemErrors{someErrors(6)}, errs)
	})

	t.Run("Queues", func(t *testing.T) {
		s := newStore(t)
		qa := createQueue(t, s, "a", 1)
		qb := createQueue(t, s, "b", 1)
		// The same ids in both queues, different contents.
		for _, q := range []queue.QueueInfo{qa, qb} {
			b := &store.Batch{QueueID: q.ID, LastID: q.ID * 100}
			for id := uint64(1); id <= 3; id++ {
				b.Insert(0, fullMeta(id), bodyFor(q.Name, id), someErrors(q.ID*10+id))
			}
			write(t, s, b)
		}
		b := &store.Batch{QueueID: qa.ID}
		b.Delete(0, fullMeta(1), true)
		b.Update(0, zeroMeta(2))
		b.SetErrors(0, fullMeta(3), queue.ItemErrors{})
		write(t, s, b)

		requireMetas(t, []queue.ItemMeta{zeroMeta(2), fullMeta(3)}, loadItems(t, s, qa.ID, 0))
		requireMetas(t, []queue.ItemMeta{fullMeta(1), fullMeta(2), fullMeta(3)}, loadItems(t, s, qb.ID, 0))
		bodies, errs := readBodies(t, s, qb.ID, 0, 1, 2, 3)
		requireBodies(t, []queue.ItemBody{bodyFor("b", 1), bodyFor("b", 2), bodyFor("b", 3)}, bodies)
		requireErrors(t, []queue.ItemErrors{someErrors(qb.ID*10 + 1), someErrors(qb.ID*10 + 2), someErrors(qb.ID*10 + 3)}, errs)
		requireLastID(t, s, qa.ID, max(qa.ID*100, 3))
		requireLastID(t, s, qb.ID, max(qb.ID*100, 3))
	})
}

// testGroups checks item groups in the item log: an item's Group and
// GroupSeq kept by every record of its meta, and the held groups
// (OpHoldGroup, OpReleaseGroup, LoadHeldGroups) per queue and partition.
func testGroups(t *testing.T, newStore func(*testing.T) store.Store) {
	t.Run("ItemGroup", func(t *testing.T) {
		s := newStore(t)
		q := createQueue(t, s, "q", 1)
		b := &store.Batch{QueueID: q.ID}
		b.Insert(0, withGroup(plainMeta(1), "order-1", 1), fullBody(1), queue.ItemErrors{})
		b.Insert(0, withGroup(plainMeta(2), "order-1", 2), fullBody(2), queue.ItemErrors{})
		b.Insert(0, plainMeta(3), fullBody(3), queue.ItemErrors{})
		// A redriven item that took a held group's GroupSeq (before its id).
		b.Insert(0, withGroup(plainMeta(4), "order-2", 1), fullBody(4), queue.ItemErrors{})
		write(t, s, b)
		// Item 1 leased, then requeued as 5: its group and GroupSeq stay.
		b = &store.Batch{QueueID: q.ID}
		b.Lease(0, withGroup(fullMeta(1), "order-1", 1))
		write(t, s, b)
		requireMetas(t, []queue.ItemMeta{withGroup(fullMeta(1), "order-1", 1), withGroup(plainMeta(2), "order-1", 2), plainMeta(3),
			withGroup(plainMeta(4), "order-2", 1)}, loadItems(t, s, q.ID, 0))
		b = &store.Batch{QueueID: q.ID}
		b.Requeue(0, 1, withID(withGroup(plainMeta(1), "order-1", 1), 5))
		write(t, s, b)
		got := loadItems(t, s, q.ID, 0)
		require.Len(t, got, 4)
		require.Equal(t, uint64(5), got[3].ID)
		require.Equal(t, "order-1", got[3].Group)
		require.Equal(t, uint64(1), got[3].GroupSeq)
		require.Empty(t, got[1].Group)
		require.Zero(t, got[1].GroupSeq)
		items := listItems(t, s, q.ID, 0, 0, 10)
		require.Equal(t, []string{"order-1", "", "order-2", "order-1"},
			[]string{items[0].Meta.Group, items[1].Meta.Group, items[2].Meta.Group, items[3].Meta.Group})
	})
	t.Run("Held", func(t *testing.T) {
		s := newStore(t)
		q := createQueue(t, s, "q", 2)
		other := createQueue(t, s, "other", 1)
		require.Empty(t, loadHeld(t, s, q.ID))
		h := func(part int32, g, key string, seq uint64) queue.HeldGroup {
			return queue.HeldGroup{Partition: part, Group: g, DeadKey: key, Seq: seq, HeldAt: base.UnixNano() + int64(seq)}
		}
		b := &store.Batch{QueueID: q.ID}
		b.HoldGroup(h(0, "a", "explicit:q~1", 1))
		b.HoldGroup(h(1, "a", "expired:q~2", 2))
		b.HoldGroup(h(0, "b", "max_attempts:q~3", 3))
		b.ReleaseGroup(1, "nothing-held")
		write(t, s, b)
		b = &store.Batch{QueueID: other.ID}
		b.HoldGroup(h(0, "a", "explicit:other~9", 9))
		write(t, s, b)
		require.Equal(t, []queue.HeldGroup{h(0, "a", "explicit:q~1", 1), h(0, "b", "max_attempts:q~3", 3), h(1, "a", "expired:q~2", 2)},
			loadHeld(t, s, q.ID))
		// Released, and held again by another dead item.
		b = &store.Batch{QueueID: q.ID}
		b.ReleaseGroup(0, "a")
		b.HoldGroup(h(0, "b", "explicit:q~4", 4))
		write(t, s, b)
		require.Equal(t, []queue.HeldGroup{h(0, "b", "explicit:q~4", 4), h(1, "a", "expired:q~2", 2)}, loadHeld(t, s, q.ID))
		require.Equal(t, []queue.HeldGroup{h(0, "a", "explicit:other~9", 9)}, loadHeld(t, s, other.ID))
		// Deleted with the queue.
		require.NoError(t, s.DeleteQueue(t.Context(), "q"))
		again := createQueue(t, s, "q", 2)
		require.Empty(t, loadHeld(t, s, again.ID))
		require.Len(t, loadHeld(t, s, other.ID), 1)
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

func testLastID(t *testing.T, newStore func(*testing.T) store.Store) {
	s := newStore(t)
	q := createQueue(t, s, "q", 2)
	requireLastID(t, s, q.ID, 0)

	write(t, s, &store.Batch{QueueID: q.ID, LastID: 50})
	requireLastID(t, s, q.ID, 50)

	// An inserted ID above the mark raises it, even without Batch.LastID.
	b := &store.Batch{QueueID: q.ID}
	b.Insert(1, fullMeta(70), fullBody(70), queue.ItemErrors{})
	b.Insert(0, fullMeta(60), fullBody(60), queue.ItemErrors{})
	write(t, s, b)
	requireLastID(t, s, q.ID, 70)

	// Never decreases.
	write(t, s, &store.Batch{QueueID: q.ID, LastID: 10})
	requireLastID(t, s, q.ID, 70)
	b = &store.Batch{QueueID: q.ID, LastID: 5}
	b.Insert(0, fullMeta(3), fullBody(3), queue.ItemErrors{})
	write(t, s, b)
	requireLastID(t, s, q.ID, 70)

	// A requeued ID above the mark raises it.
	b = &store.Batch{QueueID: q.ID}
	b.Requeue(1, 70, withBodyID(fullMeta(90), 70))
	write(t, s, b)
	requireLastID(t, s, q.ID, 90)

	// Batch.LastID above every op's ID wins.
	b = &store.Batch{QueueID: q.ID, LastID: 200}
	b.Insert(0, fullMeta(100), fullBody(100), queue.ItemErrors{})
	write(t, s, b)
	requireLastID(t, s, q.ID, 200)

	// Deleting items does not lower it.
	b = &store.Batch{QueueID: q.ID}
	b.Delete(0, fullMeta(100), true)
	b.Delete(1, withBodyID(fullMeta(90), 70), true)
	write(t, s, b)
	requireLastID(t, s, q.ID, 200)

	other := createQueue(t, s, "other", 1)
	requireLastID(t, s, other.ID, 0)
}

func testAtomicity(t *testing.T, newStore func(*testing.T) store.Store) {
	s := newStore(t)
	ctx := t.Context()
	q := createQueue(t, s, "q", 2)
	b := &store.Batch{QueueID: q.ID, LastID: 2}
	b.Insert(0, fullMeta(1), fullBody(1), someErrors(1))
	b.Insert(1, fullMeta(2), fullBody(2), queue.ItemErrors{})
	write(t, s, b)
	before := dump(t, s)

	// A batch whose last op is invalid must change nothing.
	b = &store.Batch{QueueID: q.ID, LastID: 100}
	b.Insert(0, fullMeta(3), fullBody(3), someErrors(3))
	b.Update(0, zeroMeta(1))
	b.Delete(1, fullMeta(2), true)
	b.SetErrors(0, fullMeta(1), queue.ItemErrors{})
	b.Requeue(0, 3, withID(fullMeta(3), 4))
	b.Ops = append(b.Ops, store.Op{Kind: store.OpKind(200), Partition: 0, Meta: fullMeta(99)})
	require.Error(t, s.Write(ctx, b), "unknown op kind")
	require.Equal(t, before, dump(t, s), "a failed batch left changes behind")
	requireLastID(t, s, q.ID, 2)

	// Neither does a batch for a missing queue.
	b.Ops = b.Ops[:len(b.Ops)-1]
	b.QueueID = q.ID + 1000
	require.ErrorIs(t, s.Write(ctx, b), store.ErrQueueNotFound)
	require.Equal(t, before, dump(t, s))
	b.QueueID = q.ID

	// The same batch without the bad op applies whole.
	write(t, s, b)
	requireMetas(t, []queue.ItemMeta{zeroMeta(1), withID(fullMeta(3), 4)}, loadItems(t, s, q.ID, 0))
	require.Empty(t, loadItems(t, s, q.ID, 1))
	requireLastID(t, s, q.ID, 100)
}

func testAliasing(t *testing.T, newStore func(*testing.T) store.Store) {
	s := newStore(t)
	q := createQueue(t, s, "q", 1)
	body := fullBody(1)
	errs := someErrors(1)
	b := &store.Batch{QueueID: q.ID}
	b.Insert(0, fullMeta(1), body, errs)
	b.Insert(0, fullMeta(2), fullBody(2), queue.ItemErrors{})
	setErrs := someErrors(2)
	b.SetErrors(0, fullMeta(2), setErrs)
	write(t, s, b)

	// Mutating what was written does not reach the store.
	body.Payload[0] ^= 0xff
	errs.Errors[0].Error = "mutated"
	setErrs.Errors[1].Attempt = 99
	b.Ops = nil

	check := func() {
		t.Helper()
		bodies, errs := readBodies(t, s, q.ID, 0, 1, 2)
		requireBodies(t, []queue.ItemBody{fullBody(1), fullBody(2)}, bodies)
		requireErrors(t, []queue.ItemErrors{someErrors(1), someErrors(2)}, errs)
		items := listItems(t, s, q.ID, 0, 0, 10)
		requireItems(t, []queue.Item{
			{Meta: fullMeta(1), Body: fullBody(1), Errors: someErrors(1)},
			{Meta: fullMeta(2), Body: fullBody(2), Errors: someErrors(2)},
		}, items)
	}
	check()

	// Mutating what was read does not reach the store either.
	bodies, gotErrs := readBodies(t, s, q.ID, 0, 1)
	bodies[0].Payload[0] ^= 0xff
	gotErrs[0].Errors[0].Error = "mutated"
	items := listItems(t, s, q.ID, 0, 0, 10)
	items[1].Body.Payload[1] ^= 0xff
	items[1].Errors.Errors[0].Error = "mutated"
	check()
}

func testTasks(t *testing.T, newStore func(*testing.T) CatalogStore) {
	t.Run("PutList", func(t *testing.T) {
		s := newStore(t)
		require.Empty(t, listTasks(t, s), "new store")
		long := "m" + strings.Repeat("x", 127) // the longest ID allowed
		in := []store.TaskRecord{
			taskRecord("redrive-2", "orders-dead", 2),
			{ID: "redrive-10", Queue: "orders-dead", Data: []byte{0, 0xff, 0, 1}},
			{ID: "redrive-1"}, // no queue, no data
			taskRecord("é", "q", 5),
			taskRecord("Z", "q", 6),
			{ID: long, Queue: "q", Data: bytes.Repeat([]byte{7}, 4096)},
		}
		for _, task := range in {
			putTask(t, s, task)
		}
		// Byte order of IDs, not insertion or numeric order.
		want := slices.Clone(in)
		slices.SortFunc(want, func(a, b store.TaskRecord) int { return cmp.Compare(a.ID, b.ID) })
		var ids []string
		for _, r := range want {
			ids = append(ids, r.ID)
		}
		require.Equal(t, []string{"Z", long, "redrive-1", "redrive-10", "redrive-2", "é"}, ids)
		requireTasks(t, want, listTasks(t, s))
		requireTasks(t, want, listTasks(t, s), "second list")
	})

	t.Run("Overwrite", func(t *testing.T) {
		s := newStore(t)
		putTask(t, s, taskRecord("a", "q1", 1))
		putTask(t, s, taskRecord("b", "q1", 2))
		putTask(t, s, store.TaskRecord{ID: "a", Queue: "q2", Data: bytes.Repeat([]byte("long"), 100)})
		requireTasks(t, []store.TaskRecord{
			{ID: "a", Queue: "q2", Data: bytes.Repeat([]byte("long"), 100)},
			taskRecord("b", "q1", 2),
		}, listTasks(t, s))
		// Shorter, then empty: nothing of the old value remains.
		putTask(t, s, taskRecord("a", "q3", 3))
		requireTasks(t, []store.TaskRecord{taskRecord("a", "q3", 3), taskRecord("b", "q1", 2)}, listTasks(t, s))
		putTask(t, s, store.TaskRecord{ID: "a"})
		requireTasks(t, []store.TaskRecord{{ID: "a"}, taskRecord("b", "q1", 2)}, listTasks(t, s))
	})

	t.Run("Delete", func(t *testing.T) {
		s := newStore(t)
		ctx := t.Context()
		for _, id := range []string{"a", "b", "c"} {
			putTask(t, s, taskRecord(id, "q", 1))
		}
		require.NoError(t, s.DeleteTask(ctx, "b"))
		requireTasks(t, []store.TaskRecord{taskRecord("a", "q", 1), taskRecord("c", "q", 1)}, listTasks(t, s))
		require.NoError(t, s.DeleteTask(ctx, "b"), "already deleted")
		require.NoError(t, s.DeleteTask(ctx, "never"), "unknown id")
		require.NoError(t, s.DeleteTask(ctx, "a\x00"), "unknown id sharing a prefix")
		requireTasks(t, []store.TaskRecord{taskRecord("a", "q", 1), taskRecord("c", "q", 1)}, listTasks(t, s))
		require.NoError(t, s.DeleteTask(ctx, "a"))
		require.NoError(t, s.DeleteTask(ctx, "c"))
		require.Empty(t, listTasks(t, s))
		// A deleted ID can be put again.
		putTask(t, s, taskRecord("b", "q", 2))
		requireTasks(t, []store.TaskRecord{taskRecord("b", "q", 2)}, listTasks(t, s))
	})

	t.Run("Aliasing", func(t *testing.T) {
		s := newStore(t)
		in := taskRecord("a", "q", 1)
		putTask(t, s, in)
		// Mutating what was put does not reach the store.
		in.Data[0] ^= 0xff
		requireTasks(t, []store.TaskRecord{taskRecord("a", "q", 1)}, listTasks(t, s))
		// Nor does mutating what was listed.
		got := listTasks(t, s)
		got[0].Data[0] ^= 0xff
		got[0].Data = append(got[0].Data[:1], "appended"...)
		requireTasks(t, []store.TaskRecord{taskRecord("a", "q", 1)}, listTasks(t, s))
	})

	t.Run("IndependentOfQueues", func(t *testing.T) {
		s := newStore(t)
		ctx := t.Context()
		q := createQueue(t, s, "dlq", 1)
		items, hasItems := s.(store.Store)
		if hasItems {
			b := &store.Batch{QueueID: q.ID}
			b.Insert(0, fullMeta(1), deadBody(1), queue.ItemErrors{})
			write(t, items, b)
		}
		putTask(t, s, taskRecord("r1", "dlq", 1))
		putTask(t, s, taskRecord("r2", "missing", 2)) // its queue need not exist
		want := []store.TaskRecord{taskRecord("r1", "dlq", 1), taskRecord("r2", "missing", 2)}

		require.NoError(t, s.DeleteQueue(ctx, "dlq"))
		requireTasks(t, want, listTasks(t, s), "after DeleteQueue")
		q = createQueue(t, s, "dlq", 1)
		if hasItems {
			require.Empty(t, loadItems(t, items, q.ID, 0))
		}
		requireTasks(t, want, listTasks(t, s), "after re-creating the queue")

		// Tasks are not queues either.
		qs, err := s.ListQueues(ctx, queue.ListQueuesParams{})
		require.NoError(t, err)
		require.Len(t, qs, 1)
		_, err = s.GetQueue(ctx, "r1")
		require.ErrorIs(t, err, store.ErrQueueNotFound)
		// And deleting them leaves queues alone.
		require.NoError(t, s.DeleteTask(ctx, "r1"))
		require.NoError(t, s.DeleteTask(ctx, "r2"))
		_, err = s.GetQueue(ctx, "dlq")
		require.NoError(t, err)
	})
}

func testConcurrent(t *testing.T, newStore func(*testing.T) store.Store) {
	s := newStore(t)
	ctx := t.Context()
	const (
		queues  = 4
		batches = 40
		perB    = 5
	)
	var qs []queue.QueueInfo
	for i := range queues {
		qs = append(qs, createQueue(t, s, fmt.Sprint("q", i), 2))
	}

	var wg sync.WaitGroup
	errc := make(chan error, 4*queues+2)
	for _, q := range qs {
		// The owner writes.
		wg.Go(func() {
			id := uint64(0)
			for range batches {
				b := &store.Batch{QueueID: q.ID}
				for range perB {
					id++
					b.Insert(int32(id%2), fullMeta(id), fullBody(id), queue.ItemErrors{})
				}
				b.Delete(int32(id%2), fullMeta(id), true) // the last of each batch
				b.LastID = id
				if err := s.Write(ctx, b); err != nil {
					errc <- err
					return
				}
			}
		})
		// Readers list beside it.
		wg.Go(func() {
			for range batches {
				for p := int32(0); p < 2; p++ {
					items, err := s.ListItems(ctx, q.ID, p, 0, 1000)
					if err != nil {
						errc <- err
						return
					}
					for i := 1; i < len(items); i++ {
						if items[i-1].Meta.ID >= items[i].Meta.ID {
							errc <- fmt.Errorf("ListItems out of order: %d then %d", items[i-1].Meta.ID, items[i].Meta.ID)
							return
						}
					}
				}
			}
		})
	}
	// Tasks change meanwhile.
	wg.Go(func() {
		for i := range 20 {
			if err := s.PutTask(ctx, taskRecord(fmt.Sprintf("task-%02d", i), "q0", uint64(i))); err != nil {
				errc <- err
				return
			}
			tasks, err := s.ListTasks(ctx)
			if err != nil {
				errc <- err
				return
			}
			for j := 1; j < len(tasks); j++ {
				if tasks[j-1].ID >= tasks[j].ID {
					errc <- fmt.Errorf("ListTasks out of order: %q then %q", tasks[j-1].ID, tasks[j].ID)
					return
				}
			}
			if i%2 == 1 {
				if err := s.DeleteTask(ctx, fmt.Sprintf("task-%02d", i-1)); err != nil {
					errc <- err
					return
				}
			}
		}
	})
	// Catalog changes go on meanwhile.
	wg.Go(func() {
		for i := range 20 {
			name := fmt.Sprint("tmp", i%3)
			if _, err := s.CreateQueue(ctx, queue.QueueInfo{Name: name, Partitions: 1}); err != nil && !errors.Is(err, store.ErrQueueExists) {
				errc <- err
				return
			}
			if _, err := s.ListQueues(ctx, queue.ListQueuesParams{}); err != nil {
				errc <- err
				return
			}
			if i%2 == 1 {
				if err := s.DeleteQueue(ctx, name); err != nil && !errors.Is(err, store.ErrQueueNotFound) {
					errc <- err
					return
				}
			}
		}
	})
	wg.Wait()
	close(errc)
	for err := range errc {
		require.NoError(t, err)
	}

	for _, q := range qs {
		n := 0
		for p := int32(0); p < 2; p++ {
			n += len(loadItems(t, s, q.ID, p))
		}
		require.Equal(t, batches*(perB-1), n, "queue %s", q.Name)
		requireLastID(t, s, q.ID, batches*perB)
	}
	var wantTasks []store.TaskRecord
	for i := 1; i < 20; i += 2 {
		wantTasks = append(wantTasks, taskRecord(fmt.Sprintf("task-%02d", i), "q0", uint64(i)))
	}
	requireTasks(t, wantTasks, listTasks(t, s))
}

func testClosed(t *testing.T, newStore func(*testing.T) store.Store) {
	s := newStore(t)
	ctx := t.Context()
	q := createQueue(t, s, "q", 1)
	b := &store.Batch{QueueID: q.ID}
	b.Insert(0, fullMeta(1), fullBody(1), queue.ItemErrors{})
	write(t, s, b)
	putTask(t, s, taskRecord("t", "q", 1))
	require.NoError(t, s.Close())

	_, err := s.CreateQueue(ctx, queue.QueueInfo{Name: "new", Partitions: 1})
	require.ErrorIs(t, err, store.ErrClosed, "CreateQueue")
	require.ErrorIs(t, s.UpdateQueue(ctx, q), store.ErrClosed, "UpdateQueue")
	_, err = s.GetQueue(ctx, "q")
	require.ErrorIs(t, err, store.ErrClosed, "GetQueue")
	_, err = s.ListQueues(ctx, queue.ListQueuesParams{})
	require.ErrorIs(t, err, store.ErrClosed, "ListQueues")
	require.ErrorIs(t, s.DeleteQueue(ctx, "q"), store.ErrClosed, "DeleteQueue")
	err = s.LoadItems(ctx, q.ID, 0, func(queue.ItemMeta) error { return nil })
	require.ErrorIs(t, err, store.ErrClosed, "LoadItems")
	_, err = s.LastID(ctx, q.ID)
	require.ErrorIs(t, err, store.ErrClosed, "LastID")
	require.ErrorIs(t, s.Write(ctx, b), store.ErrClosed, "Write")
	_, _, err = s.ReadBodies(ctx, q.ID, 0, []uint64{1})
	require.ErrorIs(t, err, store.ErrClosed, "ReadBodies")
	_, err = s.ListItems(ctx, q.ID, 0, 0, 10)
	require.ErrorIs(t, err, store.ErrClosed, "ListItems")
	_, _, err = s.ReadBodiesWithin(ctx, q.ID, 0, []uint64{1}, 1)
	require.ErrorIs(t, err, store.ErrClosed, "ReadBodiesWithin")
	_, err = s.ListItemsWithin(ctx, q.ID, 0, 0, 10, 1)
	require.ErrorIs(t, err, store.ErrClosed, "ListItemsWithin")
	require.ErrorIs(t, s.PutTask(ctx, taskRecord("t", "q", 2)), store.ErrClosed, "PutTask")
	_, err = s.ListTasks(ctx)
	require.ErrorIs(t, err, store.ErrClosed, "ListTasks")
	require.ErrorIs(t, s.DeleteTask(ctx, "t"), store.ErrClosed, "DeleteTask")
	require.ErrorIs(t, s.Close(), store.ErrClosed, "second Close")
}

// requireItemMethodsNotFound checks that every item method reports
// ErrQueueNotFound for queueID.
func requireItemMethodsNotFound(t *testing.T, s store.Store, queueID uint64) {
	t.Helper()
	ctx := t.Context()
	err := s.LoadItems(ctx, queueID, 0, func(queue.ItemMeta) error { return nil })
	require.ErrorIs(t, err, store.ErrQueueNotFound, "LoadItems")
	_, err = s.LastID(ctx, queueID)
	require.ErrorIs(t, err, store.ErrQueueNotFound, "LastID")
	b := &store.Batch{QueueID: queueID, LastID: 5}
	b.Insert(0, fullMeta(1), fullBody(1), queue.ItemErrors{})
	require.ErrorIs(t, s.Write(ctx, b), store.ErrQueueNotFound, "Write")
	_, _, err = s.ReadBodies(ctx, queueID, 0, []uint64{1})
	require.ErrorIs(t, err, store.ErrQueueNotFound, "ReadBodies")
	_, err = s.ListItems(ctx, queueID, 0, 0, 10)
	require.ErrorIs(t, err, store.ErrQueueNotFound, "ListItems")
	_, _, err = s.ReadBodiesWithin(ctx, queueID, 0, []uint64{1}, 1)
	require.ErrorIs(t, err, store.ErrQueueNotFound, "ReadBodiesWithin")
	_, err = s.ListItemsWithin(ctx, queueID, 0, 0, 10, 1)
	require.ErrorIs(t, err, store.ErrQueueNotFound, "ListItemsWithin")
	err = s.LoadHeldGroups(ctx, queueID, func(queue.HeldGroup) error { return nil })
	require.ErrorIs(t, err, store.ErrQueueNotFound, "LoadHeldGroups")
}

// queueDump is a store's observable state for one queue.
type queueDump struct {
	Info   queue.QueueInfo
	LastID uint64
	// Loaded and Listed hold, per partition, what LoadItems and ListItems
	// return (normalised).
	Loaded [][]queue.ItemMeta
	Listed [][]queue.Item
}

// dump reads every queue's observable state, in name order. Partitions
// 0..Partitions-1 are read.
func dump(t *testing.T, s store.Store) []queueDump {
	t.Helper()
	qs, err := s.ListQueues(t.Context(), queue.ListQueuesParams{})
	require.NoError(t, err)
	out := make([]queueDump, 0, len(qs))
	for _, q := range qs {
		d := queueDump{Info: normInfo(q)}
		d.LastID, err = s.LastID(t.Context(), q.ID)
		require.NoError(t, err)
		for p := range q.Partitions {
			var metas []queue.ItemMeta
			for _, m := range loadItems(t, s, q.ID, p) {
				metas = append(metas, normMeta(m))
			}
			var items []queue.Item
			for _, it := range listItems(t, s, q.ID, p, 0, 1<<20) {
				items = append(items, normItem(it))
			}
			d.Loaded = append(d.Loaded, metas)
			d.Listed = append(d.Listed, items)
		}
		out = append(out, d)
	}
	return out
}

// Fixtures.

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

// fullMeta sets every field but SourceKey and the dead-letter ones, with
// times a few nanoseconds apart.
func fullMeta(id uint64) queue.ItemMeta {
	created := base.Add(time.Duration(id) * time.Nanosecond)
	return queue.ItemMeta{
		ID:             id,
		BodyID:         id,
		Attempts:       3,
		Leased:         true,
		LeaseDeadline:  created.Add(time.Minute + 1),
		EnqueueAt:      created.Add(-time.Hour + 7),
		ExpireDeadline: created.Add(24*time.Hour + 3),
		CreatedAt:      created,
	}
}

// withGroup returns m in group g at GroupSeq seq.
func withGroup(m queue.ItemMeta, g string, seq uint64) queue.ItemMeta {
	m.Group, m.GroupSeq = g, seq
	return m
}

// plainMeta is a fresh ready item: only CreatedAt and ExpireDeadline set.
func plainMeta(id uint64) queue.ItemMeta {
	created := base.Add(time.Duration(id) * time.Millisecond)
	return queue.ItemMeta{ID: id, BodyID: id, CreatedAt: created, ExpireDeadline: created.Add(time.Hour)}
}

// zeroMeta has only its ids set.
func zeroMeta(id uint64) queue.ItemMeta { return queue.ItemMeta{ID: id, BodyID: id} }

// oddTimesMeta has times in other locations, before 1970, far ahead, and
// one with a monotonic clock reading.
func oddTimesMeta(id uint64) queue.ItemMeta {
	m := fullMeta(id)
	m.CreatedAt = time.Date(1969, 7, 20, 20, 17, 40, 1, time.FixedZone("X", -5*3600))
	m.LeaseDeadline = time.Now()
	m.EnqueueAt = time.Date(2200, 1, 1, 0, 0, 0, 999999999, time.UTC)
	m.ExpireDeadline = time.Unix(0, 1).In(time.Local)
	m.Attempts = -1
	m.BodyID = id + 1000
	m.SourceKey = "q-with-long-name.x~" + fmt.Sprint(id)
	m.Fingerprint = "0123456789abcdef"
	m.DeadReason = "explicit"
	m.DeadAt = time.Now()
	return m
}

// dyingMeta is an item the logical queue has decided is dead, not yet
// moved.
func dyingMeta(id uint64) queue.ItemMeta {
	m := fullMeta(id)
	m.Leased = false
	m.LeaseDeadline = time.Time{}
	return withDead(m, "max_attempts", m.CreatedAt.Add(90*time.Second+7))
}

func withDead(m queue.ItemMeta, reason string, at time.Time) queue.ItemMeta {
	m.DeadReason, m.DeadAt = reason, at
	return m
}

func withID(m queue.ItemMeta, id uint64) queue.ItemMeta { m.ID = id; return m }

func withBodyID(m queue.ItemMeta, bodyID uint64) queue.ItemMeta { m.BodyID = bodyID; return m }

func withSourceKey(m queue.ItemMeta, key string) queue.ItemMeta { m.SourceKey = key; return m }

// fullBody is a body with every field set; odd ids also carry Attributes
// (ADR 0016), so bodies with and without them are both stored.
func fullBody(id uint64) queue.ItemBody {
	b := queue.ItemBody{
		Reference: fmt.Sprint("ref-", id),
		Kind:      "kind",
		Encoding:  "application/octet-stream",
		Payload:   []byte{byte(id), 0, 0xff, byte(id >> 8), 'p', 'a', 'y', 0x80},
	}
	if id%2 == 1 {
		b.Attributes = []byte{'a', byte(id), 0}
	}
	return b
}

func bodyFor(queue string, id uint64) queue.ItemBody {
	b := fullBody(id)
	b.Payload = append(b.Payload, queue...)
	b.Kind = queue
	return b
}

// deadBody sets every field, dead-letter ones included.
func deadBody(id uint64) queue.ItemBody {
	b := fullBody(id)
	b.SourceQueue = "source"
	b.SourceID = fmt.Sprint(id * 7)
	b.DeadReason = "max_attempts"
	b.DeadAt = base.Add(-time.Duration(id))
	b.RedriveCount = 2
	b.Payload = make([]byte, 300) // longer than a one-byte varint length
	for i := range b.Payload {
		b.Payload[i] = byte(i)
	}
	return b
}

func someErrors(seed uint64) queue.ItemErrors {
	return queue.ItemErrors{
		LastError: fmt.Sprint("boom ", seed, " again"),
		Errors: []queue.AttemptError{
			{Attempt: 1, Error: fmt.Sprint("boom ", seed), At: base.Add(time.Duration(seed) * time.Second)},
			{Attempt: 2, Error: "", At: time.Time{}},
			{Attempt: 3, Error: fmt.Sprint("boom ", seed, " again"), At: base.Add(time.Duration(seed)*time.Second + 1)},
		},
	}
}

// Store helpers.

// taskRecord is a task whose Data derives from seed.
func taskRecord(id, queue string, seed uint64) store.TaskRecord {
	return store.TaskRecord{ID: id, Queue: queue, Data: fmt.Appendf(nil, "task %s data %d\x00\xff", id, seed)}
}

func putTask(t *testing.T, s store.TaskStore, task store.TaskRecord) {
	t.Helper()
	require.NoError(t, s.PutTask(t.Context(), task))
}

func listTasks(t *testing.T, s store.TaskStore) []store.TaskRecord {
	t.Helper()
	tasks, err := s.ListTasks(t.Context())
	require.NoError(t, err)
	return tasks
}

func write(t *testing.T, s store.Store, b *store.Batch) {
	t.Helper()
	require.NoError(t, s.Write(t.Context(), b))
}

// loadHeld returns the queue's held groups by partition and group.
func loadHeld(t *testing.T, s store.Store, queueID uint64) []queue.HeldGroup {
	t.Helper()
	var out []queue.HeldGroup
	require.NoError(t, s.LoadHeldGroups(t.Context(), queueID, func(h queue.HeldGroup) error {
		out = append(out, h)
		return nil
	}))
	slices.SortFunc(out, func(a, b queue.HeldGroup) int {
		return cmp.Or(cmp.Compare(a.Partition, b.Partition), cmp.Compare(a.Group, b.Group))
	})
	return out
}

func loadItems(t *testing.T, s store.Store, queueID uint64, partition int32) []queue.ItemMeta {
	t.Helper()
	var out []queue.ItemMeta
	err := s.LoadItems(t.Context(), queueID, partition, func(m queue.ItemMeta) error {
		out = append(out, m)
		return nil
	})
	require.NoError(t, err)
	for i := 1; i < len(out); i++ {
		require.Less(t, out[i-1].ID, out[i].ID, "LoadItems not in ID order")
	}
	return out
}

func listItems(t *testing.T, s store.Store, queueID uint64, partition int32, afterID uint64, limit int) []queue.Item {
	t.Helper()
	items, err := s.ListItems(t.Context(), queueID, partition, afterID, limit)
	require.NoError(t, err)
	require.LessOrEqual(t, len(items), limit)
	for i, it := range items {
		require.Equal(t, partition, it.Partition, "Item.Partition")
		require.Greater(t, it.Meta.ID, afterID)
		if i > 0 {
			require.Less(t, items[i-1].Meta.ID, it.Meta.ID, "ListItems not in ID order")
		}
	}
	return items
}

func readBodies(t *testing.T, s store.Store, queueID uint64, partition int32, bodyIDs ...uint64) ([]queue.ItemBody, []queue.ItemErrors) {
	t.Helper()
	bodies, errs, err := s.ReadBodies(t.Context(), queueID, partition, bodyIDs)
	require.NoError(t, err)
	require.Len(t, bodies, len(bodyIDs))
	require.Len(t, errs, len(bodyIDs))
	return bodies, errs
}

func requireLastID(t *testing.T, s store.Store, queueID, want uint64) {
	t.Helper()
	got, err := s.LastID(t.Context(), queueID)
	require.NoError(t, err)
	require.Equal(t, want, got, "LastID")
}

// Comparison: values are normalised (times to UTC without monotonic
// reading, empty slices to nil) and compared with require.Equal for
// readable diffs.

func requireInfo(t *testing.T, want, got queue.QueueInfo) {
	t.Helper()
	require.Equal(t, normInfo(want), normInfo(got))
}

func requireMetas(t *testing.T, want, got []queue.ItemMeta) {
	t.Helper()
	require.Equal(t, mapSlice(want, normMeta), mapSlice(got, normMeta))
}

func requireBodies(t *testing.T, want, got []queue.ItemBody) {
	t.Helper()
	require.Equal(t, mapSlice(want, normBody), mapSlice(got, normBody))
}

func requireErrors(t *testing.T, want, got []queue.ItemErrors) {
	t.Helper()
	require.Equal(t, mapSlice(want, normErrors), mapSlice(got, normErrors))
}

func requireTasks(t *testing.T, want, got []store.TaskRecord, msg ...any) {
	t.Helper()
	require.Equal(t, mapSlice(want, normTask), mapSlice(got, normTask), msg...)
}

func requireItem(t *testing.T, want, got queue.Item) {
	t.Helper()
	require.Equal(t, normItem(want), normItem(got))
}

func requireItems(t *testing.T, want, got []queue.Item, msg ...any) {
	t.Helper()
	require.Equal(t, mapSlice(want, normItem), mapSlice(got, normItem), msg...)
}

func mapSlice[T any](in []T, f func(T) T) []T {
	if len(in) == 0 {
		return nil
	}
	out := make([]T, len(in))
	for i, v := range in {
		out[i] = f(v)
	}
	return out
}

// mapSlice2 maps in through f into a new slice.
func mapSlice2[T, U any](in []T, f func(T) U) []U {
	out := make([]U, len(in))
	for i, v := range in {
		out[i] = f(v)
	}
	return out
}

func normTime(t time.Time) time.Time { return t.Round(0).UTC() }

func normInfo(q queue.QueueInfo) queue.QueueInfo {
	q.CreatedAt = normTime(q.CreatedAt)
	q.UpdatedAt = normTime(q.UpdatedAt)
	return q
}

func normMeta(m queue.ItemMeta) queue.ItemMeta {
	m.LeaseDeadline = normTime(m.LeaseDeadline)
	m.EnqueueAt = normTime(m.EnqueueAt)
	m.ExpireDeadline = normTime(m.ExpireDeadline)
	m.CreatedAt = normTime(m.CreatedAt)
	m.DeadAt = normTime(m.DeadAt)
	return m
}

func normBody(b queue.ItemBody) queue.ItemBody {
	if len(b.Payload) == 0 {
		b.Payload = nil
	}
	b.DeadAt = normTime(b.DeadAt)
	return b
}

func normErrors(e queue.ItemErrors) queue.ItemErrors {
	e.Errors = mapSlice(e.Errors, func(a queue.AttemptError) queue.AttemptError {
		a.At = normTime(a.At)
		return a
	})
	return e
}

func normTask(r store.TaskRecord) store.TaskRecord {
	if len(r.Data) == 0 {
		r.Data = nil
	}
	return r
}

func normItem(it queue.Item) queue.Item {
	it.Meta = normMeta(it.Meta)
	it.Body = normBody(it.Body)
	it.Errors = normErrors(it.Errors)
	return it
}

package storetest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/queue"
	"github.com/styxq/styx/internal/store"
)

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
			for _, item := range listItems(t, s, q.ID, p, 0, 1<<20) {
				items = append(items, normItem(item))
			}
			d.Loaded = append(d.Loaded, metas)
			d.Listed = append(d.Listed, items)
		}
		out = append(out, d)
	}
	return out
}

// Fixtures.

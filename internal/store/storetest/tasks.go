package storetest

import (
	"bytes"
	"cmp"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/queue"
	"github.com/styxq/styx/internal/store"
)

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

func requireTasks(t *testing.T, want, got []store.TaskRecord, msg ...any) {
	t.Helper()
	require.Equal(t, mapSlice(want, normTask), mapSlice(got, normTask), msg...)
}

func normTask(r store.TaskRecord) store.TaskRecord {
	if len(r.Data) == 0 {
		r.Data = nil
	}
	return r
}

package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/queue"
	"github.com/styxq/styx/internal/store"
)

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

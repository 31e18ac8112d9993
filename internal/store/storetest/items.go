package storetest

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/queue"
	"github.com/styxq/styx/internal/store"
)

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
			for _, item := range items {
				listed = append(listed, item.Meta)
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

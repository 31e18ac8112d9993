package storetest

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/queue"
	"github.com/styxq/styx/internal/store"
)

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

func requireLastID(t *testing.T, s store.Store, queueID, want uint64) {
	t.Helper()
	got, err := s.LastID(t.Context(), queueID)
	require.NoError(t, err)
	require.Equal(t, want, got, "LastID")
}

// Comparison: values are normalised (times to UTC without monotonic
// reading, empty slices to nil) and compared with require.Equal for
// readable diffs.

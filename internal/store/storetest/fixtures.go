package storetest

import (
	"cmp"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/queue"
	"github.com/styxq/styx/internal/store"
)

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
	for i, item := range items {
		require.Equal(t, partition, item.Partition, "Item.Partition")
		require.Greater(t, item.Meta.ID, afterID)
		if i > 0 {
			require.Less(t, items[i-1].Meta.ID, item.Meta.ID, "ListItems not in ID order")
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

func normItem(it queue.Item) queue.Item {
	it.Meta = normMeta(it.Meta)
	it.Body = normBody(it.Body)
	it.Errors = normErrors(it.Errors)
	return it
}

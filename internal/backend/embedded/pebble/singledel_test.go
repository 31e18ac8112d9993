package pebble

import (
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	pebbledb "github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/queue"
	"github.com/styxq/styx/internal/store"
)

// compactAll flushes the memtable and compacts every key to the bottom
// level, so that each SingleDelete meets the Sets it deletes.
func compactAll(t *testing.T, s *Store) {
	t.Helper()
	require.NoError(t, s.db.Flush())
	require.NoError(t, s.db.Compact(t.Context(), []byte{0}, []byte{0xff}, false))
}

// TestRecordsWrittenOnceVanish runs every kind of change an item goes
// through (insert, lease, renewal, dead decision, requeue, a new history,
// an edited body, delete) across several flushes, then compacts: nothing
// of the items is left, and Pebble saw no SingleDelete meet a record set
// twice, nor one that deleted nothing (ADR 0020).
func TestRecordsWrittenOnceVanish(t *testing.T) {
	s := openTest(t, t.TempDir())
	ctx := t.Context()
	q, err := s.CreateQueue(ctx, queue.QueueInfo{Name: "q", Partitions: 1})
	require.NoError(t, err)
	write := func(fn func(b *store.Batch)) {
		t.Helper()
		b := &store.Batch{QueueID: q.ID}
		fn(b)
		require.NoError(t, s.Write(ctx, b))
	}
	meta := func(id uint64) queue.ItemMeta { return queue.ItemMeta{ID: id, BodyID: id, CreatedAt: t0} }
	leased := func(m queue.ItemMeta, d time.Duration) queue.ItemMeta {
		m.Attempts++
		m.Leased, m.LeaseDeadline = true, t0.Add(d)
		return m
	}
	body := queue.ItemBody{Payload: []byte("payload")}
	write(func(b *store.Batch) {
		for id := uint64(1); id <= 6; id++ {
			b.InsertBody(0, meta(id), &body)
		}
	})
	require.NoError(t, s.db.Flush())
	write(func(b *store.Batch) {
		for id := uint64(1); id <= 5; id++ {
			b.Lease(0, leased(meta(id), time.Minute))
		}
	})
	require.NoError(t, s.db.Flush())
	dying := withDead(meta(3), "max_attempts")
	requeued := queue.ItemMeta{ID: 7, BodyID: 4, CreatedAt: t0, Attempts: 1}
	write(func(b *store.Batch) {
		b.Update(0, leased(meta(2), 2*time.Minute)) // renewed
		b.Update(0, dying)
		b.SetErrors(0, requeued, queue.ItemErrors{LastError: "failed"})
		b.Requeue(0, 4, requeued)
		b.SetBody(0, meta(5), queue.ItemBody{Payload: []byte("edited")})
	})
	require.NoError(t, s.db.Flush())
	write(func(b *store.Batch) {
		b.Update(0, leased(meta(2), 3*time.Minute)) // renewed again
		b.Lease(0, leased(requeued, time.Minute))
	})
	write(func(b *store.Batch) {
		b.Delete(0, leased(meta(1), time.Minute), false)
		b.Delete(0, leased(meta(2), 3*time.Minute), false)
		b.Delete(0, dying, false)
		b.Delete(0, leased(meta(5), time.Minute), true) // its body was edited
		b.Delete(0, meta(6), false)
		b.Delete(0, leased(requeued, time.Minute), true)
	})
	compactAll(t, s)
	require.Equal(t, []string{"catalog \"q\"", lastIDKey(q.ID)}, queueKeys(t, s, q.ID, "q"))
	require.Zero(t, s.misused.Load(), "SingleDelete of a record set twice")
	require.Zero(t, s.ineffectual.Load(), "SingleDelete of nothing")
}

func withDead(m queue.ItemMeta, reason string) queue.ItemMeta {
	m.Attempts = 1
	m.DeadReason, m.DeadAt = reason, t0.Add(time.Hour)
	return m
}

func lastIDKey(qid uint64) string { return fmt.Sprintf("%x", queueKey(prefixLastID, qid)) }

// TestUpgradeFromFormat1 opens a store written in format 1, where a lease
// rewrote the item's meta in place and dead.edit its body, each record's
// versions in separate levels: Open upgrades it (marker, legacy IDs), the
// old records are deleted with Delete, so no older version comes back
// after compactions, and new items are deleted with SingleDelete.
func TestUpgradeFromFormat1(t *testing.T) {
	dir := t.TempDir()
	db, err := pebbledb.Open(dir, &pebbledb.Options{FormatMajorVersion: pebbledb.FormatNewest})
	require.NoError(t, err)
	set := func(key, value []byte) { require.NoError(t, db.Set(key, value, pebbledb.Sync)) }
	info := queue.QueueInfo{ID: 1, Name: "q", Partitions: 1, Namespace: queue.DefaultNamespace}
	v, err := appendQueueInfo(nil, &info)
	require.NoError(t, err)
	set(formatKey, []byte(formatV1Value))
	set(queueSeqKey, binary.BigEndian.AppendUint64(nil, 1))
	set(catalogKey("q"), v)
	set(queueKey(prefixLastID, 1), binary.BigEndian.AppendUint64(nil, 2))
	var kbuf [itemKeyLen]byte
	setMeta := func(m queue.ItemMeta) {
		v, err := appendMeta(nil, &m)
		require.NoError(t, err)
		set(itemKey(&kbuf, prefixMeta, 1, 0, m.ID), v)
	}
	setBody := func(id uint64, payload string) {
		v, err := appendBody(nil, &queue.ItemBody{Payload: []byte(payload)})
		require.NoError(t, err)
		set(itemKey(&kbuf, prefixBody, 1, 0, id), v)
	}
	ready := func(id uint64) queue.ItemMeta { return queue.ItemMeta{ID: id, BodyID: id, CreatedAt: t0} }
	lease := ready(1)
	lease.Attempts, lease.Leased, lease.LeaseDeadline = 1, true, t0.Add(time.Minute)
	setMeta(ready(1))
	setMeta(ready(2))
	setBody(1, "one")
	setBody(2, "two")
	require.NoError(t, db.Flush())
	require.NoError(t, db.Compact(t.Context(), []byte{0}, []byte{0xff}, false))
	setMeta(lease)       // format 1's lease: the meta rewritten
	setBody(2, "edited") // format 1's dead.edit: the body rewritten
	require.NoError(t, db.Flush())
	require.NoError(t, db.Close())

	s := openTest(t, dir)
	v, err = s.get(formatKey)
	require.NoError(t, err)
	require.Equal(t, formatValue, string(v))
	require.Equal(t, uint64(2), s.queues[1].legacy)
	var got []queue.ItemMeta
	require.NoError(t, s.LoadItems(t.Context(), 1, 0, func(m queue.ItemMeta) error { got = append(got, m); return nil }))
	require.Len(t, got, 2)
	require.True(t, got[0].Leased)
	bodies, _, err := s.ReadBodies(t.Context(), 1, 0, []uint64{2})
	require.NoError(t, err)
	require.Equal(t, "edited", string(bodies[0].Payload))

	// A new item beside the old ones, then every item deleted.
	b := &store.Batch{QueueID: 1}
	b.Insert(0, ready(3), queue.ItemBody{Payload: []byte("three")}, queue.ItemErrors{})
	b.Lease(0, queue.ItemMeta{ID: 3, BodyID: 3, CreatedAt: t0, Attempts: 1, Leased: true, LeaseDeadline: t0.Add(time.Minute)})
	require.NoError(t, s.Write(t.Context(), b))
	b = &store.Batch{QueueID: 1}
	b.Delete(0, lease, true)
	b.Delete(0, ready(2), true)
	b.Delete(0, queue.ItemMeta{ID: 3, BodyID: 3, CreatedAt: t0, Attempts: 1, Leased: true, LeaseDeadline: t0.Add(time.Minute)}, false)
	require.NoError(t, s.Write(t.Context(), b))
	compactAll(t, s)
	got = nil
	require.NoError(t, s.LoadItems(t.Context(), 1, 0, func(m queue.ItemMeta) error { got = append(got, m); return nil }))
	require.Empty(t, got)
	bodies, _, err = s.ReadBodies(t.Context(), 1, 0, []uint64{1, 2, 3})
	require.NoError(t, err)
	require.Equal(t, make([]queue.ItemBody, 3), bodies)
	require.Zero(t, s.misused.Load())

	// Reopened: format 2, the legacy ID kept.
	require.NoError(t, s.Close())
	s = openTest(t, dir)
	require.Equal(t, uint64(2), s.queues[1].legacy)
}

// TestUpgradeWaitsForWritable: a format 1 store opened read-only (below its
// free-space watermark) keeps its marker, takes its queues' last IDs as
// legacy in memory, and is upgraded once it heals to read-write.
func TestUpgradeWaitsForWritable(t *testing.T) {
	mem := vfs.NewMem()
	s, err := Open(Config{Dir: "db", FS: mem, Logger: quiet})
	require.NoError(t, err)
	q, err := s.CreateQueue(t.Context(), queue.QueueInfo{Name: "q", Partitions: 1})
	require.NoError(t, err)
	require.NoError(t, insert(s, q.ID, 1, 3))
	require.NoError(t, s.Close())
	db, err := pebbledb.Open("db", &pebbledb.Options{FS: mem, FormatMajorVersion: pebbledb.FormatNewest})
	require.NoError(t, err)
	require.NoError(t, db.Set(formatKey, []byte(formatV1Value), pebbledb.Sync))
	require.NoError(t, db.Close())

	mem.TestingSetDiskUsage(vfs.DiskUsage{AvailBytes: 1 << 20, TotalBytes: 1 << 30})
	s, err = Open(Config{Dir: "db", FS: mem, Logger: quiet, MinFreeBytes: 64 << 20, CheckInterval: 10 * time.Millisecond})
	require.NoError(t, err)
	defer s.Close()
	require.Equal(t, uint64(3), s.queues[q.ID].legacy)
	v, err := s.get(formatKey)
	require.NoError(t, err)
	require.Equal(t, formatV1Value, string(v))

	mem.TestingSetDiskUsage(vfs.DiskUsage{AvailBytes: 1 << 29, TotalBytes: 1 << 30})
	require.Eventually(t, func() bool { return s.InsertFault() == nil }, 10*time.Second, 10*time.Millisecond)
	require.NoError(t, insert(s, q.ID, 10, 1))
	v, err = s.get(formatKey)
	require.NoError(t, err)
	require.Equal(t, formatValue, string(v))
	v, err = s.get(queueKey(prefixLegacy, q.ID))
	require.NoError(t, err)
	require.Equal(t, binary.BigEndian.AppendUint64(nil, 3), v)
}

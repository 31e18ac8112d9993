package pebble_test

import (
	"testing"
	"time"

	"github.com/styxq/styx/internal/backend/embedded/pebble"
	"github.com/styxq/styx/internal/queue"
	"github.com/styxq/styx/internal/store"
)

// benchMeta is a realistic item: ready, with an expiry; every tenth one
// leased and retried, every hundredth requeued (BodyID ≠ ID).
func benchMeta(id uint64, now time.Time) queue.ItemMeta {
	created := now.Add(time.Duration(id) * time.Microsecond)
	m := queue.ItemMeta{ID: id, BodyID: id, CreatedAt: created, ExpireDeadline: created.Add(24 * time.Hour)}
	if id%10 == 0 {
		m.Leased, m.Attempts, m.LeaseDeadline = true, 2, created.Add(time.Minute)
	}
	if id%100 == 0 {
		m.BodyID = id - 50
	}
	return m
}

// benchMemoryQueue opens an in-memory store (no fsync), closed when b
// ends, with one queue of one partition.
func benchMemoryQueue(b *testing.B) (*pebble.Store, queue.QueueInfo) {
	b.Helper()
	s, err := pebble.Open(pebble.Config{InMemory: true, Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	q, err := s.CreateQueue(b.Context(), queue.QueueInfo{Name: "bench", Partitions: 1})
	if err != nil {
		b.Fatal(err)
	}
	return s, q
}

func benchOpen(b *testing.B, dir string, sync bool) *pebble.Store {
	b.Helper()
	s, err := pebble.Open(pebble.Config{Dir: dir, NoSync: !sync, Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	return s
}

// BenchmarkLoadItems1M times start-up's scan of 1,000,000 items in one
// partition, read back from disk after a re-open. Setup (1M inserts with
// 64-byte payloads in batches of 1000, sync off) is not timed. The open-ms
// metric is the re-open's duration; it is inflated by the bulk load's
// compaction debt, which Pebble's Open waits on.
//
//	go test -run '^$' -bench LoadItems1M -benchtime 5x ./internal/backend/embedded/pebble/
func BenchmarkLoadItems1M(b *testing.B) {
	const (
		items = 1_000_000
		batch = 1000
	)
	ctx := b.Context()
	dir := b.TempDir()
	s := benchOpen(b, dir, false)
	q, err := s.CreateQueue(ctx, queue.QueueInfo{Name: "bench", Partitions: 1})
	if err != nil {
		b.Fatal(err)
	}
	now := time.Now()
	payload := make([]byte, 64)
	for start := uint64(1); start <= items; start += batch {
		bt := &store.Batch{QueueID: q.ID, LastID: start + batch - 1}
		for id := start; id < start+batch; id++ {
			bt.Insert(0, benchMeta(id, now), queue.ItemBody{Kind: "k", Payload: payload}, queue.ItemErrors{})
		}
		if err := s.Write(ctx, bt); err != nil {
			b.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		b.Fatal(err)
	}
	openStart := time.Now()
	s = benchOpen(b, dir, true)
	defer s.Close()
	openTime := time.Since(openStart)

	for b.Loop() {
		n := 0
		err := s.LoadItems(ctx, q.ID, 0, func(m queue.ItemMeta) error {
			n++
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
		if n != items {
			b.Fatalf("loaded %d items, want %d", n, items)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/items, "ns/item")
	b.ReportMetric(float64(openTime.Milliseconds()), "open-ms")
}

// BenchmarkWriteInsert100Sync times a Write of 100 inserts (64-byte
// payloads) with Sync on: one fsync per op.
//
//	go test -run '^$' -bench WriteInsert100Sync ./internal/backend/embedded/pebble/
func BenchmarkWriteInsert100Sync(b *testing.B) {
	ctx := b.Context()
	s := benchOpen(b, b.TempDir(), true)
	defer s.Close()
	q, err := s.CreateQueue(ctx, queue.QueueInfo{Name: "bench", Partitions: 1})
	if err != nil {
		b.Fatal(err)
	}
	now := time.Now()
	payload := make([]byte, 64)
	id := uint64(0)
	for b.Loop() {
		bt := &store.Batch{QueueID: q.ID, LastID: id + 100}
		for range 100 {
			id++
			bt.Insert(0, benchMeta(id, now), queue.ItemBody{Kind: "k", Payload: payload}, queue.ItemErrors{})
		}
		if err := s.Write(ctx, bt); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(id)/b.Elapsed().Seconds(), "items/s")
}

// BenchmarkCycle100 times the store's share of a batch-100 cycle: one
// Write of 100 inserts (1 KiB payloads), one of their 100 leases and one of
// their 100 deletes, in memory (no fsync: CPU only, memtable inserts,
// flushes and compactions included). ns/op is per item.
//
//	go test -run '^$' -bench Cycle100 -benchtime 2000x ./internal/backend/embedded/pebble/
func BenchmarkCycle100(b *testing.B) {
	const batch = 100
	ctx := b.Context()
	s, q := benchMemoryQueue(b)
	now := time.Now()
	body := queue.ItemBody{Kind: "k", Payload: make([]byte, 1024)}
	metas := make([]queue.ItemMeta, batch)
	write := func(bt *store.Batch) {
		if err := s.Write(ctx, bt); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	id := uint64(0)
	for b.Loop() {
		ins := &store.Batch{QueueID: q.ID}
		for i := range metas {
			id++
			metas[i] = queue.ItemMeta{ID: id, BodyID: id, CreatedAt: now, ExpireDeadline: now.Add(time.Hour)}
			ins.InsertBody(0, metas[i], &body)
		}
		write(ins)
		lease := &store.Batch{QueueID: q.ID}
		for i := range metas {
			metas[i].Attempts, metas[i].Leased, metas[i].LeaseDeadline = 1, true, now.Add(time.Minute)
			lease.Lease(0, metas[i])
		}
		write(lease)
		del := &store.Batch{QueueID: q.ID}
		for i := range metas {
			del.Delete(0, metas[i], false)
		}
		write(del)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/item")
}

// BenchmarkListItems1000 times a listing of 1,000 items with their bodies
// (1 KiB) and errors, out of 100,000 in one partition, most of them
// flushed to sstables (in memory, no fsync). The storage listings
// (/v1/storage/items.list, dead.list) read this way. ns/op is per listing.
//
//	go test -run '^$' -bench ListItems1000 ./internal/backend/embedded/pebble/
func BenchmarkListItems1000(b *testing.B) {
	const items, batch = 100_000, 1000
	ctx := b.Context()
	s, q := benchMemoryQueue(b)
	now := time.Now()
	body := queue.ItemBody{Kind: "k", Payload: make([]byte, 1024)}
	for start := uint64(1); start <= items; start += batch {
		bt := &store.Batch{QueueID: q.ID, LastID: start + batch - 1}
		for id := start; id < start+batch; id++ {
			bt.InsertBody(0, benchMeta(id, now), &body)
		}
		if err := s.Write(ctx, bt); err != nil {
			b.Fatal(err)
		}
	}
	after := uint64(0)
	for b.Loop() {
		got, err := s.ListItemsWithin(ctx, q.ID, 0, after, 1000, 0)
		if err != nil || len(got) != 1000 {
			b.Fatalf("listed %d items: %v", len(got), err)
		}
		after = (after + 1000) % (items - 1000)
	}
}

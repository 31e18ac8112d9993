package embedded_test

import (
	"context"
	"io"
	"log/slog"
	"runtime"
	"testing"
	"time"

	"github.com/styxq/styx/internal/backend/embedded"
	"github.com/styxq/styx/internal/backend/embedded/pebble"
	"github.com/styxq/styx/internal/clock"
	"github.com/styxq/styx/internal/queue"
	"github.com/styxq/styx/internal/store"
	"github.com/styxq/styx/metrics"
)

// BenchmarkStartup1M measures the start-up budget of the core issue: with
// 1,000,000 queued items (64-byte payloads) in Pebble, the time from opening
// the store to the first lease answered, and the heap the loaded queue holds
// per item. Run with:
//
//	go test -run '^$' -bench Startup1M -benchtime 1x ./internal/queue/
func BenchmarkStartup1M(b *testing.B) {
	const n = 1_000_000
	dir := b.TempDir()
	ctx := context.Background()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	s, err := pebble.Open(pebble.Config{Dir: dir, NoSync: true, Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	now := time.Now()
	info, err := s.CreateQueue(ctx, queue.QueueInfo{Name: "big", LeaseTimeout: time.Minute, ExpireTimeout: 336 * time.Hour, Partitions: 1, CreatedAt: now, UpdatedAt: now})
	if err != nil {
		b.Fatal(err)
	}
	payload := make([]byte, 64)
	base := uint64(now.UnixNano())
	for i := 0; i < n; i += 1000 {
		batch := store.Batch{QueueID: info.ID}
		for j := i; j < i+1000; j++ {
			id := base + uint64(j)
			batch.Insert(0, queue.ItemMeta{ID: id, BodyID: id, CreatedAt: now, ExpireDeadline: now.Add(336 * time.Hour)},
				queue.ItemBody{Kind: "bench", Payload: payload}, queue.ItemErrors{})
		}
		batch.LastID = base + uint64(i+999)
		if err := s.Write(ctx, &batch); err != nil {
			b.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		b.Fatal(err)
	}
	log := quiet
	b.ResetTimer()
	for range b.N {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		start := time.Now()
		s, err := pebble.Open(pebble.Config{Dir: dir, Logger: quiet})
		if err != nil {
			b.Fatal(err)
		}
		m, err := embedded.NewManager(ctx, embedded.Config{Store: s, Clock: clock.Real{}, Log: log, Metrics: metrics.New()})
		if err != nil {
			b.Fatal(err)
		}
		l, err := m.Get("big")
		if err != nil {
			b.Fatal(err)
		}
		res, err := l.Lease(ctx, queue.LeaseParams{BatchSize: 1, ClientID: "bench", Timeout: time.Minute})
		if err != nil || len(res.Items) != 1 {
			b.Fatal(err)
		}
		firstLease := time.Since(start)
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(firstLease.Milliseconds()), "ms-to-first-lease")
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "heap-B/item")
		m.Close()
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
	}
}

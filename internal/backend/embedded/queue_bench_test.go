package embedded_test

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/styxq/styx/internal/backend/embedded"
	"github.com/styxq/styx/internal/backend/embedded/pebble"
	"github.com/styxq/styx/internal/clock"
	"github.com/styxq/styx/internal/queue"
	"github.com/styxq/styx/internal/store"
	"github.com/styxq/styx/metrics"
)

// benchStores returns the backends the loop benchmarks run on.
func benchStores(b *testing.B) map[string]func() store.Store {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	return map[string]func() store.Store{
		"memory": func() store.Store {
			s, err := pebble.OpenMemory()
			if err != nil {
				b.Fatal(err)
			}
			return s
		},
		"pebble": func() store.Store {
			s, err := pebble.Open(pebble.Config{Dir: b.TempDir(), Logger: quiet})
			if err != nil {
				b.Fatal(err)
			}
			return s
		},
	}
}

func benchQueue(b *testing.B, s store.Store) (*embedded.Manager, queue.Queue) {
	ctx := context.Background()
	m, err := embedded.NewManager(ctx, embedded.Config{Store: s, Clock: clock.Real{},
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Metrics: metrics.New()})
	if err != nil {
		b.Fatal(err)
	}
	if err := m.Create(ctx, queue.QueueInfo{Name: "q", LeaseTimeout: time.Minute, ExpireTimeout: time.Hour, Partitions: 1}); err != nil {
		b.Fatal(err)
	}
	l, err := m.Get("q")
	if err != nil {
		b.Fatal(err)
	}
	return m, l
}

// BenchmarkLoopCycle measures the logical queue loop without HTTP: 4
// clients each produce a batch, lease it and complete it. One op is one
// item. Run with:
//
//	go test -run '^$' -bench LoopCycle -benchmem ./internal/queue/
func BenchmarkLoopCycle(b *testing.B) {
	for name, open := range benchStores(b) {
		for _, batch := range []int{1, 100} {
			b.Run(name+"/batch"+itoa(batch), func(b *testing.B) {
				s := open()
				m, l := benchQueue(b, s)
				defer func() { m.Close(); _ = s.Close() }()
				ctx := context.Background()
				payload := make([]byte, 1024)
				items := make([]queue.ProduceItem, batch)
				for i := range items {
					items[i] = queue.ProduceItem{Payload: payload}
				}
				const clients = 4
				rounds := b.N/(clients*batch) + 1
				b.SetBytes(1024)
				b.ResetTimer()
				var wg sync.WaitGroup
				for c := range clients {
					wg.Go(func() {
						for range rounds {
							if err := l.Produce(ctx, items); err != nil {
								b.Error(err)
								return
							}
							res, err := l.Lease(ctx, queue.LeaseParams{BatchSize: batch, ClientID: "c" + itoa(c), Timeout: time.Second})
							if err != nil {
								b.Error(err)
								return
							}
							ids := make([]uint64, len(res.Items))
							for i, it := range res.Items {
								ids[i] = it.ID
							}
							if err := l.Complete(ctx, res.Partition, ids); err != nil {
								b.Error(err)
								return
							}
						}
					})
				}
				wg.Wait()
			})
		}
	}
}

// BenchmarkLoopProduce measures the logical queue loop without HTTP on a
// growing queue: 4 clients each produce batches of 100 items of 1 KiB. One
// op is one item. Run with:
//
//	go test -run '^$' -bench LoopProduce -benchtime 1000000x ./internal/backend/embedded/
func BenchmarkLoopProduce(b *testing.B) {
	for name, open := range benchStores(b) {
		b.Run(name, func(b *testing.B) {
			s := open()
			m, l := benchQueue(b, s)
			defer func() { m.Close(); _ = s.Close() }()
			ctx := context.Background()
			items := make([]queue.ProduceItem, 100)
			for i := range items {
				items[i] = queue.ProduceItem{Payload: make([]byte, 1024)}
			}
			const clients = 4
			rounds := b.N/(clients*len(items)) + 1
			b.SetBytes(1024)
			b.ResetTimer()
			var wg sync.WaitGroup
			for range clients {
				wg.Go(func() {
					for range rounds {
						if err := l.Produce(ctx, items); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
		})
	}
}

func itoa(n int) string {
	if n < 10 {
		return string(rune('0' + n))
	}
	return itoa(n/10) + string(rune('0'+n%10))
}

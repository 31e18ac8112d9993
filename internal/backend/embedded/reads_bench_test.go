package embedded_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/styxq/styx/internal/backend/embedded"
	"github.com/styxq/styx/internal/backend/embedded/pebble"
	"github.com/styxq/styx/internal/clock"
	"github.com/styxq/styx/internal/queue"
	"github.com/styxq/styx/metrics"
)

// TestReads1M measures the reads of issue 38 on Pebble (sync on): with
// STYX_READS_ITEMS items (default 1,000,000; 64-byte payloads) in a queue,
// one queue.stats call; produce p99 into that queue (one producer, batch
// 1, 5 s) without and with queue.stats polled every 100 ms; and with as
// many scheduled items in another queue, the first page (100) of
// scheduled.list. It runs only with STYX_READS_BENCH=1 (about two
// minutes):
//
//	STYX_READS_BENCH=1 go test -run TestReads1M -v -timeout 30m ./internal/backend/embedded/
func TestReads1M(t *testing.T) {
	if os.Getenv("STYX_READS_BENCH") == "" {
		t.Skip("set STYX_READS_BENCH=1 to run")
	}
	n := 1_000_000
	if v := os.Getenv("STYX_READS_ITEMS"); v != "" {
		n, _ = strconv.Atoi(v)
	}
	ctx := context.Background()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	s, err := pebble.Open(pebble.Config{Dir: t.TempDir(), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	m, err := embedded.NewManager(ctx, embedded.Config{Store: s, Clock: clock.Real{}, Log: quiet, Metrics: metrics.New()})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	fill := func(name string, enqueueAt time.Time) queue.Queue {
		if err := m.Create(ctx, queue.QueueInfo{Name: name, LeaseTimeout: time.Minute, ExpireTimeout: 24 * time.Hour, Partitions: 1}); err != nil {
			t.Fatal(err)
		}
		l, err := m.Get(name)
		if err != nil {
			t.Fatal(err)
		}
		batch := make([]queue.ProduceItem, 1000)
		for i := range batch {
			batch[i] = queue.ProduceItem{Payload: make([]byte, 64), EnqueueAt: enqueueAt}
		}
		for done := 0; done < n; done += len(batch) {
			if err := l.Produce(ctx, batch); err != nil {
				t.Fatal(err)
			}
		}
		return l
	}
	timed := func(f func() error) []time.Duration {
		var out []time.Duration
		for range 20 {
			start := time.Now()
			if err := f(); err != nil {
				t.Fatal(err)
			}
			out = append(out, time.Since(start))
		}
		slices.Sort(out)
		return out
	}

	l := fill("q", time.Time{})
	st := timed(func() error { _, err := l.Stats(ctx); return err })
	t.Logf("queue.stats on %d items: median %v, max %v (20 calls)", n, st[len(st)/2], st[len(st)-1])

	produceP99 := func(poll bool) time.Duration {
		stop := make(chan struct{})
		var wg sync.WaitGroup
		if poll {
			wg.Go(func() {
				tick := time.NewTicker(100 * time.Millisecond)
				defer tick.Stop()
				for {
					select {
					case <-stop:
						return
					case <-tick.C:
						_, _ = l.Stats(ctx)
					}
				}
			})
		}
		var lat []time.Duration
		item := []queue.ProduceItem{{Payload: make([]byte, 64)}}
		for end := time.Now().Add(5 * time.Second); time.Now().Before(end); {
			start := time.Now()
			if err := l.Produce(ctx, item); err != nil {
				t.Fatal(err)
			}
			lat = append(lat, time.Since(start))
		}
		close(stop)
		wg.Wait()
		slices.Sort(lat)
		return lat[len(lat)*99/100]
	}
	quiet0, polled := produceP99(false), produceP99(true)
	t.Logf("produce p99 (batch 1, 5 s): %v without polling, %v with queue.stats every 100 ms (%.2fx)", quiet0, polled,
		float64(polled)/float64(quiet0))

	sl := fill("sched", time.Now().Add(time.Hour))
	sc := timed(func() error { _, err := sl.Scheduled(ctx, 0, 0, 100); return err })
	t.Logf("scheduled.list (first 100) on %d scheduled items: median %v, max %v (20 calls)", n, sc[len(sc)/2], sc[len(sc)-1])
}

package history_test

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/backend/embedded"
	"github.com/styxq/styx/internal/backend/embedded/pebble"
	"github.com/styxq/styx/internal/clock"
	"github.com/styxq/styx/internal/history"
	"github.com/styxq/styx/internal/queue"
	"github.com/styxq/styx/metrics"
)

// manager returns an embedded (memory) queue manager with n queues, every
// tenth a dead-letter queue of the nine before it.
func manager(tb testing.TB, n int) (queue.Queues, *metrics.Metrics) {
	tb.Helper()
	s, err := pebble.OpenMemory()
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = s.Close() })
	met := metrics.New()
	m, err := embedded.NewManager(context.Background(), embedded.Config{Store: s, Clock: clock.Real{}, Log: slog.New(slog.DiscardHandler), Metrics: met})
	require.NoError(tb, err)
	tb.Cleanup(m.Close)
	for _, dlqs := range []bool{true, false} { // dead-letter queues first
		for i := range n {
			if (i%10 == 9) != dlqs {
				continue
			}
			info := queue.QueueInfo{Name: fmt.Sprintf("q%05d", i), Partitions: 1, LeaseTimeout: time.Minute, ExpireTimeout: time.Hour}
			if !dlqs {
				info.DeadQueue = fmt.Sprintf("q%05d", i/10*10+9)
			}
			require.NoError(tb, m.Create(context.Background(), info))
		}
	}
	return m, met
}

// BenchmarkHistorySample measures one sample of every queue (Run takes one
// every history.SampleEvery): reported per queue.
func BenchmarkHistorySample(b *testing.B) {
	const n = 1000
	m, met := manager(b, n)
	r := history.New(m, clock.Real{}, met)
	ctx := context.Background()
	require.NoError(b, r.Sample(ctx))
	b.ResetTimer()
	for b.Loop() {
		require.NoError(b, r.Sample(ctx))
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/queue")
}

// BenchmarkHistoryCount measures the cost a produce or complete call pays
// to be counted, from parallel callers on 100 queues.
func BenchmarkHistoryCount(b *testing.B) {
	r := history.New(nil, clock.Real{}, metrics.New())
	names := make([]string, 100)
	for i := range names {
		names[i] = fmt.Sprintf("q%d", i)
	}
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			r.Produced(names[i%len(names)], 10)
			i++
		}
	})
}

// TestHistoryMemoryPerQueue reports (with -v) the heap a queue's history
// takes once every minute of the hour holds counts, and fails if it is
// above 8 KiB.
func TestHistoryMemoryPerQueue(t *testing.T) {
	const n = 2000
	clk := clock.NewFake(time.Unix(1_800_000_000, 0))
	r := history.New(nil, clk, metrics.New())
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range history.Points {
		for i := range n {
			r.Produced(fmt.Sprintf("q%05d", i), 1)
		}
		clk.Advance(time.Minute)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	per := float64(after.HeapAlloc-before.HeapAlloc) / n
	t.Logf("history: %.0f bytes per queue (%d queues, %d minutes each)", per, n, history.Points)
	require.Less(t, per, 8192.0)
	runtime.KeepAlive(r)
}

package embedded

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/queue"
)

// dedupProduce runs one produce of ids through l's record at now, as an
// iteration would, and drops the iteration's batch.
func dedupProduce(l *Logical, now int64, ids ...string) []queue.ProduceItem {
	items := make([]queue.ProduceItem, len(ids))
	for i, id := range ids {
		items[i].DeduplicationID = id
	}
	it := &iteration{l: l, now: now}
	if err := it.AdmitDeduplication(items); err != nil {
		return nil
	}
	return l.dedup.deduplicate(it, items)
}

// TestDedupShortenedWindow: ids accepted after their queue's window was
// shortened are forgotten when their own window ends, though ids accepted
// before under the longer window are still held, so they make room.
func TestDedupShortenedWindow(t *testing.T) {
	l := &Logical{name: "q", cfg: Config{MaxDeduplicationIDs: 4}, info: queue.QueueInfo{DeduplicationWindow: time.Hour}}
	now := time.Now().UnixNano()
	require.Len(t, dedupProduce(l, now, "long1", "long2"), 2)
	l.info.DeduplicationWindow = time.Minute
	require.Len(t, dedupProduce(l, now, "short1", "short2"), 2)
	require.Empty(t, dedupProduce(l, now, "new"), "at the limit")
	require.Len(t, dedupProduce(l, now+int64(time.Minute), "new", "new2"), 2, "the short windows ended")
	require.Equal(t, 4, l.dedup.held())
	require.Empty(t, dedupProduce(l, now+int64(time.Minute), "long1", "short3"), "long1 held; no room for short3")
}

// BenchmarkDedupHeap reports the heap a queue's deduplication record takes
// per id it holds (B/id), ids of 36 bytes produced 10 per request: "fill"
// holds n ids; "steady-W" has accepted W×n ids over W windows (in
// quarters), holding about n (each window ends as produces go on).
func BenchmarkDedupHeap(b *testing.B) {
	const n = 100_000
	for _, c := range []struct {
		name     string
		quarters int
	}{{"fill", 4}, {"steady-3.5", 14}, {"steady-4", 16}, {"steady-4.25", 17}, {"steady-4.75", 19}} {
		b.Run(c.name, func(b *testing.B) {
			var perID float64
			for range b.N {
				runtime.GC()
				var before, after runtime.MemStats
				runtime.ReadMemStats(&before)
				l := &Logical{name: "q", cfg: Config{MaxDeduplicationIDs: -1}, info: queue.QueueInfo{DeduplicationWindow: time.Second}}
				now := time.Now().UnixNano()
				step := int64(time.Second) / (n / 10)
				ids := make([]string, 10)
				for k := range c.quarters * n / 40 {
					for j := range ids {
						ids[j] = fmt.Sprintf("%08x-0000-4000-8000-%012x", k, j)
					}
					dedupProduce(l, now, ids...)
					now += step
				}
				clear(ids)
				runtime.GC()
				runtime.ReadMemStats(&after)
				perID = float64(after.HeapAlloc-before.HeapAlloc) / float64(l.dedup.held())
				runtime.KeepAlive(l)
			}
			b.ReportMetric(perID, "B/id")
		})
	}
}

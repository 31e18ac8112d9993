package embedded_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/styxq/styx/internal/queue"
)

// BenchmarkGroupLease measures leasing grouped items: one op is a round of
// 10,000 items (64-byte payloads) produced in requests of 1,000 and then
// leased (batches of 10) and completed by 4 clients until all are done;
// ns/item is the round's time per item. The workloads: items without a
// group (the baseline), 1,000 groups of 10 on an ordered queue (a lease
// takes a group's run of 10), one hot group of 10,000 on an ordered queue
// (one lease at a time: the others wait for its completion), and 1,000
// groups of 10 on a fair queue (round-robin). Each lease is bounded by
// 64 MiB, as a /v1 lease is by default (never reached: it costs each item
// its body's size, found before the item is taken). Run with:
//
//	go test -run '^$' -bench GroupLease -benchtime 5x ./internal/backend/embedded/
func BenchmarkGroupLease(b *testing.B) {
	const round, clients, batch = 10_000, 4, 10
	for name, open := range benchStores(b) {
		for _, w := range []struct {
			name    string
			ordered bool
			groups  int
		}{
			{"ungrouped", false, 0},
			{"ordered-1000x10", true, 1000},
			{"ordered-hot", true, 1},
			{"fair-1000x10", false, 1000},
		} {
			b.Run(name+"/"+w.name, func(b *testing.B) {
				s := open()
				m, _ := benchQueue(b, s)
				defer func() { m.Close(); _ = s.Close() }()
				ctx := context.Background()
				if err := m.Create(ctx, queue.QueueInfo{Name: "g", LeaseTimeout: time.Minute, ExpireTimeout: time.Hour, Partitions: 1,
					Ordered: w.ordered}); err != nil {
					b.Fatal(err)
				}
				q, err := m.Get("g")
				if err != nil {
					b.Fatal(err)
				}
				payload := make([]byte, 64)
				reqs := make([][]queue.ProduceItem, round/1000)
				for r := range reqs {
					reqs[r] = make([]queue.ProduceItem, 1000)
					for i := range reqs[r] {
						it := queue.ProduceItem{Payload: payload}
						if w.groups > 0 {
							it.Group = fmt.Sprint("g", (r*1000+i)%w.groups)
						}
						reqs[r][i] = it
					}
				}
				b.ResetTimer()
				for range b.N {
					for _, items := range reqs {
						if err := q.Produce(ctx, items); err != nil {
							b.Fatal(err)
						}
					}
					var done atomic.Int64
					rctx, cancel := context.WithCancel(ctx)
					var wg sync.WaitGroup
					for c := range clients {
						wg.Go(func() {
							for done.Load() < round {
								res, err := q.Lease(rctx, queue.LeaseParams{BatchSize: batch, ClientID: fmt.Sprint("c", c), Timeout: time.Second,
									MaxBytes: 64 << 20})
								if err != nil {
									if rctx.Err() == nil && !errors.Is(err, queue.ErrNoItems) {
										b.Error(err)
									}
									continue
								}
								ids := make([]uint64, len(res.Items))
								for i, it := range res.Items {
									ids[i] = it.ID
								}
								if err := q.Complete(ctx, res.Partition, ids); err != nil {
									b.Error(err)
									return
								}
								if done.Add(int64(len(ids))) >= round {
									cancel()
								}
							}
						})
					}
					wg.Wait()
					cancel()
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*round), "ns/item")
			})
		}
	}
}

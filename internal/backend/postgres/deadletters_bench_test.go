package postgres_test

import (
	"testing"
	"time"

	"github.com/styxq/styx/internal/backend/postgres"
	"github.com/styxq/styx/internal/pgtest"
	"github.com/styxq/styx/internal/queue"
	"github.com/styxq/styx/metrics"
)

// BenchmarkDeadLetterMove times a retry with dead: true of a lease of
// batch items, answered once they moved, on the one-statement path and on
// the two-phase path (Config.TwoPhaseDeadLetters: the Manager delivering
// to itself, so without a second cluster's round trips), each in a schema
// of its own, the two interleaved. The produce and the lease are not
// timed. us/item is the retry's time per item.
//
//	go test -run '^$' -bench DeadLetterMove -benchtime 100x ./internal/backend/postgres/
func BenchmarkDeadLetterMove(b *testing.B) {
	base := pgtest.BaseURL(b)
	for _, batch := range []int{1, 100} {
		for _, twoPhase := range []bool{false, true, false, true} {
			name := map[bool]string{false: "one-statement", true: "two-phase"}[twoPhase]
			b.Run(name+"/batch="+map[int]string{1: "1", 100: "100"}[batch], func(b *testing.B) {
				ctx := b.Context()
				m, err := postgres.Open(ctx, postgres.Config{URL: pgtest.SchemaURL(b, base), Log: testLog(), Metrics: metrics.New(),
					TwoPhaseDeadLetters: twoPhase})
				if err != nil {
					b.Fatal(err)
				}
				defer m.Close()
				for _, info := range []queue.QueueInfo{{Name: "dlq", LeaseTimeout: time.Minute, Partitions: 1},
					{Name: "q", LeaseTimeout: time.Minute, Partitions: 1, DeadQueue: "dlq"}} {
					if err := m.Create(ctx, info); err != nil {
						b.Fatal(err)
					}
				}
				q, err := m.Get("q")
				if err != nil {
					b.Fatal(err)
				}
				items := make([]queue.ProduceItem, batch)
				for i := range items {
					items[i] = queue.ProduceItem{Payload: []byte("x")}
				}
				for b.Loop() {
					b.StopTimer()
					if err := q.Produce(ctx, items); err != nil {
						b.Fatal(err)
					}
					res, err := q.Lease(ctx, queue.LeaseParams{BatchSize: batch, ClientID: "c", Timeout: time.Second})
					if err != nil || len(res.Items) != batch {
						b.Fatal(err, len(res.Items))
					}
					retry := make([]queue.RetryItem, batch)
					for i, x := range res.Items {
						retry[i] = queue.RetryItem{ID: x.ID, Dead: true}
					}
					b.StartTimer()
					if _, err := q.Retry(ctx, res.Partition, retry); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*batch), "us/item")
			})
		}
	}
}

package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/styxq/styx/internal/backend/postgres"
	"github.com/styxq/styx/internal/pgtest"
	"github.com/styxq/styx/internal/queue"
)

// BenchmarkFenceCycle measures what the fence check (fence.go) adds to a
// queue's iterations: one op is a produce of one item, a lease of it and
// its complete (three iterations), through one node, with the check
// (with) and without it (without); wal-B/op is the WAL the op wrote
// (pg_current_wal_lsn before and after), on a cluster of the benchmark's
// own (pgtest.StartServer), so that no other test's WAL counts. The two
// run interleaved, three rounds each (with#01, without#01, …):
//
//	go test -run '^$' -bench FenceCycle ./internal/backend/postgres/
func BenchmarkFenceCycle(b *testing.B) {
	url := pgtest.StartServer(b).URL
	m := open(b, url)
	ctx := b.Context()
	if err := m.Create(ctx, queue.QueueInfo{Name: "q", LeaseTimeout: time.Minute, Partitions: 1}); err != nil {
		b.Fatal(err)
	}
	q, err := m.Get("q")
	if err != nil {
		b.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(context.Background())
	lsn := func() int64 {
		var n int64
		if err := conn.QueryRow(ctx, `SELECT pg_current_wal_lsn() - '0/0'::pg_lsn`).Scan(&n); err != nil {
			b.Fatal(err)
		}
		return n
	}
	for _, c := range []struct {
		name string
		skip bool
	}{{"without", true}, {"with", false}, {"without", true}, {"with", false}, {"without", true}, {"with", false}} {
		b.Run(c.name, func(b *testing.B) {
			postgres.SkipFenceCheck(c.skip)
			defer postgres.SkipFenceCheck(false)
			start := lsn()
			for b.Loop() {
				if err := q.Produce(ctx, []queue.ProduceItem{{Payload: []byte("x")}}); err != nil {
					b.Fatal(err)
				}
				res, err := q.Lease(ctx, queue.LeaseParams{BatchSize: 1, ClientID: "c", Timeout: time.Second})
				if err != nil || len(res.Items) != 1 {
					b.Fatal(err, len(res.Items))
				}
				if err := q.Complete(ctx, res.Partition, []uint64{res.Items[0].ID}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(lsn()-start)/float64(b.N), "wal-B/op")
		})
	}
}

// BenchmarkCopyQueue measures a move's copy (CopyQueue, move.go): a queue
// of 20,000 items of 1 KiB copied between two schemas of the test
// database in batches of 1,000; items/s is the rate, the time the queue
// answers 453 per item. Each op copies, then aborts (the copy deleted):
//
//	go test -run '^$' -bench CopyQueue -benchtime 3x ./internal/backend/postgres/
func BenchmarkCopyQueue(b *testing.B) {
	base := pgtest.BaseURL(b)
	src, dst := open(b, pgtest.SchemaURL(b, base)), open(b, pgtest.SchemaURL(b, base))
	ctx := b.Context()
	if err := src.Create(ctx, queue.QueueInfo{Name: "q", LeaseTimeout: time.Minute, Partitions: 1}); err != nil {
		b.Fatal(err)
	}
	q, err := src.Get("q")
	if err != nil {
		b.Fatal(err)
	}
	const n = 20000
	payload := make([]byte, 1024)
	for range n / 1000 {
		items := make([]queue.ProduceItem, 1000)
		for i := range items {
			items[i].Payload = payload
		}
		if err := q.Produce(ctx, items); err != nil {
			b.Fatal(err)
		}
	}
	var epoch int64
	for b.Loop() {
		epoch++
		info, err := src.Store().Fence(ctx, "q", epoch)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := dst.Store().PrepareMoveIn(ctx, info, epoch); err != nil {
			b.Fatal(err)
		}
		if p, err := postgres.CopyQueue(ctx, src.Store(), dst.Store(), "q", epoch, postgres.CopyConfig{}); err != nil || p.Copied != n {
			b.Fatal(err, p)
		}
		b.StopTimer()
		if err := postgres.AbortMove(ctx, src.Store(), dst.Store(), "q", epoch); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "items/s")
}

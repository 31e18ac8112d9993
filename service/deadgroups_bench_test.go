package service_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	styx "github.com/styxq/styx"
	"github.com/styxq/styx/daemon"
	"github.com/styxq/styx/internal/backend/embedded/pebble"
	"github.com/styxq/styx/internal/fingerprint"
	"github.com/styxq/styx/internal/pgtest"
	"github.com/styxq/styx/internal/queue"
	"github.com/styxq/styx/internal/servertest"
	"github.com/styxq/styx/internal/store"
	pb "github.com/styxq/styx/styxpb"
)

// benchShapes are how the seeded dead items spread: 50 error shapes, from 2
// source queues, for 2 reasons (200 groups), as in an incident where a few
// shapes dominate and many differ only in ids.
var benchShapes = func() []string {
	out := make([]string, 50)
	for i := range out {
		// Words, not numbers, tell the shapes apart: numbers are placeholders.
		out[i] = fmt.Sprintf("step %s failed: order 81234 not found in shard 7 after 1.5s", string(rune('a'+i%26))+string(rune('a'+i/26)))
	}
	return out
}()

// seedDead starts a server on backend name ("memory", "pebble" or
// "postgres") whose queue orders-dead holds n dead items (dead copies, as
// dead-letter moves leave them) in 200 groups, written straight to storage
// so that a million items take seconds, not an hour of moves.
func seedDead(b *testing.B, name string, n int) *styx.Client {
	b.Helper()
	ctx := context.Background()
	cfg := daemon.Config{Listen: "127.0.0.1:0", Log: servertest.TestLogger()}
	var pgURL string
	switch name {
	case "memory", "pebble":
		var st store.Store
		if name == "memory" {
			var err error
			if st, err = pebble.OpenMemory(); err != nil {
				b.Fatal(err)
			}
		} else {
			var err error
			st, err = pebble.Open(pebble.Config{Dir: b.TempDir(), Logger: servertest.TestLogger()})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = st.Close() })
		}
		info, err := st.CreateQueue(ctx, queue.QueueInfo{Name: "orders-dead", Namespace: queue.DefaultNamespace,
			LeaseTimeout: time.Minute, ExpireTimeout: 336 * time.Hour, Partitions: 1})
		if err != nil {
			b.Fatal(err)
		}
		now := time.Now()
		fps := make([]string, len(benchShapes))
		for i, s := range benchShapes {
			fps[i] = fingerprint.Of(s)
		}
		for i := 0; i < n; i += 10_000 {
			batch := &store.Batch{QueueID: info.ID}
			for j := i; j < min(i+10_000, n); j++ {
				id := uint64(j + 1)
				src, reason := []string{"orders", "billing"}[j%2], []string{"max_attempts", "explicit"}[j/2%2]
				shape := j / 4 % len(benchShapes)
				deadAt := now.Add(time.Duration(j-n) * time.Millisecond)
				batch.Insert(0, queue.ItemMeta{ID: id, BodyID: id, Attempts: 3, CreatedAt: deadAt.Add(-time.Minute), DeadAt: deadAt,
					ExpireDeadline: deadAt.Add(336 * time.Hour), SourceKey: queue.SourceKey(reason, src, id), Fingerprint: fps[shape]},
					queue.ItemBody{Kind: "charge", Payload: []byte(`{"order_id":81234}`), SourceQueue: src, SourceID: queue.FormatID(id),
						DeadReason: reason, DeadAt: deadAt},
					queue.ItemErrors{LastError: benchShapes[shape], Errors: []queue.AttemptError{{Attempt: 3, Error: benchShapes[shape], At: deadAt}}})
			}
			batch.LastID = uint64(min(i+10_000, n))
			if err := st.Write(ctx, batch); err != nil {
				b.Fatal(err)
			}
		}
		cfg.Store = st
	case "postgres":
		if os.Getenv(pgtest.EnvURL) == "" {
			b.Skipf("postgres: %s is not set", pgtest.EnvURL)
		}
		pgURL = pgtest.URL(b)
		cfg.Storage, cfg.PostgresURL = daemon.StoragePostgres, pgURL
	}
	d, err := daemon.New(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = d.Close(context.Background()) })
	c, err := styx.NewClient(styx.ClientConfig{Endpoint: d.Endpoint()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(c.Close)
	if name == "postgres" {
		if err := c.QueuesCreate(ctx, &pb.QueueInfo{QueueName: "orders-dead"}); err != nil {
			b.Fatal(err)
		}
		pool, err := pgxpool.New(ctx, pgURL)
		if err != nil {
			b.Fatal(err)
		}
		defer pool.Close()
		fps := make([]string, len(benchShapes))
		for i, s := range benchShapes {
			fps[i] = fingerprint.Of(s)
		}
		now := time.Now().UnixNano()
		for i := 0; i < n; i += 100_000 {
			_, err := pool.Exec(ctx, `INSERT INTO styx_items (queue_id, id, partition, state, expire_deadline, attempts, created_at, source_key,
					kind, payload, source_queue, source_id, dead_reason, dead_at, last_error, fingerprint)
				SELECT q.id, nextval('styx_item_ids'), 0, 0, 0, 3, $3::bigint - (n_total - j) * 1000000 - 60000000000,
					r.reason || ':' || r.src || '~' || j, 'charge', '{"order_id":81234}'::bytea, r.src, j::text, r.reason,
					$3::bigint - (n_total - j) * 1000000, ($4::text[])[1 + (j / 4) % 50], ($5::text[])[1 + (j / 4) % 50]
				FROM styx_queues q, generate_series($1::bigint, $2::bigint - 1) AS j,
					LATERAL (SELECT (ARRAY['orders','billing'])[1 + j % 2] AS src, (ARRAY['max_attempts','explicit'])[1 + (j / 2) % 2] AS reason) r,
					LATERAL (SELECT $6::bigint AS n_total) t
				WHERE q.name = 'orders-dead'`, i, min(i+100_000, n), now, benchShapes, fps, n)
			if err != nil {
				b.Fatal(err)
			}
		}
	}
	// dead.* calls act only on a dead-letter queue: one that a queue names.
	if err := c.QueuesCreate(ctx, &pb.QueueInfo{QueueName: "orders", DeadQueue: "orders-dead"}); err != nil {
		b.Fatal(err)
	}
	res, err := c.DeadGroups(ctx, &pb.DeadGroupsRequest{QueueName: "orders-dead"})
	if err != nil {
		b.Fatal(err)
	}
	if res.TotalItems != int64(n) || res.TotalGroups != 200 {
		b.Fatalf("seeded %d items in %d groups, want %d in 200", res.TotalItems, res.TotalGroups, n)
	}
	return c
}

var benchBackends = []string{"memory", "pebble", "postgres"}

// BenchmarkDeadGroups answers dead.groups (the 100 largest of 200 groups)
// over HTTP for a dead-letter queue of 1,000,000 dead items. Run with:
//
//	go test -run '^$' -bench DeadGroups -benchtime 20x ./service/
func BenchmarkDeadGroups(b *testing.B) {
	for _, name := range benchBackends {
		b.Run(name, func(b *testing.B) {
			c := seedDead(b, name, 1_000_000)
			ctx := context.Background()
			b.ResetTimer()
			for b.Loop() {
				res, err := c.DeadGroups(ctx, &pb.DeadGroupsRequest{QueueName: "orders-dead"})
				if err != nil || len(res.Groups) != 100 {
					b.Fatalf("%v, %d groups", err, len(res.Groups))
				}
			}
			b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/call")
		})
	}
}

// BenchmarkDeadPage is the server time of the web UI's DLQ page (its two
// calls, one after the other: dead.groups of 50 groups and the first page
// of 50 items without payloads) for a dead-letter queue of 100,000 dead
// items, unfiltered and with a filter that matches no item (the scan then
// stops at its bound, 10,000 items). Run with:
//
//	go test -run '^$' -bench DeadPage -benchtime 20x ./service/
func BenchmarkDeadPage(b *testing.B) {
	for _, name := range benchBackends {
		b.Run(name, func(b *testing.B) {
			c := seedDead(b, name, 100_000)
			ctx := context.Background()
			for _, f := range []struct {
				name   string
				filter *pb.DeadFilter
			}{{"unfiltered", nil}, {"no-match", &pb.DeadFilter{ErrorContains: "no such text"}}} {
				b.Run(f.name, func(b *testing.B) {
					for b.Loop() {
						g, err := c.DeadGroups(ctx, &pb.DeadGroupsRequest{QueueName: "orders-dead", Limit: 50})
						if err != nil || len(g.Groups) != 50 {
							b.Fatalf("%v", err)
						}
						l, err := c.DeadList(ctx, &pb.DeadListRequest{QueueName: "orders-dead", Filter: f.filter, Limit: 50, WithoutPayload: true})
						if err != nil || (f.filter == nil && len(l.Items) != 50) {
							b.Fatalf("%v", err)
						}
					}
					b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/page")
				})
			}
		})
	}
}

package postgres

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/pgtest"
	"github.com/styxq/styx/internal/queue"
	"github.com/styxq/styx/metrics"
)

func openManager(tb testing.TB, url string) *Manager {
	tb.Helper()
	m, err := Open(context.Background(), Config{URL: url, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Metrics: metrics.New()})
	require.NoError(tb, err)
	tb.Cleanup(m.Close)
	return m
}

// sampleOf returns the gauge sample of one queue.
func sampleOf(t *testing.T, m *Manager, name string) metrics.QueueSample {
	t.Helper()
	for _, s := range m.Sample() {
		if s.Queue == name {
			return s
		}
	}
	t.Fatalf("no sample for queue %s", name)
	return metrics.QueueSample{}
}

// countRows returns the counts rows of a queue by shard.
func countRows(t *testing.T, m *Manager, queueID uint64) map[int32][3]int64 {
	t.Helper()
	rows, err := m.st.pool.Query(context.Background(), `SELECT shard, ready, leased, scheduled FROM styx_item_counts WHERE queue_id=$1`, int64(queueID))
	require.NoError(t, err)
	out := map[int32][3]int64{}
	for rows.Next() {
		var shard int32
		var c [3]int64
		require.NoError(t, rows.Scan(&shard, &c[0], &c[1], &c[2]))
		out[shard] = c
	}
	require.NoError(t, rows.Err())
	return out
}

// statsCounts returns, per partition, the sums over shards of a queue's
// stats counts (styx_partition_counts) as text, and how many rows of shard
// 0 it has.
func statsCounts(t *testing.T, m *Manager, queueID uint64) (map[int32]string, int) {
	t.Helper()
	rows, err := m.st.pool.Query(context.Background(), `SELECT partition, concat_ws(' ', sum(total), sum(leased), sum(scheduled),
		sum(failures), sum(created_sum), sum(deadline_sum)), count(*) FILTER (WHERE shard = 0)
		FROM styx_partition_counts WHERE queue_id=$1 GROUP BY partition`, int64(queueID))
	require.NoError(t, err)
	out, base := map[int32]string{}, 0
	for rows.Next() {
		var p int32
		var sums string
		var n int
		require.NoError(t, rows.Scan(&p, &sums, &n))
		out[p], base = sums, base+n
	}
	require.NoError(t, rows.Err())
	return out, base
}

// TestCountsMigrationCountsExistingItems upgrades a database that holds
// items under schema version 1: the migration counts them into shard 0.
func TestCountsMigrationCountsExistingItems(t *testing.T) {
	ctx := context.Background()
	url := pgtest.EmptyURL(t)
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, `CREATE TABLE styx_schema_migrations (version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())`)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, migrations[0])
	require.NoError(t, err)
	old := time.Now().Add(-time.Hour).UnixNano()
	_, err = conn.Exec(ctx, `INSERT INTO styx_schema_migrations (version) VALUES (1);
		INSERT INTO styx_queues (name, lease_timeout, expire_timeout, max_attempts, partitions, created_at, updated_at)
			VALUES ('old', 60000000000, 0, 0, 2, 0, 0);
		INSERT INTO styx_items (queue_id, id, partition, state, deadline, created_at)
			SELECT 1, nextval('styx_item_ids'), g % 2, g % 3, CASE WHEN g % 3 = 0 THEN 0 ELSE 9e18 END, `+fmt.Sprint(old)+` + g
			FROM generate_series(1, 10) g`)
	require.NoError(t, err)

	m := openManager(t, url)
	info, err := m.Info(ctx, "old")
	require.NoError(t, err)
	require.Equal(t, map[int32][3]int64{0: {3, 4, 3}}, countRows(t, m, info.ID))
	s := sampleOf(t, m, "old")
	require.Equal(t, [3]int{3, 4, 3}, [3]int{s.Ready, s.Leased, s.Scheduled})
	require.InDelta(t, time.Hour.Seconds(), s.OldestAge.Seconds(), 60)
	// Migration 12 counted them for queue.stats (items g = 1..10: partition
	// g % 2, state g % 3).
	q, err := m.Get("old")
	require.NoError(t, err)
	st, err := q.Stats(ctx)
	require.NoError(t, err)
	require.Len(t, st.Partitions, 2)
	for p, want := range [][3]int{{5, 2, 2}, {5, 2, 1}} {
		got := st.Partitions[p]
		require.Equal(t, want, [3]int{got.Total, got.Leased, got.Scheduled}, "partition %d", p)
		require.InDelta(t, time.Hour.Seconds(), got.AverageAge.Seconds(), 60)
	}
	require.Equal(t, time.Unix(0, old+1), st.Oldest)
}

// TestCountsFold folds the counts rows of backends that ended into shard
// 0, keeps those of live backends, and deletes the rows of queues that are
// gone; the sample is the same before and after.
func TestCountsFold(t *testing.T) {
	ctx := context.Background()
	url := pgtest.URL(t)
	m := openManager(t, url)
	require.NoError(t, m.Create(ctx, queue.QueueInfo{Name: "q", LeaseTimeout: time.Minute, Partitions: 2}))
	info, err := m.Info(ctx, "q")
	require.NoError(t, err)

	// Another node writes, then stops: its backends end.
	other, err := Open(ctx, Config{URL: url, Log: m.cfg.Log, Metrics: metrics.New()})
	require.NoError(t, err)
	oq, err := other.Get("q")
	require.NoError(t, err)
	require.NoError(t, oq.Produce(ctx, []queue.ProduceItem{{Payload: []byte("a")}, {Payload: []byte("b")}, {Payload: []byte("c")},
		{Payload: []byte("s"), EnqueueAt: time.Now().Add(time.Hour)}}))
	_, err = oq.Lease(ctx, queue.LeaseParams{BatchSize: 2, ClientID: "c", Timeout: time.Second})
	require.NoError(t, err)
	other.Close()
	// And this node writes: its backends live on.
	q, err := m.Get("q")
	require.NoError(t, err)
	require.NoError(t, q.Produce(ctx, []queue.ProduceItem{{Payload: []byte("d")}}))
	want := sampleOf(t, m, "q")
	require.Equal(t, [3]int{2, 2, 1}, [3]int{want.Ready, want.Leased, want.Scheduled})
	before := countRows(t, m, info.ID)
	require.GreaterOrEqual(t, len(before), 2)
	require.NotContains(t, before, int32(0))
	statsBefore, base := statsCounts(t, m, info.ID)
	require.Zero(t, base)

	// A row of a queue that does not exist (as a fold racing a queue
	// delete may leave).
	_, err = m.st.pool.Exec(ctx, `INSERT INTO styx_item_counts (queue_id, shard, ready) VALUES (999999, 0, 5), (999999, 1, 1)`)
	require.NoError(t, err)

	// The other node's backends leave pg_stat_activity shortly after
	// their connections close.
	var folded int64
	require.Eventually(t, func() bool {
		n, err := m.foldCounts(ctx)
		require.NoError(t, err)
		folded += n
		_, ok := countRows(t, m, info.ID)[0]
		return ok
	}, 10*time.Second, 50*time.Millisecond)
	after := countRows(t, m, info.ID)
	require.Contains(t, after, int32(0))
	require.Less(t, len(after), len(before)+1, "rows of ended backends are folded, not copied")
	for shard := range after {
		if shard != 0 {
			require.Contains(t, before, shard, "the rows left are those of live backends")
		}
	}
	require.Empty(t, countRows(t, m, 999999), "counts of a queue that is gone are deleted")
	got := sampleOf(t, m, "q")
	require.Equal(t, want.Ready, got.Ready)
	require.Equal(t, want.Leased, got.Leased)
	require.Equal(t, want.Scheduled, got.Scheduled)
	statsAfter, base := statsCounts(t, m, info.ID)
	require.Equal(t, statsBefore, statsAfter, "the stats counts are the same after the fold")
	require.Positive(t, base, "the stats counts of ended backends are folded into shard 0")
	t.Logf("rows before %v, after %v (%d folded or deleted)", before, after, folded)
}

// TestCountsQueueDelete deletes a queue with items: its counts rows go
// with it (the cascade's trigger writes some first), and a queue re-created
// under its name starts from 0.
func TestCountsQueueDelete(t *testing.T) {
	ctx := context.Background()
	m := openManager(t, pgtest.URL(t))
	require.NoError(t, m.Create(ctx, queue.QueueInfo{Name: "q", LeaseTimeout: time.Minute, Partitions: 1}))
	info, err := m.Info(ctx, "q")
	require.NoError(t, err)
	q, err := m.Get("q")
	require.NoError(t, err)
	require.NoError(t, q.Produce(ctx, []queue.ProduceItem{{Payload: []byte("a")}, {Payload: []byte("b")}}))
	require.NotEmpty(t, countRows(t, m, info.ID))
	require.NoError(t, m.Delete(ctx, "q"))
	require.Empty(t, countRows(t, m, info.ID))
	stats, _ := statsCounts(t, m, info.ID)
	require.Empty(t, stats)
	require.NoError(t, m.Create(ctx, queue.QueueInfo{Name: "q", LeaseTimeout: time.Minute, Partitions: 1}))
	s := sampleOf(t, m, "q")
	require.Equal(t, metrics.QueueSample{Queue: "q"}, s)
}

// withoutCounts drops the item-count triggers and the created_at index, to
// measure what they cost.
func withoutCounts(tb testing.TB, m *Manager) {
	_, err := m.st.pool.Exec(context.Background(), `DROP TRIGGER styx_items_count_insert ON styx_items;
		DROP TRIGGER styx_items_count_update ON styx_items; DROP TRIGGER styx_items_count_delete ON styx_items;
		DROP INDEX styx_items_created`)
	require.NoError(tb, err)
}

// benchURL is a new schema whose connections commit without waiting for
// the WAL flush, so that the benchmarks measure the statements rather than
// the disk.
func benchURL(b *testing.B) string {
	u := pgtest.URL(b) // a URL with a query (search_path), or a DSN
	if strings.Contains(u, "://") {
		return u + "&synchronous_commit=off"
	}
	return u + " synchronous_commit=off"
}

// BenchmarkCounts measures the item statements with the counts (triggers
// and index) and without: a produce of 1000 items, a produce of one, and
// a lease of 10 with their complete. With -benchtime=100x, produce=1000
// produces 100k items.
func BenchmarkCounts(b *testing.B) {
	ctx := context.Background()
	items := func(n int) []queue.ProduceItem {
		out := make([]queue.ProduceItem, n)
		for i := range out {
			out[i] = queue.ProduceItem{Payload: []byte(fmt.Sprintf("payload %d of a benchmark item", i))}
		}
		return out
	}
	for _, counts := range []bool{true, false} {
		setup := func(b *testing.B) queue.Queue {
			m := openManager(b, benchURL(b))
			if !counts {
				withoutCounts(b, m)
			}
			require.NoError(b, m.Create(ctx, queue.QueueInfo{Name: "q", LeaseTimeout: time.Hour, Partitions: 4}))
			q, err := m.Get("q")
			require.NoError(b, err)
			return q
		}
		b.Run(fmt.Sprintf("counts=%v/produce=1000", counts), func(b *testing.B) {
			q := setup(b)
			batch := items(1000)
			b.ResetTimer()
			for range b.N {
				require.NoError(b, q.Produce(ctx, batch))
			}
			b.ReportMetric(float64(b.N*1000)/b.Elapsed().Seconds(), "items/s")
		})
		b.Run(fmt.Sprintf("counts=%v/produce=1", counts), func(b *testing.B) {
			q := setup(b)
			one := items(1)
			b.ResetTimer()
			for range b.N {
				require.NoError(b, q.Produce(ctx, one))
			}
		})
		b.Run(fmt.Sprintf("counts=%v/lease=10+complete", counts), func(b *testing.B) {
			q := setup(b)
			for range (b.N*10)/1000 + 1 {
				require.NoError(b, q.Produce(ctx, items(1000)))
			}
			b.ResetTimer()
			for range b.N {
				res, err := q.Lease(ctx, queue.LeaseParams{BatchSize: 10, ClientID: "c", Timeout: time.Second})
				require.NoError(b, err)
				ids := make([]uint64, len(res.Items))
				for i, it := range res.Items {
					ids[i] = it.ID
				}
				require.NoError(b, q.Complete(ctx, res.Partition, ids))
			}
		})
	}
}

// BenchmarkSample measures the gauges' sample of one queue of 100k items:
// from the counts (Manager.Sample) and, as before them, from Stats
// (queue.Sample).
func BenchmarkSample(b *testing.B) {
	ctx := context.Background()
	m := openManager(b, benchURL(b))
	require.NoError(b, m.Create(ctx, queue.QueueInfo{Name: "q", LeaseTimeout: time.Hour, Partitions: 4}))
	q, err := m.Get("q")
	require.NoError(b, err)
	batch := make([]queue.ProduceItem, 1000)
	for i := range batch {
		batch[i] = queue.ProduceItem{Payload: []byte("x")}
	}
	for range 100 {
		require.NoError(b, q.Produce(ctx, batch))
	}
	_, err = m.st.pool.Exec(ctx, `VACUUM ANALYZE styx_items`)
	require.NoError(b, err)
	b.Run("counts", func(b *testing.B) {
		for range b.N {
			require.Len(b, m.Sample(), 1)
		}
	})
	b.Run("stats", func(b *testing.B) {
		// What a scrape cost before the counts: queue.stats of every queue.
		for range b.N {
			_, err := q.Stats(ctx)
			require.NoError(b, err)
		}
	})
}

package postgres

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/pgtest"
	"github.com/styxq/styx/internal/queue"
)

// TestReadsPostgres measures the reads of issue 38 on PostgreSQL (ADR 0024;
// docs/benchmarks.md "Reads"): one queue.stats call and the first page of
// scheduled.list on a queue of STYX_READS_ITEMS items (default 1,000,000;
// 4 partitions; the last tenth scheduled, so that a page of them is past
// every other item in id order; of the others a tenth leased, a tenth
// failed once, a hundredth dead), inserted by one SQL statement (so the
// counts triggers count them as any statement). Run with STYX_READS_BENCH=1
// and STYX_TEST_POSTGRES_URL; BenchmarkCounts measures what the triggers
// cost the writes.
func TestReadsPostgres(t *testing.T) {
	if os.Getenv("STYX_READS_BENCH") == "" {
		t.Skip("set STYX_READS_BENCH=1 to run")
	}
	n := 1_000_000
	if v := os.Getenv("STYX_READS_ITEMS"); v != "" {
		n, _ = strconv.Atoi(v)
	}
	ctx := context.Background()
	m := openManager(t, pgtest.URL(t))
	require.NoError(t, m.Create(ctx, queue.QueueInfo{Name: "q", LeaseTimeout: time.Minute, ExpireTimeout: 24 * time.Hour, Partitions: 4}))
	info, err := m.Info(ctx, "q")
	require.NoError(t, err)
	q, err := m.Get("q")
	require.NoError(t, err)
	now := time.Now().UnixNano()
	start := time.Now()
	_, err = m.st.pool.Exec(ctx, `INSERT INTO styx_items (queue_id, id, partition, state, deadline, attempts, created_at, payload,
			dead_reason, source_queue)
		SELECT $1, nextval('styx_item_ids'), g % 4, CASE WHEN g > $2 * 9 / 10 THEN 2 WHEN g % 10 = 1 THEN 1 ELSE 0 END,
			CASE WHEN g > $2 * 9 / 10 OR g % 10 = 1 THEN $3 + 3600000000000 ELSE 0 END, CASE WHEN g % 10 = 3 THEN 1 ELSE 0 END,
			$3 - ($2 - g) * 1000000, decode(repeat('ab', 64), 'hex'),
			CASE WHEN g % 100 = 5 THEN 'max_attempts' ELSE '' END, CASE WHEN g % 100 = 5 THEN 'src' ELSE '' END
		FROM generate_series(1, $2::bigint) g`, int64(info.ID), n, now)
	require.NoError(t, err)
	_, err = m.st.pool.Exec(ctx, `VACUUM ANALYZE styx_items`)
	require.NoError(t, err)
	t.Logf("filled %d items in %v", n, time.Since(start))

	timed := func(f func() error) []time.Duration {
		var out []time.Duration
		for range 20 {
			start := time.Now()
			require.NoError(t, f())
			out = append(out, time.Since(start))
		}
		slices.Sort(out)
		return out
	}
	var s queue.Stats
	st := timed(func() (err error) { s, err = q.Stats(ctx); return err })
	total := 0
	for _, p := range s.Partitions {
		total += p.Total
	}
	require.Equal(t, n, total)
	require.Equal(t, n/100, s.DeadByReason["max_attempts"])
	t.Logf("queue.stats on %d items: median %v, min %v, max %v (20 calls)", n, st[len(st)/2], st[0], st[len(st)-1])
	sc := timed(func() error { _, err := q.Scheduled(ctx, 0, 0, 100); return err })
	t.Logf("scheduled.list (first 100 of partition 0) on %d scheduled items: median %v, max %v (20 calls)", n/10,
		sc[len(sc)/2], sc[len(sc)-1])
	// The statement of a page bounded by bytes (readWithin), as
	// storage/scheduled.list reads it.
	rows, err := m.st.pool.Query(ctx, `EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) SELECT id FROM (SELECT *,
			sum(`+sizeSQL+`) OVER (ORDER BY id ROWS UNBOUNDED PRECEDING) - `+sizeSQL+` AS styx_before FROM styx_items
			WHERE queue_id=$1 AND partition=$2 AND state=2 AND id>$3 ORDER BY id LIMIT 100) page
		WHERE styx_before < 4194304 ORDER BY id`, int64(info.ID), 0, 0)
	require.NoError(t, err)
	plan, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	t.Logf("scheduled.list plan:\n%s", strings.Join(plan, "\n"))
}

// TestCountsTriggerCost measures, inside PostgreSQL, what the counts
// trigger costs an item statement (ADR 0024, Consequences): the time
// EXPLAIN ANALYZE gives the trigger, for statements of one item (insert,
// lease, renew, delete) and of many (insert of 1000, lease and delete of
// 5000), with migration 3's function and with the current one swapped in
// turn in one session. Run with STYX_READS_BENCH=1 and
// STYX_TEST_POSTGRES_URL.
func TestCountsTriggerCost(t *testing.T) {
	if os.Getenv("STYX_READS_BENCH") == "" {
		t.Skip("set STYX_READS_BENCH=1 to run")
	}
	ctx := context.Background()
	m := openManager(t, pgtest.URL(t))
	require.NoError(t, m.Create(ctx, queue.QueueInfo{Name: "q", LeaseTimeout: time.Hour, Partitions: 4}))
	info, err := m.Info(ctx, "q")
	require.NoError(t, err)
	qid := int64(info.ID)
	// function returns the statement of a migration that creates
	// styx_count_items, as a replacement.
	function := func(mig string) string {
		i := strings.Index(mig, "DO $do$ BEGIN EXECUTE format($q$\n\tCREATE")
		j := strings.Index(mig[i:], "END $do$;") + len("END $do$;")
		return strings.Replace(mig[i:i+j], "CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1)
	}
	current := ""
	for _, mig := range migrations {
		if strings.Contains(mig, "FUNCTION styx_count_items()") {
			current = mig
		}
	}
	variants := []struct{ name, sql string }{{"migration 3", function(migrations[2])}, {"current", function(current)}}
	require.Contains(t, variants[1].sql, "styx_partition_counts")
	conn, err := m.st.pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	// trigger runs sql under EXPLAIN ANALYZE and returns the time of the
	// counts trigger.
	trigger := func(sql string, args ...any) time.Duration {
		rows, err := conn.Query(ctx, `EXPLAIN (ANALYZE, FORMAT TEXT) `+sql, args...)
		require.NoError(t, err)
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		for _, l := range lines {
			if f := strings.Fields(l); strings.HasPrefix(l, "Trigger styx_items_count_") && len(f) > 2 {
				ms, err := strconv.ParseFloat(strings.TrimPrefix(f[2], "time="), 64)
				require.NoError(t, err)
				return time.Duration(ms * float64(time.Millisecond))
			}
		}
		t.Fatalf("no counts trigger in the plan: %v", lines)
		return 0
	}
	kinds := []string{"insert 1", "lease 1", "renew 1", "delete 1", "insert 1000", "lease 5000", "delete 5000"}
	took := map[string][]time.Duration{}
	for range 6 {
		for _, v := range variants {
			_, err := conn.Exec(ctx, v.sql)
			require.NoError(t, err)
			add := func(kind string, d time.Duration) { took[v.name+"/"+kind] = append(took[v.name+"/"+kind], d) }
			var ids []int64
			for range 100 {
				var id int64
				require.NoError(t, conn.QueryRow(ctx, `SELECT nextval('styx_item_ids')`).Scan(&id))
				ids = append(ids, id)
				add("insert 1", trigger(`INSERT INTO styx_items (queue_id, id, partition, state, created_at) VALUES ($1, $2, $3, 0, $4)`,
					qid, id, int32(id%4), time.Now().UnixNano()))
			}
			for _, id := range ids {
				add("lease 1", trigger(`UPDATE styx_items SET state=1, deadline=$3, attempts=attempts+1 WHERE queue_id=$1 AND id=$2`,
					qid, id, time.Now().Add(time.Minute).UnixNano()))
			}
			for _, id := range ids {
				add("renew 1", trigger(`UPDATE styx_items SET deadline=deadline+1 WHERE queue_id=$1 AND id=$2`, qid, id))
			}
			for _, id := range ids {
				add("delete 1", trigger(`DELETE FROM styx_items WHERE queue_id=$1 AND id=$2`, qid, id))
			}
			for range 5 {
				add("insert 1000", trigger(`INSERT INTO styx_items (queue_id, id, partition, state, created_at)
					SELECT $1, nextval('styx_item_ids'), g % 4, 0, $2::bigint + g FROM generate_series(1, 1000) g`, qid, time.Now().UnixNano()))
			}
			add("lease 5000", trigger(`UPDATE styx_items SET state=1, deadline=$2 WHERE queue_id=$1 AND state=0`, qid,
				time.Now().Add(time.Minute).UnixNano()))
			add("delete 5000", trigger(`DELETE FROM styx_items WHERE queue_id=$1`, qid))
		}
	}
	for _, k := range kinds {
		line := k + ":"
		for _, v := range variants {
			d := took[v.name+"/"+k]
			slices.Sort(d)
			line += fmt.Sprintf("  %s min %v, median %v (%d statements);", v.name, d[0], d[len(d)/2], len(d))
		}
		t.Log(line)
	}
}

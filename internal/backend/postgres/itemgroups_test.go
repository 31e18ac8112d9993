package postgres

import (
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/pgtest"
	"github.com/styxq/styx/internal/queue"
)

// TestMigrateGroups upgrades a schema at version 12 holding ready items of
// a queue: migration 13 (groups) leaves them without a group and leasable
// by the plain lease (styx_items_ready re-created for items without a
// group), and the queue not ordered.
func TestMigrateGroups(t *testing.T) {
	url := pgtest.EmptyURL(t)
	ctx := t.Context()
	pool, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	defer pool.Close()
	_, err = pool.Exec(ctx, `CREATE TABLE styx_schema_migrations (version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())`)
	require.NoError(t, err)
	for v := 1; v <= 12; v++ {
		_, err = pool.Exec(ctx, migrations[v-1])
		require.NoError(t, err, "migration %d", v)
		_, err = pool.Exec(ctx, `INSERT INTO styx_schema_migrations (version) VALUES ($1)`, v)
		require.NoError(t, err)
	}
	now := time.Now().UnixNano()
	_, err = pool.Exec(ctx, `INSERT INTO styx_queues (name, lease_timeout, expire_timeout, max_attempts, partitions, created_at, updated_at)
		VALUES ('old', 60000000000, 3600000000000, 0, 1, $1, $1)`, now)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO styx_items (queue_id, id, partition, state, created_at, payload)
		SELECT id, nextval('styx_item_ids'), 0, 0, $1, 'x' FROM styx_queues, generate_series(1, 3)`, now)
	require.NoError(t, err)

	m := openManager(t, url)
	info, err := m.Info(ctx, "old")
	require.NoError(t, err)
	require.False(t, info.Ordered)
	require.Empty(t, info.GroupDeadPolicy)
	q, err := m.Get("old")
	require.NoError(t, err)
	res, err := q.Lease(ctx, queue.LeaseParams{BatchSize: 10, ClientID: "c", Timeout: time.Second})
	require.NoError(t, err)
	require.Len(t, res.Items, 3)
	for _, it := range res.Items {
		require.Empty(t, it.Group)
	}
	var pred string
	require.NoError(t, pool.QueryRow(ctx, `SELECT pg_get_indexdef('styx_items_ready'::regclass)`).Scan(&pred))
	require.Contains(t, pred, "grp IS NULL")
}

// TestReadyCountsLeasableGroups: on an ordered queue a partition's grouped
// items count as the groups a lease could take, so that a partition whose
// ready items are all blocked (its group's head leased, or its group held)
// draws no waiting lease; on a queue that is not ordered every ready item
// counts.
func TestReadyCountsLeasableGroups(t *testing.T) {
	ctx := t.Context()
	m := openManager(t, pgtest.URL(t))
	for _, ordered := range []bool{true, false} {
		name := map[bool]string{true: "ordered", false: "fair"}[ordered]
		require.NoError(t, m.Create(ctx, queue.QueueInfo{Name: name, LeaseTimeout: time.Minute, ExpireTimeout: time.Hour, Partitions: 4,
			Ordered: ordered}))
		q, err := m.Get(name)
		require.NoError(t, err)
		// Three groups in three partitions: "busy" (100 items, its head
		// leased below), "free" (2 items) and "held" (1 item, held).
		var items []queue.ProduceItem
		for i := range 100 {
			items = append(items, queue.ProduceItem{Payload: fmt.Appendf(nil, "b%d", i), Group: "busy"})
		}
		items = append(items, queue.ProduceItem{Payload: []byte("f1"), Group: "free"}, queue.ProduceItem{Payload: []byte("f2"), Group: "free"},
			queue.ProduceItem{Payload: []byte("h1"), Group: "held1"})
		require.NoError(t, q.Produce(ctx, items))
		parts := map[string]int32{}
		for _, g := range []string{"busy", "free", "held1"} {
			parts[g] = queue.GroupPartition(g, 4)
		}
		require.Len(t, map[int32]bool{parts["busy"]: true, parts["free"]: true, parts["held1"]: true}, 3, "three partitions: %v", parts)
		info, err := m.Info(ctx, name)
		require.NoError(t, err)
		now := time.Now().UnixNano()
		_, err = m.st.pool.Exec(ctx, `UPDATE styx_items SET state=1, deadline=$2 WHERE queue_id=$1 AND id =
			(SELECT min(id) FROM styx_items WHERE queue_id=$1 AND grp='busy')`, int64(info.ID), now+int64(time.Hour))
		require.NoError(t, err)
		_, err = m.st.pool.Exec(ctx, `INSERT INTO styx_held_groups (queue_id, partition, grp, dead_queue_id, dead_key, seq, held_at)
			VALUES ($1, $2, 'held1', $1, 'k', 1, $3)`, int64(info.ID), parts["held1"], now)
		require.NoError(t, err)

		tx, err := m.st.pool.Begin(ctx)
		require.NoError(t, err)
		mode := countAll
		if ordered {
			mode = countLeasable
		}
		ready, _, err := readyCounts(ctx, tx, info.ID, 4, mode, now)
		require.NoError(t, tx.Rollback(ctx))
		require.NoError(t, err)
		want := make([]int, 4)
		if ordered {
			want[parts["free"]] = 1 // one leasable group; busy and held1 count nothing
		} else {
			want[parts["busy"]], want[parts["free"]], want[parts["held1"]] = 99, 2, 1
		}
		require.Equal(t, want, ready, name)
	}
}

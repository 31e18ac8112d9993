package postgres

import (
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
	url := pgtest.URL(t)
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

package postgres

import (
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/pgtest"
	"github.com/styxq/styx/internal/queue"
)

// TestMigrateNamespace upgrades a schema at version 1 holding a queue: the
// queue reads back in the default namespace, and new queues keep theirs.
func TestMigrateNamespace(t *testing.T) {
	url := pgtest.EmptyURL(t)
	ctx := t.Context()
	pool, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	defer pool.Close()
	_, err = pool.Exec(ctx, migrations[0])
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `CREATE TABLE styx_schema_migrations (version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now());
		INSERT INTO styx_schema_migrations (version) VALUES (1)`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO styx_queues (name, lease_timeout, expire_timeout, max_attempts, partitions, created_at, updated_at)
		VALUES ('old', 60000000000, 3600000000000, 0, 1, 1, 1)`)
	require.NoError(t, err)

	s, err := OpenStore(ctx, url, 2)
	require.NoError(t, err)
	defer s.Close()
	old, err := s.GetQueue(ctx, "old")
	require.NoError(t, err)
	require.Equal(t, queue.DefaultNamespace, old.Namespace)
	_, err = s.CreateQueue(ctx, queue.QueueInfo{Name: "new", Namespace: "team-a", Partitions: 1})
	require.NoError(t, err)
	qs, err := s.ListQueues(ctx, queue.ListQueuesParams{Namespace: "team-a"})
	require.NoError(t, err)
	require.Len(t, qs, 1)
	require.Equal(t, "new", qs[0].Name)
	var version int
	require.NoError(t, pool.QueryRow(ctx, `SELECT max(version) FROM styx_schema_migrations`).Scan(&version))
	require.Equal(t, len(migrations), version)
}

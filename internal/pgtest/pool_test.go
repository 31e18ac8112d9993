package pgtest

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/backend/postgres"
	"github.com/styxq/styx/internal/queue"
	"github.com/styxq/styx/metrics"
)

func init() { Prepare = postgres.Migrate }

// schemaOf returns the schema a URL of SchemaURL names.
func schemaOf(t *testing.T, u string) string {
	pu, err := url.Parse(u)
	require.NoError(t, err)
	return pu.Query().Get("search_path")
}

// contents returns the row count of every table of the schema at u and
// the positions of its sequences.
func contents(t *testing.T, u string) map[string]string {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, u)
	require.NoError(t, err)
	defer conn.Close(ctx)
	schema := schemaOf(t, u)
	tables, err := tablesOf(ctx, conn, schema)
	require.NoError(t, err)
	got := map[string]string{}
	for _, tbl := range tables {
		var n string
		require.NoError(t, conn.QueryRow(ctx, `SELECT count(*)::text FROM `+qualified(schema, tbl)).Scan(&n))
		got[tbl] = n
	}
	seqs, err := sequencesOf(ctx, conn, schema)
	require.NoError(t, err)
	for s, v := range seqs {
		got["sequence "+s] = fmt.Sprint(v)
	}
	return got
}

// TestPoolGivesBackAFreshSchema (issue 50): a schema a test wrote to comes
// back from the pool with what a new prepared schema holds; one whose
// definitions a test changed is dropped, not reused; and a session the test
// left open is ended.
func TestPoolGivesBackAFreshSchema(t *testing.T) {
	base := BaseURL(t)
	ctx := context.Background()
	var fresh map[string]string
	var name string
	var left *pgx.Conn
	t.Run("writes", func(t *testing.T) {
		u := SchemaURL(t, base)
		name = schemaOf(t, u)
		fresh = contents(t, u)
		m, err := postgres.Open(ctx, postgres.Config{URL: u, Metrics: metrics.New(), Log: slog.New(slog.DiscardHandler)})
		require.NoError(t, err)
		require.NoError(t, m.Create(ctx, queue.QueueInfo{Name: "q", LeaseTimeout: time.Minute, ExpireTimeout: time.Hour, Partitions: 1}))
		q, err := m.Get("q")
		require.NoError(t, err)
		require.NoError(t, q.Produce(ctx, []queue.ProduceItem{{Payload: []byte("a")}}))
		m.Close()
		require.NotEqual(t, fresh, contents(t, u), "the test wrote")
		left, err = pgx.Connect(ctx, u)
		require.NoError(t, err)
	})
	t.Cleanup(func() { left.Close(ctx) })
	require.Error(t, left.Ping(ctx), "the session left open was ended")

	t.Run("reuses", func(t *testing.T) {
		u := SchemaURL(t, base)
		require.Equal(t, name, schemaOf(t, u), "the schema came back to the pool")
		require.Equal(t, fresh, contents(t, u), "as a new prepared schema")
		conn, err := pgx.Connect(ctx, u)
		require.NoError(t, err)
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, `CREATE INDEX styx_test_extra ON styx_settings (value)`)
		require.NoError(t, err)
	})
	t.Run("changed definitions are dropped", func(t *testing.T) {
		u := SchemaURL(t, base)
		require.NotEqual(t, name, schemaOf(t, u), "the changed schema was not reused")
		conn, err := pgx.Connect(ctx, base)
		require.NoError(t, err)
		defer conn.Close(ctx)
		var n int
		require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM pg_namespace WHERE nspname = $1`, name).Scan(&n))
		require.Zero(t, n, "and it is gone")
	})
}

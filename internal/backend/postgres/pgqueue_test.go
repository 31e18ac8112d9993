package postgres_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/backend/postgres"
	"github.com/styxq/styx/internal/pgtest"
	"github.com/styxq/styx/internal/queue"
	"github.com/styxq/styx/internal/store/storetest"
	"github.com/styxq/styx/metrics"
)

// TestCatalogConformance runs the storage conformance suite's catalog and
// task tests on the postgres store.
func TestCatalogConformance(t *testing.T) {
	base := pgtest.BaseURL(t)
	storetest.RunCatalog(t, func(t *testing.T) storetest.CatalogStore {
		s, err := postgres.OpenStore(t.Context(), pgtest.SchemaURL(t, base), 4)
		require.NoError(t, err)
		return s
	})
}

func testLog() *slog.Logger {
	if os.Getenv("STYX_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func open(t testing.TB, url string) *postgres.Manager {
	m, err := postgres.Open(t.Context(), postgres.Config{URL: url, Log: testLog(), Metrics: metrics.New()})
	require.NoError(t, err)
	t.Cleanup(m.Close)
	return m
}

func TestLeaseOne(t *testing.T) {
	m := open(t, pgtest.URL(t))
	ctx := context.Background()
	require.NoError(t, m.Create(ctx, queue.QueueInfo{Name: "q", LeaseTimeout: time.Minute, Partitions: 2}))
	q, err := m.Get("q")
	require.NoError(t, err)
	require.NoError(t, q.Produce(ctx, []queue.ProduceItem{{Payload: []byte("a")}, {Payload: []byte("b")}, {Payload: []byte("c")}}))
	res, err := q.Lease(ctx, queue.LeaseParams{BatchSize: 1, ClientID: "c", Timeout: time.Second})
	require.NoError(t, err)
	require.Len(t, res.Items, 1)
	st, err := q.Stats(ctx)
	require.NoError(t, err)
	t.Logf("%+v", st)
	require.Equal(t, 1, st.Partitions[0].Leased)
}

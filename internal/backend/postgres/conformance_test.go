package postgres_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/backend/postgres"
	"github.com/styxq/styx/internal/clock"
	"github.com/styxq/styx/internal/engine/enginetest"
	"github.com/styxq/styx/internal/pgtest"
	"github.com/styxq/styx/internal/queue"
	"github.com/styxq/styx/internal/queue/queuetest"
	"github.com/styxq/styx/metrics"
)

// TestConformance runs the queue-semantics suite on PostgreSQL, each row in
// a schema of its own (skipped, or failed under STYX_TEST_REQUIRE_POSTGRES,
// without a test database).
func TestConformance(t *testing.T) {
	base := pgtest.BaseURL(t)
	queuetest.Run(t, func(t *testing.T, clk clock.Clock) queue.Queues {
		m, err := postgres.Open(t.Context(), postgres.Config{URL: pgtest.SchemaURL(t, base), Clock: clk, Log: testLog(), Metrics: metrics.New()})
		require.NoError(t, err)
		t.Cleanup(m.Close)
		return m
	})
}

// TestEngineContract runs the engine.Tx contract suite on PostgreSQL, each
// row in a schema of its own.
func TestEngineContract(t *testing.T) {
	base := pgtest.BaseURL(t)
	enginetest.Run(t, func(t *testing.T, clk clock.Clock) queue.Queues {
		m, err := postgres.Open(t.Context(), postgres.Config{URL: pgtest.SchemaURL(t, base), Clock: clk, Log: testLog(), Metrics: metrics.New()})
		require.NoError(t, err)
		t.Cleanup(m.Close)
		return m
	})
}

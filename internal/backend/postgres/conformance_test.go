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

// openSchema opens queues in a PostgreSQL schema of their own (skipped, or
// failed under STYX_TEST_REQUIRE_POSTGRES, without a test database); with
// twoPhase every dead-letter move takes the two-phase path (ADR 0023,
// Config.TwoPhaseDeadLetters).
func openSchema(t *testing.T, twoPhase bool) queuetest.Open {
	base := pgtest.BaseURL(t)
	return func(t *testing.T, clk clock.Clock) queue.Queues {
		m, err := postgres.Open(t.Context(), postgres.Config{URL: pgtest.SchemaURL(t, base), Clock: clk, Log: testLog(), Metrics: metrics.New(),
			TwoPhaseDeadLetters: twoPhase})
		require.NoError(t, err)
		t.Cleanup(m.Close)
		return m
	}
}

// TestConformance runs the queue-semantics suite on PostgreSQL, each row in
// a schema of its own.
func TestConformance(t *testing.T) {
	queuetest.Run(t, openSchema(t, false))
}

// TestEngineContract runs the engine.Tx contract suite on PostgreSQL, each
// row in a schema of its own.
func TestEngineContract(t *testing.T) { enginetest.Run(t, openSchema(t, false)) }

// TestConformanceTwoPhase runs the queue-semantics suite with every
// dead-letter move taking the two-phase path of a dead-letter queue on
// another cluster (the Manager delivering to itself).
func TestConformanceTwoPhase(t *testing.T) {
	queuetest.Run(t, openSchema(t, true))
}

// TestEngineContractTwoPhase runs the engine.Tx contract suite with every
// dead-letter move taking the two-phase path.
func TestEngineContractTwoPhase(t *testing.T) { enginetest.Run(t, openSchema(t, true)) }

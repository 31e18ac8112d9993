package embedded_test

import (
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/backend/embedded"
	"github.com/styxq/styx/internal/backend/embedded/pebble"
	"github.com/styxq/styx/internal/clock"
	"github.com/styxq/styx/internal/engine/enginetest"
	"github.com/styxq/styx/internal/queue"
	"github.com/styxq/styx/internal/queue/queuetest"
	"github.com/styxq/styx/internal/store"
	"github.com/styxq/styx/metrics"
)

// openManager returns a Manager over s, closed (and s with it) when t ends.
func openManager(t *testing.T, s store.Store, clk clock.Clock) queue.Queues {
	t.Helper()
	m, err := embedded.NewManager(t.Context(), embedded.Config{Store: s, Clock: clk, Log: slog.New(slog.DiscardHandler), Metrics: metrics.New()})
	require.NoError(t, err)
	t.Cleanup(func() {
		m.Close()
		require.NoError(t, s.Close())
	})
	return m
}

// openMemory opens queues on the memory store.
func openMemory(t *testing.T, clk clock.Clock) queue.Queues {
	s, err := pebble.OpenMemory()
	require.NoError(t, err)
	return openManager(t, s, clk)
}

// openPebble opens queues on Pebble (fsync on, as in production).
func openPebble(t *testing.T, clk clock.Clock) queue.Queues {
	s, err := pebble.Open(pebble.Config{Dir: t.TempDir(), Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	return openManager(t, s, clk)
}

// TestConformanceMemory runs the queue-semantics suite on the memory store.
func TestConformanceMemory(t *testing.T) { queuetest.Run(t, openMemory) }

// TestConformancePebble runs the queue-semantics suite on Pebble.
func TestConformancePebble(t *testing.T) { queuetest.Run(t, openPebble) }

// TestEngineContractMemory runs the engine.Tx contract suite on the memory
// store.
func TestEngineContractMemory(t *testing.T) { enginetest.Run(t, openMemory) }

// TestEngineContractPebble runs the engine.Tx contract suite on Pebble.
func TestEngineContractPebble(t *testing.T) { enginetest.Run(t, openPebble) }

package pebble_test

import (
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/backend/embedded/pebble"
	"github.com/styxq/styx/internal/store"
	"github.com/styxq/styx/internal/store/storetest"
)

// quiet drops Pebble's start-up messages.
var quiet = slog.New(slog.DiscardHandler)

func open(t *testing.T, dir string, sync bool) *pebble.Store {
	t.Helper()
	s, err := pebble.Open(pebble.Config{Dir: dir, NoSync: !sync, Logger: quiet})
	require.NoError(t, err)
	return s
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return open(t, t.TempDir(), true) })
}

// TestConformanceInMemory runs the suite on the memory backend: the same
// store over Pebble's in-memory filesystem.
func TestConformanceInMemory(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		s, err := pebble.OpenMemory()
		require.NoError(t, err)
		return s
	})
}

func TestConformanceNoSync(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return open(t, t.TempDir(), false) })
}

func TestReopen(t *testing.T) {
	storetest.RunReopen(t, func(t *testing.T, dir string) store.Store { return open(t, dir, true) })
}

func TestReopenNoSync(t *testing.T) {
	storetest.RunReopen(t, func(t *testing.T, dir string) store.Store { return open(t, dir, false) })
}

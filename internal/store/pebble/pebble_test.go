package pebble_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/store"
	"github.com/styxq/styx/internal/store/pebble"
	"github.com/styxq/styx/internal/store/storetest"
)

func open(t *testing.T, dir string, sync bool) *pebble.Store {
	t.Helper()
	s, err := pebble.Open(pebble.Config{Dir: dir, Sync: sync})
	require.NoError(t, err)
	return s
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return open(t, t.TempDir(), true) })
}

func TestConformanceNoSync(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return open(t, t.TempDir(), false) })
}

func TestReopen(t *testing.T) {
	storetest.RunReopen(t, func(t *testing.T, dir string) store.Store { return open(t, dir, true) })
}

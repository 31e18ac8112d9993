package pebble_test

import (
	"math/rand/v2"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/backend/embedded/pebble"
	"github.com/styxq/styx/internal/queue"
	"github.com/styxq/styx/internal/store"
)

// TestUncleanShutdown: a new store is clean; a store closed by Close opens
// clean once, and unclean after a power cut that came while it was open
// (the marker Close writes is deleted, synced, when it opens), again after
// a second one, and clean after the next Close (store.Recovery, ADR 0034).
func TestUncleanShutdown(t *testing.T) {
	mem := vfs.NewCrashableMem()
	open := func() *pebble.Store {
		t.Helper()
		s, err := pebble.Open(pebble.Config{Dir: "db", FS: mem, Logger: quiet, MinFreeBytes: -1})
		require.NoError(t, err)
		return s
	}
	var _ store.Recovery = (*pebble.Store)(nil)

	s := open()
	assert.False(t, s.Unclean(), "a new store")
	q, err := s.CreateQueue(t.Context(), queue.QueueInfo{Name: "q", Partitions: 1})
	require.NoError(t, err)
	require.NoError(t, s.Close())

	s = open()
	assert.False(t, s.Unclean(), "after Close")
	b := &store.Batch{QueueID: q.ID, LastID: 1}
	b.Insert(0, queue.ItemMeta{ID: 1, BodyID: 1}, queue.ItemBody{Payload: []byte("x")}, queue.ItemErrors{})
	require.NoError(t, s.Write(t.Context(), b))
	// The power goes while it is open: what was synced survives.
	mem = mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0, RNG: rand.New(rand.NewPCG(1, 2))})
	require.NoError(t, s.Close())

	s = open()
	assert.True(t, s.Unclean(), "after a power cut while open")
	// Still unclean on a second power cut: the marker was never written.
	mem = mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0, RNG: rand.New(rand.NewPCG(3, 4))})
	require.NoError(t, s.Close())
	s = open()
	assert.True(t, s.Unclean(), "after a power cut right after an unclean open")
	require.NoError(t, s.Close())
	s = open()
	assert.False(t, s.Unclean(), "after Close again")
	require.NoError(t, s.Close())
}

package postgres

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/pgtest"
	"github.com/styxq/styx/internal/queue"
)

// TestReloadReadBeforeDelete: a reload whose read began before this node
// deleted a queue (its read still holds the queue's row) does not bring the
// queue back once applied; one whose read began after the delete finds
// nothing to bring back either. TestConformance/DeleteQueue failed so once
// under load: Get right after Delete found the queue the refresher had just
// re-added.
func TestReloadReadBeforeDelete(t *testing.T) {
	m := openManager(t, pgtest.URL(t))
	require.NoError(t, m.Create(t.Context(), queue.QueueInfo{Name: "q", LeaseTimeout: 30e9, ExpireTimeout: 60e9, Partitions: 1}))
	func() {
		m.reloading.Lock() // the refresher's reloads wait (the delete's notification asks for one)
		defer m.reloading.Unlock()
		gen, all, err := m.readQueues(t.Context())
		require.NoError(t, err)
		require.Len(t, all, 1)
		require.NoError(t, m.Delete(t.Context(), "q"))
		_, err = m.Get("q")
		require.ErrorIs(t, err, queue.ErrQueueNotFound, "right after the delete")
		m.applyQueues(gen, all)
	}()
	_, err := m.Get("q")
	require.ErrorIs(t, err, queue.ErrQueueNotFound, "a read from before the delete brought the queue back")

	require.NoError(t, m.reload(t.Context()))
	_, err = m.Get("q")
	require.ErrorIs(t, err, queue.ErrQueueNotFound)
	m.mu.RLock()
	defer m.mu.RUnlock()
	require.Empty(t, m.learned, "a later reload forgets the deletion it saw")
}

// TestReloadReadBeforeRecreate: a queue deleted on another node and created
// again under its name on this one (a new id) is not replaced by the old one
// when a reload whose read began before both applies.
func TestReloadReadBeforeRecreate(t *testing.T) {
	url := pgtest.URL(t)
	m1, m2 := openManager(t, url), openManager(t, url)
	info := queue.QueueInfo{Name: "q", LeaseTimeout: 30e9, ExpireTimeout: 60e9, Partitions: 1}
	require.NoError(t, m1.Create(t.Context(), info))
	func() {
		m1.reloading.Lock()
		defer m1.reloading.Unlock()
		gen, all, err := m1.readQueues(t.Context())
		require.NoError(t, err)
		require.Len(t, all, 1)
		require.NoError(t, m2.Delete(t.Context(), "q"))
		require.NoError(t, m1.Create(t.Context(), info))
		m1.applyQueues(gen, all)
	}()
	now, err := m1.Info(t.Context(), "q")
	require.NoError(t, err)
	m1.mu.RLock()
	defer m1.mu.RUnlock()
	require.Equal(t, now.ID, m1.names["q"], "the node serves the queue named q now, not the one deleted")
}

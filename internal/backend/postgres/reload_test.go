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

package pebble_test

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/backend/embedded/pebble"
	"github.com/styxq/styx/internal/queue"
	"github.com/styxq/styx/internal/store"
)

// syncCounter is a Config.OnSync that counts the syncs it is told of.
type syncCounter struct {
	mu    sync.Mutex
	n     int
	total time.Duration
}

func (c *syncCounter) onSync(d time.Duration) {
	c.mu.Lock()
	c.n++
	c.total += d
	c.mu.Unlock()
}

func (c *syncCounter) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// TestOnSyncCountsLogSyncs: with sync on, each of n Writes one after the
// other is one fsync of the write-ahead log, reported to OnSync with its
// duration; with sync off they report none; Close syncs the log once more;
// an in-memory store reports nothing.
func TestOnSyncCountsLogSyncs(t *testing.T) {
	write := func(t *testing.T, s *pebble.Store, q queue.QueueInfo, n int) {
		for id := uint64(1); id <= uint64(n); id++ {
			b := &store.Batch{QueueID: q.ID, LastID: id}
			b.Insert(0, queue.ItemMeta{ID: id, BodyID: id, CreatedAt: time.Now()}, queue.ItemBody{Payload: []byte("x")}, queue.ItemErrors{})
			require.NoError(t, s.Write(t.Context(), b))
		}
	}
	for _, tc := range []struct {
		name   string
		cfg    pebble.Config
		synced bool
	}{
		{"sync", pebble.Config{}, true},
		{"no-sync", pebble.Config{NoSync: true}, false},
		{"in-memory", pebble.Config{InMemory: true}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c syncCounter
			cfg := tc.cfg
			cfg.Dir, cfg.Logger, cfg.OnSync = t.TempDir(), quiet, c.onSync
			s, err := pebble.Open(cfg)
			require.NoError(t, err)
			q, err := s.CreateQueue(t.Context(), queue.QueueInfo{Name: "q", Partitions: 1})
			require.NoError(t, err)
			before := c.count()
			const n = 10
			write(t, s, q, n)
			if tc.synced {
				assert.Equal(t, n, c.count()-before, "one fsync of the log per Write")
			} else {
				assert.Equal(t, 0, c.count()-before, "no fsync without sync")
			}
			mid := c.count()
			require.NoError(t, s.Close())
			if tc.cfg.InMemory {
				assert.Zero(t, c.count(), "an in-memory store reports no sync")
			} else {
				assert.Equal(t, mid+1, c.count(), "Close syncs the log once more")
			}
			c.mu.Lock()
			defer c.mu.Unlock()
			if c.n > 0 {
				assert.Positive(t, c.total)
			}
		})
	}
}

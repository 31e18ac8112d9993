package embedded_test

import (
	"context"
	"log/slog"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/backend/embedded"
	"github.com/styxq/styx/internal/backend/embedded/pebble"
	"github.com/styxq/styx/internal/clock"
	"github.com/styxq/styx/internal/queue"
	"github.com/styxq/styx/internal/store"
	"github.com/styxq/styx/metrics"
)

// panickyLoad is a store whose LoadItems panics while armed: a logical
// queue's loop then dies in Open (engine.Loop.died).
type panickyLoad struct {
	store.Store
	armed atomic.Bool
}

func (s *panickyLoad) LoadItems(ctx context.Context, queueID uint64, partition int32, fn func(queue.ItemMeta) error) error {
	if s.armed.Load() {
		panic("injected: load")
	}
	return s.Store.LoadItems(ctx, queueID, partition, fn)
}

// TestDeadLoopLeavesNoGoroutine (issue 41): a logical queue whose loop dies
// of a panic leaves no goroutine behind (its syncer used to wait for ever:
// only a Shutdown stopped it), and its calls are answered 453.
func TestDeadLoopLeavesNoGoroutine(t *testing.T) {
	mem, err := pebble.OpenMemory()
	require.NoError(t, err)
	s := &panickyLoad{Store: mem}
	m, err := embedded.NewManager(t.Context(), embedded.Config{Store: s, Clock: clock.Real{},
		Log: slog.New(slog.DiscardHandler), Metrics: metrics.New()})
	require.NoError(t, err)
	defer func() {
		m.Close()
		require.NoError(t, mem.Close())
	}()
	before := runtime.NumGoroutine()
	s.armed.Store(true)
	require.NoError(t, m.Create(t.Context(), queue.QueueInfo{Name: "q", LeaseTimeout: time.Minute, ExpireTimeout: time.Hour, Partitions: 1}))
	q, err := m.Get("q")
	require.NoError(t, err)
	err = q.Produce(t.Context(), []queue.ProduceItem{{Payload: []byte("a")}})
	require.ErrorIs(t, err, store.ErrUnavailable, "a call to a dead loop is answered 453")
	require.Contains(t, err.Error(), "queue loop ended")
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		buf := make([]byte, 1<<20)
		t.Fatalf("%d goroutines left behind by the dead loop:\n%s", n-before, buf[:runtime.Stack(buf, true)])
	}
}

package redrive

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/backend/embedded"
	"github.com/styxq/styx/internal/backend/embedded/pebble"
	"github.com/styxq/styx/internal/clock"
	"github.com/styxq/styx/internal/queue"
	"github.com/styxq/styx/metrics"
)

// fixture is what the runner tests start from: an in-memory Pebble store
// with the queue "q" and its dead-letter queue "q-dead" (one partition
// each), holding the dead items of q that newFixture imported.
type fixture struct {
	st     *pebble.Store
	qm     *embedded.Manager
	dlq    queue.Queue
	stored []queue.Item // the dead items, as imported (their ids in order)
	log    *slog.Logger
	m      *metrics.Metrics
}

// newFixture returns a fixture whose dead-letter queue holds n dead items
// of q (payloads "0" to n-1, died explicitly).
func newFixture(t *testing.T, n int) *fixture {
	t.Helper()
	ctx := context.Background()
	st, err := pebble.OpenMemory()
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	f := &fixture{st: st, log: slog.New(slog.NewTextHandler(io.Discard, nil)), m: metrics.New()}
	f.qm, err = embedded.NewManager(ctx, embedded.Config{Store: st, Clock: clock.Real{}, Log: f.log, Metrics: f.m})
	require.NoError(t, err)
	t.Cleanup(f.qm.Close)
	require.NoError(t, f.qm.Create(ctx, queue.QueueInfo{Name: "q-dead", LeaseTimeout: time.Minute, Partitions: 1}))
	require.NoError(t, f.qm.Create(ctx, queue.QueueInfo{Name: "q", LeaseTimeout: time.Minute, Partitions: 1, DeadQueue: "q-dead"}))
	f.dlq, err = f.qm.Get("q-dead")
	require.NoError(t, err)
	if n == 0 {
		return f
	}
	dead := make([]queue.Item, n)
	for i := range dead {
		dead[i] = queue.Item{Body: queue.ItemBody{Payload: fmt.Appendf(nil, "%d", i), SourceQueue: "q",
			DeadReason: "explicit", DeadAt: time.Now()}}
	}
	f.stored, err = f.dlq.Import(ctx, 0, dead)
	require.NoError(t, err)
	return f
}

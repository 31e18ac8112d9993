package service_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	styx "github.com/styxq/styx"
	"github.com/styxq/styx/internal/store"
	pb "github.com/styxq/styx/styxpb"
)

// TestPanicNeverAcknowledged (issue 23, 1): a panic in a queue's loop while
// it writes (a storage engine panicking on a failed write-ahead-log write,
// injected here by a write hook that panics) answers the produce 453 naming
// the panic, never 200; the queue reloads and serves on; the panic is
// counted in styx_queue_loop_panics_total; and after a restart exactly the
// acknowledged items are there. Before the fix, the loop died and every
// caller waiting on it got a nil error, so 200, for items never written.
func TestPanicNeverAcknowledged(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		requireItemLog(t, b)
		s := start(t, b)
		s.createQueue(&pb.QueueInfo{QueueName: "pq"})
		s.produce("pq", "ok-1")

		s.Faults.SetWriteHook(func(b *store.Batch) error {
			for _, op := range b.Ops {
				if op.Kind == store.OpInsert && op.Body != nil && strings.HasPrefix(string(op.Body.Payload), "lost") {
					panic("injected: wal write failed")
				}
			}
			return nil
		})
		for i := range 3 {
			err := s.C.QueueProduce(ctx, &pb.QueueProduceRequest{QueueName: "pq", RequestTimeout: "10s",
				Items: []*pb.QueueProduceItem{{Bytes: fmt.Appendf(nil, "lost-%d", i)}}})
			require.Error(t, err, "a produce whose write panicked is never acknowledged")
			require.Equal(t, styx.CodeUnavailable, styx.ErrorCode(err), err.Error())
			require.Contains(t, err.Error(), "panic")
		}
		s.Faults.SetWriteHook(nil)

		s.produce("pq", "ok-2")
		require.Equal(t, []string{"ok-1", "ok-2"}, payloads(s.items("pq")))
		require.Equal(t, `styx_queue_loop_panics_total{queue="pq"} 3`, metricLine(s.scrape(), `styx_queue_loop_panics_total{queue="pq"}`))

		s.restart()
		require.Equal(t, []string{"ok-1", "ok-2"}, payloads(s.items("pq")))
	})
}

package embedded_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/clock"
	"github.com/styxq/styx/internal/queue"
)

// TestRemovedSourceKeyIgnored (issue 41): a queue ignores a second copy of
// a redriven item it held and removed, as it ignores one it holds: a
// redrive step run again after a write that was answered as failed but
// kept by storage sends its items again, and a consumer may have completed
// the first copies meanwhile. A new key is taken, and an imported
// source_id whose item is gone is imported again (import keeps its
// Querator semantics).
func TestRemovedSourceKeyIgnored(t *testing.T) {
	for name, open := range map[string]func(*testing.T, clock.Clock) queue.Queues{"memory": openMemory, "pebble": openPebble} {
		t.Run(name, func(t *testing.T) {
			qs := open(t, clock.Real{})
			ctx := t.Context()
			require.NoError(t, qs.Create(ctx, queue.QueueInfo{Name: "dst", Partitions: 1, LeaseTimeout: time.Minute, ExpireTimeout: time.Hour}))
			q, err := qs.Get("dst")
			require.NoError(t, err)
			lease := func() []string {
				res, err := q.Lease(ctx, queue.LeaseParams{BatchSize: 10, ClientID: "c", Timeout: 20 * time.Millisecond})
				if err != nil {
					require.ErrorIs(t, err, queue.ErrNoItems)
					return nil
				}
				var got []string
				ids := make([]uint64, len(res.Items))
				for i, it := range res.Items {
					got = append(got, string(it.Payload))
					ids[i] = it.ID
				}
				require.NoError(t, q.Complete(ctx, res.Partition, ids))
				return got
			}
			first := queue.RedriveItem{SourceKey: queue.RedriveKey("dlq", 7), Body: queue.ItemBody{Payload: []byte("first")}}
			require.NoError(t, q.TakeRedriven(ctx, []queue.RedriveItem{first}))
			require.NoError(t, q.TakeRedriven(ctx, []queue.RedriveItem{first}), "a copy the queue holds")
			require.Equal(t, []string{"first"}, lease(), "one copy, completed")

			second := queue.RedriveItem{SourceKey: queue.RedriveKey("dlq", 8), Body: queue.ItemBody{Payload: []byte("second")}}
			require.NoError(t, q.TakeRedriven(ctx, []queue.RedriveItem{first, second}))
			require.Equal(t, []string{"second"}, lease(), "the completed copy is not taken again; a new key is")

			imported := queue.Item{Body: queue.ItemBody{SourceID: "ext-1", Payload: []byte("imported")}}
			_, err = q.Import(ctx, 0, []queue.Item{imported})
			require.NoError(t, err)
			require.Equal(t, []string{"imported"}, lease())
			_, err = q.Import(ctx, 0, []queue.Item{imported})
			require.NoError(t, err)
			require.Equal(t, []string{"imported"}, lease(), "an import after its item is gone adds it again")
		})
	}
}

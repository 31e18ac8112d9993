package queuetest

import (
	"time"

	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/queue"
)

// dedupRows check deduplication ids (queue.Deduplicate) on every backend.
var dedupRows = []row{
	{"DeduplicationWithinWindow", func(e *env) {
		q := e.create("q", func(i *queue.QueueInfo) { i.Partitions = 2 })
		produce := func(payload, id string) {
			e.t.Helper()
			require.NoError(e.t, q.Produce(e.ctx, []queue.ProduceItem{{Payload: []byte(payload), DeduplicationID: id}}))
		}
		produce("a", "x")
		produce("a-again", "x")
		require.NoError(e.t, q.Produce(e.ctx, []queue.ProduceItem{
			{Payload: []byte("b"), DeduplicationID: "y"}, {Payload: []byte("b-again"), DeduplicationID: "y"},
			{Payload: []byte("a-third"), DeduplicationID: "x"}, {Payload: []byte("c")}, {Payload: []byte("c")}}))
		require.ElementsMatch(e.t, []string{"a", "b", "c", "c"}, itemPayloads(e.items(q)))
		e.advance(queue.DeduplicationWindow, q)
		produce("a-new-window", "x")
		require.ElementsMatch(e.t, []string{"a", "b", "c", "c", "a-new-window"}, itemPayloads(e.items(q)))
	}},
	{"DeduplicationRefusedProduceLeavesNoWindow", func(e *env) {
		// A produce the engine refuses after its ids were claimed (an
		// enqueue_at out of range) stores nothing and leaves no window:
		// the id is accepted at its next produce.
		q := e.create("q", nil)
		err := q.Produce(e.ctx, []queue.ProduceItem{{Payload: []byte("refused"), DeduplicationID: "x",
			EnqueueAt: time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC)}})
		requireInvalid(e.t, err, "enqueue_at")
		require.NoError(e.t, q.Produce(e.ctx, []queue.ProduceItem{{Payload: []byte("stored"), DeduplicationID: "x"}}))
		require.Equal(e.t, []string{"stored"}, itemPayloads(e.items(q)))
	}},
	{"RedrivenCopyNotTakenAgain", func(e *env) {
		// A redrive step sent again (its first write's answer was lost)
		// after a consumer completed the first copy stores nothing: the
		// queue remembers the source keys it held for a while (ADR 0003's
		// amendment; PostgreSQL in styx_dedup). A new key is taken.
		q := e.create("dst", nil)
		consume := func() []string {
			e.t.Helper()
			res := e.lease(q, 10)
			ids := make([]uint64, len(res.Items))
			for i, item := range res.Items {
				ids[i] = item.ID
			}
			require.NoError(e.t, q.Complete(e.ctx, res.Partition, ids))
			return payloads(res.Items)
		}
		first := queue.RedriveItem{SourceKey: queue.RedriveKey("dlq", 7), Body: queue.ItemBody{Payload: []byte("first")}}
		require.NoError(e.t, q.TakeRedriven(e.ctx, []queue.RedriveItem{first}))
		require.NoError(e.t, q.TakeRedriven(e.ctx, []queue.RedriveItem{first}), "a copy the queue holds")
		require.Equal(e.t, []string{"first"}, consume(), "one copy, completed")
		second := queue.RedriveItem{SourceKey: queue.RedriveKey("dlq", 8), Body: queue.ItemBody{Payload: []byte("second")}}
		require.NoError(e.t, q.TakeRedriven(e.ctx, []queue.RedriveItem{first, second}))
		require.Equal(e.t, []string{"second"}, consume(), "the completed copy is not taken again; a new key is")
		e.leaseNone(q)
	}},
}

func itemPayloads(items []queue.Item) []string {
	out := make([]string, len(items))
	for i, item := range items {
		out[i] = string(item.Body.Payload)
	}
	return out
}

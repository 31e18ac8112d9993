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
}

func itemPayloads(items []queue.Item) []string {
	out := make([]string, len(items))
	for i, it := range items {
		out[i] = string(it.Body.Payload)
	}
	return out
}

package queue_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/queue"
)

// TestDeadLetterRule: a queue is a dead-letter queue when some queue names
// it as its dead_queue; the three questions (is it one, which queues feed
// it, which are they all) give the same answer, and the empty name is
// never one, although the queues without a dead_queue hold "" there.
func TestDeadLetterRule(t *testing.T) {
	q := func(name, dlq string) queue.QueueInfo { return queue.QueueInfo{Name: name, DeadQueue: dlq} }
	all := []queue.QueueInfo{q("orders", "dlq"), q("billing", ""), q("dlq", ""), q("emails", "dlq"), q("audit", "other"),
		q("other", ""), q("Zeta", "dlq")}

	require.True(t, queue.IsDeadLetterQueue(all, "dlq"))
	require.True(t, queue.IsDeadLetterQueue(all, "other"))
	for _, name := range []string{"orders", "billing", "", "missing"} {
		require.False(t, queue.IsDeadLetterQueue(all, name), name)
		require.Empty(t, queue.SourceQueues(all, name), name)
	}
	require.False(t, queue.IsDeadLetterQueue(nil, "dlq"))

	// Bytewise name order, whatever the order of all.
	require.Equal(t, []string{"Zeta", "emails", "orders"}, queue.SourceQueues(all, "dlq"))
	require.Equal(t, []string{"audit"}, queue.SourceQueues(all, "other"))

	// The set holds a queue named as a dead_queue even when it is not in
	// all (a page of queues.list).
	require.Equal(t, map[string]bool{"dlq": true, "other": true}, queue.DeadLetterQueues(all))
	require.Equal(t, map[string]bool{"x": true}, queue.DeadLetterQueues([]queue.QueueInfo{q("a", "x")}))
	require.NotNil(t, queue.DeadLetterQueues(nil))
	require.Empty(t, queue.DeadLetterQueues(nil))

	// The set and the predicate agree on every name.
	set := queue.DeadLetterQueues(all)
	for _, i := range all {
		require.Equal(t, set[i.Name], queue.IsDeadLetterQueue(all, i.Name), i.Name)
		require.Equal(t, set[i.Name], len(queue.SourceQueues(all, i.Name)) > 0, i.Name)
	}
}

// TestValidateDeleteNamesSources: a dead-letter queue cannot be deleted;
// the error names its source queues by the same rule, in order.
func TestValidateDeleteNamesSources(t *testing.T) {
	all := map[string]queue.QueueInfo{
		"dlq": {Name: "dlq"}, "b": {Name: "b", DeadQueue: "dlq"}, "a": {Name: "a", DeadQueue: "dlq"}, "c": {Name: "c"},
	}
	require.EqualError(t, queue.ValidateDelete(all, "dlq"), "queue 'dlq' cannot be deleted; it is the dead_queue of 'a', 'b'")
	require.NoError(t, queue.ValidateDelete(all, "c"))
	require.NoError(t, queue.ValidateDelete(all, "a"))
	require.EqualError(t, queue.ValidateDelete(all, "none"), "queue does not exist; no such queue named 'none'")
	err := queue.ValidateUpdate(all, all["dlq"], queue.QueueInfo{Name: "dlq", DeadQueue: "c"})
	require.EqualError(t, err, "invalid dead_queue; queue 'dlq' is the dead_queue of 'a', 'b', and a dead-letter queue cannot have one of its own")
}

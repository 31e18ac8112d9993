package auth_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/apierr"
	"github.com/styxq/styx/internal/auth"
	"github.com/styxq/styx/internal/queue"
)

// TestHiddenQueueNames: what an answer to a key limited to "orders*" shows
// of queue names, through the functions every door asks.
func TestHiddenQueueNames(t *testing.T) {
	limited := auth.WithPrincipal(context.Background(), &auth.Principal{Name: "k", Scopes: []auth.Scope{auth.Admin}, Queues: []string{"orders*"}})
	every := auth.WithPrincipal(context.Background(), &auth.Principal{Name: "root", Scopes: []auth.Scope{auth.Admin}})
	open := context.Background() // without --auth

	require.Equal(t, "orders-eu", auth.ShownQueue(limited, "orders-eu"))
	require.Equal(t, auth.HiddenQueue, auth.ShownQueue(limited, "payroll"))
	require.Equal(t, "", auth.ShownQueue(limited, ""), "no source is not a hidden one")
	require.Equal(t, "payroll", auth.ShownQueue(every, "payroll"))
	require.Equal(t, "payroll", auth.ShownQueue(open, "payroll"))

	counts := map[string]int64{"orders": 2, "payroll": 3, "hr": 4}
	require.Equal(t, map[string]int64{"orders": 2, auth.HiddenQueue: 7}, auth.ShownCounts(limited, counts))
	require.Equal(t, map[string]int64{"orders": 2, "payroll": 3, "hr": 4}, counts, "the input is not changed")
	require.Equal(t, counts, auth.ShownCounts(every, counts))
	require.Nil(t, auth.ShownCounts[int](limited, nil))

	all := map[string]queue.QueueInfo{
		"dlq": {Name: "dlq"}, "orders": {Name: "orders", DeadQueue: "dlq"},
		"payroll": {Name: "payroll", DeadQueue: "dlq"}, "hr": {Name: "hr", DeadQueue: "dlq"},
	}
	err := queue.ValidateDelete(all, "dlq")
	full := "queue 'dlq' cannot be deleted; it is the dead_queue of 'hr', 'orders', 'payroll'"
	require.EqualError(t, err, full)
	require.EqualError(t, auth.HideQueues(every, err), full)
	require.EqualError(t, auth.HideQueues(open, err), full)
	hidden := auth.HideQueues(limited, err)
	require.EqualError(t, hidden, "queue 'dlq' cannot be deleted; it is the dead_queue of 'orders' and one or more queues the key does not cover")
	e, ok := apierr.As(hidden)
	require.True(t, ok)
	require.Equal(t, apierr.Invalid, e.Code)
	var oq *queue.OtherQueuesError
	require.True(t, errors.As(hidden, &oq), "the detail stays in the chain")

	other := auth.WithPrincipal(context.Background(), &auth.Principal{Name: "k", Scopes: []auth.Scope{auth.Admin}, Queues: []string{"dlq"}})
	require.EqualError(t, auth.HideQueues(other, err), "queue 'dlq' cannot be deleted; it is the dead_queue of one or more queues the key does not cover")
	require.NoError(t, auth.HideQueues(limited, nil))
	plain := errors.New("disk on fire")
	require.Same(t, plain, auth.HideQueues(limited, plain))

	// A delete refused for a single hidden queue says the same as for
	// three: the count is hidden too.
	one := map[string]queue.QueueInfo{"dlq": {Name: "dlq"}, "payroll": {Name: "payroll", DeadQueue: "dlq"}}
	require.EqualError(t, auth.HideQueues(limited, queue.ValidateDelete(one, "dlq")),
		"queue 'dlq' cannot be deleted; it is the dead_queue of one or more queues the key does not cover")
}

// TestHiddenText: a stored message names the queues a key does not cover
// as auth.HiddenQueue.
func TestHiddenText(t *testing.T) {
	limited := auth.WithPrincipal(context.Background(), &auth.Principal{Name: "k", Scopes: []auth.Scope{auth.Admin}, Queues: []string{"orders*"}})
	msg := "redrive to queue 'payroll': disk full; 'orders' is fine"
	require.Equal(t, "redrive to queue '~hidden': disk full; 'orders' is fine", auth.ShownText(limited, msg, "payroll", "orders", ""))
	require.Equal(t, msg, auth.ShownText(context.Background(), msg, "payroll"))
}

// TestHiddenGroups: the error groups of sources a key does not cover are
// one group per reason and fingerprint.
func TestHiddenGroups(t *testing.T) {
	limited := auth.WithPrincipal(context.Background(), &auth.Principal{Name: "k", Scopes: []auth.Scope{auth.Admin}, Queues: []string{"orders*"}})
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	groups := []queue.ErrorGroup{
		{SourceQueue: "orders", Reason: "explicit", Fingerprint: "a", Count: 3, SampleID: 5, SampleError: "o", FirstDeadAt: t0, LastDeadAt: t0.Add(3)},
		{SourceQueue: "hr", Reason: "explicit", Fingerprint: "a", Count: 2, SampleID: 9, SampleError: "h", FirstDeadAt: t0.Add(1), LastDeadAt: t0.Add(9)},
		{SourceQueue: "payroll", Reason: "explicit", Fingerprint: "a", Count: 2, SampleID: 7, SampleError: "p", FirstDeadAt: t0.Add(2), LastDeadAt: t0.Add(4)},
		{SourceQueue: "payroll", Reason: "expired", Fingerprint: "a", Count: 1, SampleID: 8, SampleError: "e", FirstDeadAt: t0, LastDeadAt: t0},
	}
	require.Equal(t, []queue.ErrorGroup{
		{SourceQueue: auth.HiddenQueue, Reason: "explicit", Fingerprint: "a", Count: 4, SampleID: 7, SampleError: "p", FirstDeadAt: t0.Add(1), LastDeadAt: t0.Add(9)},
		{SourceQueue: "orders", Reason: "explicit", Fingerprint: "a", Count: 3, SampleID: 5, SampleError: "o", FirstDeadAt: t0, LastDeadAt: t0.Add(3)},
		{SourceQueue: auth.HiddenQueue, Reason: "expired", Fingerprint: "a", Count: 1, SampleID: 8, SampleError: "e", FirstDeadAt: t0, LastDeadAt: t0},
	}, auth.ShownGroups(limited, groups))
	require.Equal(t, "hr", groups[1].SourceQueue, "the input is not changed")
	open := context.Background()
	require.Equal(t, groups, auth.ShownGroups(open, groups))
}

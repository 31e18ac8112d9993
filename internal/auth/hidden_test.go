package auth_test

import (
	"context"
	"errors"
	"testing"

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
	require.EqualError(t, hidden, "queue 'dlq' cannot be deleted; it is the dead_queue of 'orders' and 2 queues the key does not cover")
	e, ok := apierr.As(hidden)
	require.True(t, ok)
	require.Equal(t, apierr.Invalid, e.Code)
	var oq *queue.OtherQueuesError
	require.True(t, errors.As(hidden, &oq), "the detail stays in the chain")

	other := auth.WithPrincipal(context.Background(), &auth.Principal{Name: "k", Scopes: []auth.Scope{auth.Admin}, Queues: []string{"dlq"}})
	require.EqualError(t, auth.HideQueues(other, err), "queue 'dlq' cannot be deleted; it is the dead_queue of 3 queues the key does not cover")
	require.NoError(t, auth.HideQueues(limited, nil))
	plain := errors.New("disk on fire")
	require.Same(t, plain, auth.HideQueues(limited, plain))
}

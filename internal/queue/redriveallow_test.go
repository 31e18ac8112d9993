package queue_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/apierr"
	"github.com/styxq/styx/internal/queue"
)

// withPolicy returns a queue whose SQS attributes hold a RedriveAllowPolicy,
// as the SQS API stores it.
func withPolicy(name, policy string) queue.QueueInfo {
	b, _ := json.Marshal(map[string]map[string]string{"sqs": {"RedriveAllowPolicy": policy}})
	return queue.QueueInfo{Name: name, Attributes: string(b)}
}

// TestRedriveAllowPolicy: a dead-letter queue's redrive allow policy is a
// rule of the queue definitions (ValidateCreate, ValidateUpdate), whatever
// door the definition comes through: a queue it leaves out cannot name it
// as its dead_queue (400 naming dead_queue), and a new policy cannot leave
// out a queue that already sends its dead items there.
func TestRedriveAllowPolicy(t *testing.T) {
	arn := func(name string) string { return "arn:aws:sqs:us-east-1:000000000000:" + name }
	closed := withPolicy("closed", `{"redrivePermission":"denyAll"}`)
	picky := withPolicy("picky", `{"redrivePermission":"byQueue","sourceQueueArns":["`+arn("orders")+`"]}`)
	open := withPolicy("open", `{"redrivePermission":"allowAll"}`)
	plain := queue.QueueInfo{Name: "plain"}
	all := map[string]queue.QueueInfo{"closed": closed, "picky": picky, "open": open, "plain": plain}

	require.True(t, queue.AcceptsDeadItems(plain, "x"), "no policy: every queue")
	require.True(t, queue.AcceptsDeadItems(open, "x"))
	require.False(t, queue.AcceptsDeadItems(closed, "x"))
	require.True(t, queue.AcceptsDeadItems(picky, "orders"))
	require.False(t, queue.AcceptsDeadItems(picky, "billing"))
	require.True(t, queue.AcceptsDeadItems(queue.QueueInfo{Attributes: `{"sqs":{"RedriveAllowPolicy":"not json"}}`}, "x"),
		"a policy that does not parse is the SQS API's to refuse when it is set")

	refused := func(err error, msg string) *queue.RedriveAllowError {
		t.Helper()
		require.EqualError(t, err, msg)
		e, ok := apierr.As(err)
		require.True(t, ok)
		require.Equal(t, apierr.Invalid, e.Code)
		require.True(t, errors.Is(err, queue.ErrRedriveAllowPolicy))
		var ra *queue.RedriveAllowError
		require.True(t, errors.As(err, &ra))
		return ra
	}

	// The source's side, on create and on update.
	ra := refused(queue.ValidateCreate(all, queue.QueueInfo{Name: "billing", DeadQueue: "picky"}),
		"invalid dead_queue; queue 'picky' does not accept dead items from 'billing': its redrive allow policy (SQS's RedriveAllowPolicy) leaves it out")
	require.Equal(t, "picky", ra.DeadQueue)
	require.Equal(t, "billing", ra.Source)
	require.NoError(t, queue.ValidateCreate(all, queue.QueueInfo{Name: "orders", DeadQueue: "picky"}))
	require.NoError(t, queue.ValidateCreate(all, queue.QueueInfo{Name: "billing", DeadQueue: "open"}))
	all["billing"] = queue.QueueInfo{Name: "billing"}
	refused(queue.ValidateUpdate(all, all["billing"], queue.QueueInfo{Name: "billing", DeadQueue: "closed"}),
		"invalid dead_queue; queue 'closed' does not accept dead items from 'billing': its redrive allow policy (SQS's RedriveAllowPolicy) leaves it out")

	// The dead-letter queue's side: a new policy keeps its sources.
	all["orders"] = queue.QueueInfo{Name: "orders", DeadQueue: "plain"}
	all["emails"] = queue.QueueInfo{Name: "emails", DeadQueue: "plain"}
	ra = refused(queue.ValidateUpdate(all, plain, withPolicy("plain", `{"redrivePermission":"denyAll"}`)),
		"invalid attributes; the redrive allow policy (SQS's RedriveAllowPolicy) of 'plain' leaves out 'emails', 'orders', "+
			"which send their dead items to it: allow them, or remove their dead_queue first")
	require.Equal(t, []string{"emails", "orders"}, ra.Sources)
	var oq *queue.OtherQueuesError
	require.True(t, errors.As(ra, &oq), "the sources are other queues, hidden from a key that does not cover them")
	require.Equal(t, "invalid attributes; the redrive allow policy (SQS's RedriveAllowPolicy) of 'plain' leaves out 'orders' "+
		"and one or more queues the key does not cover, which send their dead items to it: allow them, or remove their dead_queue first",
		oq.Message(func(name string) bool { return name == "orders" }))
	require.NoError(t, queue.ValidateUpdate(all, plain,
		withPolicy("plain", `{"redrivePermission":"byQueue","sourceQueueArns":["`+arn("orders")+`","`+arn("emails")+`"]}`)))
	// Unchanged attributes are not looked at.
	require.NoError(t, queue.ValidateUpdate(all, closed, closed))
}

package auth

import (
	"context"
	"errors"

	"github.com/styxq/styx/internal/apierr"
	"github.com/styxq/styx/internal/queue"
)

// What an answer may name: no answer or error names a queue the request's
// key does not cover (Allowed), on any door (docs/security.md, "Queue
// names a key cannot see"). Every door asks these functions, so the rule
// is written once: /v1 (service) for dead items' source_queue, dead.groups,
// queue.stats' dead_by_source and the refusals of queues.create, update and
// delete; the SQS API for DeadLetterQueueSourceArn (Allowed) and the
// refusals of CreateQueue, SetQueueAttributes and DeleteQueue.

// HiddenQueue is what an answer shows in place of the name of a queue the
// request's key does not cover (ShownQueue, ShownCounts). A queue's name
// cannot hold '~', so it is never a real queue's, and a request that names
// it as a queue is refused (400).
const HiddenQueue = "~hidden"

// ShownQueue returns name as an answer to the request shows it: name
// itself without --auth, when name is empty, or when the key covers it
// (Allowed), and HiddenQueue otherwise. A dead item's source_queue (dead.list,
// dead.edit, storage/items.list) and a dead.groups group's go through it.
func ShownQueue(ctx context.Context, name string) string {
	if name == "" || Allowed(ctx, name) {
		return name
	}
	return HiddenQueue
}

// ShownCounts returns counts by queue name as an answer to the request
// shows them: the counts of the queues the key does not cover are summed
// under HiddenQueue, so that the counts still add up to the same total
// (queue.stats' dead_by_source). It returns counts itself without --auth
// or for a key of every queue, and a new map otherwise (nil for an empty
// one).
func ShownCounts[N int | int64](ctx context.Context, counts map[string]N) map[string]N {
	if p := FromContext(ctx); p == nil || len(p.Queues) == 0 {
		return counts
	}
	var out map[string]N
	for name, n := range counts {
		if out == nil {
			out = make(map[string]N, len(counts))
		}
		out[ShownQueue(ctx, name)] += n
	}
	return out
}

// HideQueues returns err as an answer to the request shows it: a refusal
// of the dead-letter rules that names other queues (queue.OtherQueuesError:
// "it is the dead_queue of …") names those the key covers and counts the
// others ("a queue the key does not cover"), with the same code and
// sentinel; any other error, or every error without --auth, is returned as
// it is. Every door passes the errors of creating, updating and deleting a
// queue through it.
func HideQueues(ctx context.Context, err error) error {
	var oq *queue.OtherQueuesError
	ae, ok := apierr.As(err)
	if !ok || !errors.As(err, &oq) || FromContext(ctx) == nil {
		return err
	}
	msg := oq.Message(func(name string) bool { return Allowed(ctx, name) })
	if msg == ae.Message {
		return err
	}
	return &apierr.Error{Code: ae.Code, Message: msg, Err: ae.Err}
}

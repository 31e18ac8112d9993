package auth

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strings"

	"github.com/styxq/styx/internal/apierr"
	"github.com/styxq/styx/internal/queue"
)

// What an answer may name: no answer or error names a queue the request's
// key does not cover (Allowed), on any door (docs/security.md, "Queue
// names a key cannot see"), nor tells how many such queues there are. Every
// door asks these functions, so the rule is written once: /v1 (service)
// for dead items' source_queue, dead.groups (ShownGroups), queue.stats'
// dead_by_source, a queue's dead_queue (queues.info, queues.list,
// queue.retry's outcomes), a redrive task's filter.source_queue,
// destination, by_queue and by_destination, and the refusals of
// queues.create, update and delete; the SQS API for
// DeadLetterQueueSourceArn (Allowed), RedrivePolicy's deadLetterTargetArn,
// RedriveAllowPolicy's sourceQueueArns, a move task's DestinationArn and
// the refusals of CreateQueue, SetQueueAttributes and DeleteQueue.
//
// A request may not name such a queue either: the queues a request names
// (its queue_name, dead_queue, destination, a dead filter's source_queue,
// an imported item's source_queue) are checked against the key before the
// call (Authorize, 403), whether they exist or not.

// HiddenQueue is what an answer shows in place of the name of a queue the
// request's key does not cover (ShownQueue, ShownCounts). A queue's name
// cannot hold '~', so it is never a real queue's, and a request that names
// it as a queue is refused (400).
const HiddenQueue = "~hidden"

// ShownQueue returns name as an answer to the request shows it: name
// itself without --auth, when name is empty, or when the key covers it
// (Allowed), and HiddenQueue otherwise. A dead item's source_queue
// (dead.list, dead.edit, storage/items.list), a queue's dead_queue and a
// redrive task's queues go through it.
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
	if !Hides(ctx) {
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

// ShownText returns text (a stored message: a redrive task's
// failure_reason) as an answer to the request shows it: each of names the
// key does not cover, where text quotes it ('name'), reads
// '~hidden'. Callers pass the queues the text may name.
func ShownText(ctx context.Context, text string, names ...string) string {
	if !Hides(ctx) || text == "" {
		return text
	}
	for _, n := range names {
		if n != "" && !Allowed(ctx, n) {
			text = strings.ReplaceAll(text, "'"+n+"'", "'"+HiddenQueue+"'")
		}
	}
	return text
}

// Hides reports whether an answer to the request may hide queue names: the
// request has a key limited to some queues. Without --auth, or for a key
// of every queue, the Shown* functions return their input.
func Hides(ctx context.Context) bool {
	p := FromContext(ctx)
	return p != nil && len(p.Queues) > 0
}

// ShownGroups returns the error groups of a dead-letter queue (dead.groups)
// as an answer to the request shows them: the source_queue of each through
// ShownQueue, and the groups that then have the same source_queue, reason
// and fingerprint merged into one (so the key cannot tell how many queues
// it does not cover send such items): counts summed, the earliest
// first_dead_at and the latest last_dead_at, the sample of the group with
// the lowest sample id. The result is ordered as queue.ErrorGroups: largest
// first, ties by source queue, reason, fingerprint. It returns groups
// itself when Hides is false, a new slice otherwise. A caller that merges
// part of a queue's groups merges part of them: to count the groups an
// answer shows (dead.groups' total_groups), pass them all.
func ShownGroups(ctx context.Context, groups []queue.ErrorGroup) []queue.ErrorGroup {
	if !Hides(ctx) {
		return groups
	}
	type key struct{ source, reason, fingerprint string }
	var out []queue.ErrorGroup
	at := make(map[key]int, len(groups))
	for _, g := range groups {
		g.SourceQueue = ShownQueue(ctx, g.SourceQueue)
		k := key{g.SourceQueue, g.Reason, g.Fingerprint}
		i, ok := at[k]
		if !ok {
			at[k] = len(out)
			out = append(out, g)
			continue
		}
		m := &out[i]
		m.Count += g.Count
		if g.FirstDeadAt.Before(m.FirstDeadAt) {
			m.FirstDeadAt = g.FirstDeadAt
		}
		if g.LastDeadAt.After(m.LastDeadAt) {
			m.LastDeadAt = g.LastDeadAt
		}
		if g.SampleID < m.SampleID {
			m.SampleID, m.SampleError, m.Pattern = g.SampleID, g.SampleError, g.Pattern
		}
	}
	slices.SortStableFunc(out, func(a, b queue.ErrorGroup) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.SourceQueue, b.SourceQueue),
			cmp.Compare(a.Reason, b.Reason), cmp.Compare(a.Fingerprint, b.Fingerprint))
	})
	return out
}

// HideQueues returns err as an answer to the request shows it: a refusal
// of the dead-letter rules that names other queues (queue.OtherQueuesError:
// "it is the dead_queue of …") names those the key covers and not the
// others, nor how many they are ("one or more queues the key does not
// cover"; queue.OtherQueuesError.Message), with the same code and
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

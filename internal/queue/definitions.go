package queue

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"

	"github.com/styxq/styx/internal/apierr"
)

// Exists answers a create of a queue that exists: 400, as Querator answers
// it (its AlreadyExists test), with Querator's message "queue already
// exists; '<name>'". It wraps ErrQueueExists (reason queue_exists, which
// styx.IsQueueExists reads).
func Exists(name string) error {
	return apierr.Wrap(ErrQueueExists, apierr.Invalid, "queue already exists; '%s'", name)
}

// NotFound is the error for a queue that does not exist: apierr.Invalid
// (400) with Querator's message "queue does not exist; no such queue named
// '<name>'", on every path, not 404 (404 is for Styx's own resources, such
// as a redrive task; docs/wire-contract.md). It wraps ErrQueueNotFound.
func NotFound(name string) error {
	return apierr.Wrap(ErrQueueNotFound, apierr.Invalid, "queue does not exist; no such queue named '%s'", name)
}

// MaxAttempts is the largest max_attempts of a queue, in attempts; 0 means
// unlimited. It is the one limit of every door: /v1's max_attempts and the
// SQS API's maxReceiveCount (AWS documents 1 to 1,000 for maxReceiveCount;
// Styx takes 1 to MaxAttempts there, 0 having no meaning in SQS).
const MaxAttempts = 65536

// CheckMaxAttempts returns an apierr.Invalid error wrapping ErrMaxAttempts
// unless n is a valid max_attempts: 0 (unlimited) to MaxAttempts.
// ValidateCreate and ValidateUpdate apply it; the doors call it first to
// answer in their own order and words.
func CheckMaxAttempts(n int64) error {
	if n < 0 || n > MaxAttempts {
		return apierr.Wrap(ErrMaxAttempts, apierr.Invalid, "invalid max_attempts; %d is out of range 0..%d", n, MaxAttempts)
	}
	return nil
}

// ValidateCreate checks a new queue against the stored ones (all, by name):
// apierr.Invalid if the name is taken, if max_attempts is out of range
// (CheckMaxAttempts), or if its dead_queue breaks a rule (see
// checkDeadQueue: the redrive allow policy of the dead_queue included).
func ValidateCreate(all map[string]QueueInfo, info QueueInfo) error {
	if _, ok := all[info.Name]; ok {
		return Exists(info.Name)
	}
	if err := CheckMaxAttempts(int64(info.MaxAttempts)); err != nil {
		return err
	}
	return checkDeadQueue(all, info)
}

// ValidateUpdate checks a queue's new configuration against its old one and
// the other queues: partitions are never removed, max_attempts is in range
// (CheckMaxAttempts), a dead-letter queue gets no dead_queue of its own, its
// new redrive allow policy still accepts the queues that send it their dead
// items (ErrRedriveAllowPolicy), and the dead_queue rules hold.
func ValidateUpdate(all map[string]QueueInfo, old, info QueueInfo) error {
	if err := CheckMaxAttempts(int64(info.MaxAttempts)); err != nil {
		return err
	}
	if info.Partitions < old.Partitions {
		return apierr.Invalidf("invalid requested_partitions; queue '%s' has %d partitions, which cannot be reduced to %d",
			info.Name, old.Partitions, info.Partitions)
	}
	if info.DeadQueue != "" && info.DeadQueue != old.DeadQueue {
		if refs := referrers(all, info.Name); len(refs) > 0 {
			return otherQueues("invalid dead_queue; queue '"+info.Name+"' is the dead_queue of ", refs,
				", and a dead-letter queue cannot have one of its own", false)
		}
	}
	if err := checkRedriveAllowSources(all, old, info); err != nil {
		return err
	}
	return checkDeadQueue(all, info)
}

// ValidateDelete checks that name exists (the error of NotFound) and is no
// queue's dead_queue (apierr.Invalid, naming those queues in an
// OtherQueuesError).
func ValidateDelete(all map[string]QueueInfo, name string) error {
	if _, ok := all[name]; !ok {
		return NotFound(name)
	}
	if refs := referrers(all, name); len(refs) > 0 {
		return otherQueues("queue '"+name+"' cannot be deleted; it is the dead_queue of ", refs, "", false)
	}
	return nil
}

// checkDeadQueue enforces the dead-letter configuration rules on info: its
// dead_queue exists (else an error wrapping ErrDeadQueueNotFound), is not
// the queue itself, has no dead_queue of its own (no chains), and accepts
// info's dead items by its redrive allow policy (else an error wrapping
// ErrRedriveAllowPolicy; redriveallow.go).
func checkDeadQueue(all map[string]QueueInfo, info QueueInfo) error {
	if info.DeadQueue == "" {
		return nil
	}
	if info.DeadQueue == info.Name {
		return apierr.Invalidf("invalid dead_queue; a queue cannot be its own dead_queue ('%s')", info.Name)
	}
	dlq, ok := all[info.DeadQueue]
	if !ok {
		return apierr.Wrap(ErrDeadQueueNotFound, apierr.Invalid, "invalid dead_queue; queue '%s' does not exist", info.DeadQueue)
	}
	if dlq.DeadQueue != "" {
		return otherQueues("invalid dead_queue; '"+info.DeadQueue+"' has a dead_queue of its own (", []string{dlq.DeadQueue},
			"), and dead-letter queues cannot be chained", true)
	}
	return checkRedriveAllow(dlq, info.Name)
}

// IsDeadLetterQueue reports whether the queue named name is named as a
// dead_queue among all (every queue of the server): the definitions' half
// of the dead-letter rule (see DeadLetterQueue), which needs no look at the
// queue's items. The SQS API's ListDeadLetterSourceQueues and the console
// ask it. A dead-letter queue has no dead_queue of its own (ValidateCreate,
// ValidateUpdate). False for an empty name.
func IsDeadLetterQueue(all []QueueInfo, name string) bool {
	return slices.ContainsFunc(all, func(q QueueInfo) bool { return feeds(q, name) })
}

// HoldsDeadItems reports whether a queue's stats count dead items it holds
// (Stats.DeadByReason): the items' half of the dead-letter rule.
func HoldsDeadItems(st Stats) bool {
	for _, n := range st.DeadByReason {
		if n > 0 {
			return true
		}
	}
	return false
}

// DeadLetterQueue returns the queue named name and its definition when it
// is a dead-letter queue: the check of every call that acts on dead items,
// whatever the door (/v1's dead.* calls, redrive tasks and so SQS's
// StartMessageMoveTask). The rule, asked here only: a queue is a
// dead-letter queue while some queue names it as its dead_queue
// (IsDeadLetterQueue) or while it holds dead items (HoldsDeadItems, from
// its stats), so a dead-letter queue that the last queue naming it has
// dropped, or whose only source was deleted, can still be worked until
// its dead items are gone (issue 49). It returns the error of NotFound
// when there is no such queue, the error of a failed stats read, and an
// apierr.Invalid wrapping ErrNotDeadLetterQueue otherwise: another queue
// holds live work, which those calls never touch.
func DeadLetterQueue(ctx context.Context, qs Queues, name string) (Queue, QueueInfo, error) {
	q, err := qs.Get(name)
	if err != nil {
		return nil, QueueInfo{}, err
	}
	info, err := qs.Info(ctx, name)
	if err != nil {
		return nil, QueueInfo{}, err
	}
	all, err := qs.List(ctx, ListQueuesParams{})
	if err != nil {
		return nil, QueueInfo{}, err
	}
	if IsDeadLetterQueue(all, name) {
		return q, info, nil
	}
	st, err := q.Stats(ctx)
	if err != nil {
		return nil, info, err
	}
	if !HoldsDeadItems(st) {
		return nil, info, apierr.Wrap(ErrNotDeadLetterQueue, apierr.Invalid,
			"invalid queue_name; queue '%s' is not a dead-letter queue (no queue names it as its dead_queue and it holds "+
				"no dead items); dead.* calls act only on the dead items of a dead-letter queue", name)
	}
	return q, info, nil
}

// SourceQueues returns the names of the queues of all (every queue of the
// server) whose dead_queue is dlq, the queues whose dead items dlq
// receives, in bytewise name order; none when no queue names dlq
// (IsDeadLetterQueue) or it is empty.
func SourceQueues(all []QueueInfo, dlq string) []string {
	var out []string
	for _, q := range all {
		if feeds(q, dlq) {
			out = append(out, q.Name)
		}
	}
	slices.Sort(out)
	return out
}

// DeadLetterQueues returns the names that some queue of all (every queue
// of the server) names as its dead_queue, as a set (IsDeadLetterQueue for
// each). Never nil.
func DeadLetterQueues(all []QueueInfo) map[string]bool {
	out := map[string]bool{}
	for _, q := range all {
		if feeds(q, q.DeadQueue) {
			out[q.DeadQueue] = true
		}
	}
	return out
}

// feeds reports whether src sends its dead items to the queue named dlq:
// the dead-letter rule's one comparison.
func feeds(src QueueInfo, dlq string) bool { return dlq != "" && src.DeadQueue == dlq }

// referrers returns the names of the queues whose dead_queue is name, in
// bytewise order (SourceQueues over a map).
func referrers(all map[string]QueueInfo, name string) []string {
	return SourceQueues(slices.Collect(maps.Values(all)), name)
}

func quoteList(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = "'" + n + "'"
	}
	return strings.Join(q, ", ")
}

// OtherQueuesError is the detail of a refusal by the dead-letter rules
// (ValidateUpdate, ValidateDelete, checkDeadQueue) that names queues other
// than those of the request: the queues whose dead_queue is the queue
// acted on, or the dead_queue of the dead_queue given. A request's key may
// not cover them, and no answer names a queue its key does not cover
// (docs/security.md): the doors answer Message with the names the key may
// see (auth.HideQueues), the apierr.Error that carries it answers every
// name. errors.As finds it in the chain of that apierr.Error (its Err).
type OtherQueuesError struct {
	// Queues are the other queues the refusal names, in bytewise order.
	Queues []string
	// before and after surround the list of Queues in the message.
	before, after string
	// one is set when Queues is one queue by the rules (a queue's
	// dead_queue), whose number is no secret.
	one bool
}

// otherQueues returns the apierr.Invalid refusal before + the list of
// queues + after, whose detail is an OtherQueuesError (one: see its field).
func otherQueues(before string, queues []string, after string, one bool) error {
	e := &OtherQueuesError{Queues: queues, before: before, after: after, one: one}
	return apierr.Wrap(e, apierr.Invalid, "%s", e.Error())
}

// Error returns the message naming every queue of e.
func (e *OtherQueuesError) Error() string { return e.Message(nil) }

// Message returns the refusal's message, naming the queues of e for which
// shown is true (every one when shown is nil) and not the others, nor how
// many they are: "'orders' and one or more queues the key does not cover"
// (a dead_queue's dead_queue, one by the rules: "a queue the key does not
// cover").
func (e *OtherQueuesError) Message(shown func(name string) bool) string {
	var named []string
	hidden := false
	for _, q := range e.Queues {
		if shown == nil || shown(q) {
			named = append(named, q)
		} else {
			hidden = true
		}
	}
	list := quoteList(named)
	if hidden {
		others := "one or more queues the key does not cover"
		if e.one {
			others = "a queue the key does not cover"
		}
		if len(named) > 0 {
			others = " and " + others
		}
		list += others
	}
	return e.before + list + e.after
}

// ErrUnknownCluster is wrapped by CheckCluster's refusal.
var ErrUnknownCluster = errors.New("unknown cluster")

// CheckCluster is the rule of queues.create's cluster field (ADR 0023):
// nil when name is empty (the server chooses) or one of clusters, the
// names of the PostgreSQL clusters the server runs on; otherwise
// apierr.Invalid naming cluster, the value and the clusters there are
// (none on memory and Pebble, whose clusters is empty), wrapping
// ErrUnknownCluster.
func CheckCluster(name string, clusters []string) error {
	if name == "" || slices.Contains(clusters, name) {
		return nil
	}
	if len(clusters) == 0 {
		return apierr.Wrap(ErrUnknownCluster, apierr.Invalid, "invalid cluster; '%s': this server's storage has no "+
			"PostgreSQL clusters (cluster applies to storage postgres only)", name)
	}
	return apierr.Wrap(ErrUnknownCluster, apierr.Invalid, "invalid cluster; '%s' is not one of this server's PostgreSQL clusters (%s)",
		name, strings.Join(clusters, ", "))
}

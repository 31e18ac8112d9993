package queue

import (
	"slices"
	"strings"

	"github.com/styxq/styx/internal/apierr"
)

// Exists answers a create of a queue that exists: 400, as Querator answers
// it (its AlreadyExists test), with a message styx.IsQueueExists
// recognises.
func Exists(name string) error {
	return apierr.Invalidf("queue already exists; '%s'", name)
}

// NotFound is the error for a queue that does not exist: apierr.Invalid
// (400) with Querator's message "queue does not exist; no such queue named
// '<name>'", on every path, not 404 (404 is for Styx's own resources, such
// as a redrive task; docs/wire-contract.md).
func NotFound(name string) error {
	return apierr.Invalidf("queue does not exist; no such queue named '%s'", name)
}

// ValidateCreate checks a new queue against the stored ones (all, by name):
// apierr.Invalid if the name is taken, apierr.Invalid if its dead_queue
// breaks a rule (see checkDeadQueue).
func ValidateCreate(all map[string]QueueInfo, info QueueInfo) error {
	if _, ok := all[info.Name]; ok {
		return Exists(info.Name)
	}
	return checkDeadQueue(all, info)
}

// ValidateUpdate checks a queue's new configuration against its old one and
// the other queues: partitions are never removed, a dead-letter queue gets
// no dead_queue of its own, and the dead_queue rules hold.
func ValidateUpdate(all map[string]QueueInfo, old, info QueueInfo) error {
	if info.Partitions < old.Partitions {
		return apierr.Invalidf("invalid requested_partitions; queue '%s' has %d partitions, which cannot be reduced to %d",
			info.Name, old.Partitions, info.Partitions)
	}
	if info.DeadQueue != "" && info.DeadQueue != old.DeadQueue {
		if refs := referrers(all, info.Name); len(refs) > 0 {
			return apierr.Invalidf("invalid dead_queue; queue '%s' is the dead_queue of %s, and a dead-letter queue cannot have one of its own",
				info.Name, quoteList(refs))
		}
	}
	return checkDeadQueue(all, info)
}

// ValidateDelete checks that name exists (the error of NotFound) and is no
// queue's dead_queue (apierr.Invalid).
func ValidateDelete(all map[string]QueueInfo, name string) error {
	if _, ok := all[name]; !ok {
		return NotFound(name)
	}
	if refs := referrers(all, name); len(refs) > 0 {
		return apierr.Invalidf("queue '%s' cannot be deleted; it is the dead_queue of %s", name, quoteList(refs))
	}
	return nil
}

// checkDeadQueue enforces the dead-letter configuration rules on info: its
// dead_queue exists, is not the queue itself, and has no dead_queue of its
// own (no chains).
func checkDeadQueue(all map[string]QueueInfo, info QueueInfo) error {
	if info.DeadQueue == "" {
		return nil
	}
	if info.DeadQueue == info.Name {
		return apierr.Invalidf("invalid dead_queue; a queue cannot be its own dead_queue ('%s')", info.Name)
	}
	dlq, ok := all[info.DeadQueue]
	if !ok {
		return apierr.Invalidf("invalid dead_queue; queue '%s' does not exist", info.DeadQueue)
	}
	if dlq.DeadQueue != "" {
		return apierr.Invalidf("invalid dead_queue; '%s' has a dead_queue of its own ('%s'), and dead-letter queues cannot be chained",
			info.DeadQueue, dlq.DeadQueue)
	}
	return nil
}

// referrers returns the names of the queues whose dead_queue is name.
func referrers(all map[string]QueueInfo, name string) []string {
	var refs []string
	for _, i := range all {
		if i.DeadQueue == name {
			refs = append(refs, i.Name)
		}
	}
	slices.Sort(refs)
	return refs
}

func quoteList(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = "'" + n + "'"
	}
	return strings.Join(q, ", ")
}

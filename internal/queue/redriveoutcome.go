package queue

import "strings"

// A redrive task's outcomes (issue 49): an item a tracked redrive task
// moves carries the task's id in its source key, "redrive:<dead-letter
// queue>~<dead item id>~<task id>" (RedriveTaskKey), which every backend
// keeps with the item through its requeues. When the item completes, is
// retried or dies in its destination, the engine reads the task id off the
// key (RedriveTaskOf) and reports the outcome to the task's runner
// (metrics.RedriveOutcome). Items that were not redriven carry no such key
// and cost nothing.

// RedriveTaskKey is the source key of dead item id of deadQueue once
// redriven by task (a tracked task: redrive.Task.Tracked): RedriveKey's
// key with "~<task>" added. The destination holds at most one item per key
// as for RedriveKey (a step run again by the same task sends the same key).
func RedriveTaskKey(deadQueue string, id uint64, task string) string {
	return RedriveKey(deadQueue, id) + "~" + task
}

// RedriveTaskOf returns the id of the redrive task that moved the item
// whose source key is key (RedriveTaskKey), or "" when the item was not
// redriven by a tracked task (no key, another kind of key, or a redrive key
// without a task: RedriveKey).
func RedriveTaskOf(key string) string {
	if !strings.HasPrefix(key, whyRedrive+":") {
		return ""
	}
	first, last := strings.IndexByte(key, '~'), strings.LastIndexByte(key, '~')
	if first < 0 || first == last {
		return ""
	}
	return key[last+1:]
}

// OnceKey is the part of source key key by which a queue holds one item:
// the key itself, but for a redrive task's key (RedriveTaskKey), the dead
// item's RedriveKey without the task. So a dead item that two redrive tasks
// send at once (one naming it by id beside one over its error group, or a
// task on another server) enters its destination once, whichever task's
// copy comes first, as when every task sent RedriveKey.
func OnceKey(key string) string {
	if RedriveTaskOf(key) == "" {
		return key
	}
	return key[:strings.LastIndexByte(key, '~')]
}

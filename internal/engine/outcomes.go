package engine

import (
	"slices"

	"github.com/styxq/styx/metrics"
)

// Redrive outcomes (issue 49): what becomes of the items a tracked redrive
// task moved (Item.Redrive). An iteration counts, per task, the redriven
// items it completes, retries for the first time and kills, and the engine
// reports the counts once the iteration went to its commit without an error
// (metrics.RedriveOutcomes), for the redrive runner to count per task.
// Items that were not redriven cost one comparison of an empty string.

// outcome is one kind of redrive outcome.
type outcome int

const (
	outcomeCompleted outcome = iota
	outcomeRetried
	outcomeDeadAgain
)

// redriven counts the outcome o of item x when a redrive task moved it.
func (it *pass) redriven(x Item, o outcome) {
	if x.Redrive == "" {
		return
	}
	if it.outcomes == nil {
		it.outcomes = map[string]*metrics.RedriveOutcome{}
	}
	c := it.outcomes[x.Redrive]
	if c == nil {
		c = &metrics.RedriveOutcome{Task: x.Redrive, Queue: it.info.Name}
		it.outcomes[x.Redrive] = c
	}
	switch o {
	case outcomeCompleted:
		c.Completed++
	case outcomeRetried:
		c.Retried++
	case outcomeDeadAgain:
		c.DeadAgain++
	}
}

// requeued counts a redriven item requeued after an attempt that failed
// (attempts, counted, the ending's): a retry outcome the first time only,
// the item's first attempt in the queue.
func (it *pass) requeued(x Item, attempts int32) {
	if attempts == 1 && x.Attempts == 1 {
		it.redriven(x, outcomeRetried)
	}
}

// reportOutcomes reports the iteration's redrive outcomes (in task order).
func (e *Engine) reportOutcomes(it *pass) {
	if e.outcomes == nil || len(it.outcomes) == 0 {
		return
	}
	tasks := make([]string, 0, len(it.outcomes))
	for t := range it.outcomes {
		tasks = append(tasks, t)
	}
	slices.Sort(tasks)
	for _, t := range tasks {
		e.outcomes(*it.outcomes[t])
	}
}

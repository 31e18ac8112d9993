package metrics

// RedriveOutcome is what became of items one redrive task moved, as one
// queue's loop decided it in one iteration (issue 49: redrive outcomes).
// Like DeadArrival it is no Prometheus series (a task id is not a label):
// the redrive runner (internal/redrive) counts outcomes per task from it.
type RedriveOutcome struct {
	// Task is the redrive task's id (queue.RedriveTaskOf of the items'
	// source key); Queue is the queue the items were in (the task's
	// destination).
	Task, Queue string
	// Completed counts the items completed; Retried those whose first
	// attempt in the queue failed and that went back to it (a retry that
	// is not a release, or a lease that ran out); DeadAgain those that
	// died (moved to the dead-letter queue, or dropped without one).
	Completed, Retried, DeadAgain int
}

// OnRedriveOutcome has f called with every RedriveOutcome reported from now
// on (RedriveOutcomes), on the reporting queue's loop goroutine: f must be
// quick and must not call into a queue. Safe for concurrent use.
func (m *Metrics) OnRedriveOutcome(f func(RedriveOutcome)) { m.outcomes.add(f) }

// RedriveOutcomes reports the outcomes of redriven items: the engine calls
// it once an iteration that decided them has been handed to the backend to
// commit without an error (internal/engine). Safe for concurrent use; m nil
// reports nothing.
func (m *Metrics) RedriveOutcomes(o RedriveOutcome) {
	if m == nil || o.Completed+o.Retried+o.DeadAgain == 0 {
		return
	}
	m.outcomes.report(o)
}

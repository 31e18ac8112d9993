package metrics

import (
	"sync"

	"github.com/styxq/styx/internal/fingerprint"
)

// DeadArrival is dead items of one error group that entered a dead-letter
// queue together, in one dead-letter move (issue 49: a DLQ's arrivals are
// counted when items die, not by sampling its groups). It is no Prometheus
// series: a fingerprint is not a label (there may be any number of them);
// the queue history (internal/history) counts arrivals by group from it.
type DeadArrival struct {
	// DeadQueue is the dead-letter queue the items entered, SourceQueue
	// the queue they died in, Reason their dead reason.
	DeadQueue, SourceQueue, Reason string
	// Fingerprint is the fingerprint of the items' last error and Pattern
	// its pattern (internal/fingerprint): the error group's, as dead.groups
	// reports it.
	Fingerprint, Pattern string
	// Count is how many items arrived (> 0).
	Count int
}

// listeners are the functions a report (DeadArrived, RedriveOutcomes)
// calls, each with every value reported after it was added. Safe for
// concurrent use; the zero value has none.
type listeners[T any] struct {
	mu sync.RWMutex
	fs []func(T)
}

// add has f called with every value reported from now on.
func (l *listeners[T]) add(f func(T)) {
	l.mu.Lock()
	l.fs = append(l.fs, f)
	l.mu.Unlock()
}

// report calls every listener with v, on the caller's goroutine.
func (l *listeners[T]) report(v T) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	for _, f := range l.fs {
		f(v)
	}
}

// OnDeadArrival has f called with every DeadArrival reported from now on
// (DeadArrived), on the reporting backend's goroutine (a queue's loop):
// f must be quick and must not call into a queue. Safe for concurrent use.
func (m *Metrics) OnDeadArrival(f func(DeadArrival)) { m.arrivals.add(f) }

// DeadArrived reports dead items that entered a dead-letter queue: each
// backend calls it where it counts styx_dead_lettered_total, once the move
// is durable, once per error group of the move (a.Count > 0; nothing is
// reported otherwise). Safe for concurrent use.
func (m *Metrics) DeadArrived(a DeadArrival) {
	if a.Count <= 0 {
		return
	}
	m.arrivals.report(a)
}

// Arrivals gathers the dead items of one dead-letter move by error group,
// for DeadArrived. The zero value is empty; not safe for concurrent use.
type Arrivals struct {
	groups map[arrivalKey]int
	order  []arrivalKey
}

// arrivalKey is an error group of one move: the dead reason and the items'
// last error's pattern.
type arrivalKey struct{ reason, pattern string }

// Add counts one item that died for reason with lastError as its last
// error.
func (a *Arrivals) Add(reason, lastError string) {
	k := arrivalKey{reason: reason, pattern: fingerprint.Pattern(lastError)}
	if a.groups == nil {
		a.groups = map[arrivalKey]int{}
	}
	if _, ok := a.groups[k]; !ok {
		a.order = append(a.order, k)
	}
	a.groups[k]++
}

// Report reports the items counted (DeadArrived), one DeadArrival per
// error group, as arrived in deadQueue from source; m nil reports nothing.
func (a *Arrivals) Report(m *Metrics, source, deadQueue string) {
	if m == nil {
		return
	}
	for _, k := range a.order {
		m.DeadArrived(DeadArrival{DeadQueue: deadQueue, SourceQueue: source, Reason: k.reason,
			Fingerprint: fingerprint.OfPattern(k.pattern), Pattern: k.pattern, Count: a.groups[k]})
	}
}

package redrive

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/styxq/styx/internal/store"
	"github.com/styxq/styx/metrics"
)

// Redrive outcomes (issue 49): what became of the items a task moved. A
// tracked task (Task.Tracked, every task started since) sends each item
// with its id in the item's source key (queue.RedriveTaskKey), which every
// backend keeps through the item's requeues; when the destination's loop
// completes the item, ends its first attempt there without completing it,
// or kills it, the engine reports it (metrics.RedriveOutcomes) and the
// runner of the server counts it for the task (observe). Items that were
// not redriven cost nothing.
//
// Each server counts what its own loops report, in memory, and stores its
// counts every outcomeFlushEvery as a record of its own beside the task
// ("outcome/<task id>/<node>", where node is the server's id for this run);
// a task's outcomes are the sum of every record and of the counts not
// stored yet. So several PostgreSQL nodes never write one record, and a
// restart starts a new record beside the old ones. A crash loses what the
// server counted since its last store (outcomeFlushEvery at most); Close
// stores the rest.
//
// A task's outcomes are counted while it runs and for OutcomeWindow after
// it ends; the records go when the task is pruned (keepFinished).

const (
	// OutcomeWindow is how long after a task ends the outcomes of its items
	// are still counted: a day. Items redriven to a queue whose consumers
	// are healthy are handled within minutes, and a backlog drained by a
	// redrive within hours; a day shows what became of nearly every item,
	// also of those retried with back-off, while the counting stops for a
	// task no one looks at any more (and the records stay small: the
	// counts only).
	OutcomeWindow = 24 * time.Hour
	// outcomePrefix marks an outcome record: "outcome/<task id>/<node>".
	outcomePrefix = "outcome/"
	// outcomeFlushEvery is how often a runner stores the outcomes it
	// counted (real time).
	outcomeFlushEvery = time.Second
)

// Outcomes are what became of the items a task moved (wire
// RedriveTask.outcomes), counted as the destination's loop decides.
type Outcomes struct {
	// Completed counts the moved items completed in their destination.
	Completed int64 `json:"completed"`
	// Retried counts the moved items whose first attempt in the
	// destination failed (a retry that was no release, or a lease that ran
	// out): an item is counted once, whatever became of it next (it may
	// since have completed or died: Completed and DeadAgain count it too).
	Retried int64 `json:"retried"`
	// DeadAgain counts the moved items that died in the destination
	// (max_attempts, expired or explicit): moved to its dead-letter queue,
	// or dropped without one.
	DeadAgain int64 `json:"dead_again"`
	// Pending is Moved less Completed and DeadAgain (never below 0): the
	// moved items not known to have ended, ready, scheduled or leased in
	// the destination, or removed from it otherwise (a delete or a clear,
	// which are not counted). Not stored: computed when shown.
	Pending int64 `json:"-"`
}

func (o *Outcomes) add(p Outcomes) {
	o.Completed += p.Completed
	o.Retried += p.Retried
	o.DeadAgain += p.DeadAgain
}

// outcomeBook is a runner's outcome counts. mu is a leaf: it is taken by
// the queues' loops (observe) and under Runner.mu, never the other way.
type outcomeBook struct {
	mu sync.Mutex
	// node is this runner's part of its records' ids: fixed for the
	// process (a restart starts new records).
	node string
	// own are the counts this runner's loops reported, by task id, since
	// it started; dirty the tasks whose counts are not stored yet.
	own   map[string]*Outcomes
	dirty map[string]bool
	// stored are the sums of the other records (other servers', and this
	// server's earlier runs), by task id, and records their ids, as the
	// store held them at the last load.
	stored  map[string]Outcomes
	records map[string][]string
	// closes holds, by task id, when the counting of a finished task's
	// outcomes ends (FinishedAt + OutcomeWindow).
	closes map[string]time.Time
	// waits are the wake-up channels of the tasks waiting for their
	// canary's outcome, by task id (canary.go).
	waits map[string]chan struct{}
}

func newOutcomeBook() *outcomeBook {
	return &outcomeBook{node: fmt.Sprintf("%016x-%08x", uint64(time.Now().UnixNano()), rand.Uint32()),
		own: map[string]*Outcomes{}, dirty: map[string]bool{}, stored: map[string]Outcomes{},
		records: map[string][]string{}, closes: map[string]time.Time{}, waits: map[string]chan struct{}{}}
}

// observe counts one report of the engine (metrics.OnRedriveOutcome), on
// the reporting queue's loop: quick, and never calls into a queue.
func (r *Runner) observe(o metrics.RedriveOutcome) {
	b := r.book
	now := r.cfg.Clock.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	if until, ok := b.closes[o.Task]; ok && now.After(until) {
		return
	}
	c := b.own[o.Task]
	if c == nil {
		c = &Outcomes{}
		b.own[o.Task] = c
	}
	c.add(Outcomes{Completed: int64(o.Completed), Retried: int64(o.Retried), DeadAgain: int64(o.DeadAgain)})
	b.dirty[o.Task] = true
	if ch := b.waits[o.Task]; ch != nil {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// close ends the counting of task id's outcomes OutcomeWindow after
// finishedAt (its end).
func (b *outcomeBook) close(id string, finishedAt time.Time) {
	b.mu.Lock()
	b.closes[id] = finishedAt.Add(OutcomeWindow)
	b.mu.Unlock()
}

// outcomesOf returns task t's outcomes (nil for a dry run or an untracked
// task). Any goroutine; takes the book's lock.
func (r *Runner) outcomesOf(t *Task) *Outcomes {
	if !t.Tracked || t.DryRun {
		return nil
	}
	b := r.book
	b.mu.Lock()
	o := b.stored[t.ID]
	if c := b.own[t.ID]; c != nil {
		o.add(*c)
	}
	b.mu.Unlock()
	o.Pending = max(t.Moved-o.Completed-o.DeadAgain, 0)
	return &o
}

// shown returns c, a copy of a task, with its outcomes: what the Runner's
// calls answer.
func (r *Runner) shown(c Task) Task {
	c.Outcomes = r.outcomesOf(&c)
	return c
}

// loadOutcome reads outcome record rec (id without outcomePrefix) into
// stored and records; those of this run are its own counts, in memory.
func (b *outcomeBook) loadOutcome(id string, data []byte, stored map[string]Outcomes, records map[string][]string) {
	task, node, ok := strings.Cut(id, "/")
	if !ok {
		return
	}
	records[task] = append(records[task], outcomePrefix+id)
	if node == b.node {
		return
	}
	var o Outcomes
	if err := json.Unmarshal(data, &o); err != nil {
		return
	}
	s := stored[task]
	s.add(o)
	stored[task] = s
}

// setStored replaces what the store held (a load's loadOutcome results).
func (b *outcomeBook) setStored(stored map[string]Outcomes, records map[string][]string) {
	b.mu.Lock()
	b.stored, b.records = stored, records
	b.mu.Unlock()
}

// flushOutcomes stores this runner's counts of the tasks that changed
// (their records) and closes the counting of the tasks whose window ended.
// Counts of a task this runner does not know (pruned, or not yet seen on a
// shared store) wait, in memory.
func (r *Runner) flushOutcomes() {
	b := r.book
	if r.claimer != nil && r.unknownOutcomes() {
		// Counted here for a task another server started: learn it
		// from the store first (else it waits for the next adopt).
		if err := r.sync(r.ctx); err != nil && r.ctx.Err() == nil {
			r.cfg.Log.Warn("redrive: read the tasks to store their outcomes failed", "error", err)
		}
	}
	r.mu.Lock()
	queues := make(map[string]string, len(r.tasks))
	closes := map[string]time.Time{}
	for id, t := range r.tasks {
		queues[id] = t.Queue
		if t.finished() {
			closes[id] = t.FinishedAt.Add(OutcomeWindow)
		}
	}
	r.mu.Unlock()
	type put struct {
		id, queue string
		o         Outcomes
	}
	var puts []put
	b.mu.Lock()
	b.closes = closes
	for id := range b.dirty {
		q, known := queues[id]
		if !known {
			if r.claimer == nil {
				// A store of this server's own: the task was pruned.
				delete(b.own, id)
				delete(b.dirty, id)
			}
			continue
		}
		puts = append(puts, put{id: id, queue: q, o: *b.own[id]})
		delete(b.dirty, id)
	}
	b.mu.Unlock()
	for _, p := range puts {
		data, err := json.Marshal(p.o)
		if err == nil {
			err = r.cfg.Store.PutTask(context.Background(), store.TaskRecord{ID: outcomePrefix + p.id + "/" + b.node, Queue: p.queue, Data: data})
		}
		if err != nil {
			b.mu.Lock()
			b.dirty[p.id] = true // stored at the next flush
			b.mu.Unlock()
			r.cfg.Log.Warn("redrive: store a task's outcomes failed; tried again", "task", p.id, "error", err)
		}
	}
}

// unknownOutcomes reports whether counts wait to be stored for a task this
// runner does not know.
func (r *Runner) unknownOutcomes() bool {
	b := r.book
	b.mu.Lock()
	dirty := make([]string, 0, len(b.dirty))
	for id := range b.dirty {
		dirty = append(dirty, id)
	}
	b.mu.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, id := range dirty {
		if _, ok := r.tasks[id]; !ok {
			return true
		}
	}
	return false
}

// flushLoop stores the outcomes every outcomeFlushEvery until the runner
// closes (Close stores the rest).
func (r *Runner) flushLoop() {
	t := time.NewTicker(outcomeFlushEvery)
	defer t.Stop()
	for {
		select {
		case <-r.ctx.Done():
			return
		case <-t.C:
			r.flushOutcomes()
		}
	}
}

// outcomeRecords returns the ids of the outcome records of task id, for
// its prune, and forgets its counts.
func (r *Runner) outcomeRecords(id string) []string {
	b := r.book
	b.mu.Lock()
	defer b.mu.Unlock()
	recs := append(b.records[id], outcomePrefix+id+"/"+b.node)
	delete(b.own, id)
	delete(b.dirty, id)
	delete(b.stored, id)
	delete(b.records, id)
	return recs
}

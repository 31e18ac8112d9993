package redrive

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/styxq/styx/internal/store"
)

// taskKey is the claim a task runs under on a shared store.
func taskKey(id string) string { return taskClaimPrefix + id }

// requests are what other servers of a shared store asked of a task
// (records cancel/, pause/ and rate/ beside it).
type requests struct {
	cancel, pause bool
	rate          *rateRequest
}

// rateRequest is a re-rate request stored for the server running a task.
type rateRequest struct {
	RateLimit int32     `json:"rate_limit"`
	At        time.Time `json:"at"`
}

// apply shows on t (a copy loaded from the store) what was asked of it.
func (q requests) apply(t *Task) {
	switch {
	case t.finished():
		return
	case q.cancel && (t.Status == StatusRunning || t.Status == StatusPausing):
		t.Status = StatusCancelling
	case q.pause && t.Status == StatusRunning:
		t.Status = StatusPausing
	}
	if q.rate != nil && q.rate.At.After(t.RateSetAt) {
		t.RateLimit, t.RateSetAt = q.rate.RateLimit, q.rate.At
	}
}

// load reads the persisted tasks and the requests stored for them by
// other servers, by task id.
func (r *Runner) load(ctx context.Context) ([]*Task, map[string]requests, error) {
	recs, err := r.cfg.Store.ListTasks(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("redrive: list tasks: %w", err)
	}
	var tasks []*Task
	reqs := map[string]requests{}
	stored, records := map[string]Outcomes{}, map[string][]string{}
	defer r.book.setStored(stored, records)
	for _, rec := range recs {
		if id, ok := strings.CutPrefix(rec.ID, outcomePrefix); ok {
			r.book.loadOutcome(id, rec.Data, stored, records)
			continue
		}
		if id, ok := strings.CutPrefix(rec.ID, cancelPrefix); ok {
			q := reqs[id]
			q.cancel = true
			reqs[id] = q
			continue
		}
		if id, ok := strings.CutPrefix(rec.ID, pausePrefix); ok {
			q := reqs[id]
			q.pause = true
			reqs[id] = q
			continue
		}
		if id, ok := strings.CutPrefix(rec.ID, ratePrefix); ok {
			var rr rateRequest
			if err := json.Unmarshal(rec.Data, &rr); err == nil {
				q := reqs[id]
				q.rate = &rr
				reqs[id] = q
			}
			continue
		}
		var t Task
		if err := json.Unmarshal(rec.Data, &t); err != nil {
			r.cfg.Log.Error("redrive: undecodable task ignored", "task", rec.ID, "error", err)
			continue
		}
		tasks = append(tasks, &t)
	}
	return tasks, reqs, nil
}

// reload reads task t from the store again and puts it in the runner's
// list in place of t (a request stored since shows: see requests.apply).
// live is false when the task is gone or finished.
func (r *Runner) reload(ctx context.Context, t *Task) (*Task, bool, error) {
	tasks, reqs, err := r.load(ctx)
	if err != nil {
		return nil, false, err
	}
	for _, cur := range tasks {
		if cur.ID != t.ID {
			continue
		}
		reqs[cur.ID].apply(cur)
		r.mu.Lock()
		r.tasks[cur.ID] = cur
		r.mu.Unlock()
		return cur, !cur.finished(), nil
	}
	return nil, false, nil
}

// claim takes a claim of a shared store (taskKey, or a start claim); on a
// store of its own a runner holds every claim.
func (r *Runner) claim(ctx context.Context, key string) (func(), bool, error) {
	if r.claimer == nil {
		return func() {}, true, nil
	}
	release, ok, err := r.claimer.ClaimTask(ctx, key)
	if err != nil {
		return nil, false, fmt.Errorf("redrive: claim '%s': %w", key, err)
	}
	return release, ok, nil
}

// sync refreshes, from a shared store, the tasks this runner does not run.
func (r *Runner) sync(ctx context.Context) error {
	if r.claimer == nil {
		return nil
	}
	tasks, reqs, err := r.load(ctx)
	if err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, t := range tasks {
		if _, mine := r.running[t.ID]; mine {
			continue
		}
		reqs[t.ID].apply(t)
		r.tasks[t.ID] = t
	}
	return nil
}

// request stores a request (cancel/, pause/ or rate/) for task t, running on
// another server of a shared store.
func (r *Runner) request(ctx context.Context, prefix string, t *Task, data []byte) error {
	rec := store.TaskRecord{ID: prefix + t.ID, Queue: t.Queue, Data: data}
	if err := r.cfg.Store.PutTask(ctx, rec); err != nil {
		return store.Unavailable("", fmt.Errorf("redrive: store request %s%s: %w", prefix, t.ID, err))
	}
	return nil
}

// requests returns what other servers asked of task id (none on a store of
// this server's own).
func (r *Runner) requests(ctx context.Context, id string) requests {
	if r.claimer == nil {
		return requests{}
	}
	_, reqs, err := r.load(ctx)
	if err != nil {
		return requests{}
	}
	return reqs[id]
}

// persist writes the task.
func (r *Runner) persist(t *Task) error {
	r.mu.Lock()
	order := r.persisting[t.ID]
	if order == nil {
		order = &sync.Mutex{}
		r.persisting[t.ID] = order
	}
	r.mu.Unlock()
	order.Lock()
	defer order.Unlock()
	r.mu.Lock()
	data, err := json.Marshal(t)
	r.mu.Unlock()
	if err != nil {
		return fmt.Errorf("redrive: encode task %s: %w", t.ID, err)
	}
	if err := r.cfg.Store.PutTask(context.Background(), store.TaskRecord{ID: t.ID, Queue: t.Queue, Data: data}); err != nil {
		// Any failure of the task store is storage failing (453 on
		// every backend, as PostgreSQL's store classifies its own).
		return store.Unavailable("", fmt.Errorf("redrive: persist task %s: %w", t.ID, err))
	}
	return nil
}

// claimHeld reports whether this server still holds t's claim (always,
// unless the store's claims can be lost).
func (r *Runner) claimHeld(ctx context.Context, t *Task) bool {
	return r.checker == nil || r.checker.ClaimHeld(ctx, taskKey(t.ID))
}

package redrive

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/styxq/styx/internal/apierr"
	"github.com/styxq/styx/internal/store"
)

// A change is what a control call (Cancel, Pause, Resume, Update) makes of
// task t, called by withTask under r.mu: mine says this server runs t (its
// goroutine, or a call holding it), ending that t's end is being stored
// (see finish). It may change t and poke its goroutine, and returns the
// call's refusal (an error), or then: what the call does once r.mu is let
// go (store the change, or act on a paused task through whilePaused),
// given a copy of t as the change left it, returning the call's answer. A
// nil then answers that copy.
type change func(t *Task, mine, ending bool) (then func(c Task) (Task, error), err error)

// withTask is how every call on one task reaches it: it refreshes the tasks
// of a shared store (sync), takes task id under r.mu (apierr.NotFound when
// there is none), applies the change there, and answers as the change says.
func (r *Runner) withTask(ctx context.Context, id string, apply change) (Task, error) {
	if err := r.sync(ctx); err != nil {
		return Task{}, err
	}
	r.mu.Lock()
	t, ok := r.tasks[id]
	if !ok {
		r.mu.Unlock()
		return Task{}, apierr.New(apierr.NotFound, "redrive task does not exist; '%s'", id)
	}
	_, mine := r.running[id]
	// A task whose end is shown has it stored (end): it is ended, no
	// longer ending, though finish has not yet cleared its mark.
	then, err := apply(t, mine, r.ending[id] && !t.finished())
	if err != nil {
		r.mu.Unlock()
		return Task{}, err
	}
	c := t.clone()
	r.mu.Unlock()
	if then == nil {
		return r.shown(c), nil
	}
	out, err := then(c)
	if err != nil {
		return out, err
	}
	return r.shown(out), nil
}

// record stores the change a control call made to task t: for a task
// running on another server of a shared store, as a request (prefix, data)
// its runner reads before its next step; otherwise t itself.
func (r *Runner) record(ctx context.Context, t *Task, mine bool, prefix string, data []byte) error {
	if !mine && r.claimer != nil {
		return r.request(ctx, prefix, t, data)
	}
	return r.persist(t)
}

// List returns the tasks of a queue ("" for all), newest first; on a shared
// store, every server's.
func (r *Runner) List(ctx context.Context, q string) ([]Task, error) {
	if err := r.sync(ctx); err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Task
	for _, t := range r.tasks {
		if q == "" || t.Queue == q {
			out = append(out, r.shown(t.clone()))
		}
	}
	slices.SortFunc(out, func(a, b Task) int { return -cmpString(a.ID, b.ID) })
	return out, nil
}

// Get returns a task, or apierr.NotFound.
func (r *Runner) Get(ctx context.Context, id string) (Task, error) {
	return r.withTask(ctx, id, func(*Task, bool, bool) (func(Task) (Task, error), error) { return nil, nil })
}

// Cancel asks a running task to stop after its current batch and returns
// it (status cancelling); a paused one ends cancelled at once. A finished
// task is returned unchanged. A task running on another server gets a
// cancel request in the shared store, which its runner reads before its
// next batch.
func (r *Runner) Cancel(ctx context.Context, id string) (Task, error) {
	return r.withTask(ctx, id, func(t *Task, mine, ending bool) (func(Task) (Task, error), error) {
		if t.Status == StatusPaused {
			return func(Task) (Task, error) {
				return r.whilePaused(ctx, id, func(t *Task, release func()) (bool, error) {
					if err := r.end(t, StatusCancelled, "", release); err != nil {
						release() // the task stays paused, as it is stored
						return false, err
					}
					return true, nil
				})
			}, nil
		}
		if ending {
			// Its end is being stored: it ends as it is.
			return nil, nil
		}
		if t.Status == StatusRunning || t.Status == StatusPausing {
			// The task's goroutine sees the status before its next step,
			// or at once if it waits for its rate: never inside a step,
			// whose copies in the destination would then stay beside
			// their dead items.
			t.Status = StatusCancelling
			if mine {
				r.poke(id)
			}
		}
		if t.Status != StatusCancelling {
			return nil, nil
		}
		return func(c Task) (Task, error) {
			if err := r.record(ctx, t, mine, cancelPrefix, []byte("{}")); err != nil {
				return Task{}, err
			}
			return c, nil
		}, nil
	})
}

// ErrTaskEnded: Pause, Resume or Update of a task that has ended (or is
// cancelling); wrapped in an apierr.Conflict (409) naming the task and its
// status.
var ErrTaskEnded = errors.New("redrive task has ended")

// endingConflict is the answer to Pause, Resume or Update of task id
// whose end is being stored (see finish).
func endingConflict(id, what string) error {
	return apierr.Wrap(ErrTaskEnded, apierr.Conflict, "cannot %s redrive task '%s'; it is ending (its end is being stored); retry", what, id)
}

// endedConflict is the answer to Pause, Resume or Update of task t that
// has ended or is ending.
func endedConflict(t *Task, what string) error {
	return apierr.Wrap(ErrTaskEnded, apierr.Conflict, "cannot %s redrive task '%s'; it is %s", what, t.ID, t.Status)
}

// Pause asks a running task to stop after its current step (status pausing,
// then paused) and returns it; a paused or pausing task is returned
// unchanged. A paused task moves nothing until Resume: its pause is stored,
// so it stays paused across restarts and, on a shared store, when its
// server fails (another server does not take it over). A task running on
// another server gets a pause request in the shared store, which its runner
// reads before its next step. apierr.Conflict (ErrTaskEnded) for a task
// that has ended or is cancelling; apierr.NotFound for an unknown one.
func (r *Runner) Pause(ctx context.Context, id string) (Task, error) {
	return r.withTask(ctx, id, func(t *Task, mine, ending bool) (func(Task) (Task, error), error) {
		if ending {
			return nil, endingConflict(id, "pause")
		}
		switch t.Status {
		case StatusPaused, StatusPausing:
			return nil, nil
		case StatusRunning:
		default:
			return nil, endedConflict(t, "pause")
		}
		t.Status = StatusPausing
		r.poke(id)
		return func(c Task) (Task, error) {
			// Stored now, so that a restart before the step ends keeps
			// the pause.
			return c, r.record(ctx, t, mine, pausePrefix, []byte("{}"))
		}, nil
	})
}

// Resume runs a paused task again from where it stopped (status running),
// on this server; a pausing task goes on running; a running one is returned
// unchanged. apierr.Conflict (ErrTaskEnded) for a task that has ended or is
// cancelling; apierr.NotFound for an unknown one.
func (r *Runner) Resume(ctx context.Context, id string) (Task, error) {
	return r.withTask(ctx, id, func(t *Task, mine, ending bool) (func(Task) (Task, error), error) {
		if ending {
			return nil, endingConflict(id, "resume")
		}
		switch {
		case t.Status == StatusRunning:
			return nil, nil
		case t.Status == StatusPausing && mine:
			t.Status = StatusRunning
			return func(c Task) (Task, error) { return c, r.persist(t) }, nil
		case t.Status == StatusPausing:
			// Asked of the server running it: withdraw the request. Had it
			// paused already, the task shows paused: resume it again.
			return func(Task) (Task, error) {
				if err := r.cfg.Store.DeleteTask(ctx, pausePrefix+id); err != nil {
					return Task{}, store.Unavailable("", fmt.Errorf("redrive: withdraw pause of task %s: %w", id, err))
				}
				return r.Get(ctx, id)
			}, nil
		case t.Status != StatusPaused:
			return nil, endedConflict(t, "resume")
		}
		return func(Task) (Task, error) {
			return r.whilePaused(ctx, id, func(t *Task, release func()) (bool, error) {
				r.mu.Lock()
				pausedAt, pausedFor, canaryAt := t.PausedAt, t.PausedFor, t.CanaryAt
				t.Status = StatusRunning
				if t.CanaryStatus == CanaryWaiting {
					// Paused while it waited for its canary: the wait
					// starts again.
					t.CanaryAt = r.cfg.Clock.Now().UTC()
				}
				if !pausedAt.IsZero() {
					t.PausedFor += max(r.cfg.Clock.Now().Sub(pausedAt), 0)
					t.PausedAt = time.Time{}
				}
				r.mu.Unlock()
				if err := r.persist(t); err != nil {
					r.mu.Lock()
					t.Status, t.PausedAt, t.PausedFor, t.CanaryAt = StatusPaused, pausedAt, pausedFor, canaryAt
					r.mu.Unlock()
					return false, err
				}
				if r.claimer != nil {
					_ = r.cfg.Store.DeleteTask(ctx, pausePrefix+id)
				}
				r.cfg.Log.Info("redrive: task resumed", "task", t.ID, "dead_queue", t.Queue, "moved", t.Moved, "matched", t.Matched)
				r.mu.Lock()
				r.launch(t, release)
				r.mu.Unlock()
				return true, nil
			})
		}, nil
	})
}

// Update sets the rate limit of an unfinished task (items per second, 0
// for none; ErrRateLimit when out of range 0..MaxRateLimit): a running task
// paces its next step by it; a paused one when resumed. A task running on
// another server gets a re-rate request in the shared store, which its
// runner reads before its next step. apierr.Conflict (ErrTaskEnded) for a
// task that has ended or is cancelling; apierr.NotFound for an unknown one.
func (r *Runner) Update(ctx context.Context, id string, rateLimit int32) (Task, error) {
	if rateLimit < 0 || rateLimit > MaxRateLimit {
		return Task{}, apierr.Wrap(ErrRateLimit, apierr.Invalid, "invalid rate_limit; %d is out of range 0..%d items per second", rateLimit, MaxRateLimit)
	}
	return r.withTask(ctx, id, func(t *Task, mine, ending bool) (func(Task) (Task, error), error) {
		if ending {
			return nil, endingConflict(id, "update")
		}
		now := r.cfg.Clock.Now().UTC()
		switch {
		case t.Status == StatusPaused:
			return func(Task) (Task, error) {
				return r.whilePaused(ctx, id, func(t *Task, release func()) (bool, error) {
					defer release()
					r.mu.Lock()
					t.RateLimit, t.RateSetAt = rateLimit, now
					r.mu.Unlock()
					return false, r.persist(t)
				})
			}, nil
		case t.Status != StatusRunning && t.Status != StatusPausing:
			return nil, endedConflict(t, "update")
		}
		t.RateLimit, t.RateSetAt = rateLimit, now
		r.poke(id)
		return func(c Task) (Task, error) {
			if !mine && r.claimer != nil {
				data, err := json.Marshal(rateRequest{RateLimit: rateLimit, At: now})
				if err != nil {
					return Task{}, err
				}
				return c, r.request(ctx, ratePrefix, t, data)
			}
			r.cfg.Log.Info("redrive: task re-rated", "task", t.ID, "dead_queue", t.Queue, "rate_limit", rateLimit)
			return c, nil
		}, nil
	})
}

// whilePaused calls fn with paused task id, holding it: on this server (no
// other call acts on it meanwhile; a task that is still stopping is waited
// for, up to claimWait) and on a shared store by its claim, after reading
// it again. fn owns release (the claim): it calls it, or hands it on with
// the task (launch, finish) and returns true; whilePaused then returns the
// task as it is. A task that is no longer paused is returned as it is;
// apierr.Conflict when it stays held elsewhere.
func (r *Runner) whilePaused(ctx context.Context, id string, fn func(t *Task, release func()) (bool, error)) (Task, error) {
	start := time.Now()
	for {
		r.mu.Lock()
		if _, busy := r.running[id]; !busy {
			r.running[id] = func() {}
			r.mu.Unlock()
			break
		}
		r.mu.Unlock()
		if time.Since(start) >= claimWait {
			return Task{}, apierr.New(apierr.Conflict, "redrive task '%s' is being paused, resumed or changed; retry", id)
		}
		select {
		case <-ctx.Done():
			return Task{}, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	handed := false
	defer func() {
		if !handed {
			r.mu.Lock()
			delete(r.running, id)
			r.mu.Unlock()
		}
	}()
	release, ok, err := r.claim(ctx, taskKey(id))
	if err != nil {
		return Task{}, err
	}
	if !ok {
		return Task{}, apierr.New(apierr.Conflict, "redrive task '%s' is being paused, resumed or changed on another server; retry", id)
	}
	r.mu.Lock()
	t := r.tasks[id]
	r.mu.Unlock()
	if r.claimer != nil {
		cur, _, err := r.reload(ctx, &Task{ID: id})
		if err != nil || cur == nil {
			release()
			if err == nil {
				err = apierr.New(apierr.NotFound, "redrive task does not exist; '%s'", id)
			}
			return Task{}, err
		}
		t = cur
	}
	if t.Status != StatusPaused {
		release()
		r.mu.Lock()
		c := t.clone()
		r.mu.Unlock()
		return c, nil
	}
	if handed, err = fn(t, release); err != nil {
		return Task{}, err
	}
	r.mu.Lock()
	c := t.clone()
	r.mu.Unlock()
	return c, nil
}

// poke wakes task id's goroutine from its wait, if it runs here. Needs mu.
func (r *Runner) poke(id string) {
	if ch := r.pokes[id]; ch != nil {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

package redrive

import (
	"context"
	"errors"
	"time"

	"github.com/styxq/styx/internal/apierr"
)

// A task's canary (issue 49, safer redrives): with Task.Canary N, the task
// moves its first N items, then waits for their outcome (outcomes.go)
// before it moves more. Every one of them completed: the canary passed and
// the task goes on. One retried (its first attempt failed) or dead again:
// the canary failed. None of both within CanaryTimeout: it timed out.
// Failed or timed out, the task pauses, so that nothing more is moved
// into a consumer that fails them; the operator resumes it (it goes on
// without another canary) or cancels it. The canary's state is stored with
// the task, so a restart resumes the wait where it was (its deadline
// counts from CanaryAt), with the outcomes stored beside the task.

// Canary statuses (wire RedriveTask.canary_status).
const (
	// CanaryWaiting: the canary's items are moved; the task waits for
	// their outcome.
	CanaryWaiting = "waiting"
	// CanaryPassed: every canary item completed; the task went on.
	CanaryPassed = "passed"
	// CanaryFailed: a canary item was retried or died again; the task
	// paused.
	CanaryFailed = "failed"
	// CanaryTimedOut: the canary's items had not all completed within
	// CanaryTimeout; the task paused.
	CanaryTimedOut = "timed_out"
)

// The canary's limits.
const (
	// MaxCanary is the largest StartParams.Canary (items).
	MaxCanary = 10_000
	// DefaultCanaryTimeout is how long a task waits for its canary's
	// outcome when StartParams.CanaryTimeout is 0: long enough for a
	// consumer's lease timeout (1m by default) and a retry, short enough
	// that a canary no consumer takes does not hold the task for long.
	DefaultCanaryTimeout = 5 * time.Minute
	// MinCanaryTimeout and MaxCanaryTimeout bound
	// StartParams.CanaryTimeout.
	MinCanaryTimeout = time.Second
	MaxCanaryTimeout = 24 * time.Hour
)

// Sentinels of StartParams.Check, wrapped in an apierr.Invalid (400).
var (
	// ErrCanary: Canary is out of range 0..MaxCanary.
	ErrCanary = errors.New("canary out of range")
	// ErrCanaryTimeout: CanaryTimeout is neither 0 nor in
	// MinCanaryTimeout..MaxCanaryTimeout.
	ErrCanaryTimeout = errors.New("canary_timeout out of range")
)

// checkCanary is StartParams.Check's part for the canary.
func (p StartParams) checkCanary() error {
	if p.Canary < 0 || p.Canary > MaxCanary {
		return apierr.Wrap(ErrCanary, apierr.Invalid, "invalid canary; %d is out of range 0..%d items", p.Canary, MaxCanary)
	}
	if p.CanaryTimeout != 0 && (p.CanaryTimeout < MinCanaryTimeout || p.CanaryTimeout > MaxCanaryTimeout) {
		return apierr.Wrap(ErrCanaryTimeout, apierr.Invalid, "invalid canary_timeout; %s is out of range %s..%s",
			p.CanaryTimeout, MinCanaryTimeout, MaxCanaryTimeout)
	}
	return nil
}

// canaryLeft returns how many canary items task t has still to move (0
// once they are moved, or without a canary): a step moves no more. On the
// task goroutine.
func canaryLeft(t *Task) int {
	if t.Canary <= 0 || t.CanaryStatus != "" || t.Moved >= int64(t.Canary) {
		return 0
	}
	return int(int64(t.Canary) - t.Moved)
}

// canaryMoved starts the wait for the canary's outcome once its items are
// moved, unless done (the task moved all it had: there is nothing left to
// hold back). Stored with the step's progress. On the task goroutine.
func (r *Runner) canaryMoved(t *Task, done bool) {
	if done || t.Canary <= 0 || t.CanaryStatus != "" || t.Moved < int64(t.Canary) {
		return
	}
	r.mu.Lock()
	t.CanaryStatus, t.CanaryAt, t.CanaryMoved = CanaryWaiting, r.cfg.Clock.Now().UTC(), t.Moved
	r.mu.Unlock()
	r.cfg.Log.Info("redrive: canary moved; waiting for its outcome", "task", t.ID, "dead_queue", t.Queue,
		"items", t.CanaryMoved, "timeout", t.CanaryTimeout)
}

// What awaitCanary tells the task's loop.
const (
	canaryAgain    = iota // look again (the canary passed, or a wake-up)
	canaryPause           // the canary failed or timed out: t is paused
	canaryCanceled        // the task's context ended
)

// awaitCanary decides the canary of task t (CanaryWaiting) if its outcome
// is known, else waits until a report of the task's outcomes, a poke
// (Pause, Cancel, Update) or the canary's deadline, and tells the loop
// what to do. A passed canary is stored at once; a paused task is stored by
// the loop's end (settlePause). On the task goroutine.
func (r *Runner) awaitCanary(ctx context.Context, t *Task, poke chan struct{}) int {
	b := r.book
	b.mu.Lock()
	b.waits[t.ID] = poke // before the outcomes are read: no report is missed
	b.mu.Unlock()
	defer func() {
		b.mu.Lock()
		delete(b.waits, t.ID)
		b.mu.Unlock()
	}()
	if r.claimer != nil {
		// Other servers' counts come through the store.
		if _, _, err := r.load(ctx); err != nil && ctx.Err() == nil {
			r.cfg.Log.Warn("redrive: read the canary's outcomes failed", "task", t.ID, "error", err)
		}
	}
	o := r.outcomesOf(t)
	now := r.cfg.Clock.Now()
	deadline := t.CanaryAt.Add(t.CanaryTimeout)
	status := ""
	switch {
	case o == nil: // an untracked task counts no outcomes
		status = CanaryPassed
	case o.Retried+o.DeadAgain > 0:
		status = CanaryFailed
	case o.Completed >= t.CanaryMoved:
		status = CanaryPassed
	case !now.Before(deadline):
		status = CanaryTimedOut
	}
	if status != "" {
		r.mu.Lock()
		t.CanaryStatus = status
		if status != CanaryPassed {
			r.markPaused(t)
		}
		r.mu.Unlock()
		r.cfg.Log.Info("redrive: canary decided", "task", t.ID, "dead_queue", t.Queue, "canary", status, "items", t.CanaryMoved)
		if status == CanaryPassed {
			if err := r.persist(t); err != nil {
				r.cfg.Log.Warn("redrive: store the canary's pass failed; stored with the next step", "task", t.ID, "error", err)
			}
			return canaryAgain
		}
		return canaryPause
	}
	wake := deadline
	if r.claimer != nil && now.Add(outcomeFlushEvery).Before(deadline) {
		wake = now.Add(outcomeFlushEvery)
	}
	if r.waitUntil(ctx, wake, poke) == waitCanceled {
		return canaryCanceled
	}
	return canaryAgain
}

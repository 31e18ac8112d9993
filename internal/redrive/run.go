package redrive

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"golang.org/x/time/rate"

	"github.com/styxq/styx/internal/apierr"
	"github.com/styxq/styx/internal/queue"
	"github.com/styxq/styx/internal/store"
)

// adopt loads the persisted tasks and resumes the unfinished ones that no
// runner runs: at start, every one; on a shared store, those whose claim it
// gets (their server died). The others are kept as the store shows them.
//
// A paused task is left as it is: it runs again only on Resume. One whose
// pause was asked (stored pausing, or a pause request) is stored paused.
func (r *Runner) adopt(ctx context.Context) error {
	// A task that runs here when the load starts may end (pause, finish)
	// while the load is read: its loaded copy is then older than what this
	// runner knows, so it is left alone until the next adopt.
	r.mu.Lock()
	ranAtLoad := make(map[string]bool, len(r.running))
	for id := range r.running {
		ranAtLoad[id] = true
	}
	r.mu.Unlock()
	tasks, reqs, err := r.load(ctx)
	if err != nil {
		return err
	}
	for _, t := range tasks {
		reqs[t.ID].apply(t)
		r.mu.Lock()
		if id, err := queue.ParseID("task", strings.TrimPrefix(t.ID, "rd-")); err == nil {
			// A new task's id is after every stored one, even when the
			// clock reads earlier than it did (Start).
			r.lastID = max(r.lastID, id)
		}
		_, mine := r.running[t.ID]
		mine = mine || ranAtLoad[t.ID]
		if !mine {
			r.tasks[t.ID] = t
		}
		r.mu.Unlock()
		if mine || t.finished() || t.Status == StatusPaused {
			continue
		}
		release, ok, err := r.claim(ctx, taskKey(t.ID))
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		if r.claimer != nil {
			// The task's server may have ended it between the load and the
			// claim (it stores the end, then releases the claim): look
			// again, holding the claim, so an ended task is not run twice.
			var live bool
			if t, live, err = r.reload(ctx, t); err != nil || !live {
				release()
				if err != nil {
					return err
				}
				continue
			}
		}
		if t.Status == StatusCancelling {
			r.mu.Lock()
			r.running[t.ID] = func() {}
			r.mu.Unlock()
			r.finishSoon(t, StatusCancelled, "", release)
			continue
		}
		if t.Status == StatusPaused {
			release() // paused on its server since the load
			continue
		}
		if t.Status == StatusPausing {
			r.mu.Lock()
			r.running[t.ID] = func() {}
			r.markPaused(t)
			r.mu.Unlock()
			r.settlePause(t, release)
			continue
		}
		r.cfg.Log.Info("redrive: resuming task", "task", t.ID, "dead_queue", t.Queue, "moved", t.Moved, "matched", t.Matched)
		r.mu.Lock()
		r.launch(t, release)
		r.mu.Unlock()
	}
	return nil
}

// markPaused shows t paused since now (PausedAt, unless a pause already
// runs): one step under r.mu, so that no reader sees a paused task without
// its paused_at. The caller holds r.mu.
func (r *Runner) markPaused(t *Task) {
	t.Status = StatusPaused
	if t.PausedAt.IsZero() {
		t.PausedAt = r.cfg.Clock.Now().UTC()
	}
}

// settlePause stores task t paused (its goroutine has stopped, or never
// ran), withdraws a pause request stored for it, and releases its claim:
// the task runs nowhere until Resume. t is in running (mine).
func (r *Runner) settlePause(t *Task, release func()) {
	r.mu.Lock()
	r.markPaused(t)
	r.mu.Unlock()
	if err := r.persist(t); err != nil {
		r.cfg.Log.Error("redrive: persist paused task", "task", t.ID, "error", err)
	}
	if r.claimer != nil {
		if err := r.cfg.Store.DeleteTask(context.Background(), pausePrefix+t.ID); err != nil {
			r.cfg.Log.Error("redrive: delete pause request", "task", t.ID, "error", err)
		}
	}
	release()
	r.mu.Lock()
	delete(r.running, t.ID)
	delete(r.pokes, t.ID)
	r.mu.Unlock()
	r.cfg.Log.Info("redrive: task paused", "task", t.ID, "dead_queue", t.Queue, "moved", t.Moved, "matched", t.Matched)
}

// launch starts the task's goroutine, which calls release (its claim) when
// it ends. Needs mu.
func (r *Runner) launch(t *Task, release func()) {
	ctx, cancel := context.WithCancel(r.ctx)
	r.running[t.ID] = cancel
	poke := make(chan struct{}, 1)
	r.pokes[t.ID] = poke
	running := r.cfg.Metrics.RedriveRunning.WithLabelValues(t.Queue)
	running.Inc()
	r.wg.Go(func() {
		defer cancel()
		defer running.Dec()
		status, reason := r.run(ctx, t, poke)
		if status == StatusPaused {
			r.settlePause(t, release)
			return
		}
		if r.ctx.Err() != nil && status != StatusCompleted {
			release()
			return // server shutting down: the task resumes at restart
		}
		if status == statusClaimLost {
			// Another server may run the task now: this one stops
			// without storing anything, and its adopt may claim the task
			// again (from its stored progress) like any other server's.
			release()
			r.mu.Lock()
			delete(r.running, t.ID)
			delete(r.pokes, t.ID)
			r.mu.Unlock()
			r.cfg.Log.Warn("redrive: the task's claim was lost (its database session ended); it stops here and resumes on the server that claims it next",
				"task", t.ID, "dead_queue", t.Queue)
			return
		}
		r.finish(t, status, reason, release)
	})
}

// finish records the end of task t (end), running as its goroutine. The
// end is stored before it is shown, so the task is never shown ended while
// its stored record says it runs (issue 48: a task shown failed whose
// record stayed running was resumed at the next start, beside a new
// redrive of the same items). While the store refuses the end (a full
// disk, a database that is away), finish tries again after a back-off
// doubling from minRetryWait up to maxRetryWait, for as long as it takes;
// meanwhile the task shows the status it had (running, or cancelling) with
// Warning saying why, keeps its claim, and Start refuses a task over its
// items (apierr.Conflict, naming it). finish gives up, storing nothing,
// when the runner closes (the task resumes at the next start, as it is
// stored and shown) or, on a shared store, when the task's claim is lost
// (whoever claims it next resumes it from its stored progress).
func (r *Runner) finish(t *Task, status, reason string, release func()) {
	r.mu.Lock()
	r.ending[t.ID] = true
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		delete(r.ending, t.ID)
		r.mu.Unlock()
	}()
	var wait time.Duration
	for tries := 1; ; tries++ {
		err := r.end(t, status, reason, release)
		if err == nil {
			if tries > 1 {
				r.cfg.Log.Info("redrive: the task's end is stored", "task", t.ID, "status", status, "tries", tries)
			}
			return
		}
		if tries == 1 {
			r.cfg.Log.Error("redrive: persist finished task; it shows its status until its end is stored, tried again",
				"task", t.ID, "status", status, "error", err)
		}
		r.mu.Lock()
		t.Warning = fmt.Sprintf("the task ended %s, but its end could not be stored yet (%v); it is tried again", status, err)
		r.mu.Unlock()
		wait = min(max(2*wait, minRetryWait), maxRetryWait)
		timer := time.NewTimer(wait)
		select {
		case <-r.ctx.Done():
			timer.Stop()
			release() // resumes at the next start, as stored and shown
			return
		case <-timer.C:
		}
		if !r.claimHeld(context.Background(), t) {
			release()
			r.mu.Lock()
			t.Warning = ""
			delete(r.running, t.ID)
			delete(r.pokes, t.ID)
			r.mu.Unlock()
			r.cfg.Log.Warn("redrive: the task's claim was lost while its end was stored; it resumes on the server that claims it next",
				"task", t.ID, "dead_queue", t.Queue)
			return
		}
	}
}

// finishSoon ends task t (in running, not yet run or stopped) now if its
// end can be stored, else hands it to a goroutine that keeps trying
// (finish).
func (r *Runner) finishSoon(t *Task, status, reason string, release func()) {
	if r.end(t, status, reason, release) == nil {
		return
	}
	r.wg.Go(func() { r.finish(t, status, reason, release) })
}

// end stores the end of task t, releases its claim, shows the end and
// prunes old finished tasks. The order matters: the end is stored before
// the claim is released (a server that claims the queue next must not
// resume the task), and shown here only after (whoever sees the task ended
// may start the next one on its queue at once, and must not be refused by
// a claim still held). When the end cannot be stored, end returns the
// store's error (store.Unavailable) and changes nothing: t is shown, and
// its claim held, as before.
func (r *Runner) end(t *Task, status, reason string, release func()) error {
	r.mu.Lock()
	ended := t.clone()
	r.mu.Unlock()
	ended.Status, ended.FailureReason, ended.FinishedAt, ended.Warning = status, reason, r.cfg.Clock.Now().UTC(), ""
	if !ended.PausedAt.IsZero() { // ended while paused (cancelled): the pause ends with it
		ended.PausedFor += max(ended.FinishedAt.Sub(ended.PausedAt), 0)
		ended.PausedAt = time.Time{}
	}
	if status == StatusCompleted {
		ended.Warning = warning(&ended)
	}
	if err := r.persist(&ended); err != nil {
		return err
	}
	release()

	r.book.close(t.ID, ended.FinishedAt)
	r.mu.Lock()
	t.Status, t.FailureReason, t.FinishedAt, t.Warning = ended.Status, ended.FailureReason, ended.FinishedAt, ended.Warning
	t.PausedAt, t.PausedFor = ended.PausedAt, ended.PausedFor
	delete(r.running, t.ID)
	delete(r.pokes, t.ID)
	var done []*Task
	for _, o := range r.tasks {
		if o.Queue == t.Queue && o.finished() {
			done = append(done, o)
		}
	}
	slices.SortFunc(done, func(a, b *Task) int { return cmpString(a.ID, b.ID) })
	var prune []string
	for len(done) > keepFinished {
		prune = append(prune, done[0].ID)
		delete(r.tasks, done[0].ID)
		done = done[1:]
	}
	r.mu.Unlock()
	for _, id := range slices.Clone(prune) {
		prune = append(prune, r.outcomeRecords(id)...)
	}
	if r.claimer != nil {
		prune = append(prune, cancelPrefix+t.ID, pausePrefix+t.ID, ratePrefix+t.ID)
	}
	for _, id := range prune {
		if err := r.cfg.Store.DeleteTask(context.Background(), id); err != nil {
			r.cfg.Log.Error("redrive: prune task", "task", id, "error", err)
		}
	}
	r.cfg.Log.Info("redrive: task finished", "task", t.ID, "dead_queue", t.Queue, "status", status,
		"matched", t.Matched, "moved", t.Moved, "failed", t.Failed, "skipped", t.Skipped, "reason", reason)
	return nil
}

// run moves the task's items until done, canceled, paused or failed. It
// returns the final status and, for failed, the reason; StatusPaused when
// the task was paused (it has stored nothing of that yet); or
// statusClaimLost when the task's claim was lost (checked before each step
// and each save of its progress). A step that fails transiently (see
// transient) runs again after a back-off (maxStepRetries) before it fails
// the task. poke wakes it from the rate limiter's wait (Pause, Update):
// before each step it reads the task's status and rate limit again, and
// other servers' requests.
func (r *Runner) run(ctx context.Context, t *Task, poke chan struct{}) (string, string) {
	var limiter *rate.Limiter
	batch, paced := maxBatch, int32(-1) // the rate the limiter was made for
	nextLog := (t.Moved + t.Failed + t.Skipped) / progressEvery
	var wait time.Duration // the back-off after a transient failure; 0 after a step that went through
	tries := 0             // transient failures since the last step that went through
	// again decides what follows a failure: a transient one (see
	// transient) is logged and the step runs again, from the same pivot,
	// after a back-off, up to maxStepRetries times in a row; any other
	// ends the task.
	again := func(what string, err error) (retry bool, status, reason string) {
		if ctx.Err() != nil {
			return false, StatusCancelled, ""
		}
		if !transient(err) || tries >= maxStepRetries {
			return false, StatusFailed, err.Error()
		}
		tries++
		wait = min(max(2*wait, minRetryWait), maxRetryWait)
		r.cfg.Log.Warn("redrive: step failed; retrying", "task", t.ID, "dead_queue", t.Queue, "step", what, "in", wait, "error", err)
		timer := time.NewTimer(wait)
		defer timer.Stop()
		select {
		case <-ctx.Done():
			return false, StatusCancelled, ""
		case <-poke: // cancelled, paused or re-rated: seen before the step runs again
			return true, "", ""
		case <-timer.C:
			return true, "", ""
		}
	}
	for {
		if ctx.Err() != nil {
			return StatusCancelled, ""
		}
		asked := r.requests(ctx, t.ID)
		if asked.cancel {
			return StatusCancelled, ""
		}
		r.mu.Lock()
		if t.Status == StatusCancelling { // by Cancel on this server
			r.mu.Unlock()
			return StatusCancelled, ""
		}
		if asked.pause && t.Status == StatusRunning {
			t.Status = StatusPausing
		}
		if asked.rate != nil && asked.rate.At.After(t.RateSetAt) {
			t.RateLimit, t.RateSetAt = asked.rate.RateLimit, asked.rate.At
		}
		if t.Status == StatusPausing {
			r.markPaused(t)
			r.mu.Unlock()
			return StatusPaused, ""
		}
		rateLimit := t.RateLimit
		waiting := t.CanaryStatus == CanaryWaiting
		r.mu.Unlock()
		if waiting {
			switch r.awaitCanary(ctx, t, poke) {
			case canaryCanceled:
				return StatusCancelled, ""
			case canaryPause:
				return StatusPaused, ""
			}
			continue // decided (passed), or woken: look again
		}
		if rateLimit != paced {
			// Small bursts keep the rate even: a tenth of a second's
			// worth. A new rate takes effect from this step.
			paced, batch, limiter = rateLimit, maxBatch, nil
			if rateLimit > 0 {
				batch = max(1, min(maxBatch, int(rateLimit)/10))
				limiter = rate.NewLimiter(rate.Limit(rateLimit), batch)
				limiter.SetLimitAt(r.cfg.Clock.Now(), rate.Limit(rateLimit)) // paced on the runner's clock
			}
		}
		if !r.claimHeld(ctx, t) {
			return statusClaimLost, ""
		}
		dlq, err := r.cfg.Queues.Get(t.Queue)
		if err != nil {
			return StatusFailed, err.Error()
		}
		info, err := r.cfg.Queues.Info(ctx, t.Queue)
		if err != nil {
			if retry, status, reason := again("read the dead-letter queue", err); !retry {
				return status, reason
			}
			continue
		}
		if err := r.settleTaken(ctx, t, dlq, info.Partitions); err != nil {
			if retry, status, reason := again("look up the items being deleted", err); !retry {
				return status, reason
			}
			continue
		}
		limit := batch
		if n := canaryLeft(t); n > 0 {
			limit = min(limit, n) // the canary's items, no more
		}
		items, next, err := dlq.Scan(ctx, info.Partitions, &t.Filter, queue.ScanParams{After: t.Pivot, Limit: limit})
		if err != nil {
			if retry, status, reason := again("scan", err); !retry {
				return status, reason
			}
			continue
		}
		if next == 0 {
			// The scan reached the end. A dead-letter queue deleted since
			// Info was read scans as empty on PostgreSQL: make sure it is
			// still there, so that the task fails saying why instead of
			// completing.
			if _, err := r.cfg.Queues.Info(ctx, t.Queue); err != nil {
				if retry, status, reason := again("read the dead-letter queue", err); !retry {
					return status, reason
				}
				continue
			}
		}
		if next > t.UpTo || next == 0 {
			// Past the items that were there at the start: this is the
			// last step.
			next = 0
			items = slices.DeleteFunc(items, func(it queue.Item) bool { return it.Meta.ID > t.UpTo })
		}
		if len(t.Leaves) > 0 {
			// Those another task held when this one started are its:
			// passed over (counted skipped at the start). t.Leaves does
			// not change once the task runs.
			items = slices.DeleteFunc(items, func(it queue.Item) bool { return t.leftAlone(&it) })
		}
		if len(items) > 0 && limiter != nil {
			now := r.cfg.Clock.Now()
			res := limiter.ReserveN(now, len(items)) // len(items) <= batch, the burst
			if d := res.DelayFrom(now); res.OK() && d > 0 {
				switch r.waitUntil(ctx, now.Add(d), poke) {
				case waitCanceled:
					return StatusCancelled, ""
				case waitPoked:
					// Paused or re-rated: look again before moving.
					res.CancelAt(r.cfg.Clock.Now())
					continue
				}
			}
		}
		if err := r.step(ctx, t, dlq, items, tries < maxStepRetries); err != nil {
			if errors.Is(err, errClaimLost) {
				return statusClaimLost, ""
			}
			if retry, status, reason := again("move", err); !retry {
				return status, reason
			}
			continue
		}
		r.mu.Lock()
		switch {
		case next != 0:
			t.Pivot = next
		case len(items) > 0:
			t.Pivot = items[len(items)-1].Meta.ID
		}
		done := next == 0
		r.mu.Unlock()
		r.canaryMoved(t, done)
		for {
			if !r.claimHeld(ctx, t) {
				return statusClaimLost, ""
			}
			err := r.persist(t)
			if err == nil {
				break
			}
			if retry, status, reason := again("persist", err); !retry {
				return status, reason
			}
		}
		wait, tries = 0, 0
		if n := (t.Moved + t.Failed + t.Skipped) / progressEvery; n > nextLog {
			nextLog = n
			r.cfg.Log.Info("redrive: progress", "task", t.ID, "dead_queue", t.Queue, "matched", t.Matched,
				"moved", t.Moved, "failed", t.Failed, "skipped", t.Skipped)
		}
		if done {
			return StatusCompleted, ""
		}
	}
}

// What waitUntil saw.
const (
	waitDone = iota
	waitCanceled
	waitPoked
)

// waitUntil waits until the runner's clock reads deadline, ctx is canceled
// or poke receives. A clock that can wait (clock.Fake's After) is waited
// on, so that tests pace a task by moving the clock; it is read again every
// 10 ms of real time, in case it moved before the wait began.
func (r *Runner) waitUntil(ctx context.Context, deadline time.Time, poke <-chan struct{}) int {
	w, fake := r.cfg.Clock.(interface {
		After(time.Duration) <-chan time.Time
	})
	for {
		d := deadline.Sub(r.cfg.Clock.Now())
		if d <= 0 {
			return waitDone
		}
		var fired <-chan time.Time
		var recheck <-chan time.Time
		if fake {
			fired, recheck = w.After(d), time.After(10*time.Millisecond)
		} else {
			timer := time.NewTimer(d)
			defer timer.Stop()
			fired = timer.C
		}
		select {
		case <-ctx.Done():
			return waitCanceled
		case <-poke:
			return waitPoked
		case <-fired:
			return waitDone
		case <-recheck:
		}
	}
}

// statusClaimLost is what run returns when the task's claim was lost: not
// a status a task is stored with.
const statusClaimLost = "claim lost"

// transient reports whether err is a failure that may pass: storage
// unavailable (a database restarting, a connection cut: 453) or a queue too
// busy to take the request (454). A task step that fails so runs again
// after a back-off (maxStepRetries) before it ends the task or counts its
// items failed.
func transient(err error) bool {
	if errors.Is(err, store.ErrUnavailable) {
		return true
	}
	e, ok := apierr.As(err)
	return ok && e.Code == apierr.Retry
}

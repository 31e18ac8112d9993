package worker

import (
	"context"
)

// Item groups in the worker: the items of a group held behind the one that
// runs (park, nextInGroup) and released when it does not complete
// (releaseBehind); see the package comment.

// parkRoom waits until the parked items are at most parkLimit and returns
// how many more may be parked; false when ctx ended first. It calls
// waiting once before it waits.
func (w *Worker) parkRoom(ctx context.Context, waiting func()) (int, bool) {
	for first := true; ; first = false {
		w.mu.Lock()
		room := w.parkLimit - w.parked
		w.mu.Unlock()
		if room >= 0 {
			return room, true
		}
		if first {
			waiting()
		}
		select {
		case <-w.parkWake:
		case <-ctx.Done():
			return 0, false
		}
	}
}

// park files the items of one lease answer with their groups, all under
// one lock, before any of them reaches a handler (else a handler could
// finish a group's first item before the items after it were filed, and
// run them as a group of their own, out of reach of its failure). It
// returns the items that need a slot: those without a group and the first
// of each group the worker does not run already. The others wait behind
// an item of their group (they take no slot: the group's handler goroutine
// runs them in their turn).
func (w *Worker) park(js []*job) (slots []*job) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, j := range js {
		g := j.it.Group
		if g == "" {
			slots = append(slots, j)
			continue
		}
		if run := w.groups[g]; run != nil {
			run.waiting = append(run.waiting, j)
			w.parked++
			j.run = run
			continue
		}
		j.run = &groupRun{}
		w.groups[g] = j.run
		slots = append(slots, j)
	}
	return slots
}

// nextInGroup returns the item to run after j, an item of a slot that its
// handler completed: the next item waiting in j's group, unless a shutdown
// began (then they go back with the other unstarted items); nil when none
// waits, and the group leaves the worker.
func (w *Worker) nextInGroup(runCtx context.Context, j *job) *job {
	if j.run == nil {
		return nil
	}
	if runCtx.Err() == nil {
		w.mu.Lock()
		if len(j.run.waiting) > 0 {
			next := j.run.waiting[0]
			j.run.waiting = j.run.waiting[1:]
			w.parked--
			w.mu.Unlock()
			w.wakeParked()
			return next
		}
		// Nothing waits: the group is done, in this critical section, so
		// that an item leased now starts it anew instead of parking
		// behind j and being released as if j had failed.
		if w.groups[j.it.Group] == j.run {
			delete(w.groups, j.it.Group)
		}
		w.mu.Unlock()
	}
	w.releaseBehind(runCtx, j)
	return nil
}

// releaseBehind detaches j's group and releases the items that waited
// behind j, which did not complete (attempt not counted; at shutdown, with
// the other unstarted items), so that they do not run before j's next
// attempt.
func (w *Worker) releaseBehind(runCtx context.Context, j *job) {
	w.detach(j)
	rest := j.behind
	j.behind = nil
	if len(rest) == 0 {
		return
	}
	if runCtx.Err() != nil {
		w.mu.Lock()
		w.unstarted = append(w.unstarted, rest...)
		w.mu.Unlock()
		return
	}
	w.log.Info("releasing the items held behind an item of their group that did not complete",
		"group", j.it.Group, "partition", j.it.Partition, "id", j.it.ID, "count", len(rest))
	w.release(rest)
}

// detach ends j's group in the worker (if j.run is still its run): the
// items that waited behind j move to j.behind, in lease order.
func (w *Worker) detach(j *job) {
	if j.run == nil {
		return
	}
	w.mu.Lock()
	rest := j.run.waiting
	j.run.waiting = nil
	w.parked -= len(rest)
	if w.groups[j.it.Group] == j.run {
		delete(w.groups, j.it.Group)
	}
	w.mu.Unlock()
	if len(rest) > 0 {
		j.behind = append(j.behind, rest...)
		w.wakeParked()
	}
}

func (w *Worker) wakeParked() {
	select {
	case w.parkWake <- struct{}{}:
	default:
	}
}

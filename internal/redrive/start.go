package redrive

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/styxq/styx/internal/apierr"
	"github.com/styxq/styx/internal/queue"
)

// Start's sentinels, which the doors map onto their own answers with
// errors.Is; each is wrapped in an apierr.Invalid (400). Start also returns
// queue.NotFound for an unknown queue and an error wrapping
// queue.ErrNotDeadLetterQueue for a queue that is no dead-letter queue.
var (
	// ErrDestinationIsQueue: the destination is the dead-letter queue
	// being redriven.
	ErrDestinationIsQueue = errors.New("destination is the redriven queue")
	// ErrDestinationNotFound: the destination does not exist.
	ErrDestinationNotFound = errors.New("destination does not exist")
	// ErrRateLimit: RateLimit is out of range 0..MaxRateLimit.
	ErrRateLimit = errors.New("rate_limit out of range")
	// ErrMaxRedriveCount: MaxRedriveCount is out of range
	// -1..MaxRedriveCountLimit.
	ErrMaxRedriveCount = errors.New("max_redrive_count out of range")
)

// StartParams is a dead.redrive request (or an SQS StartMessageMoveTask),
// checked by Start.
type StartParams struct {
	Queue           string
	Filter          queue.DeadFilter
	Destination     string
	RateLimit       int32
	DryRun          bool
	MaxRedriveCount int32
	// KeyName is the API key starting the task, recorded in Task.KeyName.
	KeyName string
	// KeyQueues are that key's queue patterns (Task.KeyQueues); empty
	// means every queue.
	KeyQueues []string
	// RefuseOverlap makes Start refuse (apierr.Conflict naming the other
	// task and its status) a task whose matched items another unfinished
	// task holds, instead of leaving those items to it: SQS's
	// StartMessageMoveTask, whose task is for every item of the queue
	// (SQS runs one active move task per source queue). Ignored by a dry
	// run.
	RefuseOverlap bool
	// ExpectMatched, when not nil, is the count of matching items the
	// client confirmed (dead.redrive's expect_matched): Start refuses,
	// starting nothing, when as many do not match (queue.CheckMatched).
	// Ignored by a dry run. Filter.UpTo leaves out the items that died
	// after the client counted.
	ExpectMatched *int64
	// Canary, when > 0, makes the task move that many items first and
	// wait for their outcome, CanaryTimeout at most (0: DefaultCanaryTimeout),
	// before it goes on or pauses (Task.Canary; canary.go). 0 to
	// MaxCanary (ErrCanary); CanaryTimeout 0 or 1s to MaxCanaryTimeout
	// (ErrCanaryTimeout).
	Canary        int32
	CanaryTimeout time.Duration
}

// Check validates p's own fields against the limits, looking nothing up:
// the destination is not the queue (ErrDestinationIsQueue), RateLimit is in
// 0..MaxRateLimit (ErrRateLimit), MaxRedriveCount in
// -1..MaxRedriveCountLimit (ErrMaxRedriveCount), Canary in 0..MaxCanary
// (ErrCanary) and CanaryTimeout 0 or in 1s..MaxCanaryTimeout
// (ErrCanaryTimeout), each an apierr.Invalid naming the /v1 field. Names and filters are the doors' to parse.
func (p StartParams) Check() error {
	if p.Destination != "" && p.Destination == p.Queue {
		return apierr.Wrap(ErrDestinationIsQueue, apierr.Invalid, "invalid destination; '%s' is the queue being redriven", p.Destination)
	}
	if p.RateLimit < 0 || p.RateLimit > MaxRateLimit {
		return apierr.Wrap(ErrRateLimit, apierr.Invalid, "invalid rate_limit; %d is out of range 0..%d items per second", p.RateLimit, MaxRateLimit)
	}
	if p.MaxRedriveCount < -1 || p.MaxRedriveCount > MaxRedriveCountLimit {
		return apierr.Wrap(ErrMaxRedriveCount, apierr.Invalid, "invalid max_redrive_count; %d is out of range -1..%d", p.MaxRedriveCount, MaxRedriveCountLimit)
	}
	return p.checkCanary()
}

// Start checks p and counts the matching items and, unless p.DryRun, starts
// a task. The checks, in order, are every door's: p.Queue is a dead-letter
// queue (queue.DeadLetterQueue: queue.NotFound, or an error wrapping
// queue.ErrNotDeadLetterQueue), p.Check, and the destination exists
// (ErrDestinationNotFound); all apierr.Invalid.
//
// Several tasks may run on one dead-letter queue at once. A task's matched
// set is fixed when it starts: the items that match its filter then (ids up
// to UpTo); items that die later are not part of it. With p.ExpectMatched,
// Start returns the apierr.Conflict of queue.CheckMatched (wrapping
// queue.ErrMatchedChanged) when that set is not as many items as the client
// confirmed.
//
// Of the matched items, those an unfinished task (running, pausing or
// paused; not one being cancelled) still holds (not yet reached, see
// Task.hold) are left to it: the new task passes over them, counted in
// Skipped from the start (reason SkipOtherTask) and in LeftTo by the task
// holding them, so that no item goes to two tasks. A task whose filter
// names its items by id (a redrive of single items) takes them even from
// another task: each such item goes to whichever task reaches it first,
// never to both (see step). With p.RefuseOverlap, Start refuses instead of
// leaving items (apierr.Conflict, naming the other task and its status). A
// dry run counts the matched items as a start now would: those it would
// leave are in WouldSkip, SkipReasons and LeftTo.
func (r *Runner) Start(ctx context.Context, p StartParams) (Task, error) {
	dlq, _, err := queue.DeadLetterQueue(ctx, r.cfg.Queues, p.Queue)
	if err != nil {
		return Task{}, err
	}
	if err := p.Check(); err != nil {
		return Task{}, err
	}
	if p.Destination != "" {
		if _, err := r.cfg.Queues.Get(p.Destination); err != nil {
			return Task{}, apierr.Wrap(ErrDestinationNotFound, apierr.Invalid, "invalid destination; no such queue named '%s'", p.Destination)
		}
	}
	if p.MaxRedriveCount == 0 {
		p.MaxRedriveCount = DefaultMaxRedriveCount
	}
	now := r.cfg.Clock.Now().UTC()
	t := &Task{
		Queue: p.Queue, Destination: p.Destination, Filter: p.Filter, RateLimit: p.RateLimit,
		MaxRedriveCount: p.MaxRedriveCount, DryRun: p.DryRun, KeyName: p.KeyName, KeyQueues: p.KeyQueues, Status: StatusRunning,
		ByQueue: map[string]*Counts{}, StartedAt: now, Tracked: !p.DryRun, Canary: p.Canary, CanaryTimeout: p.CanaryTimeout,
	}
	if t.Canary > 0 && t.CanaryTimeout == 0 {
		t.CanaryTimeout = DefaultCanaryTimeout
	}
	if f := p.Filter.Fingerprint; f != "" {
		if g, err := dlq.ErrorGroups(ctx, queue.ErrorGroupFilter{Fingerprint: f, SourceQueue: p.Filter.SourceQueue, Reason: p.Filter.Reason}, 1); err == nil && len(g.Groups) > 0 {
			t.ErrorPattern = g.Groups[0].Pattern
		}
	}
	if p.DryRun {
		var holders []holder
		if len(p.Filter.IDs) == 0 {
			if err := r.sync(ctx); err != nil {
				return Task{}, err
			}
			r.mu.Lock()
			holders = r.holders(p.Queue)
			r.mu.Unlock()
		}
		plan := r.planner(t, holders)
		matched, last, scanned, err := countMatching(ctx, r.cfg.Queues, dlq, &t.Filter, plan, DryRunScan)
		if err == nil && scanned == DryRunScan {
			matched, err = estimate(ctx, dlq, t, matched, scanned)
		}
		if err != nil {
			return Task{}, err
		}
		if !t.Estimated { // the newest item counted: what a client confirms (up_to)
			t.UpTo = upToOf(&t.Filter, last)
		}
		r.mu.Lock()
		r.lastID = max(r.lastID+1, uint64(now.UnixNano()))
		t.ID = "rd-" + queue.FormatID(r.lastID)
		r.mu.Unlock()
		t.Matched, t.Status, t.FinishedAt = matched, StatusCompleted, now
		return t.clone(), nil
	}

	// Starts on one dead-letter queue go one at a time (on a shared store,
	// across servers), each checking its items against the unfinished
	// tasks stored before it.
	unlock, err := r.lockStart(ctx, p.Queue)
	if err != nil {
		return Task{}, err
	}
	defer unlock()
	if err := r.sync(ctx); err != nil {
		return Task{}, err
	}
	r.mu.Lock()
	var holders []holder
	if len(p.Filter.IDs) == 0 {
		holders = r.holders(p.Queue)
	}
	r.lastID = max(r.lastID+1, uint64(now.UnixNano()))
	t.ID = "rd-" + queue.FormatID(r.lastID)
	// Reserves the task while matching runs (Cancel and Pause see it);
	// adopt and sync leave a task in running alone.
	r.tasks[t.ID] = t
	r.running[t.ID] = func() {}
	r.mu.Unlock()
	drop := func() {
		r.mu.Lock()
		delete(r.tasks, t.ID)
		delete(r.running, t.ID)
		r.mu.Unlock()
	}
	release, ok, err := r.claim(ctx, taskKey(t.ID))
	if err == nil && !ok {
		err = apierr.New(apierr.Conflict, "redrive task '%s' is claimed on another server; retry", t.ID)
	}
	if err != nil {
		drop()
		return Task{}, err
	}

	// The matched set is fixed here: the items that match now (ids up to
	// UpTo); of them, those an unfinished task still holds are left to it.
	leftTo, leftBy := map[string]int64{}, map[string]int64{}
	var first *holder
	each := func(it *queue.Item) {
		h := leaveTo(holders, it)
		if h == nil {
			return
		}
		if first == nil {
			first = h
		}
		leftTo[h.Task]++
		leftBy[t.destination(it)]++
	}
	matched, upTo, _, err := countMatching(ctx, r.cfg.Queues, dlq, &t.Filter, each, 0)
	upTo = upToOf(&t.Filter, upTo)
	if err == nil && p.ExpectMatched != nil {
		err = queue.CheckMatched(matched, *p.ExpectMatched, "redriven")
	}
	var left int64
	for _, n := range leftTo {
		left += n
	}
	if err == nil && left > 0 && p.RefuseOverlap {
		err = apierr.New(apierr.Conflict,
			"redrive overlaps another task; task '%s' is %s on queue '%s' and holds %d of the %d matched items; %s",
			first.Task, first.status, p.Queue, leftTo[first.Task], matched, advice(first.status))
	}
	if err == nil && left > 0 {
		r.mu.Lock()
		for _, h := range holders {
			if leftTo[h.Task] > 0 {
				t.Leaves = append(t.Leaves, h.Hold)
			}
		}
		t.LeftTo = leftTo
		for dest, n := range leftBy {
			t.ByQueue[dest] = &Counts{Skipped: n, SkipReasons: map[string]int64{SkipOtherTask: n}}
		}
		t.Skipped, t.SkipReasons = left, map[string]int64{SkipOtherTask: left}
		r.mu.Unlock()
	}
	if err == nil {
		r.mu.Lock()
		t.Matched, t.UpTo = matched, upTo
		r.mu.Unlock()
		err = r.persist(t)
	}
	if err != nil {
		drop()
		release()
		return Task{}, err
	}
	r.cfg.Log.Info("redrive: task started", "task", t.ID, "dead_queue", t.Queue, "destination", t.Destination,
		"matched", matched, "rate_limit", t.RateLimit, "left_to_other_tasks", left)
	r.mu.Lock()
	switch t.Status {
	case StatusCancelling: // cancelled while it counted
		r.mu.Unlock()
		r.finishSoon(t, StatusCancelled, "", release)
		return r.Get(ctx, t.ID)
	case StatusPausing: // paused while it counted
		r.markPaused(t)
		r.mu.Unlock()
		r.settlePause(t, release)
		return r.Get(ctx, t.ID)
	}
	r.launch(t, release)
	c := t.clone()
	r.mu.Unlock()
	return c, nil
}

// claimWait bounds how long Start waits for the start claim of a
// dead-letter queue that another server holds (lockStart). A variable so
// that tests can shorten it.
var claimWait = 2 * time.Second

// lockStart makes Start the only one on deadQueue: on this server, and on a
// shared store across servers (the claim "redrive-start:<queue>", held while
// another server counts a new task's items and stores it). A claim held
// elsewhere is looked at again, every 10 ms at first and every 200 ms at
// most, for up to claimWait (real time: the wait is for another server),
// then refused with apierr.Conflict. unlock ends it.
func (r *Runner) lockStart(ctx context.Context, deadQueue string) (unlock func(), err error) {
	r.mu.Lock()
	mu := r.starting[deadQueue]
	if mu == nil {
		mu = &sync.Mutex{}
		r.starting[deadQueue] = mu
	}
	r.mu.Unlock()
	mu.Lock()
	start, wait := time.Now(), 10*time.Millisecond
	for {
		release, ok, err := r.claim(ctx, startClaimPrefix+deadQueue)
		if err != nil {
			mu.Unlock()
			return nil, err
		}
		if ok {
			return func() { release(); mu.Unlock() }, nil
		}
		if time.Since(start) >= claimWait {
			mu.Unlock()
			return nil, apierr.New(apierr.Conflict,
				"redrive already running; a task is starting on queue '%s' on another server; retry", deadQueue)
		}
		select {
		case <-ctx.Done():
			mu.Unlock()
			return nil, ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, 200*time.Millisecond)
	}
}

// upToOf is the newest id of a task's matched set: last, the newest item
// its count saw, or f.UpTo when f leaves out the items after it.
func upToOf(f *queue.DeadFilter, last uint64) uint64 {
	if f.UpTo != 0 && f.UpTo < last {
		return f.UpTo
	}
	return last
}

// DryRunScan bounds the items a dry run reads: over a dead-letter queue
// holding more, its counts are an estimate (estimate). A variable so that
// tests can lower it.
var DryRunScan = 10_000

// countMatching counts the items of a queue that match f, and returns the
// id of the last item it saw (0 for an empty queue): a task handles only the
// items that were there when it started. each, when not nil, is called with
// every matching item. limit > 0 stops it once it has read that many items
// (the queue may hold more); scanned is how many it read.
func countMatching(ctx context.Context, m queue.Queues, l queue.Queue, f *queue.DeadFilter, each func(*queue.Item), limit int) (n int64, last uint64, scanned int, err error) {
	info, err := m.Info(ctx, l.Name())
	if err != nil {
		return 0, 0, 0, err
	}
	var all queue.DeadFilter // to see the last id, matching or not
	for {
		page := 1000
		if limit > 0 {
			page = min(page, limit-scanned)
		}
		items, next, err := l.Scan(ctx, info.Partitions, &all, queue.ScanParams{After: last, Limit: page, MaxScanned: page})
		if err != nil {
			return 0, 0, 0, err
		}
		for i := range items {
			if f.Match(&items[i]) {
				n++
				if each != nil {
					each(&items[i])
				}
			}
			last = items[i].Meta.ID
		}
		scanned += len(items)
		if next == 0 || (limit > 0 && scanned >= limit) {
			return n, last, scanned, nil
		}
	}
}

// estimate scales the counts of a dry run that read only the first scanned
// items of dead-letter queue dlq (in id order) to every item the queue
// holds (queue.stats, which costs no scan: ADR 0024), marks t Estimated and
// says so in its Warning; it returns the matched count scaled. The first
// items stand for the others: an estimate, not a count.
func estimate(ctx context.Context, dlq queue.Queue, t *Task, matched int64, scanned int) (int64, error) {
	st, err := dlq.Stats(ctx)
	if err != nil {
		return 0, err
	}
	total := 0
	for _, p := range st.Partitions {
		total += p.Total
	}
	if total <= scanned {
		return matched, nil // the queue holds no more than was read
	}
	scale := func(v int64) int64 { return int64(float64(v) * float64(total) / float64(scanned)) }
	t.WouldMove, t.WouldSkip = scale(t.WouldMove), scale(t.WouldSkip)
	for k, v := range t.SkipReasons {
		t.SkipReasons[k] = scale(v)
	}
	for k, v := range t.LeftTo {
		t.LeftTo[k] = scale(v)
	}
	for _, p := range t.ByDestination {
		p.WouldMove, p.WouldSkip = scale(p.WouldMove), scale(p.WouldSkip)
		for k, v := range p.SkipReasons {
			p.SkipReasons[k] = scale(v)
		}
	}
	t.Estimated = true
	t.Warning = fmt.Sprintf("estimate: the dry run read the first %d of the %d items of the dead-letter queue and scaled its counts", scanned, total)
	return scale(matched), nil
}

// planner returns the function a dry run calls with each matching item:
// it adds the item to t's plan (WouldMove, WouldSkip, ByDestination,
// SkipReasons, LeftTo) with the checks a task makes, in its order: another
// task holds it (one of holders: Start would leave it to that task), then
// step's: loop cap, lease, key, destination queue.
func (r *Runner) planner(t *Task, holders []holder) func(it *queue.Item) {
	t.ByDestination = map[string]*Plan{}
	exists := map[string]bool{}
	return func(it *queue.Item) {
		dest := t.destination(it)
		reason := ""
		h := leaveTo(holders, it)
		switch {
		case h != nil:
			reason = SkipOtherTask
			if t.LeftTo == nil {
				t.LeftTo = map[string]int64{}
			}
			t.LeftTo[h.Task]++
		case t.MaxRedriveCount >= 0 && it.Body.RedriveCount >= t.MaxRedriveCount:
			reason = SkipLoopCap
		case it.Meta.Leased:
			reason = SkipLeased
		case !t.covers(dest):
			reason = SkipNotCovered
		default:
			ok, seen := exists[dest]
			if !seen {
				_, err := r.cfg.Queues.Get(dest)
				ok = dest != "" && err == nil
				exists[dest] = ok
			}
			if !ok {
				reason = SkipSourceGone
			}
		}
		p := t.ByDestination[dest]
		if p == nil {
			p = &Plan{}
			t.ByDestination[dest] = p
		}
		if reason == "" {
			p.WouldMove++
			t.WouldMove++
			return
		}
		p.WouldSkip++
		t.WouldSkip++
		if p.SkipReasons == nil {
			p.SkipReasons = map[string]int64{}
		}
		p.SkipReasons[reason]++
		if t.SkipReasons == nil {
			t.SkipReasons = map[string]int64{}
		}
		t.SkipReasons[reason]++
	}
}

// holders returns the holds of the unfinished tasks of dead-letter queue q
// that hold items (running, pausing or paused: a task being cancelled
// moves no more), oldest first, with their status. Needs mu.
func (r *Runner) holders(q string) []holder {
	var out []holder
	for _, o := range r.tasks {
		if o.Queue == q && !o.finished() && o.Status != StatusCancelling && o.UpTo > o.Pivot {
			out = append(out, holder{Hold: o.hold(), status: o.Status})
		}
	}
	slices.SortFunc(out, func(a, b holder) int { return cmpString(a.Task, b.Task) })
	for i := range out {
		out[i].Filter.IDs = slices.Clone(out[i].Filter.IDs)
	}
	return out
}

// advice says what to do about a task in status that holds the items a
// new one would take (Start's conflict with RefuseOverlap).
func advice(status string) string {
	if status == StatusPaused || status == StatusPausing {
		return "resume it, cancel it, or wait for it to end"
	}
	return "wait for it to end, or cancel it"
}

// Package redrive runs redrive tasks: tracked, rate-limited, cancellable
// moves of dead items from a dead-letter queue back to their source queue (or
// to a destination), persisted so that a running task resumes after a
// restart.
//
// A task goes through the dead-letter queue in id order (oldest first), a
// batch at a time. For each batch it produces the items to their destination
// first, through the destination's logical queue, then deletes them from the
// dead-letter queue through the dead-letter queue's logical queue (publish
// first, acknowledge second). A crash between the two leaves a copy in both;
// the resumed task sends it again and the destination ignores the copy it
// holds (the source-key rule of ADR 0003). See ADR 0004.
package redrive

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/styxq/styx/internal/apierr"
	"github.com/styxq/styx/internal/auth"
	"github.com/styxq/styx/internal/clock"
	"github.com/styxq/styx/internal/queue"
	"github.com/styxq/styx/internal/store"
	"github.com/styxq/styx/metrics"
)

// Task statuses (wire: RedriveTask.status).
const (
	StatusRunning    = "running"
	StatusCompleted  = "completed"
	StatusCancelling = "cancelling"
	StatusCancelled  = "cancelled"
	StatusFailed     = "failed"
	// StatusPausing: Pause was asked; the task stops after its current
	// step and shows StatusPaused.
	StatusPausing = "pausing"
	// StatusPaused: the task moves nothing until Resume; it stays paused
	// across restarts and, on a shared store, failovers (ADR 0004,
	// amendment for issue 39).
	StatusPaused = "paused"
)

// The limits of a redrive task: the one table every door checks a
// request against (StartParams.Check, from Start).
const (
	// DefaultMaxRedriveCount is how many times an item may be redriven
	// before a redrive skips it (redrive loops end).
	DefaultMaxRedriveCount = 10
	// MaxRedriveCountLimit is the largest StartParams.MaxRedriveCount; -1
	// means no limit and 0 DefaultMaxRedriveCount.
	MaxRedriveCountLimit = 1000
	// MaxRateLimit is the largest StartParams.RateLimit, in items per
	// second; 0 means unthrottled. /v1's rate_limit takes 0 to
	// MaxRateLimit; the SQS API's MaxNumberOfMessagesPerSecond 1 to
	// MaxRateLimit (AWS documents 1 to 500; SQS has no unthrottled value).
	MaxRateLimit = 1_000_000
	// keepFinished is how many finished tasks are kept per dead-letter
	// queue.
	keepFinished = 100
	// maxBatch is the most items a task moves per step.
	maxBatch = 500
	// progressEvery is how often (in items) a task logs its progress.
	progressEvery = 10_000
	// adoptEvery is how often a runner on a shared task store looks for
	// running tasks whose server died, to take them over.
	adoptEvery = 5 * time.Second
	// cancelPrefix marks a cancel request for a task running on another
	// server of a shared task store: a record "cancel/<task id>".
	cancelPrefix = "cancel/"
	// pausePrefix and ratePrefix mark a pause or a re-rate request for a
	// task running on another server of a shared task store ("pause/<task
	// id>", "rate/<task id>" holding a rateRequest).
	pausePrefix = "pause/"
	ratePrefix  = "rate/"
	// taskClaimPrefix and startClaimPrefix name the claims of a shared
	// store: a task runs under the claim "redrive-task:<id>", and a task
	// starts on a dead-letter queue under "redrive-start:<queue>", so that
	// two starts on one queue check their item sets one after the other.
	taskClaimPrefix  = "redrive-task:"
	startClaimPrefix = "redrive-start:"
	// yieldWait and maxYields bound how long a task step waits for a queue
	// with requests waiting (live traffic goes first).
	yieldWait = time.Millisecond
	maxYields = 20
	// A step that fails transiently (see transient) runs again up to
	// maxStepRetries times in a row, after a back-off that doubles from
	// minRetryWait up to maxRetryWait (1.55 s in all): enough for a cut
	// connection or a busy queue. Storage that stays away longer fails the
	// task (or counts the destination's items failed), as before; on a
	// shared store the task's claim is usually lost first, and the task
	// resumes where it is claimed next.
	maxStepRetries = 5
	minRetryWait   = 50 * time.Millisecond
	maxRetryWait   = 2 * time.Second
)

// Why a redrive skips an item (it stays in the dead-letter queue): wire
// RedriveTask.skip_reasons keys.
const (
	// SkipSourceGone: the destination queue does not exist (the source
	// queue the item names was deleted, or it names none).
	SkipSourceGone = "source_gone"
	// SkipNotCovered: the API key that started the task may not reach the
	// destination queue.
	SkipNotCovered = "not_covered"
	// SkipLoopCap: the item was already redriven MaxRedriveCount times.
	SkipLoopCap = "loop_cap"
	// SkipLeased: a consumer of the dead-letter queue holds the item.
	SkipLeased = "leased"
	// SkipOtherTask: another redrive task of the dead-letter queue was
	// moving the item at the same time (a redrive naming items by id may
	// overlap a running one: the item goes to whichever reaches it first).
	SkipOtherTask = "other_task"
)

// skipWords says each skip reason in words, for Task.Warning.
var skipWords = map[string]string{
	SkipSourceGone: "whose destination queue does not exist",
	SkipNotCovered: "bound for a queue the API key may not reach",
	SkipLoopCap:    "already redriven max_redrive_count times",
	SkipLeased:     "leased by a consumer of the dead-letter queue",
	SkipOtherTask:  "moved by another redrive task",
}

// Counts are a task's per-destination results.
type Counts struct {
	Moved   int64 `json:"moved"`
	Failed  int64 `json:"failed"`
	Skipped int64 `json:"skipped"`
	// SkipReasons counts the skipped items by reason (Skip*).
	SkipReasons map[string]int64 `json:"skip_reasons,omitempty"`
}

// Plan is what a dry run says a redrive would do with the items bound for
// one destination queue.
type Plan struct {
	WouldMove   int64            `json:"would_move"`
	WouldSkip   int64            `json:"would_skip"`
	SkipReasons map[string]int64 `json:"skip_reasons,omitempty"`
}

// Task is a redrive task. Values returned by the Runner are copies.
type Task struct {
	ID string `json:"id"`
	// Queue is the dead-letter queue the items come from.
	Queue string `json:"queue"`
	// Destination, when set, receives every item; otherwise each item goes
	// to its source queue.
	Destination string           `json:"destination,omitempty"`
	Filter      queue.DeadFilter `json:"filter"`
	// RateLimit is items per second; 0 means no limit. Update changes it
	// while the task runs (from its next step).
	RateLimit int32 `json:"rate_limit,omitempty"`
	// RateSetAt is when Update last set RateLimit (zero: never): a re-rate
	// request stored for another server applies when newer.
	RateSetAt time.Time `json:"rate_set_at,omitzero"`
	// MaxRedriveCount: items redriven this many times are skipped; -1 means
	// no limit.
	MaxRedriveCount int32 `json:"max_redrive_count"`
	DryRun          bool  `json:"dry_run,omitempty"`
	// KeyName is the name of the API key that started the task (audit);
	// empty when the server runs without auth.
	KeyName string `json:"key_name,omitempty"`
	// KeyQueues are the queue patterns of that key (internal/auth): a
	// destination none of them covers is skipped, so a key limited to
	// some queues cannot redrive into others through the source queue a
	// dead item names (issue 24). Empty: every queue.
	KeyQueues []string `json:"key_queues,omitempty"`
	Status    string   `json:"status"`
	// Matched counts the items that matched the filter when the task
	// started; Moved, Failed and Skipped count what happened to them.
	Matched       int64              `json:"matched"`
	Moved         int64              `json:"moved"`
	Failed        int64              `json:"failed"`
	Skipped       int64              `json:"skipped"`
	ByQueue       map[string]*Counts `json:"by_queue,omitempty"`
	StartedAt     time.Time          `json:"started_at"`
	FinishedAt    time.Time          `json:"finished_at,omitzero"`
	FailureReason string             `json:"failure_reason,omitempty"`
	// SkipReasons counts the skipped items by reason (Skip*): for a dry
	// run, the items a redrive would skip.
	SkipReasons map[string]int64 `json:"skip_reasons,omitempty"`
	// Warning, on a completed task that left items behind (skipped or
	// failed), says how many and why; on a task whose end could not be
	// stored yet (see Runner.finish), that it shows its former status until
	// it is.
	Warning string `json:"warning,omitempty"`
	// ErrorPattern is the pattern of the error group Filter.Fingerprint
	// names, when the task started ("" without one).
	ErrorPattern string `json:"error_pattern,omitempty"`
	// WouldMove, WouldSkip and ByDestination are a dry run's plan: of
	// the matched items, those a redrive started now would move and
	// skip, in all and by destination queue.
	WouldMove     int64            `json:"would_move,omitempty"`
	WouldSkip     int64            `json:"would_skip,omitempty"`
	ByDestination map[string]*Plan `json:"by_destination,omitempty"`
	// Estimated is set on a dry run over a dead-letter queue holding more
	// than DryRunScan items: it read the first DryRunScan and scaled its
	// counts (Matched, WouldMove, WouldSkip, ByDestination, SkipReasons) to
	// the queue's size; Warning says so.
	Estimated bool `json:"estimated,omitempty"`
	// Pivot is the id of the last dead item the task has processed: a
	// resumed task continues after it.
	Pivot uint64 `json:"pivot,omitempty"`
	// UpTo is the id of the newest item the queue held when the task
	// started, or Filter.UpTo when lower: items that die later are not
	// part of the task. A dry run sets it too, unless Estimated (0).
	UpTo uint64 `json:"up_to,omitempty"`
	// Taken holds, by destination queue, the dead items whose copies the
	// destination acknowledged and whose delete from the dead-letter queue
	// is not known to have happened yet, and which the counts do not hold:
	// a step stores them before it deletes, and counts and removes them
	// once the delete answers. After a delete whose answer was lost (a
	// commit outcome unknown, a failover), the task, here or resumed on
	// another server, looks each one up (settleTaken): gone from the
	// dead-letter queue, it was moved and is counted so; still there, only
	// its delete is left (its copy is not sent again: a consumer may have
	// completed it meanwhile, issue 41). So every item moved is counted,
	// once (issue 53).
	Taken map[string][]uint64 `json:"taken,omitempty"`
}

func (t *Task) clone() Task {
	c := *t
	c.Filter.IDs = slices.Clone(t.Filter.IDs)
	c.ByQueue = make(map[string]*Counts, len(t.ByQueue))
	for k, v := range t.ByQueue {
		cv := *v
		cv.SkipReasons = maps.Clone(v.SkipReasons)
		c.ByQueue[k] = &cv
	}
	c.SkipReasons = maps.Clone(t.SkipReasons)
	if t.Taken != nil {
		c.Taken = make(map[string][]uint64, len(t.Taken))
		for k, v := range t.Taken {
			c.Taken[k] = slices.Clone(v)
		}
	}
	if t.ByDestination != nil {
		c.ByDestination = make(map[string]*Plan, len(t.ByDestination))
		for k, v := range t.ByDestination {
			pv := *v
			pv.SkipReasons = maps.Clone(v.SkipReasons)
			c.ByDestination[k] = &pv
		}
	}
	return c
}

func (t *Task) finished() bool {
	return t.Status == StatusCompleted || t.Status == StatusCancelled || t.Status == StatusFailed
}

// holds reports whether the dead item it is still part of t's matched set:
// it died before t started (id up to UpTo), t has not reached it (id past
// Pivot) and it matches t's filter. t is unfinished.
func (t *Task) holds(it *queue.Item) bool {
	return it.Meta.ID > t.Pivot && it.Meta.ID <= t.UpTo && t.Filter.Match(it)
}

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

// Config configures a Runner.
type Config struct {
	Queues  queue.Queues
	Store   store.TaskStore
	Clock   clock.Clock
	Log     *slog.Logger
	Metrics *metrics.Metrics
}

// Runner owns the redrive tasks of a server: one goroutine per running
// task. mu guards tasks and running; it is never held while a task calls
// into a logical queue or the store.
//
// When several servers share the task store (it implements
// store.TaskClaimer: PostgreSQL), a task runs only on the server holding its
// claim; every runner lists every server's tasks from the store, takes over
// running tasks whose server died (every adoptEvery), and cancels a task
// running elsewhere by storing a cancel request its runner reads at each
// step.
type Runner struct {
	cfg     Config
	claimer store.TaskClaimer  // nil: the store is this server's own
	checker store.ClaimChecker // nil: a claim lasts until released
	ctx     context.Context    // canceled by Close
	stop    context.CancelFunc
	wg      sync.WaitGroup
	mu      sync.Mutex
	tasks   map[string]*Task
	running map[string]context.CancelFunc // by task id
	// pokes wakes a running task's goroutine from its wait (Pause,
	// Update): by task id, buffered 1.
	pokes map[string]chan struct{}
	// inflight holds the dead items being moved by a step, by
	// "<queue>~<id>", with the task moving them: a second task of the
	// queue that meets one skips it (SkipOtherTask).
	inflight map[string]string
	// starting serializes Starts on one dead-letter queue (by name), so
	// that each checks its items against the tasks started before it.
	starting map[string]*sync.Mutex
	// ending holds the tasks whose end is being stored (finish), by task
	// id: they show their status until it is stored, and Pause, Resume
	// and Update refuse them (a change stored now could land after the
	// end).
	ending map[string]bool
	// persisting serializes the stores of each task (persist), by task id:
	// two stores of one task (a Pause and the step that pauses it, say)
	// land in the order their records were taken, so the last one stored
	// is the newest. Taken before mu, never under it.
	persisting map[string]*sync.Mutex
	lastID     uint64
}

// New loads the persisted tasks and resumes the running ones (on a shared
// store: those it can claim).
func New(ctx context.Context, cfg Config) (*Runner, error) {
	rctx, stop := context.WithCancel(context.Background())
	r := &Runner{cfg: cfg, ctx: rctx, stop: stop, tasks: map[string]*Task{}, running: map[string]context.CancelFunc{},
		pokes: map[string]chan struct{}{}, inflight: map[string]string{}, starting: map[string]*sync.Mutex{},
		ending: map[string]bool{}, persisting: map[string]*sync.Mutex{}}
	r.claimer, _ = cfg.Store.(store.TaskClaimer)
	if r.claimer != nil {
		r.checker, _ = cfg.Store.(store.ClaimChecker)
	}
	if err := r.adopt(ctx); err != nil {
		stop()
		return nil, err
	}
	if r.claimer != nil {
		r.wg.Go(func() {
			t := time.NewTicker(adoptEvery)
			defer t.Stop()
			for {
				select {
				case <-rctx.Done():
					return
				case <-t.C:
				}
				if err := r.adopt(rctx); err != nil && rctx.Err() == nil {
					cfg.Log.Warn("redrive: looking for tasks to take over failed", "error", err)
				}
			}
		})
	}
	return r, nil
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
	for _, rec := range recs {
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
			t.Status = StatusPaused
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

// Close stops every task goroutine without changing the tasks' status: a
// running task resumes when the server starts again. Call it before the
// queue manager closes.
func (r *Runner) Close() {
	r.stop()
	r.wg.Wait()
}

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
	// ExpectMatched, when not nil, is the count of matching items the
	// client confirmed (dead.redrive's expect_matched): Start refuses,
	// starting nothing, when as many do not match (queue.CheckMatched).
	// Ignored by a dry run. Filter.UpTo leaves out the items that died
	// after the client counted.
	ExpectMatched *int64
}

// Check validates p's own fields against the limits, looking nothing up:
// the destination is not the queue (ErrDestinationIsQueue), RateLimit is in
// 0..MaxRateLimit (ErrRateLimit) and MaxRedriveCount in
// -1..MaxRedriveCountLimit (ErrMaxRedriveCount), each an apierr.Invalid
// naming the /v1 field. Names and filters are the doors' to parse.
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
	return nil
}

// Start checks p and counts the matching items and, unless p.DryRun, starts
// a task. The checks, in order, are every door's: p.Queue is a dead-letter
// queue (queue.DeadLetterQueue: queue.NotFound, or an error wrapping
// queue.ErrNotDeadLetterQueue), p.Check, and the destination exists
// (ErrDestinationNotFound); all apierr.Invalid.
//
// Several tasks may run on one dead-letter queue when their items are
// disjoint. A task's matched set is fixed when it starts: the items that
// match its filter then (ids up to UpTo); items that die later are not
// part of it. With p.ExpectMatched, Start returns the apierr.Conflict of
// queue.CheckMatched (wrapping queue.ErrMatchedChanged) when that set is not
// as many items as the client confirmed. Start returns apierr.Conflict,
// naming the task, when an unfinished task (running, pausing or paused)
// still holds some of the matched items (not yet reached, see Task.holds) —
// unless p.Filter names its items by id (a redrive of single items): such a
// task may overlap, and each overlapping item goes to whichever task
// reaches it first, never to both (see step).
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
		ByQueue: map[string]*Counts{}, StartedAt: now,
	}
	if f := p.Filter.Fingerprint; f != "" {
		if g, err := dlq.Groups(ctx, queue.GroupFilter{Fingerprint: f, SourceQueue: p.Filter.SourceQueue, Reason: p.Filter.Reason}, 1); err == nil && len(g.Groups) > 0 {
			t.ErrorPattern = g.Groups[0].Pattern
		}
	}
	if p.DryRun {
		plan := r.planner(t)
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
	var others []Task
	for _, o := range r.tasks {
		if o.Queue == p.Queue && !o.finished() {
			others = append(others, o.clone())
		}
	}
	slices.SortFunc(others, func(a, b Task) int { return cmpString(a.ID, b.ID) })
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
	// UpTo); of them, those an unfinished task still holds overlap it.
	overlap, overlapN := "", int64(0)
	each := func(it *queue.Item) {
		for i := range others {
			if others[i].holds(it) {
				if overlap == "" {
					overlap = others[i].ID
				}
				overlapN++
				return
			}
		}
	}
	matched, upTo, _, err := countMatching(ctx, r.cfg.Queues, dlq, &t.Filter, each, 0)
	upTo = upToOf(&t.Filter, upTo)
	if err == nil && p.ExpectMatched != nil {
		err = queue.CheckMatched(matched, *p.ExpectMatched, "redriven")
	}
	if err == nil && overlapN > 0 && len(p.Filter.IDs) == 0 {
		// A task naming its items by id may overlap: each such item goes
		// to whichever task reaches it first. Two filters may not.
		err = apierr.New(apierr.Conflict,
			"redrive already running on these items; task '%s' is running on queue '%s' and holds %d of the %d matched items; wait for it to end, cancel it, or narrow the filter",
			overlap, p.Queue, overlapN, matched)
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
		"matched", matched, "rate_limit", t.RateLimit, "overlapping", overlapN)
	r.mu.Lock()
	switch t.Status {
	case StatusCancelling: // cancelled while it counted
		r.mu.Unlock()
		r.finishSoon(t, StatusCancelled, "", release)
		return r.Get(ctx, t.ID)
	case StatusPausing: // paused while it counted
		t.Status = StatusPaused
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
// SkipReasons) with the checks step makes, in step's order: loop cap,
// lease, key, destination queue.
func (r *Runner) planner(t *Task) func(it *queue.Item) {
	t.ByDestination = map[string]*Plan{}
	exists := map[string]bool{}
	return func(it *queue.Item) {
		dest := t.Destination
		if dest == "" {
			dest = it.Body.SourceQueue
		}
		reason := ""
		switch {
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

// warning says how many items a completed task left behind and why, or ""
// when it left none.
func warning(t *Task) string {
	if t.Skipped+t.Failed == 0 {
		return ""
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(t.SkipReasons)) {
		parts = append(parts, fmt.Sprintf("%d %s", t.SkipReasons[k], skipWords[k]))
	}
	if t.Failed > 0 {
		parts = append(parts, fmt.Sprintf("%d failed to reach the destination", t.Failed))
	}
	return fmt.Sprintf("%d of %d items stay in the dead-letter queue: %s", t.Skipped+t.Failed, t.Matched, strings.Join(parts, "; "))
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
			out = append(out, t.clone())
		}
	}
	slices.SortFunc(out, func(a, b Task) int { return -cmpString(a.ID, b.ID) })
	return out, nil
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Get returns a task, or apierr.NotFound.
func (r *Runner) Get(ctx context.Context, id string) (Task, error) {
	if err := r.sync(ctx); err != nil {
		return Task{}, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	t, ok := r.tasks[id]
	if !ok {
		return Task{}, apierr.New(apierr.NotFound, "redrive task does not exist; '%s'", id)
	}
	return t.clone(), nil
}

// Cancel asks a running task to stop after its current batch and returns
// it (status cancelling); a paused one ends cancelled at once. A finished
// task is returned unchanged. A task running on another server gets a
// cancel request in the shared store, which its runner reads before its
// next batch.
func (r *Runner) Cancel(ctx context.Context, id string) (Task, error) {
	if err := r.sync(ctx); err != nil {
		return Task{}, err
	}
	r.mu.Lock()
	t, ok := r.tasks[id]
	if !ok {
		r.mu.Unlock()
		return Task{}, apierr.New(apierr.NotFound, "redrive task does not exist; '%s'", id)
	}
	if t.Status == StatusPaused {
		r.mu.Unlock()
		return r.whilePaused(ctx, id, func(t *Task, release func()) (bool, error) {
			if err := r.end(t, StatusCancelled, "", release); err != nil {
				release() // the task stays paused, as it is stored
				return false, err
			}
			return true, nil
		})
	}
	cancel, mine := r.running[id]
	if r.ending[id] {
		// Its end is being stored: it ends as it is.
		c := t.clone()
		r.mu.Unlock()
		return c, nil
	}
	if t.Status == StatusRunning || t.Status == StatusPausing {
		t.Status = StatusCancelling
		if mine {
			cancel()
		}
	}
	c := t.clone()
	r.mu.Unlock()
	if c.Status != StatusCancelling {
		return c, nil
	}
	if !mine && r.claimer != nil {
		if err := r.request(ctx, cancelPrefix, t, []byte("{}")); err != nil {
			return Task{}, err
		}
		return c, nil
	}
	if err := r.persist(t); err != nil {
		return Task{}, err
	}
	return c, nil
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
	if r.ending[id] {
		r.mu.Unlock()
		return Task{}, endingConflict(id, "pause")
	}
	switch t.Status {
	case StatusPaused, StatusPausing:
		c := t.clone()
		r.mu.Unlock()
		return c, nil
	case StatusRunning:
	default:
		err := endedConflict(t, "pause")
		r.mu.Unlock()
		return Task{}, err
	}
	t.Status = StatusPausing
	r.poke(id)
	c := t.clone()
	r.mu.Unlock()
	if !mine && r.claimer != nil {
		return c, r.request(ctx, pausePrefix, t, []byte("{}"))
	}
	// Stored now, so that a restart before the step ends keeps the pause.
	return c, r.persist(t)
}

// Resume runs a paused task again from where it stopped (status running),
// on this server; a pausing task goes on running; a running one is returned
// unchanged. apierr.Conflict (ErrTaskEnded) for a task that has ended or is
// cancelling; apierr.NotFound for an unknown one.
func (r *Runner) Resume(ctx context.Context, id string) (Task, error) {
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
	if r.ending[id] {
		r.mu.Unlock()
		return Task{}, endingConflict(id, "resume")
	}
	switch {
	case t.Status == StatusRunning:
		c := t.clone()
		r.mu.Unlock()
		return c, nil
	case t.Status == StatusPausing && mine:
		t.Status = StatusRunning
		c := t.clone()
		r.mu.Unlock()
		return c, r.persist(t)
	case t.Status == StatusPausing:
		// Asked of the server running it: withdraw the request. Had it
		// paused already, the task shows paused: resume it again.
		r.mu.Unlock()
		if err := r.cfg.Store.DeleteTask(ctx, pausePrefix+id); err != nil {
			return Task{}, store.Unavailable("", fmt.Errorf("redrive: withdraw pause of task %s: %w", id, err))
		}
		return r.Get(ctx, id)
	case t.Status != StatusPaused:
		err := endedConflict(t, "resume")
		r.mu.Unlock()
		return Task{}, err
	}
	r.mu.Unlock()
	return r.whilePaused(ctx, id, func(t *Task, release func()) (bool, error) {
		r.mu.Lock()
		t.Status = StatusRunning
		r.mu.Unlock()
		if err := r.persist(t); err != nil {
			r.mu.Lock()
			t.Status = StatusPaused
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
	if err := r.sync(ctx); err != nil {
		return Task{}, err
	}
	now := r.cfg.Clock.Now().UTC()
	r.mu.Lock()
	t, ok := r.tasks[id]
	if !ok {
		r.mu.Unlock()
		return Task{}, apierr.New(apierr.NotFound, "redrive task does not exist; '%s'", id)
	}
	_, mine := r.running[id]
	if r.ending[id] {
		r.mu.Unlock()
		return Task{}, endingConflict(id, "update")
	}
	switch {
	case t.Status == StatusPaused:
		r.mu.Unlock()
		return r.whilePaused(ctx, id, func(t *Task, release func()) (bool, error) {
			defer release()
			r.mu.Lock()
			t.RateLimit, t.RateSetAt = rateLimit, now
			r.mu.Unlock()
			return false, r.persist(t)
		})
	case t.Status != StatusRunning && t.Status != StatusPausing:
		err := endedConflict(t, "update")
		r.mu.Unlock()
		return Task{}, err
	}
	t.RateLimit, t.RateSetAt = rateLimit, now
	r.poke(id)
	c := t.clone()
	r.mu.Unlock()
	if !mine && r.claimer != nil {
		data, err := json.Marshal(rateRequest{RateLimit: rateLimit, At: now})
		if err != nil {
			return Task{}, err
		}
		return c, r.request(ctx, ratePrefix, t, data)
	}
	r.cfg.Log.Info("redrive: task re-rated", "task", t.ID, "dead_queue", t.Queue, "rate_limit", rateLimit)
	return c, nil
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

// settlePause stores task t paused (its goroutine has stopped, or never
// ran), withdraws a pause request stored for it, and releases its claim:
// the task runs nowhere until Resume. t is in running (mine).
func (r *Runner) settlePause(t *Task, release func()) {
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
	if status == StatusCompleted {
		ended.Warning = warning(&ended)
	}
	if err := r.persist(&ended); err != nil {
		return err
	}
	release()

	r.mu.Lock()
	t.Status, t.FailureReason, t.FinishedAt, t.Warning = ended.Status, ended.FailureReason, ended.FinishedAt, ended.Warning
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

// run moves the task's items until done, canceled, paused or failed. It
// returns the final status and, for failed, the reason; StatusPaused when
// the task was paused (it has stored nothing of that yet); or
// statusClaimLost when the task's claim was lost (checked before each step
// and each save of its progress). A step that fails transiently (see
// transient) runs again after a back-off (maxStepRetries) before it fails
// the task. poke wakes it from the rate limiter's wait (Pause, Update):
// before each step it reads the task's status and rate limit again, and
// other servers' requests.
func (r *Runner) run(ctx context.Context, t *Task, poke <-chan struct{}) (string, string) {
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
		if asked.pause && t.Status == StatusRunning {
			t.Status = StatusPausing
		}
		if asked.rate != nil && asked.rate.At.After(t.RateSetAt) {
			t.RateLimit, t.RateSetAt = asked.rate.RateLimit, asked.rate.At
		}
		if t.Status == StatusPausing {
			t.Status = StatusPaused
			r.mu.Unlock()
			return StatusPaused, ""
		}
		rateLimit := t.RateLimit
		r.mu.Unlock()
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
		items, next, err := dlq.Scan(ctx, info.Partitions, &t.Filter, queue.ScanParams{After: t.Pivot, Limit: batch})
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

// errClaimLost is step's error when the task's claim was lost before it
// could store the items it is about to delete (Task.Taken).
var errClaimLost = errors.New("redrive: the task's claim was lost")

// claimHeld reports whether this server still holds t's claim (always,
// unless the store's claims can be lost).
func (r *Runner) claimHeld(ctx context.Context, t *Task) bool {
	return r.checker == nil || r.checker.ClaimHeld(ctx, taskKey(t.ID))
}

// step moves one batch: destination first, dead-letter queue second. A
// destination that fails transiently (see transient) fails the step, which
// runs again, while retryable; one that fails otherwise, or once the step
// is no longer retryable, keeps its items in the dead-letter queue, counted
// failed. The items whose copies a destination acknowledged are recorded
// in t.Taken, and stored, before their delete from the dead-letter queue,
// and stay there until the delete answers: a step run again after that
// delete failed, here or on another server, does not send them again,
// since the destination's source-key check only holds while its copy
// exists and a consumer may have completed it meanwhile (issue 41), and
// counts those the delete did take (settleTaken). It returns errClaimLost
// when the claim was lost before that store.
func (r *Runner) step(ctx context.Context, t *Task, dlq queue.Queue, items []queue.Item, retryable bool) (err error) {
	// The counts are kept until the step ends: a step that fails runs
	// again (see Runner.run) and meets the items it skipped or failed
	// again, so only the moves of a failed step, whose items left the
	// dead-letter queue, count (with the deletes that answered).
	type counted struct {
		dest                   string
		moved, failed, skipped int64
		why                    string   // the reason of skipped
		settled                []uint64 // the items of t.Taken the counts settle
		deleted                bool     // the results of a delete from the dead-letter queue
	}
	var counts []counted
	count := func(dest string, moved, failed, skipped int64, why string) {
		counts = append(counts, counted{dest: dest, moved: moved, failed: failed, skipped: skipped, why: why})
	}
	defer func() {
		for _, c := range counts {
			if err == nil {
				r.count(t, c.dest, c.moved, c.failed, c.skipped, c.why, c.settled...)
			} else if c.deleted {
				// The delete answered: its moves count, and its items
				// leave t.Taken (those it left, leased, are met again).
				r.count(t, c.dest, c.moved, 0, 0, "", c.settled...)
			}
		}
	}()
	r.mu.Lock()
	taken := make(map[uint64]bool)
	for _, ids := range t.Taken {
		for _, id := range ids {
			taken[id] = true
		}
	}
	r.mu.Unlock()
	// skip counts items skipped for why; those of t.Taken (the destination
	// has their copies, and they stay here) leave it, counted.
	skip := func(dest string, items []queue.Item, why string) {
		c := counted{dest: dest, skipped: int64(len(items)), why: why}
		for _, it := range items {
			if taken[it.Meta.ID] {
				c.settled = append(c.settled, it.Meta.ID)
			}
		}
		counts = append(counts, c)
	}
	// An item another task of the queue is moving now (one naming items
	// by id overlaps a running one) is that task's: skipped here.
	r.mu.Lock()
	var mine []string
	items = slices.DeleteFunc(slices.Clone(items), func(it queue.Item) bool {
		key := queue.RedriveKey(t.Queue, it.Meta.ID)
		if other, ok := r.inflight[key]; ok && other != t.ID {
			dest := t.Destination
			if dest == "" {
				dest = it.Body.SourceQueue
			}
			count(dest, 0, 0, 1, SkipOtherTask)
			return true
		}
		r.inflight[key] = t.ID
		mine = append(mine, key)
		return false
	})
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		for _, key := range mine {
			delete(r.inflight, key)
		}
		r.mu.Unlock()
	}()
	byDest := map[string][]queue.Item{}
	var order []string
	for _, it := range items {
		dest := t.Destination
		if dest == "" {
			dest = it.Body.SourceQueue
		}
		if _, ok := byDest[dest]; !ok {
			order = append(order, dest)
		}
		byDest[dest] = append(byDest[dest], it)
	}
	for _, dest := range order {
		group := byDest[dest]
		var send []queue.Item
		for _, it := range group {
			if t.MaxRedriveCount >= 0 && it.Body.RedriveCount >= t.MaxRedriveCount {
				skip(dest, []queue.Item{it}, SkipLoopCap)
				continue
			}
			if it.Meta.Leased {
				// A consumer of the dead-letter queue holds it: a redrive
				// never takes an item from under a lease.
				skip(dest, []queue.Item{it}, SkipLeased)
				continue
			}
			send = append(send, it)
		}
		if len(send) == 0 {
			continue
		}
		if !t.covers(dest) {
			r.cfg.Log.Warn("redrive: the task's key does not cover the destination; items stay in the dead-letter queue",
				"task", t.ID, "key", t.KeyName, "queue", dest, "items", len(send))
			skip(dest, send, SkipNotCovered)
			continue
		}
		target, err := r.cfg.Queues.Get(dest)
		if dest == "" || err != nil {
			// The source queue is gone: the items stay for manual review.
			skip(dest, send, SkipSourceGone)
			continue
		}
		yield(target)
		yield(dlq)
		var in []queue.RedriveItem
		now := r.cfg.Clock.Now()
		for _, it := range send {
			if !taken[it.Meta.ID] { // else the destination has its copy: only the delete is left
				in = append(in, queue.RedriveItem{SourceKey: queue.RedriveKey(t.Queue, it.Meta.ID), Body: it.Body, Group: it.Meta.Group, DeadKey: it.Meta.SourceKey,
					Errors: queue.RedrivenHistory(&it, t.Queue, t.ID, now)})
			}
		}
		if len(in) > 0 {
			if err := target.TakeRedriven(ctx, in); err != nil {
				if ctx.Err() != nil || (retryable && transient(err)) {
					// Run again: the destination skips the copies it took
					// (their source keys), and the items are still dead here.
					return fmt.Errorf("redrive to queue '%s': %w", dest, err)
				}
				r.cfg.Log.Warn("redrive: destination write failed; items stay in the dead-letter queue",
					"task", t.ID, "queue", dest, "items", len(in), "error", err)
				count(dest, 0, int64(len(in)), 0, "")
				// Those the destination took in an earlier run of the step
				// go on to their delete.
				send = slices.DeleteFunc(send, func(it queue.Item) bool { return !taken[it.Meta.ID] })
				if len(send) == 0 {
					continue
				}
			}
		}
		refs := make([]queue.ItemRef, len(send))
		ids := make([]uint64, len(send))
		var added []uint64
		for i, it := range send {
			refs[i] = queue.ItemRef{Partition: it.Partition, ID: it.Meta.ID}
			ids[i] = it.Meta.ID
			if !taken[it.Meta.ID] {
				added = append(added, it.Meta.ID)
				taken[it.Meta.ID] = true
			}
		}
		if len(added) > 0 {
			// Stored before the delete: whatever becomes of the delete's
			// answer, the task (here or resumed elsewhere) counts them.
			r.mu.Lock()
			if t.Taken == nil {
				t.Taken = map[string][]uint64{}
			}
			t.Taken[dest] = append(t.Taken[dest], added...)
			r.mu.Unlock()
			if !r.claimHeld(ctx, t) {
				return errClaimLost
			}
			if err := r.persist(t); err != nil {
				return err
			}
		}
		n, err := dlq.DeleteDead(ctx, refs)
		if err != nil {
			// The items are in both queues, or only in the destination
			// (the delete's answer was lost): settleTaken tells which.
			if ctx.Err() != nil {
				return err
			}
			return fmt.Errorf("delete from dead-letter queue '%s': %w", t.Queue, err)
		}
		for _, id := range ids {
			delete(taken, id)
		}
		if leased := len(send) - n; leased > 0 {
			// Leased between the scan and the delete: the consumer keeps
			// them, and the destination has a copy of each.
			r.cfg.Log.Warn("redrive: items leased from the dead-letter queue while being redriven; the destination has a copy",
				"task", t.ID, "dead_queue", t.Queue, "queue", dest, "items", leased)
		}
		counts = append(counts, counted{dest: dest, moved: int64(n), skipped: int64(len(send) - n), why: SkipLeased, settled: ids, deleted: true})
	}
	return nil
}

// settleTaken counts the items of t.Taken (see there) that have left the
// dead-letter queue as moved, and keeps those still in it, whose delete is
// left to do. On the task goroutine.
func (r *Runner) settleTaken(ctx context.Context, t *Task, dlq queue.Queue, partitions int32) error {
	r.mu.Lock()
	var ids []uint64
	for _, v := range t.Taken {
		ids = append(ids, v...)
	}
	r.mu.Unlock()
	if len(ids) == 0 {
		return nil
	}
	still, _, err := dlq.Scan(ctx, partitions, &queue.DeadFilter{IDs: ids}, queue.ScanParams{Limit: len(ids)})
	if err != nil {
		return err
	}
	there := make(map[uint64]bool, len(still))
	for _, it := range still {
		there[it.Meta.ID] = true
	}
	r.mu.Lock()
	gone := map[string][]uint64{}
	for dest, v := range t.Taken {
		for _, id := range v {
			if !there[id] {
				gone[dest] = append(gone[dest], id)
			}
		}
	}
	r.mu.Unlock()
	for dest, v := range gone {
		r.cfg.Log.Info("redrive: items whose delete's answer was lost have left the dead-letter queue: counted moved",
			"task", t.ID, "dead_queue", t.Queue, "queue", dest, "items", len(v))
		r.count(t, dest, int64(len(v)), 0, 0, "", v...)
	}
	return nil
}

// covers reports whether the key that started t may reach queue dest.
func (t *Task) covers(dest string) bool {
	if len(t.KeyQueues) == 0 {
		return true
	}
	return (&auth.Principal{Queues: t.KeyQueues}).Covers(dest)
}

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

// yield lets a queue's waiting requests (live traffic) go first, briefly.
func yield(l queue.Queue) {
	for i := 0; i < maxYields && l.Pending() > 0; i++ {
		time.Sleep(yieldWait)
	}
}

// count adds results for one destination queue; why is the reason of the
// skipped items (Skip*). settled are items of t.Taken whose delete the
// results account for: they leave t.Taken under the same lock, so a
// stored record holds each item in its counts or in Taken, never both,
// never neither.
func (r *Runner) count(t *Task, dest string, moved, failed, skipped int64, why string, settled ...uint64) {
	r.mu.Lock()
	if len(settled) > 0 && t.Taken != nil {
		for d, v := range t.Taken {
			v = slices.DeleteFunc(v, func(id uint64) bool { return slices.Contains(settled, id) })
			if len(v) == 0 {
				delete(t.Taken, d)
			} else {
				t.Taken[d] = v
			}
		}
	}
	if t.ByQueue == nil {
		// A task loaded from the store before it counted anything: the
		// empty map is not stored (omitempty).
		t.ByQueue = map[string]*Counts{}
	}
	c := t.ByQueue[dest]
	if c == nil {
		c = &Counts{}
		t.ByQueue[dest] = c
	}
	c.Moved += moved
	c.Failed += failed
	c.Skipped += skipped
	t.Moved += moved
	t.Failed += failed
	t.Skipped += skipped
	if skipped > 0 && why != "" {
		if c.SkipReasons == nil {
			c.SkipReasons = map[string]int64{}
		}
		c.SkipReasons[why] += skipped
		if t.SkipReasons == nil {
			t.SkipReasons = map[string]int64{}
		}
		t.SkipReasons[why] += skipped
	}
	r.mu.Unlock()
	for result, n := range map[string]int64{"moved": moved, "failed": failed, "skipped": skipped} {
		if n > 0 {
			r.cfg.Metrics.RedriveItems.WithLabelValues(t.Queue, dest, result).Add(float64(n))
		}
	}
}

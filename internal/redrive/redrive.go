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
//
// The files, by concern:
//   - redrive.go: the limits, Config, and the Runner (its state, New, Close).
//   - task.go: the Task type, its statuses, counts and skip reasons, and what
//     its state says (finished, hold, covers, warning), and the holds of
//     other tasks a new task leaves items to (Hold).
//   - taskstore.go: persistence through the store.TaskStore: loading and
//     storing tasks, the requests other servers store for a task, and the
//     claims of a shared store.
//   - start.go: StartParams, their checks, and Start (with a dry run's count
//     and plan).
//   - control.go: List, and the calls on one task (Get, Cancel, Pause,
//     Resume, Update): each goes through withTask, which takes the task
//     under the runner's lock and applies the call's change.
//   - run.go: a task's goroutine: adopt (resume after a restart or a
//     failover), launch, the loop (rate limit, retries) and the task's end.
//   - step.go: one step of the loop: a batch copied to its destinations,
//     then deleted from the dead-letter queue, and its counts.
//   - outcomes.go: what became of the items a task moved (completed,
//     retried, dead again, pending), counted from the engine's reports and
//     stored beside the task.
//   - canary.go: a task's canary: move the first items, wait for their
//     outcome, then go on or pause.
package redrive

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/styxq/styx/internal/clock"
	"github.com/styxq/styx/internal/queue"
	"github.com/styxq/styx/internal/store"
	"github.com/styxq/styx/metrics"
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
	// book counts what became of the tasks' items (outcomes.go).
	book *outcomeBook
}

// New loads the persisted tasks and resumes the running ones (on a shared
// store: those it can claim).
func New(ctx context.Context, cfg Config) (*Runner, error) {
	rctx, stop := context.WithCancel(context.Background())
	r := &Runner{cfg: cfg, ctx: rctx, stop: stop, tasks: map[string]*Task{}, running: map[string]context.CancelFunc{},
		pokes: map[string]chan struct{}{}, inflight: map[string]string{}, starting: map[string]*sync.Mutex{},
		ending: map[string]bool{}, persisting: map[string]*sync.Mutex{}, book: newOutcomeBook()}
	r.claimer, _ = cfg.Store.(store.TaskClaimer)
	if r.claimer != nil {
		r.checker, _ = cfg.Store.(store.ClaimChecker)
	}
	if err := r.adopt(ctx); err != nil {
		stop()
		return nil, err
	}
	r.flushOutcomes() // the counting windows of the loaded tasks, before any report
	cfg.Metrics.OnRedriveOutcome(r.observe)
	r.wg.Go(r.flushLoop)
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

// Close stops every task goroutine without changing the tasks' status: a
// running task resumes when the server starts again; and stores the
// outcomes counted since the last store (outcomes.go). Call it before the
// queue manager closes.
func (r *Runner) Close() {
	r.stop()
	r.wg.Wait()
	r.flushOutcomes()
}

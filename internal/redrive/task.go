package redrive

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/styxq/styx/internal/auth"
	"github.com/styxq/styx/internal/queue"
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
	// SkipOtherTask: another redrive task of the dead-letter queue holds
	// the item: it was unfinished (running, pausing or paused) and had
	// not reached the item when this task started, so the item is left to
	// it (Task.LeftTo); or it was moving the item at the same time (a
	// redrive naming items by id takes them even from another task: the
	// item goes to whichever reaches it first).
	SkipOtherTask = "other_task"
)

// skipWords says each skip reason in words, for Task.Warning.
var skipWords = map[string]string{
	SkipSourceGone: "whose destination queue does not exist",
	SkipNotCovered: "bound for a queue the API key may not reach",
	SkipLoopCap:    "already redriven max_redrive_count times",
	SkipLeased:     "leased by a consumer of the dead-letter queue",
	SkipOtherTask:  "held by another redrive task",
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
	// Leaves are the holds of the other unfinished tasks of the queue
	// (running, pausing or paused) when the task started, for a task
	// whose filter names no ids: the items they held then are theirs, and
	// this task passes over them (they are counted in Skipped, reason
	// SkipOtherTask, from the start). Empty for a task naming its items by
	// id: it takes them, even from another task.
	Leaves []Hold `json:"leaves,omitempty"`
	// LeftTo counts, by the id of the task holding them, the matched items
	// left to another task (see Leaves); for a dry run, those a start now
	// would leave.
	LeftTo map[string]int64 `json:"left_to,omitempty"`
	// PausedAt is when the task's current pause began (zero unless it is
	// paused); PausedFor is the time its pauses that ended took (zero
	// without one). A task's running time is its duration less both:
	// what its ETA is measured over.
	PausedAt  time.Time     `json:"paused_at,omitzero"`
	PausedFor time.Duration `json:"paused_for,omitempty"`
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
	// Tracked reports that the task's items carry its id (their source
	// key, queue.RedriveTaskKey), so that what becomes of them is counted
	// (Outcomes): every task started since issue 49's outcomes; false on
	// older tasks, which send the plain queue.RedriveKey (a resumed step
	// must send the keys its first run sent).
	Tracked bool `json:"tracked,omitempty"`
	// Outcomes is what became of the items the task moved (outcomes.go),
	// counted while it runs and for OutcomeWindow after it ends; set on the
	// copies the Runner answers, nil for a dry run and an untracked task.
	// Not stored with the task (its records are its own).
	Outcomes *Outcomes `json:"-"`
	// Canary, when > 0, is how many items the task moves first before it
	// waits for their outcome (canary.go): CanaryTimeout at most (default
	// DefaultCanaryTimeout). All of them completed: the task goes on; one
	// retried or dead again, or the wait ran out: it pauses (resume to go
	// on, cancel to stop). 0: no canary.
	Canary        int32         `json:"canary,omitempty"`
	CanaryTimeout time.Duration `json:"canary_timeout,omitempty"`
	// CanaryStatus is where the canary is: "" (none, or its items are
	// not all moved yet), CanaryWaiting, CanaryPassed, CanaryFailed or
	// CanaryTimedOut. CanaryAt is when the wait began (zero before), and
	// CanaryMoved how many items the task had moved then: the canary's
	// items, whose completes pass it.
	CanaryStatus string    `json:"canary_status,omitempty"`
	CanaryAt     time.Time `json:"canary_at,omitzero"`
	CanaryMoved  int64     `json:"canary_moved,omitempty"`
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
	if t.Leaves != nil {
		c.Leaves = make([]Hold, len(t.Leaves))
		for i, h := range t.Leaves {
			c.Leaves[i] = h
			c.Leaves[i].Filter.IDs = slices.Clone(h.Filter.IDs)
		}
	}
	c.LeftTo = maps.Clone(t.LeftTo)
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

// A Hold is the part of a task's matched set it has not reached yet: the
// dead items matching Filter with ids past After and up to UpTo. A task
// starting beside an unfinished one records the other's Hold (in
// Task.Leaves) and leaves those items to it.
type Hold struct {
	// Task is the id of the task holding the items.
	Task string `json:"task"`
	// Filter is that task's filter.
	Filter queue.DeadFilter `json:"filter"`
	// After is that task's Pivot when the hold was taken (0: it had
	// reached none): the items up to it are no longer held.
	After uint64 `json:"after,omitempty"`
	// UpTo is that task's UpTo: the newest id of its matched set.
	UpTo uint64 `json:"up_to"`
}

// holds reports whether dead item it is in h.
func (h *Hold) holds(it *queue.Item) bool {
	return it.Meta.ID > h.After && it.Meta.ID <= h.UpTo && h.Filter.Match(it)
}

// hold is what unfinished task t holds now: the items of its matched set
// that died before it started (id up to UpTo), that it has not reached
// (id past Pivot) and that match its filter.
func (t *Task) hold() Hold {
	return Hold{Task: t.ID, Filter: t.Filter, After: t.Pivot, UpTo: t.UpTo}
}

// leftAlone reports whether t leaves dead item it to another task (one of
// t.Leaves holds it).
func (t *Task) leftAlone(it *queue.Item) bool {
	for i := range t.Leaves {
		if t.Leaves[i].holds(it) {
			return true
		}
	}
	return false
}

// holder is one of the unfinished tasks a starting task (or a dry run)
// leaves items to: its hold and its status when the start looked.
type holder struct {
	Hold
	status string
}

// leaveTo returns the holder of dead item it among hs (the first that
// holds it), or nil when none does.
func leaveTo(hs []holder, it *queue.Item) *holder {
	for i := range hs {
		if hs[i].holds(it) {
			return &hs[i]
		}
	}
	return nil
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

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// destination is the queue t moves dead item it to: t.Destination, or the
// item's source queue ("" when it names none).
func (t *Task) destination(it *queue.Item) string {
	if t.Destination != "" {
		return t.Destination
	}
	return it.Body.SourceQueue
}

// covers reports whether the key that started t may reach queue dest.
func (t *Task) covers(dest string) bool {
	if len(t.KeyQueues) == 0 {
		return true
	}
	return (&auth.Principal{Queues: t.KeyQueues}).Covers(dest)
}

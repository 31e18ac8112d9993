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

// covers reports whether the key that started t may reach queue dest.
func (t *Task) covers(dest string) bool {
	if len(t.KeyQueues) == 0 {
		return true
	}
	return (&auth.Principal{Queues: t.KeyQueues}).Covers(dest)
}

package redrive

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/styxq/styx/internal/queue"
)

// errClaimLost is step's error when the task's claim was lost before it
// could store the items it is about to delete (Task.Taken).
var errClaimLost = errors.New("redrive: the task's claim was lost")

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
		for _, item := range items {
			if taken[item.Meta.ID] {
				c.settled = append(c.settled, item.Meta.ID)
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
	for _, item := range items {
		dest := t.Destination
		if dest == "" {
			dest = item.Body.SourceQueue
		}
		if _, ok := byDest[dest]; !ok {
			order = append(order, dest)
		}
		byDest[dest] = append(byDest[dest], item)
	}
	for _, dest := range order {
		group := byDest[dest]
		var send []queue.Item
		for _, item := range group {
			if t.MaxRedriveCount >= 0 && item.Body.RedriveCount >= t.MaxRedriveCount {
				skip(dest, []queue.Item{item}, SkipLoopCap)
				continue
			}
			if item.Meta.Leased {
				// A consumer of the dead-letter queue holds it: a redrive
				// never takes an item from under a lease.
				skip(dest, []queue.Item{item}, SkipLeased)
				continue
			}
			send = append(send, item)
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
		for _, item := range send {
			if !taken[item.Meta.ID] { // else the destination has its copy: only the delete is left
				key := queue.RedriveKey(t.Queue, item.Meta.ID)
				if t.Tracked { // the item carries the task's id (outcomes.go)
					key = queue.RedriveTaskKey(t.Queue, item.Meta.ID, t.ID)
				}
				in = append(in, queue.RedriveItem{SourceKey: key, Body: item.Body, Group: item.Meta.Group, DeadKey: item.Meta.SourceKey,
					Errors: queue.RedrivenHistory(&item, t.Queue, t.ID, now)})
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
		for i, item := range send {
			refs[i] = queue.ItemRef{Partition: item.Partition, ID: item.Meta.ID}
			ids[i] = item.Meta.ID
			if !taken[item.Meta.ID] {
				added = append(added, item.Meta.ID)
				taken[item.Meta.ID] = true
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
	for _, item := range still {
		there[item.Meta.ID] = true
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

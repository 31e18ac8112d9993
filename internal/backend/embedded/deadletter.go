package embedded

import (
	"context"
	"time"

	"github.com/styxq/styx/internal/fingerprint"
	"github.com/styxq/styx/internal/queue"
	"github.com/styxq/styx/metrics"
)

// The dead-letter move, between the source queue's loop (S) and the
// dead-letter queue's loop (D); see ADR 0003 and docs/ARCHITECTURE.md.
//
//  1. S decides an item is dead and records it (ItemMeta.DeadReason) in its
//     iteration's batch: from then on the item is never handed out again,
//     and a restart resumes the move.
//  2. After that batch is durable, S reads the item's body and sends a
//     deadLetterOp to D's request channel (non-blocking; a full channel or
//     a missing D means retry later). S goes on serving its other requests.
//  3. D inserts the items under new ids in its own iteration, ignoring any
//     whose source key it already holds, writes, and sends the outcome to
//     S's result channel (buffered for every move in flight, so D never
//     blocks on S).
//  4. S deletes the moved items in its next iteration. A crash between 3 and
//     4 leaves the item in both queues until S restarts, sees the recorded
//     decision and sends it again; D ignores the second copy. After any
//     load (a restart, a failed write, a reopened store), S finishes those
//     moves before it serves (resumeMoves) and its listings wait for that
//     (awaitResume): see ADR 0003's amendment.

// removedKeyTTL is how long a queue remembers the source key of a dead
// copy or a redriven item it removed (removedKeys); maxRemovedKeys bounds
// how many it remembers.
const (
	removedKeyTTL  = 10 * time.Minute
	maxRemovedKeys = 100_000
)

// removedKeys remembers the source keys of the dead copies and redriven
// items a queue removed (completed, deleted, dead again, dropped), with
// when (Unix ns), so that a copy sent again after an ambiguous failure is
// ignored even once the first was consumed: a write that storage kept
// although it was answered as failed (a failed sync) makes the sender (a
// source queue's move, a redrive task's step) send the items again, and a
// queue holds at most one item per source key only while that item is
// there (ADR 0003, ADR 0004; issue 41). Such a key never comes back
// otherwise: ids are never reused, so a dead item and a redriven copy each
// have a key of their own; imported items are not remembered (importing a
// source_id again after its item is gone adds it again). Kept
// removedKeyTTL, at most maxRemovedKeys (oldest out first), in memory: a
// restart forgets them. Owned by the loop.
type removedKeys struct {
	at    map[string]int64
	order []removedKey // oldest first
}

type removedKey struct {
	key string
	at  int64
}

// add remembers key as removed at now.
func (r *removedKeys) add(key string, now int64) {
	if r.at == nil {
		r.at = make(map[string]int64)
	}
	r.at[key] = now
	r.order = append(r.order, removedKey{key: key, at: now})
	for len(r.order) > 0 && (len(r.order) > maxRemovedKeys || now-r.order[0].at > int64(removedKeyTTL)) {
		old := r.order[0]
		r.order = r.order[1:]
		if r.at[old.key] == old.at {
			delete(r.at, old.key)
		}
	}
}

// has reports whether key was removed within removedKeyTTL of now.
func (r *removedKeys) has(key string, now int64) bool {
	at, ok := r.at[key]
	return ok && now-at <= int64(removedKeyTTL)
}

// duplicate reports whether an item of source key key is a copy this
// queue holds, or held and removed (removedKeys), and logs the latter.
func (l *Logical) duplicate(key string, now int64) bool {
	key = queue.OnceKey(key) // one copy per dead item, whichever task sent it
	if _, held := l.sourceKeys[key]; held {
		return true
	}
	if l.removed.has(key, now) {
		l.cfg.Log.Warn("a second copy of an item this queue already removed was ignored (sent again after a failure)",
			"queue", l.name, "source_key", key)
		return true
	}
	return false
}

// isDeadCopy reports whether the item is a dead item resting in a
// dead-letter queue.
func (it *item) isDeadCopy() bool { return it.src != nil && queue.IsDeadCopyKey(it.src.key) }

// dying is an item waiting to be sent to the dead-letter queue.
type dying struct {
	p *partition
	x *item
}

// valid reports whether the entry still names a dying item not in flight.
func (d dying) valid() bool {
	return d.x.state == stateDying && !d.x.moving && d.p.items[d.x.id] == d.x
}

// sendDeadLetters starts moves of the dying items not yet in flight. Runs
// after the iteration's batch is durable.
func (l *Logical) sendDeadLetters(now int64) {
	if l.info.DeadQueue == "" || now < l.moveAfter {
		return
	}
	for l.inflight < maxMovesInFlight && len(l.toSend) > 0 {
		// Take up to maxItemsPerMove valid entries, grouped by partition.
		byPart := make(map[*partition][]*item)
		n, taken := 0, 0
		for _, d := range l.toSend {
			taken++
			if !d.valid() {
				continue
			}
			byPart[d.p] = append(byPart[d.p], d.x)
			if n++; n == maxItemsPerMove {
				break
			}
		}
		if n == 0 {
			l.toSend = l.toSend[:0]
			return
		}
		op := &deadLetterOp{source: l.name, result: l.results, wake: l.Loop.Wake}
		for p, sel := range byPart {
			// Read what the body cache and the error flags cannot supply.
			var ids []uint64
			for _, x := range sel {
				if x.hasErrs || l.bodies.get(x.bodyID) == nil {
					ids = append(ids, x.bodyID)
				}
			}
			stored := make(map[uint64]int, len(ids))
			var bodies []queue.ItemBody
			var errs []queue.ItemErrors
			if len(ids) > 0 {
				var err error
				bodies, errs, err = l.cfg.Store.ReadBodies(context.Background(), l.queueID, p.num, ids)
				if err != nil {
					l.cfg.Log.Error("dead-letter move: read bodies", "queue", l.name, "error", err)
					l.cfg.Metrics.DeadLetterErrors.WithLabelValues(l.name).Inc()
					l.moveAfter = now + int64(moveRetryDelay)
					return
				}
				for i, id := range ids {
					stored[id] = i
				}
			}
			for _, x := range sel {
				var b queue.ItemBody
				var e queue.ItemErrors
				if i, ok := stored[x.bodyID]; ok {
					b, e = bodies[i], errs[i]
				} else {
					b = *l.bodies.get(x.bodyID) // a copy: the cached body stays as stored
				}
				b.SourceQueue = l.name
				b.SourceID = queue.FormatID(x.id)
				reason := reasonName(x.reason)
				b.DeadReason = reason
				b.DeadAt = queue.FromNanos(x.deadline) // a dying item's time of death
				op.items = append(op.items, deadItem{
					sourceKey: queue.SourceKey(reason, l.name, x.id), attempts: x.attempts, created: x.created, firstLeased: x.firstLeased,
					body: b, errors: e, reason: reason, group: p.groupOf(x), partition: p.num, id: x.id, item: x,
				})
			}
		}
		dlq := l.lookup(l.info.DeadQueue)
		if dlq == nil || !dlq.offer(op) {
			// The dead-letter queue is not running or is overloaded.
			l.moveAfter = now + int64(moveRetryDelay)
			return
		}
		for _, d := range op.items {
			d.item.moving = true
		}
		l.toSend = l.toSend[taken:]
		l.inflight++
	}
}

// resumeMoves finishes the moves of the dead decisions the last load found
// before the queue serves anything (ADR 0003: a move interrupted by a
// failed write, a reopened store, a panic or a restart is never left
// visible half-done once the queue serves again): it sends them and waits
// for the dead-letter queue's answers, so that Begin deletes the items it
// took in the same iteration (whose write clears resuming: commit). It
// waits at most resumeTimeout, and not past the loop's Stop; a move the
// dead-letter queue refuses, fails or has not answered by then goes on as
// usual (retried every moveRetryDelay).
// Waiting cannot deadlock: a dead-letter queue has no dead_queue of its
// own, so it never waits on another queue, and it answers on the buffered
// result channel. Runs in the loop, in Begin, when the store takes writes.
func (l *Logical) resumeMoves(now int64) {
	l.moveAfter = 0 // the decisions loaded are durable: send them now
	l.sendDeadLetters(now)
	if l.inflight == 0 {
		return
	}
	timer := time.NewTimer(resumeTimeout)
	defer timer.Stop()
	for l.inflight > 0 {
		select {
		case res := <-l.results:
			l.moved(res)
			l.sendDeadLetters(now)
		case <-timer.C:
			l.cfg.Log.Warn("dead-letter moves resumed after a load are not answered yet; the queue serves meanwhile",
				"queue", l.name, "dead_queue", l.info.DeadQueue, "moves", l.inflight, "waited", resumeTimeout)
			return
		case <-l.Loop.Stopping():
			return
		}
	}
}

// offer hands a move to this (dead-letter) queue's loop without blocking.
func (l *Logical) offer(op *deadLetterOp) bool {
	op.to = l
	return l.Loop.Offer(op)
}

// moved handles the dead-letter queue's answer to a move. Runs in the
// source's loop.
func (l *Logical) moved(res moveResult) {
	l.inflight--
	now := l.cfg.Clock.Now().UnixNano()
	current := 0
	var arrived metrics.Arrivals
	for i := range res.op.items {
		d := &res.op.items[i]
		if int(d.partition) >= len(l.parts) || l.parts[d.partition].items[d.id] != d.item {
			continue // removed meanwhile (queue.clear, items.delete, reload)
		}
		current++
		d.item.moving = false
		if res.err != nil {
			l.toSend = append(l.toSend, dying{p: l.parts[d.partition], x: d.item})
			continue
		}
		l.cfg.Metrics.DeadLettered.WithLabelValues(l.name, l.info.DeadQueue, d.reason).Inc()
		l.cfg.Metrics.ItemAttempts.WithLabelValues("dead_lettered").Observe(float64(d.attempts))
		arrived.Add(d.reason, d.errors.LastError)
		l.confirmed = append(l.confirmed, d)
	}
	arrived.Report(l.cfg.Metrics, l.name, l.info.DeadQueue)
	if res.err != nil {
		l.cfg.Log.Error("dead-letter move failed; will retry", "queue", l.name,
			"dead_queue", l.info.DeadQueue, "items", len(res.op.items), "error", res.err)
		l.cfg.Metrics.DeadLetterErrors.WithLabelValues(l.name).Inc()
		if current > 0 {
			// (A move from before a reload delays none of the new ones.)
			l.moveAfter = now + int64(moveRetryDelay)
		}
		// The decision is durable and the move will be retried: a retry
		// request waiting on these items is answered now.
		for i := range res.op.items {
			if dr, ok := l.deferred[res.op.items[i].item]; ok {
				delete(l.deferred, res.op.items[i].item)
				l.settle(dr)
			}
		}
	}
}

// takeDead inserts the items of a move into this (dead-letter) queue, each
// into the partition with the fewest ready items counting those placed
// before it (deadTo, item by item: the rule of every backend; see
// engine/distribution.go), or, with a group, its group's partition
// (queue.GroupPartition, as a produce), where its GroupSeq is its new id.
// Runs in the dead-letter queue's loop.
func (l *Logical) takeDead(it *iteration, op *deadLetterOp) {
	for _, d := range op.items {
		if l.duplicate(d.sourceKey, it.now) {
			continue // a copy from an interrupted earlier move
		}
		var p *partition
		if d.group != "" {
			p = l.parts[queue.GroupPartition(d.group, l.info.Partitions)]
		} else {
			p = l.deadTo()
		}
		id := l.allocID(it)
		deadAt := queue.Nanos(d.body.DeadAt)
		x := &item{id: id, bodyID: id, created: d.created, attempts: d.attempts, firstLeased: d.firstLeased, state: stateReady,
			src: newSource(d.sourceKey), hasErrs: !d.errors.IsZero()}
		if l.info.ExpireTimeout > 0 {
			// A dead item's retention counts from its death.
			x.expire = deadAt + int64(l.info.ExpireTimeout)
		}
		p.addGrouped(x, d.group, id)
		l.setSourceKey(d.sourceKey, x)
		l.addToGroup(x, p.num, fingerprint.Of(d.errors.LastError), deadAt, d.errors.LastError)
		body := d.body
		it.batch.Insert(p.num, p.meta(x), body, d.errors)
		l.addBody(it, x.bodyID, &body)
	}
	// Answered on op.result (pendingReply.send) once durable.
}

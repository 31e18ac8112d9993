package postgres

import (
	"slices"
	"time"

	"github.com/styxq/styx/internal/engine"
	"github.com/styxq/styx/internal/queue"
)

// Deduplication ids (queue.Deduplicate) on PostgreSQL: the styx_dedup
// table holds each id a queue accepted with the deadline of its window. An
// iteration claims the ids of its produces at its start (Claim, the
// engine's Deduplicator), in sorted order: a claim inserts the id, or takes
// over a record whose window ended, and a node claiming an id another
// node's open transaction claimed waits for that transaction (the primary
// key), so an id admits one item per window across every node. A claim
// commits or rolls back with the items it admits; a claim no item used is
// released at commit (releaseClaims). Ended windows are deleted at most
// once a minute per queue and node (sweepDedup).

var _ engine.Deduplicator = (*iteration)(nil)

// dedupSweepEvery is how often a node deletes a queue's ended windows.
const dedupSweepEvery = time.Minute

// Claim implements engine.Deduplicator.
func (it *iteration) Claim(ids []string) error {
	it.sweepDedup()
	return it.claim(ids)
}

// claim claims ids (sorted, distinct) and records which it got.
func (it *iteration) claim(ids []string) error {
	if it.dedupAsked == nil {
		it.dedupAsked, it.dedupClaimed = map[string]bool{}, map[string]bool{}
	}
	for _, id := range ids {
		it.dedupAsked[id] = true
	}
	return wrap("deduplicate", it.claimKeys(ids, it.now+int64(it.info.Window()), it.dedupClaimed))
}

// claimKeys inserts keys (sorted, distinct) into styx_dedup until deadline
// (Unix ns), taking over a record whose window ended, and sets got[k] for
// each key it claimed; a key recorded within its window is not claimed.
// The keys are inserted in their order (the lock order of their rows).
func (it *iteration) claimKeys(keys []string, deadline int64, got map[string]bool) error {
	rows, err := it.tx.Query(it.ctx, `INSERT INTO styx_dedup AS d (queue_id, dedup_id, deadline)
		SELECT $1, id, $3 FROM unnest($2::text[]) WITH ORDINALITY AS u(id, n) ORDER BY n
		ON CONFLICT (queue_id, dedup_id) DO UPDATE SET deadline = EXCLUDED.deadline WHERE d.deadline <= $4
		RETURNING dedup_id`, int64(it.q.id), keys, deadline, it.now)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			return err
		}
		got[k] = true
	}
	return rows.Err()
}

// deduplicate returns the items of a produce to store: those without an
// id, and the first item of each id this iteration claimed (the claim is
// then used). Ids the engine did not claim at the start are claimed here.
func (it *iteration) deduplicate(items []queue.ProduceItem) ([]queue.ProduceItem, error) {
	var late []string
	for _, pi := range items {
		if pi.DeduplicationID != "" && !it.dedupAsked[pi.DeduplicationID] {
			late = append(late, pi.DeduplicationID)
		}
	}
	if len(late) > 0 {
		slices.Sort(late)
		if err := it.claim(slices.Compact(late)); err != nil {
			return nil, err
		}
	}
	return queue.Deduplicate(items, func(id string) bool {
		if it.dedupClaimed[id] {
			delete(it.dedupClaimed, id) // used
			return false
		}
		return true
	}), nil
}

// releaseClaims deletes the records of the ids this iteration claimed and
// no item used, so that a refused produce leaves no window behind.
func (it *iteration) releaseClaims() error {
	if len(it.dedupClaimed) == 0 {
		return nil
	}
	ids := make([]string, 0, len(it.dedupClaimed))
	for id := range it.dedupClaimed {
		ids = append(ids, id)
	}
	_, err := it.tx.Exec(it.ctx, `DELETE FROM styx_dedup WHERE queue_id=$1 AND dedup_id = ANY($2)`, int64(it.q.id), ids)
	clear(it.dedupClaimed)
	return wrap("deduplicate", err)
}

// sweepDedup deletes the queue's ended windows, at most once every
// dedupSweepEvery and 10,000 at a time, in a statement of its own that
// skips the records a transaction holds: it never waits, and never makes
// an iteration wait for it. A failure is logged and left for the next
// sweep.
func (it *iteration) sweepDedup() {
	q := it.q
	if it.now-q.dedupSwept < int64(dedupSweepEvery) {
		return
	}
	q.dedupSwept = it.now
	_, err := q.m.st.pool.Exec(it.ctx, `DELETE FROM styx_dedup WHERE (queue_id, dedup_id) IN (
		SELECT queue_id, dedup_id FROM styx_dedup WHERE queue_id=$1 AND deadline <= $2 LIMIT 10000 FOR UPDATE SKIP LOCKED)`,
		int64(q.id), it.now)
	if err != nil {
		q.m.cfg.Log.Warn("deleting ended deduplication windows failed", "queue", q.name, "error", err)
	}
}

// Redriven items: a redrive step stores its items in the destination
// (Redrive) and then deletes them from the dead-letter queue, two
// transactions (ADR 0004). When the first's COMMIT gets no answer the task
// retries it, and the destination's unique source key keeps one copy only
// while the copy is there: a copy a consumer completed in between would
// be stored again. So Redrive also records each item's source key in
// styx_dedup, for sourceKeyWindow, and stores none whose key it finds
// there: the durable counterpart of the embedded backends' removedKeys.

// sourceKeyWindow is how long a redriven item's source key is remembered
// (the embedded backends' removedKeyTTL).
const sourceKeyWindow = 10 * time.Minute

// sourceKeyPrefix marks a source key in styx_dedup; deduplication ids have
// no spaces (queue.CheckDeduplicationID), so the two never meet.
const sourceKeyPrefix = "source "

// redriveOnce returns the items of a redrive whose source key was not
// recorded within sourceKeyWindow, and records theirs. Only the task's own
// retry meets the same keys, so the late claim waits on no one else.
func (it *iteration) redriveOnce(items []queue.RedriveItem) ([]queue.RedriveItem, error) {
	keys := make([]string, 0, len(items))
	for _, ri := range items {
		keys = append(keys, sourceKeyPrefix+queue.OnceKey(ri.SourceKey)) // one copy per dead item, whichever task sent it
	}
	slices.Sort(keys)
	keys = slices.Compact(keys)
	claimed := make(map[string]bool, len(keys))
	if err := it.claimKeys(keys, it.now+int64(sourceKeyWindow), claimed); err != nil {
		return nil, wrap("redrive", err)
	}
	kept := items[:0:0]
	for _, ri := range items {
		if k := sourceKeyPrefix + queue.OnceKey(ri.SourceKey); claimed[k] {
			delete(claimed, k)
			kept = append(kept, ri)
		}
	}
	return kept, nil
}

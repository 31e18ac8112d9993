package postgres

import (
	"context"
	"errors"
	"slices"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/styxq/styx/internal/fingerprint"
	"github.com/styxq/styx/internal/queue"
	"github.com/styxq/styx/metrics"
)

// The dead-letter queue's side of the two-phase move (deadletters.go):
// Manager.TakeDead.

var _ DeadLetters = (*Manager)(nil)

// takenDead is what TakeDead keeps between calls, per dead-letter queue
// id: the partitions' tie-break cursor (as Queue.deadNext is a source
// queue's in the one-statement move) and when this node last deleted the
// queue's ended styx_dedup windows. Guarded by mu; any goroutine.
type takenDead struct {
	mu    sync.Mutex
	next  map[uint64]int
	swept map[uint64]int64
}

// TakeDead implements DeadLetters for the dead-letter queues of this
// Manager's database: the call the router makes on the dead-letter queue's
// home Manager (ADR 0023). In one transaction it records each item's
// source key in styx_dedup for sourceKeyWindow (a key recorded within it
// is a copy sent again: skipped, like a key the queue holds), places the
// items by the produce rule item by item (deadPartitions, placeDead) and
// inserts them under new ids in the order given, ready, retained from
// their DeadAt by the queue's expire_timeout, with their fingerprints
// (ADR 0011), after checking the queue's fence (fence.go: a queue moving
// to another cluster takes nothing, 453 queue_moving). Then it wakes the
// queue's waiting leases on every node.
// Bounded by Config.StatementTimeout. Returns queue.NotFound when dlq does
// not exist here, and the database's errors (wrapped as every statement's:
// store.ErrUnavailable when it is unreachable).
func (m *Manager) TakeDead(ctx context.Context, dlq string, items []DeadItem) error {
	if len(items) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, m.cfg.StatementTimeout)
	defer cancel()
	info, ok := m.cachedInfoByName(dlq)
	if !ok {
		var err error
		info, err = scanQueue(m.st.pool.QueryRow(ctx, `SELECT `+queueColumns+` FROM styx_queues WHERE name=$1`, dlq))
		if errors.Is(err, pgx.ErrNoRows) {
			return queue.NotFound(dlq)
		}
		if err != nil {
			return wrap("take dead items", err)
		}
		if _, err := m.adopt(info); err != nil {
			return err
		}
	}
	now := m.cfg.Clock.Now().UnixNano()
	var arrived metrics.Arrivals
	firstDead := int64(0)
	err := pgx.BeginFunc(ctx, m.st.pool, func(tx pgx.Tx) error {
		arrived = metrics.Arrivals{}
		// A dead-letter queue moving to another cluster takes nothing
		// (fence.go): the items stay dying and are sent again.
		if _, err := tx.Exec(ctx, checkFenceSQL, int64(info.ID)); err != nil {
			return err
		}
		kept, err := m.firstCopies(ctx, tx, info.ID, items, now)
		if err != nil || len(kept) == 0 {
			return err
		}
		for _, d := range kept {
			if at := queue.Nanos(d.Body.DeadAt); firstDead == 0 || at < firstDead {
				firstDead = at
			}
		}
		return m.insertDead(ctx, tx, info, kept, &arrived)
	})
	if err != nil {
		return wrap("dead-letter queue '"+dlq+"': take dead items", err)
	}
	m.wake([]uint64{info.ID})
	arrived.Report(m.cfg.Metrics, items[0].Body.SourceQueue, dlq)
	if info.ExpireTimeout > 0 && firstDead != 0 {
		m.signalQueue(info.ID, false, firstDead+int64(info.ExpireTimeout))
	}
	m.sweepTaken(info.ID, now)
	return nil
}

// firstCopies records the source keys of items in styx_dedup for
// sourceKeyWindow, in key order (their rows' lock order), and returns the
// items whose key was not recorded within it: the first copy of each.
func (m *Manager) firstCopies(ctx context.Context, tx pgx.Tx, dlqID uint64, items []DeadItem, now int64) ([]DeadItem, error) {
	keys := make([]string, len(items))
	for i, d := range items {
		keys[i] = sourceKeyPrefix + queue.OnceKey(d.SourceKey)
	}
	slices.Sort(keys)
	keys = slices.Compact(keys)
	rows, err := tx.Query(ctx, `INSERT INTO styx_dedup AS d (queue_id, dedup_id, deadline)
		SELECT $1, id, $3 FROM unnest($2::text[]) WITH ORDINALITY AS u(id, n) ORDER BY n
		ON CONFLICT (queue_id, dedup_id) DO UPDATE SET deadline = EXCLUDED.deadline WHERE d.deadline <= $4
		RETURNING dedup_id`, int64(dlqID), keys, now+int64(sourceKeyWindow), now)
	if err != nil {
		return nil, err
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	claimed := make(map[string]bool, len(got))
	for _, k := range got {
		claimed[k] = true
	}
	kept := items[:0:0]
	for _, d := range items {
		if k := sourceKeyPrefix + queue.OnceKey(d.SourceKey); claimed[k] {
			delete(claimed, k) // one copy per key, even within one call
			kept = append(kept, d)
			continue
		}
		m.cfg.Log.Info("a dead item sent again was ignored: the dead-letter queue took it already", "source_key", d.SourceKey)
	}
	return kept, nil
}

// insertDead inserts the dead copies ds into dead-letter queue info, each
// into its partition (placeDead), skipping a source key the queue holds
// (the unique index), and sets the fingerprints of those it took;
// arrived counts them.
func (m *Manager) insertDead(ctx context.Context, tx pgx.Tx, info queue.QueueInfo, ds []DeadItem, arrived *metrics.Arrivals) error {
	partitions := max(info.Partitions, 1)
	ready, _, err := readyCounts(ctx, tx, info.ID, partitions, countAll, 0)
	if err != nil {
		return err
	}
	n := len(ds)
	groups := make([]string, n)
	for i, d := range ds {
		groups[i] = d.Group
	}
	m.taken.mu.Lock()
	if m.taken.next == nil {
		m.taken.next = map[uint64]int{}
	}
	next := m.taken.next[info.ID]
	parts := placeDead(ready, partitions, groups, &next)
	m.taken.next[info.ID] = next
	m.taken.mu.Unlock()
	keys, attempts, firstLeased, created, deadAt := make([]string, n), make([]int32, n), make([]int64, n), make([]int64, n), make([]int64, n)
	refs, kinds, encs, srcs, srcIDs, reasons, lastErr := make([]string, n), make([]string, n), make([]string, n), make([]string, n),
		make([]string, n), make([]string, n), make([]string, n)
	payloads, attrs, errs, redrives := make([][]byte, n), make([][]byte, n), make([]*string, n), make([]int32, n)
	for i, d := range ds {
		b := d.Body
		keys[i], attempts[i], firstLeased[i], created[i], deadAt[i] = d.SourceKey, d.Attempts, d.FirstLeasedAt, d.CreatedAt, queue.Nanos(b.DeadAt)
		refs[i], kinds[i], encs[i], srcs[i], srcIDs[i], reasons[i], lastErr[i] = b.Reference, b.Kind, b.Encoding, b.SourceQueue,
			b.SourceID, b.DeadReason, d.Errors.LastError
		payloads[i], attrs[i], redrives[i] = nonNil(b.Payload), b.Attributes, b.RedriveCount
		if e := encodeErrors(d.Errors); e != nil {
			s := string(e)
			errs[i] = &s
		}
	}
	rows, err := tx.Query(ctx, `INSERT INTO styx_items (queue_id, id, partition, state, expire_deadline, attempts, first_leased_at,
			created_at, source_key, reference, kind, encoding, payload, attributes, source_queue, source_id, dead_reason, dead_at,
			redrive_count, last_error, errors, grp)
		SELECT $1, nextval('styx_item_ids'), u.part, 0, CASE WHEN $2::bigint > 0 THEN u.dead_at + $2::bigint ELSE 0 END, u.attempts,
			nullif(u.first_leased, 0), u.created, u.key, u.reference, u.kind, u.encoding, u.payload, u.attributes, u.src, u.src_id,
			u.reason, u.dead_at, u.redrive_count, u.last_error, u.errs::jsonb, nullif(u.grp, '')
		FROM unnest($3::integer[], $4::text[], $5::integer[], $6::bigint[], $7::bigint[], $8::bigint[], $9::text[], $10::text[],
			$11::text[], $12::bytea[], $13::bytea[], $14::text[], $15::text[], $16::text[], $17::integer[], $18::text[], $19::text[],
			$20::text[]) WITH ORDINALITY
			AS u(part, key, attempts, first_leased, created, dead_at, reference, kind, encoding, payload, attributes, src, src_id, reason,
				redrive_count, last_error, errs, grp, n)
		ORDER BY u.n
		ON CONFLICT (queue_id, source_key) DO NOTHING
		RETURNING id, last_error, dead_reason`,
		int64(info.ID), int64(info.ExpireTimeout), parts, keys, attempts, firstLeased, created, deadAt, refs, kinds, encs, payloads, attrs,
		srcs, srcIDs, reasons, redrives, lastErr, errs, groups)
	if err != nil {
		return err
	}
	var taken []int64
	var fps []string
	var id int64
	var last, reason string
	if _, err := pgx.ForEachRow(rows, []any{&id, &last, &reason}, func() error {
		taken, fps = append(taken, id), append(fps, fingerprint.Of(last))
		arrived.Add(reason, last)
		return nil
	}); err != nil {
		return err
	}
	if len(taken) == 0 {
		return nil
	}
	return setFingerprints(ctx, tx, info.ID, taken, fps)
}

// sweepTaken deletes dead-letter queue dlqID's ended styx_dedup windows
// (the keys firstCopies records), at most once every dedupSweepEvery per
// queue on this node, 10,000 at a time, passing over records a
// transaction holds. A failure is logged and left for the next sweep.
func (m *Manager) sweepTaken(dlqID uint64, now int64) {
	m.taken.mu.Lock()
	if m.taken.swept == nil {
		m.taken.swept = map[uint64]int64{}
	}
	due := now-m.taken.swept[dlqID] >= int64(dedupSweepEvery)
	if due {
		m.taken.swept[dlqID] = now
	}
	m.taken.mu.Unlock()
	if !due {
		return
	}
	ctx, cancel := context.WithTimeout(m.ctx, m.cfg.StatementTimeout)
	defer cancel()
	_, err := m.st.pool.Exec(ctx, `DELETE FROM styx_dedup WHERE (queue_id, dedup_id) IN (
		SELECT queue_id, dedup_id FROM styx_dedup WHERE queue_id=$1 AND deadline <= $2 LIMIT 10000 FOR UPDATE SKIP LOCKED)`,
		int64(dlqID), now)
	if err != nil {
		m.cfg.Log.Warn("deleting ended deduplication windows failed", "queue_id", dlqID, "error", err)
	}
}

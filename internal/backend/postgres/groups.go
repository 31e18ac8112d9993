package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/styxq/styx/internal/fingerprint"
	"github.com/styxq/styx/internal/queue"
)

// Error groups (migration 5): styx_dead_groups holds, per dead-letter
// queue, the number of dead items by source queue, dead reason and
// fingerprint, as sums over shards kept by triggers exactly like
// styx_item_counts (counts.go): a counts write never waits. dead.groups
// reads the sums and, per group returned, its first and last item through
// styx_items_dead_groups (two index probes), whatever the number of items.

// ErrorGroups implements engine.Tx: one statement in the iteration's
// transaction, after its writes so far.
func (it *iteration) ErrorGroups(f queue.ErrorGroupFilter, limit int) (queue.ErrorGroups, error) {
	if err := it.flush(); err != nil {
		return queue.ErrorGroups{}, err
	}
	q, ctx := it.q, it.ctx
	rows, err := it.tx.Query(ctx, `WITH g AS (
			SELECT source_queue, reason, fingerprint, sum(count) AS n FROM styx_dead_groups
			WHERE queue_id=$1 AND ($2 = '' OR source_queue=$2) AND ($3 = '' OR reason=$3) AND ($4 = '' OR fingerprint=$4)
			GROUP BY 1, 2, 3 HAVING sum(count) > 0),
		top AS (
			SELECT g.*, count(*) OVER () AS groups, sum(n) OVER () AS items FROM g
			ORDER BY n DESC, source_queue, reason, fingerprint LIMIT $5)
		SELECT top.source_queue, top.reason, top.fingerprint, top.n, top.groups, top.items,
			coalesce(a.id, 0), coalesce(a.dead_at, 0), coalesce(a.last_error, ''), coalesce(z.dead_at, 0)
		FROM top
		LEFT JOIN LATERAL (SELECT id, dead_at, last_error FROM styx_items i WHERE i.queue_id=$1 AND i.fingerprint=top.fingerprint
			AND i.source_queue=top.source_queue AND i.dead_reason=top.reason AND i.fingerprint <> '' ORDER BY i.id LIMIT 1) a ON true
		LEFT JOIN LATERAL (SELECT dead_at FROM styx_items i WHERE i.queue_id=$1 AND i.fingerprint=top.fingerprint
			AND i.source_queue=top.source_queue AND i.dead_reason=top.reason AND i.fingerprint <> '' ORDER BY i.id DESC LIMIT 1) z ON true
		ORDER BY top.n DESC, top.source_queue, top.reason, top.fingerprint`,
		int64(q.id), f.SourceQueue, f.Reason, f.Fingerprint, max(limit, 1))
	if err != nil {
		return queue.ErrorGroups{}, q.readErr(err)
	}
	var out queue.ErrorGroups
	var g queue.ErrorGroup
	var sample, first, last, groups, items int64
	_, err = pgx.ForEachRow(rows, []any{&g.SourceQueue, &g.Reason, &g.Fingerprint, &g.Count, &groups, &items, &sample, &first, &g.SampleError, &last},
		func() error {
			g.SampleID, g.FirstDeadAt, g.LastDeadAt = uint64(sample), queue.FromNanos(first), queue.FromNanos(last)
			out.Groups = append(out.Groups, g)
			out.TotalGroups, out.TotalItems = int(groups), items
			return nil
		})
	if err != nil {
		return queue.ErrorGroups{}, q.readErr(err)
	}
	return out, nil
}

// backfillBatch is how many dead items backfillFingerprints fingerprints
// per transaction.
const backfillBatch = 1000

// backfillFingerprints gives the dead items (dead copies: items that came
// by a dead-letter move, as on the embedded backends) stored before
// migration 5 the
// fingerprint of their last error, so they join their error groups. It runs
// at start-up after the migrations, in transactions of backfillBatch items
// that never wait for a row lock: rows another transaction holds are
// skipped (they are being changed; a later start fingerprints them if they
// stay dead items without one). Returns how many items it fingerprinted.
func backfillFingerprints(ctx context.Context, pool interface {
	Begin(context.Context) (pgx.Tx, error)
}) (int64, error) {
	var total int64
	for {
		var n int
		err := func() error {
			tx, err := pool.Begin(ctx)
			if err != nil {
				return err
			}
			defer tx.Rollback(ctx) //nolint:errcheck // after Commit, a no-op
			rows, err := tx.Query(ctx, `SELECT queue_id, id, last_error FROM styx_items
				WHERE dead_reason <> '' AND fingerprint = '' AND split_part(source_key, ':', 1) NOT IN ('redrive', 'import')
				ORDER BY queue_id, id LIMIT $1 FOR UPDATE SKIP LOCKED`, backfillBatch)
			if err != nil {
				return err
			}
			byQueue := map[int64]struct {
				ids []int64
				fps []string
			}{}
			var qid, id int64
			var last string
			if _, err := pgx.ForEachRow(rows, []any{&qid, &id, &last}, func() error {
				x := byQueue[qid]
				x.ids, x.fps = append(x.ids, id), append(x.fps, fingerprint.Of(last))
				byQueue[qid] = x
				n++
				return nil
			}); err != nil {
				return err
			}
			for qid, x := range byQueue {
				if err := setFingerprints(ctx, tx, uint64(qid), x.ids, x.fps); err != nil {
					return err
				}
			}
			return tx.Commit(ctx)
		}()
		if err != nil {
			return total, fmt.Errorf("fingerprint dead items: %w", err)
		}
		total += int64(n)
		if n < backfillBatch {
			return total, nil
		}
	}
}

// foldGroups is foldCounts for styx_dead_groups, in its transaction.
func foldGroups(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, `WITH gone AS MATERIALIZED (
			SELECT queue_id, source_queue, reason, fingerprint, shard FROM styx_dead_groups c
			WHERE (c.shard <> 0 AND NOT EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.pid = c.shard))
				OR NOT EXISTS (SELECT 1 FROM styx_queues q WHERE q.id = c.queue_id)
			FOR UPDATE SKIP LOCKED),
		folded AS (
			DELETE FROM styx_dead_groups c USING gone g WHERE c.queue_id = g.queue_id AND c.source_queue = g.source_queue
				AND c.reason = g.reason AND c.fingerprint = g.fingerprint AND c.shard = g.shard
			RETURNING c.queue_id, c.source_queue, c.reason, c.fingerprint, c.count)
		INSERT INTO styx_dead_groups AS c (queue_id, source_queue, reason, fingerprint, shard, count)
		SELECT f.queue_id, f.source_queue, f.reason, f.fingerprint, 0, sum(f.count) FROM folded f
		WHERE EXISTS (SELECT 1 FROM styx_queues q WHERE q.id = f.queue_id)
		GROUP BY 1, 2, 3, 4
		ON CONFLICT (queue_id, source_queue, reason, fingerprint, shard) DO UPDATE SET count = c.count + excluded.count`)
	return err
}

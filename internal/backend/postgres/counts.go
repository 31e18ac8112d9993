package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/styxq/styx/internal/queue"
	"github.com/styxq/styx/metrics"
)

// Item counts (migration 3): styx_item_counts holds, per queue, the items
// by state as sums over shards. The triggers on styx_items add each
// statement's changes to the row of the queue and the backend that runs it
// (shard = pg_backend_pid()), in the statement's transaction, so the
// counts are exactly the committed items on every node, and a counts write
// never waits for another transaction: no other live backend writes that
// row (see "Lock order" in queue.go). Shard 0 is the base: the counts the
// migration found, plus the rows of backends that ended, folded into it.
// Migration 12 adds, kept by the same trigger in the same statement
// (countItemsSQL) and sharded, folded and deleted the same way, the counts
// queue.stats reads (Queue.Stats): styx_partition_counts (per queue and
// partition: items, leased, scheduled, failures, the sums of created_at
// and of the leased items' deadlines) and styx_dead_counts (dead items per
// queue, reason and source queue). Migration 25 adds the dying items
// (state 3, deadletters.go) to styx_partition_counts and styx_item_counts,
// whose ready leaves them out.

// countsFoldInterval is how often a node folds the counts rows of ended
// backends into shard 0 (foldCounts), so that a queue has about one row
// per live backend that wrote to it, not one per backend ever.
const countsFoldInterval = time.Minute

// Sample returns every queue's state for the queue gauges (the daemon
// registers it with metrics.RegisterQueueSampler), in one statement,
// whatever the number of items: per queue, the sums of its counts rows and
// the created_at of its oldest item (one probe of styx_items_created). It
// reports the queues this node knows, as the counters do. On error, or
// when the statement takes over a second (as the embedded backends bound
// each queue), it logs and returns no sample.
func (m *Manager) Sample() []metrics.QueueSample {
	ctx, cancel := context.WithTimeout(m.ctx, time.Second)
	defer cancel()
	rows, err := m.st.pool.Query(ctx, `SELECT q.id, q.name, coalesce(c.ready, 0), coalesce(c.leased, 0), coalesce(c.scheduled, 0),
		coalesce((SELECT i.created_at FROM styx_items i WHERE i.queue_id = q.id ORDER BY i.created_at LIMIT 1), 0),
		`+expiringCountSQL("q.id", "$1")+`
		FROM styx_queues q LEFT JOIN (
			SELECT queue_id, sum(ready) AS ready, sum(leased) AS leased, sum(scheduled) AS scheduled
			FROM styx_item_counts GROUP BY queue_id) c ON c.queue_id = q.id`, m.cfg.Clock.Now().Add(queue.ExpiringWindow).UnixNano())
	if err != nil {
		m.cfg.Log.Warn("postgres: sampling the queue gauges failed", "error", wrap("sample", err))
		return nil
	}
	type sampled struct {
		id      int64
		s       metrics.QueueSample
		created int64
	}
	all, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (sampled, error) {
		var x sampled
		var ready, leased, scheduled, expiring int64
		err := r.Scan(&x.id, &x.s.Queue, &ready, &leased, &scheduled, &x.created, &expiring)
		x.s.Ready, x.s.Leased, x.s.Scheduled, x.s.ExpiringDeadItems = int(ready), int(leased), int(scheduled), int(expiring)
		return x, err
	})
	if err != nil {
		m.cfg.Log.Warn("postgres: sampling the queue gauges failed", "error", wrap("sample", err))
		return nil
	}
	now := m.cfg.Clock.Now()
	out := make([]metrics.QueueSample, 0, len(all))
	m.mu.RLock()
	defer m.mu.RUnlock()
	for _, x := range all {
		info, ok := m.infos[uint64(x.id)]
		if !ok || info.Name != x.s.Queue {
			continue
		}
		x.s.Paused = info.Paused()
		if x.created != 0 {
			x.s.OldestAge = now.Sub(time.Unix(0, x.created))
		}
		out = append(out, x.s)
	}
	return out
}

// foldCounts moves the counts rows of backends that ended into shard 0 of
// their queue and deletes the rows of queues that are gone; it returns how
// many rows it folded or deleted. Nodes fold one at a time (a
// transaction-scoped advisory lock; a node that finds it taken does
// nothing). It never waits for an item transaction: it skips the rows of
// live backends and any row another transaction holds (a pid reused since
// pg_stat_activity was read), and item transactions never write shard 0.
// Its one wait, the upsert of shard 0, can only be for deleteQueue, which
// waits for nothing after. It folds the error-group counts
// (styx_dead_groups) and the stats counts (styx_partition_counts,
// styx_dead_counts) the same way, first.
func (m *Manager) foldCounts(ctx context.Context) (int64, error) {
	var n int64
	err := pgx.BeginFunc(ctx, m.st.pool, func(tx pgx.Tx) error {
		var ok bool
		if err := tx.QueryRow(ctx, `SELECT pg_try_advisory_xact_lock(hashtext('styx-counts:' || current_schema()))`).Scan(&ok); err != nil || !ok {
			return err
		}
		if err := foldGroups(ctx, tx); err != nil {
			return err
		}
		if err := foldStatsCounts(ctx, tx); err != nil {
			return err
		}
		return tx.QueryRow(ctx, `WITH gone AS MATERIALIZED (
				SELECT queue_id, shard FROM styx_item_counts c
				WHERE (c.shard <> 0 AND NOT EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.pid = c.shard))
					OR NOT EXISTS (SELECT 1 FROM styx_queues q WHERE q.id = c.queue_id)
				FOR UPDATE SKIP LOCKED),
			folded AS (
				DELETE FROM styx_item_counts c USING gone g WHERE c.queue_id = g.queue_id AND c.shard = g.shard
				RETURNING c.queue_id, c.ready, c.leased, c.scheduled, c.dying),
			base AS (
				INSERT INTO styx_item_counts AS c (queue_id, shard, ready, leased, scheduled, dying)
				SELECT f.queue_id, 0, sum(f.ready), sum(f.leased), sum(f.scheduled), sum(f.dying) FROM folded f
				WHERE EXISTS (SELECT 1 FROM styx_queues q WHERE q.id = f.queue_id)
				GROUP BY f.queue_id
				ON CONFLICT (queue_id, shard) DO UPDATE
					SET ready = c.ready + excluded.ready, leased = c.leased + excluded.leased, scheduled = c.scheduled + excluded.scheduled,
						dying = c.dying + excluded.dying)
			SELECT count(*) FROM folded`).Scan(&n)
	})
	return n, wrap("fold item counts", err)
}

// foldStatsCounts is foldCounts for styx_partition_counts and
// styx_dead_counts (migration 12), in its transaction.
func foldStatsCounts(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, `WITH gone AS MATERIALIZED (
			SELECT queue_id, partition, shard FROM styx_partition_counts c
			WHERE (c.shard <> 0 AND NOT EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.pid = c.shard))
				OR NOT EXISTS (SELECT 1 FROM styx_queues q WHERE q.id = c.queue_id)
			FOR UPDATE SKIP LOCKED),
		folded AS (
			DELETE FROM styx_partition_counts c USING gone g
			WHERE c.queue_id = g.queue_id AND c.partition = g.partition AND c.shard = g.shard
			RETURNING c.*)
		INSERT INTO styx_partition_counts AS c (queue_id, partition, shard, total, leased, scheduled, dying, failures, created_sum,
			deadline_sum)
		SELECT f.queue_id, f.partition, 0, sum(f.total), sum(f.leased), sum(f.scheduled), sum(f.dying), sum(f.failures), sum(f.created_sum),
			sum(f.deadline_sum)
		FROM folded f
		WHERE EXISTS (SELECT 1 FROM styx_queues q WHERE q.id = f.queue_id)
		GROUP BY 1, 2
		ON CONFLICT (queue_id, partition, shard) DO UPDATE
			SET total = c.total + excluded.total, leased = c.leased + excluded.leased, scheduled = c.scheduled + excluded.scheduled,
				dying = c.dying + excluded.dying, failures = c.failures + excluded.failures, created_sum = c.created_sum + excluded.created_sum,
				deadline_sum = c.deadline_sum + excluded.deadline_sum`)
	if err != nil {
		return err
	}
	_, err = tx.Exec(ctx, `WITH gone AS MATERIALIZED (
			SELECT queue_id, reason, source_queue, shard FROM styx_dead_counts c
			WHERE (c.shard <> 0 AND NOT EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.pid = c.shard))
				OR NOT EXISTS (SELECT 1 FROM styx_queues q WHERE q.id = c.queue_id)
			FOR UPDATE SKIP LOCKED),
		folded AS (
			DELETE FROM styx_dead_counts c USING gone g
			WHERE c.queue_id = g.queue_id AND c.reason = g.reason AND c.source_queue = g.source_queue AND c.shard = g.shard
			RETURNING c.queue_id, c.reason, c.source_queue, c.count)
		INSERT INTO styx_dead_counts AS c (queue_id, reason, source_queue, shard, count)
		SELECT f.queue_id, f.reason, f.source_queue, 0, sum(f.count) FROM folded f
		WHERE EXISTS (SELECT 1 FROM styx_queues q WHERE q.id = f.queue_id)
		GROUP BY 1, 2, 3
		ON CONFLICT (queue_id, reason, source_queue, shard) DO UPDATE SET count = c.count + excluded.count`)
	return err
}

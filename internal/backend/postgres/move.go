package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/styxq/styx/internal/queue"
	"github.com/styxq/styx/internal/store"
)

// Moving a queue from one cluster's Store to another's (queues.move; ADR
// 0023, "Rebalancing"; docs/storage/postgres.md, "Moving a queue"). The
// steps, each idempotent and keyed by the move's epoch, so that a node
// that finds a move half done runs them again from the first:
//
//  1. Fence (fence.go) on the source.
//  2. PrepareMoveIn on the destination: the queue's row, fenced by the
//     epoch, so that no node serves it there yet.
//  3. CopyQueue: the items, in id order and in batches, each batch one
//     transaction on the destination that skips what it holds (so a
//     rerun continues where the last committed batch ended and never
//     doubles); then the rows keyed by the queue (deduplication ids, held
//     groups, SQS FIFO records, history); then the destination's item ids
//     move past every id the source handed out. Redrive tasks are not
//     moved: a router of several clusters keeps every task on its catalog
//     cluster (internal/backend/clusters).
//  4. GoLive on the destination: the fence lifted, in one transaction.
//  5. DeleteMoved on the source: its rows, in batches, then its row.
//
// Before 4, AbortMove undoes it: the destination's copy deleted, the
// source's fence lifted. Rows are copied as they are (to_jsonb of the
// source's row, jsonb_populate_record of the destination's table, the
// queue's id replaced), so every column travels, those of later
// migrations included; both clusters run the same schema version, which
// every node's start migrates.

// placementMovesMigration gives the catalog's placements (styx_placements,
// clustersMigration) a move's destination and progress
// (internal/backend/clusters, move.go): move_to (the destination, ”
// while not moving), move_copied and move_total (the destination's items
// of the source's, written after each batch).
const placementMovesMigration = `ALTER TABLE styx_placements ADD COLUMN move_to text NOT NULL DEFAULT '',
	ADD COLUMN move_copied bigint NOT NULL DEFAULT 0, ADD COLUMN move_total bigint NOT NULL DEFAULT 0;`

// FencedQueues returns the queues this store holds fenced, with the epoch
// of each (a move's source or destination, or the rows a move left).
func (s *Store) FencedQueues(ctx context.Context) (map[string]int64, error) {
	rows, err := s.pool.Query(ctx, `SELECT name, fenced_epoch FROM styx_queues WHERE fenced_epoch <> 0`)
	if err != nil {
		return nil, wrap("fenced queues", err)
	}
	out := map[string]int64{}
	var name string
	var epoch int64
	_, err = pgx.ForEachRow(rows, []any{&name, &epoch}, func() error { out[name] = epoch; return nil })
	return out, wrap("fenced queues", err)
}

// MoveProgress counts a queue's items copied by CopyQueue.
type MoveProgress struct {
	// Copied is how many of the queue's items the destination holds.
	Copied int64
	// Total is how many the source holds (fenced: it does not change).
	Total int64
}

// CopyConfig configures CopyQueue.
type CopyConfig struct {
	// BatchItems bounds the items of one batch (one transaction on the
	// destination); default 1,000.
	BatchItems int
	// BatchBytes bounds a batch's rows as JSON (payloads in hexadecimal,
	// twice their size): a batch ends after the row that reaches it;
	// default 8 MiB.
	BatchBytes int
	// Progress, when set, is called after each batch committed, and
	// once before the first.
	Progress func(MoveProgress)
}

// Defaults of CopyConfig.
const (
	DefaultCopyBatchItems = 1000
	DefaultCopyBatchBytes = 8 << 20
)

// queueIDOf returns the id of the queue name and the epoch that fences it
// (0: none); store.ErrQueueNotFound when there is none.
func queueIDOf(ctx context.Context, db querier, name string) (id uint64, fenced int64, err error) {
	var i int64
	err = db.QueryRow(ctx, `SELECT id, fenced_epoch FROM styx_queues WHERE name=$1`, name).Scan(&i, &fenced)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, 0, store.ErrQueueNotFound
	}
	return uint64(i), fenced, err
}

// lockAdmin takes the schema's queue-admin lock in tx (Manager.admin's),
// so that a step that adds or removes a queue's row is checked after, or
// before, any definition change.
func lockAdmin(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('styx-admin:' || current_schema()))`)
	return err
}

// PrepareMoveIn creates on this store the row of the queue info (its
// definition as on the source, info.ID ignored), fenced by epoch, and
// returns its id here: no node serves it until GoLive. A row of that name
// fenced by epoch is kept (a resumed move); one fenced by another epoch
// is a leftover (of a move away from here whose delete did not finish, or
// of an aborted move here) and is deleted with its rows first. A live
// queue of that name is store.ErrQueueExists.
func (s *Store) PrepareMoveIn(ctx context.Context, info queue.QueueInfo, epoch int64) (uint64, error) {
	if epoch <= 0 {
		return 0, errors.New("postgres: prepare move: the epoch must be positive")
	}
	var id uint64
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if err := lockAdmin(ctx, tx); err != nil {
			return err
		}
		old, fenced, err := queueIDOf(ctx, tx, info.Name)
		switch {
		case err == nil && fenced == epoch:
			id = old
			return nil
		case err == nil && fenced == 0:
			return store.ErrQueueExists
		case err == nil:
			if err := deleteQueue(ctx, tx, info.Name); err != nil {
				return err
			}
		case !errors.Is(err, store.ErrQueueNotFound):
			return err
		}
		created, err := createQueue(ctx, tx, info)
		if err != nil {
			return err
		}
		id = created.ID
		if _, err := tx.Exec(ctx, `UPDATE styx_queues SET fenced_epoch=$2 WHERE id=$1`, int64(id), epoch); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `SELECT pg_notify($1, 'c')`, s.channel)
		return err
	})
	return id, wrap("prepare the move of queue '"+info.Name+"'", err)
}

// CopyQueue copies the queue name, fenced by epoch on src (Fence) and on
// dst (PrepareMoveIn), from src to dst: see the steps above. It continues
// a copy interrupted before (each batch committed stays) and returns the
// counts once dst holds every item of src. ErrFencedOtherwise when either
// side is not fenced by epoch.
func CopyQueue(ctx context.Context, src, dst *Store, name string, epoch int64, cfg CopyConfig) (MoveProgress, error) {
	if cfg.BatchItems <= 0 {
		cfg.BatchItems = DefaultCopyBatchItems
	}
	if cfg.BatchBytes <= 0 {
		cfg.BatchBytes = DefaultCopyBatchBytes
	}
	var p MoveProgress
	op := "copy queue '" + name + "'"
	srcID, fenced, err := queueIDOf(ctx, src.pool, name)
	if err != nil {
		return p, wrap(op, err)
	}
	dstID, dstFenced, err := queueIDOf(ctx, dst.pool, name)
	if err != nil {
		return p, wrap(op, err)
	}
	if fenced != epoch || dstFenced != epoch {
		return p, ErrFencedOtherwise
	}
	if err := src.pool.QueryRow(ctx, `SELECT count(*) FROM styx_items WHERE queue_id=$1`, int64(srcID)).Scan(&p.Total); err != nil {
		return p, wrap(op, err)
	}
	var after int64
	if err := dst.pool.QueryRow(ctx, `SELECT count(*), coalesce(max(id), 0) FROM styx_items WHERE queue_id=$1`, int64(dstID)).
		Scan(&p.Copied, &after); err != nil {
		return p, wrap(op, err)
	}
	if cfg.Progress != nil {
		cfg.Progress(p)
	}
	rows, err := src.pool.Query(ctx, `SELECT id, (to_jsonb(i) - 'queue_id')::text FROM styx_items i WHERE queue_id=$1 AND id>$2 ORDER BY id`,
		int64(srcID), after)
	if err != nil {
		return p, wrap(op, err)
	}
	defer rows.Close()
	var batch []string
	size := 0
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		n, err := insertRows(ctx, dst, "styx_items", dstID, batch, "")
		if err != nil {
			return err
		}
		p.Copied += n
		batch, size = batch[:0], 0
		if cfg.Progress != nil {
			cfg.Progress(p)
		}
		return nil
	}
	for rows.Next() {
		var id int64
		var row string
		if err := rows.Scan(&id, &row); err != nil {
			return p, wrap(op, err)
		}
		batch = append(batch, row)
		if size += len(row); len(batch) >= cfg.BatchItems || size >= cfg.BatchBytes {
			if err := flush(); err != nil {
				return p, wrap(op, err)
			}
		}
	}
	if err := rows.Err(); err != nil {
		return p, wrap(op, err)
	}
	rows.Close()
	if err := flush(); err != nil {
		return p, wrap(op, err)
	}
	if err := copyKeyed(ctx, src, dst, srcID, dstID); err != nil {
		return p, wrap(op, err)
	}
	if err := moveIDsPastSource(ctx, src, dst); err != nil {
		return p, wrap(op, err)
	}
	var copied int64
	if err := dst.pool.QueryRow(ctx, `SELECT count(*) FROM styx_items WHERE queue_id=$1`, int64(dstID)).Scan(&copied); err != nil {
		return p, wrap(op, err)
	}
	if copied != p.Total {
		return p, fmt.Errorf("postgres: %s: the destination holds %d items of %d", op, copied, p.Total)
	}
	p.Copied = copied
	return p, nil
}

// insertRows inserts into table of dst the rows (to_jsonb of the source's
// rows, without queue_id) with queue_id dstID, in their order, skipping
// those dst holds (ON CONFLICT DO NOTHING), in one transaction; extra, when
// set, is a jsonb expression of the row a.x merged into it (a column
// mapped to this cluster). It returns how many it inserted.
func insertRows(ctx context.Context, dst *Store, table string, dstID uint64, rows []string, extra string) (int64, error) {
	merge := `a.x || jsonb_build_object('queue_id', $1::bigint)`
	if extra != "" {
		merge += ` || ` + extra
	}
	tag, err := dst.pool.Exec(ctx, `INSERT INTO `+table+` SELECT r.* FROM jsonb_array_elements($2::jsonb) WITH ORDINALITY AS a(x, o),
		LATERAL jsonb_populate_record(NULL::`+table+`, `+merge+`) r ORDER BY a.o ON CONFLICT DO NOTHING`,
		int64(dstID), "["+strings.Join(rows, ",")+"]")
	return tag.RowsAffected(), err
}

// keyedTables are the tables besides styx_items whose rows belong to one
// queue (queue_id), copied by copyKeyed, with the jsonb expression that
// maps a column to the destination and the source's row adds for it. The
// item counts, dead groups and stats counts are not among them: the
// destination's triggers count the items as they arrive. styx_consumers
// is not: each node rewrites its own rows every refresh.
var keyedTables = []struct{ table, extra, srcExtra string }{
	{table: "styx_dedup"},
	// A held group waits for its dead item in the dead-letter queue of
	// that name on the destination (0: not there).
	{table: "styx_held_groups",
		extra:    `jsonb_build_object('dead_queue_id', coalesce((SELECT q.id FROM styx_queues q WHERE q.name = a.x->>'styx_dead_queue'), 0))`,
		srcExtra: `jsonb_build_object('styx_dead_queue', (SELECT q.name FROM styx_queues q WHERE q.id = t.dead_queue_id))`},
	{table: "styx_sqs_sequences"},
	{table: "styx_sqs_sends"},
	{table: "styx_sqs_attempts"},
	{table: "styx_history"},
}

// copyKeyed copies the rows of keyedTables of queue srcID on src to queue
// dstID on dst, skipping those dst holds; each table's rows in one
// statement (they are bounded: windows of deduplication ids, receive
// attempts, held groups, a history pruned by age).
func copyKeyed(ctx context.Context, src, dst *Store, srcID, dstID uint64) error {
	for _, k := range keyedTables {
		sel := `to_jsonb(t) - 'queue_id'`
		if k.srcExtra != "" {
			sel = `(` + sel + `) || ` + k.srcExtra
		}
		rows, err := src.pool.Query(ctx, `SELECT (`+sel+`)::text FROM `+k.table+` t WHERE queue_id=$1`, int64(srcID))
		if err != nil {
			return err
		}
		got, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		if len(got) == 0 {
			continue
		}
		if _, err := insertRows(ctx, dst, k.table, dstID, got, k.extra); err != nil {
			return fmt.Errorf("%s: %w", k.table, err)
		}
	}
	return nil
}

// moveIDsPastSource moves dst's styx_item_ids past every id src's has
// handed out (so that no id of the moved queue, a lease handle, is ever
// handed out again there), keeping dst's sequence on its own residue when
// it steps by more than one (each cluster's ids of its own; ADR 0023).
func moveIDsPastSource(ctx context.Context, src, dst *Store) error {
	var last int64
	if err := src.pool.QueryRow(ctx, `SELECT last_value FROM styx_item_ids`).Scan(&last); err != nil {
		return err
	}
	// v: the least value at or above last on the residue of dst's
	// last_value modulo its increment (its cluster's, ADR 0023).
	_, err := dst.pool.Exec(ctx, `SELECT setval('styx_item_ids', v) FROM (
			SELECT $1::bigint + ((q.last_value - $1::bigint) % s.increment_by + s.increment_by) % s.increment_by AS v, q.last_value
			FROM pg_sequences s, styx_item_ids q WHERE s.schemaname = current_schema() AND s.sequencename = 'styx_item_ids') t
		WHERE t.last_value < t.v`, last)
	return err
}

// GoLive lifts the fence epoch from the queue name on this store, the
// destination of its move, in one transaction that tells every node: from
// its commit the queue serves here. Done already (not fenced) is success;
// ErrFencedOtherwise when another epoch fences it; store.ErrQueueNotFound
// when there is no queue.
func (s *Store) GoLive(ctx context.Context, name string, epoch int64) error {
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if err := lockAdmin(ctx, tx); err != nil {
			return err
		}
		id, fenced, err := queueIDOf(ctx, tx, name)
		if err != nil {
			return err
		}
		switch fenced {
		case 0:
			return nil
		case epoch:
		default:
			return ErrFencedOtherwise
		}
		if _, err := tx.Exec(ctx, `UPDATE styx_queues SET fenced_epoch=0 WHERE id=$1`, int64(id)); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `SELECT pg_notify($1, 'c'), pg_notify($1, 'i:' || $2::bigint)`, s.channel, int64(id))
		return err
	})
	if errors.Is(err, ErrFencedOtherwise) {
		return err
	}
	return wrap("make queue '"+name+"' live", err)
}

// DeleteMoved deletes from this store the queue name fenced by epoch (the
// source once the move switched, or the destination's copy of an aborted
// move): its items in batches of batchItems (default 1,000), each its own
// transaction, then its row with every row keyed by it. It returns how many items it deleted. Gone already is success; a queue that
// is live, or fenced by another epoch, is ErrFencedOtherwise and nothing is
// deleted.
func (s *Store) DeleteMoved(ctx context.Context, name string, epoch int64, batchItems int) (int64, error) {
	if batchItems <= 0 {
		batchItems = DefaultCopyBatchItems
	}
	op := "delete moved queue '" + name + "'"
	id, fenced, err := queueIDOf(ctx, s.pool, name)
	if errors.Is(err, store.ErrQueueNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, wrap(op, err)
	}
	if fenced != epoch {
		return 0, ErrFencedOtherwise
	}
	var deleted int64
	for {
		tag, err := s.pool.Exec(ctx, `DELETE FROM styx_items WHERE queue_id=$1 AND id IN (
				SELECT id FROM styx_items WHERE queue_id=$1 ORDER BY id LIMIT $2)
			AND EXISTS (SELECT 1 FROM styx_queues WHERE id=$1 AND fenced_epoch=$3)`, int64(id), batchItems, epoch)
		if err != nil {
			return deleted, wrap(op, err)
		}
		deleted += tag.RowsAffected()
		if tag.RowsAffected() == 0 {
			break
		}
	}
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if err := lockAdmin(ctx, tx); err != nil {
			return err
		}
		_, fenced, err := queueIDOf(ctx, tx, name)
		if errors.Is(err, store.ErrQueueNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		if fenced != epoch {
			return ErrFencedOtherwise
		}
		if err := deleteQueue(ctx, tx, name); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `SELECT pg_notify($1, 'c')`, s.channel)
		return err
	})
	if errors.Is(err, ErrFencedOtherwise) {
		return deleted, err
	}
	return deleted, wrap(op, err)
}

// AbortMove undoes the move epoch of the queue name from src to dst before
// its switch: dst's copy is deleted (DeleteMoved) and src's fence lifted
// (Unfence). A copy that is live already (GoLive ran) is not deleted:
// ErrFencedOtherwise, and the move must be finished instead.
func AbortMove(ctx context.Context, src, dst *Store, name string, epoch int64) error {
	if _, err := dst.DeleteMoved(ctx, name, epoch, 0); err != nil {
		return err
	}
	return src.Unfence(ctx, name, epoch)
}

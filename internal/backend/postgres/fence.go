package postgres

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/styxq/styx/internal/apierr"
	"github.com/styxq/styx/internal/queue"
	"github.com/styxq/styx/internal/store"
)

// The fence of a queue that moves to another cluster (queues.move; ADR
// 0023, "Rebalancing"; docs/storage/postgres.md, "Moving a queue").
//
// A queue's styx_queues row holds fenced_epoch: 0 while the queue serves,
// the move's epoch while it is fenced. Every loop iteration's transaction
// runs styx_check_fence(queue id) right after BEGIN, in BEGIN's round trip
// (pipelinedTx.queueBegin): it reads the column, and when it is 0 takes the
// queue's fence lock (a transaction advisory lock, fenceLockSQL) in shared
// mode, which the transaction then holds until it ends, and reads it again;
// when it is set, it raises SQLSTATE SXMOV, which fails the iteration before
// it wrote anything (wrap: 453, reason queue_moving). The transactional enqueue function
// (styx_produce) and a dead-letter move into the queue (bury) check it the
// same way.
//
// Store.Fence sets the column and commits; then it takes the fence lock in
// exclusive mode, which waits for every transaction that holds it shared:
// the iterations in flight, which may have read the column before the
// fence committed. An iteration that begins after the fence committed sees
// the column at its first read and fails without asking for the lock (a
// shared request made after the exclusive one would wait behind it: a
// waiting lease must get its 453 at once); one whose first read came just
// before the commit reads the column again once it holds the lock, and
// fails then. So the wait ends once the iterations in flight end, and
// iterations that keep arriving cannot starve it.
//
// The lock is an advisory lock, not a row lock (FOR KEY SHARE of the queue's
// row, as first built): a row lock is a write of the row, so every
// iteration took a transaction id and wrote WAL, and the COMMIT of an
// iteration that only read waited for the synchronous standby; with the
// standby away, a node's idle loops then held every pooled connection in
// that wait (TestSyncRepWaitCancelled). An advisory lock is kept in memory:
// no WAL, no transaction id. Once Fence returns, no transaction writes the
// queue's rows until the fence is lifted (Unfence), on any node.

// fenceLockSQL takes a queue's fence lock exclusively (Store.Fence; $1:
// the queue's id): a transaction advisory lock of two int4 keys, the
// schema's and the queue's. styx_check_fence takes it shared with the same
// keys, the schema's name written in at its creation (ids past 2^31 share a
// key with a smaller one, which only makes one's fence wait for the other's
// iterations too). The two-key space is apart from the one-key advisory
// locks of queue administration and migration.
const fenceLockSQL = `SELECT pg_advisory_xact_lock(hashtext('styx-fence:' || current_schema()), ($1::bigint % 2147483647)::int4)`

// fencedBackoff is how long a loop whose lifecycle found its queue fenced
// waits before it looks again (a request runs at once all the same).
const fencedBackoff = 500 * time.Millisecond

// skipFenceCheck, set by BenchmarkFenceCycle only, leaves the fence check
// out of the iterations, to measure what it costs.
var skipFenceCheck atomic.Bool

// fenceState is the SQLSTATE styx_check_fence raises for a fenced queue.
const fenceState = "SXMOV"

// checkFenceSQL is the statement an iteration runs after BEGIN ($1: the
// queue's id).
const checkFenceSQL = `SELECT styx_check_fence($1)`

// fenceFunctionSQL creates styx_check_fence (migration 23).
const fenceFunctionSQL = `
ALTER TABLE styx_queues ADD COLUMN fenced_epoch bigint NOT NULL DEFAULT 0;

DO $do$ BEGIN EXECUTE format($q$
	CREATE FUNCTION styx_check_fence(q bigint) RETURNS void LANGUAGE plpgsql AS $f$
	DECLARE
		e bigint;
		n text;
	BEGIN
		SELECT fenced_epoch, name INTO e, n FROM %1$I.styx_queues WHERE id = q;
		IF e = 0 THEN
			PERFORM pg_advisory_xact_lock_shared(hashtext('styx-fence:' || %1$L), (q %% 2147483647)::int4);
			SELECT fenced_epoch, name INTO e, n FROM %1$I.styx_queues WHERE id = q;
		END IF;
		IF e <> 0 THEN
			RAISE EXCEPTION 'queue ''%%'' is moving to another cluster (move %%)', n, e USING ERRCODE = 'SXMOV';
		END IF;
	END
	$f$
$q$, current_schema());
END $do$;
`

// fenceMigration is migration 23: fenced_epoch, styx_check_fence, and
// styx_produce (migration 16's, txProduceMigration) replaced by the same
// function that checks the fence once it found the queue. Part of a
// released migration once released.
var fenceMigration = fenceFunctionSQL + produceWithFence() + `
DO $do$ BEGIN
	EXECUTE format('ALTER FUNCTION styx_produce(text, jsonb) SET search_path = %I, pg_temp', current_schema());
END $do$;
`

// produceWithFence is styx_produce's CREATE statement from migration 16,
// as CREATE OR REPLACE (which keeps its grants), with the fence checked
// after the queue's row is read.
func produceWithFence() string {
	const start, end = "CREATE FUNCTION styx_produce(", "\n$f$;\n"
	_, rest, ok := strings.Cut(txProduceMigration, start)
	body, _, ok2 := strings.Cut(rest, end)
	const found = "\tIF NOT FOUND THEN\n\t\tRAISE EXCEPTION 'queue does not exist; no such queue named ''%''', queue_name"
	i := strings.Index(body, found)
	if !ok || !ok2 || i < 0 {
		panic("postgres: styx_produce is not as migration 16 wrote it")
	}
	j := strings.Index(body[i:], "\tEND IF;\n")
	if j < 0 {
		panic("postgres: styx_produce is not as migration 16 wrote it")
	}
	k := i + j + len("\tEND IF;\n")
	return "CREATE OR REPLACE FUNCTION styx_produce(" + body[:k] + "\tPERFORM styx_check_fence(v_q.id);\n" + body[k:] + end
}

// moving is the client-facing error of a fenced queue's iteration: 453,
// reason queue_moving, the database's message naming the queue.
func moving(msg string) error {
	return apierr.Wrap(queue.ErrQueueMoving, apierr.Unavailable, "queue moving; %s; retry", msg)
}

// ErrFencedOtherwise is returned by Fence, Unfence and the move steps when
// the queue is fenced by another move (another epoch) or not fenced by the
// one named.
var ErrFencedOtherwise = errors.New("postgres: the queue is fenced by another move")

// Fence fences the queue name for the move epoch (> 0) and returns once
// every transaction that began serving it before the fence has ended (see
// above): from then on every iteration of the queue, on every node, answers
// 453 queue moving and writes nothing, its waiting leases at once (the
// nodes' loops are woken to find the fence). Fencing a queue already fenced
// by epoch waits again and succeeds (a resumed move). It returns the
// queue's definition; store.ErrQueueNotFound when there is none,
// ErrFencedOtherwise when another epoch fences it. The wait is bounded by
// ctx only: an application transaction that called styx_produce holds it
// until it ends.
func (s *Store) Fence(ctx context.Context, name string, epoch int64) (queue.QueueInfo, error) {
	if epoch <= 0 {
		return queue.QueueInfo{}, errors.New("postgres: fence: the epoch must be positive")
	}
	var info queue.QueueInfo
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var was int64
		err := tx.QueryRow(ctx, `SELECT fenced_epoch FROM styx_queues WHERE name=$1`, name).Scan(&was)
		if errors.Is(err, pgx.ErrNoRows) {
			return store.ErrQueueNotFound
		}
		if err != nil {
			return err
		}
		if was != 0 && was != epoch {
			return ErrFencedOtherwise
		}
		if info, err = scanQueue(tx.QueryRow(ctx, `UPDATE styx_queues SET fenced_epoch=$2 WHERE name=$1 AND fenced_epoch IN (0, $2)
			RETURNING `+queueColumns, name, epoch)); errors.Is(err, pgx.ErrNoRows) {
			return ErrFencedOtherwise // fenced by another move meanwhile
		}
		if err != nil {
			return err
		}
		// Every node's loop looks at once: its waiting leases get the 453.
		_, err = tx.Exec(ctx, `SELECT pg_notify($1, 'i:' || $2::bigint)`, s.channel, int64(info.ID))
		return err
	})
	if err != nil {
		return info, wrap("fence queue '"+name+"'", err)
	}
	// The wait: every transaction that holds the fence lock shared ends.
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, fenceLockSQL, int64(info.ID))
		return err
	})
	return info, wrap("fence queue '"+name+"'", err)
}

// Unfence lifts the fence epoch from the queue name (a move aborted before
// its switch): its iterations serve again, and every node's loop looks at
// once. Lifting a fence that is not there succeeds; ErrFencedOtherwise when
// another epoch fences the queue; store.ErrQueueNotFound when there is no
// queue.
func (s *Store) Unfence(ctx context.Context, name string, epoch int64) error {
	var id int64
	err := s.pool.QueryRow(ctx, `UPDATE styx_queues SET fenced_epoch=0 WHERE name=$1 AND fenced_epoch=$2 RETURNING id`, name, epoch).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		fenced, err := s.FencedEpoch(ctx, name)
		if err == nil && fenced != 0 {
			err = ErrFencedOtherwise
		}
		return err
	}
	if err != nil {
		return wrap("unfence queue '"+name+"'", err)
	}
	_, err = s.pool.Exec(ctx, `SELECT pg_notify($1, 'i:' || $2::bigint)`, s.channel, id)
	return wrap("unfence queue '"+name+"'", err)
}

// FencedEpoch returns the epoch that fences the queue name (0: none);
// store.ErrQueueNotFound when there is no queue.
func (s *Store) FencedEpoch(ctx context.Context, name string) (int64, error) {
	var e int64
	err := s.pool.QueryRow(ctx, `SELECT fenced_epoch FROM styx_queues WHERE name=$1`, name).Scan(&e)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, store.ErrQueueNotFound
	}
	return e, wrap("fenced epoch", err)
}

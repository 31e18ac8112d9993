package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/styxq/styx/internal/store"
)

// errCommitUnknown is the cause of a COMMIT that got no answer.
var errCommitUnknown = errors.New("commit outcome unknown: the connection ended before PostgreSQL answered COMMIT")

// errCommitLocalOnly is the cause of a COMMIT that PostgreSQL answered
// after it stopped waiting for the synchronous standby.
var errCommitLocalOnly = errors.New("commit outcome unknown: PostgreSQL committed the transaction on the primary but stopped waiting " +
	"for the synchronous standby (its wait was cancelled or its session terminated), so a failover may lose it")

// commitTx commits tx and classifies a failure for op. An answer from
// PostgreSQL (an error it sent, or ROLLBACK for a failed transaction) means
// nothing was committed, and is left to wrap. No answer at all (the
// connection broke or timed out while COMMIT was on the wire, or the
// primary died mid-commit) means the transaction may or may not have
// committed: that is store.ErrUnavailable (453, "commit outcome unknown")
// whatever the driver's error reads, so such a request is never answered
// success, nor 500. So is a COMMIT that PostgreSQL reported done with its
// warning that the wait for the synchronous standby was cancelled
// (pg_cancel_backend, or pg_terminate_backend, of a session waiting in
// SyncRep; see onNotice): committed on the primary, perhaps never on the
// standby a failover promotes. The client's retry is then safe for a
// complete (an id is a lease handle, never reused: a complete that did
// commit leaves the retry a 400 "not leased", changing nothing) and for a
// redrive step (the source-key rule, ADR 0004); a retried produce may store
// its items twice (at-least-once), as docs/storage/postgres.md says.
//
// commitTx may run on any goroutine, for any number of transactions at
// once: what it watches is the transaction's own connection (commitWatch).
func commitTx(ctx context.Context, tx pgx.Tx, op string) error {
	var w *commitWatch
	if conn := tx.Conn(); conn != nil && conn.PgConn() != nil {
		w = watchCommit(conn.PgConn())
	}
	return commitOutcome(op, w, tx.Commit(ctx))
}

// commitWith is commitTx for a COMMIT that goes with b, in one round trip
// (pipelinedTx.commitWith; read reads b's results): a failure is
// classified as commitTx's are, a statement of b that PostgreSQL refused
// included (nothing was committed).
func commitWith(ctx context.Context, tx *pipelinedTx, op string, b *pgx.Batch, read func(pgx.BatchResults) error) error {
	w := watchCommit(tx.conn.Conn().PgConn())
	return commitOutcome(op, w, tx.commitWith(ctx, b, read))
}

// commitOutcome classifies err, the result of op's COMMIT watched by w
// (commitTx).
func commitOutcome(op string, w *commitWatch, err error) error {
	if err := w.end(op); err != nil {
		return err
	}
	if err == nil || errors.Is(err, pgx.ErrTxCommitRollback) {
		return err
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return err
	}
	return store.Unavailable("postgres: "+op, fmt.Errorf("%w: %w", errCommitUnknown, err))
}

// execCommitted runs sql as a transaction of its own (autocommit) on one of
// pool's connections and classifies a COMMIT that stopped waiting for the
// synchronous standby as commitTx does: store.ErrUnavailable, "commit
// outcome unknown", whatever the statement answered. Any other error is
// the statement's, for the caller to classify (wrap). For the writes a
// request is answered on that are no loop iteration's (redrive task
// records, API keys).
func execCommitted(ctx context.Context, pool *pgxpool.Pool, op, sql string, args ...any) (pgconn.CommandTag, error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	defer conn.Release()
	w := watchCommit(conn.Conn().PgConn())
	tag, err := conn.Exec(ctx, sql, args...)
	if err := w.end(op); err != nil {
		return tag, err
	}
	return tag, err
}

// commitWatchKey is the key of a connection's *commitWatch in its
// pgconn.PgConn.CustomData.
const commitWatchKey = "styx.commitWatch"

// commitWatch records the notice that makes one COMMIT's outcome unknown.
// commitTx makes one per COMMIT and puts it in the connection's
// pgconn.PgConn.CustomData before the COMMIT; onNotice, which pgconn calls
// on the goroutine reading that COMMIT's answer, fills it; commitTx reads
// its own after the COMMIT. The connection may be back in the pool by then
// (pgxpool's Tx.Commit and pipelinedTx.Commit release it) and serving
// another transaction, whose commitTx puts a watch of its own in
// CustomData: each reads only its own, so neither misses nor takes the
// other's notice. The pool's acquire and release order the CustomData
// writes; the fields are atomics because a notice of the connection's
// next user may still reach a watch not yet ended (a false alarm, the safe
// way: 453).
type commitWatch struct {
	armed  atomic.Bool
	notice atomic.Pointer[pgconn.Notice]
}

// watchCommit makes the watch of the COMMIT about to run on pc.
func watchCommit(pc *pgconn.PgConn) *commitWatch {
	w := &commitWatch{}
	w.armed.Store(true)
	pc.CustomData()[commitWatchKey] = w
	return w
}

// end disarms w and returns the error of op's COMMIT when a notice made its
// outcome unknown (store.ErrUnavailable, errCommitLocalOnly); nil when none
// came (or w is nil).
func (w *commitWatch) end(op string) error {
	if w == nil {
		return nil
	}
	w.armed.Store(false)
	if n := w.notice.Swap(nil); n != nil {
		return store.Unavailable("postgres: "+op, fmt.Errorf("%w: %s (%s)", errCommitLocalOnly, n.Message, n.Code))
	}
	return nil
}

// onNotice is the pool's pgconn.Config.OnNotice: while a COMMIT is watched
// on the connection (commitTx), it keeps a notice that says the commit is
// local only. PostgreSQL sends one when a COMMIT waiting for the
// synchronous standby (wait event SyncRep) stops waiting without it
// (src/backend/replication/syncrep.c, SyncRepWaitForLSN): on a query
// cancel, a WARNING of SQLSTATE 01000 "canceling wait for synchronous
// replication due to user request", and on a terminate, a WARNING of
// SQLSTATE 57P01 "canceling the wait for synchronous replication and
// terminating connection due to administrator command", both with the
// detail "The transaction has already committed locally, but might not have
// been replicated to the standby." The first then answers COMMIT as if all
// were well. A WARNING of either SQLSTATE during a COMMIT counts, whatever
// its text: the text is translated (lc_messages), and Styx's transactions
// have no deferred trigger that could warn at COMMIT; a false alarm would
// answer 453 for a transaction that committed, which the client's retry
// handles, never 200 for one that may be lost.
func onNotice(pc *pgconn.PgConn, n *pgconn.Notice) {
	w, _ := pc.CustomData()[commitWatchKey].(*commitWatch)
	if w == nil || !w.armed.Load() || !committedLocallyOnly(n) {
		return
	}
	w.notice.Store(n)
}

// committedLocallyOnly reports whether n is PostgreSQL's warning that a
// COMMIT stopped waiting for the synchronous standby (see onNotice).
func committedLocallyOnly(n *pgconn.Notice) bool {
	severity := n.SeverityUnlocalized // PostgreSQL 9.6 and later
	if severity == "" {
		severity = n.Severity
	}
	return severity == "WARNING" && (n.Code == "01000" || n.Code == "57P01")
}

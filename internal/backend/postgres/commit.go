package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

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
	w := watchCommit(tx)
	err := tx.Commit(ctx)
	if n := w.end(); n != nil {
		return store.Unavailable("postgres: "+op, fmt.Errorf("%w: %s (%s)", errCommitLocalOnly, n.Message, n.Code))
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

// commitWatchKey is the key of a connection's *commitWatch in its
// pgconn.PgConn.CustomData.
const commitWatchKey = "styx.commitWatch"

// commitWatch is a connection's record of the notices that make a COMMIT's
// outcome unknown. commitTx arms it for the COMMIT it runs and reads it
// after; onNotice, which pgconn calls while it reads that COMMIT's answer,
// fills it. One per connection (pgconn.PgConn.CustomData), created by the
// first commitTx on it: a connection runs one COMMIT at a time, held by
// the goroutine that runs it, so the fields are atomics only to be safe
// should a notice ever come from elsewhere.
type commitWatch struct {
	armed  atomic.Bool
	notice atomic.Pointer[pgconn.Notice]
}

// watchCommit arms the watch of tx's connection; nil when tx has none.
func watchCommit(tx pgx.Tx) *commitWatch {
	conn := tx.Conn()
	if conn == nil || conn.PgConn() == nil {
		return nil
	}
	data := conn.PgConn().CustomData()
	w, _ := data[commitWatchKey].(*commitWatch)
	if w == nil {
		w = &commitWatch{}
		data[commitWatchKey] = w
	}
	w.notice.Store(nil)
	w.armed.Store(true)
	return w
}

// end disarms w and returns the notice that made the COMMIT's outcome
// unknown, nil when none came (or w is nil).
func (w *commitWatch) end() *pgconn.Notice {
	if w == nil {
		return nil
	}
	w.armed.Store(false)
	return w.notice.Swap(nil)
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

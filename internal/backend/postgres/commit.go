package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/styxq/styx/internal/store"
)

// errCommitUnknown is the cause of a COMMIT that got no answer.
var errCommitUnknown = errors.New("commit outcome unknown: the connection ended before PostgreSQL answered COMMIT")

// commitTx commits tx and classifies a failure for op. An answer from
// PostgreSQL (an error it sent, or ROLLBACK for a failed transaction) means
// nothing was committed, and is left to wrap. No answer at all (the
// connection broke or timed out while COMMIT was on the wire, or the
// primary died mid-commit) means the transaction may or may not have
// committed: that is store.ErrUnavailable (453, "commit outcome unknown")
// whatever the driver's error reads, so such a request is never answered
// success, nor 500. The client's retry is then safe for a complete (an id
// is a lease handle, never reused: a complete that did commit leaves the
// retry a 400 "not leased", changing nothing) and for a redrive step (the
// source-key rule, ADR 0004); a retried produce may store its items twice
// (at-least-once), as docs/storage/postgres.md says.
func commitTx(ctx context.Context, tx pgx.Tx, op string) error {
	err := tx.Commit(ctx)
	if err == nil || errors.Is(err, pgx.ErrTxCommitRollback) {
		return err
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return err
	}
	return store.Unavailable("postgres: "+op, fmt.Errorf("%w: %w", errCommitUnknown, err))
}

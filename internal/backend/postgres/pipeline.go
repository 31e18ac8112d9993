package postgres

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// pipelinedTx is the transaction of one loop iteration: a pgx.Tx on a
// pooled connection whose BEGIN goes with its first statement, and whose
// deferred writes (deferWrites) go with its COMMIT, each in one round trip
// (a pgx batch, pipelined). A produce iteration thus costs one round trip,
// and every iteration one less than with BEGIN on its own (issue 53: a
// queue's throughput on PostgreSQL is bounded by the round trips of its
// iterations). Statements run in the order they were called: a statement
// that is not deferred sends the deferred ones before it, in its batch.
// Not safe for concurrent use (like pgx.Tx).
type pipelinedTx struct {
	conn *pgxpool.Conn
	// begun says BEGIN was sent (or is in deferred).
	begun bool
	// deferWrites makes Exec queue its statement in deferred, to be sent
	// with the next statement or the COMMIT; its CommandTag is then empty,
	// so only statements whose tag no one reads may be deferred.
	deferWrites bool
	deferred    pgx.Batch
	closed      bool
	// fence is the queue whose fence (fence.go) the transaction checks in
	// the statement after BEGIN, in BEGIN's round trip; 0: none.
	fence uint64
}

var _ pgx.Tx = (*pipelinedTx)(nil)

// beginPipelined acquires a connection for a transaction; nothing is sent.
func beginPipelined(ctx context.Context, pool *pgxpool.Pool) (*pipelinedTx, error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	return &pipelinedTx{conn: conn}, nil
}

// batch returns the statements to send before the next one (BEGIN when not
// sent, then the deferred writes), and forgets them.
func (t *pipelinedTx) batch() *pgx.Batch {
	b := &pgx.Batch{}
	if !t.begun {
		t.queueBegin(b)
	}
	for _, q := range t.deferred.QueuedQueries {
		b.Queue(q.SQL, q.Arguments...)
	}
	t.deferred = pgx.Batch{}
	return b
}

// queueBegin queues BEGIN in b, and the fence check of the queue the
// transaction serves (checkFenceSQL): it runs before any other statement of
// the transaction, so a fenced queue's iteration fails there (453 queue
// moving, wrap) and every statement after it in its batch is skipped, and a
// fence taken later waits for the transaction (Store.Fence).
func (t *pipelinedTx) queueBegin(b *pgx.Batch) {
	b.Queue("BEGIN")
	if t.fence != 0 {
		b.Queue(checkFenceSQL, int64(t.fence))
	}
	t.begun = true
}

// Exec implements pgx.Tx.
func (t *pipelinedTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if t.closed {
		return pgconn.CommandTag{}, pgx.ErrTxClosed
	}
	if t.deferWrites {
		if !t.begun {
			t.queueBegin(&t.deferred)
		}
		t.deferred.Queue(sql, args...)
		return pgconn.CommandTag{}, nil
	}
	b := t.batch()
	if b.Len() == 0 {
		return t.conn.Exec(ctx, sql, args...)
	}
	b.Queue(sql, args...)
	return t.execBatch(ctx, b)
}

// execBatch sends b and returns the tag of its last statement and the first
// error of any.
func (t *pipelinedTx) execBatch(ctx context.Context, b *pgx.Batch) (pgconn.CommandTag, error) {
	br := t.conn.SendBatch(ctx, b)
	var tag pgconn.CommandTag
	var err error
	for range b.Len() {
		var e error
		if tag, e = br.Exec(); e != nil && err == nil {
			err = e
		}
	}
	if e := br.Close(); e != nil && err == nil {
		err = e
	}
	return tag, err
}

// Query implements pgx.Tx.
func (t *pipelinedTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if t.closed {
		return nil, pgx.ErrTxClosed
	}
	b := t.batch()
	if b.Len() == 0 {
		return t.conn.Query(ctx, sql, args...)
	}
	pre := b.Len()
	b.Queue(sql, args...)
	br := t.conn.SendBatch(ctx, b)
	for range pre {
		if _, err := br.Exec(); err != nil {
			_ = br.Close()
			return nil, err
		}
	}
	rows, err := br.Query()
	if err != nil {
		_ = br.Close()
		return nil, err
	}
	return &batchRows{Rows: rows, br: br}, nil
}

// QueryRow implements pgx.Tx.
func (t *pipelinedTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	rows, err := t.Query(ctx, sql, args...)
	return &pipelinedRow{rows: rows, err: err}
}

// SendBatch implements pgx.Tx: what must go before b goes in its round
// trip.
func (t *pipelinedTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if t.closed {
		return &failedBatch{err: pgx.ErrTxClosed}
	}
	pre := t.batch()
	if pre.Len() == 0 {
		return t.conn.SendBatch(ctx, b)
	}
	n := pre.Len()
	merged := &pgx.Batch{QueuedQueries: append(pre.QueuedQueries, b.QueuedQueries...)}
	br := t.conn.SendBatch(ctx, merged)
	for range n {
		if _, err := br.Exec(); err != nil {
			return &failedBatch{BatchResults: br, err: err}
		}
	}
	return br
}

// Commit implements pgx.Tx: the deferred writes and COMMIT in one round
// trip. A failure of either leaves nothing committed when PostgreSQL
// answered it (a *pgconn.PgError, or pgx.ErrTxCommitRollback); without an
// answer the outcome is unknown (commitTx tells them apart).
func (t *pipelinedTx) Commit(ctx context.Context) error {
	if !t.closed && !t.begun {
		t.closed = true
		t.conn.Release()
		return nil // nothing was sent: nothing to commit
	}
	return t.commitWith(ctx, &pgx.Batch{}, func(pgx.BatchResults) error { return nil })
}

// commitWith sends b and then COMMIT, after what must go before them
// (BEGIN when not sent, the deferred writes), in one round trip, and ends
// the transaction; read reads b's results, in order, before the COMMIT's
// is read (Commit is commitWith with nothing in b). A failure of a
// statement before the COMMIT skips it: nothing is committed, and the
// session is rolled back, or closed when it does not answer. read's own
// error is returned
// once the batch is read to its end, COMMIT included (which then committed
// whatever b did: its caller answers the iteration's requests an error,
// and no one learns of what it leased).
func (t *pipelinedTx) commitWith(ctx context.Context, b *pgx.Batch, read func(pgx.BatchResults) error) error {
	if t.closed {
		return pgx.ErrTxClosed
	}
	t.closed = true
	defer t.conn.Release()
	pre := t.batch()
	n := pre.Len()
	all := &pgx.Batch{QueuedQueries: append(pre.QueuedQueries, b.QueuedQueries...)}
	all.Queue("COMMIT")
	br := t.conn.SendBatch(ctx, all)
	err := func() error {
		for range n {
			if _, err := br.Exec(); err != nil {
				return err
			}
		}
		if err := read(br); err != nil {
			return err
		}
		tag, err := br.Exec()
		if err == nil && tag.String() == "ROLLBACK" {
			err = pgx.ErrTxCommitRollback
		}
		return err
	}()
	if e := br.Close(); e != nil && err == nil {
		err = e
	}
	if err != nil && t.conn.Conn().PgConn().TxStatus() == 'E' {
		// A statement failed and COMMIT was skipped (a fenced queue's
		// every iteration, while it moves): the session stays when it
		// still answers.
		_, _ = t.conn.Exec(ctx, "ROLLBACK")
	}
	if err != nil && t.conn.Conn().PgConn().TxStatus() != 'I' {
		// Still in the transaction: the connection goes, and the
		// transaction with it.
		_ = t.conn.Conn().Close(ctx)
	}
	return err
}

// Rollback implements pgx.Tx; after Commit or Rollback it returns
// pgx.ErrTxClosed.
func (t *pipelinedTx) Rollback(ctx context.Context) error {
	if t.closed {
		return pgx.ErrTxClosed
	}
	t.closed = true
	defer t.conn.Release()
	if q := t.deferred.QueuedQueries; !t.begun || (len(q) > 0 && q[0].SQL == "BEGIN") {
		return nil // BEGIN was never sent
	}
	_, err := t.conn.Exec(ctx, "ROLLBACK")
	if err != nil || t.conn.Conn().PgConn().TxStatus() != 'I' {
		_ = t.conn.Conn().Close(ctx)
	}
	return err
}

// Begin implements pgx.Tx; iterations use no savepoints.
func (t *pipelinedTx) Begin(context.Context) (pgx.Tx, error) {
	return nil, errors.New("postgres: savepoints are not supported in a loop iteration")
}

// CopyFrom implements pgx.Tx; iterations do not use it.
func (t *pipelinedTx) CopyFrom(context.Context, pgx.Identifier, []string, pgx.CopyFromSource) (int64, error) {
	return 0, errors.New("postgres: COPY is not supported in a loop iteration")
}

// LargeObjects implements pgx.Tx; iterations do not use them.
func (t *pipelinedTx) LargeObjects() pgx.LargeObjects { return pgx.LargeObjects{} }

// Prepare implements pgx.Tx.
func (t *pipelinedTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	return t.conn.Conn().Prepare(ctx, name, sql)
}

// Conn implements pgx.Tx.
func (t *pipelinedTx) Conn() *pgx.Conn { return t.conn.Conn() }

// batchRows are the rows of a query sent in a batch: closing them ends the
// batch.
type batchRows struct {
	pgx.Rows
	br  pgx.BatchResults
	err error
}

// Next implements pgx.Rows: the last row read ends the batch, as the last
// row of a plain query closes its rows, so that the connection is free for
// the next statement whether or not the caller closes the rows.
func (r *batchRows) Next() bool {
	if r.Rows.Next() {
		return true
	}
	r.Close()
	return false
}

func (r *batchRows) Close() {
	r.Rows.Close()
	if r.br != nil {
		r.err = r.br.Close()
		r.br = nil
	}
}

func (r *batchRows) Err() error {
	if err := r.Rows.Err(); err != nil {
		return err
	}
	return r.err
}

// pipelinedRow is QueryRow's pgx.Row.
type pipelinedRow struct {
	rows pgx.Rows
	err  error
}

func (r *pipelinedRow) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	defer r.rows.Close()
	if !r.rows.Next() {
		r.rows.Close()
		if err := r.rows.Err(); err != nil {
			return err
		}
		return pgx.ErrNoRows
	}
	if err := r.rows.Scan(dest...); err != nil {
		return err
	}
	r.rows.Close()
	return r.rows.Err()
}

// failedBatch is the pgx.BatchResults of a batch whose statements sent
// before it failed (err): every result is err.
type failedBatch struct {
	pgx.BatchResults // nil when nothing was sent
	err              error
}

func (b *failedBatch) Exec() (pgconn.CommandTag, error) { return pgconn.CommandTag{}, b.err }
func (b *failedBatch) Query() (pgx.Rows, error)         { return nil, b.err }
func (b *failedBatch) QueryRow() pgx.Row                { return &pipelinedRow{err: b.err} }
func (b *failedBatch) Close() error {
	if b.BatchResults != nil {
		_ = b.BatchResults.Close()
	}
	return b.err
}

// genericPlanOn and genericPlanOff surround a statement that runs on its
// generic plan (onGenericPlan): the plan cache's choice, and no
// sequential scan. A prepared statement keeps the generic plan made at its
// first execution until the table's statistics change, and one made while
// the statistics say styx_items is empty (a fresh database, or after a
// vacuum of a drained queue) may scan the whole table; the index a
// statement run this way uses is always the cheaper path on a table that
// holds items.
var (
	genericPlanOn  = []string{`SET LOCAL plan_cache_mode = force_generic_plan`, `SET LOCAL enable_seqscan = off`}
	genericPlanOff = []string{`SET LOCAL plan_cache_mode TO DEFAULT`, `SET LOCAL enable_seqscan TO DEFAULT`}
)

// onGenericPlan runs sql with args on its generic plan, in one round trip
// (a batch: the settings, the statement and the settings back), and hands
// its rows to scan, which must read or close them. For a statement that
// PostgreSQL would otherwise plan anew at every call (its custom plan for
// the arguments looks cheaper than the generic one's estimate) while the
// generic plan is as good: the planning is then saved (issue 53). The
// settings are SET LOCAL: the transaction's, restored after the statement.
func onGenericPlan(ctx context.Context, tx pgx.Tx, sql string, args []any, scan func(pgx.Rows, error) error) error {
	br := tx.SendBatch(ctx, genericPlanBatch(sql, args))
	if err := readGenericPlan(br, scan); err != nil {
		_ = br.Close()
		return err
	}
	return br.Close()
}

// genericPlanBatch is onGenericPlan's batch: the settings, sql with args
// and the settings back.
func genericPlanBatch(sql string, args []any) *pgx.Batch {
	b := &pgx.Batch{}
	for _, s := range genericPlanOn {
		b.Queue(s)
	}
	b.Queue(sql, args...)
	for _, s := range genericPlanOff {
		b.Queue(s)
	}
	return b
}

// readGenericPlan reads the results of a genericPlanBatch from br, its
// statement's rows by scan, and leaves br open.
func readGenericPlan(br pgx.BatchResults, scan func(pgx.Rows, error) error) error {
	for range genericPlanOn {
		if _, err := br.Exec(); err != nil {
			return err
		}
	}
	if err := scan(br.Query()); err != nil {
		return err
	}
	for range genericPlanOff {
		if _, err := br.Exec(); err != nil {
			return err
		}
	}
	return nil
}

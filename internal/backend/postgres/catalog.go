// Package postgres is Styx on PostgreSQL: several nodes serve the same queues
// from one database, which decides every lease (ADR 0006). Each node runs one
// loop goroutine per queue, as the single-node logical queue does, but the
// loop is a batching front end: the requests it gathers in one iteration
// become one transaction, leases are taken with FOR UPDATE SKIP LOCKED, and
// lifecycle work (lease expiry, scheduled items, expiry, dead-lettering) is
// done by whichever node gets to a due item first, in the same kind of
// statements, so no item is handled twice. A dead-letter move is one
// transaction. LISTEN/NOTIFY wakes waiting leases on every node when items
// become ready, and tells nodes of queue changes. See docs/storage/postgres.md.
package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"net"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/puddle/v2"

	"github.com/styxq/styx/internal/apierr"
	"github.com/styxq/styx/internal/queue"
	"github.com/styxq/styx/internal/store"
)

// Store holds the connection pool and implements the queue catalog and the
// task store (store.Catalog and store.TaskStore) on PostgreSQL. The Manager
// uses it; it is exported for the conformance suite.
type Store struct {
	pool *pgxpool.Pool
	// channel is the NOTIFY channel of the schema the store uses.
	channel string
	// claims is the session holding the task claims (ClaimTask).
	claims claimSession
	// fifoSwept is when this node last deleted ended SQS FIFO records
	// (sweepFIFO; Unix ns).
	fifoSwept atomic.Int64
	// migrated is set once OpenStore has migrated the schema: new
	// connections then check the item ids' epoch (afterConnect).
	migrated atomic.Bool
	// log is where afterConnect logs a move of the item ids (SetLog); nil
	// means slog.Default().
	log atomic.Pointer[slog.Logger]
}

// DefaultConnectTimeout bounds a new connection when the URL sets none, so
// that requests fail fast (453) while the database is down.
const DefaultConnectTimeout = 2 * time.Second

// OpenStore connects to url (a PostgreSQL URL or key=value DSN; pgx syntax,
// e.g. "postgres://styx@db:5432/styx?sslmode=disable") and applies the
// schema migrations. The schema is the connection's current schema
// (search_path), so several Styx installations can share one database.
func OpenStore(ctx context.Context, url string, maxConns int32) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("postgres url: %w", err)
	}
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = DefaultConnectTimeout
	}
	if maxConns > 0 {
		cfg.MaxConns = maxConns
	}
	cfg.HealthCheckPeriod = 5 * time.Second
	// A COMMIT that stopped waiting for the synchronous standby is not a
	// success (commitTx).
	cfg.ConnConfig.OnNotice = onNotice
	st := &Store{}
	// Every new connection checks the item ids' epoch (ids.go) once the
	// schema has the function: after a failover or a restore, the first
	// one moves the ids past those the lost primary handed out.
	cfg.AfterConnect = st.afterConnect
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	if err := migrate(ctx, pool); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres: migrate: %w", err)
	}
	st.migrated.Store(true)
	moved, err := checkItemIDs(ctx, pool)
	if err != nil {
		pool.Close()
		return nil, err
	}
	st.logMoved(moved)
	if _, err := backfillFingerprints(ctx, pool); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres: %w", err)
	}
	var schema string
	if err := pool.QueryRow(ctx, `SELECT current_schema()`).Scan(&schema); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres: %w", err)
	}
	st.pool, st.channel = pool, schemaChannel(schema)
	return st, nil
}

// afterConnect is the pool's AfterConnect: once the schema is migrated, a
// new connection checks the item ids' epoch (checkItemIDs) before it
// serves, and logs a move at WARN. An error fails the connection (the
// request that wanted it answers 453).
func (s *Store) afterConnect(ctx context.Context, conn *pgx.Conn) error {
	if !s.migrated.Load() {
		return nil // the migration creates the function; OpenStore checks after it
	}
	moved, err := checkItemIDs(ctx, conn)
	if err != nil {
		return err
	}
	s.logMoved(moved)
	return nil
}

// SetLog sets the logger the store logs a move of the item ids with (see
// afterConnect); until it is set, and with nil, slog.Default().
func (s *Store) SetLog(log *slog.Logger) { s.log.Store(log) }

// logMoved logs at WARN that checkItemIDs moved the item ids (moved is
// the value it set the sequence to; 0: nothing to log).
func (s *Store) logMoved(moved int64) {
	if moved == 0 {
		return
	}
	log := s.log.Load()
	if log == nil {
		log = slog.Default()
	}
	log.Warn("postgres: a new timeline or cluster (a failover or a restore): item ids now start past those the old primary may have handed out",
		"next_id", moved+1)
}

// Close closes the pool.
func (s *Store) Close() error {
	s.claims.close()
	s.pool.Close()
	return nil
}

// querier is a pool or a transaction.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// queueColumns are the styx_queues columns queueRow scans, in its order.
const queueColumns = `id, name, dead_queue, reference, lease_timeout, expire_timeout, max_attempts, partitions, created_at, updated_at, namespace, attributes, dedup_window,
	ordered, group_dead_policy, paused_at`

// queueRow receives queueColumns from a row: scan into dest(), then read
// info().
type queueRow struct {
	q                                                  queue.QueueInfo
	id, lease, expire, created, updated, dedup, paused int64
}

func (r *queueRow) dest() []any {
	return []any{&r.id, &r.q.Name, &r.q.DeadQueue, &r.q.Reference, &r.lease, &r.expire, &r.q.MaxAttempts, &r.q.Partitions,
		&r.created, &r.updated, &r.q.Namespace, &r.q.Attributes, &r.dedup, &r.q.Ordered, &r.q.GroupDeadPolicy, &r.paused}
}

func (r *queueRow) info() queue.QueueInfo {
	q := r.q
	q.ID, q.LeaseTimeout, q.ExpireTimeout = uint64(r.id), time.Duration(r.lease), time.Duration(r.expire)
	q.CreatedAt, q.UpdatedAt = queue.FromNanos(r.created), queue.FromNanos(r.updated)
	q.DeduplicationWindow = time.Duration(r.dedup)
	q.PausedAt = queue.FromNanos(r.paused)
	return q
}

func scanQueue(row pgx.Row) (queue.QueueInfo, error) {
	var r queueRow
	err := row.Scan(r.dest()...)
	return r.info(), err
}

// CreateQueue implements store.Catalog.
func (s *Store) CreateQueue(ctx context.Context, info queue.QueueInfo) (queue.QueueInfo, error) {
	return createQueue(ctx, s.pool, info)
}

func createQueue(ctx context.Context, q querier, info queue.QueueInfo) (queue.QueueInfo, error) {
	var id int64
	err := q.QueryRow(ctx, `INSERT INTO styx_queues (name, dead_queue, reference, lease_timeout, expire_timeout, max_attempts, partitions,
			created_at, updated_at, namespace, attributes, dedup_window, ordered, group_dead_policy, paused_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15) ON CONFLICT (name) DO NOTHING RETURNING id`,
		info.Name, info.DeadQueue, info.Reference, int64(info.LeaseTimeout), int64(info.ExpireTimeout), info.MaxAttempts,
		info.Partitions, queue.Nanos(info.CreatedAt), queue.Nanos(info.UpdatedAt), info.Namespace, info.Attributes,
		int64(info.DeduplicationWindow), info.Ordered, info.GroupDeadPolicy, queue.Nanos(info.PausedAt)).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return info, store.ErrQueueExists
	}
	if err != nil {
		return info, wrap("create queue", err)
	}
	info.ID = uint64(id)
	return info, nil
}

// UpdateQueue implements store.Catalog.
func (s *Store) UpdateQueue(ctx context.Context, info queue.QueueInfo) error {
	return updateQueue(ctx, s.pool, info)
}

func updateQueue(ctx context.Context, q querier, info queue.QueueInfo) error {
	tag, err := q.Exec(ctx, `UPDATE styx_queues SET dead_queue=$3, reference=$4, lease_timeout=$5, expire_timeout=$6,
		max_attempts=$7, partitions=$8, created_at=$9, updated_at=$10, namespace=$11, attributes=$12, dedup_window=$13,
		ordered=$14, group_dead_policy=$15, paused_at=$16 WHERE name=$1 AND id=$2`,
		info.Name, int64(info.ID), info.DeadQueue, info.Reference, int64(info.LeaseTimeout), int64(info.ExpireTimeout),
		info.MaxAttempts, info.Partitions, queue.Nanos(info.CreatedAt), queue.Nanos(info.UpdatedAt), info.Namespace, info.Attributes,
		int64(info.DeduplicationWindow), info.Ordered, info.GroupDeadPolicy, queue.Nanos(info.PausedAt))
	if err != nil {
		return wrap("update queue", err)
	}
	if tag.RowsAffected() == 0 {
		return store.ErrQueueNotFound
	}
	return nil
}

// GetQueue implements store.Catalog.
func (s *Store) GetQueue(ctx context.Context, name string) (queue.QueueInfo, error) {
	q, err := scanQueue(s.pool.QueryRow(ctx, `SELECT `+queueColumns+` FROM styx_queues WHERE name=$1`, name))
	if errors.Is(err, pgx.ErrNoRows) {
		return q, store.ErrQueueNotFound
	}
	return q, wrap("get queue", err)
}

// ListQueues implements store.Catalog.
func (s *Store) ListQueues(ctx context.Context, p queue.ListQueuesParams) ([]queue.QueueInfo, error) {
	return listQueues(ctx, s.pool, p)
}

func listQueues(ctx context.Context, q querier, p queue.ListQueuesParams) ([]queue.QueueInfo, error) {
	lim := any(nil) // LIMIT NULL is no limit
	if p.Limit > 0 {
		lim = p.Limit
	}
	rows, err := q.Query(ctx, `SELECT `+queueColumns+` FROM styx_queues
		WHERE name COLLATE "C" >= $1 AND ($3 = '' OR namespace = $3) ORDER BY name COLLATE "C" LIMIT $2`, p.Pivot, lim, p.Namespace)
	if err != nil {
		return nil, wrap("list queues", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (queue.QueueInfo, error) { return scanQueue(r) })
	return out, wrap("list queues", err)
}

// DeleteQueue implements store.Catalog; the queue's items go with it.
func (s *Store) DeleteQueue(ctx context.Context, name string) error {
	return deleteQueue(ctx, s.pool, name)
}

// deleteQueue deletes a queue, its items (ON DELETE CASCADE) and then its
// counts rows (item counts, error groups, stats counts), which the
// cascade's triggers have just written to. Counts rows
// locked by a concurrent foldCounts are skipped, not waited for (a wait
// there could close a cycle with the fold's upsert of shard 0); the fold
// deletes them instead, as it deletes any counts of a queue that is gone.
func deleteQueue(ctx context.Context, q querier, name string) error {
	var id int64
	err := q.QueryRow(ctx, `DELETE FROM styx_queues WHERE name=$1 RETURNING id`, name).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return store.ErrQueueNotFound
	}
	if err != nil {
		return wrap("delete queue", err)
	}
	_, err = q.Exec(ctx, `DELETE FROM styx_item_counts c USING (
		SELECT shard FROM styx_item_counts WHERE queue_id=$1 FOR UPDATE SKIP LOCKED) s
		WHERE c.queue_id=$1 AND c.shard=s.shard`, id)
	if err != nil {
		return wrap("delete queue", err)
	}
	_, err = q.Exec(ctx, `DELETE FROM styx_dead_groups c USING (
		SELECT source_queue, reason, fingerprint, shard FROM styx_dead_groups WHERE queue_id=$1 FOR UPDATE SKIP LOCKED) s
		WHERE c.queue_id=$1 AND c.source_queue=s.source_queue AND c.reason=s.reason AND c.fingerprint=s.fingerprint AND c.shard=s.shard`, id)
	if err != nil {
		return wrap("delete queue", err)
	}
	_, err = q.Exec(ctx, `DELETE FROM styx_partition_counts c USING (
		SELECT partition, shard FROM styx_partition_counts WHERE queue_id=$1 FOR UPDATE SKIP LOCKED) s
		WHERE c.queue_id=$1 AND c.partition=s.partition AND c.shard=s.shard`, id)
	if err != nil {
		return wrap("delete queue", err)
	}
	_, err = q.Exec(ctx, `DELETE FROM styx_dead_counts c USING (
		SELECT reason, source_queue, shard FROM styx_dead_counts WHERE queue_id=$1 FOR UPDATE SKIP LOCKED) s
		WHERE c.queue_id=$1 AND c.reason=s.reason AND c.source_queue=s.source_queue AND c.shard=s.shard`, id)
	return wrap("delete queue", err)
}

// PutTask implements store.TaskStore.
func (s *Store) PutTask(ctx context.Context, t store.TaskRecord) error {
	_, err := execCommitted(ctx, s.pool, "put task", `INSERT INTO styx_tasks (id, queue, data) VALUES ($1, $2, $3)
		ON CONFLICT (id) DO UPDATE SET queue = excluded.queue, data = excluded.data`, []byte(t.ID), t.Queue, nonNil(t.Data))
	return wrap("put task", err)
}

// ListTasks implements store.TaskStore.
func (s *Store) ListTasks(ctx context.Context) ([]store.TaskRecord, error) {
	rows, err := s.pool.Query(ctx, `SELECT id, queue, data FROM styx_tasks ORDER BY id`)
	if err != nil {
		return nil, wrap("list tasks", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.TaskRecord, error) {
		var t store.TaskRecord
		var id []byte
		err := r.Scan(&id, &t.Queue, &t.Data)
		t.ID = string(id)
		return t, err
	})
	return out, wrap("list tasks", err)
}

// DeleteTask implements store.TaskStore.
func (s *Store) DeleteTask(ctx context.Context, id string) error {
	_, err := execCommitted(ctx, s.pool, "delete task", `DELETE FROM styx_tasks WHERE id=$1`, []byte(id))
	return wrap("delete task", err)
}

var (
	_ store.Catalog      = (*Store)(nil)
	_ store.TaskStore    = (*Store)(nil)
	_ store.TaskClaimer  = (*Store)(nil)
	_ store.ClaimChecker = (*Store)(nil)
)

// wrap classifies a driver error with the storage sentinels (the API code
// of each is transport's storage table): the database being unreachable,
// restarting or too slow is store.ErrUnavailable (453, naming the cause,
// safe to retry); a deadlock or serialization failure is store.ErrConflict
// (454); a foreign-key violation on an item means its queue was deleted
// (store.ErrQueueNotFound). An error already classified (or a client-facing
// apierr) is returned as is; anything else is an internal error.
func wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, store.ErrQueueNotFound) || errors.Is(err, store.ErrQueueExists) ||
		errors.Is(err, store.ErrUnavailable) || errors.Is(err, store.ErrConflict) {
		return err
	}
	if _, ok := apierr.As(err); ok {
		return err
	}
	where := "postgres: " + op
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch {
		case pgErr.Code == "23503": // foreign_key_violation
			return fmt.Errorf("%s: %w", where, store.ErrQueueNotFound)
		case pgErr.Code == fenceState: // styx_check_fence (fence.go)
			return moving(pgErr.Message)
		case pgErr.Code == "40001" || pgErr.Code == "40P01":
			return store.Conflict(where, sqlState{pgErr, ", retry"})
		case pgErr.Code[:2] == "08" || pgErr.Code[:2] == "57" || pgErr.Code[:2] == "53" || pgErr.Code == "25006":
			// connection exception, operator intervention (shutdown,
			// starting up), insufficient resources; and a write on a
			// server that is read-only (read_only_sql_transaction): a
			// standby, or one mid-promotion, that a connection reached
			// in a failover (ADR 0021): retryable, never a 500
			return store.Unavailable(where, sqlState{pgErr, ""})
		}
		return fmt.Errorf("%s: %w", where, err)
	}
	var netErr net.Error
	var connErr *pgconn.ConnectError
	if errors.As(err, &connErr) || errors.As(err, &netErr) || errors.Is(err, context.DeadlineExceeded) ||
		pgconn.SafeToRetry(err) || pgconn.Timeout(err) || isClosedConn(err) {
		return store.Unavailable(where, err)
	}
	return fmt.Errorf("%s: %w", where, err)
}

// sqlState is a PostgreSQL error as a storage error's cause: its message
// reads "<message> (<SQLSTATE>)<suffix>".
type sqlState struct {
	*pgconn.PgError
	suffix string
}

func (e sqlState) Error() string { return e.Message + " (" + e.Code + ")" + e.suffix }
func (e sqlState) Unwrap() error { return e.PgError }

// isClosedConn reports errors of a connection lost mid-statement, which pgx
// reports without a net.Error in the chain, and of a closed pool: by their
// sentinels and error numbers, never by their text. (A connection pgx found
// closed or busy before using it is pgconn.SafeToRetry.)
func isClosedConn(err error) bool {
	return errors.Is(err, pgconn.ErrConnClosed) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, puddle.ErrClosedPool)
}

func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// attemptError is the stored form of queue.AttemptError (column errors).
// DLQ marks an entry of the DLQ attempt history (queue.ItemErrors.DeadLetter);
// rows written before it existed have none.
type attemptError struct {
	Attempt int32  `json:"attempt"`
	Error   string `json:"error"`
	At      int64  `json:"at"`
	DLQ     bool   `json:"dlq,omitempty"`
}

// encodeErrors is the column errors of h: its attempt history, then its DLQ
// attempt history marked "dlq" (h.LastError has a column of its own).
func encodeErrors(h queue.ItemErrors) []byte {
	if len(h.Errors) == 0 && len(h.DeadLetter) == 0 {
		return nil
	}
	out := make([]attemptError, 0, len(h.Errors)+len(h.DeadLetter))
	for _, e := range h.Errors {
		out = append(out, attemptError{Attempt: e.Attempt, Error: e.Error, At: queue.Nanos(e.At)})
	}
	for _, e := range h.DeadLetter {
		out = append(out, attemptError{Attempt: e.Attempt, Error: e.Error, At: queue.Nanos(e.At), DLQ: true})
	}
	b, _ := json.Marshal(out) // cannot fail: strings and numbers
	return b
}

// decodeErrors is the history of an item whose columns last_error and
// errors hold lastError and b (encodeErrors).
func decodeErrors(lastError string, b []byte) (queue.ItemErrors, error) {
	h := queue.ItemErrors{LastError: lastError}
	if len(b) == 0 {
		return h, nil
	}
	var in []attemptError
	if err := json.Unmarshal(b, &in); err != nil {
		return h, fmt.Errorf("decode errors: %w", err)
	}
	for _, e := range in {
		a := queue.AttemptError{Attempt: e.Attempt, Error: e.Error, At: queue.FromNanos(e.At)}
		if e.DLQ {
			h.DeadLetter = append(h.DeadLetter, a)
		} else {
			h.Errors = append(h.Errors, a)
		}
	}
	return h, nil
}

// schemaChannel is the NOTIFY channel of a schema: Store.channel, and the
// one the transactional-enqueue function notifies (produceRules).
func schemaChannel(schema string) string {
	h := fnv.New32a()
	h.Write([]byte(schema))
	return fmt.Sprintf("styx_%08x", h.Sum32())
}

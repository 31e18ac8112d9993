package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/styxq/styx/internal/fifo"
)

// The SQS FIFO answers (fifo.Store; issue 51) on PostgreSQL: rows every
// node reads and writes, so that a deduplicated send answers the first
// send's MessageId and SequenceNumber on every node, a queue's
// SequenceNumbers increase across nodes, and a receive retried with its
// ReceiveRequestAttemptId on another node returns the first's messages.
//
//   - styx_sqs_sequences: a queue's last SequenceNumber. A send updates its
//     row (greatest(seq + 1, now)): sends to one queue take its row lock in
//     turn, for one statement each.
//   - styx_sqs_sends: per queue and deduplication id, the first send's
//     MessageId and SequenceNumber and the end of its window. Send is one
//     statement that takes the next number and inserts the record, or
//     takes over a record whose window ended, or returns the one recorded.
//   - styx_sqs_attempts: per queue, API key and attempt id, the receive
//     (token, its lease ids, the door's record of its messages, times,
//     modified). A row with received_at 0 is a receive in progress:
//     another node's BeginAttempt polls it (attemptPoll) until it has its
//     result, and takes it over once it is attemptStale old. Touch finds
//     rows by lease id (item ids are unique across queues) through a GIN
//     index on ids.
//
// Ended windows are deleted at most once a minute per node (sweepFIFO),
// rows another transaction holds skipped.
const fifoMigration = `
CREATE TABLE styx_sqs_sequences (
	queue_id bigint PRIMARY KEY REFERENCES styx_queues (id) ON DELETE CASCADE,
	seq      bigint NOT NULL
);
CREATE TABLE styx_sqs_sends (
	queue_id   bigint NOT NULL REFERENCES styx_queues (id) ON DELETE CASCADE,
	dedup_id   text   NOT NULL,
	message_id bytea  NOT NULL,
	seq        bigint NOT NULL,
	deadline   bigint NOT NULL,
	PRIMARY KEY (queue_id, dedup_id)
);
CREATE INDEX styx_sqs_sends_deadline ON styx_sqs_sends (deadline);
CREATE TABLE styx_sqs_attempts (
	queue_id    bigint   NOT NULL REFERENCES styx_queues (id) ON DELETE CASCADE,
	owner       text     NOT NULL,
	attempt_id  text     NOT NULL,
	token       text     NOT NULL,
	started     bigint   NOT NULL,
	until       bigint   NOT NULL,
	received_at bigint   NOT NULL DEFAULT 0,
	deadline    bigint   NOT NULL DEFAULT 0,
	partition   integer  NOT NULL DEFAULT 0,
	ids         bigint[] NOT NULL DEFAULT '{}',
	data        bytea,
	modified    boolean  NOT NULL DEFAULT false,
	PRIMARY KEY (queue_id, owner, attempt_id)
);
CREATE INDEX styx_sqs_attempts_ids ON styx_sqs_attempts USING gin (ids);
CREATE INDEX styx_sqs_attempts_until ON styx_sqs_attempts (until);`

// attemptPoll is how often BeginAttempt looks again at a receive in
// progress on another node; attemptStale is how long after its start such
// a receive counts as failed (its node gone): longer than SQS's longest
// poll (20 seconds) and its answer.
const (
	attemptPoll  = 20 * time.Millisecond
	attemptStale = time.Minute
)

// fifoSweepEvery is how often a node deletes ended FIFO records.
const fifoSweepEvery = time.Minute

var _ fifo.Store = (*Store)(nil)

// Send implements fifo.Store in one statement.
func (s *Store) Send(ctx context.Context, queue uint64, key string, id [16]byte, now time.Time, window time.Duration) (fifo.Sent, error) {
	s.sweepFIFO(ctx, now)
	var out fifo.Sent
	var mid []byte
	var seq int64
	err := s.pool.QueryRow(ctx, `WITH s AS (
			INSERT INTO styx_sqs_sequences AS q (queue_id, seq) VALUES ($1, $4)
			ON CONFLICT (queue_id) DO UPDATE SET seq = greatest(q.seq + 1, EXCLUDED.seq) RETURNING seq)
		INSERT INTO styx_sqs_sends AS d (queue_id, dedup_id, message_id, seq, deadline)
		SELECT $1, $2, $3, s.seq, $5 FROM s
		ON CONFLICT (queue_id, dedup_id) DO UPDATE SET
			message_id = CASE WHEN d.deadline <= $4 THEN EXCLUDED.message_id ELSE d.message_id END,
			seq = CASE WHEN d.deadline <= $4 THEN EXCLUDED.seq ELSE d.seq END,
			deadline = CASE WHEN d.deadline <= $4 THEN EXCLUDED.deadline ELSE d.deadline END
		RETURNING message_id, seq`,
		int64(queue), key, id[:], now.UnixNano(), now.Add(window).UnixNano()).Scan(&mid, &seq)
	if err != nil {
		return fifo.Sent{}, wrap("sqs send", err)
	}
	if len(mid) != len(out.MessageID) {
		return fifo.Sent{}, fmt.Errorf("postgres: sqs send: a message id of %d bytes", len(mid))
	}
	copy(out.MessageID[:], mid)
	out.Seq = uint64(seq)
	return out, nil
}

// BeginAttempt implements fifo.Store: an insert that takes over a row
// whose window ended, that the caller replaces, or whose receive is stale;
// else the row as recorded, polled while its receive is in progress.
func (s *Store) BeginAttempt(ctx context.Context, k fifo.AttemptKey, now time.Time, replace string) (fifo.Attempt, bool, error) {
	s.sweepFIFO(ctx, now)
	token := fifo.NewToken()
	start := time.Now() // the polls below move now on by the time they take
	for {
		at := now.Add(time.Since(start)).UnixNano()
		tag, err := s.pool.Exec(ctx, `INSERT INTO styx_sqs_attempts AS a (queue_id, owner, attempt_id, token, started, until)
			VALUES ($1, $2, $3, $4, $5, $6)
			ON CONFLICT (queue_id, owner, attempt_id) DO UPDATE SET token = EXCLUDED.token, started = EXCLUDED.started,
				until = EXCLUDED.until, received_at = 0, deadline = 0, partition = 0, ids = '{}', data = NULL, modified = false
			WHERE a.until <= $5 OR a.token = $7 OR (a.received_at = 0 AND a.started <= $8)`,
			int64(k.Queue), k.Owner, k.ID, token, at, now.Add(fifo.AttemptWindow).UnixNano(), replace, at-int64(attemptStale))
		if err != nil {
			return fifo.Attempt{}, false, wrap("sqs receive attempt", err)
		}
		if tag.RowsAffected() == 1 {
			return fifo.Attempt{Key: k, Token: token}, true, nil
		}
		a := fifo.Attempt{Key: k}
		var received, deadline int64
		err = s.pool.QueryRow(ctx, `SELECT token, received_at, deadline, partition, ids, data, modified FROM styx_sqs_attempts
			WHERE queue_id=$1 AND owner=$2 AND attempt_id=$3`, int64(k.Queue), k.Owner, k.ID).
			Scan(&a.Token, &received, &deadline, &a.Partition, &a.IDs, &a.Data, &a.Modified)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			continue // dropped meanwhile: start anew
		case err != nil:
			return fifo.Attempt{}, false, wrap("sqs receive attempt", err)
		case received != 0:
			a.ReceivedAt, a.Deadline = time.Unix(0, received), time.Unix(0, deadline)
			return a, false, nil
		}
		// In progress on another node (or this one): wait for its result.
		t := time.NewTimer(attemptPoll)
		select {
		case <-ctx.Done():
			t.Stop()
			return fifo.Attempt{}, false, ctx.Err()
		case <-t.C:
		}
	}
}

// FinishAttempt implements fifo.Store.
func (s *Store) FinishAttempt(ctx context.Context, a fifo.Attempt) error {
	if len(a.IDs) == 0 || a.Deadline.IsZero() {
		return s.DropAttempt(ctx, a.Key, a.Token)
	}
	tag, err := s.pool.Exec(ctx, `UPDATE styx_sqs_attempts SET received_at=$5, deadline=$6, partition=$7, ids=$8, data=$9
		WHERE queue_id=$1 AND owner=$2 AND attempt_id=$3 AND token=$4`,
		int64(a.Key.Queue), a.Key.Owner, a.Key.ID, a.Token, a.ReceivedAt.UnixNano(), a.Deadline.UnixNano(), a.Partition, a.IDs, a.Data)
	if err != nil {
		return wrap("sqs receive attempt", err)
	}
	if tag.RowsAffected() == 0 {
		return fifo.ErrGone
	}
	return nil
}

// DropAttempt implements fifo.Store.
func (s *Store) DropAttempt(ctx context.Context, k fifo.AttemptKey, token string) error {
	_, err := s.pool.Exec(ctx, `DELETE FROM styx_sqs_attempts WHERE queue_id=$1 AND owner=$2 AND attempt_id=$3 AND token=$4`,
		int64(k.Queue), k.Owner, k.ID, token)
	return wrap("sqs receive attempt", err)
}

// RenewAttempt implements fifo.Store.
func (s *Store) RenewAttempt(ctx context.Context, k fifo.AttemptKey, token string, deadline time.Time) error {
	tag, err := s.pool.Exec(ctx, `UPDATE styx_sqs_attempts SET deadline=$5 WHERE queue_id=$1 AND owner=$2 AND attempt_id=$3 AND token=$4`,
		int64(k.Queue), k.Owner, k.ID, token, deadline.UnixNano())
	if err != nil {
		return wrap("sqs receive attempt", err)
	}
	if tag.RowsAffected() == 0 {
		return fifo.ErrGone
	}
	return nil
}

// Touch implements fifo.Store: item ids are unique across queues and
// partitions, so the lease ids alone find the attempts.
func (s *Store) Touch(ctx context.Context, queue uint64, _ int32, ids []uint64) error {
	if len(ids) == 0 {
		return nil
	}
	_, err := s.pool.Exec(ctx, `UPDATE styx_sqs_attempts SET modified = true WHERE ids && $2::bigint[] AND queue_id=$1 AND NOT modified`,
		int64(queue), ids)
	return wrap("sqs receive attempt", err)
}

// sweepFIFO deletes ended sends and attempts, at most once every
// fifoSweepEvery and 10,000 of each at a time, skipping rows another
// transaction holds. A failure is left for the next sweep.
func (s *Store) sweepFIFO(ctx context.Context, now time.Time) {
	ns := now.UnixNano()
	last := s.fifoSwept.Load()
	if ns-last < int64(fifoSweepEvery) || !s.fifoSwept.CompareAndSwap(last, ns) {
		return
	}
	_, _ = s.pool.Exec(ctx, `DELETE FROM styx_sqs_sends WHERE (queue_id, dedup_id) IN (
		SELECT queue_id, dedup_id FROM styx_sqs_sends WHERE deadline <= $1 LIMIT 10000 FOR UPDATE SKIP LOCKED)`, ns)
	_, _ = s.pool.Exec(ctx, `DELETE FROM styx_sqs_attempts WHERE (queue_id, owner, attempt_id) IN (
		SELECT queue_id, owner, attempt_id FROM styx_sqs_attempts WHERE until <= $1 LIMIT 10000 FOR UPDATE SKIP LOCKED)`, ns)
}

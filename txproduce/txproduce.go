// Package txproduce produces Styx items inside the application's own
// PostgreSQL transaction, so that an item exists exactly when the
// application's rows do: it is visible to consumers when the transaction
// commits, and never if it rolls back (River's InsertTx, Oban, Graphile
// Worker and PGMQ offer the same).
//
// It calls styx_produce, the SQL function the Styx server's migrations
// install in the database and schema Styx uses (`--storage postgres`): the
// transaction must be on that database, with that schema on its
// search_path or named by Producer.Schema. The function applies the rules
// of a queue.produce: the same validation, partition choice,
// deduplication and wake-up of the consumers waiting on every node.
//
//	tx, _ := pool.Begin(ctx)
//	defer tx.Rollback(ctx)
//	_, _ = tx.Exec(ctx, `INSERT INTO orders (id, total) VALUES ($1, $2)`, id, total)
//	ids, err := txproduce.Produce(ctx, tx, "orders.created", []txproduce.Item{{Payload: body, Kind: "order.created"}})
//	if err != nil { return err }
//	return tx.Commit(ctx)
//
// The application's role needs USAGE on the schema and EXECUTE on
// styx_produce(text, jsonb), nothing else (docs/storage/postgres.md,
// "Transactional enqueue").
package txproduce

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/styxq/styx/internal/apierr"
	"github.com/styxq/styx/internal/queue"
)

// Item is one item to produce, as a queue.produce item.
type Item struct {
	// Payload is the item's body: at most 5 MB (5,242,880 bytes).
	Payload []byte
	// Kind, Encoding and Reference are free labels the consumer gets back:
	// at most 1024 bytes each, without control, bidi or zero-width
	// characters. Empty is allowed.
	Kind      string
	Encoding  string
	Reference string
	// EnqueueAt schedules the item: it becomes ready then. The zero time,
	// or a time less than 100ms from now, makes it ready at once. Between
	// 1677-09-21 and 2262-04-11 (the times Styx stores).
	EnqueueAt time.Time
	// DeduplicationID, when not empty, stores the item at most once per
	// deduplication window of its queue (5 minutes unless the queue sets
	// its own), across this function, queue.produce and every node: 1 to
	// 128 ASCII letters, digits and punctuation.
	DeduplicationID string
	// Group is the item's group, "" for none (docs/groups.md): 1 to 128
	// ASCII letters, digits and punctuation.
	Group string
}

// ID is an item id. String renders it as the API does (QueueLeaseItem.id),
// so it compares with the ids consumers lease.
type ID uint64

// String returns the id as the API writes it: 13 characters.
func (id ID) String() string { return queue.FormatID(uint64(id)) }

// ErrQueueNotFound is the sentinel of a produce into a queue that does not
// exist in the schema (errors.Is). The transaction is aborted: PostgreSQL
// refused a statement.
var ErrQueueNotFound = errors.New("queue does not exist")

// ErrInvalid is the sentinel of an item, or a list of items, that breaks
// a rule (errors.Is); the error is an *InvalidError.
var ErrInvalid = errors.New("invalid item")

// InvalidError is a produce refused because an item breaks a rule. Nothing
// of the produce was stored.
type InvalidError struct {
	// Field names what was refused: "items" (the list: empty, or more
	// than 1000), or one field of an item, as "items[3].kind".
	Field string
	// Message says what and why, worded as the API's answer: "invalid
	// items[3].kind; 1500 bytes, the limit is 1024".
	Message string
	// InTransaction reports that PostgreSQL refused it (styx_produce
	// checked it): the transaction is then aborted and can only be rolled
	// back. False when this package refused it before calling the
	// function: the transaction is untouched.
	InTransaction bool
	// Err is PostgreSQL's error (*pgconn.PgError) when InTransaction.
	Err error
}

// Error returns the message.
func (e *InvalidError) Error() string { return "txproduce: " + e.Message }

// Is reports whether target is ErrInvalid.
func (e *InvalidError) Is(target error) bool { return target == ErrInvalid }

// Unwrap returns PostgreSQL's error, nil when this package refused it.
func (e *InvalidError) Unwrap() error { return e.Err }

// queueError is the error of a produce into a queue that does not exist.
type queueError struct {
	msg string
	err error
}

func (e *queueError) Error() string        { return "txproduce: " + e.msg }
func (e *queueError) Is(target error) bool { return target == ErrQueueNotFound }
func (e *queueError) Unwrap() error        { return e.err }

// Producer produces items with styx_produce in a given schema.
type Producer struct {
	// Schema is the schema Styx uses (its connection's current schema,
	// the first of its search_path). Empty: the transaction's own
	// search_path finds styx_produce.
	Schema string
}

// Produce is Producer{}.Produce: styx_produce found on the transaction's
// search_path.
func Produce(ctx context.Context, tx pgx.Tx, queueName string, items []Item) ([]ID, error) {
	return Producer{}.Produce(ctx, tx, queueName, items)
}

// Produce stores items in queue queueName inside tx, in one statement,
// and returns their ids, one per item in the same order, increasing. The
// items are visible to consumers when tx commits (the consumers waiting on
// every Styx node are woken then) and never if it rolls back.
//
// An item whose DeduplicationID the queue accepted within its window is
// not stored again: its id is the first item's, 0 when that item was
// produced through the API (which does not record it). Within items, the
// first of an id is stored and the others get its id. A transaction that
// produces with a deduplication id holds it until it ends: another
// transaction, or a Styx node's produce, with the same id waits for it.
//
// The whole produce goes to the partition with the fewest ready items;
// items with a group to their group's partition.
//
// Errors: an *InvalidError (errors.Is ErrInvalid) when an item breaks a
// rule, checked here first with the server's rules (the transaction is
// untouched) and again by the function (the transaction is aborted);
// ErrQueueNotFound (errors.Is) when the queue does not exist (aborted);
// any other error of the database as pgx returns it. In every case
// nothing of the produce is stored. Produce may be called concurrently on
// different transactions, never on one transaction at once (pgx's rule).
func (p Producer) Produce(ctx context.Context, tx pgx.Tx, queueName string, items []Item) ([]ID, error) {
	if len(items) == 0 {
		return nil, &InvalidError{Field: "items", Message: "invalid items; at least one is required"}
	}
	if len(items) > queue.MaxBatch {
		return nil, &InvalidError{Field: "items", Message: "invalid items; " + strconv.Itoa(len(items)) + " given, the limit is " +
			strconv.Itoa(queue.MaxBatch)}
	}
	wire := make([]wireItem, len(items))
	for i := range items {
		it := &items[i]
		pi := queue.ProduceItem{Payload: it.Payload, Kind: it.Kind, Encoding: it.Encoding, Reference: it.Reference,
			EnqueueAt: it.EnqueueAt, DeduplicationID: it.DeduplicationID, Group: it.Group}
		if err := queue.CheckProduceItem(i, &pi); err != nil {
			return nil, invalid(err)
		}
		w := wireItem{Bytes: it.Payload, Kind: it.Kind, Encoding: it.Encoding, Reference: it.Reference,
			DeduplicationID: it.DeduplicationID, Group: it.Group}
		if !it.EnqueueAt.IsZero() {
			w.EnqueueAt = it.EnqueueAt.UTC().Format(time.RFC3339Nano)
		}
		wire[i] = w
	}
	body, err := json.Marshal(wire)
	if err != nil {
		return nil, err
	}
	fn := "styx_produce"
	if p.Schema != "" {
		fn = pgx.Identifier{p.Schema, "styx_produce"}.Sanitize()
	}
	var got []pgtype.Int8
	if err := tx.QueryRow(ctx, `SELECT `+fn+`($1, $2::jsonb)`, queueName, string(body)).Scan(&got); err != nil {
		return nil, fromSQL(err)
	}
	ids := make([]ID, len(got))
	for i, id := range got {
		if id.Valid {
			ids[i] = ID(id.Int64)
		}
	}
	return ids, nil
}

// wireItem is an item as styx_produce reads it (docs/storage/postgres.md).
type wireItem struct {
	Bytes           []byte `json:"bytes,omitempty"`
	Kind            string `json:"kind,omitempty"`
	Encoding        string `json:"encoding,omitempty"`
	Reference       string `json:"reference,omitempty"`
	EnqueueAt       string `json:"enqueue_at,omitempty"`
	DeduplicationID string `json:"deduplication_id,omitempty"`
	Group           string `json:"group,omitempty"`
}

// invalid is the *InvalidError of a refusal by queue.CheckProduceItem.
func invalid(err error) error {
	e := &InvalidError{Message: err.Error()}
	var f *queue.FieldError
	if errors.As(err, &f) {
		e.Field = f.Field
	}
	var ae *apierr.Error
	if errors.As(err, &ae) {
		e.Message = ae.Message
	}
	return e
}

// fromSQL maps styx_produce's refusals onto this package's errors.
func fromSQL(err error) error {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return err
	}
	switch {
	case pe.Code == "22023" && pe.ColumnName != "":
		return &InvalidError{Field: pe.ColumnName, Message: pe.Message, InTransaction: true, Err: err}
	case pe.Code == "P0001" && pe.TableName == "styx_queues":
		return &queueError{msg: pe.Message, err: err}
	}
	return err
}

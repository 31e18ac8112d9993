// Package fifo keeps what an SQS FIFO queue answers that its items do not
// hold (issue 51): the MessageId and SequenceNumber of a deduplicated send,
// the SequenceNumbers themselves, and the receive attempts a
// ReceiveRequestAttemptId names. The sqs door translates through Store;
// the rules (the windows, the order of the numbers) are the Store's, the
// same in both implementations: Memory (one node: the memory and Pebble
// backends) and the PostgreSQL backend's (internal/backend/postgres/
// fifo.go: shared by every node, so that one node's answer is every
// node's).
package fifo

import (
	"context"
	"errors"
	"time"
)

// AttemptWindow is how long a ReceiveRequestAttemptId names its receive:
// 5 minutes, SQS's.
const AttemptWindow = 5 * time.Minute

// ErrGone is DropAttempt's, FinishAttempt's and RenewAttempt's answer to
// an attempt that is no longer the one its key names (its window ended, or
// a retry replaced it).
var ErrGone = errors.New("fifo: receive attempt gone")

// Sent is the answer of a FIFO send: its MessageId (a UUID) and
// SequenceNumber.
type Sent struct {
	MessageID [16]byte
	Seq       uint64
}

// AttemptKey names a receive attempt: the queue (its id, so that a
// re-created queue starts anew), the API key that made it ("" without
// --auth) and the ReceiveRequestAttemptId.
type AttemptKey struct {
	Queue uint64
	Owner string
	ID    string
}

// Attempt is a receive made under an AttemptKey.
type Attempt struct {
	Key AttemptKey
	// Token names this receive under Key: a retry that replaces it, and
	// the calls that record its result, name it.
	Token string
	// Partition and IDs are the items the receive leased (their lease
	// ids); Data is the caller's record of them, opaque to the Store.
	Partition int32
	IDs       []uint64
	Data      []byte
	// ReceivedAt is the time of the receive; Deadline the end of the
	// visibility timeout it set (or a retry renewed).
	ReceivedAt, Deadline time.Time
	// Modified reports that one of its items was deleted or had its
	// visibility changed (Touch) since: it can no longer be retried.
	Modified bool
}

// Store keeps the FIFO answers. Its methods may be called concurrently
// from any goroutine, on a shared Store from every node at once; they
// return the context's error when ctx ends first, and a storage failure
// wrapped with the operation.
type Store interface {
	// Send answers a FIFO send of deduplication id key into queue at now,
	// whose queue keeps ids for window: the first send of key within its
	// window (counted from that send) answers id and a new SequenceNumber
	// and is recorded; a later one within the window answers the first's.
	// The SequenceNumbers of a queue increase with every call, on every
	// node: each is the larger of the queue's last one plus one and now in
	// Unix nanoseconds, so a group's messages sent one after another get
	// increasing numbers whichever node takes them.
	Send(ctx context.Context, queue uint64, key string, id [16]byte, now time.Time, window time.Duration) (Sent, error)
	// BeginAttempt returns the attempt k names within AttemptWindow, once
	// its receive has its result (waiting for it up to ctx), with fresh
	// false; or a new attempt for the caller's receive, with fresh true:
	// the caller then calls FinishAttempt (or DropAttempt) with its result.
	// replace, when not "", is the Token of a finished attempt the caller's
	// receive replaces (its visibility timeout passed). A receive that
	// has not recorded its result within a minute counts as failed.
	BeginAttempt(ctx context.Context, k AttemptKey, now time.Time, replace string) (a Attempt, fresh bool, err error)
	// FinishAttempt records a's result (Partition, IDs, Data, ReceivedAt,
	// Deadline). An attempt without items, or whose Deadline is zero (its
	// items visible at once), is forgotten: a retry is a new receive.
	FinishAttempt(ctx context.Context, a Attempt) error
	// DropAttempt forgets the attempt k names when its Token is token.
	DropAttempt(ctx context.Context, k AttemptKey, token string) error
	// RenewAttempt records that the items of the attempt are invisible
	// until deadline.
	RenewAttempt(ctx context.Context, k AttemptKey, token string, deadline time.Time) error
	// Touch marks Modified the attempts that hold any of the lease ids of
	// queue's partition: their items were deleted or had their visibility
	// changed.
	Touch(ctx context.Context, queue uint64, partition int32, ids []uint64) error
}

// nextSeq is the SequenceNumber rule of Store.Send: the larger of last+1
// and now (Unix ns).
func nextSeq(last uint64, now time.Time) uint64 { return max(last+1, uint64(now.UnixNano())) }

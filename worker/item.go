package worker

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"time"
)

// Item is one leased item as a handler sees it.
type Item struct {
	// Queue is the queue the item was leased from.
	Queue string
	// Partition is the partition that leased it.
	Partition int32
	// ID is the item's id in that partition; it changes each time the item
	// goes back to the queue.
	ID string
	// Attempts counts the deliveries so far, this one included: 1 on the
	// first delivery. An item released because an earlier item of its group
	// failed was not delivered: its attempt is not counted.
	Attempts int32
	// Group is the item's group as produced (QueueProduceItem.group), empty
	// for none. The worker runs the items of one group one at a time, in
	// lease order (see "Item groups" in the package comment).
	Group string
	// Kind, Reference and Encoding are as produced.
	Kind, Reference, Encoding string
	// Payload is the item's body.
	Payload []byte
	// LeaseDeadline is the lease deadline when the handler started. The
	// worker renews the lease while the handler runs, so the lease lasts
	// longer than this; Deadline returns the current deadline. (A field
	// that moved under a running handler would be a data race.)
	LeaseDeadline time.Time

	lease *lease
}

// Deadline returns the item's current lease deadline: LeaseDeadline moved
// forward by every renewal so far. Safe for concurrent use.
func (it *Item) Deadline() time.Time {
	if it.lease == nil {
		return it.LeaseDeadline
	}
	return it.lease.deadline()
}

// Handler processes one item. Its result decides what becomes of the item:
//   - nil: completed (deleted from the queue);
//   - an error: retried, with the error's text kept as the item's last error
//     and in its attempt history, after Config.Backoff; the attempt counts
//     toward the queue's max_attempts, so an item that keeps failing ends in
//     the dead-letter queue with its history;
//   - RetryAfter(d, err): retried after d instead of the backoff;
//   - Dead(err): dead-lettered now (reason "explicit"), err's text kept.
//
// A panic is recovered and treated as an error (see Config.PanicStackLines),
// whatever its value; so is a runtime.Goexit (t.FailNow in a handler), after
// which a new goroutine takes the handler's place. An error's text is kept
// as the server stores it: invalid UTF-8 replaced by U+FFFD, then cut on a
// rune boundary to 4096 bytes. An error whose Error method panics (a nil
// pointer of an error type) is recorded as such; Dead and RetryAfter are
// found as errors.As would, up to 100 errors deep, and not behind an Unwrap
// or As method that panics.
//
// ctx is cancelled when the lease is lost (ErrLeaseLost, see
// context.Cause) or when a shutdown outlasts Config.ShutdownTimeout.
type Handler interface {
	Handle(ctx context.Context, it *Item) error
}

// HandlerFunc is a function that implements Handler.
type HandlerFunc func(ctx context.Context, it *Item) error

// Handle calls f(ctx, it).
func (f HandlerFunc) Handle(ctx context.Context, it *Item) error { return f(ctx, it) }

// Middleware wraps a handler (logging, tracing, timeouts...). Config's
// Middleware are applied in order, the first one outermost.
type Middleware func(Handler) Handler

// ErrLeaseLost is the cause (context.Cause) of a handler's cancelled
// context when the worker could not renew the item's lease: the server
// refused the renewal (the lease had expired, so another consumer may hold
// the item now) or could not be reached before the deadline. The worker
// neither completes nor retries such an item; its handler should stop.
var ErrLeaseLost = errors.New("styx worker: lease lost")

// ErrShutdown is the cause of a handler's cancelled context when a
// shutdown outlasted Config.ShutdownTimeout. An item whose handler then
// returns an error is released (attempt not counted), not retried.
var ErrShutdown = errors.New("styx worker: shutdown timeout")

// deadError is the result of Dead.
type deadError struct{ err error }

func (e *deadError) Error() string {
	if e.err == nil {
		return "dead-lettered by the handler"
	}
	return errorString(e.err)
}
func (e *deadError) Unwrap() error { return e.err }

// Dead marks a handler's result as permanent: the item goes to the queue's
// dead-letter queue now (reason "explicit") with err's text as its last
// error, however many attempts it has left. Use it for items that can never
// succeed (malformed payloads). Without a dead_queue the server drops the
// item and the worker logs it at ERROR. err may be nil.
func Dead(err error) error { return &deadError{err: err} }

// retryAfterError is the result of RetryAfter.
type retryAfterError struct {
	d   time.Duration
	err error
}

func (e *retryAfterError) Error() string {
	if e.err == nil {
		return "retry requested by the handler"
	}
	return errorString(e.err)
}
func (e *retryAfterError) Unwrap() error { return e.err }

// RetryAfter marks a handler's result as a failed attempt to be retried
// after d (instead of Config.Backoff), for example after a rate-limit
// answer that says when to come back. The attempt counts toward
// max_attempts; err's text is kept as the item's last error. A d of zero or
// less retries at once. err may be nil.
func RetryAfter(d time.Duration, err error) error { return &retryAfterError{d: d, err: err} }

// DefaultBackoff is the default Config.Backoff: exponential with jitter.
// After the n-th failed attempt the item waits a random time in
// [b/2, b], where b = 1s × 2^(n-1), capped at 10 minutes: 0.5–1s after the
// first failure, 1–2s after the second, 2–4s, 4–8s, ... and 5–10 minutes
// from the eleventh on. The jitter spreads retries of items that failed
// together (an outage) so they do not come back together.
func DefaultBackoff(attempts int32) time.Duration {
	const base, limit = time.Second, 10 * time.Minute
	b := limit
	if attempts < 1 {
		attempts = 1
	}
	if attempts <= 10 {
		b = min(base<<(attempts-1), limit)
	}
	return b/2 + rand.N(b/2+1)
}

// lease is the renewal state of one leased item, shared by the handler's
// goroutine, the renewer and the acknowledger.
type lease struct {
	mu     sync.Mutex
	until  time.Time
	length time.Duration // the lease's length as first seen
}

func (l *lease) deadline() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.until
}

func (l *lease) extend(to time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if to.After(l.until) {
		l.until = to
	}
}

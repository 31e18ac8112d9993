package store

import "errors"

// Storage failures. A backend, or the engine over it, reports a failure of
// storage itself (not of the request) as an *Error whose Kind is one of
// these, so that callers test them with errors.Is and the server answers
// the same outage with the same code on every backend. The backends never
// build an API code: the one classification of every sentinel of this
// package, for both doors (/v1 and the SQS API), is internal/errclass
// (its storage table), by code and reason (docs/wire-contract.md):
//
//	ErrUnavailable    453 storage_unavailable: nothing acknowledged, retry
//	ErrConflict       454 storage_conflict: a concurrent transaction won, retry
//	ErrClosed         453 storage_unavailable (the server is shutting down)
//	ErrQueueNotFound  400 queue_not_found ("queue does not exist", as Querator)
//	ErrQueueExists    400 queue_exists ("queue already exists", as Querator)
//	ErrKeyNotFound    404 not_found ("api key not found")
//	ErrKeyExists      409 conflict ("api key already exists")
//
// The engines answer the queue and key sentinels themselves where they
// know the name (with Querator's messages); the table is what any of them
// that reaches a door is answered with. A classified failure (*Error) is
// answered with its own message, "<kind>; <op>: <cause>", built from its
// fields: Op should say where it happened, as context a caller wraps it in
// later is not shown to the client.
var (
	// ErrUnavailable: storage could not serve the request: the database is
	// unreachable, restarting, out of resources or too slow (a timeout, a
	// connection lost mid-statement), or the disk refused a write or an
	// fsync, or a read failed. Nothing of the request was acknowledged; it
	// may be retried (a produce whose fsync failed may still have been
	// stored, so a retry can store it twice: at-least-once). API code 453.
	ErrUnavailable = errors.New("storage unavailable")
	// ErrConflict: the database refused the request's transaction because
	// of a concurrent one (PostgreSQL serialization failure or deadlock,
	// SQLSTATE 40001 and 40P01). Nothing was applied; retry. API code 454.
	ErrConflict = errors.New("storage conflict")
)

// Error is a classified storage failure: Kind is ErrUnavailable or
// ErrConflict, Op says where it happened ("queue 'jobs'", "postgres: list
// queues"; may be empty) and Err is the cause from the driver or the disk.
// Its message, "<kind>; <op>: <cause>", is the client message of the
// failure (internal/errclass), as in "storage unavailable; queue 'jobs':
// sync: no space left on device", wherever in an error's chain it is.
// errors.Is matches both Kind and the cause's chain.
type Error struct {
	Kind error
	Op   string
	Err  error
}

// Error returns "<kind>; <op>: <cause>" ("<kind>; <cause>" with no Op).
func (e *Error) Error() string {
	if e.Op == "" {
		return e.Kind.Error() + "; " + e.Err.Error()
	}
	return e.Kind.Error() + "; " + e.Op + ": " + e.Err.Error()
}

// Unwrap returns Kind and the cause, for errors.Is and errors.As.
func (e *Error) Unwrap() []error { return []error{e.Kind, e.Err} }

// Unavailable returns an *Error of kind ErrUnavailable for op and cause err,
// or err itself when it is nil or already classified (an *Error in its
// chain), so a failure is classified once, where it is first seen.
func Unavailable(op string, err error) error { return classify(ErrUnavailable, op, err) }

// Conflict returns an *Error of kind ErrConflict for op and cause err, or
// err itself when it is nil or already classified.
func Conflict(op string, err error) error { return classify(ErrConflict, op, err) }

func classify(kind error, op string, err error) error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return err
	}
	return &Error{Kind: kind, Op: op, Err: err}
}

// Package errclass is the one classification of the errors the server
// answers. Every door asks Of for an error's class, its code, its reason and
// its client message, and only writes that class in its wire format: /v1
// (transport) as a duh.v1.Reply with details["reason"], the SQS API (sqs)
// as the SQS error type and status the class maps to. A door never looks at
// an error's text: the sentinels of internal/store, internal/queue,
// internal/redrive and internal/auth are recognised here with errors.Is.
// docs/wire-contract.md lists every reason.
package errclass

import (
	"context"
	"errors"

	"github.com/styxq/styx/internal/apierr"
	"github.com/styxq/styx/internal/auth"
	"github.com/styxq/styx/internal/queue"
	"github.com/styxq/styx/internal/redrive"
	"github.com/styxq/styx/internal/store"
)

// Reason is why a request failed, a stable snake_case word that clients
// decide by (the message is for people and may change). /v1 sends it as
// duh.v1.Reply.details["reason"]. Several reasons share a code; each
// belongs to exactly one code.
type Reason string

// The reasons, by code. docs/wire-contract.md explains each and whether to
// retry.
const (
	// InvalidArgument (400): the request breaks a rule not named below (a
	// field out of range, an id given twice, a malformed id, a dead_queue
	// whose redrive allow policy refuses the queue); the message names
	// the field.
	InvalidArgument Reason = "invalid_argument"
	// QueueNotFound (400): the queue the request names does not exist
	// (queue.ErrQueueNotFound, store.ErrQueueNotFound).
	QueueNotFound Reason = "queue_not_found"
	// QueueExists (400): a create names a queue that exists
	// (queue.ErrQueueExists, store.ErrQueueExists).
	QueueExists Reason = "queue_exists"
	// DeadQueueNotFound (400): a queue's dead_queue names a queue that does
	// not exist (queue.ErrDeadQueueNotFound).
	DeadQueueNotFound Reason = "dead_queue_not_found"
	// DestinationNotFound (400): a redrive's destination does not exist
	// (redrive.ErrDestinationNotFound).
	DestinationNotFound Reason = "destination_not_found"
	// NotDeadLetterQueue (400): a call on dead items names a queue no
	// queue names as its dead_queue (queue.ErrNotDeadLetterQueue).
	NotDeadLetterQueue Reason = "not_dead_letter_queue"
	// NotLeased (400): an id of a complete, retry or renew is not under a
	// live lease: its lease expired, or it was completed already
	// (queue.ErrNotLeased).
	NotLeased Reason = "not_leased"

	// Unauthorized (401): no API key, a malformed Authorization header, a
	// key the server does not know, or a SigV4 signature it refused.
	Unauthorized Reason = "unauthorized"
	// KeyRevoked (401): the request's key was deleted while the request
	// waited (auth.ErrKeyRevoked).
	KeyRevoked Reason = "key_revoked"
	// Forbidden (403): the key lacks the call's scope or does not cover its
	// queue, or a cross-site or non-loopback call to a server without
	// --auth.
	Forbidden Reason = "forbidden"
	// NotFound (404): a Styx resource does not exist: a redrive task, an
	// item, an API key (store.ErrKeyNotFound).
	NotFound Reason = "not_found"
	// BodyTimeout (408): the request's body did not arrive within the
	// server's body read timeout.
	BodyTimeout Reason = "body_timeout"
	// Conflict (409): the request conflicts with current state (an item
	// that is leased, a key name in use, a redrive task that is busy).
	Conflict Reason = "conflict"
	// TaskEnded (409): the redrive task has ended or is ending
	// (redrive.ErrTaskEnded).
	TaskEnded Reason = "task_ended"
	// MatchedChanged (409): the dead items a confirmed dead.delete or
	// dead.redrive matches are not as many as the client counted
	// (queue.ErrMatchedChanged).
	MatchedChanged Reason = "matched_changed"

	// StorageUnavailable (453): storage failed the request
	// (store.ErrUnavailable, store.ErrClosed); nothing was acknowledged,
	// but a write's outcome is unknown (a COMMIT that got no answer
	// included).
	StorageUnavailable Reason = "storage_unavailable"
	// ProduceTimeout (453): a produce's request_timeout passed before its
	// queue answered; its items may or may not be stored
	// (queue.ErrProduceTimeout).
	ProduceTimeout Reason = "produce_timeout"
	// QueueMoving (453): the queue is fenced while it moves to another
	// PostgreSQL cluster (queues.move, ADR 0023); nothing of the request
	// was written, retry (queue.ErrQueueMoving).
	QueueMoving Reason = "queue_moving"

	// Retry (454): retry later, for a cause not named below (an overloaded
	// queue, a server shutting down).
	Retry Reason = "retry"
	// StorageConflict (454): the database refused the transaction because
	// of a concurrent one; nothing was applied (store.ErrConflict).
	StorageConflict Reason = "storage_conflict"
	// RequestTimeout (454): a lease's request_timeout passed with nothing
	// to hand out (queue.ErrNoItems).
	RequestTimeout Reason = "request_timeout"
	// DeduplicationLimit (454): the queue holds as many deduplication ids
	// as the server allows; nothing of the produce was stored
	// (queue.ErrDeduplicationLimit).
	DeduplicationLimit Reason = "deduplication_limit"

	// BadContent (455): the body could not be decoded, or its
	// Content-Type or Accept is not supported.
	BadContent Reason = "bad_content"
	// Canceled (499): the client went away before the answer.
	Canceled Reason = "canceled"
	// Internal (500): an error the server did not classify; it is logged,
	// and answered without detail.
	Internal Reason = "internal"
	// Unimplemented (501): no such method, or one this server does not
	// serve.
	Unimplemented Reason = "unimplemented"
	// Overloaded (503): the server cannot admit the request now (its
	// in-flight byte budget, or its connections, are full).
	Overloaded Reason = "overloaded"
	// Unknown: an apierr code with no reason of its own (none today).
	Unknown Reason = "unknown"
)

// Class is how an error is answered, on every door.
type Class struct {
	// Code is the DUH-RPC code, and the HTTP status of /v1.
	Code apierr.Code
	// Reason is the stable word clients decide by.
	Reason Reason
	// Message is the client message, "<what>; <detail>"; for an internal
	// error it gives no detail.
	Message string
}

// Internal reports whether the error is internal (500): the door logs it.
func (c Class) Internal() bool { return c.Code == apierr.Internal }

// refined gives an apierr.Error its reason by the sentinel in its chain
// (errors.Is); the code is the error's own. The first match wins.
var refined = []struct {
	err    error
	reason Reason
}{
	{queue.ErrQueueNotFound, QueueNotFound},
	{queue.ErrQueueExists, QueueExists},
	{queue.ErrDeadQueueNotFound, DeadQueueNotFound},
	{redrive.ErrDestinationNotFound, DestinationNotFound},
	{queue.ErrNotDeadLetterQueue, NotDeadLetterQueue},
	{queue.ErrNotLeased, NotLeased},
	{auth.ErrKeyRevoked, KeyRevoked},
	{redrive.ErrTaskEnded, TaskEnded},
	{queue.ErrMatchedChanged, MatchedChanged},
	{queue.ErrNoItems, RequestTimeout},
	{queue.ErrProduceTimeout, ProduceTimeout},
	{queue.ErrQueueMoving, QueueMoving},
	{queue.ErrDeduplicationLimit, DeduplicationLimit},
}

// byCode is the reason of an apierr.Error no sentinel of refined refines.
var byCode = map[apierr.Code]Reason{
	apierr.Invalid:        InvalidArgument,
	apierr.Unauthorized:   Unauthorized,
	apierr.Forbidden:      Forbidden,
	apierr.NotFound:       NotFound,
	apierr.RequestTimeout: BodyTimeout,
	apierr.Conflict:       Conflict,
	apierr.Unavailable:    StorageUnavailable,
	apierr.Retry:          Retry,
	apierr.BadContent:     BadContent,
	apierr.Canceled:       Canceled,
	apierr.Internal:       Internal,
	apierr.NotImplemented: Unimplemented,
	apierr.Overloaded:     Overloaded,
}

// storage classifies the sentinels of internal/store, which the backends
// return without an API code (they never build one). The first entry the
// error's chain holds wins, so a classified failure (a *store.Error of
// kind ErrUnavailable or ErrConflict) is answered by its kind, whatever its
// cause. what starts the client message, "<what>; <error>".
var storage = []struct {
	err    error
	code   apierr.Code
	reason Reason
	what   string
}{
	{store.ErrUnavailable, apierr.Unavailable, StorageUnavailable, "storage unavailable"},
	{store.ErrConflict, apierr.Retry, StorageConflict, "storage conflict"},
	{store.ErrClosed, apierr.Unavailable, StorageUnavailable, "storage unavailable"},
	{store.ErrQueueNotFound, apierr.Invalid, QueueNotFound, "queue does not exist"},
	{store.ErrQueueExists, apierr.Invalid, QueueExists, "queue already exists"},
	{store.ErrKeyNotFound, apierr.NotFound, NotFound, "api key not found"},
	{store.ErrKeyExists, apierr.Conflict, Conflict, "api key already exists"},
}

// Of classifies err (not nil), in this order:
//   - an apierr.Error in its chain keeps its code and message; its reason
//     is its sentinel's (refined), else its code's;
//   - a storage failure: a *store.Error is answered by its kind with its
//     own message, "<kind>; <where>: <cause>" (what the backend that first
//     saw the failure built, store.Error.Error; context a caller wrapped
//     it in later is not shown); any other sentinel of internal/store by
//     the storage table, "<what>; <error>";
//   - a context the client ended (context.Canceled, DeadlineExceeded): 499;
//   - anything else is internal: 500, "internal error; see the server log".
func Of(err error) Class {
	if e, ok := apierr.As(err); ok {
		return Class{Code: e.Code, Reason: reasonOf(err, e.Code), Message: e.Message}
	}
	var se *store.Error
	if errors.As(err, &se) {
		for _, s := range storage {
			if errors.Is(se.Kind, s.err) {
				return Class{Code: s.code, Reason: s.reason, Message: se.Error()}
			}
		}
	}
	for _, s := range storage {
		if errors.Is(err, s.err) {
			return Class{Code: s.code, Reason: s.reason, Message: s.what + "; " + err.Error()}
		}
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return Class{Code: apierr.Canceled, Reason: Canceled, Message: "request canceled; the client went away"}
	}
	return Class{Code: apierr.Internal, Reason: Internal, Message: "internal error; see the server log"}
}

// reasonOf returns the reason of an apierr error of code: its sentinel's,
// else its code's, else Unknown.
func reasonOf(err error, code apierr.Code) Reason {
	for _, r := range refined {
		if errors.Is(err, r.err) {
			return r.reason
		}
	}
	if r, ok := byCode[code]; ok {
		return r
	}
	return Unknown
}

// Reasons returns every reason Of may answer, by code then as declared
// above, for tests and docs to check against.
func Reasons() []Reason {
	return []Reason{
		InvalidArgument, QueueNotFound, QueueExists, DeadQueueNotFound, DestinationNotFound, NotDeadLetterQueue, NotLeased,
		Unauthorized, KeyRevoked, Forbidden, NotFound, BodyTimeout, Conflict, TaskEnded, MatchedChanged,
		StorageUnavailable, ProduceTimeout, QueueMoving, Retry, StorageConflict, RequestTimeout, DeduplicationLimit,
		BadContent, Canceled, Internal, Unimplemented, Overloaded, Unknown,
	}
}

// Package apierr defines the one client-facing error type of the server. An
// error of this type carries a stable Code and a message that is safe to show
// the client. Which code, reason and message every error is answered with,
// this type or not, is decided in one place, internal/errclass; the doors
// (transport for /v1, sqs) only write that class in their wire format. Any
// error errclass does not know is internal: it is logged and answered with
// 500 and no detail.
package apierr

import (
	"errors"
	"fmt"
)

// Code is a client-facing error class; its value is the DUH-RPC code (and
// so the HTTP status) it is answered with.
type Code int

// The codes of docs/wire-contract.md.
const (
	// Invalid: the request breaks a rule (400).
	Invalid Code = 400
	// Unauthorized: the request carries no API key, a malformed
	// Authorization header, or a key the server does not know (401).
	Unauthorized Code = 401
	// Forbidden: the request's API key lacks the scope the call needs, or
	// does not cover its queue (403). The message names the scope.
	Forbidden Code = 403
	// NotFound: a Styx resource, such as a redrive task, does not exist
	// (404). A queue that does not exist is Invalid (400), as in Querator.
	NotFound Code = 404
	// Conflict: the request conflicts with current state, e.g. a queue
	// that already exists (409).
	Conflict Code = 409
	// Unavailable: the request failed because a dependency is down, e.g.
	// the PostgreSQL database; the message names the cause. Nothing was
	// acknowledged, so the client may retry (453, "request failed").
	Unavailable Code = 453
	// Retry: nothing to hand out before the request timeout, or the queue is
	// overloaded; the client should retry (454).
	Retry Code = 454
	// Overloaded: the server cannot admit the request now (its in-flight
	// request byte budget is full); nothing was done, and the answer
	// carries Retry-After (503, HTTP's code).
	Overloaded Code = 503
	// BadContent: the body could not be decoded (455).
	BadContent Code = 455
	// RequestTimeout: the request's body did not arrive within the
	// server's body read timeout (408, HTTP's code: DUH-RPC has none for
	// it). The server closes the connection after answering.
	RequestTimeout Code = 408
	// Canceled: the client went away before the answer (499, nginx's
	// code); it never reads the answer, which only the metrics count.
	Canceled Code = 499
	// Internal: anything without a code of its own, a bug or a failure
	// the server did not classify (500). The server logs it and answers
	// no detail.
	Internal Code = 500
	// NotImplemented: no such method, or a method this server does not
	// serve (501).
	NotImplemented Code = 501
)

// Error is a client-facing error. Message reads "<what>; <detail>", as in
// "invalid queue_name; ” must be 1..512 characters".
type Error struct {
	Code    Code
	Message string
	// Err is the sentinel the error is an instance of, such as
	// queue.ErrQueueNotFound, a typed detail such as
	// *queue.OtherQueuesError, or nil: errors.Is(e, Err) (errors.As for a
	// type) holds, so a door recognises an error by its sentinel and never
	// by its message text. It is not shown to the client.
	Err error
}

// Error returns the message.
func (e *Error) Error() string { return e.Message }

// Unwrap returns Err.
func (e *Error) Unwrap() error { return e.Err }

// New returns an Error with a formatted message.
func New(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Wrap returns an Error with a formatted message whose chain holds sentinel
// (errors.Is(err, sentinel)).
func Wrap(sentinel error, code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...), Err: sentinel}
}

// Invalidf returns an Invalid (400) error.
func Invalidf(format string, args ...any) *Error { return New(Invalid, format, args...) }

// As returns the client-facing error in err's chain, if any.
func As(err error) (*Error, bool) {
	var e *Error
	ok := errors.As(err, &e)
	return e, ok
}

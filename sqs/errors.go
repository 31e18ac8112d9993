package sqs

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/styxq/styx/internal/apierr"
	"github.com/styxq/styx/internal/auth"
	"github.com/styxq/styx/internal/errclass"
)

// Error is an SQS error as the JSON protocol answers it.
type Error struct {
	// Type is the error's shape name in the SQS model (QueueDoesNotExist,
	// InvalidParameterValue…), sent as "com.amazonaws.sqs#<Type>".
	Type string
	// Query is the legacy (query protocol) code the SDKs read from the
	// x-amzn-query-error header; empty means Type.
	Query string
	// Status is the HTTP status.
	Status  int
	Message string
}

func (e *Error) Error() string { return e.Type + ": " + e.Message }

func (e *Error) queryCode() string {
	if e.Query != "" {
		return e.Query
	}
	return e.Type
}

// errNoQueue is SQS's answer for a queue that does not exist.
var errNoQueue = &Error{Type: "QueueDoesNotExist", Query: "AWS.SimpleQueueService.NonExistentQueue", Status: http.StatusBadRequest,
	Message: "The specified queue does not exist."}

func invalidParameter(format string, args ...any) *Error {
	return &Error{Type: "InvalidParameterValue", Status: http.StatusBadRequest, Message: fmt.Sprintf(format, args...)}
}

func missingParameter(name string) *Error {
	return &Error{Type: "MissingParameter", Status: http.StatusBadRequest,
		Message: fmt.Sprintf("The request must contain the parameter %s.", name)}
}

// messageNotInflight is SQS's answer to a visibility change of a message
// that is not in flight: the receive the handle names has ended.
var messageNotInflight = &Error{Type: "MessageNotInflight", Query: "AWS.SimpleQueueService.MessageNotInflight", Status: http.StatusBadRequest,
	Message: "The message referred to isn't in flight."}

func invalidAddress(u string) *Error {
	return &Error{Type: "InvalidAddress", Status: http.StatusNotFound, Message: fmt.Sprintf("The address %s is not valid for this endpoint.", u)}
}

func invalidAttributeName(format string, args ...any) *Error {
	return &Error{Type: "InvalidAttributeName", Status: http.StatusBadRequest, Message: fmt.Sprintf(format, args...)}
}

func invalidAttributeValue(format string, args ...any) *Error {
	return &Error{Type: "InvalidAttributeValue", Status: http.StatusBadRequest, Message: fmt.Sprintf(format, args...)}
}

// errReceiptHandleInvalid answers a receipt handle that is malformed or of
// another queue, in SQS's words.
var errReceiptHandleInvalid = &Error{Type: "ReceiptHandleIsInvalid", Status: http.StatusNotFound,
	Message: "The input receipt handle is invalid."}

// batch errors (AWS.SimpleQueueService.<Type>).
func batchError(typ, format string, args ...any) *Error {
	return &Error{Type: typ, Query: "AWS.SimpleQueueService." + typ, Status: http.StatusBadRequest, Message: fmt.Sprintf(format, args...)}
}

// toError maps any error onto the SQS error answered for it: an *Error as
// it is, a SigV4 refusal as the AWS error it names (403); any other error
// by its class, internal/errclass's one classification of both doors
// (its code and reason, with its message):
//
//	queue_not_found              QueueDoesNotExist (400)
//	key_revoked                  InvalidClientTokenId (403)
//	400, 455, 409                InvalidParameterValue (400)
//	453, 454, 503                ServiceUnavailable (503, which the SDKs retry)
//	401, 403                     AccessDenied (403)
//	408                          RequestTimeout (408)
//	404                          ResourceNotFoundException (404)
//	499 (the client went away)   RequestCanceled (499, as /v1 counts it)
//	anything else (500, 501)     InternalFailure (500, no detail; true: log it)
func toError(err error) (*Error, bool) {
	var e *Error
	if errors.As(err, &e) {
		return e, false
	}
	if se, ok := auth.IsSigV4Error(err); ok {
		return &Error{Type: se.Code, Status: http.StatusForbidden, Message: se.Message}, false
	}
	c := errclass.Of(err)
	switch {
	case c.Reason == errclass.QueueNotFound:
		return errNoQueue, false
	case c.Reason == errclass.KeyRevoked:
		return &Error{Type: "InvalidClientTokenId", Status: http.StatusForbidden,
			Message: "The security token included in the request is invalid: " + c.Message}, false
	}
	switch c.Code {
	case apierr.Invalid, apierr.BadContent, apierr.Conflict:
		return invalidParameter("%s", c.Message), false
	case apierr.Unavailable, apierr.Retry, apierr.Overloaded:
		return &Error{Type: "ServiceUnavailable", Status: http.StatusServiceUnavailable, Message: c.Message}, false
	case apierr.Unauthorized, apierr.Forbidden:
		return &Error{Type: "AccessDenied", Status: http.StatusForbidden, Message: c.Message}, false
	case apierr.RequestTimeout:
		return &Error{Type: "RequestTimeout", Status: http.StatusRequestTimeout, Message: c.Message}, false
	case apierr.NotFound:
		return &Error{Type: "ResourceNotFoundException", Status: http.StatusNotFound, Message: c.Message}, false
	case apierr.Canceled:
		// The client went away (its answer is never read): 499, counted
		// as the transport counts a /v1 request whose client left.
		return &Error{Type: "RequestCanceled", Status: int(apierr.Canceled), Message: c.Message}, false
	}
	return &Error{Type: "InternalFailure", Status: http.StatusInternalServerError,
		Message: "The request processing has failed because of an unknown error."}, true
}

// writeJSONError answers e in the JSON protocol.
func writeJSONError(w http.ResponseWriter, e *Error) {
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	w.Header().Set("x-amzn-query-error", e.queryCode()+";"+fault(e.Status))
	w.WriteHeader(e.Status)
	b, _ := json.Marshal(map[string]string{"__type": "com.amazonaws.sqs#" + e.Type, "message": e.Message})
	_, _ = w.Write(b)
}

func fault(status int) string {
	if status >= 500 {
		return "Receiver"
	}
	return "Sender"
}

package queue

import (
	"errors"
	"strconv"
	"strings"

	"github.com/styxq/styx/internal/apierr"
	"github.com/styxq/styx/internal/text"
)

// The rules of a produced item, written once for every way an item is
// produced: the /v1 door (service.QueueProduce), the Go helper of a produce
// inside the application's PostgreSQL transaction (package txproduce), and
// the SQL function styx_produce, whose limits the PostgreSQL backend writes
// from these constants into styx_settings at every start (ADR 0028).
const (
	// MaxBatch is the most items (or ids) one produce, lease, complete,
	// retry or delete may carry.
	MaxBatch = 1000
	// MaxPayloadBytes is the largest item payload, in bytes: 5 MB.
	MaxPayloadBytes = 5 << 20
	// MaxFieldLength bounds an item's kind, encoding and reference (and a
	// lease's client_id), in bytes.
	MaxFieldLength = 1024
)

// FieldError is the detail (apierr.Error.Err) of an item refused by
// CheckProduceItem: Field names the field refused, as the message does
// ("items[3].kind").
type FieldError struct {
	Field string
}

// Error returns the field's name.
func (e *FieldError) Error() string { return "invalid " + e.Field }

// invalidField is an apierr.Invalid error "invalid <field>; <detail>" whose
// chain holds a *FieldError naming field.
func invalidField(field, detail string) error {
	return &apierr.Error{Code: apierr.Invalid, Message: "invalid " + field + "; " + detail, Err: &FieldError{Field: field}}
}

// CheckProduceItem returns an apierr.Invalid error naming the first field
// of it, item i of a produce, that breaks a rule, or nil: the payload at
// most MaxPayloadBytes (field "items[i].bytes"); kind, encoding and
// reference at most MaxFieldLength bytes each, with no hidden character
// (internal/text); the deduplication id and the group by
// CheckDeduplicationID and CheckGroup; enqueue_at within MinTime..MaxTime
// (CheckTime; zero is unset). errors.As finds a *FieldError in the error.
func CheckProduceItem(i int, it *ProduceItem) error {
	prefix := func(name string) string { return "items[" + strconv.Itoa(i) + "]." + name }
	if len(it.Payload) > MaxPayloadBytes {
		return invalidField(prefix("bytes"), "payload is "+strconv.Itoa(len(it.Payload))+" bytes, the limit is "+
			strconv.Itoa(MaxPayloadBytes)+" (5 MB)")
	}
	for _, f := range [...]struct{ name, v string }{{"kind", it.Kind}, {"encoding", it.Encoding}, {"reference", it.Reference}} {
		if len(f.v) > MaxFieldLength {
			return invalidField(prefix(f.name), strconv.Itoa(len(f.v))+" bytes, the limit is "+strconv.Itoa(MaxFieldLength))
		}
		if err := text.Check(f.v); err != nil {
			return invalidField(prefix(f.name), "'"+quote(text.Escape(f.v))+"' holds "+err.Error()+"; "+text.Rule)
		}
	}
	// The checks run with a short field name first, so that an item that
	// passes builds no string; a refusal is worded with the full one.
	if it.DeduplicationID != "" && CheckDeduplicationID("deduplication_id", it.DeduplicationID) != nil {
		return withField(CheckDeduplicationID(prefix("deduplication_id"), it.DeduplicationID), prefix("deduplication_id"))
	}
	if it.Group != "" && CheckGroup("group", it.Group) != nil {
		return withField(CheckGroup(prefix("group"), it.Group), prefix("group"))
	}
	if !TimeInRange(it.EnqueueAt) {
		return withField(CheckTime(prefix("enqueue_at"), it.EnqueueAt), prefix("enqueue_at"))
	}
	return nil
}

// withField sets the detail of err, an *apierr.Error without one, to a
// *FieldError naming field.
func withField(err error, field string) error {
	var e *apierr.Error
	if errors.As(err, &e) && e.Err == nil {
		return &apierr.Error{Code: e.Code, Message: e.Message, Err: &FieldError{Field: field}}
	}
	return err
}

// quote shortens s to 64 bytes for a message and makes it valid UTF-8.
func quote(s string) string {
	if len(s) > 64 {
		s = s[:64] + "…"
	}
	return strings.ToValidUTF8(s, "?")
}

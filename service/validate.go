package service

import (
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/styxq/styx/internal/apierr"
	"github.com/styxq/styx/internal/queue"
	"github.com/styxq/styx/internal/text"
)

// Limits of the wire contract (docs/wire-contract.md) and of Styx.
const (
	// MaxBatch is the most items (or ids) one produce, lease, complete,
	// retry, import or delete may carry.
	MaxBatch = queue.MaxBatch
	// MaxNameLength is the longest queue name, in characters.
	MaxNameLength = 512
	// MaxNamespaceLength is the longest namespace, in bytes (Querator's
	// limit, which it counts in bytes too).
	MaxNamespaceLength = 256
	// MaxPayloadBytes is the largest item payload: 5 MB.
	MaxPayloadBytes = queue.MaxPayloadBytes
	// MaxFieldLength bounds kind, encoding, reference and client_id, in bytes.
	MaxFieldLength = queue.MaxFieldLength
	// MaxErrorBytes bounds a retry's error text.
	MaxErrorBytes = 4096
	// MaxAttemptErrors is the most attempt errors one imported item may
	// carry.
	MaxAttemptErrors = 10
	// MinRequestTimeout and MaxRequestTimeout bound the request_timeout
	// of a produce or a lease (both inclusive), which is required, as in
	// Querator: 10ms and 15m.
	MinRequestTimeout = 10 * time.Millisecond
	MaxRequestTimeout = 15 * time.Minute
	// MaxImportItems is the most items one storage/items.import may carry
	// (Querator has no count limit on import, only the request size; its
	// storage tests import 10,000 at once). The request's byte limit
	// (--max-request-bytes) applies too, and the count is checked before
	// the body is decoded.
	MaxImportItems = 100_000
	// MaxAttempts is the largest max_attempts (0 is unlimited).
	MaxAttempts = queue.MaxAttempts
	// MaxExpireTimeout is the longest expire_timeout (and lease_timeout):
	// one year. Both have no lower bound but must be above 0: sub-second
	// leases are legal, as in Querator.
	MaxExpireTimeout = 8760 * time.Hour
	// MaxPartitions is the most partitions a queue may have.
	MaxPartitions = 256
	// MaxRetryAtPast is how far in the past a retry_at may be before it is
	// refused as a likely clock or encoding error.
	MaxRetryAtPast = time.Hour
	// DefaultListLimit and MaxListLimit bound the limit of Querator's list
	// calls (storage/items.list, storage/scheduled.list, queues.list): 0
	// means DefaultListLimit, and MaxListLimit is the most Querator accepts.
	DefaultListLimit = 1000
	MaxListLimit     = 65536
	// DefaultDeadListLimit and MaxDeadListLimit bound dead.list's limit (a
	// Styx call, whose pages carry payloads and attempt histories).
	DefaultDeadListLimit = 100
	MaxDeadListLimit     = 1000
)

// Queue defaults when a field is omitted on create.
const (
	DefaultLeaseTimeout  = time.Minute
	DefaultExpireTimeout = 336 * time.Hour
)

func invalid(field, format string, args ...any) error {
	return apierr.Invalidf("invalid %s; %s", field, fmt.Sprintf(format, args...))
}

// checkName validates a queue name in field.
func checkName(field, name string) error {
	if name == "" {
		return invalid(field, "a queue name is required")
	}
	if n := utf8.RuneCountInString(name); n > MaxNameLength {
		return invalid(field, "'%s…' is %d characters, the limit is %d", name[:32], n, MaxNameLength)
	}
	if !utf8.ValidString(name) {
		return invalid(field, "'%q' is not valid UTF-8", name)
	}
	if err := text.Check(name); err != nil {
		return invalid(field, "'%s' holds %v; %s", quote(text.Escape(name)), err, text.Rule)
	}
	for _, r := range name {
		if unicode.IsSpace(r) {
			return invalid(field, "'%s' contains whitespace or a control character", name)
		}
		if r == '~' {
			return invalid(field, "'%s' contains '~', which queue names cannot", name)
		}
	}
	return nil
}

// checkNamespace validates a queue's namespace in field (Querator's rules):
// 1..MaxNamespaceLength bytes of valid UTF-8 without whitespace, control
// characters, '~' or ':', and without hidden characters (internal/text, as
// queue names). A leading '_' is reserved: queue.DefaultNamespace
// is the only such namespace a queue may name.
func checkNamespace(field, ns string) error {
	if ns == "" {
		return invalid(field, "a namespace is required")
	}
	if len(ns) > MaxNamespaceLength {
		return invalid(field, "'%s' is %d bytes, the limit is %d", quote(ns), len(ns), MaxNamespaceLength)
	}
	if !utf8.ValidString(ns) {
		return invalid(field, "%q is not valid UTF-8", ns)
	}
	for _, r := range ns {
		if unicode.IsSpace(r) || unicode.IsControl(r) {
			return invalid(field, "'%s' contains whitespace or a control character", ns)
		}
		if r == '~' || r == ':' {
			return invalid(field, "'%s' contains '%c', which namespaces cannot", ns, r)
		}
	}
	// After Querator's own checks, so that its messages stay word for word.
	if err := text.Check(ns); err != nil {
		return invalid(field, "'%s' holds %v; %s", quote(text.Escape(ns)), err, text.Rule)
	}
	if strings.HasPrefix(ns, "_") && ns != queue.DefaultNamespace {
		return invalid(field, "'%s' starts with '_', which is reserved; the only such namespace is '%s'", ns, queue.DefaultNamespace)
	}
	return nil
}

// checkIdent validates an identifier-like string in field (kind, encoding,
// reference, client_id, source_id): at most limit bytes, no hidden
// character. The answer names the field, the character and the rule.
func checkIdent(field, s string, limit int) error {
	if err := checkFreeText(field, s, limit); err != nil {
		return err
	}
	if err := text.Check(s); err != nil {
		return invalid(field, "'%s' holds %v; %s", quote(text.Escape(s)), err, text.Rule)
	}
	return nil
}

// checkFreeText validates free text in field (a retry's error, a filter's
// search text): only its length. Free text may hold anything; whatever
// shows it escapes it (text.Escape).
func checkFreeText(field, s string, limit int) error {
	if len(s) > limit {
		return invalid(field, "%d bytes, the limit is %d", len(s), limit)
	}
	return nil
}

// parsePositiveDuration parses a Go duration string in field that must be
// above 0 and at most hi.
func parsePositiveDuration(field, s string, hi time.Duration) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, invalid(field, "'%s' is not a duration such as '30s' or '1m30s'", s)
	}
	if d <= 0 || d > hi {
		return 0, invalid(field, "%s is out of range; it must be above 0 and at most %s", d, hi)
	}
	return d, nil
}

// msgRequestTimeoutRequired is Querator's answer to a produce or lease
// without request_timeout (or with a zero one), word for word.
const msgRequestTimeoutRequired = "request timeout is required; '5m' is recommended, 15m is the maximum"

// parseRequestTimeout parses the request_timeout of a produce or a lease:
// 0 for an empty one (checkRequestTimeout refuses it), and Querator's
// message for one that does not parse.
func parseRequestTimeout(s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, apierr.Invalidf("request timeout is invalid; %s - expected format: 900ms, 5m or 15m", err)
	}
	return d, nil
}

// checkRequestTimeout refuses a produce's or lease's request_timeout that
// is missing (0), over MaxRequestTimeout or under MinRequestTimeout, with
// Querator's messages word for word. Querator's lease message for a
// timeout too long says "but '16m0s' requested" where its produce message
// says "was requested": was is that word, "" for a lease.
func checkRequestTimeout(d time.Duration, was string) error {
	switch {
	case d == 0:
		return apierr.Invalidf(msgRequestTimeoutRequired)
	case d > MaxRequestTimeout:
		return apierr.Invalidf("request timeout is invalid; maximum timeout is '15m' but '%s' %srequested", d, was)
	case d < MinRequestTimeout:
		return apierr.Invalidf("request timeout is invalid; minimum timeout is '10ms' but '%s' was requested", d)
	}
	return nil
}

// timestamp converts the time a client sent in field: nil, and Go's zero
// time (0001-01-01T00:00:00Z, which Querator's clients send for an unset
// time), are the zero time (unset); a malformed timestamp, or one outside the range storage keeps
// (queue.MinTime..queue.MaxTime, 1677-09-21..2262-04-11), is an
// apierr.Invalid error naming field.
func timestamp(field string, ts *timestamppb.Timestamp) (time.Time, error) {
	if ts == nil {
		return time.Time{}, nil
	}
	if err := ts.CheckValid(); err != nil {
		return time.Time{}, invalid(field, "%v", err)
	}
	t := ts.AsTime()
	if t.IsZero() {
		return time.Time{}, nil
	}
	return t, queue.CheckTime(field, t)
}

// checkBatch validates a batch's size.
func checkBatch(field string, n int) error {
	return checkCount(field, n, MaxBatch)
}

// checkCount validates a list's length: 1..limit.
func checkCount(field string, n, limit int) error {
	if n == 0 {
		return invalid(field, "at least one is required")
	}
	if n > limit {
		return invalid(field, "%d given, the limit is %d", n, limit)
	}
	return nil
}

// parseIDs parses wire ids.
func parseIDs(field string, ids []string) ([]uint64, error) {
	if err := checkBatch(field, len(ids)); err != nil {
		return nil, err
	}
	out := make([]uint64, len(ids))
	for i, s := range ids {
		id, err := queue.ParseID(field, s)
		if err != nil {
			return nil, err
		}
		out[i] = id
	}
	return out, nil
}

// parsePivot parses an optional id pivot; "" is 0.
func parsePivot(s string) (uint64, error) {
	if s == "" {
		return 0, nil
	}
	return queue.ParseID("pivot", s)
}

// inclusivePivot parses the pivot of storage/items.list and
// storage/scheduled.list and returns the exclusive lower bound the engines
// take: the list starts at the pivot's own id, as in Querator. Ids are
// integers, so the item before is pivot-1; "" and the id 0 (no item has
// it) both list from the start.
func inclusivePivot(s string) (after uint64, err error) {
	pivot, err := parsePivot(s)
	if err != nil || pivot == 0 {
		return 0, err
	}
	return pivot - 1, nil
}

// listLimit validates the limit of a Querator list call, applying the
// default: 0 is DefaultListLimit (1000), at most MaxListLimit (65536).
func listLimit(limit int32) (int, error) {
	return checkLimit(limit, DefaultListLimit, MaxListLimit)
}

// deadListLimit validates dead.list's limit: 0 is DefaultDeadListLimit
// (100), at most MaxDeadListLimit (1000).
func deadListLimit(limit int32) (int, error) {
	return checkLimit(limit, DefaultDeadListLimit, MaxDeadListLimit)
}

func checkLimit(limit, def, most int32) (int, error) {
	switch {
	case limit == 0:
		return int(def), nil
	case limit < 0 || limit > most:
		return 0, invalid("limit", "%d is out of range 1..%d", limit, most)
	}
	return int(limit), nil
}

// quote returns s shortened for an error message.
func quote(s string) string {
	if len(s) > 64 {
		s = s[:64] + "…"
	}
	return strings.ToValidUTF8(s, "?")
}

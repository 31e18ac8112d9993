package queue

import (
	"math"
	"strconv"
	"time"
	"unicode"

	"github.com/styxq/styx/internal/apierr"
)

// idAlphabet is lowercase base32hex: ids render as 13 of its characters,
// which sort in the same order as the numbers they encode (the big-endian
// bytes in base32hex without padding, lowercased).
const idAlphabet = "0123456789abcdefghijklmnopqrstuv"

// idValues maps a byte to its value in idAlphabet, or 0xff.
var idValues = func() (t [256]byte) {
	for i := range t {
		t[i] = 0xff
	}
	for i := range len(idAlphabet) {
		t[idAlphabet[i]] = byte(i)
	}
	return t
}()

// FormatID renders an item id for the wire: its 64 bits, most significant
// first, 5 to a character, the last character holding the 4 lowest bits and
// a zero bit.
func FormatID(id uint64) string {
	var b [13]byte
	for i := range 12 {
		b[i] = idAlphabet[(id>>(59-5*uint(i)))&31]
	}
	b[12] = idAlphabet[(id&15)<<1]
	return string(b[:])
}

// ParseID parses a wire id. field names the request field for the error.
// Returns an apierr.Invalid error for anything FormatID cannot produce
// (upper case, a set spare bit, another length or alphabet).
func ParseID(field, s string) (uint64, error) {
	if len(s) != 13 {
		return 0, apierr.Invalidf("invalid %s; '%s' is not an item id", field, truncate(s, 64))
	}
	var id uint64
	for i := range 12 {
		v := idValues[s[i]]
		if v == 0xff {
			return 0, apierr.Invalidf("invalid %s; '%s' is not an item id", field, truncate(s, 64))
		}
		id = id<<5 | uint64(v)
	}
	// Only the canonical form is an id: 13 characters carry 65 bits, and a
	// set spare last bit would let two strings name one id.
	v := idValues[s[12]]
	if v == 0xff || v&1 != 0 {
		return 0, apierr.Invalidf("invalid %s; '%s' is not an item id", field, truncate(s, 64))
	}
	return id<<4 | uint64(v>>1), nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// nextID returns an id greater than last. Ids follow the wall clock in
// nanoseconds when it is ahead, so that a queue deleted and re-created
// under the same name does not reuse the ids of its former incarnation
// (a dead-letter queue remembers source ids; see ADR 0003).
func NextID(last uint64, now time.Time) uint64 {
	n := uint64(now.UnixNano())
	if n > last {
		return n
	}
	return last + 1
}

// MinTime and MaxTime bound the times storage keeps: every backend stores a
// time as its Unix nanoseconds in an int64 (Nanos), which spans
// 1677-09-21T00:12:43.145224192Z .. 2262-04-11T23:47:16.854775807Z. A time
// outside would wrap around (a year-2300 enqueue_at would become 1715, ready
// at once), so the service refuses it (CheckTime) and the engine checks again
// before a request's times reach storage.
var (
	// MinTime is the earliest time storage keeps:
	// 1677-09-21T00:12:43.145224192Z.
	MinTime = time.Unix(0, math.MinInt64).UTC()
	// MaxTime is the latest time storage keeps:
	// 2262-04-11T23:47:16.854775807Z.
	MaxTime = time.Unix(0, math.MaxInt64).UTC()
)

// TimeInRange reports whether t is the zero time (unset) or lies within
// MinTime..MaxTime.
func TimeInRange(t time.Time) bool {
	return t.IsZero() || (!t.Before(MinTime) && !t.After(MaxTime))
}

// CheckTime returns an apierr.Invalid error naming field and the range
// MinTime..MaxTime when t is not TimeInRange.
func CheckTime(field string, t time.Time) error {
	if TimeInRange(t) {
		return nil
	}
	return apierr.Invalidf("invalid %s; %s is out of range %s..%s, the times storage keeps", field,
		t.UTC().Format(time.RFC3339Nano), MinTime.Format(time.RFC3339Nano), MaxTime.Format(time.RFC3339Nano))
}

// CheckItemTimes checks with CheckTime every time of it, the i-th item of
// an import, that storage keeps: created_at, expire_deadline, enqueue_at,
// lease_deadline, dead_at and each errors[j].at. The error names the field
// as "items[i].enqueue_at".
func CheckItemTimes(i int, it *Item) error {
	for _, t := range [...]struct {
		name string
		t    time.Time
	}{
		{"created_at", it.Meta.CreatedAt}, {"expire_deadline", it.Meta.ExpireDeadline}, {"enqueue_at", it.Meta.EnqueueAt},
		{"lease_deadline", it.Meta.LeaseDeadline}, {"dead_at", it.Meta.DeadAt}, {"dead_at", it.Body.DeadAt},
	} {
		if !TimeInRange(t.t) {
			return CheckTime("items["+strconv.Itoa(i)+"]."+t.name, t.t)
		}
	}
	for j, e := range it.Errors.Errors {
		if !TimeInRange(e.At) {
			return CheckTime("items["+strconv.Itoa(i)+"].errors["+strconv.Itoa(j)+"].at", e.At)
		}
	}
	return nil
}

// Nanos converts a time to Unix nanoseconds, with the zero time as 0 (how
// every backend stores times).
func Nanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// FromNanos is the inverse of Nanos: 0 is the zero time, others are UTC.
func FromNanos(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

// HiddenRune returns the first character of name that is a control or a
// format character (Unicode Cc or Cf: bidi overrides such as U+202E, zero-
// width characters such as U+200B and U+200D, U+FEFF), and its position in
// characters from 0, or ok false when there is none. Names holding them
// look like other names in the UI and logs (issue 24), so queue names and
// key patterns refuse them.
func HiddenRune(name string) (pos int, r rune, ok bool) {
	for _, c := range name {
		if unicode.IsControl(c) || unicode.Is(unicode.Cf, c) {
			return pos, c, true
		}
		pos++
	}
	return 0, 0, false
}

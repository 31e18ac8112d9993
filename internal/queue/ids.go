package queue

import (
	"encoding/base32"
	"encoding/binary"
	"strings"
	"time"

	"github.com/styxq/styx/internal/apierr"
)

// idEncoding renders ids as 13 lowercase base32hex characters, which sort
// in the same order as the numbers they encode.
var idEncoding = base32.HexEncoding.WithPadding(base32.NoPadding)

// FormatID renders an item id for the wire.
func FormatID(id uint64) string {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], id)
	return strings.ToLower(idEncoding.EncodeToString(b[:]))
}

// ParseID parses a wire id. field names the request field for the error.
// Returns an apierr.Invalid error for anything FormatID cannot produce.
func ParseID(field, s string) (uint64, error) {
	if len(s) != 13 {
		return 0, apierr.Invalidf("invalid %s; '%s' is not an item id", field, truncate(s, 64))
	}
	b, err := idEncoding.DecodeString(strings.ToUpper(s))
	if err != nil || len(b) != 8 {
		return 0, apierr.Invalidf("invalid %s; '%s' is not an item id", field, truncate(s, 64))
	}
	id := binary.BigEndian.Uint64(b)
	// Only the canonical form is an id: 13 base32 characters carry 65
	// bits, and a spare last bit or upper case would let two strings name
	// one id.
	if FormatID(id) != s {
		return 0, apierr.Invalidf("invalid %s; '%s' is not an item id", field, truncate(s, 64))
	}
	return id, nil
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
func nextID(last uint64, now time.Time) uint64 {
	n := uint64(now.UnixNano())
	if n > last {
		return n
	}
	return last + 1
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

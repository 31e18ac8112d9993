package queue

import (
	"errors"
	"time"

	"github.com/styxq/styx/internal/apierr"
)

// Deduplication (issues 37 and 40): an item produced with a deduplication
// id is stored once per queue and deduplication window, however often its
// produce is retried, on every node and across restarts. Every backend
// keeps the ids it accepted, each with the deadline of its window, in the
// same atomic write as the items (embedded: the batch; PostgreSQL: the
// transaction and the styx_dedup table), so that an id is never recorded
// without its item nor an item stored without its id.

// DeduplicationWindow is how long a queue remembers a deduplication id it
// accepted, from its acceptance, unless it sets its own
// (QueueInfo.DeduplicationWindow): 5 minutes, SQS's (MessageDeduplicationId).
// A produce within the window is not stored again; after it, the id is
// accepted anew.
const DeduplicationWindow = 5 * time.Minute

// The range of QueueInfo.DeduplicationWindow: 1 second to 24 hours.
const (
	MinDeduplicationWindow = time.Second
	MaxDeduplicationWindow = 24 * time.Hour
)

// ErrDeduplicationLimit is the sentinel of a produce refused because its
// queue holds as many deduplication ids within their window as the server
// allows (DeduplicationLimitError).
var ErrDeduplicationLimit = errors.New("deduplication id limit")

// DeduplicationLimitError returns the apierr.Retry error (454) of a produce
// refused because queue name holds limit deduplication ids within their
// window (the embedded backends' limit, daemon.Config.MaxDeduplicationIDs)
// and the produce carries ids it does not hold: nothing of it was stored.
// soonest (Unix ns) is when the oldest window ends, making room; the
// message gives it rounded up to the second.
func DeduplicationLimitError(name string, limit int, soonest int64) error {
	return apierr.Wrap(ErrDeduplicationLimit, apierr.Retry,
		"too many deduplication ids; queue '%s' holds %d deduplication ids within their window, the server's limit: "+
			"the produce's new ids are refused and nothing of it is stored; "+
			"the oldest window ends by %s, retry then", name, limit,
		time.Unix(0, soonest).Add(time.Second-1).Truncate(time.Second).UTC().Format(time.RFC3339))
}

// MaxDeduplicationID is the longest deduplication id, in bytes (SQS's).
const MaxDeduplicationID = 128

// CheckDeduplicationID returns an apierr.Invalid error naming field unless
// id is empty (no deduplication) or 1 to 128 characters among ASCII
// letters, digits and punctuation (SQS's rule for MessageDeduplicationId).
func CheckDeduplicationID(field, id string) error {
	if len(id) > MaxDeduplicationID {
		return apierr.Invalidf("invalid %s; %d bytes, the limit is %d", field, len(id), MaxDeduplicationID)
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c <= ' ' || c > '~' {
			return apierr.Invalidf("invalid %s; byte %d (0x%02x) is not an ASCII letter, digit or punctuation", field, i, c)
		}
	}
	return nil
}

// Deduplicate returns items without those whose deduplication id seen
// reports as accepted within the window, nor those whose id an earlier item
// of items carries; seen is asked once per distinct id. The order of the
// items kept is theirs. Items without an id are always kept. Backends call
// it from their Tx.Produce, with seen reading their own record of ids.
func Deduplicate(items []ProduceItem, seen func(id string) bool) []ProduceItem {
	var out []ProduceItem
	var taken map[string]bool
	for i, item := range items {
		drop := false
		if item.DeduplicationID != "" {
			if taken == nil {
				taken = map[string]bool{}
			}
			drop = taken[item.DeduplicationID] || seen(item.DeduplicationID)
			taken[item.DeduplicationID] = true
		}
		switch {
		case drop && out == nil:
			out = append(make([]ProduceItem, 0, len(items)-1), items[:i]...)
		case !drop && out != nil:
			out = append(out, item)
		}
	}
	if out == nil {
		return items
	}
	return out
}

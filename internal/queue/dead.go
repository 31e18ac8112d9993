package queue

import (
	"bytes"
	"fmt"
	"iter"
	"slices"
	"strings"
	"time"

	"github.com/styxq/styx/internal/apierr"
	"github.com/styxq/styx/internal/fingerprint"
)

// DeadFilter selects dead items. Every set field must match; the zero
// filter matches every item. (Wire: DeadFilter.)
type DeadFilter struct {
	// IDs, when not empty, are the only items that match: each names an
	// item by its current id or its first id (ItemMeta.HasID; ADR 0031).
	IDs []uint64 `json:"ids,omitempty"`
	// SourceQueue matches the queue the item died in.
	SourceQueue string `json:"source_queue,omitempty"`
	// Reason matches the dead reason (max_attempts, expired, explicit).
	Reason string `json:"reason,omitempty"`
	// Kind matches the item's kind.
	Kind string `json:"kind,omitempty"`
	// ErrorContains matches a substring of the item's last error.
	ErrorContains string `json:"error_contains,omitempty"`
	// DeadAfter and DeadBefore bound dead_at: after is inclusive, before
	// exclusive. Zero means unbounded.
	DeadAfter  time.Time `json:"dead_after,omitzero"`
	DeadBefore time.Time `json:"dead_before,omitzero"`
	// Fingerprint matches the fingerprint of the item's last error: the
	// one stored when it died (ItemMeta.Fingerprint), else the one
	// of its last error (internal/fingerprint).
	Fingerprint string `json:"fingerprint,omitempty"`
	// Reference matches the item's reference exactly.
	Reference string `json:"reference,omitempty"`
	// PayloadContains matches a substring of the item's payload (bytes,
	// case-sensitive).
	PayloadContains string `json:"payload_contains,omitempty"`
	// UpTo, when not 0, is the newest first id that matches: the items
	// that died after a client counted them (they entered the queue under
	// later ids) do not; an item the client counted keeps matching when a
	// lease of it ends and gives it a later current id (ADR 0031). Set
	// from dead.delete's and dead.redrive's up_to, not from the wire
	// filter.
	UpTo uint64 `json:"up_to,omitempty"`
}

// ItemFingerprint is the fingerprint of a dead item's last error: the one
// stored with it, else derived from its stored last error.
func ItemFingerprint(it *Item) string {
	if it.Meta.Fingerprint != "" {
		return it.Meta.Fingerprint
	}
	return fingerprint.Of(it.Errors.LastError)
}

// IsZero reports whether the filter is empty: it matches every item.
func (f *DeadFilter) IsZero() bool {
	return len(f.IDs) == 0 && f.SourceQueue == "" && f.Reason == "" && f.Kind == "" && f.ErrorContains == "" &&
		f.Fingerprint == "" && f.DeadAfter.IsZero() && f.DeadBefore.IsZero() && f.Reference == "" && f.PayloadContains == "" &&
		f.UpTo == 0
}

// Match reports whether the item passes the filter.
func (f *DeadFilter) Match(it *Item) bool {
	switch {
	case f.UpTo != 0 && it.Meta.FirstID() > f.UpTo:
	case len(f.IDs) > 0 && !slices.ContainsFunc(f.IDs, it.Meta.HasID):
	case f.SourceQueue != "" && it.Body.SourceQueue != f.SourceQueue:
	case f.Reason != "" && it.Body.DeadReason != f.Reason:
	case f.Kind != "" && it.Body.Kind != f.Kind:
	case f.ErrorContains != "" && !strings.Contains(it.Errors.LastError, f.ErrorContains):
	case !f.DeadAfter.IsZero() && it.Body.DeadAt.Before(f.DeadAfter):
	case !f.DeadBefore.IsZero() && !it.Body.DeadAt.Before(f.DeadBefore):
	case f.Fingerprint != "" && ItemFingerprint(it) != f.Fingerprint:
	case f.Reference != "" && it.Body.Reference != f.Reference:
	case f.PayloadContains != "" && !bytes.Contains(it.Body.Payload, []byte(f.PayloadContains)):
	default:
		return true
	}
	return false
}

// ScanParams bounds one Scan.
type ScanParams struct {
	// After is the id to start after (0: from the oldest item).
	After uint64
	// Limit is how many matching items to return, at least 1.
	Limit int
	// MaxScanned bounds how many items are read (matching or not) so a
	// selective filter over millions of items answers in bounded time;
	// 0 means 10,000.
	MaxScanned int
	// MaxBytes bounds the size of the items returned (Page, ItemBytes):
	// the scan stops before a matching item that would bring them over
	// it, though it always returns the first, and next continues from
	// that item. 0 means no bound.
	MaxBytes int
}

// Scan is Queue.Scan written once over a backend's two reads: it returns
// up to p.Limit items that match f, in id order, after p.After, at most
// p.MaxBytes of them (Page), and next, the id to pass as After to continue
// (the last id read, or the one before the matching item the page could
// not take; 0 when nothing is left). With f.IDs it reads byID, which
// yields, for each id given (ascending, each after p.After) in that
// order, the item it names when there is one: the item whose current id or
// first id it is (ItemMeta.HasID; ADR 0031), so an item is found by its
// first id however often it was requeued; the order and next are then
// those of the ids given, and an item named twice comes once. Otherwise it
// reads inOrder, which yields the queue's items after an id in id order,
// and reads at most p.MaxScanned of them (matching or not; default
// 10,000). A read error ends the scan with that error.
func Scan(f *DeadFilter, p ScanParams, byID func(ids []uint64) iter.Seq2[Item, error],
	inOrder func(after uint64) iter.Seq2[Item, error]) (items []Item, next uint64, err error) {
	if p.MaxScanned <= 0 {
		p.MaxScanned = 10_000
	}
	read := inOrder(p.After)
	var ids []uint64
	var seen map[uint64]bool // by byID: the items yielded, by current id
	if len(f.IDs) > 0 {
		ids = slices.DeleteFunc(slices.Sorted(slices.Values(f.IDs)), func(id uint64) bool { return id <= p.After })
		ids = slices.Compact(ids)
		read, p.MaxScanned, seen = byID(ids), len(ids), map[uint64]bool{}
	}
	scanned, last := 0, p.After
	page := Page{MaxBytes: p.MaxBytes}
	for it, err := range read {
		if err != nil {
			return nil, 0, err
		}
		key := it.Meta.ID
		if seen != nil {
			// The id given that found it: the first of ids it has.
			for len(ids) > 0 && !it.Meta.HasID(ids[0]) {
				ids = ids[1:]
			}
			if len(ids) > 0 {
				key = ids[0]
			}
			if seen[it.Meta.ID] {
				scanned, last = scanned+1, key
				continue
			}
			seen[it.Meta.ID] = true
		}
		if len(items) == p.Limit || scanned == p.MaxScanned {
			return items, last, nil
		}
		if f.Match(&it) {
			if !page.Take(&it) {
				return items, last, nil
			}
			items = append(items, it)
		}
		scanned, last = scanned+1, key
	}
	return items, 0, nil
}

// CheckMatched is the rule of a confirmed action on dead items (the
// expect_matched of dead.delete and dead.redrive, issue 48): matched, how
// many items the action's filter matches now, must be expected, the count
// the client showed and its user confirmed. Otherwise the set changed since
// (items died, or went: deleted, redriven, consumed) and the action does
// nothing: an apierr.Conflict wrapping ErrMatchedChanged that names both
// counts and says nothing was done (done: "deleted", "redriven"). A
// negative expected means none was given: nil.
func CheckMatched(matched, expected int64, done string) error {
	if expected < 0 || matched == expected {
		return nil
	}
	now := fmt.Sprintf("%d items match now", matched)
	if matched == 1 {
		now = "1 item matches now"
	}
	were := "were"
	if expected == 1 {
		were = "was"
	}
	return apierr.Wrap(ErrMatchedChanged, apierr.Conflict,
		"matched items changed; %s, %d %s confirmed; nothing was %s: count them again (a dry run) and confirm that count",
		now, expected, were, done)
}

// RedriveItem is a dead item sent back as fresh work.
type RedriveItem struct {
	// SourceKey identifies the dead item (see RedriveKey); the receiving
	// queue ignores a second copy while the first exists (and, on the
	// embedded backends, for a while after it was removed: ADR 0003's
	// amendment).
	SourceKey string
	Body      ItemBody
	// Errors is the item's attempt history as the receiving queue stores
	// it: the dead item's, with the redrive's own entry appended by the
	// caller (RedrivenHistory).
	Errors ItemErrors
	// Group is the dead item's group ("" for none): the redriven item's.
	Group string
	// DeadKey is the dead item's own source key in the dead-letter queue
	// (its ItemMeta.SourceKey; "" for an item that has none). A group its
	// ordered queue holds (GroupHold) is released by the redriven item
	// whose DeadKey is the hold's (HeldGroup.DeadKey), which then is the
	// group's head; any other redriven item of the group joins its end and
	// the group stays held.
	DeadKey string
}

// MaxAttemptErrors is how many entries an item's attempt history keeps:
// the most recent ones.
const MaxAttemptErrors = 10

// AppendHistory appends e to h, keeping the MaxAttemptErrors most recent
// entries. LastError is left as it is (it names the last failed attempt),
// and so is the DLQ attempt history (DeadLetter).
func AppendHistory(h ItemErrors, e AttemptError) ItemErrors {
	out := ItemErrors{LastError: h.LastError, Errors: appendRecent(h.Errors, e), DeadLetter: slices.Clone(h.DeadLetter)}
	return out
}

// appendRecent returns a copy of es with e appended, keeping the
// MaxAttemptErrors most recent entries.
func appendRecent(es []AttemptError, e AttemptError) []AttemptError {
	out := append(slices.Clone(es), e)
	if n := len(out); n > MaxAttemptErrors {
		out = out[n-MaxAttemptErrors:]
	}
	return out
}

// RedrivenHistory returns the history of a dead item being redriven: its
// source attempt history, plus an entry (attempt: its attempts when it
// died, less its DLQ attempts) saying when, by which task and from which
// dead-letter queue it was redriven. Its DLQ attempts are not carried: they
// belong to the dead record the redrive ends (ADR 0003, amendment of issue
// 39).
func RedrivenHistory(it *Item, deadQueue, taskID string, at time.Time) ItemErrors {
	attempts := it.Meta.Attempts - it.Errors.DeadLetterAttempts()
	if attempts < 0 {
		attempts = 0
	}
	h := AppendHistory(it.Errors, AttemptError{
		Attempt: attempts,
		Error:   fmt.Sprintf("redriven from dead-letter queue '%s' by task %s", deadQueue, taskID),
		At:      at.UTC(),
	})
	h.DeadLetter = nil
	return h
}

// RedriveKey is the source key of dead item id of deadQueue once redriven.
func RedriveKey(deadQueue string, id uint64) string { return SourceKey(whyRedrive, deadQueue, id) }

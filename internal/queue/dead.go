package queue

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/styxq/styx/internal/fingerprint"
	"github.com/styxq/styx/internal/store"
)

// DeadFilter selects dead items. Every set field must match; the zero
// filter matches every item. (Wire: DeadFilter.)
type DeadFilter struct {
	// IDs, when not empty, are the only items that match.
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
	// one stored when it died (store.ItemMeta.Fingerprint), else the one
	// of its last error (internal/fingerprint).
	Fingerprint string `json:"fingerprint,omitempty"`
}

// ItemFingerprint is the fingerprint of a dead item's last error: the one
// stored with it, else derived from its stored last error.
func ItemFingerprint(it *store.Item) string {
	if it.Meta.Fingerprint != "" {
		return it.Meta.Fingerprint
	}
	return fingerprint.Of(it.Errors.LastError)
}

// IsZero reports whether the filter is empty: it matches every item.
func (f *DeadFilter) IsZero() bool {
	return len(f.IDs) == 0 && f.SourceQueue == "" && f.Reason == "" && f.Kind == "" && f.ErrorContains == "" &&
		f.Fingerprint == "" && f.DeadAfter.IsZero() && f.DeadBefore.IsZero()
}

// Match reports whether the item passes the filter.
func (f *DeadFilter) Match(it *store.Item) bool {
	switch {
	case len(f.IDs) > 0 && !slices.Contains(f.IDs, it.Meta.ID):
	case f.SourceQueue != "" && it.Body.SourceQueue != f.SourceQueue:
	case f.Reason != "" && it.Body.DeadReason != f.Reason:
	case f.Kind != "" && it.Body.Kind != f.Kind:
	case f.ErrorContains != "" && !strings.Contains(it.Errors.LastError, f.ErrorContains):
	case !f.DeadAfter.IsZero() && it.Body.DeadAt.Before(f.DeadAfter):
	case !f.DeadBefore.IsZero() && !it.Body.DeadAt.Before(f.DeadBefore):
	case f.Fingerprint != "" && ItemFingerprint(it) != f.Fingerprint:
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
}

// RedriveItem is a dead item sent back as fresh work.
type RedriveItem struct {
	// SourceKey identifies the dead item (see RedriveKey); the receiving
	// queue ignores a second copy while the first exists.
	SourceKey string
	Body      store.ItemBody
	// Errors is the item's attempt history as the receiving queue stores
	// it: the dead item's, with the redrive's own entry appended by the
	// caller (RedrivenHistory).
	Errors store.ItemErrors
}

// MaxAttemptErrors is how many entries an item's attempt history keeps:
// the most recent ones.
const MaxAttemptErrors = 10

// AppendHistory appends e to h, keeping the MaxAttemptErrors most recent
// entries. LastError is left as it is (it names the last failed attempt).
func AppendHistory(h store.ItemErrors, e store.AttemptError) store.ItemErrors {
	out := store.ItemErrors{LastError: h.LastError, Errors: append(slices.Clone(h.Errors), e)}
	if n := len(out.Errors); n > MaxAttemptErrors {
		out.Errors = out.Errors[n-MaxAttemptErrors:]
	}
	return out
}

// RedrivenHistory returns the history of a dead item being redriven: its
// own, plus an entry (attempt: its attempts when it died) saying when, by
// which task and from which dead-letter queue it was redriven.
func RedrivenHistory(it *store.Item, deadQueue, taskID string, at time.Time) store.ItemErrors {
	return AppendHistory(it.Errors, store.AttemptError{
		Attempt: it.Meta.Attempts,
		Error:   fmt.Sprintf("redriven from dead-letter queue '%s' by task %s", deadQueue, taskID),
		At:      at.UTC(),
	})
}

// RedriveKey is the source key of dead item id of deadQueue once redriven.
func RedriveKey(deadQueue string, id uint64) string { return SourceKey(whyRedrive, deadQueue, id) }

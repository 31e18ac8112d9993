package queue

import (
	"context"
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

// scanChunk is how many items Scan reads from each partition at a time:
// 256, fewer when there are many partitions, so a scan holds at most about
// 8192 items (and their payloads) in memory.
func scanChunk(partitions int32) int {
	return max(16, min(256, 8192/int(max(partitions, 1))))
}

// Scan reads the items of a queue in id order (oldest first) across all its
// partitions, straight from storage, and returns up to p.Limit that match f.
// next is the id to pass as After to continue, 0 when the queue has no more
// items. It holds at most one chunk per partition in memory at a time.
func (l *Logical) Scan(ctx context.Context, partitions int32, f *DeadFilter, p ScanParams) (items []store.Item, next uint64, err error) {
	if p.MaxScanned <= 0 {
		p.MaxScanned = 10_000
	}
	if len(f.IDs) > 0 {
		return l.scanIDs(ctx, partitions, f, p)
	}
	type cursor struct {
		buf   []store.Item
		after uint64
		done  bool
	}
	chunk := scanChunk(partitions)
	cur := make([]cursor, partitions)
	for i := range cur {
		cur[i].after = p.After
	}
	scanned := 0
	last := p.After
	for len(items) < p.Limit && scanned < p.MaxScanned {
		// Pick the partition whose next item has the smallest id.
		best := -1
		for i := range cur {
			c := &cur[i]
			if len(c.buf) == 0 && !c.done {
				c.buf, err = l.cfg.Store.ListItems(ctx, l.queueID, int32(i), c.after, chunk)
				if err != nil {
					return nil, 0, readErr(l.name, fmt.Errorf("scan partition %d: %w", i, err))
				}
				if len(c.buf) < chunk {
					c.done = true
				}
				if len(c.buf) > 0 {
					c.after = c.buf[len(c.buf)-1].Meta.ID
				}
			}
			if len(c.buf) > 0 && (best < 0 || c.buf[0].Meta.ID < cur[best].buf[0].Meta.ID) {
				best = i
			}
		}
		if best < 0 {
			return items, 0, nil // every partition is exhausted
		}
		it := cur[best].buf[0]
		cur[best].buf = cur[best].buf[1:]
		scanned++
		last = it.Meta.ID
		if f.Match(&it) {
			items = append(items, it)
		}
	}
	return items, last, nil
}

// scanIDs is Scan for a filter with ids: it looks each id up in every
// partition instead of reading the queue in order.
func (l *Logical) scanIDs(ctx context.Context, partitions int32, f *DeadFilter, p ScanParams) ([]store.Item, uint64, error) {
	ids := slices.Sorted(slices.Values(f.IDs))
	var items []store.Item
	for i, id := range ids {
		if id <= p.After || id == 0 {
			continue
		}
		if len(items) == p.Limit {
			return items, ids[i-1], nil
		}
		for part := range partitions {
			got, err := l.cfg.Store.ListItems(ctx, l.queueID, part, id-1, 1)
			if err != nil {
				return nil, 0, readErr(l.name, fmt.Errorf("look up %s: %w", FormatID(id), err))
			}
			if len(got) == 1 && got[0].Meta.ID == id {
				if f.Match(&got[0]) {
					items = append(items, got[0])
				}
				break
			}
		}
	}
	return items, 0, nil
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
const MaxAttemptErrors = maxAttemptErrors

// AppendHistory appends e to h, keeping the MaxAttemptErrors most recent
// entries. LastError is left as it is (it names the last failed attempt).
func AppendHistory(h store.ItemErrors, e store.AttemptError) store.ItemErrors {
	out := store.ItemErrors{LastError: h.LastError, Errors: append(slices.Clone(h.Errors), e)}
	if n := len(out.Errors); n > maxAttemptErrors {
		out.Errors = out.Errors[n-maxAttemptErrors:]
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
func RedriveKey(deadQueue string, id uint64) string { return sourceKey(whyRedrive, deadQueue, id) }

// takeRedriven inserts redriven items into partition p (Tx.Redrive).
func (l *Logical) takeRedriven(it *iteration, p *partition, items []RedriveItem) {
	for _, ri := range items {
		if _, dup := l.sourceKeys[ri.SourceKey]; dup {
			continue
		}
		id := l.allocID(it)
		x := &item{id: id, bodyID: id, created: it.now, state: stateReady, src: newSource(ri.SourceKey)}
		if l.info.ExpireTimeout > 0 {
			x.expire = it.now + int64(l.info.ExpireTimeout)
		}
		p.add(x)
		l.sourceKeys[ri.SourceKey] = x
		body := store.ItemBody{
			Reference: ri.Body.Reference, Kind: ri.Body.Kind, Encoding: ri.Body.Encoding, Payload: ri.Body.Payload,
			RedriveCount: ri.Body.RedriveCount + 1,
		}
		it.batch.Insert(p.num, x.meta(), body, ri.Errors)
		x.hasErrs = !ri.Errors.IsZero()
		l.addBody(it, x.bodyID, &body)
	}
}

package queue

import (
	"slices"
	"time"

	"github.com/styxq/styx/internal/apierr"
)

// The item rules: what every backend decides the same way, written once.
// The engine (internal/engine) applies them in every iteration, to the
// items its backend's Tx gives it; the backend then stores the decision its
// own way. The conformance suite (queuetest) checks
// that they do.

// CheckPartition returns an apierr.Invalid error unless n is a partition of
// a queue with the given number of partitions.
func CheckPartition(queue string, partitions, n int32) error {
	if n < 0 || n >= partitions {
		return apierr.Invalidf("invalid partition; queue '%s' has partitions 0..%d, not %d", queue, partitions-1, n)
	}
	return nil
}

// CheckLeased returns an apierr.Invalid error naming the first of ids that
// leased reports as not under a live lease in partition n (wrapping
// ErrNotLeased), or that appears twice (wrapping ErrDuplicateID); nil when
// every id is leased there, once. (complete, retry)
func CheckLeased(queue string, n int32, ids []uint64, leased func(id uint64) bool) error {
	seen := make(map[uint64]bool, len(ids))
	for _, id := range ids {
		if !leased(id) {
			return apierr.Wrap(ErrNotLeased, apierr.Invalid, "invalid ids; '%s' is not leased in partition %d of queue '%s'", FormatID(id), n, queue)
		}
		if seen[id] {
			return apierr.Wrap(ErrDuplicateID, apierr.Invalid, "invalid ids; '%s' appears more than once", FormatID(id))
		}
		seen[id] = true
	}
	return nil
}

// CheckRenew checks a renew of ids in partition n: an id that appears twice
// is an apierr.Invalid error naming it (ErrDuplicateID); else every id that live reports as
// not under a live lease there is named by one NotLeased error. It returns
// the new lease deadline (Unix ns): now + timeout, or the queue's
// lease_timeout when timeout is 0.
func CheckRenew(info QueueInfo, n int32, ids []uint64, timeout time.Duration, now int64, live func(id uint64) bool) (int64, error) {
	var bad []uint64
	seen := make(map[uint64]bool, len(ids))
	for _, id := range ids {
		if seen[id] {
			return 0, apierr.Wrap(ErrDuplicateID, apierr.Invalid, "invalid ids; '%s' appears more than once", FormatID(id))
		}
		seen[id] = true
		if !live(id) {
			bad = append(bad, id)
		}
	}
	if len(bad) > 0 {
		return 0, NotLeased(bad, n, info.Name)
	}
	if timeout == 0 {
		timeout = info.LeaseTimeout
	}
	return now + int64(timeout), nil
}

// RecordError returns h with a failed attempt's error appended (keeping the
// MaxAttemptErrors most recent) and made the last error.
func RecordError(h ItemErrors, attempt int32, msg string, now int64) ItemErrors {
	h = AppendHistory(h, AttemptError{Attempt: attempt, Error: msg, At: time.Unix(0, now).UTC()})
	h.LastError = msg
	return h
}

// RecordDeadLetterAttempt returns h with a DLQ attempt of a dead item in a
// dead-letter queue appended to its DLQ attempt history (h.DeadLetter,
// keeping the MaxAttemptErrors most recent), numbered one past the last:
// msg is the retry's error text ("" for none) or LeaseExpiredError. The dead
// record (LastError, Errors) is left as it is: why an item died survives
// whatever is done to it in the dead-letter queue.
func RecordDeadLetterAttempt(h ItemErrors, msg string, now int64) ItemErrors {
	e := AttemptError{Attempt: h.DeadLetterAttempts() + 1, Error: msg, At: time.Unix(0, now).UTC()}
	return ItemErrors{LastError: h.LastError, Errors: slices.Clone(h.Errors), DeadLetter: appendRecent(h.DeadLetter, e)}
}

// Ending is what becomes of an item whose lease ends without a complete.
type Ending struct {
	// Attempts is the item's attempt count from now on: one less than
	// counted at the lease when the lease was released.
	Attempts int32
	// Reason is set when the item is dead (ReasonMaxAttempts or
	// ReasonExpired); the rest then does not apply.
	Reason string
	// At is when the requeued item becomes ready (Unix ns): 0 for at once,
	// at the tail of its partition; else it is scheduled.
	At int64
	// Outcome is OutcomeRequeued, OutcomeReleased or OutcomeScheduled.
	Outcome string
}

// EndLease decides the end of a lease without a complete (a retry, or an
// expired lease with release false): the item is dead by max_attempts
// (unless released: a released attempt does not count) or by its expire
// deadline, else it goes back, ready or scheduled for retryAt.
func EndLease(info QueueInfo, attempts int32, expire int64, release bool, retryAt time.Time, now int64) Ending {
	if release && attempts > 0 {
		attempts--
	}
	e := Ending{Attempts: attempts, Outcome: OutcomeRequeued}
	switch {
	case !release && info.MaxAttempts > 0 && attempts >= info.MaxAttempts:
		e.Reason = ReasonMaxAttempts
	case expire != 0 && expire <= now:
		e.Reason = ReasonExpired
	case Nanos(retryAt) > now:
		e.At, e.Outcome = Nanos(retryAt), OutcomeScheduled
	case release:
		e.Outcome = OutcomeReleased
	}
	return e
}

// Requeued is the RetryOutcome of e's requeue under newID (0 when the
// backend names the new id later).
func (e Ending) Requeued(newID uint64) RetryOutcome {
	o := RetryOutcome{Outcome: e.Outcome, Attempts: e.Attempts, NewID: newID}
	if e.At != 0 {
		o.RetryAt = FromNanos(e.At)
	}
	return o
}

// KillOutcome is the RetryOutcome of an item that died for reason: moved to
// the queue's dead-letter queue, or dropped when it has none.
func KillOutcome(info QueueInfo, reason string, attempts int32) RetryOutcome {
	if info.DeadQueue == "" {
		return RetryOutcome{Outcome: OutcomeDropped, Reason: reason, Attempts: attempts}
	}
	return RetryOutcome{Outcome: OutcomeDeadLettered, Reason: reason, DeadQueue: info.DeadQueue, Attempts: attempts}
}

// LeaseExpiredError is the attempt error recorded when a lease ends by its
// deadline: "lease expired after 1m0s", with the queue's lease_timeout.
func LeaseExpiredError(leaseTimeout time.Duration) string {
	return "lease expired after " + leaseTimeout.String()
}

// ScheduleResolution is how far ahead an item's enqueue_at must be for a
// produce to schedule it: an enqueue_at already reached, or less than
// ScheduleResolution from now, puts the item straight into the queue with no
// enqueue_at, as Querator does (its partitions enqueue at once what is due
// within 100ms, so a client that fills every field with "now" pays nothing).
const ScheduleResolution = 100 * time.Millisecond

// EnqueueNow reports whether an item produced at now (Unix nanoseconds)
// with enqueueAt goes straight into the queue rather than being scheduled:
// enqueueAt is unset or within ScheduleResolution of now.
func EnqueueNow(enqueueAt time.Time, now int64) bool {
	return enqueueAt.IsZero() || Nanos(enqueueAt) < now+int64(ScheduleResolution)
}

// IsScheduled reports whether a stored item is scheduled at now (Unix
// nanoseconds): not leased, not a dead item, with an enqueue_at still to
// come. storage/items.list leaves such items out (storage/scheduled.list
// lists them), as Querator does.
func IsScheduled(m ItemMeta, now int64) bool {
	return !m.Leased && m.DeadReason == "" && Nanos(m.EnqueueAt) > now
}

// ExpireDeadline returns the expire deadline of an item that enters the
// queue described by info at now, as produced or redriven (Unix ns): now
// plus the queue's expire_timeout, or 0 (never) without one.
func ExpireDeadline(info QueueInfo, now int64) int64 {
	if info.ExpireTimeout <= 0 {
		return 0
	}
	return now + int64(info.ExpireTimeout)
}

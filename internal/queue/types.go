package queue

import (
	"context"
	"time"
)

// ProduceItem is one item of a produce request, validated by the service.
type ProduceItem struct {
	Encoding  string
	Kind      string
	Reference string
	// EnqueueAt schedules the item when in the future; zero means now.
	EnqueueAt time.Time
	Payload   []byte
	// Attributes is an opaque per-item blob the store keeps with the body
	// and every move carries unchanged (requeue, dead-letter move, redrive):
	// the SQS API keeps a message's MessageId, SentTimestamp and message
	// attributes there (ADR 0016). Nil for items of the /v1 API.
	Attributes []byte
	// DeduplicationID, when not empty, stores the item at most once per
	// DeduplicationWindow in its queue (see Deduplicate); checked by
	// CheckDeduplicationID.
	DeduplicationID string
	// Group is the item's group ("" for none): checked by CheckGroup; the
	// engine sends it to GroupPartition's partition (itemgroups.go).
	Group string
}

// LeaseParams is a validated lease request.
type LeaseParams struct {
	// BatchSize is 1..1000.
	BatchSize int
	// ClientID is unique among the queue's waiting leases of one Owner.
	ClientID string
	// Owner is the name of the API key making the lease ("" without
	// auth): a client_id is unique per key, so one key cannot block another
	// key's worker by waiting under its client_id (issue 24).
	Owner string
	// Timeout is how long to wait for items (the request_timeout).
	Timeout time.Duration
	// MaxBytes bounds the lease by the items' payload and attributes, in
	// bytes: the items are taken oldest first while their sum stays within
	// it, the first one whatever its size, and those beyond are not leased
	// (no attempt counted; the next lease takes them). 0: no bound. Items
	// leased by the rules of their groups (itemgroups.go) are taken in
	// their lease order while they fit: an ordered queue's group run is
	// cut at the bound, its items left waiting for it.
	MaxBytes int64
	// LeaseTimeout is how long the lease lasts (its items' lease deadline
	// is the time they are leased plus it): 0 for the queue's
	// lease_timeout. The SQS door sets it from ReceiveMessage's
	// VisibilityTimeout, so a receive is one call to the loop. The caller
	// bounds it (SQS: 1 s to 12 h).
	LeaseTimeout time.Duration
	// Complete, when not empty, lists leased items of partition
	// CompletePartition that the lease completes first, in the same step
	// of the queue's loop (one storage write or transaction for both: a
	// worker completes its previous batch with its next lease; issue 52).
	// Every id must be leased in that partition, or nothing is completed
	// or leased and the error of Complete answers. Such a lease does not
	// wait: it answers at once, with the items ready then, or none, unless
	// WaitAfterComplete is set.
	Complete          []uint64
	CompletePartition int32
	// WaitAfterComplete makes a lease with Complete wait after its
	// completes as a plain lease does, up to Timeout, and then answer with
	// no items and no error (its completes were done; issue 52). A consumer
	// that keeps such a lease waiting gets an item in the same write that
	// stores it. Ignored without Complete.
	WaitAfterComplete bool
}

// LeasedItem is an item handed out by a lease.
type LeasedItem struct {
	ID uint64
	// FirstID is the id the item had when it entered the queue (produced,
	// imported, redriven or dead-lettered into it). It stays the same while
	// the item's id changes at every requeue, until the item leaves the
	// queue; with ID and Attempts it names this lease in a Receipt.
	FirstID       uint64
	Attempts      int32
	LeaseDeadline time.Time
	// FirstLeasedAt is when the item was first leased: the first lease of
	// its life in the queue (this one when Attempts is 1), kept through
	// requeues (expired leases, retries, releases) and carried by a
	// dead-letter move into the dead-letter queue; a redriven item starts
	// without one. The SQS API's ApproximateFirstReceiveTimestamp. Zero
	// for an item leased before Styx stored it (its reader then takes
	// the time of this lease).
	FirstLeasedAt time.Time
	Encoding      string
	Kind          string
	Reference     string
	Payload       []byte
	// Attributes is the item's ProduceItem.Attributes, as stored.
	Attributes []byte
	// SourceQueue is the queue a dead item came from, when leased from a
	// dead-letter queue (the SQS API's DeadLetterQueueSourceArn); empty
	// otherwise.
	SourceQueue string
	// Group is the item's group, "" for none.
	Group string
}

// Receipt names one lease of an item after the lease has ended, as the
// SQS API's receipt handle does (Queue.DeleteReceived): the item's
// LeasedItem.ID, FirstID and Attempts as the lease handed them out.
type Receipt struct {
	ID       uint64
	FirstID  uint64
	Attempts int32
}

// LeaseResult is the answer to a lease: items from one partition.
type LeaseResult struct {
	Partition int32
	Items     []LeasedItem
}

// RetryItem is one item of a retry request, validated by the service.
type RetryItem struct {
	ID uint64
	// RetryAt, when after now, schedules the item instead of putting it at
	// the tail of the queue.
	RetryAt time.Time
	// Dead dead-letters the item now (reason explicit).
	Dead bool
	// Release returns the item without counting the attempt.
	Release bool
	// Error, when not empty, becomes the item's last error and is appended
	// to its attempt history. At most 4096 bytes.
	Error string
}

// Retry outcomes (RetryOutcome.Outcome; wire: QueueRetryOutcome.outcome).
const (
	// OutcomeRequeued: the item is ready again, at the tail of the queue.
	OutcomeRequeued = "requeued"
	// OutcomeScheduled: the item becomes ready at RetryAt.
	OutcomeScheduled = "scheduled"
	// OutcomeReleased: the item is ready again and the attempt was not
	// counted (RetryItem.Release).
	OutcomeReleased = "released"
	// OutcomeDeadLettered: the item died and went to the dead-letter queue.
	OutcomeDeadLettered = "dead_lettered"
	// OutcomeDropped: the item died and is gone: the queue has no
	// dead_queue.
	OutcomeDropped = "dropped"
)

// RetryOutcome is what a retry did with one item.
type RetryOutcome struct {
	// ID is the item's id in the request.
	ID uint64
	// Outcome is one of the Outcome constants.
	Outcome string
	// Reason is why the item died (ReasonMaxAttempts, ReasonExpired or
	// ReasonExplicit); empty unless dead_lettered or dropped.
	Reason string
	// DeadQueue is the dead-letter queue that took the item; empty unless
	// dead_lettered.
	DeadQueue string
	// Attempts is the item's attempts so far (a released attempt is not
	// counted).
	Attempts int32
	// NewID is the item's id back in the queue (requeued, scheduled,
	// released); 0 otherwise.
	NewID uint64
	// RetryAt is when a scheduled item becomes ready; zero otherwise.
	RetryAt time.Time
}

// ClearParams says which items queue.clear removes.
type ClearParams struct {
	// Queue removes ready items.
	Queue bool
	// Scheduled removes scheduled items.
	Scheduled bool
	// Destructive removes every item, leased or not.
	Destructive bool
}

// ClearCounts are the items a queue.clear would remove (its dry run,
// queue.clear_dry_run), by state. Total counts every one of them: Ready,
// Scheduled and Leased, and on memory and Pebble also the dead items on
// their way to the dead-letter queue (a destructive clear removes them).
type ClearCounts struct {
	Ready, Scheduled, Leased, Total int
}

// WouldRemove returns what a clear by p would remove from a queue described
// by st (the items by state, as Stats counts them): the ready items with
// Queue, the scheduled ones with Scheduled, every item with Destructive.
// It is the rule both backends' clears follow (they remove by state), so a
// dry run and a clear of the same state agree.
func (p ClearParams) WouldRemove(st Stats) ClearCounts {
	var c ClearCounts
	for _, ps := range st.Partitions {
		ready := ps.Total - ps.Leased - ps.Scheduled - ps.Dying
		switch {
		case p.Destructive:
			c.Ready += ready
			c.Scheduled += ps.Scheduled
			c.Leased += ps.Leased
			c.Total += ps.Total
			continue
		case p.Queue:
			c.Ready += ready
			c.Total += ready
		}
		if p.Scheduled {
			c.Scheduled += ps.Scheduled
			c.Total += ps.Scheduled
		}
	}
	return c
}

// ClearDryRun counts what a clear of q by p would remove now, removing
// nothing (queue.clear_dry_run; the service's and any other door's one
// path): q's Stats, counted by WouldRemove. A clear sent after it removes
// the items of those states then, which may differ by what happened
// between the two calls.
func ClearDryRun(ctx context.Context, q Queue, p ClearParams) (ClearCounts, error) {
	st, err := q.Stats(ctx)
	if err != nil {
		return ClearCounts{}, err
	}
	return p.WouldRemove(st), nil
}

// PartitionStats describes one partition at one moment.
type PartitionStats struct {
	Partition int32
	// Total counts items in every state.
	Total int
	// Leased, Scheduled and Dying count items in those states.
	Leased    int
	Scheduled int
	Dying     int
	// Failures counts items waiting for another attempt after a failed one.
	Failures int
	// AverageAge is the mean time since creation of all items;
	// AverageLeasedAge the mean time since leasing of leased items.
	AverageAge       time.Duration
	AverageLeasedAge time.Duration
}

// Stats describes a logical queue at one moment.
type Stats struct {
	// LeaseWaiting counts waiting lease requests.
	LeaseWaiting int
	// MovesInFlight counts dead-letter moves awaiting confirmation.
	MovesInFlight int
	Partitions    []PartitionStats
	// DeadByReason and DeadBySource count the dead items the queue holds
	// (as a dead-letter queue) by dead reason and by source queue.
	DeadByReason map[string]int
	DeadBySource map[string]int
	// Oldest is the creation time of the oldest item; zero when empty.
	Oldest time.Time
	// HeldGroups lists the groups held by a dead item (an ordered queue
	// with GroupHold), at most MaxHeldGroupsListed, oldest first; HeldTotal
	// counts them all.
	HeldGroups []HeldGroup
	HeldTotal  int
	// ExpiringWithinDay counts, in a queue that holds dead items (a
	// dead-letter queue), the items not leased whose expire deadline is
	// before now + ExpiringWindow: the dead items its retention deletes
	// within a day (issue 49). 0 in a queue that holds no dead item.
	ExpiringWithinDay int
}

// ExpiringWindow is how far ahead Stats.ExpiringWithinDay looks: 24 hours.
const ExpiringWindow = 24 * time.Hour

// MaxHeldGroupsListed is how many held groups Stats lists.
const MaxHeldGroupsListed = 100

// Consumer is one consumer of a queue as the queue saw it: a client_id
// (and the API key) whose lease calls reached the queue in the last
// ConsumerWindow, or that holds leases now (Queue.Consumers).
type Consumer struct {
	// ClientID is the lease calls' client_id.
	ClientID string
	// KeyName is the name of the API key the calls were made with (""
	// without --auth): one client_id under two keys is two consumers.
	KeyName string
	// FirstSeenAt is the consumer's first lease call since it was last
	// listed (it is forgotten ConsumerWindow after its last call, once it
	// holds no lease); LastSeenAt its latest lease call, whether or not it
	// got items.
	FirstSeenAt, LastSeenAt time.Time
	// Leased counts the items its lease calls took since FirstSeenAt.
	Leased int64
	// Held counts the live leases it holds now: items it leased whose
	// lease has neither ended (complete, retry, expiry, delete) nor passed
	// its deadline.
	Held int
	// HeldIDs are the ids of up to MaxHeldIDs of those items, lowest
	// first (formatted as on the wire).
	HeldIDs []string
}

// ConsumerWindow is how long a consumer stays listed after its last lease
// call once it holds no lease: 5 minutes.
const ConsumerWindow = 5 * time.Minute

// MaxHeldIDs bounds Consumer.HeldIDs: 100.
const MaxHeldIDs = 100

// Dead reasons, as on the wire (StorageItem.dead_reason).
const (
	ReasonMaxAttempts = "max_attempts"
	ReasonExpired     = "expired"
	ReasonExplicit    = "explicit"
)

// ItemRef names an item of a queue.
type ItemRef struct {
	Partition int32
	ID        uint64
}

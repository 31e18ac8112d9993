package queue

import "time"

// The domain's stored shapes: a queue's definition and an item in full, as
// every layer passes them. The storage contracts (internal/store) and both
// backends persist these; this package defines them and imports no storage.

// DefaultNamespace is the namespace of a queue created without one, and of
// every queue stored before Styx had namespaces (Querator's reserved system
// namespace).
const DefaultNamespace = "_system"

// ListQueuesParams selects the queues ListQueues returns.
type ListQueuesParams struct {
	// Namespace keeps only the queues of that namespace; empty keeps every
	// namespace.
	Namespace string
	// Pivot is the first name to return (inclusive); names are compared
	// bytewise.
	Pivot string
	// Limit is the most queues to return, counted after the Namespace
	// filter; <= 0 means no limit.
	Limit int
}

// QueueInfo is a queue's configuration as stored.
type QueueInfo struct {
	// ID is assigned by CreateQueue and never reused by the same store, so
	// that a queue deleted and re-created under the same name starts empty.
	// Items are keyed by ID, not by Name.
	ID uint64
	// Name is 1..512 characters without whitespace or '~' (validated by the
	// service, not the store). Names are unique across namespaces.
	Name string
	// Namespace groups queues for listing (queues.list filters by it). The
	// service sets DefaultNamespace when a queue is created without one and
	// validates it; stores keep it as given. Queues stored before namespaces
	// existed read back as DefaultNamespace.
	Namespace string
	// DeadQueue names the queue's dead-letter queue; empty for none.
	DeadQueue string
	// Reference is free text for the user.
	Reference string
	// LeaseTimeout is how long a lease lasts.
	LeaseTimeout time.Duration
	// ExpireTimeout is how long an item may live, counted from its creation
	// (in a dead-letter queue: from its dead_at).
	ExpireTimeout time.Duration
	// MaxAttempts is the number of attempts before an item is dead; 0 means
	// unlimited.
	MaxAttempts int32
	// Partitions is the number of partitions, at least 1.
	Partitions int32
	CreatedAt  time.Time
	UpdatedAt  time.Time
	// Attributes is opaque text kept with the queue's definition for an API
	// other than /v1: the SQS API keeps the queue attributes Styx has no
	// field for there (DelaySeconds, ReceiveMessageWaitTimeSeconds, tags…;
	// ADR 0016). Empty for none. Stores keep it as given.
	Attributes string
	// DeduplicationWindow is how long the queue remembers a deduplication
	// id it accepted (Deduplicate), MinDeduplicationWindow to
	// MaxDeduplicationWindow; 0 means DeduplicationWindow (5 minutes).
	// Read it through Window.
	DeduplicationWindow time.Duration
	// Ordered makes the queue's item groups ordered (itemgroups.go; SQS
	// FIFO queues): a group's items are leased in produce order, one lease
	// at a time. False: groups serve fairness only. Default false.
	Ordered bool
	// Move is the queue's move to another PostgreSQL cluster while one is
	// in progress (queues.move; ADR 0023), set by the router of several
	// clusters in what Info returns; nil otherwise, and never stored with
	// the definition.
	Move *MoveStatus `json:"-"`
	// GroupDeadPolicy is what a dead item does to its group on an ordered
	// queue: GroupContinue ("" means it) or GroupHold
	// (CheckGroupDeadPolicy).
	GroupDeadPolicy string
	// PausedAt is when the queue's consumption was paused (queues.pause);
	// zero while it runs (the default). A paused queue hands out no items
	// (the engine's lease path, Paused); everything else goes on. Set and
	// cleared by Pause and Resume only.
	PausedAt time.Time
	// Cluster names the PostgreSQL cluster the queue lives on, in a
	// deployment of several (ADR 0023): set by the router of clusters in
	// what Info and List return, and, given to Create, the cluster to
	// place the queue on (CheckCluster). Never stored with the
	// definition (the catalog's placement holds it). Empty on memory,
	// Pebble and a deployment of one PostgreSQL cluster.
	Cluster string
}

// Paused reports whether the queue's consumption is paused: leases wait
// (a long poll until its request timeout, then no items) and nothing is
// handed out, while produces, the completes, retries and renewals of
// leases already held, and the lifecycle (lease expiry, dead-letter moves)
// go on.
func (q QueueInfo) Paused() bool { return !q.PausedAt.IsZero() }

// Pause pauses q's consumption at now (queues.pause). A queue paused
// already keeps its PausedAt: pausing twice is pausing once. It reports
// whether q changed.
func (q *QueueInfo) Pause(now time.Time) bool {
	if q.Paused() {
		return false
	}
	q.PausedAt = now
	return true
}

// Resume resumes q's consumption (queues.resume): its waiting leases are
// served again. A running queue stays as it is. It reports whether q
// changed.
func (q *QueueInfo) Resume() bool {
	if !q.Paused() {
		return false
	}
	q.PausedAt = time.Time{}
	return true
}

// Window returns the queue's deduplication window: DeduplicationWindow
// unless the queue sets its own.
func (q QueueInfo) Window() time.Duration {
	if q.DeduplicationWindow > 0 {
		return q.DeduplicationWindow
	}
	return DeduplicationWindow
}

// ItemMeta is the part of an item the logical queue keeps in memory. It is
// read at start-up by LoadItems and must stay small.
type ItemMeta struct {
	// ID is the item's current id within its queue: unique across the
	// queue's partitions and never reused, increasing in FIFO order (its
	// place in its partition). It changes every time the item is requeued:
	// it is the lease handle, so a lease's id never completes a later
	// lease of the item (ADR 0031).
	ID uint64
	// BodyID is the item's first id: the id it entered the queue under
	// (produced, imported, redriven or dead-lettered into it), fixed while
	// it stays in the queue (FirstID). It keys the item's ItemBody and
	// ItemErrors on the embedded backends; PostgreSQL reads it from its
	// first_id column.
	BodyID uint64
	// Attempts counts leases of the item that were not released.
	Attempts int32
	// FirstLeasedAt is when the item was first leased in its queue
	// (LeasedItem.FirstLeasedAt), kept through requeues and carried into a
	// dead-letter queue; zero before its first lease, on a redriven item
	// until its first lease there, and on items stored before it existed.
	FirstLeasedAt time.Time
	// Leased reports a live or expired-but-unprocessed lease; LeaseDeadline
	// is then set.
	Leased        bool
	LeaseDeadline time.Time
	// EnqueueAt is when a scheduled item becomes ready; zero when the item
	// was ready on arrival.
	EnqueueAt time.Time
	// ExpireDeadline is when the item expires (is dead with reason expired).
	ExpireDeadline time.Time
	CreatedAt      time.Time
	// DeadReason is set when the logical queue has decided the item is dead
	// ("max_attempts", "expired" or "explicit") but the dead-letter queue
	// has not yet confirmed the move; DeadAt is when it was decided. On
	// load such an item is moved again (the dead-letter queue ignores a
	// copy it already holds). Empty on live items.
	DeadReason string
	DeadAt     time.Time
	// SourceKey is set on items that came from elsewhere: dead items in a
	// dead-letter queue ("<dead reason>:<source queue>~<id there>"),
	// redriven items ("redrive:<dead-letter queue>~<id there>") and items
	// imported with a source_id ("import:<partition>~<source_id>"). A queue
	// holds at most one item per SourceKey; see ADR 0003. Opaque to stores.
	SourceKey string
	// Fingerprint is set on dead items in a dead-letter queue: the
	// fingerprint of their last error when they died (internal/fingerprint),
	// kept in memory for dead.groups. Empty on other items and on dead items
	// stored before fingerprints existed (the logical queue derives theirs
	// at load). Opaque to stores.
	Fingerprint string
	// Group is the item's group ("" for none; itemgroups.go), kept by
	// every move (requeue, dead-letter move, redrive).
	Group string
	// GroupSeq orders the items of a group within their partition: the
	// item's first id when it entered the queue (produced, imported,
	// redriven, dead-lettered into it), kept through requeues; a redriven
	// item that releases a held group takes the dead item's (HeldGroup.Seq).
	// 0 on items without a group.
	GroupSeq uint64
	// Holder is the consumer holding the item's lease, stored with the
	// lease (issue 49): set while Leased by a lease call (zero for a lease
	// stored before Styx kept it, and for items not leased).
	Holder Holder
}

// FirstID is the item's id for its whole life in the queue (ADR 0031): the
// id it entered the queue under, which every lookup by id accepts beside
// its current ID. BodyID, or ID when BodyID is not set.
func (m *ItemMeta) FirstID() uint64 {
	if m.BodyID != 0 {
		return m.BodyID
	}
	return m.ID
}

// HasID reports whether id names the item in a lookup: its current ID or
// its FirstID.
func (m *ItemMeta) HasID(id uint64) bool { return id == m.ID || id == m.FirstID() }

// Holder names the consumer of a lease: the lease call's client_id and the
// name of its API key ("" without --auth), as Consumer names a consumer.
// The zero Holder is unknown.
type Holder struct {
	ClientID string
	KeyName  string
}

// IsZero reports whether the holder is unknown.
func (h Holder) IsZero() bool { return h.ClientID == "" && h.KeyName == "" }

// ItemBody is the part of an item that is read only when the item is handed
// out or listed.
type ItemBody struct {
	Reference string
	Kind      string
	Encoding  string
	Payload   []byte
	// Attributes is an opaque blob kept with the item and carried unchanged
	// by every move (requeue, dead-letter move, redrive); see
	// queue.ProduceItem.Attributes and ADR 0016. Nil when the item has none.
	Attributes []byte
	// Dead-letter metadata; zero outside a dead-letter queue.
	SourceQueue  string
	SourceID     string
	DeadReason   string
	DeadAt       time.Time
	RedriveCount int32
}

// EditAttempt is the Attempt of an attempt history entry that records a
// payload edit (dead.edit), which is no attempt (issue 49: it read as
// "Attempt 1"). Stored as it is (every backend keeps Attempt as a signed
// number); on the wire such an entry is attempt 0 with kind "edit".
const EditAttempt int32 = -1

// AttemptError is one failed attempt's error text, or an entry the server
// adds to the history: a redrive (RedrivenHistory) or a payload edit
// (Attempt EditAttempt).
type AttemptError struct {
	Attempt int32
	Error   string
	At      time.Time
}

// ItemErrors is an item's attempt history.
type ItemErrors struct {
	// LastError is the error of the item's last failed attempt in a live
	// queue. On a dead item in a dead-letter queue it is the last error of
	// its source queue and never changes there (DeadLetter records what
	// happens in the DLQ).
	LastError string
	// Errors holds at most the 10 most recent errors, oldest first.
	Errors []AttemptError
	// DeadLetter is the DLQ attempt history of a dead item in a
	// dead-letter queue: its leases there that ended without a complete
	// (a retry, or a lease that expired), the MaxAttemptErrors most
	// recent, oldest first, each numbered by its DLQ attempt (1 for the
	// first lease in the DLQ). Its Error is the retry's error text ("" for
	// a retry without one) or LeaseExpiredError. Empty on other items; a
	// redrive does not carry it (ADR 0003, amendment of issue 39).
	DeadLetter []AttemptError
}

// IsZero reports whether the history is empty.
func (e ItemErrors) IsZero() bool {
	return e.LastError == "" && len(e.Errors) == 0 && len(e.DeadLetter) == 0
}

// DeadLetterAttempts is how many DLQ attempts the item has had: the number
// of the last one recorded in DeadLetter, 0 for none.
func (e ItemErrors) DeadLetterAttempts() int32 {
	if n := len(e.DeadLetter); n > 0 {
		return e.DeadLetter[n-1].Attempt
	}
	return 0
}

// Item is an item in full, as listed.
type Item struct {
	Partition int32
	Meta      ItemMeta
	Body      ItemBody
	Errors    ItemErrors
}

// ItemAttribute is one entry of an item's attributes blob
// (ItemBody.Attributes) as the API that wrote the blob describes it, for
// display (StorageItem.attributes): the blob's format belongs to that API
// (the SQS API's envelope, ADR 0016), so only it decodes the blob.
type ItemAttribute struct {
	// Group names the API and the set the entry belongs to, such as "SQS
	// message attribute".
	Group string
	Name  string
	// DataType is the entry's data type ("String", "Number", "Binary",
	// …); empty when it has none.
	DataType string
	// Value is the entry's value as text (binary values in base64).
	Value string
}

// AttributeDescriber returns the entries of an attributes blob, in display
// order; nil when it does not know the blob's format (another API's, or
// none). It must be safe for concurrent use.
type AttributeDescriber func(blob []byte) []ItemAttribute

// Package queue is the domain every layer shares: the Queue and Queues
// APIs (with their contract), the request and answer types, item ids,
// dead reasons and source keys, dead-item filters and error-group types,
// queue definition rules (ValidateCreate, ValidateUpdate, ValidateDelete),
// the dead-letter rule (DeadLetterQueue: named by a queue, or holding dead
// items, HoldsDeadItems; IsDeadLetterQueue, SourceQueues, DeadLetterQueues)
// and the item rules the engine decides by (rules.go). It holds no engine
// and no storage: internal/engine runs queues, internal/backend/embedded and
// internal/backend/postgres store them, and each imports this package, not each
// other (ADR 0014).
package queue

import (
	"context"
	"strings"
	"time"

	"github.com/styxq/styx/internal/apierr"
)

// Queue is the API of one queue, as the service and the redrive runner use
// it. Both backends implement it with the engine (engine.Engine runs every
// call that goes through the loop; its method docs give the semantics):
// embedded.Logical (one node owns the queue's state in memory; memory and
// Pebble storage) and postgres.Queue (several nodes share the queue through
// PostgreSQL; ADR 0006). Both pass the same conformance suite (queuetest)
// and functional tests.
type Queue interface {
	Name() string
	Produce(ctx context.Context, items []ProduceItem) error
	// Lease leases up to p.BatchSize items, waiting up to p.Timeout for
	// one; ErrNoItems when none came before then.
	Lease(ctx context.Context, p LeaseParams) (LeaseResult, error)
	Complete(ctx context.Context, partition int32, ids []uint64) error
	// DeleteReceived deletes the item each receipt's lease was of, unless
	// it has been leased again since (see engine.Engine.DeleteReceived); it
	// reports, in order, whether it deleted each.
	DeleteReceived(ctx context.Context, partition int32, rs []Receipt) ([]bool, error)
	Retry(ctx context.Context, partition int32, items []RetryItem) ([]RetryOutcome, error)
	Renew(ctx context.Context, partition int32, ids []uint64, timeout time.Duration) ([]time.Time, error)
	Stats(ctx context.Context) (Stats, error)
	// Consumers returns the queue's consumers (Consumer), by client_id and
	// key name, most recently seen first: on PostgreSQL those of every node
	// serving the queue, each node's own within a second.
	Consumers(ctx context.Context) ([]Consumer, error)
	Clear(ctx context.Context, p ClearParams) error
	Reload(ctx context.Context) error
	Import(ctx context.Context, partition int32, items []Item) ([]Item, error)
	Delete(ctx context.Context, refs []ItemRef) (int, error)
	DeleteDead(ctx context.Context, refs []ItemRef) (int, error)
	// Scheduled lists up to limit of a partition's scheduled items with ids
	// above after, in id order: ListPage with no byte bound.
	Scheduled(ctx context.Context, partition int32, after uint64, limit int) ([]Item, error)
	// List lists up to limit of a partition's other items (ready, leased,
	// dead: every item IsScheduled leaves out) with ids above after, in id
	// order: ListPage with no byte bound.
	List(ctx context.Context, partition int32, after uint64, limit int) ([]Item, error)
	// ListPage lists a page of a partition's items with ids above p.After,
	// in id order: its scheduled items (storage/scheduled.list) when
	// p.Scheduled, else the others (storage/items.list, as in Querator).
	// The page holds at most p.Limit items and at most p.MaxBytes of them
	// (Page: it stops before the item that would go over, and always holds
	// the first one there is), so it may be short while more items follow:
	// the next page starts after its last item. The backend reads no more
	// than the page and one item past it, whatever p.Limit. A scheduled
	// listing of a partition the queue does not have returns the error of
	// CheckPartition.
	ListPage(ctx context.Context, p ListParams) ([]Item, error)
	Scan(ctx context.Context, partitions int32, f *DeadFilter, p ScanParams) (items []Item, next uint64, err error)
	TakeRedriven(ctx context.Context, items []RedriveItem) error
	// EditDead changes a dead item at rest (see engine.Engine.EditDead).
	EditDead(ctx context.Context, ref ItemRef, edit func(*Item) error) (Item, error)
	// ErrorGroups returns the error groups of the dead items the queue
	// holds (see engine.Engine.ErrorGroups).
	ErrorGroups(ctx context.Context, f ErrorGroupFilter, limit int) (ErrorGroups, error)
	Pending() int
}

// Queues is a server's set of queues: administration (with the dead-letter
// configuration rules of ValidateCreate, ValidateUpdate and ValidateDelete)
// and access to each queue. Implemented by embedded.Manager, postgres.Manager and
// clusters.Router (several PostgreSQL clusters, ADR 0023).
type Queues interface {
	// Get returns the queue of name, or the error of NotFound.
	Get(name string) (Queue, error)
	// Info returns a queue's stored configuration, or the error of NotFound.
	Info(ctx context.Context, name string) (QueueInfo, error)
	// List returns the queues p selects: those of p.Namespace (every
	// namespace when empty) with names >= p.Pivot, in bytewise name order,
	// at most p.Limit (no limit when <= 0).
	List(ctx context.Context, p ListQueuesParams) ([]QueueInfo, error)
	Create(ctx context.Context, info QueueInfo) error
	Update(ctx context.Context, name string, change func(*QueueInfo) error) error
	Delete(ctx context.Context, name string) error
	// Close stops every queue, finishing the requests each has taken.
	Close()
}

// NotLeased is the apierr.Invalid error for ids that are not leased (or
// whose lease has expired) in partition n of queue: it names every one and
// wraps ErrNotLeased.
func NotLeased(ids []uint64, n int32, queue string) error {
	quoted := make([]string, len(ids))
	for i, id := range ids {
		quoted[i] = "'" + FormatID(id) + "'"
	}
	verb := "is"
	if len(ids) > 1 {
		verb = "are"
	}
	return apierr.Wrap(ErrNotLeased, apierr.Invalid, "invalid ids; %s %s not leased in partition %d of queue '%s'", strings.Join(quoted, ", "), verb, n, queue)
}

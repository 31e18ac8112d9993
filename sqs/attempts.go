package sqs

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/styxq/styx/internal/queue"
)

// Receive request attempts (ReceiveRequestAttemptId, FIFO queues only): a
// ReceiveMessage retried with the same attempt id within AttemptWindow
// returns the messages and receipt handles of the first, and resets their
// visibility timeout, as long as their receives last and none of them was
// deleted or had its visibility changed; a retry after that is refused
// (InvalidParameterValue), as SQS refuses it, and a retry after their
// visibility timeout has passed is a new receive. The record of attempts is
// the node's (attemptCache): on PostgreSQL a retry that reaches another
// node is a new receive (the messages of the first stay invisible, their
// groups waiting, until their visibility timeout passes).

// AttemptWindow is how long a ReceiveRequestAttemptId names its receive
// (SQS's 5 minutes).
const AttemptWindow = 5 * time.Minute

// The bounds of attemptCache: the receives a node remembers, and the bytes
// of their messages' bodies and attributes.
const (
	maxAttemptsRemembered = 10_000
	maxAttemptBytes       = 32 << 20
)

// attemptKey names one receive attempt: the queue (its id, so a re-created
// queue starts anew), the API key that made it (with --auth) and its id.
type attemptKey struct {
	queueID uint64
	key     string
	id      string
}

// handleKey names one receive of a message: a receipt handle's queue,
// partition and lease id.
type handleKey struct {
	queueID   uint64
	partition int32
	id        uint64
}

// attempt is one remembered receive.
type attempt struct {
	key attemptKey
	// done is closed once the receive that made the attempt has its
	// result; a retry meanwhile waits for it. The fields below are set
	// before, and read only after.
	done      chan struct{}
	partition int32
	items     []queue.LeasedItem
	// receivedAt is the time of the receive; deadline the end of the
	// visibility timeout it set; until the end of AttemptWindow.
	receivedAt, deadline, until time.Time
	bytes                       int
	// modified is set (under attemptCache.mu) when one of its messages is
	// deleted or has its visibility changed through this node.
	modified bool
}

// attemptCache is a node's record of receive attempts: at most
// maxAttemptsRemembered, holding at most maxAttemptBytes of message bodies
// and attributes, each for AttemptWindow at most (the oldest go first).
// Safe for concurrent use; its mutex is a leaf. n counts the attempts, so
// that deletes and visibility changes of queues without any take no lock.
type attemptCache struct {
	mu       sync.Mutex
	byKey    map[attemptKey]*attempt
	byHandle map[handleKey]*attempt
	order    []*attempt
	bytes    int
	n        atomic.Int64
}

// begin returns the attempt k names within its window, once the receive
// that made it has its result (waiting for it up to ctx), with fresh
// false; or a new attempt for the caller's receive, with fresh true: the
// caller then calls finish (or drop) with its result. A retry may call
// begin(k, now, old) to replace a finished attempt old by a new receive.
func (c *attemptCache) begin(ctx context.Context, k attemptKey, now time.Time, replace *attempt) (*attempt, bool, error) {
	for {
		c.mu.Lock()
		if c.byKey == nil {
			c.byKey, c.byHandle = map[attemptKey]*attempt{}, map[handleKey]*attempt{}
		}
		c.evict(now)
		a, ok := c.byKey[k]
		if ok && a != replace && now.Before(a.until) {
			c.mu.Unlock()
			select {
			case <-a.done:
			case <-ctx.Done():
				return nil, false, ctx.Err()
			}
			c.mu.Lock()
			current := c.byKey[k] == a
			c.mu.Unlock()
			if !current { // its receive got nothing, or failed: start anew
				continue
			}
			return a, false, nil
		}
		if ok {
			c.remove(a)
		}
		a = &attempt{key: k, done: make(chan struct{}), until: now.Add(AttemptWindow)}
		c.byKey[k] = a
		c.order = append(c.order, a)
		c.n.Add(1)
		c.mu.Unlock()
		return a, true, nil
	}
}

// finish records the result of a's receive: the items leased from
// partition at receivedAt, invisible until deadline (zero: visible at
// once). A receive that leased nothing, or whose messages are visible at
// once, is forgotten: a retry is a new receive.
func (c *attemptCache) finish(a *attempt, partition int32, items []queue.LeasedItem, receivedAt, deadline time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	defer close(a.done)
	if c.byKey[a.key] != a || len(items) == 0 || deadline.IsZero() {
		// Evicted while it received, or nothing to remember.
		c.remove(a)
		return
	}
	a.partition, a.items, a.receivedAt, a.deadline = partition, items, receivedAt, deadline
	for _, it := range items {
		a.bytes += len(it.Payload) + len(it.Attributes)
		c.byHandle[handleKey{a.key.queueID, partition, it.ID}] = a
	}
	c.bytes += a.bytes
	c.evict(receivedAt)
}

// drop forgets a: its receive failed, or its messages are gone.
func (c *attemptCache) drop(a *attempt) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.remove(a)
	select {
	case <-a.done:
	default:
		close(a.done)
	}
}

// renewed records that a's messages are invisible until deadline.
func (c *attemptCache) renewed(a *attempt, deadline time.Time) {
	c.mu.Lock()
	a.deadline = deadline
	c.mu.Unlock()
}

// state returns whether one of a's messages was deleted or had its
// visibility changed through this node, and the end of their visibility
// timeout as this node set it.
func (c *attemptCache) state(a *attempt) (modified bool, deadline time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return a.modified, a.deadline
}

// touch records that the receive h names was deleted or had its
// visibility changed: the attempt it belongs to, if any, can no longer be
// retried.
func (c *attemptCache) touch(h handleKey) {
	if c.n.Load() == 0 {
		return
	}
	c.mu.Lock()
	if a, ok := c.byHandle[h]; ok {
		a.modified = true
	}
	c.mu.Unlock()
}

// evict forgets the attempts whose window has ended and the oldest beyond
// the bounds. Called with c.mu held.
func (c *attemptCache) evict(now time.Time) {
	for len(c.order) > 0 {
		a := c.order[0]
		if c.byKey[a.key] == a && now.Before(a.until) && len(c.byKey) <= maxAttemptsRemembered && c.bytes <= maxAttemptBytes {
			return
		}
		c.order = c.order[1:]
		c.remove(a)
	}
	if cap(c.order) > 2*maxAttemptsRemembered && len(c.order) < cap(c.order)/4 {
		c.order = append([]*attempt(nil), c.order...)
	}
}

// remove forgets a (its place in order stays until evict reaches it).
// Called with c.mu held.
func (c *attemptCache) remove(a *attempt) {
	if c.byKey[a.key] != a {
		return
	}
	delete(c.byKey, a.key)
	c.n.Add(-1)
	for _, it := range a.items {
		if hk := (handleKey{a.key.queueID, a.partition, it.ID}); c.byHandle[hk] == a {
			delete(c.byHandle, hk)
		}
	}
	c.bytes -= a.bytes
}

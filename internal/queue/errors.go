package queue

import (
	"errors"

	"github.com/styxq/styx/internal/apierr"
)

// The domain's sentinels. The errors this package and the engine build for
// these cases are apierr.Error values wrapping them (apierr.Wrap), so that
// internal/errclass, the one classification of both doors, gives each its
// reason with errors.Is, never by message text.
var (
	// ErrQueueNotFound: the named queue does not exist (NotFound).
	ErrQueueNotFound = errors.New("queue does not exist")
	// ErrQueueExists: a create names a queue that exists (Exists).
	ErrQueueExists = errors.New("queue already exists")
	// ErrNotLeased: an id of a complete, retry or renew is not under a
	// live lease in its partition: never leased, its lease expired, or
	// already completed (CheckLeased, NotLeased).
	ErrNotLeased = errors.New("not leased")
	// ErrDuplicateID: an id appears more than once in one complete,
	// retry or renew (CheckLeased, CheckRenew).
	ErrDuplicateID = errors.New("id appears more than once")
	// ErrNotDeadLetterQueue: a call that acts on dead items names a queue
	// that no queue names as its dead_queue (DeadLetterQueue).
	ErrNotDeadLetterQueue = errors.New("not a dead-letter queue")
	// ErrDeadQueueNotFound: a queue's dead_queue names a queue that does
	// not exist (ValidateCreate, ValidateUpdate).
	ErrDeadQueueNotFound = errors.New("dead_queue does not exist")
	// ErrMaxAttempts: a max_attempts out of range (CheckMaxAttempts).
	ErrMaxAttempts = errors.New("max_attempts out of range")
	// ErrMatchedChanged: the dead items a confirmed dead.delete or
	// dead.redrive matches are not as many as the client counted
	// (CheckMatched).
	ErrMatchedChanged = errors.New("matched dead items changed since they were counted")
)

// ErrProduceTimeout: a produce's request_timeout passed before its queue
// answered it; the queue may still store its items (service's produce
// timeout, apierr.Unavailable: 453 with its outcome unknown).
var ErrProduceTimeout = errors.New("produce timed out")

// ErrQueueMoving: the queue is fenced while it moves to another PostgreSQL
// cluster (queues.move, ADR 0023): nothing of the request was written;
// retry (apierr.Unavailable, 453, reason queue_moving). The move ends
// within its copy's time, and the queue then answers on its new cluster.
var ErrQueueMoving = errors.New("queue moving")

// ErrNoItems answers a lease that waited its whole request timeout with no
// item to hand out: apierr.Retry (454), which the client retries. The
// engine answers it (engine.ErrNoItems is this value).
var ErrNoItems = apierr.New(apierr.Retry, "request timeout; no items are in the queue, try again")

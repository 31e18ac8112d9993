package queue

import "context"

// Mover is implemented by the Queues that can move a queue, with
// everything in it, from one PostgreSQL cluster to another (queues.move;
// ADR 0023: internal/backend/clusters). The service answers queues.move
// on any other Queues with 400 naming cluster.
type Mover interface {
	// Move moves the queue name to the cluster named cluster and returns
	// what it moved once the queue serves there. A move of the queue to
	// that cluster in progress (begun by any node, perhaps interrupted) is
	// continued, not begun again; a queue on that cluster already is
	// answered at once (Moved zero). While it runs the queue answers 453
	// queue moving (ErrQueueMoving). Errors: NotFound for an unknown
	// queue, apierr.Invalid naming cluster for an unknown cluster or one
	// the queue may not move to, store.ErrUnavailable (453) when a cluster
	// does not answer (the move stays in progress: call again). Safe for
	// concurrent use; ctx bounds the call's wait, not the move, which goes
	// on without the caller.
	Move(ctx context.Context, name, cluster string) (MoveResult, error)
}

// AsMover returns the Mover behind q: q itself, or the Queues it wraps
// (a wrapper says which with an Unwrap() Queues method, as
// history.Counting's does); false when there is none.
func AsMover(q Queues) (Mover, bool) {
	for q != nil {
		if m, ok := q.(Mover); ok {
			return m, true
		}
		u, ok := q.(interface{ Unwrap() Queues })
		if !ok {
			return nil, false
		}
		q = u.Unwrap()
	}
	return nil, false
}

// MoveResult is what a queue's move did (Mover.Move).
type MoveResult struct {
	// From and To name the clusters the queue moved from and to.
	From, To string
	// Epoch is the move's epoch, which its placement keeps.
	Epoch int64
	// Items is how many items (dead items included) the queue had, all
	// of them now on To.
	Items int64
}

// MoveStatus is a queue's move in progress (QueueInfo.Move).
type MoveStatus struct {
	// To names the cluster the queue moves to.
	To string
	// Epoch is the move's epoch.
	Epoch int64
	// Copied is how many of the queue's Total items the destination
	// holds; both 0 until the copy begins.
	Copied, Total int64
}

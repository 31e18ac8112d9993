package engine

import (
	"context"
	"errors"

	"github.com/styxq/styx/internal/queue"
	"github.com/styxq/styx/internal/store"
)

// Queue administration (queues.create, queues.update, queues.delete): the
// flows every backend's queue manager runs, with the dead-letter rules of
// queue.ValidateCreate, ValidateUpdate and ValidateDelete checked against
// the stored definitions inside one serialized step.

// Definitions stores queue definitions within one step of Admin (a subset
// of store.Catalog, with its errors).
type Definitions interface {
	// CreateQueue stores info, assigning its ID; store.ErrQueueExists if
	// the name is taken.
	CreateQueue(ctx context.Context, info queue.QueueInfo) (queue.QueueInfo, error)
	// UpdateQueue overwrites the queue info.Name (of ID info.ID);
	// store.ErrQueueNotFound if there is none.
	UpdateQueue(ctx context.Context, info queue.QueueInfo) error
	// DeleteQueue deletes the queue and its items; store.ErrQueueNotFound
	// if there is none.
	DeleteQueue(ctx context.Context, name string) error
}

// Admin runs fn as one step of queue administration, serialized with every
// other (the embedded manager: a mutex; PostgreSQL: a transaction holding a
// schema-wide advisory lock, so across nodes), with every stored definition
// by name and the Definitions to change them. An error fn returns aborts
// the step; Admin returns it (apierr errors as they are, storage failures
// classified). Aborted means the stored definitions and the queues the
// manager runs agree again: PostgreSQL rolls the transaction back (both as
// before); the embedded manager, whose store calls are each durable on
// their own, makes its running queue match what the store holds after the
// failure (both as before, or both as after when the store applied a
// change it reported failed; embedded.Manager.adminOf).
type Admin func(ctx context.Context, fn func(d Definitions, all map[string]queue.QueueInfo) error) error

// CreateQueue checks info against the stored queues (queue.ValidateCreate:
// the name is free, the dead_queue rules hold) and stores it, then runs
// then (when not nil) in the same step. It returns the stored definition;
// apierr.Invalid when a rule is broken or the queue exists.
func CreateQueue(ctx context.Context, admin Admin, info queue.QueueInfo, then func(queue.QueueInfo) error) (queue.QueueInfo, error) {
	err := admin(ctx, func(d Definitions, all map[string]queue.QueueInfo) error {
		if err := queue.ValidateCreate(all, info); err != nil {
			return err
		}
		created, err := d.CreateQueue(ctx, info)
		if errors.Is(err, store.ErrQueueExists) {
			return queue.Exists(info.Name)
		}
		if err != nil {
			return err
		}
		info = created
		return runHook(then, info)
	})
	return info, err
}

// UpdateQueue applies change to the stored definition of name, checks the
// result (queue.ValidateUpdate: partitions are never removed, the
// dead_queue rules hold) and stores it, then runs then (when not nil) in
// the same step. It returns the new definition; the error of
// queue.NotFound when there is no such queue.
func UpdateQueue(ctx context.Context, admin Admin, name string, change func(*queue.QueueInfo) error, then func(queue.QueueInfo) error) (queue.QueueInfo, error) {
	var info queue.QueueInfo
	err := admin(ctx, func(d Definitions, all map[string]queue.QueueInfo) error {
		old, ok := all[name]
		if !ok {
			return queue.NotFound(name)
		}
		info = old
		if err := change(&info); err != nil {
			return err
		}
		if err := queue.ValidateUpdate(all, old, info); err != nil {
			return err
		}
		if err := d.UpdateQueue(ctx, info); err != nil {
			if errors.Is(err, store.ErrQueueNotFound) {
				return queue.NotFound(name)
			}
			return err
		}
		return runHook(then, info)
	})
	return info, err
}

// DeleteQueue checks that name may be deleted (queue.ValidateDelete: it
// exists and is no queue's dead_queue), runs first (when not nil) in the
// same step, then deletes the queue with its items. It returns the deleted
// definition.
func DeleteQueue(ctx context.Context, admin Admin, name string, first func(queue.QueueInfo) error) (queue.QueueInfo, error) {
	var info queue.QueueInfo
	err := admin(ctx, func(d Definitions, all map[string]queue.QueueInfo) error {
		if err := queue.ValidateDelete(all, name); err != nil {
			return err
		}
		info = all[name]
		if err := runHook(first, info); err != nil {
			return err
		}
		if err := d.DeleteQueue(ctx, name); err != nil && !errors.Is(err, store.ErrQueueNotFound) {
			return err
		}
		return nil
	})
	return info, err
}

func runHook(f func(queue.QueueInfo) error, info queue.QueueInfo) error {
	if f == nil {
		return nil
	}
	return f(info)
}

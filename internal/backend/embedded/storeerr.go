package embedded

import (
	"context"
	"errors"

	"github.com/styxq/styx/internal/apierr"
	"github.com/styxq/styx/internal/queue"
	"github.com/styxq/styx/internal/store"
)

// readErr classifies the failure of a read the engine makes outside its
// loop (a scan, a list): a queue deleted meanwhile is NotFound (400); a
// client-facing error, or a context the client ended, is returned as is;
// anything else the store returns is storage failing, store.ErrUnavailable
// (453) naming the queue, as a failed write is (unavailable).
func readErr(name string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, store.ErrQueueNotFound):
		return queue.NotFound(name)
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		return err
	}
	return unavailable(name, err)
}

// catalogErr classifies the failure of a catalog call (queue definitions):
// the catalog's own answers (store.ErrQueueNotFound, store.ErrQueueExists),
// a client-facing error and a context the client ended are returned as is
// for the caller to answer; anything else is storage failing,
// store.ErrUnavailable (453), as on PostgreSQL.
func catalogErr(err error) error {
	if err == nil || errors.Is(err, store.ErrQueueNotFound) || errors.Is(err, store.ErrQueueExists) ||
		errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	if _, ok := apierr.As(err); ok {
		return err
	}
	return store.Unavailable("", err)
}

package engine

import (
	"context"
	"log/slog"
	"time"

	"github.com/styxq/styx/internal/queue"
)

// giveBackTimeout bounds the release of an abandoned lease's items: past
// it (a queue too busy, a store down) they wait for their lease deadline,
// as any lease whose consumer vanished.
const giveBackTimeout = 30 * time.Second

// giveBack releases the items of a lease whose caller went away before the
// loop's answer reached it (LeaseWait.Abandoned): each goes back to the
// queue with its attempt not counted (queue.RetryItem.Release), since no
// consumer ever saw it. An item completed, retried or expired meanwhile
// cannot be (it is no longer leased under that id): nothing changes then.
// A failure is logged and leaves the items to their lease deadline.
func (e *Engine) giveBack(res queue.LeaseResult) {
	items := make([]queue.RetryItem, len(res.Items))
	for i, item := range res.Items {
		items[i] = queue.RetryItem{ID: item.ID, Release: true}
	}
	ctx, cancel := context.WithTimeout(context.Background(), giveBackTimeout)
	defer cancel()
	if _, err := e.Retry(ctx, res.Partition, items); err != nil {
		log := e.Loop.Log
		if log == nil {
			log = slog.Default()
		}
		log.Warn("a lease whose client went away could not give its items back; they wait for their lease deadline",
			"queue", e.Loop.name, "items", len(items), "partition", res.Partition, "error", err)
	}
}

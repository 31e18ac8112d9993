package embedded

import (
	"github.com/styxq/styx/internal/engine"
	"github.com/styxq/styx/internal/queue"
)

// deadItem is an item on its way to a dead-letter queue.
type deadItem struct {
	sourceKey string
	attempts  int32
	created   int64
	// firstLeased is the item's first lease in the source queue (Unix
	// ns): a dead item keeps its first receive, as it keeps its attempts.
	firstLeased int64
	body        queue.ItemBody
	errors      queue.ItemErrors
	reason      string
	// group is the item's group, "" for none: the dead copy keeps it.
	group string
	// partition and id in the source queue
	partition int32
	id        uint64
	item      *item
}

// deadLetterOp asks a dead-letter queue to take items. The dead-letter
// queue sends the outcome to result, which the source owns, and wakes the
// source's loop.
type deadLetterOp struct {
	engine.HousekeepingOp
	// to is the dead-letter queue (offer sets it).
	to     *Logical
	source string
	items  []deadItem
	result chan<- moveResult
	wake   func()
}

// done hands the dead-letter queue's answer to the source. It never blocks:
// result has room for every move the source has in flight.
func (op *deadLetterOp) done(res moveResult) {
	op.result <- res
	op.wake()
}

// moveResult is a dead-letter queue's answer to a deadLetterOp.
type moveResult struct {
	op  *deadLetterOp
	err error
}

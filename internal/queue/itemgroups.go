package queue

import (
	"hash/fnv"

	"github.com/styxq/styx/internal/apierr"
)

// Item groups (issue 37, ADR 0026): an item may carry a group, a key such
// as a customer or an order id (SQS's MessageGroupId). Every item of one
// group goes to one partition (GroupPartition), so the rules below hold
// within a partition, on every backend:
//
//   - On an ordered queue (QueueInfo.Ordered; SQS FIFO), the items of a group
//     are leased in produce order, one lease at a time: an item of a group
//     is leasable when it is ready, no item of its group is leased, none of
//     its group that is ready, scheduled or leased has a smaller GroupSeq,
//     and the group is not held. One lease batch may take several items of
//     a group: the group's head, then the items after it in GroupSeq order
//     while they are ready. A requeued item (a retry, an expired lease)
//     keeps its GroupSeq, so it is its group's head again.
//   - On other queues the group serves fairness only (SQS's fair queues):
//     ready items are leased round-robin across groups, the items without
//     a group taking one turn as if they were one group; items within a
//     group stay FIFO.
//   - Dead-lettering in a group, on an ordered queue, follows
//     QueueInfo.GroupDeadPolicy: GroupContinue (the dead item leaves, the
//     group goes on: SQS's behaviour) or GroupHold (the group waits until
//     its dead item leaves the dead-letter queue, redriven or deleted; the
//     redriven item is the group's head).

// MaxGroup is the longest group, in bytes (SQS's MessageGroupId limit).
const MaxGroup = 128

// The dead-letter policies of an ordered queue's groups
// (QueueInfo.GroupDeadPolicy).
const (
	// GroupContinue: a dead item leaves its group and the group goes on
	// (SQS FIFO's behaviour). The default ("").
	GroupContinue = "continue"
	// GroupHold: the group leases nothing more until its dead item has
	// left the dead-letter queue (redriven back, at the group's head, or
	// deleted).
	GroupHold = "hold"
)

// CheckGroup returns an apierr.Invalid error naming field unless g is empty
// (no group) or 1 to 128 characters among ASCII letters, digits and
// punctuation (SQS's rule for MessageGroupId).
func CheckGroup(field, g string) error {
	if len(g) > MaxGroup {
		return apierr.Invalidf("invalid %s; %d bytes, the limit is %d", field, len(g), MaxGroup)
	}
	for i := 0; i < len(g); i++ {
		if c := g[i]; c <= ' ' || c > '~' {
			return apierr.Invalidf("invalid %s; byte %d (0x%02x) is not an ASCII letter, digit or punctuation", field, i, c)
		}
	}
	return nil
}

// CheckGroupDeadPolicy returns an apierr.Invalid error naming field unless p
// is "", GroupContinue or GroupHold, and ordered when p is GroupHold (the
// policy is an ordered queue's).
func CheckGroupDeadPolicy(field, p string, ordered bool) error {
	switch p {
	case "", GroupContinue:
		return nil
	case GroupHold:
		if !ordered {
			return apierr.Invalidf("invalid %s; '%s' needs an ordered queue (ordered: true)", field, p)
		}
		return nil
	}
	return apierr.Invalidf("invalid %s; '%s' is not '%s' or '%s'", field, p, GroupContinue, GroupHold)
}

// GroupPartition returns the partition of a queue with partitions
// partitions (at least 1) that every item of group g goes to: FNV-1a (32
// bits) of g, modulo partitions. A queue whose partitions change routes a
// group anew: items produced before the change stay where they are, and
// their order with the later ones is not kept.
func GroupPartition(g string, partitions int32) int32 {
	if partitions <= 1 {
		return 0
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(g))
	return int32(h.Sum32() % uint32(partitions))
}

// HeldGroup is a group of an ordered queue with GroupHold that waits for
// its dead item (queue.stats).
type HeldGroup struct {
	Partition int32
	Group     string
	// DeadKey is the dead item's source key in the dead-letter queue
	// (DeadCopyKey: the group waits while the dead-letter queue holds it).
	DeadKey string
	// DeadQueue is the dead-letter queue the dead item went to: the one
	// asked whether it still holds DeadKey, whatever the queue's dead_queue
	// is by then (a deleted one holds nothing).
	DeadQueue string
	// Seq is the dead item's GroupSeq: its redriven copy takes it, so that
	// it is the group's head again.
	Seq    uint64
	HeldAt int64 // Unix ns
}

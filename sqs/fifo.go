package sqs

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"strings"

	"github.com/styxq/styx/internal/queue"
	"github.com/styxq/styx/internal/text"
)

// FIFO queues (issue 37): an SQS FIFO queue is an ordered Styx queue
// (queue.QueueInfo.Ordered; internal/queue/itemgroups.go): a message's
// MessageGroupId is its item's group, so the engine leases a group's items
// in send order, one receive at a time, on every backend. Its
// MessageDeduplicationId (or, with ContentBasedDeduplication, the SHA-256 of
// its body) becomes the item's deduplication id (queue.ProduceItem.
// DeduplicationID), which the queue keeps for its deduplication window (5
// minutes, SQS's interval) on every node and across restarts. What SQS
// answers that the queue does not keep (the MessageId and SequenceNumber of
// a send, the messages a retried receive returns) is the fifo.Store's
// (Config.FIFO): on PostgreSQL every node's.

// The values of the FIFO queue attributes.
const (
	// DeduplicationScopeQueue deduplicates across the queue (the default);
	// DeduplicationScopeMessageGroup within each message group.
	DeduplicationScopeQueue        = "queue"
	DeduplicationScopeMessageGroup = "messageGroup"
	// FifoThroughputLimitPerQueue (the default) and
	// FifoThroughputLimitPerMessageGroupID are stored and returned; Styx
	// applies no throughput quota either way (SQS's quotas are its
	// partitions'; a Styx queue's throughput is its backend's, the same for
	// both values: docs/sqs.md).
	FifoThroughputLimitPerQueue          = "perQueue"
	FifoThroughputLimitPerMessageGroupID = "perMessageGroupId"
)

// fifoSuffix ends the name of every FIFO queue, and only theirs.
const fifoSuffix = ".fifo"

// fifoAttributeNames are the queue attributes of FIFO queues only.
var fifoAttributeNames = []string{"ContentBasedDeduplication", "DeduplicationScope", "FifoQueue", "FifoThroughputLimit"}

// isFIFO reports whether info's queue is an SQS FIFO queue: an ordered
// queue.
func isFIFO(info queue.QueueInfo) bool { return info.Ordered }

// badQueueName is SQS's answer to a standard queue name it does not accept
// (an empty one too, and a .fifo name without FifoQueue).
func badQueueName() *Error {
	return invalidParameter("Can only include alphanumeric characters, hyphens, or underscores. 1 to %d in length", MaxQueueNameLength)
}

// badFIFOQueueName is SQS's answer to a FIFO queue name it does not accept.
func badFIFOQueueName() *Error {
	return invalidParameter("The name of a FIFO queue can only include alphanumeric characters, hyphens, or underscores, must end with .fifo suffix and be 1 to %d in length.",
		MaxQueueNameLength)
}

// unknownAttribute is SQS's answer to an attribute the queue's type does
// not have (a FIFO attribute on a standard queue, FifoQueue on
// SetQueueAttributes).
func unknownAttribute(name string) *Error {
	return invalidAttributeName("Unknown Attribute %s.", name)
}

// checkQueueName applies SQS's rules to a new queue's name and its
// FifoQueue attribute (attrs may be nil) and reports whether the queue is
// a FIFO queue: a name of 1 to 80 characters among alphanumerics, hyphens
// and underscores is a standard queue, which takes no FifoQueue attribute
// (not even "false": InvalidAttributeName, as SQS); a FIFO queue has
// FifoQueue "true" and a name of that kind ending in ".fifo" (the suffix
// counts toward the 80).
func checkQueueName(name string, attrs map[string]string) (bool, error) {
	v, has := attrs["FifoQueue"]
	if has && v != "true" && v != "false" {
		return false, invalidAttributeValue("Invalid value for the parameter FifoQueue: '%s'; it must be true or false.", v)
	}
	fifo := has && v == "true"
	base, suffixed := strings.CutSuffix(name, fifoSuffix)
	switch {
	case suffixed && !fifo:
		return false, badQueueName()
	case fifo && (!suffixed || !validQueueName(base) || len(name) > MaxQueueNameLength):
		return false, badFIFOQueueName()
	case !fifo && !validQueueName(name):
		return false, badQueueName()
	case has && !fifo:
		return false, unknownAttribute("FifoQueue")
	}
	return fifo, nil
}

// validQueueName reports whether name has 1 to MaxQueueNameLength
// characters, each an ASCII letter, digit, hyphen or underscore.
func validQueueName(name string) bool {
	if name == "" || len(name) > MaxQueueNameLength {
		return false
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// applyFIFOAttribute sets one of a FIFO queue's attributes in a;
// FifoQueue itself is the queue's type, set by CreateQueue alone.
func applyFIFOAttribute(a *queueAttrs, name, v string) error {
	switch name {
	case "ContentBasedDeduplication":
		if v != "true" && v != "false" {
			return invalidAttributeValue("Invalid value for the parameter ContentBasedDeduplication: '%s'; it must be true or false.", v)
		}
		a.ContentBasedDeduplication = v == "true"
	case "DeduplicationScope":
		if v != DeduplicationScopeQueue && v != DeduplicationScopeMessageGroup {
			return invalidAttributeValue("Invalid value for the parameter DeduplicationScope: '%s'; it must be %s or %s.", v,
				DeduplicationScopeQueue, DeduplicationScopeMessageGroup)
		}
		a.DeduplicationScope = v
	case "FifoThroughputLimit":
		if v != FifoThroughputLimitPerQueue && v != FifoThroughputLimitPerMessageGroupID {
			return invalidAttributeValue("Invalid value for the parameter FifoThroughputLimit: '%s'; it must be %s or %s.", v,
				FifoThroughputLimitPerQueue, FifoThroughputLimitPerMessageGroupID)
		}
		a.FifoThroughputLimit = v
	}
	return nil
}

// checkFIFOAttributes applies the rule between a FIFO queue's attributes
// once they are all set: FifoThroughputLimit perMessageGroupId needs
// DeduplicationScope messageGroup (SQS's rule).
func checkFIFOAttributes(a queueAttrs) error {
	if a.FifoThroughputLimit == FifoThroughputLimitPerMessageGroupID && a.deduplicationScope() != DeduplicationScopeMessageGroup {
		return invalidAttributeValue("Invalid value for the parameter FifoThroughputLimit: %s is allowed only when DeduplicationScope is %s.",
			FifoThroughputLimitPerMessageGroupID, DeduplicationScopeMessageGroup)
	}
	return nil
}

func (a queueAttrs) deduplicationScope() string {
	if a.DeduplicationScope == "" {
		return DeduplicationScopeQueue
	}
	return a.DeduplicationScope
}

func (a queueAttrs) fifoThroughputLimit() string {
	if a.FifoThroughputLimit == "" {
		return FifoThroughputLimitPerQueue
	}
	return a.FifoThroughputLimit
}

// checkFIFOID applies SQS's rule for a MessageGroupId,
// MessageDeduplicationId or ReceiveRequestAttemptId (param): 1 to 128
// characters among ASCII letters, digits and punctuation.
func checkFIFOID(param, v string) error {
	if v == "" || queue.CheckGroup(param, v) != nil {
		return invalidParameter("Value %s for parameter %s is invalid. Reason: %s can only include alphanumeric and punctuation characters. 1 to %d in length.",
			text.Escape(clip(v)), param, param, queue.MaxGroup)
	}
	return nil
}

// notForQueueType is SQS's answer to a send parameter the queue's type
// does not take (MessageDeduplicationId on a standard queue, a message's
// own DelaySeconds on a FIFO queue).
func notForQueueType(param, v string) *Error {
	return invalidParameter("Value %s for parameter %s is invalid. Reason: The request include parameter that is not valid for this queue type.", text.Escape(clip(v)), param)
}

// errNoDeduplicationID is SQS's answer to a FIFO send without a
// MessageDeduplicationId to a queue without ContentBasedDeduplication.
var errNoDeduplicationID = invalidParameter("The queue should either have ContentBasedDeduplication enabled or MessageDeduplicationId provided explicitly")

// deduplication returns the MessageDeduplicationId of a FIFO send (the
// given one, or the hex SHA-256 of the body with ContentBasedDeduplication)
// and the item's deduplication id: the same within the queue's
// DeduplicationScope queue; with messageGroup, the hex SHA-256 of the group
// and that id (each length-prefixed), so that each group has its own ids.
func deduplication(a queueAttrs, group, given, body string) (shown, key string, err error) {
	shown = given
	if shown == "" {
		if !a.ContentBasedDeduplication {
			return "", "", errNoDeduplicationID
		}
		sum := sha256.Sum256([]byte(body))
		shown = hex.EncodeToString(sum[:])
	}
	if a.deduplicationScope() != DeduplicationScopeMessageGroup {
		return shown, shown, nil
	}
	h := sha256.New()
	for _, s := range []string{group, shown} {
		_ = binary.Write(h, binary.BigEndian, uint32(len(s)))
		h.Write([]byte(s))
	}
	return shown, "sqs-group:" + hex.EncodeToString(h.Sum(nil)), nil
}

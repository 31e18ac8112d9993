package pebble

import (
	"encoding/binary"
	"fmt"
)

// Key-space prefixes; see the package comment.
const (
	prefixFormat   byte = 0x00 // 0x00 → "styx-store-1"
	prefixCatalog  byte = 0x01 // 0x01 name → queue info
	prefixQueueSeq byte = 0x02 // 0x02 → last queue ID assigned (8-byte BE)
	prefixLastID   byte = 0x03 // 0x03 qid → queue's LastID (8-byte BE)
	prefixTask     byte = 0x04 // 0x04 task ID → task record
	prefixKey      byte = 0x05 // 0x05 API key name → key record
	prefixKeyID    byte = 0x06 // 0x06 API key ID → API key name
	prefixLegacy   byte = 0x07 // 0x07 qid → last item ID written in format 1 (8-byte BE)
	prefixClean    byte = 0x08 // 0x08 → empty; present while the store is closed cleanly (Unclean)
	prefixMeta     byte = 0x10 // 0x10 qid part id → item meta
	prefixBody     byte = 0x11 // 0x11 qid part bodyID → item body
	prefixErrors   byte = 0x12 // 0x12 qid part bodyID → item errors
	prefixState    byte = 0x13 // 0x13 qid part id → item meta once changed
	prefixDedup    byte = 0x14 // 0x14 qid deduplication id → its deadline (8-byte BE Unix nanoseconds)
	prefixHistory  byte = 0x15 // 0x15 qid minute node → a minute of the queue's history (history.go)
	prefixHeld     byte = 0x16 // 0x16 qid part group → a held group (queue.HeldGroup)
	prefixActivity byte = 0x17 // 0x17 id → an activity record (store.ActivityRecord; activity.go)
)

// formatValue is stored under formatKey; Open refuses any other but
// formatV1Value, which it upgrades (see the package comment).
const formatValue = "styx-store-2"

// formatV1Value is the marker of stores written before item records were
// written once (format 1: an item's meta was rewritten in place).
const formatV1Value = "styx-store-1"

// Key lengths.
const (
	queueKeyLen     = 1 + 8           // prefix, queue ID
	partitionKeyLen = queueKeyLen + 4 // ..., partition
	itemKeyLen      = partitionKeyLen + 8
)

var (
	formatKey   = []byte{prefixFormat}
	queueSeqKey = []byte{prefixQueueSeq}
	cleanKey    = []byte{prefixClean}
)

func catalogKey(name string) []byte {
	k := make([]byte, 0, 1+len(name))
	return append(append(k, prefixCatalog), name...)
}

// maxTaskID is the longest task ID accepted, in bytes (see
// store.TaskRecord.ID).
const maxTaskID = 128

// taskKey is the key of the task with the given ID.
func taskKey(id string) []byte {
	k := make([]byte, 0, 1+len(id))
	return append(append(k, prefixTask), id...)
}

// queueKey is prefix, queue ID: the LastID key, and the start of a queue's
// range in an item key space.
func queueKey(prefix byte, queueID uint64) []byte {
	k := make([]byte, queueKeyLen)
	k[0] = prefix
	binary.BigEndian.PutUint64(k[1:], queueID)
	return k
}

// partitionKey is the start of a partition's range in an item key space.
func partitionKey(prefix byte, queueID uint64, partition int32) []byte {
	k := make([]byte, partitionKeyLen, itemKeyLen)
	k[0] = prefix
	binary.BigEndian.PutUint64(k[1:], queueID)
	binary.BigEndian.PutUint32(k[queueKeyLen:], uint32(partition))
	return k
}

// itemKey is an item key: prefix, queue ID, partition, item ID or body ID.
// It fills buf, which the caller may reuse once the key has been handed to
// Pebble (Pebble copies keys it keeps).
func itemKey(buf *[itemKeyLen]byte, prefix byte, queueID uint64, partition int32, id uint64) []byte {
	buf[0] = prefix
	binary.BigEndian.PutUint64(buf[1:], queueID)
	binary.BigEndian.PutUint32(buf[queueKeyLen:], uint32(partition))
	binary.BigEndian.PutUint64(buf[partitionKeyLen:], id)
	return buf[:]
}

// dedupKey is the key of a queue's record of a deduplication id.
func dedupKey(queueID uint64, id string) []byte {
	return append(queueKey(prefixDedup, queueID), id...)
}

// heldKey is the key of a queue's record of held group g of partition
// part.
func heldKey(queueID uint64, part int32, g string) []byte {
	k := make([]byte, partitionKeyLen, partitionKeyLen+len(g))
	k[0] = prefixHeld
	binary.BigEndian.PutUint64(k[1:], queueID)
	binary.BigEndian.PutUint32(k[queueKeyLen:], uint32(part))
	return append(k, g...)
}

// itemID returns the id at the end of an item key.
func itemID(key []byte) (uint64, error) {
	if len(key) != itemKeyLen {
		return 0, fmt.Errorf("%w: item key of %d bytes", errCorrupt, len(key))
	}
	return binary.BigEndian.Uint64(key[partitionKeyLen:]), nil
}

// prefixEnd returns the smallest key greater than every key starting with
// prefix, or nil (no upper bound) if there is none.
func prefixEnd(prefix []byte) []byte {
	end := append([]byte(nil), prefix...)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] != 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

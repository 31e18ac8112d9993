package queue

import (
	"strconv"
	"strings"
)

// SourceKey identifies where an item came from: "<why>:<queue>~<id>", with
// why a dead reason for an item in a dead-letter queue, or "redrive" for an
// item redriven out of one (and see ImportKey for imported items). A queue
// holds at most one item per source key (ADR 0003); the parts also give
// queue.stats its counts by reason and by source without reading bodies.
// Queue names cannot contain '~', reasons contain no ':'.
func SourceKey(why, queue string, id uint64) string {
	return why + ":" + queue + "~" + FormatID(id)
}

// whyRedrive marks the source key of a redriven item.
const whyRedrive = "redrive"

// whyImport marks the source key of an item imported with a source_id.
const whyImport = "import"

// ImportKey is the source key of an item imported into partition with
// source_id sourceID: "import:<partition>~<source_id>". A queue holds at
// most one item per source key, so a partition holds at most one imported
// item per source_id: storage/items.import skips the later copies (as
// Querator does). The partition is part of the key because the rule is per
// partition and the key is unique per queue.
func ImportKey(partition int32, sourceID string) string {
	return whyImport + ":" + strconv.Itoa(int(partition)) + "~" + sourceID
}

// IsDeadCopyKey reports whether a source key marks a dead item resting in a
// dead-letter queue (not a redriven or imported item).
func IsDeadCopyKey(key string) bool {
	if key == "" {
		return false
	}
	why, _ := ParseSourceKey(key)
	return why != whyRedrive && why != whyImport
}

// IsImportKey reports whether a source key marks an item imported with a
// source_id (ImportKey).
func IsImportKey(key string) bool {
	return strings.HasPrefix(key, whyImport+":")
}

// ParseSourceKey returns the parts of a source key.
func ParseSourceKey(key string) (why, queue string) {
	why, rest, _ := strings.Cut(key, ":")
	queue, _, _ = strings.Cut(rest, "~")
	return why, queue
}

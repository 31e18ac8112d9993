package pebble

import (
	"encoding/binary"
	"fmt"

	pebbledb "github.com/cockroachdb/pebble/v2"

	"github.com/styxq/styx/internal/queue"
	"github.com/styxq/styx/internal/store"
)

// spaces are the item key spaces in key order: write emits a batch's
// records one space after the other.
var spaces = [...]byte{prefixMeta, prefixBody, prefixErrors, prefixState, prefixDedup, prefixHeld}

// batchWriter turns a store.Batch's ops into the records of a Pebble batch
// (format 2, ADR 0020).
type batchWriter struct {
	pb     *pebbledb.Batch
	qid    uint64
	legacy uint64 // the queue's last item ID written in format 1
	last   uint64 // the greatest ID inserted, leased, updated or requeued
	kbuf   [itemKeyLen]byte
	vbuf   []byte
}

// write adds the records of ops to the batch, one key space after the
// other: Pebble inserts a batch's records into its memtable one by one, and
// finds the place of a record that follows the one before it without a
// search (its skiplist keeps the last insert's neighbours), so a batch of
// items costs far fewer key comparisons than with their meta, body and
// state records interleaved. Within a key space the records keep the order
// of the ops, so that the records of one key do.
func (w *batchWriter) write(ops []store.Op) error {
	for _, space := range spaces {
		for i := range ops {
			if err := w.op(&ops[i], space); err != nil {
				return fmt.Errorf("op %d (item %d): %w", i, ops[i].Meta.ID, err)
			}
		}
	}
	for i := range ops {
		switch ops[i].Kind {
		case store.OpInsert, store.OpLease, store.OpUpdate, store.OpRequeue:
			w.last = max(w.last, ops[i].Meta.ID)
		}
	}
	return nil
}

// op adds op's records in key space space.
func (w *batchWriter) op(op *store.Op, space byte) error {
	m, part := &op.Meta, op.Partition
	switch op.Kind {
	case store.OpInsert:
		switch space {
		case prefixMeta:
			return w.setMeta(prefixMeta, op)
		case prefixBody:
			body := op.Body
			if body == nil {
				body = &queue.ItemBody{}
			}
			return w.setBody(part, m.BodyID, body)
		case prefixErrors:
			// A new item has no errors stored yet unless given.
			if op.Errors != nil && !op.Errors.IsZero() {
				return w.setErrors(op)
			}
		}
	case store.OpLease:
		// The first change of this ID's meta: a new state record.
		if space == prefixState {
			return w.setMeta(prefixState, op)
		}
	case store.OpUpdate:
		// A later change: the state record is deleted before it is set
		// again, so that it stays deletable with SingleDelete.
		if space == prefixState {
			if err := w.pb.Delete(w.key(prefixState, part, m.ID), nil); err != nil {
				return err
			}
			return w.setMeta(prefixState, op)
		}
	case store.OpRequeue:
		switch space {
		case prefixMeta:
			if err := w.del(prefixMeta, part, op.OldID); err != nil {
				return err
			}
			return w.setMeta(prefixMeta, op)
		case prefixState:
			// Requeued items were leased: their state record goes too.
			return w.pb.SingleDelete(w.key(prefixState, part, op.OldID), nil)
		}
	case store.OpDelete:
		switch space {
		case prefixMeta:
			return w.del(prefixMeta, part, m.ID)
		case prefixBody:
			return w.del(prefixBody, part, m.BodyID)
		case prefixErrors:
			if !op.NoErrors {
				return w.pb.Delete(w.key(prefixErrors, part, m.BodyID), nil)
			}
		case prefixState:
			// An item has a state record once leased or dead, and keeps
			// what made it so until it is deleted or requeued.
			if m.Leased || m.DeadReason != "" || m.Fingerprint != "" {
				return w.pb.SingleDelete(w.key(prefixState, part, m.ID), nil)
			}
		}
	case store.OpSetErrors:
		if space == prefixErrors {
			return w.setErrors(op)
		}
	case store.OpSetBody:
		// Deleted before it is set again, so that it stays deletable with
		// SingleDelete.
		if space == prefixBody {
			if err := w.pb.Delete(w.key(prefixBody, part, m.BodyID), nil); err != nil {
				return err
			}
			return w.setBody(part, m.BodyID, op.Body)
		}
	case store.OpDedup:
		if space == prefixDedup {
			v := binary.BigEndian.AppendUint64(w.vbuf[:0], uint64(op.DedupDeadline))
			w.vbuf = v
			return w.pb.Set(dedupKey(w.qid, op.DedupID), v, nil)
		}
	case store.OpDedupForget:
		if space == prefixDedup {
			return w.pb.Delete(dedupKey(w.qid, op.DedupID), nil)
		}
	case store.OpHoldGroup:
		if space == prefixHeld {
			w.vbuf = appendHeld(w.vbuf[:0], op.Held)
			return w.pb.Set(heldKey(w.qid, part, op.Held.Group), w.vbuf, nil)
		}
	case store.OpReleaseGroup:
		if space == prefixHeld {
			return w.pb.Delete(heldKey(w.qid, part, op.Held.Group), nil)
		}
	default:
		return fmt.Errorf("unknown op kind %d", op.Kind)
	}
	return nil
}

// key returns an item key in w.kbuf, valid until the next call.
func (w *batchWriter) key(prefix byte, part int32, id uint64) []byte {
	return itemKey(&w.kbuf, prefix, w.qid, part, id)
}

// setMeta sets op.Meta under op.Meta.ID, in the meta (prefixMeta) or state
// (prefixState) key space.
func (w *batchWriter) setMeta(prefix byte, op *store.Op) error {
	v, err := appendMeta(w.vbuf[:0], &op.Meta)
	w.vbuf = v
	if err != nil {
		return err
	}
	return w.pb.Set(w.key(prefix, op.Partition, op.Meta.ID), v, nil)
}

// setBody sets body under bodyID.
func (w *batchWriter) setBody(part int32, bodyID uint64, body *queue.ItemBody) error {
	v, err := appendBody(w.vbuf[:0], body)
	w.vbuf = v
	if err != nil {
		return err
	}
	return w.pb.Set(w.key(prefixBody, part, bodyID), v, nil)
}

// setErrors sets op.Errors under op.Meta.BodyID, or deletes the stored
// errors when op.Errors is nil or empty.
func (w *batchWriter) setErrors(op *store.Op) error {
	key := w.key(prefixErrors, op.Partition, op.Meta.BodyID)
	if op.Errors == nil || op.Errors.IsZero() {
		return w.pb.Delete(key, nil)
	}
	v, err := appendErrors(w.vbuf[:0], op.Errors)
	w.vbuf = v
	if err != nil {
		return err
	}
	return w.pb.Set(key, v, nil)
}

// del deletes a meta or body record: with SingleDelete, which vanishes
// with the record's one Set when both meet in a flush, for records written
// since format 2 (id above w.legacy, the queue's last ID written in format
// 1, which may have rewritten them in place), else with Delete.
func (w *batchWriter) del(prefix byte, part int32, id uint64) error {
	if id <= w.legacy {
		return w.pb.Delete(w.key(prefix, part, id), nil)
	}
	return w.pb.SingleDelete(w.key(prefix, part, id), nil)
}

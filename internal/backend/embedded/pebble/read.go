package pebble

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"

	pebbledb "github.com/cockroachdb/pebble/v2"

	"github.com/styxq/styx/internal/queue"
)

// Reads: the start-up loads of a queue's items, deduplication ids and held
// groups, and the snapshot reads of bodies and item pages.

// LoadItems implements store.Store. It scans only the partition's meta
// range. fn runs while the call is in progress, so it must not call Close.
func (s *Store) LoadItems(ctx context.Context, queueID uint64, partition int32, fn func(queue.ItemMeta) error) error {
	errFn, err := s.loadItems(ctx, queueID, partition, fn)
	if errFn != nil {
		return errFn
	}
	if err != nil {
		return fmt.Errorf("pebble: load items of queue %d partition %d: %w", queueID, partition, err)
	}
	return nil
}

// LoadDedup implements store.Store: one scan of the queue's deduplication
// records.
func (s *Store) LoadDedup(ctx context.Context, queueID uint64, fn func(id string, deadline int64) error) error {
	return s.loadRange(ctx, queueID, prefixDedup, "deduplication ids", func(k, v []byte) (error, error) {
		if len(v) != 8 {
			return nil, fmt.Errorf("%w: deduplication record of %d bytes", errCorrupt, len(v))
		}
		return fn(string(k[queueKeyLen:]), int64(binary.BigEndian.Uint64(v))), nil
	})
}

// LoadHeldGroups implements store.Store: one scan of the queue's held
// groups.
func (s *Store) LoadHeldGroups(ctx context.Context, queueID uint64, fn func(queue.HeldGroup) error) error {
	return s.loadRange(ctx, queueID, prefixHeld, "held groups", func(k, v []byte) (error, error) {
		if len(k) < partitionKeyLen {
			return nil, fmt.Errorf("%w: held group key of %d bytes", errCorrupt, len(k))
		}
		h, err := decodeHeld(int32(binary.BigEndian.Uint32(k[queueKeyLen:])), string(k[partitionKeyLen:]), v)
		if err != nil {
			return nil, err
		}
		return fn(h), nil
	})
}

// loadRange scans the records of queue queueID under prefix (a key space
// of queue-scoped records), calling record with each key and value:
// record returns its caller's error apart (errFn, passed on unwrapped) from
// a store error (corruption), which is wrapped naming what ("held groups").
func (s *Store) loadRange(ctx context.Context, queueID uint64, prefix byte, what string, record func(k, v []byte) (errFn, err error)) error {
	errFn, err := func() (error, error) {
		if _, err := s.queue(ctx, queueID); err != nil {
			return nil, err
		}
		defer s.exit()
		start := queueKey(prefix, queueID)
		it, err := s.db.NewIterWithContext(ctx, &pebbledb.IterOptions{LowerBound: start, UpperBound: prefixEnd(start)})
		if err != nil {
			return nil, err
		}
		defer it.Close()
		for it.First(); it.Valid(); it.Next() {
			v, err := it.ValueAndErr()
			if err != nil {
				return nil, err
			}
			if errFn, err := record(it.Key(), v); errFn != nil || err != nil {
				return errFn, err
			}
		}
		return nil, it.Error()
	}()
	if errFn != nil {
		return errFn
	}
	if err != nil {
		return fmt.Errorf("pebble: load %s of queue %d: %w", what, queueID, err)
	}
	return nil
}

// loadItems returns fn's error apart, so that it is passed on unwrapped.
func (s *Store) loadItems(ctx context.Context, queueID uint64, partition int32, fn func(queue.ItemMeta) error) (errFn, err error) {
	if _, err := s.queue(ctx, queueID); err != nil {
		return nil, err
	}
	defer s.exit()
	items, err := newMetaIter(ctx, s.db, queueID, partition, 0)
	if err != nil {
		return nil, err
	}
	defer items.close()
	var m queue.ItemMeta
	n := 0
	for items.first(); items.valid(); items.next() {
		if n++; n%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		if err := items.meta(&m); err != nil {
			return nil, err
		}
		if err := fn(m); err != nil {
			return err, nil
		}
	}
	return nil, items.err()
}

// metaIter walks one partition's items in id order: each item's meta record
// (0x10), superseded by its state record (0x13) when it has one (store
// format 2, ADR 0020). LoadItems and ListItems read through it.
type metaIter struct {
	metas, states *pebbledb.Iterator
}

// newMetaIter opens a metaIter on r (the database or a snapshot) over the
// items of partition with ids from from on. Close it.
func newMetaIter(ctx context.Context, r pebbledb.Reader, queueID uint64, partition int32, from uint64) (*metaIter, error) {
	open := func(prefix byte) (*pebbledb.Iterator, error) {
		var kbuf [itemKeyLen]byte
		return r.NewIterWithContext(ctx, &pebbledb.IterOptions{
			LowerBound: itemKey(&kbuf, prefix, queueID, partition, from),
			UpperBound: prefixEnd(partitionKey(prefix, queueID, partition)),
		})
	}
	metas, err := open(prefixMeta)
	if err != nil {
		return nil, err
	}
	states, err := open(prefixState)
	if err != nil {
		metas.Close()
		return nil, err
	}
	states.First()
	return &metaIter{metas: metas, states: states}, nil
}

func (it *metaIter) first()      { it.metas.First() }
func (it *metaIter) valid() bool { return it.metas.Valid() }
func (it *metaIter) next()       { it.metas.Next() }

// err returns the first error either iterator met.
func (it *metaIter) err() error {
	if err := it.states.Error(); err != nil {
		return err
	}
	return it.metas.Error()
}

func (it *metaIter) close() {
	it.states.Close()
	it.metas.Close()
}

// meta decodes the current item's meta into m: its state record when it has
// one, else its meta record.
func (it *metaIter) meta(m *queue.ItemMeta) error {
	id, err := itemID(it.metas.Key())
	if err != nil {
		return err
	}
	v, err := it.metas.ValueAndErr()
	if err != nil {
		return err
	}
	if sv, ok, err := it.stateOf(id); err != nil {
		return err
	} else if ok {
		v = sv
	}
	if err := decodeMeta(v, id, m); err != nil {
		return fmt.Errorf("item %d: %w", id, err)
	}
	return nil
}

// stateOf moves the state iterator, used in ascending item order, to the
// record of item id and returns its value, if there is one. Records of items
// with a lower id (none but strays) are skipped.
func (it *metaIter) stateOf(id uint64) ([]byte, bool, error) {
	states := it.states
	for states.Valid() && binary.BigEndian.Uint64(states.Key()[partitionKeyLen:]) < id {
		states.Next()
	}
	if !states.Valid() || binary.BigEndian.Uint64(states.Key()[partitionKeyLen:]) != id {
		return nil, false, states.Error()
	}
	v, err := states.ValueAndErr()
	return v, err == nil, err
}

// ReadBodies implements store.Store. All reads come from one snapshot.
func (s *Store) ReadBodies(ctx context.Context, queueID uint64, partition int32, bodyIDs []uint64) ([]queue.ItemBody, []queue.ItemErrors, error) {
	bodies, errs, err := s.readBodies(ctx, queueID, partition, bodyIDs, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("pebble: read bodies of queue %d partition %d: %w", queueID, partition, err)
	}
	return bodies, errs, nil
}

// ReadBodiesWithin implements store.Store. All reads come from one
// snapshot.
func (s *Store) ReadBodiesWithin(ctx context.Context, queueID uint64, partition int32, bodyIDs []uint64, maxBytes int) ([]queue.ItemBody, []queue.ItemErrors, error) {
	bodies, errs, err := s.readBodies(ctx, queueID, partition, bodyIDs, maxBytes)
	if err != nil {
		return nil, nil, fmt.Errorf("pebble: read bodies of queue %d partition %d: %w", queueID, partition, err)
	}
	return bodies, errs, nil
}

// readBodies reads the bodies of bodyIDs, stopping after the one that
// brings their size to maxBytes or more (maxBytes <= 0: no bound).
func (s *Store) readBodies(ctx context.Context, queueID uint64, partition int32, bodyIDs []uint64, maxBytes int) ([]queue.ItemBody, []queue.ItemErrors, error) {
	if _, err := s.queue(ctx, queueID); err != nil {
		return nil, nil, err
	}
	defer s.exit()
	snap := s.db.NewSnapshot()
	defer snap.Close()
	r := bodyReader{snap: snap, queueID: queueID, partition: partition}
	defer r.close()
	n := len(bodyIDs)
	if maxBytes > 0 {
		n = min(n, 256) // the bound, not len(bodyIDs), decides how many
	}
	bodies := make([]queue.ItemBody, 0, n)
	errs := make([]queue.ItemErrors, 0, n)
	size := 0
	for _, id := range bodyIDs {
		if maxBytes > 0 && size >= maxBytes {
			break
		}
		b, e, err := r.read(id)
		if err != nil {
			return nil, nil, err
		}
		bodies, errs = append(bodies, b), append(errs, e)
		size += queue.ItemBytes(&queue.Item{Body: b, Errors: e})
	}
	return bodies, errs, nil
}

// ListItems implements store.Store. All reads come from one snapshot.
func (s *Store) ListItems(ctx context.Context, queueID uint64, partition int32, afterID uint64, limit int) ([]queue.Item, error) {
	return s.ListItemsWithin(ctx, queueID, partition, afterID, limit, 0)
}

// ListItemsWithin implements store.Store. All reads come from one
// snapshot; it reads a body only for an item it returns.
func (s *Store) ListItemsWithin(ctx context.Context, queueID uint64, partition int32, afterID uint64, limit, maxBytes int) ([]queue.Item, error) {
	items, err := s.listItems(ctx, queueID, partition, afterID, limit, maxBytes)
	if err != nil {
		return nil, fmt.Errorf("pebble: list items of queue %d partition %d: %w", queueID, partition, err)
	}
	return items, nil
}

func (s *Store) listItems(ctx context.Context, queueID uint64, partition int32, afterID uint64, limit, maxBytes int) ([]queue.Item, error) {
	if limit <= 0 {
		return nil, fmt.Errorf("limit %d must be > 0", limit)
	}
	if _, err := s.queue(ctx, queueID); err != nil {
		return nil, err
	}
	defer s.exit()
	if afterID == ^uint64(0) {
		return nil, nil
	}
	snap := s.db.NewSnapshot()
	defer snap.Close()
	metas, err := newMetaIter(ctx, snap, queueID, partition, afterID+1)
	if err != nil {
		return nil, err
	}
	defer metas.close()
	r := bodyReader{snap: snap, queueID: queueID, partition: partition}
	defer r.close()
	var items []queue.Item
	size := 0
	for metas.first(); metas.valid() && len(items) < limit && (maxBytes <= 0 || size < maxBytes); metas.next() {
		x := queue.Item{Partition: partition}
		if err := metas.meta(&x.Meta); err != nil {
			return nil, err
		}
		if x.Body, x.Errors, err = r.read(x.Meta.BodyID); err != nil {
			return nil, err
		}
		items = append(items, x)
		size += queue.ItemBytes(&x)
	}
	return items, metas.err()
}

// bodyReader reads bodies and errors of one partition from a snapshot,
// through one iterator per key space that every read seeks (a Get per read
// would build new iterators over every level each time; a listing reads
// hundreds). Close it when done.
type bodyReader struct {
	snap      *pebbledb.Snapshot
	queueID   uint64
	partition int32
	kbuf      [itemKeyLen]byte
	// bodies and errs are opened by the first read that needs them.
	bodies, errs *pebbledb.Iterator
}

// read returns the body and errors stored under bodyID, zero values for
// missing ones.
func (r *bodyReader) read(bodyID uint64) (queue.ItemBody, queue.ItemErrors, error) {
	var body queue.ItemBody
	var errs queue.ItemErrors
	err := r.get(&r.bodies, prefixBody, bodyID, func(v []byte) (err error) {
		body, err = decodeBody(v)
		return err
	})
	if err == nil {
		err = r.get(&r.errs, prefixErrors, bodyID, func(v []byte) (err error) {
			errs, err = decodeErrors(v)
			return err
		})
	}
	if err != nil {
		return queue.ItemBody{}, queue.ItemErrors{}, fmt.Errorf("body %d: %w", bodyID, err)
	}
	return body, errs, nil
}

// get calls decode with the value under an item key of the key space
// prefix, if there is one, seeking *it (opened on first use). decode must
// not keep v.
func (r *bodyReader) get(it **pebbledb.Iterator, prefix byte, id uint64, decode func(v []byte) error) error {
	if *it == nil {
		bounds := partitionKey(prefix, r.queueID, r.partition)
		i, err := r.snap.NewIter(&pebbledb.IterOptions{LowerBound: bounds, UpperBound: prefixEnd(bounds)})
		if err != nil {
			return err
		}
		*it = i
	}
	key := itemKey(&r.kbuf, prefix, r.queueID, r.partition, id)
	if !(*it).SeekGE(key) || !bytes.Equal((*it).Key(), key) {
		return (*it).Error()
	}
	v, err := (*it).ValueAndErr()
	if err != nil {
		return err
	}
	return decode(v)
}

// close closes the iterators.
func (r *bodyReader) close() {
	for _, it := range []*pebbledb.Iterator{r.bodies, r.errs} {
		if it != nil {
			_ = it.Close()
		}
	}
}

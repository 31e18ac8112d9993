package pebble

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	pebbledb "github.com/cockroachdb/pebble/v2"

	"github.com/styxq/styx/internal/queue"
	"github.com/styxq/styx/internal/store"
)

// The queue catalog (0x01, 0x02) and each queue's LastID (0x03).

// CreateQueue implements store.Store. info.ID is ignored and assigned from
// a persisted counter, so IDs are never reused. The change is synced
// whatever Config.NoSync says.
func (s *Store) CreateQueue(ctx context.Context, info queue.QueueInfo) (queue.QueueInfo, error) {
	info, err := s.createQueue(ctx, info)
	if err != nil {
		return queue.QueueInfo{}, fmt.Errorf("pebble: create queue %q: %w", info.Name, err)
	}
	return info, nil
}

func (s *Store) createQueue(ctx context.Context, info queue.QueueInfo) (queue.QueueInfo, error) {
	if err := s.enterWrite(ctx); err != nil {
		return info, err
	}
	defer s.exit()
	s.catMu.Lock()
	defer s.catMu.Unlock()

	key := catalogKey(info.Name)
	if _, err := s.get(key); err == nil {
		return info, store.ErrQueueExists
	} else if !errors.Is(err, pebbledb.ErrNotFound) {
		return info, err
	}
	info.ID = s.lastQueueID + 1
	v, err := appendQueueInfo(nil, &info)
	if err != nil {
		return info, err
	}
	b := s.db.NewBatch()
	defer b.Close()
	if err := b.Set(key, v, nil); err != nil {
		return info, err
	}
	if err := b.Set(queueSeqKey, binary.BigEndian.AppendUint64(nil, info.ID), nil); err != nil {
		return info, err
	}
	if err := s.commit(func() error { return b.Commit(pebbledb.Sync) }); err != nil {
		return info, err
	}
	s.lastQueueID = info.ID
	s.mu.Lock()
	s.queues[info.ID] = &queueState{}
	s.mu.Unlock()
	return info, nil
}

// UpdateQueue implements store.Store. It returns store.ErrQueueNotFound when
// no queue has info.Name or when its ID is not info.ID. The change is synced
// whatever Config.NoSync says.
func (s *Store) UpdateQueue(ctx context.Context, info queue.QueueInfo) error {
	if err := s.updateQueue(ctx, info); err != nil {
		return fmt.Errorf("pebble: update queue %q: %w", info.Name, err)
	}
	return nil
}

func (s *Store) updateQueue(ctx context.Context, info queue.QueueInfo) error {
	if err := s.enterWrite(ctx); err != nil {
		return err
	}
	defer s.exit()
	s.catMu.Lock()
	defer s.catMu.Unlock()

	cur, err := s.getQueue(info.Name)
	if err != nil {
		return err
	}
	if cur.ID != info.ID {
		return store.ErrQueueNotFound
	}
	v, err := appendQueueInfo(nil, &info)
	if err != nil {
		return err
	}
	return s.commit(func() error { return s.db.Set(catalogKey(info.Name), v, pebbledb.Sync) })
}

// GetQueue implements store.Store.
func (s *Store) GetQueue(ctx context.Context, name string) (queue.QueueInfo, error) {
	if err := s.enter(ctx); err != nil {
		return queue.QueueInfo{}, fmt.Errorf("pebble: get queue %q: %w", name, err)
	}
	defer s.exit()
	info, err := s.getQueue(name)
	if err != nil {
		return queue.QueueInfo{}, fmt.Errorf("pebble: get queue %q: %w", name, err)
	}
	return info, nil
}

// getQueue reads a catalog entry, mapping a missing one to
// store.ErrQueueNotFound.
func (s *Store) getQueue(name string) (queue.QueueInfo, error) {
	v, err := s.get(catalogKey(name))
	if errors.Is(err, pebbledb.ErrNotFound) {
		return queue.QueueInfo{}, store.ErrQueueNotFound
	}
	if err != nil {
		return queue.QueueInfo{}, err
	}
	return decodeQueueInfo(name, v)
}

// ListQueues implements store.Store.
func (s *Store) ListQueues(ctx context.Context, p queue.ListQueuesParams) ([]queue.QueueInfo, error) {
	qs, err := s.listQueues(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("pebble: list queues: %w", err)
	}
	return qs, nil
}

// listQueues scans the catalog from the pivot. The namespace is inside each
// entry, so a filtered list reads every entry after the pivot until it has
// p.Limit matches: the catalog is small (one entry per queue).
func (s *Store) listQueues(ctx context.Context, p queue.ListQueuesParams) ([]queue.QueueInfo, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	defer s.exit()
	iter, err := s.db.NewIter(&pebbledb.IterOptions{
		LowerBound: catalogKey(p.Pivot),
		UpperBound: []byte{prefixCatalog + 1},
	})
	if err != nil {
		return nil, err
	}
	defer iter.Close()
	var out []queue.QueueInfo
	for iter.First(); iter.Valid() && (p.Limit <= 0 || len(out) < p.Limit); iter.Next() {
		v, err := iter.ValueAndErr()
		if err != nil {
			return nil, err
		}
		name := string(iter.Key()[1:])
		info, err := decodeQueueInfo(name, v)
		if err != nil {
			return nil, fmt.Errorf("queue %q: %w", name, err)
		}
		if p.Namespace != "" && info.Namespace != p.Namespace {
			continue
		}
		out = append(out, info)
	}
	return out, iter.Error()
}

// DeleteQueue implements store.Store. Items go with one range deletion per
// key space; Pebble reclaims their space in later compactions. The change
// is synced whatever Config.NoSync says.
func (s *Store) DeleteQueue(ctx context.Context, name string) error {
	if err := s.deleteQueue(ctx, name); err != nil {
		return fmt.Errorf("pebble: delete queue %q: %w", name, err)
	}
	return nil
}

func (s *Store) deleteQueue(ctx context.Context, name string) error {
	if err := s.enterWrite(ctx); err != nil {
		return err
	}
	defer s.exit()
	s.catMu.Lock()
	defer s.catMu.Unlock()

	info, err := s.getQueue(name)
	if err != nil {
		return err
	}
	s.mu.Lock()
	qs := s.queues[info.ID]
	s.mu.Unlock()
	if qs == nil {
		return fmt.Errorf("queue id %d: not loaded", info.ID)
	}
	qs.mu.Lock()
	defer qs.mu.Unlock()

	b := s.db.NewBatch()
	defer b.Close()
	for _, prefix := range []byte{prefixMeta, prefixBody, prefixErrors, prefixState, prefixDedup, prefixHistory, prefixHeld} {
		start := queueKey(prefix, info.ID)
		if err := b.DeleteRange(start, prefixEnd(start), nil); err != nil {
			return err
		}
	}
	if err := b.Delete(queueKey(prefixLastID, info.ID), nil); err != nil {
		return err
	}
	if err := b.Delete(queueKey(prefixLegacy, info.ID), nil); err != nil {
		return err
	}
	if err := b.Delete(catalogKey(name), nil); err != nil {
		return err
	}
	if err := s.commit(func() error { return b.Commit(pebbledb.Sync) }); err != nil {
		return err
	}
	qs.deleted = true
	s.mu.Lock()
	delete(s.queues, info.ID)
	s.mu.Unlock()
	return nil
}

// LastID implements store.Store. It is served from memory.
func (s *Store) LastID(ctx context.Context, queueID uint64) (uint64, error) {
	qs, err := s.queue(ctx, queueID)
	if err != nil {
		return 0, fmt.Errorf("pebble: last id of queue %d: %w", queueID, err)
	}
	defer s.exit()
	qs.mu.Lock()
	defer qs.mu.Unlock()
	if qs.deleted {
		return 0, fmt.Errorf("pebble: last id of queue %d: %w", queueID, store.ErrQueueNotFound)
	}
	return qs.lastID, nil
}

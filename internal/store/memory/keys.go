package memory

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/styxq/styx/internal/store"
)

// CreateKey implements store.KeyStore. It stores a copy of k.
func (s *Store) CreateKey(ctx context.Context, k store.KeyRecord) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memory: create key %q: %w", k.Name, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("memory: create key %q: %w", k.Name, store.ErrClosed)
	}
	if _, ok := s.keys[k.Name]; ok {
		return fmt.Errorf("memory: create key %q: %w", k.Name, store.ErrKeyExists)
	}
	for _, o := range s.keys {
		if o.ID == k.ID {
			return fmt.Errorf("memory: create key %q: id: %w", k.Name, store.ErrKeyExists)
		}
	}
	s.keys[k.Name] = copyKey(k)
	return nil
}

// GetKey implements store.KeyStore. Keys are few, so it scans them.
func (s *Store) GetKey(ctx context.Context, id string) (store.KeyRecord, error) {
	if err := ctx.Err(); err != nil {
		return store.KeyRecord{}, fmt.Errorf("memory: get key: %w", err)
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return store.KeyRecord{}, fmt.Errorf("memory: get key: %w", store.ErrClosed)
	}
	for _, k := range s.keys {
		if k.ID == id {
			return copyKey(k), nil
		}
	}
	return store.KeyRecord{}, store.ErrKeyNotFound
}

// ListKeys implements store.KeyStore.
func (s *Store) ListKeys(ctx context.Context) ([]store.KeyRecord, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("memory: list keys: %w", err)
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, fmt.Errorf("memory: list keys: %w", store.ErrClosed)
	}
	out := make([]store.KeyRecord, 0, len(s.keys))
	for _, k := range s.keys {
		out = append(out, copyKey(k))
	}
	slices.SortFunc(out, func(a, b store.KeyRecord) int { return cmp.Compare(a.Name, b.Name) })
	return out, nil
}

// DeleteKey implements store.KeyStore.
func (s *Store) DeleteKey(ctx context.Context, name string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memory: delete key %q: %w", name, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("memory: delete key %q: %w", name, store.ErrClosed)
	}
	if _, ok := s.keys[name]; !ok {
		return fmt.Errorf("memory: delete key %q: %w", name, store.ErrKeyNotFound)
	}
	delete(s.keys, name)
	return nil
}

// copyKey returns k with its own slices and its time without a monotonic
// reading.
func copyKey(k store.KeyRecord) store.KeyRecord {
	k.Hash = slices.Clone(k.Hash)
	k.Scopes = slices.Clone(k.Scopes)
	k.Queues = slices.Clone(k.Queues)
	k.CreatedAt = k.CreatedAt.Round(0)
	return k
}

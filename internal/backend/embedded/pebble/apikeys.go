package pebble

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	pebbledb "github.com/cockroachdb/pebble/v2"

	"github.com/styxq/styx/internal/store"
)

// keyFormat is the first byte of an API key record's value; JSON follows.
// Keys are few and read once per request, so a readable encoding costs
// nothing that matters.
const keyFormat byte = 1

func apiKeyKey(name string) []byte { return append([]byte{prefixKey}, name...) }

func apiKeyIDKey(id string) []byte { return append([]byte{prefixKeyID}, id...) }

func encodeKey(k *store.KeyRecord) ([]byte, error) {
	b, err := json.Marshal(k)
	if err != nil {
		return nil, err
	}
	return append([]byte{keyFormat}, b...), nil
}

func decodeKey(v []byte) (store.KeyRecord, error) {
	var k store.KeyRecord
	if len(v) == 0 || v[0] != keyFormat {
		return k, fmt.Errorf("%w: api key: unknown format", errCorrupt)
	}
	if err := json.Unmarshal(v[1:], &k); err != nil {
		return k, fmt.Errorf("%w: api key: %v", errCorrupt, err)
	}
	return k, nil
}

// CreateKey implements store.KeyStore: the record under 0x05 name and the
// index entry under 0x06 id, in one synced batch.
func (s *Store) CreateKey(ctx context.Context, k store.KeyRecord) error {
	if err := s.createKey(ctx, k); err != nil {
		return fmt.Errorf("pebble: create key %q: %w", k.Name, err)
	}
	return nil
}

func (s *Store) createKey(ctx context.Context, k store.KeyRecord) error {
	if k.Name == "" || k.ID == "" {
		return errors.New("a name and an id are required")
	}
	if err := s.enterWrite(ctx); err != nil {
		return err
	}
	defer s.exit()
	s.keyMu.Lock()
	defer s.keyMu.Unlock()
	for _, key := range [][]byte{apiKeyKey(k.Name), apiKeyIDKey(k.ID)} {
		if _, err := s.get(key); err == nil {
			return store.ErrKeyExists
		} else if !errors.Is(err, pebbledb.ErrNotFound) {
			return err
		}
	}
	v, err := encodeKey(&k)
	if err != nil {
		return err
	}
	b := s.db.NewBatch()
	defer b.Close()
	if err := b.Set(apiKeyKey(k.Name), v, nil); err != nil {
		return err
	}
	if err := b.Set(apiKeyIDKey(k.ID), []byte(k.Name), nil); err != nil {
		return err
	}
	return s.commit(func() error { return b.Commit(pebbledb.Sync) })
}

// GetKey implements store.KeyStore: two point reads.
func (s *Store) GetKey(ctx context.Context, id string) (store.KeyRecord, error) {
	if err := s.enter(ctx); err != nil {
		return store.KeyRecord{}, fmt.Errorf("pebble: get key: %w", err)
	}
	defer s.exit()
	name, err := s.get(apiKeyIDKey(id))
	if errors.Is(err, pebbledb.ErrNotFound) {
		return store.KeyRecord{}, store.ErrKeyNotFound
	}
	if err != nil {
		return store.KeyRecord{}, fmt.Errorf("pebble: get key: %w", err)
	}
	v, err := s.get(apiKeyKey(string(name)))
	if errors.Is(err, pebbledb.ErrNotFound) {
		return store.KeyRecord{}, store.ErrKeyNotFound
	}
	if err != nil {
		return store.KeyRecord{}, fmt.Errorf("pebble: get key: %w", err)
	}
	k, err := decodeKey(v)
	if err != nil || k.ID != id {
		return store.KeyRecord{}, store.ErrKeyNotFound
	}
	return k, nil
}

// ListKeys implements store.KeyStore. It reads the 0x05 range.
func (s *Store) ListKeys(ctx context.Context) ([]store.KeyRecord, error) {
	if err := s.enter(ctx); err != nil {
		return nil, fmt.Errorf("pebble: list keys: %w", err)
	}
	defer s.exit()
	iter, err := s.db.NewIterWithContext(ctx, &pebbledb.IterOptions{
		LowerBound: []byte{prefixKey},
		UpperBound: []byte{prefixKey + 1},
	})
	if err != nil {
		return nil, fmt.Errorf("pebble: list keys: %w", err)
	}
	defer iter.Close()
	out := []store.KeyRecord{}
	for iter.First(); iter.Valid(); iter.Next() {
		v, err := iter.ValueAndErr()
		if err != nil {
			return nil, fmt.Errorf("pebble: list keys: %w", err)
		}
		k, err := decodeKey(v)
		if err != nil {
			return nil, fmt.Errorf("pebble: list keys: %q: %w", iter.Key()[1:], err)
		}
		out = append(out, k)
	}
	if err := iter.Error(); err != nil {
		return nil, fmt.Errorf("pebble: list keys: %w", err)
	}
	return out, nil
}

// DeleteKey implements store.KeyStore: both entries, in one synced batch.
func (s *Store) DeleteKey(ctx context.Context, name string) error {
	if err := s.deleteKey(ctx, name); err != nil {
		return fmt.Errorf("pebble: delete key %q: %w", name, err)
	}
	return nil
}

func (s *Store) deleteKey(ctx context.Context, name string) error {
	if err := s.enterWrite(ctx); err != nil {
		return err
	}
	defer s.exit()
	s.keyMu.Lock()
	defer s.keyMu.Unlock()
	v, err := s.get(apiKeyKey(name))
	if errors.Is(err, pebbledb.ErrNotFound) {
		return store.ErrKeyNotFound
	}
	if err != nil {
		return err
	}
	k, err := decodeKey(v)
	if err != nil {
		return err
	}
	b := s.db.NewBatch()
	defer b.Close()
	if err := b.Delete(apiKeyKey(name), nil); err != nil {
		return err
	}
	if err := b.Delete(apiKeyIDKey(k.ID), nil); err != nil {
		return err
	}
	return s.commit(func() error { return b.Commit(pebbledb.Sync) })
}

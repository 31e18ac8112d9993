package storetest

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/store"
)

func keyRecord(name, id string, scopes, queues []string) store.KeyRecord {
	return store.KeyRecord{
		Name: name, ID: id, Hash: bytes.Repeat([]byte{byte(len(name))}, 32), Scopes: scopes, Queues: queues,
		CreatedAt: base.Add(time.Duration(len(name)) * time.Second), CreatedBy: "admin",
	}
}

func requireKey(t *testing.T, want, got store.KeyRecord) {
	t.Helper()
	require.Equal(t, want.Name, got.Name)
	require.Equal(t, want.ID, got.ID)
	require.Equal(t, want.Hash, got.Hash)
	require.Equal(t, want.Scopes, got.Scopes)
	if len(want.Queues) == 0 {
		require.Empty(t, got.Queues)
	} else {
		require.Equal(t, want.Queues, got.Queues)
	}
	require.True(t, want.CreatedAt.Equal(got.CreatedAt), "created_at %v, want %v", got.CreatedAt, want.CreatedAt)
	require.Equal(t, want.CreatedBy, got.CreatedBy)
	require.Equal(t, want.Sealed, got.Sealed)
}

func testKeys(t *testing.T, newStore func(*testing.T) CatalogStore) {
	t.Run("CreateGetListDelete", func(t *testing.T) {
		s := newStore(t)
		ctx := t.Context()
		list, err := s.ListKeys(ctx)
		require.NoError(t, err)
		require.Empty(t, list, "new store")

		workers := keyRecord("workers", "id-w", []string{"produce", "consume"}, []string{"orders*", "billing"})
		ops := keyRecord("ops", "id-o", []string{"admin"}, nil)
		workers.Sealed = []byte{1, 0, 2, 0xff} // a key with a sealed secret (ADR 0016); ops has none
		require.NoError(t, s.CreateKey(ctx, workers))
		require.NoError(t, s.CreateKey(ctx, ops))

		got, err := s.GetKey(ctx, "id-w")
		require.NoError(t, err)
		requireKey(t, workers, got)
		_, err = s.GetKey(ctx, "workers")
		require.ErrorIs(t, err, store.ErrKeyNotFound, "keys are looked up by id, not by name")

		list, err = s.ListKeys(ctx)
		require.NoError(t, err)
		require.Len(t, list, 2)
		requireKey(t, ops, list[0]) // name order
		requireKey(t, workers, list[1])

		require.ErrorIs(t, s.CreateKey(ctx, keyRecord("workers", "id-x", []string{"read"}, nil)), store.ErrKeyExists, "same name")
		require.ErrorIs(t, s.CreateKey(ctx, keyRecord("other", "id-w", []string{"read"}, nil)), store.ErrKeyExists, "same id")

		require.NoError(t, s.DeleteKey(ctx, "workers"))
		_, err = s.GetKey(ctx, "id-w")
		require.ErrorIs(t, err, store.ErrKeyNotFound)
		require.ErrorIs(t, s.DeleteKey(ctx, "workers"), store.ErrKeyNotFound)
		list, err = s.ListKeys(ctx)
		require.NoError(t, err)
		require.Len(t, list, 1)

		// The name and id are free again.
		require.NoError(t, s.CreateKey(ctx, workers))
		got, err = s.GetKey(ctx, "id-w")
		require.NoError(t, err)
		requireKey(t, workers, got)
	})

	t.Run("Aliasing", func(t *testing.T) {
		s := newStore(t)
		ctx := t.Context()
		k := keyRecord("k", "id-k", []string{"read"}, []string{"a*"})
		require.NoError(t, s.CreateKey(ctx, k))
		k.Hash[0]++
		k.Scopes[0] = "admin"
		k.Queues[0] = "*"
		got, err := s.GetKey(ctx, "id-k")
		require.NoError(t, err)
		require.Equal(t, []string{"read"}, got.Scopes)
		require.Equal(t, []string{"a*"}, got.Queues)
		require.Equal(t, byte(1), got.Hash[0])
	})
}

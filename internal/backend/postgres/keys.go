package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/styxq/styx/internal/store"
)

// keyColumns are the styx_api_keys columns scanKey reads, in its order.
const keyColumns = `name, key_id, hash, scopes, queues, created_at, created_by, sealed`

func scanKey(row pgx.Row) (store.KeyRecord, error) {
	var k store.KeyRecord
	var created int64
	if err := row.Scan(&k.Name, &k.ID, &k.Hash, &k.Scopes, &k.Queues, &created, &k.CreatedBy, &k.Sealed); err != nil {
		return store.KeyRecord{}, err
	}
	k.CreatedAt = time.Unix(0, created)
	return k, nil
}

// CreateKey implements store.KeyStore.
func (s *Store) CreateKey(ctx context.Context, k store.KeyRecord) error {
	scopes, queues := k.Scopes, k.Queues
	if scopes == nil {
		scopes = []string{}
	}
	if queues == nil {
		queues = []string{}
	}
	_, err := execCommitted(ctx, s.pool, "create key", `INSERT INTO styx_api_keys (`+keyColumns+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
		k.Name, k.ID, nonNil(k.Hash), scopes, queues, k.CreatedAt.UnixNano(), k.CreatedBy, k.Sealed)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" { // unique_violation
		return store.ErrKeyExists
	}
	return wrap("create key", err)
}

// GetKey implements store.KeyStore: one primary-key lookup, no cache, so a
// key deleted on another node is refused at once (docs/security.md has
// what it costs).
func (s *Store) GetKey(ctx context.Context, id string) (store.KeyRecord, error) {
	k, err := scanKey(s.pool.QueryRow(ctx, `SELECT `+keyColumns+` FROM styx_api_keys WHERE key_id=$1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return store.KeyRecord{}, store.ErrKeyNotFound
	}
	return k, wrap("get key", err)
}

// ListKeys implements store.KeyStore.
func (s *Store) ListKeys(ctx context.Context) ([]store.KeyRecord, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+keyColumns+` FROM styx_api_keys ORDER BY name COLLATE "C"`)
	if err != nil {
		return nil, wrap("list keys", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.KeyRecord, error) { return scanKey(r) })
	if out == nil {
		out = []store.KeyRecord{}
	}
	return out, wrap("list keys", err)
}

// DeleteKey implements store.KeyStore.
func (s *Store) DeleteKey(ctx context.Context, name string) error {
	tag, err := execCommitted(ctx, s.pool, "delete key", `DELETE FROM styx_api_keys WHERE name=$1`, name)
	if err != nil {
		return wrap("delete key", err)
	}
	if tag.RowsAffected() == 0 {
		return store.ErrKeyNotFound
	}
	return nil
}

var _ store.KeyStore = (*Store)(nil)

package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
)

// What the router of several PostgreSQL clusters (internal/backend/clusters,
// ADR 0023) needs of one cluster's Store: its pool and channel, the
// classification of its errors, the catalog's tables and the cluster's
// item-id residue.

// MaxClusters bounds the clusters of a deployment: each cluster's item ids
// are its number modulo MaxClusters (SetItemIDResidue), so cluster numbers
// are 0 to MaxClusters-1.
const MaxClusters = 64

// clustersMigration creates the catalog of several clusters (migration 24;
// ADR 0023). It is created on every cluster; only the catalog cluster's
// (main's) styx_placements and styx_clusters are used, while every
// cluster's styx_cluster_identity names that cluster.
//
//   - styx_placements: each queue's home cluster. state is "creating"
//     (recorded before the queue is created on its home cluster; definition
//     holds the queue.QueueInfo to create, as JSON, so any node can finish
//     it), "ready" (routed) or "moving" (a move between clusters, keyed by
//     epoch, which each move raises). updated_at is Unix ns.
//   - styx_clusters: the stable number of each cluster name, assigned once
//     (main is 0), never derived from the configuration's order.
//   - styx_cluster_identity: one row, the name and number of the cluster
//     this database is, written the first time a router opens it: a URL
//     that names another cluster's database is refused at start.
const clustersMigration = `
CREATE TABLE styx_placements (
	queue      text   PRIMARY KEY,
	cluster    text   NOT NULL,
	epoch      bigint NOT NULL DEFAULT 1,
	state      text   NOT NULL,
	definition jsonb,
	updated_at bigint NOT NULL DEFAULT 0
);
CREATE TABLE styx_clusters (
	name   text    PRIMARY KEY,
	number integer NOT NULL UNIQUE CHECK (number >= 0 AND number < 64)
);
CREATE TABLE styx_cluster_identity (
	only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
	name     text    NOT NULL,
	number   integer NOT NULL
);`

// Pool returns the store's connection pool, for the catalog of several
// clusters (internal/backend/clusters), which runs its own statements on
// the catalog cluster. Closed with the store.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// Channel is the NOTIFY channel of the store's schema, on which a payload
// "c" tells every node the queue definitions (and, on the catalog cluster,
// the placements) changed.
func (s *Store) Channel() string { return s.channel }

// Classify returns err as the backend classifies a failure of op
// (store.ErrUnavailable for a database that cannot answer, ...): what the
// router of several clusters returns for its own statements.
func Classify(op string, err error) error { return wrap(op, err) }

// SetItemIDResidue makes this cluster hand out item ids equal to number
// modulo MaxClusters (ADR 0023): styx_item_ids gets INCREMENT BY
// MaxClusters and moves to the next value of that residue at or above its
// own, never back, so ids of different clusters never collide and an id
// names the cluster that issued it. It runs under the lock of
// styx_check_item_ids, whose moves after a failover (2^40, a multiple of
// MaxClusters) keep the residue; so does MoveItemIDsPast. Idempotent:
// nothing changes when the sequence already has it. number is 0 to
// MaxClusters-1.
func (s *Store) SetItemIDResidue(ctx context.Context, number int) error {
	if number < 0 || number >= MaxClusters {
		return fmt.Errorf("postgres: cluster number %d is out of range 0..%d", number, MaxClusters-1)
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return wrap("set the item ids' residue", err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('styx-item-ids:' || current_schema()))`); err != nil {
		return wrap("set the item ids' residue", err)
	}
	var inc, last int64
	var called bool
	if err := tx.QueryRow(ctx, `SELECT p.increment_by, s.last_value, s.is_called FROM styx_item_ids s, pg_sequences p
		WHERE p.schemaname = current_schema() AND p.sequencename = 'styx_item_ids'`).Scan(&inc, &last, &called); err != nil {
		return wrap("set the item ids' residue", err)
	}
	if inc == MaxClusters && last%MaxClusters == int64(number) {
		return nil
	}
	// The next id must be above every id handed out: at least last + 1
	// when last was handed out, at least last when not.
	base := last
	if !called {
		base = last - 1
	}
	v := base + ((int64(number)-base)%MaxClusters+MaxClusters)%MaxClusters
	if v < 1 {
		v += MaxClusters
	}
	if _, err := tx.Exec(ctx, fmt.Sprintf(`ALTER SEQUENCE styx_item_ids INCREMENT BY %d`, MaxClusters)); err != nil {
		return wrap("set the item ids' residue", err)
	}
	if _, err := tx.Exec(ctx, `SELECT setval('styx_item_ids', $1, true)`, v); err != nil {
		return wrap("set the item ids' residue", err)
	}
	return wrap("set the item ids' residue", commitTx(ctx, tx, "set the item ids' residue"))
}

// errIdentityMismatch is wrapped by ClaimIdentity's refusal.
var errIdentityMismatch = errors.New("the database is another cluster's")

// IsIdentityMismatch reports whether err is ClaimIdentity's refusal of a
// database that is another cluster's.
func IsIdentityMismatch(err error) bool { return errors.Is(err, errIdentityMismatch) }

// ClaimIdentity records that this database is the cluster name, numbered
// number (styx_cluster_identity), the first time; later, it refuses
// (IsIdentityMismatch) a database recorded under another name or number:
// a configuration whose URLs were swapped would otherwise serve one
// cluster's queues from another's tables.
func (s *Store) ClaimIdentity(ctx context.Context, name string, number int) error {
	var have string
	var n int
	err := s.pool.QueryRow(ctx, `WITH ins AS (
			INSERT INTO styx_cluster_identity (name, number) VALUES ($1, $2) ON CONFLICT DO NOTHING RETURNING name, number)
		SELECT name, number FROM ins UNION ALL SELECT name, number FROM styx_cluster_identity LIMIT 1`, name, number).Scan(&have, &n)
	if err != nil {
		return wrap("claim the cluster's identity", err)
	}
	if have != name || n != number {
		return fmt.Errorf("%w: it is recorded as cluster '%s' (number %d), not '%s' (number %d); check the cluster URLs",
			errIdentityMismatch, have, n, name, number)
	}
	return nil
}

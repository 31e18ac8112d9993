package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/styxq/styx/internal/store"
)

// activityMigration creates styx_activity, the activity log (issue 49; a
// migration of schema.go): one row per audited call of any node, by an id
// from its own identity (the order of writing, across nodes), kept apart
// from styx_queues (a queue's delete keeps its rows). details is a JSON
// array of [name, value] pairs. Part of a released migration once
// released: append a new one rather than change it.
const activityMigration = `CREATE TABLE styx_activity (
	id       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	at       bigint NOT NULL,
	key_name text   NOT NULL DEFAULT '',
	door     text   NOT NULL DEFAULT '',
	action   text   NOT NULL DEFAULT '',
	op       text   NOT NULL,
	queue    text   NOT NULL DEFAULT '',
	details  jsonb
);
CREATE INDEX styx_activity_queue ON styx_activity (queue, id);
CREATE INDEX styx_activity_at ON styx_activity (at);`

// PutActivity implements store.ActivityStore: one INSERT, durable when it
// commits (the database's own sync), seen by every node at once.
func (s *Store) PutActivity(ctx context.Context, r store.ActivityRecord) (uint64, error) {
	var details *string
	if len(r.Details) > 0 {
		pairs := make([][2]string, len(r.Details))
		for i, d := range r.Details {
			pairs[i] = [2]string{d.Name, d.Value}
		}
		b, _ := json.Marshal(pairs) // cannot fail: strings
		d := string(b)
		details = &d
	}
	var id int64
	err := s.pool.QueryRow(ctx, `INSERT INTO styx_activity (at, key_name, door, action, op, queue, details)
		VALUES ($1, $2, $3, $4, $5, $6, $7::jsonb) RETURNING id`,
		r.At.UnixNano(), r.Key, r.Door, r.Action, r.Op, r.Queue, details).Scan(&id)
	if err != nil {
		return 0, wrap("put activity", err)
	}
	return uint64(id), nil
}

// ListActivity implements store.ActivityStore: one query, by the primary
// key or styx_activity_queue.
func (s *Store) ListActivity(ctx context.Context, p store.ActivityListParams) ([]store.ActivityRecord, error) {
	if p.Limit <= 0 {
		return nil, fmt.Errorf("postgres: list activity: limit %d: want > 0", p.Limit)
	}
	before := int64(p.Before)
	if p.Before == 0 || p.Before > 1<<63-1 {
		before = 1<<63 - 1
	}
	q := `SELECT id, at, key_name, door, action, op, queue, details FROM styx_activity
		WHERE id < $1 ORDER BY id DESC LIMIT $2`
	args := []any{before, p.Limit}
	if p.Queue != "" {
		q = `SELECT id, at, key_name, door, action, op, queue, details FROM styx_activity
			WHERE queue = $3 AND id < $1 ORDER BY id DESC LIMIT $2`
		args = append(args, p.Queue)
	}
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, wrap("list activity", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.ActivityRecord, error) {
		var r store.ActivityRecord
		var id, at int64
		var details []byte
		if err := row.Scan(&id, &at, &r.Key, &r.Door, &r.Action, &r.Op, &r.Queue, &details); err != nil {
			return r, err
		}
		r.ID, r.At = uint64(id), time.Unix(0, at)
		if len(details) > 0 {
			var pairs [][2]string
			if err := json.Unmarshal(details, &pairs); err != nil {
				return r, fmt.Errorf("activity %d: details: %w", id, err)
			}
			for _, p := range pairs {
				r.Details = append(r.Details, store.ActivityDetail{Name: p[0], Value: p[1]})
			}
		}
		return r, nil
	})
	return out, wrap("list activity", err)
}

// PruneActivity implements store.ActivityStore. Rows another node's prune
// has locked are skipped, not waited for (as PruneHistory): nodes prune at
// about the same time, and what one skips the next prune deletes.
func (s *Store) PruneActivity(ctx context.Context, before time.Time, keep int) error {
	cut := int64(0) // the lowest id kept by count; 0: no bound
	if keep > 0 {
		err := s.pool.QueryRow(ctx, `SELECT coalesce((SELECT id FROM styx_activity ORDER BY id DESC OFFSET $1 LIMIT 1), 0)`,
			keep-1).Scan(&cut)
		if err != nil {
			return wrap("prune activity", err)
		}
	}
	_, err := s.pool.Exec(ctx, `DELETE FROM styx_activity a USING (
		SELECT id FROM styx_activity WHERE at < $1 OR id < $2 FOR UPDATE SKIP LOCKED) o
		WHERE a.id = o.id`, before.UnixNano(), cut)
	return wrap("prune activity", err)
}

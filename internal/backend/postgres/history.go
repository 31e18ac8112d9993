package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/styxq/styx/internal/store"
)

// historyMigration creates styx_history (a migration of schema.go).
// Part of a released migration once released: append a new one rather
// than change it.
const historyMigration = `CREATE TABLE styx_history (
	queue_id      bigint NOT NULL REFERENCES styx_queues (id) ON DELETE CASCADE,
	at            bigint NOT NULL,
	node          text   NOT NULL,
	produced      bigint NOT NULL DEFAULT 0,
	completed     bigint NOT NULL DEFAULT 0,
	dead_lettered bigint NOT NULL DEFAULT 0,
	depth         bigint NOT NULL DEFAULT -1,
	dead_by_group jsonb,
	PRIMARY KEY (queue_id, at, node)
);
CREATE INDEX styx_history_at ON styx_history (at);`

// historyPatternsMigration gives styx_history the error pattern of each
// group of dead_by_group (store.HistoryMinute.GroupPatterns; issue 49), a
// JSON object by fingerprint, NULL when none (a migration of schema.go).
// Nullable without a default: adding it rewrites no row. Part of a released
// migration once released: append a new one rather than change it.
const historyPatternsMigration = `ALTER TABLE styx_history ADD COLUMN group_patterns jsonb;`

// PutHistory implements store.HistoryStore: one statement for every
// minute, each node's rows its own (ON CONFLICT replaces the node's row:
// a retried write counts nothing twice, and no two nodes write one row).
// Minutes of queues not in styx_queues are dropped by the join.
func (s *Store) PutHistory(ctx context.Context, minutes []store.HistoryMinute) error {
	if len(minutes) == 0 {
		return nil
	}
	n := len(minutes)
	queues, nodes := make([]string, n), make([]string, n)
	at, produced, completed, dead, depth := make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
	groups, patterns := make([]*string, n), make([]*string, n)
	for i, m := range minutes {
		queues[i], nodes[i], at[i] = m.Queue, m.Node, m.At.UnixNano()
		produced[i], completed[i], dead[i], depth[i] = m.Produced, m.Completed, m.DeadLettered, m.Depth
		if len(m.DeadByGroup) > 0 {
			b, _ := json.Marshal(m.DeadByGroup) // cannot fail: strings and numbers
			g := string(b)
			groups[i] = &g
		}
		if len(m.GroupPatterns) > 0 {
			b, _ := json.Marshal(m.GroupPatterns) // cannot fail: strings (invalid UTF-8 is replaced)
			p := string(b)
			patterns[i] = &p
		}
	}
	_, err := s.pool.Exec(ctx, `INSERT INTO styx_history AS h (queue_id, at, node, produced, completed, dead_lettered, depth, dead_by_group, group_patterns)
		SELECT q.id, u.at, u.node, u.produced, u.completed, u.dead, u.depth, u.groups::jsonb, u.patterns::jsonb
		FROM unnest($1::text[], $2::bigint[], $3::text[], $4::bigint[], $5::bigint[], $6::bigint[], $7::bigint[], $8::text[], $9::text[])
			AS u(queue, at, node, produced, completed, dead, depth, groups, patterns)
		JOIN styx_queues q ON q.name = u.queue
		ORDER BY q.id, u.at, u.node
		ON CONFLICT (queue_id, at, node) DO UPDATE SET produced = excluded.produced, completed = excluded.completed,
			dead_lettered = excluded.dead_lettered, depth = excluded.depth, dead_by_group = excluded.dead_by_group,
			group_patterns = excluded.group_patterns`,
		queues, at, nodes, produced, completed, dead, depth, groups, patterns)
	return wrap("put history", err)
}

// ReadHistory implements store.HistoryStore: one query, by the primary key.
func (s *Store) ReadHistory(ctx context.Context, queues []string, from, to time.Time) ([]store.HistoryMinute, error) {
	if len(queues) == 0 || to.Before(from) {
		return nil, nil
	}
	rows, err := s.pool.Query(ctx, `SELECT q.name, h.at, h.node, h.produced, h.completed, h.dead_lettered, h.depth, h.dead_by_group,
			h.group_patterns
		FROM styx_history h JOIN styx_queues q ON q.id = h.queue_id
		WHERE q.name = ANY($1) AND h.at BETWEEN $2 AND $3
		ORDER BY q.name COLLATE "C", h.at, h.node COLLATE "C"`, queues, from.UnixNano(), to.UnixNano())
	if err != nil {
		return nil, wrap("read history", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.HistoryMinute, error) {
		var m store.HistoryMinute
		var at int64
		var groups, patterns []byte
		if err := r.Scan(&m.Queue, &at, &m.Node, &m.Produced, &m.Completed, &m.DeadLettered, &m.Depth, &groups, &patterns); err != nil {
			return m, err
		}
		m.At = time.Unix(0, at).UTC()
		if len(groups) > 0 {
			if err := json.Unmarshal(groups, &m.DeadByGroup); err != nil {
				return m, fmt.Errorf("queue %q at %v: dead_by_group: %w", m.Queue, m.At, err)
			}
		}
		if len(patterns) > 0 {
			if err := json.Unmarshal(patterns, &m.GroupPatterns); err != nil {
				return m, fmt.Errorf("queue %q at %v: group_patterns: %w", m.Queue, m.At, err)
			}
		}
		return m, nil
	})
	return out, wrap("read history", err)
}

// PruneHistory implements store.HistoryStore. Rows another node's prune
// (or a queue's delete) has locked are skipped, not waited for: nodes
// prune the same rows at about the same time, and waits between their
// deletes could deadlock; what one skips the next prune deletes.
func (s *Store) PruneHistory(ctx context.Context, before time.Time) error {
	_, err := s.pool.Exec(ctx, `DELETE FROM styx_history h USING (
		SELECT queue_id, at, node FROM styx_history WHERE at < $1 FOR UPDATE SKIP LOCKED) o
		WHERE h.queue_id = o.queue_id AND h.at = o.at AND h.node = o.node`, before.UnixNano())
	return wrap("prune history", err)
}

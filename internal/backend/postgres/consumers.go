package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/styxq/styx/internal/engine"
	"github.com/styxq/styx/internal/queue"
)

// The consumers of a queue across nodes (issue 39). Each node's loop
// records the consumers whose lease calls it served and the leases it
// dealt (engine.Consumers, in memory); every RefreshInterval the node
// checks those leases against styx_items (one completed, retried or
// renewed through another node is ended or moved on) and writes its
// records to styx_consumers under its node id, replacing its previous
// rows. A read (Queue.Consumers) merges the node's own records with the
// rows of the nodes that wrote theirs in the last consumersAlive, by
// client id and key name. Rows not written for consumersForget are
// deleted by any node (a node that stopped).

const (
	// consumersAlive is how recently a node must have written its
	// consumers for a read to count them (database time).
	consumersAlive = 10 * time.Second
	// consumersForget is when a node's rows are deleted by the others.
	consumersForget = time.Minute
)

// consumersMigration creates styx_consumers: a node's records of a queue's
// consumers, one row per consumer (engine.Consumers). Times are Unix ns of
// the node's clock, but written_at, the database's time of the write (rows
// of a node that stopped writing are ignored, then deleted). held_ids are
// item ids as on the wire. Rows are not deleted with their queue: they age
// out.
const consumersMigration = `CREATE TABLE styx_consumers (
	queue_id      bigint      NOT NULL,
	node          text        NOT NULL,
	client_id     text        NOT NULL,
	key_name      text        NOT NULL,
	first_seen_at bigint      NOT NULL,
	last_seen_at  bigint      NOT NULL,
	leased        bigint      NOT NULL,
	held          integer     NOT NULL,
	held_ids      text[]      NOT NULL,
	written_at    timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (queue_id, node, client_id, key_name)
);`

// newNodeID returns a random id naming this node's rows of
// styx_consumers.
func newNodeID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// shareConsumers writes this node's consumers every RefreshInterval until
// the manager closes. Its own goroutine; it owns m.sharedConsumers.
func (m *Manager) shareConsumers() {
	t := time.NewTicker(m.cfg.RefreshInterval)
	defer t.Stop()
	shared := map[uint64]bool{} // queues with rows of this node
	for {
		select {
		case <-m.ctx.Done():
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(m.ctx, m.cfg.StatementTimeout)
		if err := m.writeConsumers(ctx, shared); err != nil && m.ctx.Err() == nil {
			m.cfg.Log.Warn("postgres: writing the queues' consumers failed", "error", err)
		}
		cancel()
	}
}

// writeConsumers checks the leases each queue's loop dealt and replaces
// this node's rows of styx_consumers with the loops' records, in one
// transaction; shared tracks the queues that have rows of this node.
func (m *Manager) writeConsumers(ctx context.Context, shared map[uint64]bool) error {
	m.mu.RLock()
	qs := make([]*Queue, 0, len(m.queues))
	for _, q := range m.queues {
		qs = append(qs, q)
	}
	m.mu.RUnlock()
	now := m.cfg.Clock.Now()
	b := &pgx.Batch{}
	for _, q := range qs {
		if err := q.verifyLeases(ctx, now); err != nil {
			return err
		}
		cs := q.Loop.Consumers.Snapshot(now)
		if len(cs) == 0 && !shared[q.id] {
			continue
		}
		b.Queue(`DELETE FROM styx_consumers WHERE queue_id = $1 AND node = $2`, q.id, m.node)
		for _, c := range cs {
			b.Queue(`INSERT INTO styx_consumers (queue_id, node, client_id, key_name, first_seen_at, last_seen_at, leased, held, held_ids)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
				q.id, m.node, c.ClientID, c.KeyName, c.FirstSeenAt.UnixNano(), c.LastSeenAt.UnixNano(), c.Leased, c.Held, c.HeldIDs)
		}
		shared[q.id] = len(cs) > 0
	}
	b.Queue(`DELETE FROM styx_consumers WHERE written_at < now() - $1::interval`, consumersForget.String())
	return pgx.BeginFunc(ctx, m.st.pool, func(tx pgx.Tx) error {
		return tx.SendBatch(ctx, b).Close()
	})
}

// verifyLeases checks the leases the queue's loop dealt against
// styx_items (engine.Consumers.Verify): those no longer leased (ended
// through another node) are ended, the others take their stored deadline
// (renewed through another node).
func (q *Queue) verifyLeases(ctx context.Context, now time.Time) error {
	links := q.Loop.Consumers.Links(now)
	if len(links) == 0 {
		return nil
	}
	ids := make([]int64, len(links))
	for i, k := range links {
		ids[i] = int64(k.ID)
	}
	rows, err := q.m.st.pool.Query(ctx, `SELECT partition, id, deadline FROM styx_items
		WHERE queue_id = $1 AND id = ANY($2) AND state = $3`, q.id, ids, stateLeased)
	if err != nil {
		return wrap("consumers", err)
	}
	live := map[engine.ItemKey]int64{}
	for rows.Next() {
		var p int32
		var id, deadline int64
		if err := rows.Scan(&p, &id, &deadline); err != nil {
			rows.Close()
			return wrap("consumers", err)
		}
		live[engine.ItemKey{Partition: p, ID: uint64(id)}] = deadline
	}
	if err := rows.Err(); err != nil {
		return wrap("consumers", err)
	}
	q.Loop.Consumers.Verify(links, live)
	return nil
}

// Consumers implements engine.Reads: this node's records (own) merged
// with those the other live nodes wrote (their own within a
// RefreshInterval).
func (r reads) Consumers(ctx context.Context, own []queue.Consumer) ([]queue.Consumer, error) {
	q := r.q
	now := q.m.cfg.Clock.Now()
	rows, err := q.m.st.pool.Query(ctx, `SELECT client_id, key_name, first_seen_at, last_seen_at, leased, held, held_ids
		FROM styx_consumers WHERE queue_id = $1 AND node <> $2 AND written_at > now() - $3::interval
			AND (held > 0 OR last_seen_at > $4)`,
		q.id, q.m.node, consumersAlive.String(), now.Add(-queue.ConsumerWindow).UnixNano())
	if err != nil {
		return nil, wrap("consumers", err)
	}
	defer rows.Close()
	type key struct{ client, key string }
	merged := map[key]*queue.Consumer{}
	add := func(c queue.Consumer) {
		k := key{c.ClientID, c.KeyName}
		m := merged[k]
		if m == nil {
			merged[k] = &c
			return
		}
		if c.FirstSeenAt.Before(m.FirstSeenAt) {
			m.FirstSeenAt = c.FirstSeenAt
		}
		if c.LastSeenAt.After(m.LastSeenAt) {
			m.LastSeenAt = c.LastSeenAt
		}
		m.Leased += c.Leased
		m.Held += c.Held
		m.HeldIDs = append(m.HeldIDs, c.HeldIDs...)
	}
	for _, c := range own {
		add(c)
	}
	for rows.Next() {
		var c queue.Consumer
		var first, last int64
		var held int32
		if err := rows.Scan(&c.ClientID, &c.KeyName, &first, &last, &c.Leased, &held, &c.HeldIDs); err != nil {
			return nil, wrap("consumers", err)
		}
		c.FirstSeenAt, c.LastSeenAt, c.Held = queue.FromNanos(first), queue.FromNanos(last), int(held)
		add(c)
	}
	if err := rows.Err(); err != nil {
		return nil, wrap("consumers", err)
	}
	// The live leases and their holders as stored (migration 21) are the
	// truth of what each consumer holds, whichever node dealt them and
	// whether it still runs: they replace the nodes' records of them.
	// A consumer known only from them has no lease call seen (zero times).
	held, err := q.heldByHolder(ctx, now)
	if err != nil {
		return nil, err
	}
	for k, h := range held {
		m := merged[key{k.ClientID, k.KeyName}]
		if m == nil {
			m = &queue.Consumer{ClientID: k.ClientID, KeyName: k.KeyName}
			merged[key{k.ClientID, k.KeyName}] = m
		}
		m.Held, m.HeldIDs = h.n, h.ids
	}
	out := make([]queue.Consumer, 0, len(merged))
	for _, c := range merged {
		// Ids are fixed-width in an ordered alphabet: text order is id order.
		slices.Sort(c.HeldIDs)
		c.HeldIDs = slices.Compact(c.HeldIDs)
		c.HeldIDs = c.HeldIDs[:min(len(c.HeldIDs), queue.MaxHeldIDs)]
		out = append(out, *c)
	}
	engine.SortConsumers(out)
	return out, nil
}

// heldLeases is what one holder holds: its live leases and the ids of the
// lowest queue.MaxHeldIDs of them, formatted.
type heldLeases struct {
	n   int
	ids []string
}

// heldByHolder reads the queue's live leases (deadline after now) by their
// stored holder (migration 21), at most engine.MaxLeaseLinks of them, as a
// node records them in memory.
func (q *Queue) heldByHolder(ctx context.Context, now time.Time) (map[queue.Holder]heldLeases, error) {
	rows, err := q.m.st.pool.Query(ctx, `SELECT holder_client, holder_key, count(*), (array_agg(id ORDER BY id))[1:$4]
		FROM (SELECT id, holder_client, coalesce(holder_key, '') AS holder_key FROM styx_items
			WHERE queue_id = $1 AND state = $2 AND deadline > $3 AND holder_client IS NOT NULL LIMIT $5) l
		GROUP BY 1, 2`, q.id, stateLeased, now.UnixNano(), queue.MaxHeldIDs, engine.MaxLeaseLinks)
	if err != nil {
		return nil, wrap("consumers", err)
	}
	defer rows.Close()
	out := map[queue.Holder]heldLeases{}
	for rows.Next() {
		var h queue.Holder
		var n int64
		var ids []int64
		if err := rows.Scan(&h.ClientID, &h.KeyName, &n, &ids); err != nil {
			return nil, wrap("consumers", err)
		}
		l := heldLeases{n: int(n), ids: make([]string, len(ids))}
		for i, id := range ids {
			l.ids[i] = queue.FormatID(uint64(id))
		}
		out[h] = l
	}
	return out, wrap("consumers", rows.Err())
}

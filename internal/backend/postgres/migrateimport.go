package postgres

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/styxq/styx/internal/fingerprint"
	"github.com/styxq/styx/internal/queue"
)

// Copying a store from the embedded backend (internal/migrate; issue 47).
//
// A migration keeps every item's id, its lease handle: a consumer that held
// a lease when the embedded server stopped completes it on the PostgreSQL
// node under the same id, and a dead item keeps the id the console and the
// redrive tasks name it by. Each write is an insert that skips what the
// schema holds already (ON CONFLICT DO NOTHING, by id, source key,
// deduplication id or group), so a migration run again, or resumed after an
// interruption, neither doubles nor loses; the count and dead-group
// triggers keep the counts as for any insert. Once the items are in,
// styx_item_ids is moved past the greatest id copied (MoveItemIDsPast), so
// that no id is handed out again.

// MigrateItems inserts items into partition rows of the queue queueID,
// each as it is (id, attempts, history, group and GroupSeq, source key,
// dead-letter fields, attributes): leased until its LeaseDeadline (with
// its holder), scheduled when its EnqueueAt is after now, ready otherwise.
// An item whose id or source key the queue holds already is skipped. It
// returns how many it inserted. Ids above math.MaxInt64 are refused (no
// embedded id reaches them before the year 2262).
func (s *Store) MigrateItems(ctx context.Context, queueID uint64, items []queue.Item, now time.Time) (int64, error) {
	n := len(items)
	if n == 0 {
		return 0, nil
	}
	ids, firsts, part, state, deadline, expire, created := make([]int64, n), make([]*int64, n), make([]int32, n), make([]int16, n),
		make([]int64, n), make([]int64, n), make([]int64, n)
	attempts, redrives := make([]int32, n), make([]int32, n)
	key, grp, holderClient, holderKey, errs := make([]*string, n), make([]*string, n), make([]*string, n), make([]*string, n), make([]*string, n)
	seq, firstLeased := make([]*int64, n), make([]*int64, n)
	ref, kind, enc, srcQ, srcID, reason, lastErr, fps := make([]string, n), make([]string, n), make([]string, n), make([]string, n),
		make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	payload, attrs, deadAt := make([][]byte, n), make([][]byte, n), make([]int64, n)
	str := func(v string) *string {
		if v == "" {
			return nil
		}
		return &v
	}
	for i, it := range items {
		m, b := it.Meta, it.Body
		if m.ID > math.MaxInt64 || m.BodyID > math.MaxInt64 || m.GroupSeq > math.MaxInt64 {
			return 0, fmt.Errorf("postgres: migrate items: id %d is beyond PostgreSQL's bigint", m.ID)
		}
		ids[i], part[i] = int64(m.ID), it.Partition
		if m.BodyID != 0 && m.BodyID != m.ID {
			f := int64(m.BodyID)
			firsts[i] = &f
		}
		switch {
		case m.Leased:
			state[i], deadline[i] = stateLeased, queue.Nanos(m.LeaseDeadline)
			holderClient[i], holderKey[i] = str(m.Holder.ClientID), str(m.Holder.KeyName)
		case !m.EnqueueAt.IsZero() && m.EnqueueAt.After(now):
			state[i], deadline[i] = stateScheduled, queue.Nanos(m.EnqueueAt)
		default:
			state[i] = stateReady
		}
		expire[i], created[i], attempts[i] = queue.Nanos(m.ExpireDeadline), queue.Nanos(m.CreatedAt), m.Attempts
		key[i], grp[i] = str(m.SourceKey), str(m.Group)
		if m.Group != "" && m.GroupSeq != 0 {
			g := int64(m.GroupSeq)
			seq[i] = &g
		}
		if !m.FirstLeasedAt.IsZero() {
			f := queue.Nanos(m.FirstLeasedAt)
			firstLeased[i] = &f
		}
		ref[i], kind[i], enc[i], payload[i], attrs[i] = b.Reference, b.Kind, b.Encoding, nonNil(b.Payload), b.Attributes
		srcQ[i], srcID[i], reason[i], deadAt[i], redrives[i] = b.SourceQueue, b.SourceID, b.DeadReason, queue.Nanos(b.DeadAt), b.RedriveCount
		lastErr[i], fps[i] = it.Errors.LastError, m.Fingerprint
		if fps[i] == "" && queue.IsDeadCopyKey(m.SourceKey) {
			fps[i] = fingerprint.Of(it.Errors.LastError)
		}
		if e := encodeErrors(it.Errors); e != nil {
			v := string(e)
			errs[i] = &v
		}
	}
	tag, err := s.pool.Exec(ctx, `INSERT INTO styx_items (queue_id, id, first_id, partition, state, deadline, expire_deadline, created_at,
			attempts, source_key, grp, group_seq, first_leased_at, holder_client, holder_key, reference, kind, encoding, payload,
			attributes, source_queue, source_id, dead_reason, dead_at, redrive_count, last_error, errors, fingerprint)
		SELECT $1, u.id, u.first_id, u.part, u.state, u.deadline, u.expire, u.created, u.attempts, u.key, u.grp, u.seq, u.first_leased,
			u.holder_client, u.holder_key, u.ref, u.kind, u.enc, u.payload, u.attrs, u.src_q, u.src_id, u.reason, u.dead_at, u.redrives,
			u.last_error, u.errs::jsonb, u.fp
		FROM unnest($2::bigint[], $3::bigint[], $4::integer[], $5::smallint[], $6::bigint[], $7::bigint[], $8::bigint[], $9::integer[],
			$10::text[], $11::text[], $12::bigint[], $13::bigint[], $14::text[], $15::text[], $16::text[], $17::text[], $18::text[],
			$19::bytea[], $20::bytea[], $21::text[], $22::text[], $23::text[], $24::bigint[], $25::integer[], $26::text[], $27::text[],
			$28::text[])
			AS u(id, first_id, part, state, deadline, expire, created, attempts, key, grp, seq, first_leased, holder_client, holder_key,
				ref, kind, enc, payload, attrs, src_q, src_id, reason, dead_at, redrives, last_error, errs, fp)
		ORDER BY u.id
		ON CONFLICT DO NOTHING`,
		int64(queueID), ids, firsts, part, state, deadline, expire, created, attempts, key, grp, seq, firstLeased, holderClient, holderKey,
		ref, kind, enc, payload, attrs, srcQ, srcID, reason, deadAt, redrives, lastErr, errs, fps)
	if err != nil {
		return 0, wrap("migrate items", err)
	}
	return tag.RowsAffected(), nil
}

// MigrateDedup records the deduplication ids of the queue queueID with
// their deadlines (Unix ns), skipping those it holds already.
func (s *Store) MigrateDedup(ctx context.Context, queueID uint64, ids []string, deadlines []int64) error {
	if len(ids) == 0 {
		return nil
	}
	_, err := s.pool.Exec(ctx, `INSERT INTO styx_dedup (queue_id, dedup_id, deadline)
		SELECT $1, u.id, u.deadline FROM unnest($2::text[], $3::bigint[]) AS u(id, deadline) ON CONFLICT DO NOTHING`,
		int64(queueID), ids, deadlines)
	return wrap("migrate deduplication ids", err)
}

// MigrateHeldGroups records the held groups of the queue queueID (each
// waiting for its dead item in HeldGroup.DeadQueue), skipping those it
// holds already.
func (s *Store) MigrateHeldGroups(ctx context.Context, queueID uint64, hs []queue.HeldGroup) error {
	if len(hs) == 0 {
		return nil
	}
	part, seq, at := make([]int32, len(hs)), make([]int64, len(hs)), make([]int64, len(hs))
	grp, dq, key := make([]string, len(hs)), make([]string, len(hs)), make([]string, len(hs))
	for i, h := range hs {
		part[i], grp[i], dq[i], key[i], seq[i], at[i] = h.Partition, h.Group, h.DeadQueue, h.DeadKey, int64(h.Seq), h.HeldAt
	}
	_, err := s.pool.Exec(ctx, `INSERT INTO styx_held_groups (queue_id, partition, grp, dead_queue_id, dead_key, seq, held_at)
		SELECT $1, u.part, u.grp, coalesce((SELECT id FROM styx_queues WHERE name = u.dq), 0), u.key, u.seq, u.at
		FROM unnest($2::integer[], $3::text[], $4::text[], $5::text[], $6::bigint[], $7::bigint[]) AS u(part, grp, dq, key, seq, at)
		ON CONFLICT DO NOTHING`, int64(queueID), part, grp, dq, key, seq, at)
	return wrap("migrate held groups", err)
}

// MoveItemIDsPast moves styx_item_ids so that its next id is above id
// (it never moves it back). It moves it by a multiple of the sequence's
// increment, so a cluster's residue (SetItemIDResidue, ADR 0023) is kept.
func (s *Store) MoveItemIDsPast(ctx context.Context, id uint64) error {
	if id > math.MaxInt64 {
		return fmt.Errorf("postgres: move the item ids: %d is beyond PostgreSQL's bigint", id)
	}
	_, err := s.pool.Exec(ctx, `SELECT setval('styx_item_ids', s.last_value + (($1 - s.last_value + p.increment_by - 1) / p.increment_by) * p.increment_by)
		FROM styx_item_ids s, pg_sequences p
		WHERE p.schemaname = current_schema() AND p.sequencename = 'styx_item_ids' AND s.last_value < $1`, int64(id))
	return wrap("move the item ids", err)
}

package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/styxq/styx/internal/apierr"
	"github.com/styxq/styx/internal/engine"
	"github.com/styxq/styx/internal/fingerprint"
	"github.com/styxq/styx/internal/queue"
	"github.com/styxq/styx/metrics"
)

// The item statements. A locking subquery that picks rows is always a
// MATERIALIZED CTE: as a plain subquery the planner may rescan it once per
// joined row, and each rescan skips the rows the statement just changed and
// picks more (an UPDATE ... LIMIT 1 that updates every row).
// Every statement names its queue by id, so every
// statement uses the primary key or one of the partial indexes of migration
// 1. Rows that a decision depends on are locked (FOR UPDATE) and re-checked
// by PostgreSQL under the lock, so two nodes never act on one item: leases
// and lifecycle skip rows another transaction holds (SKIP LOCKED); complete
// and retry wait for them.

// itemColumns are the columns of a full item, as scanItem reads them.
const itemColumns = `id, partition, state, deadline, expire_deadline, attempts, created_at, coalesce(source_key, ''),
	reference, kind, encoding, payload, source_queue, source_id, dead_reason, dead_at, redrive_count, last_error, errors, fingerprint, attributes,
	coalesce(grp, ''), CASE WHEN grp IS NULL THEN 0 ELSE ` + groupSeqSQL + ` END, coalesce(first_id, id),
	CASE WHEN state = 1 THEN coalesce(holder_client, '') ELSE '' END, CASE WHEN state = 1 THEN coalesce(holder_key, '') ELSE '' END`

func scanItem(row pgx.Row) (queue.Item, error) {
	var it queue.Item
	var id, deadline, expire, created, deadAt, seq, first int64
	var st int16
	var errs []byte
	m, b := &it.Meta, &it.Body
	err := row.Scan(&id, &it.Partition, &st, &deadline, &expire, &m.Attempts, &created, &m.SourceKey,
		&b.Reference, &b.Kind, &b.Encoding, &b.Payload, &b.SourceQueue, &b.SourceID, &b.DeadReason, &deadAt, &b.RedriveCount,
		&it.Errors.LastError, &errs, &m.Fingerprint, &b.Attributes, &m.Group, &seq, &first, &m.Holder.ClientID, &m.Holder.KeyName)
	if err != nil {
		return it, err
	}
	m.ID, m.BodyID, m.GroupSeq = uint64(id), uint64(first), uint64(seq)
	m.ExpireDeadline, m.CreatedAt, b.DeadAt = queue.FromNanos(expire), queue.FromNanos(created), queue.FromNanos(deadAt)
	switch st {
	case stateLeased:
		m.Leased, m.LeaseDeadline = true, queue.FromNanos(deadline)
	case stateScheduled:
		m.EnqueueAt = queue.FromNanos(deadline)
	}
	it.Errors, err = decodeErrors(it.Errors.LastError, errs)
	return it, err
}

func collectItems(rows pgx.Rows, err error) ([]queue.Item, error) {
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (queue.Item, error) { return scanItem(r) })
}

// Item states (column state). A dying item (migration 25) is dead and
// waits for its two-phase move to a dead-letter queue (deadletters.go):
// never leased, never ended by the lifecycle but re-sent, its deadline the
// end of its node's claim; reads show it with its dead_reason.
const (
	stateReady     = 0
	stateLeased    = 1
	stateScheduled = 2
	stateDying     = 3
)

// row is the part of a locked item a decision needs.
type row struct {
	id        int64
	partition int32
	state     int16
	deadline  int64
	expire    int64
	attempts  int32
	sourceKey string
	lastError string
	errors    []byte
	// group is the item's group ("" for none), seq its GroupSeq.
	group string
	seq   int64
}

const rowColumns = `id, partition, state, deadline, expire_deadline, attempts, coalesce(source_key, ''), last_error, errors,
	coalesce(grp, ''), ` + groupSeqSQL

func collectRows(rows pgx.Rows, err error) ([]row, error) {
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (row, error) {
		var x row
		err := r.Scan(&x.id, &x.partition, &x.state, &x.deadline, &x.expire, &x.attempts, &x.sourceKey, &x.lastError, &x.errors, &x.group, &x.seq)
		return x, err
	})
}

// lockByIDSQL locks the items of the ids $2 (sorted: the lock order), one
// lookup of the primary key per id. It is a LATERAL subquery with a LIMIT
// so that PostgreSQL cannot turn it into a join: "queue_id=$1 AND id =
// ANY($2)", and every join of the ids with the table, ran on generic plans
// made while a queue's statistics said it held a few rows, and those scanned
// every index entry of the queue, dead ones included, filtering by id
// (TestLockByIDPlan). The ids come through "LIMIT $3" ($3: how many
// there are, so it takes them all) because of how PostgreSQL picks between
// a prepared statement's plans: it estimates an array parameter's unnest at
// 10 rows in the generic plan and at the array's length in a custom one,
// so a lock of one id looked ten times cheaper custom and was planned
// afresh at every execution (0.22 ms of planning for 0.06 ms of execution,
// pg_stat_statements, issue 53); a LIMIT parameter is estimated at a tenth
// of the rows, so the generic plan costs as much as a custom one and is
// kept.
const lockByIDSQL = `SELECT t.* FROM (SELECT id FROM unnest($2::bigint[]) AS u(id) LIMIT $3) u,
	LATERAL (SELECT ` + rowColumns + ` FROM styx_items WHERE queue_id=$1 AND id=u.id LIMIT 1 FOR UPDATE) t`

// lockRows locks, in id order, the items named by ids and, for a clear in
// the iteration, the items it selects; it waits for other transactions. It
// is the only statement of an iteration that waits for row locks (see
// "Lock order" in queue.go), and it returns the rows of ids only.
func lockRows(ctx context.Context, tx pgx.Tx, queueID uint64, ids []int64, c *queue.ClearParams) ([]row, error) {
	if c == nil {
		if len(ids) == 0 {
			return nil, nil
		}
		sorted := slices.Clone(ids)
		slices.Sort(sorted)
		sorted = slices.Compact(sorted)
		return collectRows(tx.Query(ctx, lockByIDSQL, int64(queueID), sorted, len(sorted)))
	}
	rows, err := collectRows(tx.Query(ctx, `SELECT `+rowColumns+` FROM styx_items
		WHERE queue_id=$1 AND (id = ANY($2) OR $3 OR ($4 AND state=0) OR ($5 AND state=2)) ORDER BY id FOR UPDATE`,
		int64(queueID), ids, c.Destructive, c.Queue, c.Scheduled))
	if err != nil {
		return rows, err
	}
	named := make(map[int64]bool, len(ids))
	for _, id := range ids {
		named[id] = true
	}
	return slices.DeleteFunc(rows, func(x row) bool { return !named[x.id] }), nil
}

// lifecycleBatch bounds the items of each lifecycle statement; a full batch
// makes the loop run the lifecycle again at once.
const lifecycleBatch = 500

// expiredLeases locks leased items whose lease deadline has passed.
func expiredLeases(ctx context.Context, tx pgx.Tx, queueID uint64, now int64) ([]row, error) {
	return collectRows(tx.Query(ctx, `SELECT `+rowColumns+` FROM styx_items
		WHERE queue_id=$1 AND state<>0 AND deadline <= $2 AND state=1 ORDER BY deadline LIMIT $3 FOR UPDATE SKIP LOCKED`,
		int64(queueID), now, lifecycleBatch))
}

// expiredItems locks items that are not leased and whose expire deadline
// has passed.
func expiredItems(ctx context.Context, tx pgx.Tx, queueID uint64, now int64) ([]row, error) {
	return collectRows(tx.Query(ctx, `SELECT `+rowColumns+` FROM styx_items
		WHERE queue_id=$1 AND state<>1 AND expire_deadline<>0 AND expire_deadline <= $2 ORDER BY expire_deadline LIMIT $3 FOR UPDATE SKIP LOCKED`,
		int64(queueID), now, lifecycleBatch))
}

// readyScheduled makes due scheduled items ready (keeping their ids) and
// returns how many. The update finds the locked rows by ctid, as lease
// does and for the same reason.
func readyScheduled(ctx context.Context, tx pgx.Tx, queueID uint64, now int64) (int64, error) {
	tag, err := tx.Exec(ctx, readyScheduledSQL, int64(queueID), now, lifecycleBatch)
	return tag.RowsAffected(), err
}

// readyScheduledSQL is readyScheduled's statement: $1 queue id, $2 now
// (Unix nanoseconds), $3 items at most.
const readyScheduledSQL = `WITH d AS MATERIALIZED (
		SELECT ctid FROM styx_items WHERE queue_id=$1 AND state<>0 AND deadline <= $2 AND state=2 ORDER BY deadline LIMIT $3 FOR UPDATE SKIP LOCKED)
		UPDATE styx_items t SET state=0, deadline=0 FROM d WHERE t.ctid=d.ctid`

// nextDue returns the earliest lifecycle time of a queue's items (0: none).
func nextDue(ctx context.Context, q querier, queueID uint64) (int64, error) {
	var timed, expiry int64
	err := q.QueryRow(ctx, `SELECT
		coalesce((SELECT deadline FROM styx_items WHERE queue_id=$1 AND state<>0 ORDER BY deadline LIMIT 1), 0),
		coalesce((SELECT expire_deadline FROM styx_items WHERE queue_id=$1 AND state<>1 AND expire_deadline<>0 ORDER BY expire_deadline LIMIT 1), 0)`,
		int64(queueID)).Scan(&timed, &expiry)
	return engine.Earliest(timed, expiry), err
}

// lease leases up to n ready items without a group of one partition,
// oldest first, skipping items another transaction holds and items past
// their expire deadline (the lifecycle kills those): the statement of a
// queue without groups (leaseGroups leases the others).
//
// The update finds the rows the CTE locked by their ctid (a TID scan: a
// row locked by this transaction keeps its ctid until this transaction
// changes it), not by (queue_id, id). Joined on the key, the generic plan
// of a queue whose statistics said it was nearly empty (a fresh table, or
// a busy queue of few live rows and many dead ones) rescanned every index
// entry of the queue, dead ones included, once per item leased: 16,000
// buffers per lease of 20 items, cycle ×10 at about 900 items/s instead of
// 3,500 (docs/benchmarks.md, "PostgreSQL's plain lease").
//
// It runs on its generic plan (onGenericPlan): PostgreSQL planned it anew
// at every call, as a custom plan for "LIMIT 1" looks cheaper than the
// generic plan's estimate, and the planning (0.25-0.45 ms, the bind phase
// in PostgreSQL's log) took longer than the execution; the generic plan is
// the same (the ready index's scan, the TID scan of the update).
func lease(ctx context.Context, tx pgx.Tx, queueID uint64, partition int32, n int, maxBytes, deadline, now int64, h *queue.Holder) ([]queue.LeasedItem, bool, error) {
	return leaseBy(func(sql string, args []any, scan func(pgx.Rows, error) error) error {
		return onGenericPlan(ctx, tx, sql, args, scan)
	}, queueID, partition, n, maxBytes, deadline, now, h, nil)
}

// leaseBy is lease with its statement run by run (onGenericPlan's
// arguments): on its own (lease), or with the COMMIT
// (iteration.LeaseAndCommit). each, when h is nil, holds the holder of
// the k-th item in id order, stored with it (leaseHoldersSQL; a lease
// without a bound only); with neither, the holders are NULL (setHolders
// writes them after).
func leaseBy(run func(sql string, args []any, scan func(pgx.Rows, error) error) error, queueID uint64, partition int32, n int, maxBytes, deadline, now int64,
	h *queue.Holder, each []queue.Holder) ([]queue.LeasedItem, bool, error) {
	client, key := holderArgs(h)
	// A lease of one item takes it whatever its size: the bound cannot
	// leave anything, and leaseSQL is the cheaper statement.
	bounded := maxBytes > 0 && n > 1
	sql, args := leaseSQL, []any{int64(queueID), partition, n, deadline, now, client, key}
	switch {
	case bounded:
		sql, args = leaseBytesSQL, append(args, maxBytes)
	case h == nil && each != nil:
		clients, keys := make([]string, len(each)), make([]string, len(each))
		for k, x := range each {
			clients[k], keys[k] = x.ClientID, x.KeyName
		}
		sql, args[5], args[6] = leaseHoldersSQL, clients, keys
	}
	var items []queue.LeasedItem
	var found []int64
	err := run(sql, args, func(rows pgx.Rows, err error) error {
		// leaseBytesSQL's last column (read as the order key) is how
		// many items it found before the bound.
		items, found, err = scanLeasedRows(rows, err, bounded)
		return err
	})
	if err != nil {
		return nil, false, err
	}
	// RETURNING has no order.
	sortLeased(items)
	for i := range items {
		items[i].LeaseDeadline = queue.FromNanos(deadline)
	}
	return items, len(found) > 0 && found[0] > int64(len(items)), nil
}

// holderArgs returns the holder columns' values of a lease whose items
// all go to h (migration 21), NULL and NULL for nil (the items go to
// several consumers: setHolders writes them).
func holderArgs(h *queue.Holder) (client, key *string) {
	if h == nil {
		return nil, nil
	}
	return &h.ClientID, &h.KeyName
}

// The parts the plain lease statements share: the ready items they take
// (a partition's ready items without a group, not expired at $5, now),
// the change that leases an item (deadline $4, first_leased_at $5 for an
// item leased for the first time), and what they return of it
// (scanLeasedRows).
const (
	plainReady    = `queue_id=$1 AND partition=$2 AND state=0 AND grp IS NULL AND (expire_deadline=0 OR expire_deadline > $5)`
	leaseSet      = `UPDATE styx_items t SET state=1, attempts=t.attempts+1, deadline=$4, first_leased_at=coalesce(t.first_leased_at, $5),`
	leasedColumns = `RETURNING t.id, coalesce(t.first_id, t.id), t.attempts, t.first_leased_at, t.reference, t.kind, t.encoding, t.payload, t.attributes, t.source_queue, ''`
)

// leaseSQL is lease's statement: $1 queue id, $2 partition, $3 items at
// most, $4 lease deadline, $5 now (Unix nanoseconds), which becomes the
// first_leased_at of an item leased for the first time (migration 14), $6
// and $7 the lease's holder (holderArgs).
const leaseSQL = `WITH c AS MATERIALIZED (
		SELECT ctid FROM styx_items WHERE ` + plainReady + `
		ORDER BY id LIMIT $3 FOR UPDATE SKIP LOCKED)
		` + leaseSet + `
			holder_client=$6::text, holder_key=$7::text FROM c WHERE t.ctid=c.ctid
		` + leasedColumns

// leaseHoldersSQL is leaseSQL for items that go to several consumers: $6
// and $7 are arrays of the holders' columns, the k-th for the k-th item in
// id order (the order Serve deals a lease's items in), so that no statement
// after the lease writes them (setHolders), and the COMMIT can go with it
// (iteration.LeaseAndCommit).
const leaseHoldersSQL = `WITH c AS MATERIALIZED (
		SELECT ctid, id FROM styx_items WHERE ` + plainReady + `
		ORDER BY id LIMIT $3 FOR UPDATE SKIP LOCKED),
	r AS (SELECT ctid, row_number() OVER (ORDER BY id) AS k FROM c)
		` + leaseSet + `
			holder_client=($6::text[])[r.k], holder_key=($7::text[])[r.k] FROM r WHERE t.ctid=r.ctid
		` + leasedColumns

// leaseBytesSQL is leaseSQL bounded by bytes ($8): of the items it locks,
// it leases those, in id order, whose payloads and attributes sum to at
// most $6, the first whatever its size, and returns with each how many it
// locked. The sizes come from the rows' TOAST pointers (octet_length does
// not read a value stored apart); the rows locked and not leased stay
// locked until the iteration commits (another node's lease passes them).
const leaseBytesSQL = `WITH c AS MATERIALIZED (
		SELECT ctid, id, octet_length(payload) + coalesce(octet_length(attributes), 0) AS size FROM styx_items
		WHERE ` + plainReady + `
		ORDER BY id LIMIT $3 FOR UPDATE SKIP LOCKED),
	k AS (SELECT ctid FROM (SELECT ctid, id, sum(size) OVER (ORDER BY id) AS upto FROM c) w
		WHERE upto <= $8 OR id = (SELECT min(id) FROM c))
		` + leaseSet + `
			holder_client=$6::text, holder_key=$7::text FROM k WHERE t.ctid=k.ctid
		` + leasedColumns + `,
			(SELECT count(*) FROM c)`

// groupedReady reports whether a partition holds ready items with a group
// (one probe of styx_items_group_ready).
func groupedReady(ctx context.Context, tx pgx.Tx, queueID uint64, partition int32) (bool, error) {
	var ok bool
	err := tx.QueryRow(ctx, groupedReadySQL, int64(queueID), partition).Scan(&ok)
	return ok, err
}

// groupedReadySQL is groupedReady's statement: $1 queue id, $2 partition.
const groupedReadySQL = `SELECT EXISTS (SELECT 1 FROM styx_items WHERE queue_id=$1 AND partition=$2 AND state=0 AND grp IS NOT NULL)`

// scanLeasedKeys reads the items of a group lease statement (leaseUpdate)
// and each one's order key, as they come, and how many items the
// statement found before its bound (its last column, the same on every
// row; 0 when no row came).
func scanLeasedKeys(rows pgx.Rows, err error) ([]queue.LeasedItem, []int64, int64, error) {
	var found int64
	items, keys, err := scanLeasedRows(rows, err, true, &found)
	return items, keys, found, err
}

// scanLeasedRows reads the rows of a lease statement: the item's columns,
// its group ("" for none), withKey an order key, and with extra one more
// column into *extra.
func scanLeasedRows(rows pgx.Rows, err error, withKey bool, extra ...*int64) ([]queue.LeasedItem, []int64, error) {
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	var items []queue.LeasedItem
	var keys []int64
	for rows.Next() {
		var it queue.LeasedItem
		var id, first, firstLeased, key int64
		dest := []any{&id, &first, &it.Attempts, &firstLeased, &it.Reference, &it.Kind, &it.Encoding, &it.Payload, &it.Attributes, &it.SourceQueue, &it.Group}
		if withKey {
			dest = append(dest, &key)
		}
		for _, x := range extra {
			dest = append(dest, x)
		}
		if err := rows.Scan(dest...); err != nil {
			return nil, nil, err
		}
		it.ID, it.FirstID, it.FirstLeasedAt = uint64(id), uint64(first), queue.FromNanos(firstLeased)
		items, keys = append(items, it), append(keys, key)
	}
	return items, keys, rows.Err()
}

func sortLeased(items []queue.LeasedItem) {
	for i := 1; i < len(items); i++ {
		for j := i; j > 0 && items[j].ID < items[j-1].ID; j-- {
			items[j], items[j-1] = items[j-1], items[j]
		}
	}
}

// insert is a new item for insertItems.
type insert struct {
	partition int32
	state     int16
	deadline  int64
	expire    int64
	created   int64
	attempts  int32
	sourceKey *string
	body      queue.ItemBody
	lastError string
	errors    []byte
	// group is the item's group ("" for none); seq, when not 0, its
	// GroupSeq (a redriven item that releases a held group), else its id.
	group string
	seq   int64
}

// insertItems inserts items under new ids from the shared sequence, in the
// order given (so ids follow it). With ids non-nil the ids are given
// instead. Items whose source key the queue already holds are skipped
// (ADR 0003).
func insertItems(ctx context.Context, tx pgx.Tx, queueID uint64, items []insert, ids []int64) error {
	sql, args := insertStatement(queueID, items, ids)
	_, err := tx.Exec(ctx, sql, args...)
	return err
}

// importInsert inserts items under the given ids, as insertItems, and
// reports which ids it inserted. Items with a source key go in key order,
// so that two transactions inserting the same keys wait for each other (on
// the unique index) in one order, never in a cycle.
func importInsert(ctx context.Context, tx pgx.Tx, queueID uint64, items []insert, ids []int64) (map[int64]bool, error) {
	if len(items) == 0 {
		return map[int64]bool{}, nil
	}
	order := make([]int, len(items))
	for i := range order {
		order[i] = i
	}
	key := func(i int) string {
		if items[i].sourceKey == nil {
			return ""
		}
		return *items[i].sourceKey
	}
	slices.SortStableFunc(order, func(a, b int) int { return strings.Compare(key(a), key(b)) })
	sorted, sortedIDs := make([]insert, len(items)), make([]int64, len(items))
	for j, i := range order {
		sorted[j], sortedIDs[j] = items[i], ids[i]
	}
	sql, args := insertStatement(queueID, sorted, sortedIDs)
	rows, err := tx.Query(ctx, sql+` RETURNING id`, args...)
	if err != nil {
		return nil, err
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, err
	}
	inserted := make(map[int64]bool, len(got))
	for _, id := range got {
		inserted[id] = true
	}
	return inserted, nil
}

// insertStatement is the statement of insertItems and its arguments.
func insertStatement(queueID uint64, items []insert, ids []int64) (string, []any) {
	n := len(items)
	part, state, deadline, expire, created, attempts := make([]int32, n), make([]int16, n), make([]int64, n), make([]int64, n), make([]int64, n), make([]int32, n)
	key, ref, kind, enc, srcQ, srcID, reason, lastErr, errs := make([]*string, n), make([]string, n), make([]string, n), make([]string, n),
		make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]*string, n)
	fps, attrs := make([]string, n), make([][]byte, n)
	payload, deadAt, redrives := make([][]byte, n), make([]int64, n), make([]int32, n)
	// Groups and their seqs go as NULL arrays when no item has one (unnest
	// pads them with NULLs), so that a produce without groups sends nothing
	// more than before.
	var groups []*string
	var seqs []*int64
	for i, item := range items {
		if item.group != "" && groups == nil {
			groups, seqs = make([]*string, n), make([]*int64, n)
		}
		if item.group != "" {
			g := item.group
			groups[i] = &g
			if item.seq != 0 {
				seq := item.seq
				seqs[i] = &seq
			}
		}
		part[i], state[i], deadline[i], expire[i], created[i], attempts[i] = item.partition, item.state, item.deadline, item.expire, item.created, item.attempts
		key[i], ref[i], kind[i], enc[i] = item.sourceKey, item.body.Reference, item.body.Kind, item.body.Encoding
		srcQ[i], srcID[i], reason[i], lastErr[i] = item.body.SourceQueue, item.body.SourceID, item.body.DeadReason, item.lastError
		payload[i], deadAt[i], redrives[i] = nonNil(item.body.Payload), queue.Nanos(item.body.DeadAt), item.body.RedriveCount
		attrs[i] = item.body.Attributes
		if item.sourceKey != nil && queue.IsDeadCopyKey(*item.sourceKey) {
			fps[i] = fingerprint.Of(item.lastError) // a dead item's error group (migration 5)
		}
		if item.errors != nil {
			s := string(item.errors)
			errs[i] = &s
		}
	}
	args := []any{int64(queueID), part, state, deadline, expire, created, attempts, key, ref, kind, enc, payload, srcQ, srcID, reason, deadAt, redrives}
	args = append(args, ids, lastErr, errs, fps, attrs, groups, seqs)
	return `INSERT INTO styx_items (queue_id, id, partition, state, deadline, expire_deadline, created_at, attempts, source_key,
		reference, kind, encoding, payload, source_queue, source_id, dead_reason, dead_at, redrive_count, last_error, errors, fingerprint, attributes,
		grp, group_seq)
		SELECT $1, coalesce(($18::bigint[])[u.ord], nextval('styx_item_ids')), u.part, u.state, u.deadline, u.expire, u.created, u.attempts, u.key,
			u.ref, u.kind, u.enc, u.payload, u.src_q, u.src_id, u.reason, u.dead_at, u.redrives, u.last_error, u.errs::jsonb, u.fp, u.attrs,
			u.grp, u.seq
		FROM unnest($2::integer[], $3::smallint[], $4::bigint[], $5::bigint[], $6::bigint[], $7::integer[], $8::text[],
			$9::text[], $10::text[], $11::text[], $12::bytea[], $13::text[], $14::text[], $15::text[], $16::bigint[], $17::integer[],
			$19::text[], $20::text[], $21::text[], $22::bytea[], $23::text[], $24::bigint[])
			WITH ORDINALITY AS u(part, state, deadline, expire, created, attempts, key, ref, kind, enc, payload, src_q, src_id, reason,
				dead_at, redrives, last_error, errs, fp, attrs, grp, seq, ord)
		ORDER BY u.ord
		ON CONFLICT (queue_id, source_key) DO NOTHING`, args
}

// heldKeys returns the items of a queue that hold the given source keys, by
// key. It reads without locking.
func heldKeys(ctx context.Context, tx pgx.Tx, queueID uint64, keys []string) (map[string]queue.Item, error) {
	held := map[string]queue.Item{}
	if len(keys) == 0 {
		return held, nil
	}
	items, err := collectItems(tx.Query(ctx, `SELECT `+itemColumns+` FROM styx_items WHERE queue_id=$1 AND source_key = ANY($2)`,
		int64(queueID), keys))
	if err != nil {
		return nil, err
	}
	for i := range items {
		held[items[i].Meta.SourceKey] = items[i]
	}
	return held, nil
}

// newIDs allocates n ids from the shared sequence.
func newIDs(ctx context.Context, tx pgx.Tx, n int) ([]int64, error) {
	rows, err := tx.Query(ctx, `SELECT nextval('styx_item_ids') FROM generate_series(1, $1)`, n)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[int64])
}

// requeue is an item whose lease ended without completion, for requeueItems.
type requeue struct {
	id int64
	// newID is the id it gets; 0 means the next of the sequence.
	newID     int64
	state     int16
	deadline  int64
	attempts  int32
	setErrors bool
	lastError string
	errors    []byte
}

// requeueItems gives each item a new id (ids are lease handles) and its new
// state; the first requeue keeps the id the item entered the queue under in
// first_id.
func requeueItems(ctx context.Context, tx pgx.Tx, queueID uint64, rs []requeue) error {
	n := len(rs)
	ids, newIDs, states, deadlines, attempts, set, lastErr, errs := make([]int64, n), make([]int64, n), make([]int16, n), make([]int64, n),
		make([]int32, n), make([]bool, n), make([]string, n), make([]*string, n)
	for i, r := range rs {
		ids[i], newIDs[i], states[i], deadlines[i], attempts[i], set[i], lastErr[i] = r.id, r.newID, r.state, r.deadline, r.attempts, r.setErrors, r.lastError
		if r.errors != nil {
			s := string(r.errors)
			errs[i] = &s
		}
	}
	_, err := tx.Exec(ctx, `UPDATE styx_items t SET id = CASE WHEN u.new_id <> 0 THEN u.new_id ELSE nextval('styx_item_ids') END,
		first_id = coalesce(t.first_id, t.id), state=u.state, deadline=u.deadline, attempts=u.attempts,
		last_error = CASE WHEN u.set THEN u.last_error ELSE t.last_error END,
		errors = CASE WHEN u.set THEN u.errs::jsonb ELSE t.errors END
		FROM unnest($2::bigint[], $3::smallint[], $4::bigint[], $5::integer[], $6::boolean[], $7::text[], $8::text[], $9::bigint[])
			AS u(id, state, deadline, attempts, set, last_error, errs, new_id)
		WHERE t.queue_id=$1 AND t.id=u.id`, int64(queueID), ids, states, deadlines, attempts, set, lastErr, errs, newIDs)
	return err
}

// requeuedRow locks the ready or scheduled item of a partition that
// entered the queue under id first and has been requeued since, skipping
// it when another transaction holds it (it is being leased or changed);
// false when there is none.
func requeuedRow(ctx context.Context, tx pgx.Tx, queueID uint64, partition int32, first int64) (row, bool, error) {
	rows, err := collectRows(tx.Query(ctx, `SELECT `+rowColumns+` FROM styx_items
		WHERE queue_id=$1 AND first_id=$2 AND partition=$3 AND state IN (0, 2) FOR UPDATE SKIP LOCKED`,
		int64(queueID), first, partition))
	if err != nil || len(rows) == 0 {
		return row{}, false, err
	}
	return rows[0], true, nil
}

// renewLeases sets the lease deadline of leased items whose rows the
// transaction holds.
func renewLeases(ctx context.Context, tx pgx.Tx, queueID uint64, ids []int64, deadline int64) error {
	_, err := tx.Exec(ctx, `UPDATE styx_items SET deadline=$3 WHERE queue_id=$1 AND id = ANY($2) AND state=1`, int64(queueID), ids, deadline)
	return err
}

// death is an item that dies in this iteration.
type death struct {
	id        int64
	reason    string
	attempts  int32
	sourceKey string // the item's own (set on dead copies, redriven and imported items)
	setErrors bool
	lastError string
	errors    []byte
	// partition, group and seq are the item's (a held group's record).
	partition int32
	group     string
	seq       int64
}

// dlq is what a dead-letter move needs of the dead-letter queue.
type dlq struct {
	id     uint64
	name   string
	expire int64 // retention, counted from dead_at
}

// moveDead moves items to a dead-letter queue in one statement: deleted
// from the source and inserted into the dead-letter queue under new ids with
// their history, item ds[i] into partition parts[i] (see Queue.deadPartitions;
// the new ids follow the source ids, so ds is expected in id order), unless
// the dead-letter queue already holds their source key (a copy it took
// before: ADR 0003's source_id rule, kept though the move is atomic here),
// then sets the fingerprint of the last error of each item taken (their
// error group; migration 5) on the rows it inserted. A dead item keeps its
// attempts and first_leased_at. Returns the items the dead-letter queue
// took, by error group (metrics.Arrivals, reported once committed).
func moveDead(ctx context.Context, tx pgx.Tx, src uint64, srcName string, to dlq, ds []death, parts []int32, now int64) (metrics.Arrivals, error) {
	var arrived metrics.Arrivals
	n := len(ds)
	if len(parts) != n {
		return arrived, fmt.Errorf("dead-letter move: %d partitions for %d items", len(parts), n)
	}
	ids, keys, reasons, srcIDs, attempts, set, lastErr, errs := make([]int64, n), make([]string, n), make([]string, n), make([]string, n),
		make([]int32, n), make([]bool, n), make([]string, n), make([]*string, n)
	for i, d := range ds {
		ids[i], reasons[i], attempts[i], set[i], lastErr[i] = d.id, d.reason, d.attempts, d.setErrors, d.lastError
		keys[i] = queue.SourceKey(d.reason, srcName, uint64(d.id))
		srcIDs[i] = queue.FormatID(uint64(d.id))
		if d.errors != nil {
			s := string(d.errors)
			errs[i] = &s
		}
	}
	expire := int64(0)
	if to.expire > 0 {
		expire = now + to.expire
	}
	rows, err := tx.Query(ctx, `WITH d AS (
			SELECT * FROM unnest($2::bigint[], $3::text[], $4::text[], $5::text[], $6::integer[], $7::boolean[], $8::text[], $9::text[], $11::integer[])
				AS d(id, key, reason, src_id, attempts, set, last_error, errs, part)),
		moved AS (
			DELETE FROM styx_items t USING d WHERE t.queue_id=$1 AND t.id=d.id
			RETURNING t.created_at, t.reference, t.kind, t.encoding, t.payload, t.attributes, t.redrive_count, t.last_error AS old_last_error,
				t.errors AS old_errors, t.grp AS grp, t.first_leased_at, d.*)
		INSERT INTO styx_items (queue_id, id, partition, state, expire_deadline, attempts, first_leased_at, created_at, source_key,
			reference, kind, encoding, payload, attributes, source_queue, source_id, dead_reason, dead_at, redrive_count, last_error, errors, grp)
		SELECT $10, nextval('styx_item_ids'), m.part, 0, $12, m.attempts, m.first_leased_at, m.created_at, m.key,
			m.reference, m.kind, m.encoding, m.payload, m.attributes, $13, m.src_id, m.reason, $14, m.redrive_count,
			CASE WHEN m.set THEN m.last_error ELSE m.old_last_error END,
			CASE WHEN m.set THEN m.errs::jsonb ELSE m.old_errors END, m.grp
		FROM moved m ORDER BY m.id
		ON CONFLICT (queue_id, source_key) DO NOTHING
		RETURNING id, last_error, dead_reason`,
		int64(src), ids, keys, reasons, srcIDs, attempts, set, lastErr, errs, int64(to.id), parts, expire, srcName, now)
	if err != nil {
		return arrived, err
	}
	var taken []int64
	var fps []string
	var id int64
	var last, reason string
	if _, err := pgx.ForEachRow(rows, []any{&id, &last, &reason}, func() error {
		taken, fps = append(taken, id), append(fps, fingerprint.Of(last))
		arrived.Add(reason, last)
		return nil
	}); err != nil {
		return metrics.Arrivals{}, err
	}
	if len(taken) > 0 {
		if err := setFingerprints(ctx, tx, to.id, taken, fps); err != nil {
			return metrics.Arrivals{}, err
		}
	}
	return arrived, nil
}

// setFingerprints sets the fingerprint of items whose rows the transaction
// holds or created.
func setFingerprints(ctx context.Context, tx pgx.Tx, queueID uint64, ids []int64, fps []string) error {
	_, err := tx.Exec(ctx, `UPDATE styx_items t SET fingerprint = u.fp FROM unnest($2::bigint[], $3::text[]) AS u(id, fp)
		WHERE t.queue_id=$1 AND t.id=u.id`, int64(queueID), ids, fps)
	return err
}

// deleteIDs deletes items by id and returns how many it found.
func deleteIDs(ctx context.Context, tx pgx.Tx, queueID uint64, ids []int64) (int64, error) {
	tag, err := tx.Exec(ctx, `DELETE FROM styx_items WHERE queue_id=$1 AND id = ANY($2)`, int64(queueID), ids)
	return tag.RowsAffected(), err
}

// deleteRefs deletes items by partition and id (with exceptLeased, only
// those that are not leased) and returns how many it deleted.
func deleteRefs(ctx context.Context, tx pgx.Tx, queueID uint64, refs []queue.ItemRef, exceptLeased bool) (int64, error) {
	parts, ids := make([]int32, len(refs)), make([]int64, len(refs))
	for i, r := range refs {
		parts[i], ids[i] = r.Partition, int64(r.ID)
	}
	tag, err := tx.Exec(ctx, `DELETE FROM styx_items t USING unnest($2::integer[], $3::bigint[]) AS u(part, id)
		WHERE t.queue_id=$1 AND t.id=u.id AND t.partition=u.part AND NOT ($4 AND t.state=1)`, int64(queueID), parts, ids, exceptLeased)
	return tag.RowsAffected(), err
}

// clearItems deletes the items queue.clear selects, and with them (a clear
// of ready or of all items) the queue's held groups. It never waits: the
// rows it selected at the start of the transaction are locked already
// (lockRows), and a row another transaction locked since is in the middle
// of a change (a lease, a lifecycle move) that the clear did not see, so it
// is skipped as if the clear had come first.
func clearItems(ctx context.Context, tx pgx.Tx, queueID uint64, c queue.ClearParams) error {
	_, err := tx.Exec(ctx, `WITH c AS MATERIALIZED (
		SELECT id FROM styx_items WHERE queue_id=$1 AND ($2 OR ($3 AND state=0) OR ($4 AND state=2)) FOR UPDATE SKIP LOCKED)
		DELETE FROM styx_items t USING c WHERE t.queue_id=$1 AND t.id=c.id`,
		int64(queueID), c.Destructive, c.Queue, c.Scheduled)
	if err != nil || !(c.Destructive || c.Queue) {
		return err
	}
	// A clear of the queue's items drops its held groups (rule 5): the
	// items that waited are gone. A record another transaction holds is
	// being released (or deleted) by it: passed over, never waited for.
	_, err = tx.Exec(ctx, `WITH h AS MATERIALIZED (SELECT partition, grp FROM styx_held_groups WHERE queue_id=$1 FOR UPDATE SKIP LOCKED)
		DELETE FROM styx_held_groups t USING h WHERE t.queue_id=$1 AND t.partition=h.partition AND t.grp=h.grp`, int64(queueID))
	return err
}

// readyCountCap bounds how many ready items of one partition readyCounts
// counts, so that the count costs at most partitions × readyCountCap index
// entries however long the queue: partitions holding at least this many
// ready items count as equally loaded.
const readyCountCap = 1000

// What readyCounts counts of a partition's grouped items.
const (
	// countUngrouped counts the ready items without a group only (a queue
	// this node knows no grouped item of).
	countUngrouped = iota
	// countAll counts every ready item, with a group or not.
	countAll
	// countLeasable counts, of an ordered queue's grouped items, the groups
	// a lease could take (leasableGroupsSQL, at most groupCountCap): a
	// group whose head is leased, scheduled or held counts nothing,
	// however many ready items it holds.
	countLeasable
)

// readyCounts returns the number of ready items of each of a queue's
// partitions, each at most readyCountCap, as this transaction sees them
// (its own inserts included; rows other transactions hold locked are
// counted), the grouped ones as mode says (now is the transaction's time,
// for countLeasable), and which partitions hold ready grouped items
// (countAll only). A plain read: it waits for no lock (see "Lock order").
//
// With one partition there is no choice to make, so nothing is counted: the
// partition is taken to hold readyCountCap items (a lease that finds fewer
// marks it empty, as with any partition).
func readyCounts(ctx context.Context, tx pgx.Tx, queueID uint64, partitions int32, mode int, now int64) (ready []int, grouped []bool, err error) {
	if partitions == 1 {
		return []int{readyCountCap}, nil, nil
	}
	const ungroupedSQL = `(SELECT count(*) FROM (SELECT 1 FROM styx_items WHERE queue_id=$1 AND partition=p AND state=0 AND grp IS NULL LIMIT $3) r)`
	var rows pgx.Rows
	switch mode {
	case countLeasable:
		rows, err = tx.Query(ctx, leasableGroupsSQL+`, c AS (SELECT p, max(n) AS n FROM g GROUP BY p)
			SELECT p, least($3, `+ungroupedSQL+` + coalesce((SELECT n FROM c WHERE c.p=s.p), 0)), 0
			FROM generate_series(0, $2::integer - 1) AS s(p)`, int64(queueID), partitions, readyCountCap, groupCountCap, now)
	case countAll:
		rows, err = tx.Query(ctx, `SELECT p, least($3, `+ungroupedSQL+` + g), g FROM (SELECT p, (SELECT count(*) FROM (SELECT 1 FROM styx_items
				WHERE queue_id=$1 AND partition=p AND state=0 AND grp IS NOT NULL LIMIT $3) r) AS g
			FROM generate_series(0, $2::integer - 1) AS p) s`, int64(queueID), partitions, readyCountCap)
		grouped = make([]bool, partitions)
	default:
		rows, err = tx.Query(ctx, `SELECT p, `+ungroupedSQL+`, 0 FROM generate_series(0, $2::integer - 1) AS p`,
			int64(queueID), partitions, readyCountCap)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("count ready items: %w", err)
	}
	ready = make([]int, partitions)
	var p int32
	var n, g int64
	_, err = pgx.ForEachRow(rows, []any{&p, &n, &g}, func() error {
		if p >= 0 && p < partitions {
			ready[p] = int(n)
			if grouped != nil {
				grouped[p] = g > 0
			}
		}
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("count ready items: %w", err)
	}
	return ready, grouped, nil
}

// editItem runs a dead.edit (engine.Tx.Edit): it reads the item ref
// (locking its row), lets edit change its body and history, and writes
// them.
func editItem(ctx context.Context, tx pgx.Tx, queueID uint64, name string, ref queue.ItemRef, edit func(*queue.Item) error) (queue.Item, error) {
	cur, err := scanItem(tx.QueryRow(ctx, `SELECT `+itemColumns+` FROM styx_items WHERE queue_id=$1 AND id=$2 AND partition=$3 FOR UPDATE`,
		int64(queueID), int64(ref.ID), ref.Partition))
	if errors.Is(err, pgx.ErrNoRows) {
		return queue.Item{}, apierr.New(apierr.NotFound, "no such item; '%s' is not in partition %d of queue '%s'",
			queue.FormatID(ref.ID), ref.Partition, name)
	}
	if err != nil {
		return queue.Item{}, err
	}
	if cur.Meta.Leased {
		return queue.Item{}, apierr.New(apierr.Conflict, "item is leased; a consumer of queue '%s' holds '%s'", name, queue.FormatID(ref.ID))
	}
	if err := edit(&cur); err != nil {
		return queue.Item{}, err
	}
	b := &cur.Body
	tag, err := tx.Exec(ctx, `UPDATE styx_items SET reference=$3, kind=$4, encoding=$5, payload=$6, errors=$7, last_error=$8
		WHERE queue_id=$1 AND id=$2 AND state<>3`,
		int64(queueID), int64(ref.ID), b.Reference, b.Kind, b.Encoding, nonNil(b.Payload), encodeErrors(cur.Errors), cur.Errors.LastError)
	if err == nil && tag.RowsAffected() == 0 {
		// Dying (deadletters.go): its dead copy is being made of it.
		return queue.Item{}, apierr.New(apierr.Conflict, "item is moving to the dead-letter queue; edit '%s' there once it arrived",
			queue.FormatID(ref.ID))
	}
	return cur, err
}

// setHolders stores the holders of leases that one lease statement dealt
// to several consumers (migration 21): the items are leased by this
// transaction already.
func setHolders(ctx context.Context, tx pgx.Tx, queueID uint64, rows []holderRow) error {
	ids := make([]int64, len(rows))
	clients, keys := make([]string, len(rows)), make([]string, len(rows))
	for i, r := range rows {
		ids[i], clients[i], keys[i] = r.id, r.h.ClientID, r.h.KeyName
	}
	_, err := tx.Exec(ctx, `UPDATE styx_items t SET holder_client = u.c, holder_key = u.k
		FROM unnest($2::bigint[], $3::text[], $4::text[]) AS u(id, c, k) WHERE t.queue_id = $1 AND t.id = u.id AND t.state = 1`,
		int64(queueID), ids, clients, keys)
	return err
}

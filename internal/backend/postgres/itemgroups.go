package postgres

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/styxq/styx/internal/queue"
)

// Item groups on PostgreSQL (queue/itemgroups.go; issue 37).
//
// Storage (groupsMigration). styx_items.grp is an item's group, NULL for
// none (collation "C": byte order, the cheapest comparison), and group_seq
// its GroupSeq only where it differs from the item's first id: a redriven
// item that releases a held group takes the dead item's. An item's GroupSeq
// is therefore groupSeqSQL, coalesce(group_seq, first_id, id): the id it
// entered the queue under, which a requeue (a new id, first_id set to the
// old one) keeps, and no statement writes it on produce, import, redrive or
// a dead-letter move. Items without a group write NULLs that cost nothing
// (two nullable columns without a default: adding them rewrites no row).
//
// Indexes, each partial on grouped items, so that an item without a group
// enters none of them and a queue without groups pays nothing but the
// predicate:
//
//   - styx_items_group (queue_id, partition, grp, GroupSeq): a group's head
//     (its first item in every state) and the items after it, one probe.
//   - styx_items_group_ready (queue_id, partition, grp, id) WHERE state = 0:
//     the groups that have ready items, visited by a loose index scan (one
//     probe per group, however many items it holds), and a group's ready
//     items in id order (fair queues).
//   - styx_items_group_leased (queue_id, partition, grp) WHERE state = 1:
//     whether a group has a leased item (one probe).
//   - styx_items_ready, the leasing index of migration 1, is re-created for
//     the items without a group only (AND grp IS NULL): the items of a hot
//     group are never in the FIFO that the items without a group are leased
//     from, and that FIFO's statement is the one it was.
//
// Leases (leaseGroups). A partition whose queue is ordered, or fair with
// grouped items, is leased group by group: the groups with ready items are
// visited in group order from the group after a cursor, wrapping around
// (round-robin; the cursor is the last group a lease took from, per
// partition and node, in memory), the items without a group taking one
// turn, at the wrap. Rotation rather than "oldest head first" because an
// index cannot order groups by their heads (heads change with every
// lease); every group with a leasable head is reached within one round.
//
//   - Ordered: a visited group is leasable when its head (the first entry
//     of styx_items_group, whatever its state) is ready and not past its
//     expire deadline, it has no leased item (styx_items_group_leased) and
//     it is not held (styx_held_groups): three index probes, whatever the
//     group's length. A leasable group gives its head and the items after
//     it in GroupSeq order while they are ready (a window over at most the
//     lease's batch size of rows); groups are taken whole, in visiting
//     order, until the batch is full (SQS FIFO's receive does the same: a
//     batch keeps a group's messages together). The statement visits the
//     groups lazily and stops there, so a lease reads at most its batch of
//     items plus the blocked groups it passes (one head each): a blocked
//     group's items are never read, and blocked groups are bounded by the
//     leased items, held groups and scheduled heads, not by the queue.
//   - Fair: up to batch groups (with ready items) are visited and each gives
//     its oldest ready items by id; they are dealt round-robin (rank within
//     the group, then visiting order), so a hot group takes one turn per
//     round. To deal exactly, each group is read up to batch - groups + 1
//     items (the most one group can get when the others have one each):
//     at most batch²/4 index entries, 30 for a batch of 10. Exact within a
//     lease; across leases and nodes the rotation is per node, so two nodes
//     may give the same group a turn each (an approximation of SQS's fair
//     queues, which promise no more).
//
// Cost. A group passed over costs about 12 µs (measured: a loose-scan step,
// the head's probe and, when the head is ready, the leased probe); in
// steady state the cursor has just passed the groups a node leased, so a
// lease meets the blocked groups only after a full round, when most have
// been completed. The statements run on generic plans (leaseGroups).
// BenchmarkGroupLease: a lease of 10 and its complete on 1,000 groups of
// 100 items, on one group of 100,000 and on a blocked group of 100,000
// beside 20,000 small ones cost what the same cycle costs on a queue
// without groups (docs/benchmarks.md).
//
// Queues without groups. A queue that is not ordered runs the lease
// statement it always ran (lease, on styx_items_ready) until the node
// knows it holds grouped items: it produced some there, or it looked (a
// lease that came short probes the partition, the counts count grouped
// items, each at most once every groupLookEvery); the partition is then
// leased by fairLeaseSQL, until a lease of it finds no grouped item. So a
// queue without groups runs the statements it ran, plus one probe a second
// at most when its leases come short. ReadyCounts counts, per partition,
// the ready items without a group plus, on an ordered queue, the groups a
// lease could take (leasableGroupsSQL, up to groupCountCap), else the ready
// grouped items: a partition whose groups are all blocked counts nothing
// for them.
//
// The engine gives each waiting lease of an ordered queue a lease of its
// own (engine.Serve's apart): a group's run goes to one consumer.
//
// Several nodes (READ COMMITTED). Which item is a group's head is decided
// on the statement's snapshot, never by a lock: a locked head is not
// skipped for the next item (that is what SKIP LOCKED alone would do, and
// it would lease a group's second item while another node leases its
// first). The head is then locked FOR UPDATE SKIP LOCKED on its id with
// state = 0, which PostgreSQL re-checks on the row's latest version: when
// another transaction holds the head (leasing it now) the group is passed
// over; when it committed a change since the snapshot (leased it; requeued
// it under a new id; deleted it) the re-check fails and the group is passed
// over too. Every lease of a group goes through the lock of the head of its
// snapshot, and a head changes only by a committed change of the group's
// first item or by a held group's release (an insert with a smaller
// GroupSeq, made while the snapshot saw the group held), so two
// transactions never lease a group at once: the second either waits in
// vain for the first's lock (skipped) or sees its commit (a leased item).
// The items after the head are locked afterwards, SKIP LOCKED, and a
// group's run is cut at the first one not locked (held by another
// transaction: a delete, the lifecycle), so that no item is leased past
// one that may stay.
//
// Held groups (rule 5) are rows of styx_held_groups, keyed by queue,
// partition and group, shared by the nodes and gone with their queue
// (ON DELETE CASCADE). A dead-letter move of an ordered queue with
// GroupHold inserts them (holdGroups) in the move's transaction; a redriven
// item of the group releases it in its insert's transaction, taking its
// seq (Redrive); and the lifecycle deletes, in one statement at most once a
// second, those whose dead item's source key the dead-letter queue no
// longer holds (releaseGone), on each node that knows the queue holds
// groups: the node that held one, or one whose reload (every second) saw a
// held row.

// groupsMigration adds item groups (a migration of schema.go).
const groupsMigration = `
ALTER TABLE styx_items ADD COLUMN grp text COLLATE "C";
ALTER TABLE styx_items ADD COLUMN group_seq bigint;
ALTER TABLE styx_queues ADD COLUMN ordered boolean NOT NULL DEFAULT false;
ALTER TABLE styx_queues ADD COLUMN group_dead_policy text NOT NULL DEFAULT '';

DROP INDEX styx_items_ready;
CREATE INDEX styx_items_ready ON styx_items (queue_id, partition, id) WHERE state = 0 AND grp IS NULL;
CREATE INDEX styx_items_group ON styx_items (queue_id, partition, grp, (coalesce(group_seq, first_id, id))) WHERE grp IS NOT NULL;
CREATE INDEX styx_items_group_ready ON styx_items (queue_id, partition, grp, id) WHERE state = 0 AND grp IS NOT NULL;
CREATE INDEX styx_items_group_leased ON styx_items (queue_id, partition, grp) WHERE state = 1 AND grp IS NOT NULL;

CREATE TABLE styx_held_groups (
	queue_id      bigint  NOT NULL REFERENCES styx_queues (id) ON DELETE CASCADE,
	partition     integer NOT NULL,
	grp           text    COLLATE "C" NOT NULL,
	dead_queue_id bigint  NOT NULL,
	dead_key      text    NOT NULL,
	seq           bigint  NOT NULL,
	held_at       bigint  NOT NULL,
	PRIMARY KEY (queue_id, partition, grp)
);
CREATE INDEX styx_held_groups_at ON styx_held_groups (queue_id, held_at);
`

// groupSeqSQL is an item's GroupSeq (meaningful when grp is set), the
// expression styx_items_group indexes: statements must spell it so.
const groupSeqSQL = `coalesce(group_seq, first_id, id)`

// groupCountCap bounds how many leasable groups of an ordered queue's
// partition readyCounts counts (each costs a few index probes).
const groupCountCap = 100

// groupLookEvery is how often at most a node looks for grouped items it
// does not know of in a queue that is not ordered (Lease, ReadyCounts).
const groupLookEvery = time.Second

// heldCheckEvery is how often a node checks, per queue holding groups,
// whether their dead items are still in the dead-letter queue (rule 5(b)).
const heldCheckEvery = time.Second

// notExpired is the condition on an item's expire deadline of the lease
// statements ($5 is now).
const notExpired = `(expire_deadline=0 OR expire_deadline > $5)`

// groupsVisit is the WITH RECURSIVE part of the group lease statements:
// ga, the groups of partition $2 with ready items after the cursor $6, and
// gb, those up to it, in group order, each step one probe of
// styx_items_group_ready; both end with a NULL row. Evaluated lazily: a
// statement that stops reading stops the scan.
const groupsVisit = `ga(grp) AS (
		(SELECT grp FROM styx_items WHERE queue_id=$1 AND partition=$2 AND state=0 AND grp > $6 ORDER BY grp LIMIT 1)
		UNION ALL
		SELECT (SELECT i.grp FROM styx_items i WHERE i.queue_id=$1 AND i.partition=$2 AND i.state=0 AND i.grp > ga.grp
			ORDER BY i.grp LIMIT 1) FROM ga WHERE ga.grp IS NOT NULL),
	gb(grp) AS (
		(SELECT grp FROM styx_items WHERE queue_id=$1 AND partition=$2 AND state=0 AND grp > '' AND grp <= $6 ORDER BY grp LIMIT 1)
		UNION ALL
		SELECT (SELECT i.grp FROM styx_items i WHERE i.queue_id=$1 AND i.partition=$2 AND i.state=0 AND i.grp > gb.grp AND i.grp <= $6
			ORDER BY i.grp LIMIT 1) FROM gb WHERE gb.grp IS NOT NULL)`

// headReadySQL is the condition that a group's head h (its first item in
// GroupSeq order) may be leased: ready and not past its expire deadline
// ($5 is now).
const headReadySQL = `h.state=0 AND (h.expire_deadline=0 OR h.expire_deadline > $5)`

// groupFreeSQL is the condition that group grp of partition part has no
// leased item and is not held: two scalar subqueries, one index probe each
// (never EXISTS, which a generic plan may turn into a hash of every leased
// item of the queue). With headReadySQL it is what makes a group leasable,
// for the ordered lease (orderedRun) and for the count of leasable groups
// (leasableGroupsSQL) alike.
func groupFreeSQL(part, grp string) string {
	return `(SELECT true FROM styx_items l WHERE l.queue_id=$1 AND l.partition=` + part + ` AND l.grp=` + grp + ` AND l.state=1 LIMIT 1) IS NULL
			AND (SELECT true FROM styx_held_groups x WHERE x.queue_id=$1 AND x.partition=` + part + ` AND x.grp=` + grp + `) IS NULL`
}

// orderedRun is the items an ordered lease takes of the visited group v:
// none unless its head is ready, it has no leased item and it is not held;
// else the head, locked (SKIP LOCKED on its id: a head another transaction
// holds passes the group over), and the items after it in GroupSeq order
// while they are ready, at most $3. The checks are scalar subqueries (one
// index probe per group), never EXISTS, which a generic plan may turn into
// a hash of every leased item of the queue.
var orderedRun = `SELECT h.grp, r.id, r.seq FROM
		(SELECT id, grp, state, expire_deadline, ` + groupSeqSQL + ` AS seq FROM styx_items
			WHERE queue_id=$1 AND partition=$2 AND grp=v.grp ORDER BY ` + groupSeqSQL + ` LIMIT 1) h
		CROSS JOIN LATERAL (SELECT 1 FROM styx_items k WHERE k.queue_id=$1 AND k.id=h.id AND k.state=0 FOR UPDATE SKIP LOCKED) lk
		CROSS JOIN LATERAL (SELECT w.id, w.seq FROM (
			SELECT id, ` + groupSeqSQL + ` AS seq, bool_and(state=0 AND ` + notExpired + `) OVER (ORDER BY ` + groupSeqSQL + ` ROWS UNBOUNDED PRECEDING) AS run
			FROM styx_items WHERE queue_id=$1 AND partition=$2 AND grp=v.grp AND ` + groupSeqSQL + ` >= h.seq
			ORDER BY ` + groupSeqSQL + ` LIMIT $3) w WHERE w.run) r
		WHERE ` + headReadySQL + ` AND ` + groupFreeSQL("$2", "v.grp")

// leaseUpdate leases the items of the CTE take (the ctids of the rows it
// locked; an item leased for the first time takes $5, now, as its
// first_leased_at; $9 and $10 are the lease's holder, holderArgs), and returns each (scanLeasedKeys) with its order key: its
// GroupSeq, or its id when it has no group; and, last, how many items the
// CTE found held before the byte bound (more when take leased fewer). It
// finds the rows by ctid, as lease does and for the same reason: by
// (queue_id, id), a generic plan made while the queue's statistics said it
// was nearly empty read them through another index of the queue, every
// entry of it.
const leaseUpdate = leaseSet + `
		holder_client=$9::text, holder_key=$10::text
	FROM take WHERE t.ctid = take.ctid
	RETURNING t.id, coalesce(t.first_id, t.id), t.attempts, t.first_leased_at, t.reference, t.kind, t.encoding, t.payload, t.attributes,
		t.source_queue, coalesce(t.grp, ''), CASE WHEN t.grp IS NULL THEN t.id ELSE ` + groupSeqSQL + ` END, (SELECT count(*) FROM found)`

// itemSizeSQL is an item's bytes for the byte bound of a lease: its
// payload and attributes, from the row's TOAST pointers (octet_length does
// not read a value stored apart).
const itemSizeSQL = `octet_length(payload) + coalesce(octet_length(attributes), 0)`

// boundedTake is the CTE take of a group lease: of the CTE found (the
// items the lease locked and would lease: ctid, size, and the columns of
// order, the order in which the lease hands them out), those whose sizes
// sum, in that order, to at most $7 bytes (NULL: no bound), the first
// whatever its size when $8 (no item was leased before it in the
// iteration's lease). Every prefix of that order keeps the group rules: a
// group's run cut is a prefix of it (the group has an item leased, its
// items left wait), and the groups after the cut are not leased at all.
// The rows found and not taken stay locked until the iteration commits
// (another node's lease passes them, or their group).
func boundedTake(order string) string {
	return `SELECT ctid FROM (SELECT ctid, sum(size) OVER w AS upto, row_number() OVER w AS n FROM found
			WINDOW w AS (ORDER BY ` + order + ` ROWS UNBOUNDED PRECEDING)) b
		WHERE $7::bigint IS NULL OR b.upto <= $7::bigint OR ($8::boolean AND b.n = 1)`
}

// orderedLeaseSQL leases, on an ordered queue, up to $3 items of partition
// $2 until $4 (now $5, cursor $6, byte bound $7 and $8: boundedTake):
// group by group from the cursor (orderedRun), the items without a group
// taking their turn at the wrap (FIFO, locked SKIP LOCKED as the plain
// lease does), then every item of the pick locked SKIP LOCKED, a group's
// run cut at the first item not locked, and the whole cut at the byte
// bound in the order orderLeased hands the items out (visiting pass,
// group, GroupSeq).
var orderedLeaseSQL = `WITH RECURSIVE ` + groupsVisit + `,
	pick AS MATERIALIZED (
		(SELECT 1 AS pass, f.grp, f.id, f.seq FROM ga v CROSS JOIN LATERAL (` + orderedRun + `) f WHERE v.grp IS NOT NULL)
		UNION ALL
		(SELECT 2, NULL, u.id, 0 FROM (SELECT id FROM styx_items WHERE queue_id=$1 AND partition=$2 AND state=0 AND grp IS NULL
			AND ` + notExpired + ` ORDER BY id LIMIT $3 FOR UPDATE SKIP LOCKED) u)
		UNION ALL
		(SELECT 3, f.grp, f.id, f.seq FROM gb v CROSS JOIN LATERAL (` + orderedRun + `) f WHERE v.grp IS NOT NULL)
		LIMIT $3),
	locked AS MATERIALIZED (
		SELECT id, ctid, ` + itemSizeSQL + ` AS size FROM styx_items
		WHERE queue_id=$1 AND id = ANY(ARRAY(SELECT id FROM pick)) AND state=0 AND ` + notExpired + `
		FOR UPDATE SKIP LOCKED),
	found AS MATERIALIZED (
		SELECT ctid, size, pass, grp, seq, id FROM (
			SELECT p.id, p.grp, p.pass, p.seq, l.ctid, l.size, l.id IS NOT NULL AS got,
				bool_and(l.id IS NOT NULL) OVER (PARTITION BY p.pass, p.grp ORDER BY p.seq, p.id ROWS UNBOUNDED PRECEDING) AS run
			FROM pick p LEFT JOIN locked l ON l.id = p.id) x
		WHERE x.run OR (x.grp IS NULL AND x.got)),
	take AS (` + boundedTake("pass, grp, seq, id") + `)
	` + leaseUpdate

// fairLeaseSQL leases, on a queue that is not ordered, up to $3 items of
// partition $2 until $4 (now $5, cursor $6, byte bound $7 and $8:
// boundedTake): the first $3 groups visited from the cursor (the items
// without a group one of them, at the wrap), each read up to $3 - groups +
// 1 oldest ready items, dealt round-robin (rank in the group, then
// visiting order), locked SKIP LOCKED, and cut at the byte bound in that
// order.
var fairLeaseSQL = `WITH RECURSIVE ` + groupsVisit + `,
	keys AS MATERIALIZED (
		(SELECT 1 AS pass, grp FROM ga WHERE grp IS NOT NULL)
		UNION ALL
		(SELECT 2, NULL WHERE (SELECT true FROM styx_items WHERE queue_id=$1 AND partition=$2 AND state=0 AND grp IS NULL LIMIT 1))
		UNION ALL
		(SELECT 3, grp FROM gb WHERE grp IS NOT NULL)
		LIMIT $3),
	cand AS MATERIALIZED (
		SELECT k.pass, k.grp, c.id, row_number() OVER (PARTITION BY k.pass, k.grp ORDER BY c.id) AS rank FROM keys k CROSS JOIN LATERAL (
			(SELECT id FROM styx_items WHERE k.grp IS NOT NULL AND queue_id=$1 AND partition=$2 AND state=0 AND grp=k.grp AND ` + notExpired + `
				ORDER BY id LIMIT $3 - (SELECT count(*) FROM keys) + 1)
			UNION ALL
			(SELECT id FROM styx_items WHERE k.grp IS NULL AND queue_id=$1 AND partition=$2 AND state=0 AND grp IS NULL AND ` + notExpired + `
				ORDER BY id LIMIT $3 - (SELECT count(*) FROM keys) + 1)) c),
	pick AS MATERIALIZED (SELECT id, rank, pass, grp FROM cand ORDER BY rank, pass, grp LIMIT $3),
	locked AS MATERIALIZED (
		SELECT ctid, id, ` + itemSizeSQL + ` AS size FROM styx_items
		WHERE queue_id=$1 AND id = ANY(ARRAY(SELECT id FROM pick)) AND state=0 AND ` + notExpired + `
		FOR UPDATE SKIP LOCKED),
	found AS MATERIALIZED (SELECT l.ctid, l.size, p.rank, p.pass, p.grp, p.id FROM locked l JOIN pick p ON p.id = l.id),
	take AS (` + boundedTake("rank, pass, grp, id") + `)
	` + leaseUpdate

// leaseGroups leases up to n items of partition with the group rules:
// orderedLeaseSQL when ordered, else fairLeaseSQL, from the group after
// cursor (in the rotation). The items come in lease order (orderLeased).
// With maxBytes (0: none), the items' payloads and attributes take at most
// maxBytes - usedBytes (usedBytes: those of the items the same Tx.Lease
// took before, by the plain lease), and the first item whatever its size
// when first (none was taken before); more reports that the bound left
// items the lease would have taken. When the bound leaves all of them (not
// first), no row comes back to count them, and more is false: the next
// lease takes them.
func leaseGroups(ctx context.Context, tx pgx.Tx, queueID uint64, partition int32, n int, deadline, now int64, ordered bool,
	cursor string, maxBytes, usedBytes int64, first bool, h *queue.Holder) (items []queue.LeasedItem, more bool, err error) {
	client, key := holderArgs(h)
	sql := fairLeaseSQL
	if ordered {
		sql = orderedLeaseSQL
	}
	var left *int64 // NULL: no bound
	if maxBytes > 0 {
		left = new(maxBytes - usedBytes)
	}
	// The statement runs on its generic plan (onGenericPlan): planned
	// anew for each call (PostgreSQL's choice for it), its planning took
	// 1-3 ms, more than its execution, and the generic plan is the custom
	// plans' shape (the laterals fix it).
	var keys []int64
	var found int64
	err = onGenericPlan(ctx, tx, sql, []any{int64(queueID), partition, n, deadline, now, cursor, left, first, client, key},
		func(rows pgx.Rows, err error) error {
			items, keys, found, err = scanLeasedKeys(rows, err)
			return err
		})
	if err != nil {
		return nil, false, err
	}
	orderLeased(items, keys, cursor, ordered)
	return items, found > int64(len(items)), nil
}

// orderLeased sorts the items of a group lease (keys: each one's GroupSeq,
// or id without a group) in the order the lease took them: the groups in
// visiting order from cursor, each in GroupSeq order (ordered), or
// round-robin, the first of each group in visiting order, then the second
// of each, and so on (fair; within a group by id).
func orderLeased(items []queue.LeasedItem, keys []int64, cursor string, ordered bool) {
	type leased struct {
		it        queue.LeasedItem
		pos       int
		key, rank int64
	}
	xs := make([]leased, len(items))
	for i, item := range items {
		xs[i] = leased{it: item, pos: visitPos(cursor, item.Group), key: keys[i]}
		if !ordered {
			xs[i].key = int64(item.ID)
		}
	}
	byGroup := func(a, b leased) int {
		return cmp.Or(cmp.Compare(a.pos, b.pos), strings.Compare(a.it.Group, b.it.Group), cmp.Compare(a.key, b.key))
	}
	slices.SortFunc(xs, byGroup)
	if !ordered {
		for i := range xs {
			if i > 0 && xs[i].it.Group == xs[i-1].it.Group {
				xs[i].rank = xs[i-1].rank + 1
			}
		}
		slices.SortStableFunc(xs, func(a, b leased) int { return cmp.Compare(a.rank, b.rank) })
	}
	for i := range xs {
		items[i] = xs[i].it
	}
}

// visitPos is the pass in which a lease from cursor visits group g: 0 for
// the groups after the cursor, 1 for the items without a group, 2 for the
// groups up to the cursor (then by group within a pass).
func visitPos(cursor, g string) int {
	switch {
	case g == "":
		return 1
	case g > cursor:
		return 0
	}
	return 2
}

// nextCursor returns the rotation cursor after a lease from cursor that
// took items: the group (or "" for the items without one) last in the
// visiting order among those it took from.
func nextCursor(cursor string, items []queue.LeasedItem) string {
	best, bp := cursor, -1
	for _, item := range items {
		if p := visitPos(cursor, item.Group); p > bp || p == bp && item.Group > best {
			best, bp = item.Group, p
		}
	}
	return best
}

// heldGroup is a dead item that holds its group (holdGroups).
type heldGroup struct {
	partition int32
	group     string
	deadKey   string
	seq       int64
}

// holdGroups records groups held by dead items of queue queueID that went
// to dead-letter queue dlqID, at now; a group held already keeps its
// record (the first dead item holds it).
func holdGroups(ctx context.Context, tx pgx.Tx, queueID, dlqID uint64, hs []heldGroup, now int64) error {
	n := len(hs)
	parts, groups, keys, seqs := make([]int32, n), make([]string, n), make([]string, n), make([]int64, n)
	for i, h := range hs {
		parts[i], groups[i], keys[i], seqs[i] = h.partition, h.group, h.deadKey, h.seq
	}
	_, err := tx.Exec(ctx, `INSERT INTO styx_held_groups (queue_id, partition, grp, dead_queue_id, dead_key, seq, held_at)
		SELECT $1, u.part, u.grp, $2, u.key, u.seq, $7 FROM unnest($3::integer[], $4::text[], $5::text[], $6::bigint[]) AS u(part, grp, key, seq)
		ON CONFLICT (queue_id, partition, grp) DO NOTHING`, int64(queueID), int64(dlqID), parts, groups, keys, seqs, now)
	return err
}

// heldRelease names a held group and the dead key that releases it.
type heldRelease struct{ group, deadKey string }

// releaseHeld deletes the held records of a partition's groups that are
// held by the given dead keys (groups[i] by deadKeys[i]: the redriven copy
// of that dead item arrived) and returns each released group's seq; a
// group held by another dead item stays held.
func releaseHeld(ctx context.Context, tx pgx.Tx, queueID uint64, partition int32, groups, deadKeys []string) (map[heldRelease]int64, error) {
	rows, err := tx.Query(ctx, `DELETE FROM styx_held_groups h USING unnest($3::text[], $4::text[]) AS u(grp, dead_key)
		WHERE h.queue_id=$1 AND h.partition=$2 AND h.grp = u.grp AND h.dead_key = u.dead_key RETURNING h.grp, h.dead_key, h.seq`,
		int64(queueID), partition, groups, deadKeys)
	if err != nil {
		return nil, err
	}
	out := map[heldRelease]int64{}
	var g, k string
	var seq int64
	_, err = pgx.ForEachRow(rows, []any{&g, &k, &seq}, func() error {
		out[heldRelease{g, k}] = seq
		return nil
	})
	return out, err
}

// releaseGone deletes, in one statement, the held records of a queue whose
// dead item's source key its dead-letter queue no longer holds (rule
// 5(b)), passing over records another transaction holds (a redrive
// releasing them), and returns how many it released and how many are left.
func releaseGone(ctx context.Context, tx pgx.Tx, queueID uint64) (released, left int64, err error) {
	err = tx.QueryRow(ctx, `WITH gone AS MATERIALIZED (
			SELECT partition, grp FROM styx_held_groups h WHERE h.queue_id=$1
				AND NOT EXISTS (SELECT 1 FROM styx_items i WHERE i.queue_id=h.dead_queue_id AND i.source_key=h.dead_key)
			FOR UPDATE SKIP LOCKED),
		d AS (DELETE FROM styx_held_groups h USING gone WHERE h.queue_id=$1 AND h.partition=gone.partition AND h.grp=gone.grp RETURNING 1)
		SELECT (SELECT count(*) FROM d), (SELECT count(*) FROM styx_held_groups WHERE queue_id=$1)`, int64(queueID)).Scan(&released, &left)
	return released, left - released, err
}

// heldStats returns the first queue.MaxHeldGroupsListed held groups of a
// queue, oldest first, and how many it holds.
func heldStats(ctx context.Context, q querier, queueID uint64) ([]queue.HeldGroup, int, error) {
	rows, err := q.Query(ctx, `SELECT partition, grp, dead_key, seq, held_at, count(*) OVER () FROM styx_held_groups
		WHERE queue_id=$1 ORDER BY held_at, partition, grp LIMIT $2`, int64(queueID), queue.MaxHeldGroupsListed)
	if err != nil {
		return nil, 0, err
	}
	var out []queue.HeldGroup
	var total int64
	var h queue.HeldGroup
	var seq int64
	_, err = pgx.ForEachRow(rows, []any{&h.Partition, &h.Group, &h.DeadKey, &seq, &h.HeldAt, &total}, func() error {
		h.Seq = uint64(seq)
		out = append(out, h)
		return nil
	})
	if err != nil {
		return nil, 0, err
	}
	if len(out) == 0 {
		total = 0
	}
	return out, int(total), nil
}

// leasableGroupsSQL is the WITH RECURSIVE part of readyCounts on an
// ordered queue: g(p, grp, n) walks, per partition p of $2, the groups
// with ready items (a loose index scan) and counts in n those a lease may
// take (headReadySQL and groupFreeSQL, now $5), stopping at $4; a
// partition's count is its largest n.
var leasableGroupsSQL = `WITH RECURSIVE g(p, grp, n) AS (
		SELECT p, (SELECT grp FROM styx_items WHERE queue_id=$1 AND partition=p AND state=0 AND grp > '' ORDER BY grp LIMIT 1), 0
		FROM generate_series(0, $2::integer - 1) AS p
		UNION ALL
		SELECT g.p, (SELECT i.grp FROM styx_items i WHERE i.queue_id=$1 AND i.partition=g.p AND i.state=0 AND i.grp > g.grp ORDER BY i.grp LIMIT 1),
			g.n + CASE WHEN EXISTS (SELECT 1 FROM (SELECT state, expire_deadline FROM styx_items WHERE queue_id=$1 AND partition=g.p AND grp=g.grp
					ORDER BY ` + groupSeqSQL + ` LIMIT 1) h WHERE ` + headReadySQL + `)
				AND ` + groupFreeSQL("g.p", "g.grp") + `
				THEN 1 ELSE 0 END
		FROM g WHERE g.grp IS NOT NULL AND g.n < $4)`

// wrapGroups names the group statements' errors.
func wrapGroups(op string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %w", op, err)
}

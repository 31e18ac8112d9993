package postgres

import (
	"cmp"
	"context"
	"errors"
	"iter"
	"slices"
	"sort"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/styxq/styx/internal/apierr"
	"github.com/styxq/styx/internal/engine"
	"github.com/styxq/styx/internal/queue"
)

const (
	// pollInterval is how often a loop with waiting leases looks for items
	// without being told of any: a safety net for notifications lost while
	// a node's LISTEN connection reconnects, not the wake-up path.
	pollInterval = time.Second
	// busyBackoff is how long a loop waits before retrying lifecycle work
	// that another node holds locked.
	busyBackoff = 50 * time.Millisecond
)

// Queue is one queue as served by this node: the engine.Backend of its
// engine.Loop, which runs the requests arriving together, with due
// lifecycle work and the waiting leases it can serve, as one transaction. Other nodes
// run their own loop for the same queue; PostgreSQL arbitrates. Methods may
// be called from any goroutine; they implement queue.Queue with the
// semantics documented on engine.Engine and queue.Queue, except that Reload has nothing to
// reload and Stats counts the waiting leases of this node only.
type Queue struct {
	m    *Manager
	name string
	id   uint64
	// Engine runs the requests (the same on every backend); the queue
	// gives each of its iterations a transaction (tx.go).
	*engine.Engine

	// The loop is woken (signal) when items may have become ready
	// (readyHint) or lifecycle work may be due (dueHint).
	readyHint atomic.Bool
	dueHint   atomic.Int64

	// Owned by the loop.
	// joined is the count of leases that had joined the waiters when the
	// loop last looked: a new one makes the iteration serve.
	joined uint64
	// deadNext is the tie-break cursor of this queue's dead-letter moves
	// (deadPartitions): the dead-letter queue partition after the one the
	// last dead item of this queue went to on this node. It is this
	// queue's, not the dead-letter queue's (whose loop takes no part in a
	// move here), so equals take turns per source queue and node.
	deadNext int
	// dedupSwept is when this node last deleted the queue's ended
	// deduplication windows (Unix ns; dedup.go).
	dedupSwept int64
	// nextDue is the earliest known lifecycle time (Unix ns, 0: none).
	nextDue  int64
	lastPoll int64
	// Item groups (itemgroups.go). grouped marks the partitions leased by
	// the group rules on a queue that is not ordered (it holds grouped
	// items, as far as this node knows); groupLook is when this node last
	// looked for grouped items it did not know of, per partition (-1: the
	// counts of every partition); groupCursor is, per partition, the group
	// the last lease took from (the rotation's cursor).
	grouped     map[int32]bool
	groupLook   map[int32]int64
	groupCursor map[int32]string
	// heldNext is when to check next whether the queue's held groups'
	// dead items are still in the dead-letter queue (Unix ns, 0: none
	// known), heldChecked when it was last done; heldHint says another
	// node may have held groups (the manager's reload saw some).
	heldNext, heldChecked int64
	heldHint              atomic.Bool
	// open is the iteration Begin started, until its Commit (Recover rolls
	// it back after a panic).
	open *iteration
	// dyingHint says the lifecycle found an item due that it could not
	// end: perhaps a dying item left by a node with two-phase moves, which
	// the next lifecycle then claims (claimDying) even on a Manager that
	// makes none.
	dyingHint bool
}

func newQueue(m *Manager, info queue.QueueInfo) *Queue {
	q := &Queue{m: m, name: info.Name, id: info.ID, grouped: map[int32]bool{}, groupLook: map[int32]int64{}, groupCursor: map[int32]string{}}
	q.Engine = engine.NewEngine(info.Name, m.cfg.Clock, m.cfg.Metrics)
	q.Reads = reads{q}
	q.Loop.Log = m.cfg.Log
	// Lifecycle work may be due from before this node started.
	q.nextDue = 1
	q.Loop.Start(q)
	return q
}

// signal wakes the loop: ready says items may be ready, due (Unix ns, 0:
// none) that lifecycle work is due then.
func (q *Queue) signal(ready bool, due int64) {
	if ready {
		q.readyHint.Store(true)
	}
	if due != 0 {
		for {
			old := q.dueHint.Load()
			if (old != 0 && old <= due) || q.dueHint.CompareAndSwap(old, due) {
				break
			}
		}
	}
	q.Loop.Wake()
}

// Reload implements engine.Tx: the database is the state, so there is
// nothing to rebuild; it checks that the queue still exists.
func (it *iteration) Reload(done func(error)) {
	_, err := it.q.m.Info(it.ctx, it.q.name)
	done(err)
}

// Open is a no-op: the database is the state (engine.Backend).
func (q *Queue) Open() {}

// Stopped is a no-op: every request is answered in its iteration
// (engine.Backend).
func (q *Queue) Stopped() {}

// Recover answers err to the requests of a panicked iteration not answered
// yet and to the waiting leases (engine.Backend). The database is the
// state and the iteration's transaction is rolled back here, so nothing is
// rebuilt: the lifecycle runs again at the next iteration.
func (q *Queue) Recover(reqs []*engine.Request, err error) {
	if it := q.open; it != nil {
		// Nothing of the iteration is committed (or all of it was).
		q.open = nil
		q.rollback(it.tx)
		it.cancel()
	}
	for _, r := range reqs {
		r.Answer(err)
	}
	q.Loop.Waiters.Fail(err)
	q.nextDue = 1
}

// NextWake returns when the lifecycle is next due, and while leases wait,
// when to look for items without a hint (engine.Backend).
func (q *Queue) NextWake(int64) int64 {
	next := q.nextDue
	if q.Loop.Waiters.Len() > 0 {
		next = engine.Earliest(next, q.lastPoll+int64(pollInterval))
	}
	return next
}

// Begin starts one loop iteration (engine.Backend) as one transaction: poll
// says the timer fired (look for items for the waiting leases even without
// a hint). An iteration with no request, no lifecycle work due and nothing
// new for the waiting leases runs no transaction (a nil Tx).
func (q *Queue) Begin(now int64, work []*engine.Request, poll bool) (engine.Tx, []*engine.Request, bool) {
	info, ok := q.m.cachedInfo(q.id)
	if !ok {
		for _, r := range work {
			r.Answer(queue.NotFound(q.name))
		}
		q.Loop.Waiters.Fail(queue.NotFound(q.name))
		return nil, nil, false
	}
	serve := poll || q.readyHint.Swap(false)
	if j := q.Loop.Waiters.Joined(); j != q.joined {
		serve, q.joined = true, j
	}
	if info.Paused() {
		// A paused queue hands out nothing (the engine skips its waiting
		// leases): no transaction for them alone. Its resume signals the
		// loop (Manager.resumed), and the poll looks again anyway.
		serve = false
	}
	if due := q.dueHint.Swap(0); due != 0 {
		q.nextDue = engine.Earliest(q.nextDue, due)
	}
	if q.heldHint.Swap(false) && q.heldNext == 0 {
		q.heldNext = max(now, q.heldChecked+int64(heldCheckEvery))
		q.nextDue = engine.Earliest(q.nextDue, q.heldNext)
	}
	lifecycle := q.nextDue != 0 && q.nextDue <= now
	if len(work) == 0 && !lifecycle && !(serve && q.Loop.Waiters.Len() > 0) {
		return nil, nil, false
	}
	// The iteration's statements, its commit included, run under the
	// statement timeout, widened by ItemAllowance per item its requests
	// carry (a 10,000-item import is slow work, not a stalled database),
	// and end with the loop. A commit cut short by it is answered an
	// error, never success: its outcome is unknown (the client retries;
	// at-least-once), and nothing acknowledged is lost.
	bound := q.m.cfg.StatementTimeout
	for _, r := range work {
		bound += time.Duration(r.Items()) * ItemAllowance
	}
	ctx, cancel := context.WithTimeout(q.Loop.Context(), bound)
	tx, err := beginPipelined(ctx, q.m.st.pool)
	if err == nil && !skipFenceCheck.Load() {
		tx.fence = q.id // the iteration's first statement (fence.go)
	}
	if err != nil {
		cancel()
		err = wrap("queue '"+q.name+"'", err)
		for _, r := range work {
			r.Answer(err)
		}
		q.Loop.Waiters.Fail(err)
		return nil, nil, false
	}
	if q.Loop.Waiters.Len() > 0 {
		q.lastPoll = now
	}
	q.open = &iteration{q: q, ctx: ctx, cancel: cancel, tx: tx, ptx: tx, now: now, info: info, lifecycle: lifecycle, rows: map[int64]row{}}
	return q.open, work, lifecycle
}

// rollback ends tx, waiting at most the statement timeout: it runs once the
// iteration failed, perhaps because its own context ended, and must not hold
// the loop on a connection that no longer answers (pgx then closes it).
func (q *Queue) rollback(tx pgx.Tx) {
	ctx, cancel := context.WithTimeout(context.Background(), q.m.cfg.StatementTimeout)
	defer cancel()
	_ = tx.Rollback(ctx)
}

// learnDue sets when the lifecycle is next due, once the iteration's
// changes are written (so the statement sees them). An item that is due
// already is held by another node's transaction: look again shortly.
func (q *Queue) learnDue(ctx context.Context, tx pgx.Tx, it *iteration) error {
	if it.more {
		q.nextDue = it.now // more is due: run again at once
		return nil
	}
	next, err := nextDue(ctx, tx, q.id)
	if err != nil {
		return err
	}
	if next != 0 && next <= it.now {
		next = it.now + int64(busyBackoff)
		q.dyingHint = true
	}
	q.nextDue = engine.Earliest(next, q.heldNext)
	return nil
}

// Lock order. Two nodes run transactions on the same rows, so a
// transaction must never wait for a row lock while it holds one that the
// other may wait for. An iteration therefore waits in one statement only,
// its first (Lock): it locks every row its requests name (complete, retry,
// renew, delete) or select (clear), in id order, so two such statements never wait
// for each other in a cycle. Everything after it either skips rows other
// transactions hold (the lifecycle, leases, clear: SKIP LOCKED) or touches
// rows it holds already or created itself. The one exception is an insert
// whose source key another transaction has just inserted and not yet
// committed (a dead-letter move, a redrive, an import with a source_id):
// PostgreSQL makes it wait for that transaction on the unique index. Such
// a wait holds no row lock the other may want; an import inserts in key
// order, so two imports of the same keys wait in one order (two
// iterations that insert the same keys in different statements could
// still wait in a cycle, which PostgreSQL breaks by failing one with
// 40P01; it needs concurrent imports that repeat source_ids). The lifecycle
// runs after the lock: a lease that expired by the time its complete
// arrives is refused (leased) and then ended by the lifecycle, in the same
// transaction.
// The item-count triggers (counts.go) that every item statement fires
// write only the counts rows of the transaction's own backend, which no
// other live transaction writes, so they never wait either.

// deadPartitions returns the dead-letter queue partition of each item of a
// move (ds), in the order they are placed: the produce rule item by item
// (docs/ARCHITECTURE.md "Partitions"), the same as the embedded engine's.
// An item with a group goes to its group's partition
// (queue.GroupPartition), so that an ordered dead-letter queue keeps the
// group's order; each other item goes to the partition with the fewest ready items
// (engine.FewestReady), counting the items placed before it in the same
// move, ties to the first partition at or after deadNext, which moves past
// each partition chosen. The counts are the dead-letter queue's as this
// transaction sees them (readyCounts: capped at readyCountCap, a plain read
// that takes no row lock, so the lock order holds); moves and produces of
// other transactions in flight are not seen.
func (q *Queue) deadPartitions(ctx context.Context, tx pgx.Tx, dlqID uint64, partitions int32, ds []death) ([]int32, error) {
	ready, _, err := readyCounts(ctx, tx, dlqID, partitions, countAll, 0)
	if err != nil {
		return nil, err
	}
	groups := make([]string, len(ds))
	for i, d := range ds {
		groups[i] = d.group
	}
	return placeDead(ready, partitions, groups, &q.deadNext), nil
}

// placeDead returns the dead-letter queue partition of each of a move's
// items, whose groups are groups ("" for none), given the partitions'
// ready counts (changed as items are placed) and the tie-break cursor
// next (deadPartitions).
func placeDead(ready []int, partitions int32, groups []string, next *int) []int32 {
	parts := make([]int32, len(groups))
	for i, g := range groups {
		if g != "" {
			p := queue.GroupPartition(g, partitions)
			ready[p]++
			parts[i] = p
			continue
		}
		p := engine.FewestReady(ready, *next)
		ready[p]++
		*next = p + 1
		parts[i] = int32(p)
	}
	return parts
}

// place stores the engine's decision for a new item: scheduled at enqueueAt
// when it is set (Unix ns), ready otherwise, expiring at expire (0: never);
// and the lifecycle's next due time and the waiting leases learn of it.
func (q *Queue) place(it *iteration, in *insert, enqueueAt, expire int64) {
	if enqueueAt != 0 {
		in.state, in.deadline = stateScheduled, enqueueAt
		q.nextDue = engine.Earliest(q.nextDue, enqueueAt)
	} else {
		it.wakeQueue(q.id)
	}
	in.expire = expire
	q.nextDue = engine.Earliest(q.nextDue, in.expire)
}

// bury moves dead items to the dead-letter queue, or drops them when the
// queue has none (or is itself a dead-letter queue whose retention ended).
func (q *Queue) bury(ctx context.Context, tx pgx.Tx, it *iteration, ds []death) error {
	reasons := map[string]int{}
	var attempts []int32
	for _, d := range ds {
		reasons[d.reason]++
		attempts = append(attempts, d.attempts)
	}
	if it.info.DeadQueue == "" {
		ids := make([]int64, len(ds))
		for i, d := range ds {
			ids[i] = d.id
		}
		if _, err := deleteIDs(ctx, tx, q.id, ids); err != nil {
			return err
		}
		dropped := slices.Clone(ds)
		it.metrics = append(it.metrics, func() {
			for _, d := range dropped {
				msg := "dead item dropped: the queue has no dead_queue"
				if queue.IsDeadCopyKey(d.sourceKey) {
					msg = "dead item dropped: its retention in the dead-letter queue ended"
				}
				q.m.cfg.Log.Warn(msg, "queue", q.name, "id", queue.FormatID(uint64(d.id)), "reason", d.reason, "attempts", d.attempts)
				q.m.cfg.Metrics.ItemsDropped.WithLabelValues(q.name, d.reason).Inc()
				q.m.cfg.Metrics.ItemAttempts.WithLabelValues("dropped").Observe(float64(d.attempts))
			}
		})
		return nil
	}
	to, ok := q.m.cachedInfoByName(it.info.DeadQueue)
	if !ok {
		// Created on another node and not yet heard of here: read it in
		// this transaction (a plain read, no lock) and serve it from now on.
		info, err := scanQueue(tx.QueryRow(ctx, `SELECT `+queueColumns+` FROM styx_queues WHERE name=$1`, it.info.DeadQueue))
		if errors.Is(err, pgx.ErrNoRows) {
			return apierr.New(apierr.Retry, "dead-letter queue '%s' of queue '%s' not found; retry", it.info.DeadQueue, q.name)
		}
		if err != nil {
			return err
		}
		if _, err := q.m.adopt(info); err != nil {
			return err
		}
		to = info
	}
	// Placed and numbered in id order, the order the dead-letter queue's new
	// ids follow (moveDead).
	ds = slices.Clone(ds)
	slices.SortFunc(ds, func(a, b death) int { return cmp.Compare(a.id, b.id) })
	parts, err := q.deadPartitions(ctx, tx, to.ID, max(to.Partitions, 1), ds)
	if err != nil {
		return err
	}
	// A dead-letter queue that is moving takes no item: the iteration
	// fails (453 queue moving, naming it) and nothing moves (fence.go).
	if _, err := tx.Exec(ctx, checkFenceSQL, int64(to.ID)); err != nil {
		return err
	}
	arrived, err := moveDead(ctx, tx, q.id, q.name, dlq{id: to.ID, name: to.Name, expire: int64(to.ExpireTimeout)}, ds, parts, it.now)
	if err != nil {
		return err
	}
	if err := q.holdGroups(ctx, tx, it, to.ID, ds); err != nil {
		return err
	}
	it.wakeQueue(to.ID)
	it.metrics = append(it.metrics, func() {
		for reason, n := range reasons {
			q.m.cfg.Metrics.DeadLettered.WithLabelValues(q.name, to.Name, reason).Add(float64(n))
		}
		arrived.Report(q.m.cfg.Metrics, q.name, to.Name)
		for _, a := range attempts {
			q.m.cfg.Metrics.ItemAttempts.WithLabelValues("dead_lettered").Observe(float64(a))
		}
		if to.ExpireTimeout > 0 {
			q.m.signalQueue(to.ID, false, it.now+int64(to.ExpireTimeout))
		}
	})
	return nil
}

// holdGroups holds the groups of dead items ds that went to dead-letter
// queue dlqID, when the queue is ordered with GroupHold (rule 5), and has
// the lifecycle check them within a second.
func (q *Queue) holdGroups(ctx context.Context, tx pgx.Tx, it *iteration, dlqID uint64, ds []death) error {
	if !it.info.Ordered || it.info.GroupDeadPolicy != queue.GroupHold {
		return nil
	}
	var hs []heldGroup
	for _, d := range ds {
		if d.group != "" {
			hs = append(hs, heldGroup{partition: d.partition, group: d.group, deadKey: queue.SourceKey(d.reason, q.name, uint64(d.id)), seq: d.seq})
		}
	}
	if len(hs) == 0 {
		return nil
	}
	if err := holdGroups(ctx, tx, q.id, dlqID, hs, it.now); err != nil {
		return wrapGroups("hold groups", err)
	}
	if q.heldNext == 0 {
		q.heldNext = it.now + int64(heldCheckEvery)
		q.nextDue = engine.Earliest(q.nextDue, q.heldNext)
	}
	return nil
}

// Stats implements engine.Tx from the database, in the iteration's
// transaction after its writes so far (stats).
func (it *iteration) Stats() (queue.Stats, error) {
	if err := it.flush(); err != nil {
		return queue.Stats{}, err
	}
	return it.q.stats(it.ctx, it.tx, it.info, it.now)
}

// stats describes the queue of info from db at now (Unix ns); the engine
// adds LeaseWaiting (this node's waiting leases only). Dying counts the
// items of two-phase moves not done yet (deadletters.go); MovesInFlight
// stays 0.
// It reads no item but the oldest (one probe of styx_items_created): the
// counts and sums are those the counts trigger keeps (migration 12,
// counts.go), summed over their shards, so a call costs O(partitions ×
// shards + dead reasons × source queues). The averages are computed as
// PostgreSQL's avg over the items did before (a numeric division rounded to
// the nanosecond), so the answer is the same.
func (q *Queue) stats(ctx context.Context, db querier, info queue.QueueInfo, now int64) (queue.Stats, error) {
	s := queue.Stats{DeadByReason: map[string]int{}, DeadBySource: map[string]int{}}
	s.Partitions = make([]queue.PartitionStats, info.Partitions)
	for i := range s.Partitions {
		s.Partitions[i].Partition = int32(i)
	}
	rows, err := db.Query(ctx, `SELECT partition, total::bigint, leased::bigint, scheduled::bigint, dying::bigint, failures::bigint,
		CASE WHEN total > 0 THEN ((total * $2::numeric - created_sum) / total)::bigint ELSE 0 END,
		CASE WHEN leased > 0 THEN ((leased * ($2::numeric + $3) - deadline_sum) / leased)::bigint ELSE 0 END,
		coalesce((SELECT min(created_at) FROM styx_items WHERE queue_id=$1), 0)
		FROM (SELECT partition, sum(total) AS total, sum(leased) AS leased, sum(scheduled) AS scheduled, sum(dying) AS dying,
			sum(failures) AS failures,
			sum(created_sum) AS created_sum, sum(deadline_sum) AS deadline_sum
			FROM styx_partition_counts WHERE queue_id=$1 GROUP BY partition) c`, int64(info.ID), now, int64(info.LeaseTimeout))
	if err != nil {
		return s, wrap("stats", err)
	}
	var oldest int64
	for rows.Next() {
		var p int32
		var total, leasedN, sched, dying, failures, age, leasedAge int64
		if err := rows.Scan(&p, &total, &leasedN, &sched, &dying, &failures, &age, &leasedAge, &oldest); err != nil {
			rows.Close()
			return s, wrap("stats", err)
		}
		if p < 0 || p >= info.Partitions {
			continue
		}
		s.Partitions[p] = queue.PartitionStats{Partition: p, Total: int(total), Leased: int(leasedN), Scheduled: int(sched), Dying: int(dying),
			Failures: int(failures), AverageAge: time.Duration(age), AverageLeasedAge: time.Duration(leasedAge)}
	}
	if err := rows.Err(); err != nil {
		return s, wrap("stats", err)
	}
	s.Oldest = queue.FromNanos(oldest)
	if !s.Oldest.IsZero() {
		s.Oldest = s.Oldest.Local()
	}
	rows, err = db.Query(ctx, `SELECT reason, source_queue, sum(count)::bigint FROM styx_dead_counts
		WHERE queue_id=$1 GROUP BY 1, 2 HAVING sum(count) <> 0`, int64(info.ID))
	if err != nil {
		return s, wrap("stats", err)
	}
	for rows.Next() {
		var reason, src string
		var n int64
		if err := rows.Scan(&reason, &src, &n); err != nil {
			rows.Close()
			return s, wrap("stats", err)
		}
		s.DeadByReason[reason] += int(n)
		s.DeadBySource[src] += int(n)
	}
	if err := rows.Err(); err != nil {
		return s, wrap("stats", err)
	}
	if s.ExpiringWithinDay, err = expiringWithin(ctx, db, info.ID, s.DeadByReason, now); err != nil {
		return s, wrap("stats", err)
	}
	s.HeldGroups, s.HeldTotal, err = heldStats(ctx, db, info.ID)
	return s, wrap("stats", err)
}

// Scheduled implements engine.Tx: a page of the partition's scheduled
// items, in the iteration's transaction after its writes so far (page).
func (it *iteration) Scheduled(p queue.ListParams) ([]queue.Item, error) {
	if err := it.flush(); err != nil {
		return nil, err
	}
	return it.q.page(it.ctx, it.tx, p, `state=2`)
}

// reads is the queue's read half (engine.Reads): straight from the
// database, each call a committed snapshot.
type reads struct{ q *Queue }

// Page implements engine.Reads (page).
func (r reads) Page(ctx context.Context, p queue.ListParams) ([]queue.Item, error) {
	return r.q.page(ctx, r.q.m.st.pool, p, `state<>2`)
}

// page reads from db a page of partition p.Partition's items in state
// (an SQL condition) in one statement bounded by the page's bytes
// (readWithin).
func (q *Queue) page(ctx context.Context, db querier, p queue.ListParams, state string) ([]queue.Item, error) {
	items, err := q.readWithin(ctx, db, `queue_id=$1 AND partition=$2 AND `+state+` AND id>$3`,
		[]any{int64(q.id), p.Partition, int64(p.After)}, p.Limit, p.MaxBytes)
	if err != nil {
		return nil, q.readErr(err)
	}
	page := queue.Page{MaxBytes: p.MaxBytes}
	for i := range items {
		if !page.Take(&items[i]) {
			clear(items[i:]) // the item past the page: let it go
			return items[:i], nil
		}
	}
	return items, nil
}

// sizeSQL is an item's size as queue.ItemBytes counts it, less the error
// texts of its attempt history (the jsonb column errors): never more than
// ItemBytes, so a statement bounded by it keeps every row that a bound on
// ItemBytes keeps.
const sizeSQL = `(octet_length(payload) + coalesce(octet_length(attributes), 0) + octet_length(reference) +
	octet_length(kind) + octet_length(encoding) + octet_length(source_queue) + octet_length(source_id) +
	octet_length(last_error))`

// readWithin reads, in id order, at most limit of the items that where
// selects (its parameters are args), stopping after the one that brings
// their total queue.ItemBytes to maxBytes or more (maxBytes <= 0: no
// bound), as store.Store.ListItemsWithin does: at least one item when there
// is one, and fewer than limit totalling less than maxBytes when none is
// left. The statement leaves out the rows past the one that brings sizeSQL
// to maxBytes, so the database sends no payload past it; the rows kept are
// read one at a time and the reading stops at maxBytes of ItemBytes, which
// counts the attempt histories too.
func (q *Queue) readWithin(ctx context.Context, db querier, where string, args []any, limit, maxBytes int) ([]queue.Item, error) {
	return q.readWithinBy(ctx, db, where, "id", args, limit, maxBytes)
}

// readWithinBy is readWithin in the order of the SQL expression order
// (of styx_items' columns; "id" for readWithin), which the read returns
// as the item's last column (a key such as byIDKeySQL).
func (q *Queue) readWithinBy(ctx context.Context, db querier, where, order string, args []any, limit, maxBytes int) ([]queue.Item, error) {
	n := len(args)
	sql := `SELECT ` + itemColumns + ` FROM styx_items WHERE ` + where + ` ORDER BY ` + order + ` LIMIT $` + strconv.Itoa(n+1)
	args = append(args, limit)
	if maxBytes > 0 {
		sql = `SELECT ` + itemColumns + ` FROM (SELECT *, ` + order + ` AS styx_order, sum(` + sizeSQL + `) OVER (ORDER BY ` + order + ` ROWS UNBOUNDED PRECEDING) - ` +
			sizeSQL + ` AS styx_before FROM styx_items WHERE ` + where + ` ORDER BY ` + order + ` LIMIT $` + strconv.Itoa(n+1) +
			`) page WHERE styx_before < $` + strconv.Itoa(n+2) + ` ORDER BY styx_order`
		args = append(args, int64(maxBytes))
	}
	rows, err := db.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var items []queue.Item
	size := 0
	for rows.Next() {
		item, err := scanItem(rows)
		if err != nil {
			return nil, err
		}
		items = append(items, item)
		if size += queue.ItemBytes(&item); maxBytes > 0 && size >= maxBytes {
			break
		}
	}
	return items, rows.Err()
}

// itemsBytes is the total queue.ItemBytes of items.
func itemsBytes(items []queue.Item) int {
	n := 0
	for i := range items {
		n += queue.ItemBytes(&items[i])
	}
	return n
}

// Scan reads the queue's items scanChunk rows and at most scanBytes (plus
// one item) per statement.
const (
	scanChunk = 500
	scanBytes = 16 << 20
)

// Scan implements engine.Reads (queue.Scan) from the database: the queue's
// items in id order across partitions, each statement bounded by scanChunk
// rows and scanBytes (readWithin), so a scan holds at most about scanBytes
// of items read ahead, whatever their payloads.
func (r reads) Scan(ctx context.Context, _ int32, f *queue.DeadFilter, p queue.ScanParams) ([]queue.Item, uint64, error) {
	q := r.q
	return queue.Scan(f, p, func(ids []uint64) iter.Seq2[queue.Item, error] {
		return func(yield func(queue.Item, error) bool) {
			ids64 := make([]int64, len(ids)) // ascending (queue.Scan)
			for i, id := range ids {
				ids64[i] = int64(id)
			}
			// An id names an item by its current id or its first id (ADR
			// 0031); the items come in the order of the ids that name
			// them (byIDKeySQL).
			for len(ids64) > 0 {
				got, err := q.readWithinBy(ctx, q.m.st.pool, `queue_id=$1 AND (id = ANY($2) OR first_id = ANY($2))`, byIDKeySQL,
					[]any{int64(q.id), ids64}, 2*len(ids64), scanBytes)
				if !yieldAll(yield, got, q.readErr(err)) || len(got) == 0 || itemsBytes(got) < scanBytes {
					return
				}
				m := got[len(got)-1].Meta
				last := int64(m.ID)
				if !slices.Contains(ids64, last) {
					last = int64(m.FirstID())
				}
				ids64 = ids64[sort.Search(len(ids64), func(i int) bool { return ids64[i] > last }):]
			}
		}
	}, func(after uint64) iter.Seq2[queue.Item, error] {
		return func(yield func(queue.Item, error) bool) {
			for {
				got, err := q.readWithin(ctx, q.m.st.pool, `queue_id=$1 AND id>$2`, []any{int64(q.id), int64(after)}, scanChunk, scanBytes)
				if !yieldAll(yield, got, q.readErr(err)) || len(got) < scanChunk && itemsBytes(got) < scanBytes {
					return
				}
				after = got[len(got)-1].Meta.ID
			}
		}
	})
}

// byIDKeySQL orders the items a Scan by ids reads by the id ($2) that
// names each: its current id when given, else its first id.
const byIDKeySQL = `(CASE WHEN id = ANY($2) THEN id ELSE first_id END)`

// yieldAll yields err alone, or else every item; it reports whether to go
// on.
func yieldAll(yield func(queue.Item, error) bool, items []queue.Item, err error) bool {
	if err != nil {
		yield(queue.Item{}, err)
		return false
	}
	for _, item := range items {
		if !yield(item, nil) {
			return false
		}
	}
	return true
}

func (q *Queue) readErr(err error) error {
	if err == nil {
		return nil
	}
	return wrap("queue '"+q.name+"'", err)
}

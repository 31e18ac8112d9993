package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"

	"github.com/jackc/pgx/v5"

	"github.com/styxq/styx/internal/engine"
	"github.com/styxq/styx/internal/queue"
	"github.com/styxq/styx/internal/store"
)

// The PostgreSQL Tx: one transaction per loop iteration. Changes the
// engine decides are gathered (inserts, completes, requeues, deaths) and
// written in bulk statements before anything reads the queue again (flush),
// and at Commit.

// iteration is the work of one loop iteration, applied in one transaction:
// the engine.Tx of PostgreSQL.
type iteration struct {
	q   *Queue
	ctx context.Context
	// cancel ends ctx (the statement timeout) once the iteration ends.
	cancel context.CancelFunc
	tx     pgx.Tx
	// ptx is tx, whose writes Commit defers to its COMMIT.
	ptx       *pipelinedTx
	now       int64
	info      queue.QueueInfo
	lifecycle bool
	// rows are the rows Lock locked, by id; an item ended earlier in the
	// iteration leaves.
	rows map[int64]row
	// Changes gathered, written by flush.
	inserts   []insert
	completed []int64
	requeues  []requeue
	// newIDs are where to write the new ids of requeues that need them
	// now (a retry's outcomes): requeues[i] for each index.
	newIDs []newID
	deaths []death
	// dyings are the deaths of two-phase moves (deadletters.go), written
	// by flush (markDying), and moves the deliveries the iteration's
	// commit starts (markDying, claimDying).
	dyings []death
	moves  []*deadMove
	// holders are the holders of leases whose items went to several
	// consumers (Lease), written by flush.
	holders []holderRow
	// notify lists the queues whose waiting leases should look again.
	notify []uint64
	// metrics run after commit (counts of dead-lettered and dropped
	// items).
	metrics []func()
	// more says the lifecycle hit its batch size: run it again at once.
	more bool
	// dedupAsked are the deduplication ids this iteration claimed, and
	// dedupClaimed those it got and no item has used yet (dedup.go).
	dedupAsked, dedupClaimed map[string]bool
	// committed says LeaseAndCommit committed the transaction: Commit
	// only answers.
	committed bool
}

// holderRow is the holder of a leased item (migration 21).
type holderRow struct {
	id int64
	h  queue.Holder
}

type newID struct {
	requeue int
	to      *uint64
}

var (
	_ engine.Tx             = (*iteration)(nil)
	_ engine.Locker         = (*iteration)(nil)
	_ engine.LeaseCommitter = (*iteration)(nil)
)

func (it *iteration) wakeQueue(id uint64) {
	if !slices.Contains(it.notify, id) {
		it.notify = append(it.notify, id)
	}
}

// Info implements engine.Tx.
func (it *iteration) Info() queue.QueueInfo { return it.info }

// Lock implements engine.Locker: the rows named, and those a clear selects, in
// id order, in the iteration's first statement (see "Lock order").
func (it *iteration) Lock(ids []uint64, c *queue.ClearParams) error {
	locked, err := lockRows(it.ctx, it.tx, it.q.id, toInt64(ids), c)
	for _, x := range locked {
		it.rows[x.id] = x
	}
	return err
}

func toInt64(ids []uint64) []int64 {
	out := make([]int64, len(ids))
	for i, id := range ids {
		out[i] = int64(id)
	}
	return out
}

// view is the engine's Item of a row.
func view(x row) engine.Item {
	v := engine.Item{Partition: x.partition, ID: uint64(x.id), Attempts: x.attempts, Expire: x.expire,
		HasHistory: true, DeadCopy: queue.IsDeadCopyKey(x.sourceKey), Redrive: queue.RedriveTaskOf(x.sourceKey)}
	if x.state == stateLeased {
		v.Leased, v.LeaseDeadline = true, x.deadline
	}
	return v
}

// hold keeps the rows read (locked) by the iteration, by id, and returns
// their views.
func (it *iteration) hold(xs []row) []engine.Item {
	out := make([]engine.Item, len(xs))
	for i, x := range xs {
		it.rows[x.id] = x
		out[i] = view(x)
	}
	return out
}

// own returns the row of v, which the engine had from this iteration (Due,
// Item): an error when the iteration does not hold it (a contract
// violation, failing the iteration).
func (it *iteration) own(v engine.Item) (row, error) {
	x, ok := it.rows[int64(v.ID)]
	if !ok || x.partition != v.Partition {
		return row{}, fmt.Errorf("queue '%s': item %d of partition %d is not held by the transaction", it.q.name, v.ID, v.Partition)
	}
	return x, nil
}

// Due implements engine.Tx: at most lifecycleBatch of each (SKIP LOCKED:
// rows another node holds wait for a later iteration).
func (it *iteration) Due() (leases, expired []engine.Item, err error) {
	ls, err := expiredLeases(it.ctx, it.tx, it.q.id, it.now)
	if err != nil {
		return nil, nil, err
	}
	xs, err := expiredItems(it.ctx, it.tx, it.q.id, it.now)
	if err != nil {
		return nil, nil, err
	}
	readied, err := readyScheduled(it.ctx, it.tx, it.q.id, it.now)
	if err != nil {
		return nil, nil, err
	}
	if readied > 0 {
		it.wakeQueue(it.q.id)
	}
	resent, err := it.claimDying()
	if err != nil {
		return nil, nil, err
	}
	if err := it.checkHeld(); err != nil {
		return nil, nil, err
	}
	it.more = len(ls) == lifecycleBatch || len(xs) == lifecycleBatch || readied == lifecycleBatch || resent == lifecycleBatch
	return it.hold(ls), it.hold(xs), nil
}

// checkHeld releases, when due (Queue.heldNext), the held groups whose
// dead item left the dead-letter queue (rule 5(b); releaseGone), and
// schedules the next check a second later while groups are held.
func (it *iteration) checkHeld() error {
	q := it.q
	if q.heldNext == 0 || q.heldNext > it.now {
		return nil
	}
	released, left, err := releaseGone(it.ctx, it.tx, q.id)
	if err != nil {
		return wrapGroups("release held groups", err)
	}
	q.heldChecked, q.heldNext = it.now, 0
	if released > 0 {
		it.wakeQueue(q.id)
	}
	if left > 0 {
		q.heldNext = it.now + int64(heldCheckEvery)
	}
	return nil
}

// Item implements engine.Tx from the rows Lock locked.
func (it *iteration) Item(n int32, id uint64) (engine.Item, bool) {
	x, ok := it.rows[int64(id)]
	if !ok || x.partition != n {
		return engine.Item{}, false
	}
	return view(x), true
}

// Histories implements engine.Tx from the rows read.
func (it *iteration) Histories(xs []engine.Item) ([]queue.ItemErrors, error) {
	out := make([]queue.ItemErrors, len(xs))
	for i, v := range xs {
		x, err := it.own(v)
		if err != nil {
			return nil, err
		}
		h, err := decodeErrors(x.lastError, x.errors)
		if err != nil {
			return nil, fmt.Errorf("queue '%s': %w", it.q.name, err)
		}
		out[i] = h
	}
	return out, nil
}

// Requeue implements engine.Tx: the row gets a new id when flushed.
func (it *iteration) Requeue(v engine.Item, e queue.Ending, h *queue.ItemErrors, to *uint64) error {
	x, err := it.own(v)
	if err != nil {
		return err
	}
	delete(it.rows, x.id)
	r := requeue{id: x.id, state: stateReady, attempts: e.Attempts}
	if e.At != 0 {
		r.state, r.deadline = stateScheduled, e.At
		it.q.nextDue = engine.Earliest(it.q.nextDue, e.At)
	} else {
		it.wakeQueue(it.q.id)
	}
	if h != nil {
		r.setErrors, r.lastError, r.errors = true, h.LastError, encodeErrors(*h)
	}
	if to != nil {
		it.newIDs = append(it.newIDs, newID{requeue: len(it.requeues), to: to})
	}
	it.requeues = append(it.requeues, r)
	return nil
}

// Kill implements engine.Tx: the move to the dead-letter queue (or the drop)
// is part of the transaction (bury), or, when the dead-letter queue takes
// the two-phase move (Manager.twoPhase), the item is marked dying
// (markDying) and moving: its move ends after the commit (deadletters.go).
func (it *iteration) Kill(v engine.Item, reason string, h *queue.ItemErrors) (bool, error) {
	x, err := it.own(v)
	if err != nil {
		return false, err
	}
	delete(it.rows, x.id)
	d := death{id: x.id, reason: reason, attempts: v.Attempts, sourceKey: x.sourceKey, partition: x.partition, group: x.group, seq: x.seq}
	it.groupChanged(x.group)
	if h != nil {
		d.setErrors, d.lastError, d.errors = true, h.LastError, encodeErrors(*h)
	}
	if it.q.m.twoPhase(it.info.DeadQueue) {
		it.dyings = append(it.dyings, d)
		return true, nil
	}
	it.deaths = append(it.deaths, d)
	return false, nil
}

// Complete implements engine.Tx on rows the iteration holds: an item it
// does not hold (not locked, or of another partition) fails the iteration,
// as on the embedded backends (issue 41).
func (it *iteration) Complete(xs []engine.Item) error {
	for _, v := range xs {
		x, err := it.own(v)
		if err != nil {
			return err
		}
		delete(it.rows, x.id)
		it.completed = append(it.completed, x.id)
		it.groupChanged(x.group)
	}
	return nil
}

// groupChanged notes that an item of group g left its queue (completed,
// dead, deleted): on an ordered queue the group's next item may be its
// head now, so the waiting leases of every node look again.
func (it *iteration) groupChanged(g string) {
	if g != "" && it.info.Ordered {
		it.wakeQueue(it.q.id)
	}
}

// Requeued implements engine.Tx, after the changes gathered so far (a
// requeue of this iteration has its first_id), in one statement that locks
// the row it finds and passes over one another transaction holds.
func (it *iteration) Requeued(n int32, first uint64) (engine.Item, bool, error) {
	if err := it.flush(); err != nil {
		return engine.Item{}, false, err
	}
	x, ok, err := requeuedRow(it.ctx, it.tx, it.q.id, n, int64(first))
	if !ok || err != nil {
		return engine.Item{}, false, err
	}
	return it.hold([]row{x})[0], true, nil
}

// Renew implements engine.Tx: one statement, on rows the iteration holds
// (any other fails the iteration, as Complete).
func (it *iteration) Renew(xs []engine.Item, deadline int64, _ []queue.Holder) error {
	ids := make([]int64, len(xs))
	for i, v := range xs {
		x, err := it.own(v)
		if err != nil {
			return err
		}
		ids[i] = x.id
		x.deadline = deadline
		it.rows[x.id] = x
	}
	// A shorter lease than the one it replaces is due sooner.
	it.q.nextDue = engine.Earliest(it.q.nextDue, deadline)
	return renewLeases(it.ctx, it.tx, it.q.id, ids, deadline)
}

// ReadyCounts implements engine.Tx: counted in the transaction once the
// changes gathered are written (so another node's commits since are seen,
// not its transactions in flight), at most readyCountCap per partition.
// Grouped items are counted as leasable groups on an ordered queue; on
// another queue they are counted while this node knows the queue holds
// some, and otherwise at most once every groupLookEvery (to learn of those
// another node produced).
func (it *iteration) ReadyCounts() ([]int, error) {
	if err := it.flush(); err != nil {
		return nil, err
	}
	q := it.q
	mode := countUngrouped
	switch {
	case it.info.Ordered:
		mode = countLeasable
	case len(q.grouped) > 0 || it.now-q.groupLook[-1] >= int64(groupLookEvery):
		mode = countAll
	}
	ready, grouped, err := readyCounts(it.ctx, it.tx, q.id, max(it.info.Partitions, 1), mode, it.now)
	if err != nil || grouped == nil {
		return ready, err
	}
	q.groupLook[-1] = it.now
	for p, g := range grouped {
		if g {
			q.grouped[int32(p)] = true
		} else {
			delete(q.grouped, int32(p))
		}
	}
	return ready, nil
}

// Produce implements engine.Tx.
func (it *iteration) Produce(n int32, items []queue.ProduceItem, expire int64) error {
	items, err := it.deduplicate(items)
	if err != nil {
		return err
	}
	for _, pi := range items {
		in := insert{partition: n, state: stateReady, created: it.now, group: pi.Group,
			body: queue.ItemBody{Reference: pi.Reference, Kind: pi.Kind, Encoding: pi.Encoding, Payload: pi.Payload,
				Attributes: pi.Attributes}}
		if pi.Group != "" {
			it.q.grouped[n] = true
		}
		it.q.place(it, &in, queue.Nanos(pi.EnqueueAt), expire)
		it.inserts = append(it.inserts, in)
	}
	return nil
}

// Redrive implements engine.Tx: the unique source-key index skips an item
// the queue holds, and redriveOnce one it held within sourceKeyWindow.
func (it *iteration) Redrive(n int32, items []queue.RedriveItem, expire int64) error {
	items, err := it.redriveOnce(items)
	if err != nil {
		return err
	}
	// The copy of the dead item that holds its group releases it and takes
	// its seq, so that it is the group's head (rule 5(a)); another redriven
	// item of the group does not (releaseHeld matches the dead key).
	var groups, deadKeys []string
	for _, ri := range items {
		if ri.Group != "" {
			it.q.grouped[n] = true
			if ri.DeadKey != "" {
				groups, deadKeys = append(groups, ri.Group), append(deadKeys, ri.DeadKey)
			}
		}
	}
	var released map[heldRelease]int64
	if len(groups) > 0 {
		if released, err = releaseHeld(it.ctx, it.tx, it.q.id, n, groups, deadKeys); err != nil {
			return wrapGroups("release held groups", err)
		}
	}
	for _, ri := range items {
		key := ri.SourceKey
		in := insert{partition: n, state: stateReady, created: it.now, sourceKey: &key, body: ri.Body, group: ri.Group}
		if k := (heldRelease{ri.Group, ri.DeadKey}); ri.Group != "" {
			if seq, ok := released[k]; ok {
				in.seq = seq
				delete(released, k)
			}
		}
		if !ri.Errors.IsZero() {
			in.lastError, in.errors = ri.Errors.LastError, encodeErrors(ri.Errors)
		}
		it.q.place(it, &in, 0, expire)
		it.inserts = append(it.inserts, in)
	}
	return nil
}

// Lease implements engine.Tx in one statement (SKIP LOCKED: rows another
// node holds are passed over). Every item is durable: a commit is.
//
// An ordered queue's partition is leased by the group rules
// (leaseGroups); so is a fair queue's once the node knows it holds grouped
// items (grouped: it produced some there, or looked and found some). A
// plain lease, the statement of a queue without groups, takes the items
// without a group; when it finds fewer than wanted, the node looks for
// ready grouped items in the partition (at most once every groupLookEvery
// per partition): the rest of the batch is then leased by the group rules,
// and the partition from then on (until a group lease finds no grouped
// item). maxBytes bounds both leases together (the group lease takes what
// the plain one left of it; leaseGroups).
func (it *iteration) Lease(n int32, want int, maxBytes, deadline int64, holder func(k int) queue.Holder) ([]queue.LeasedItem, bool, bool, error) {
	// The holder goes with the lease statement when every item goes to
	// one consumer (the usual case); else each item's is written after
	// (flush, setHolders).
	one := oneHolder(holder, want)
	items, durable, more, err := it.lease(n, want, maxBytes, deadline, one)
	if err == nil && one == nil && holder != nil {
		for k, x := range items {
			it.holders = append(it.holders, holderRow{id: int64(x.ID), h: holder(k)})
		}
	}
	return items, durable, more, err
}

// LeaseAndCommit implements engine.LeaseCommitter: the plain lease's
// statement goes with the writes gathered and the COMMIT, in one round
// trip instead of two (issue 53: a queue's throughput at batch 1 is bound
// by its iterations' round trips), when nothing must run between them: no
// lifecycle work (whose next due time is read before the COMMIT), no
// deduplication claims to release and no bytes bound over several items,
// on a queue that is not ordered and has no grouped items known in the
// partition. Otherwise it is Lease. Items that go to several consumers
// get their holders in the lease's statement (leaseHoldersSQL). When the
// look for grouped items another node produced is due, its probe goes in
// the same round trip; grouped items found while the plain lease came
// short are served by the next iteration, which the probe signals.
func (it *iteration) LeaseAndCommit(n int32, want int, maxBytes, deadline int64, holder func(k int) queue.Holder) ([]queue.LeasedItem, bool, bool, error) {
	q := it.q
	bounded := maxBytes > 0 && want > 1
	if it.lifecycle || len(it.dedupClaimed) > 0 || it.info.Ordered || q.grouped[n] || bounded {
		return it.Lease(n, want, maxBytes, deadline, holder)
	}
	one := oneHolder(holder, want)
	var each []queue.Holder
	if one == nil && holder != nil {
		each = make([]queue.Holder, want)
		for k := range each {
			each[k] = holder(k)
		}
	}
	if err := it.flush(); err != nil {
		return nil, false, false, err
	}
	look := it.now-q.groupLook[n] >= int64(groupLookEvery)
	var grouped bool
	got, more, err := leaseBy(func(sql string, args []any, scan func(pgx.Rows, error) error) error {
		b := genericPlanBatch(sql, args)
		if look {
			b.Queue(groupedReadySQL, int64(q.id), n)
		}
		return commitWith(it.ctx, it.ptx, "queue '"+q.name+"'", b, func(br pgx.BatchResults) error {
			if err := readGenericPlan(br, scan); err != nil {
				return err
			}
			if look {
				return br.QueryRow().Scan(&grouped)
			}
			return nil
		})
	}, q.id, n, want, maxBytes, deadline, it.now, one, each)
	if err != nil {
		return nil, false, false, err
	}
	it.committed = true
	leaseCommits.Add(1)
	if len(got) > 0 {
		q.nextDue = engine.Earliest(q.nextDue, deadline)
	}
	if look {
		q.groupLook[n] = it.now
		if grouped {
			q.grouped[n] = true
			if len(got) < want && !more {
				q.signal(true, 0) // the next iteration leases them
			}
		}
	}
	return got, true, more, nil
}

// leaseCommits counts the iterations LeaseAndCommit committed, for the
// tests (LeaseCommits in export_test.go).
var leaseCommits atomic.Int64

// oneHolder returns the holder of every one of a lease's want items when
// they all go to one consumer, else nil.
func oneHolder(holder func(k int) queue.Holder, want int) *queue.Holder {
	if holder == nil {
		return nil
	}
	h := holder(0)
	for k := 1; k < want; k++ {
		if holder(k) != h {
			return nil
		}
	}
	return &h
}

// lease is Lease with the holder of all its items, one (nil: written
// apart).
func (it *iteration) lease(n int32, want int, maxBytes, deadline int64, one *queue.Holder) ([]queue.LeasedItem, bool, bool, error) {
	if err := it.flush(); err != nil {
		return nil, false, false, err
	}
	q := it.q
	var items []queue.LeasedItem
	if !it.info.Ordered && !q.grouped[n] {
		got, more, err := lease(it.ctx, it.tx, q.id, n, want, maxBytes, deadline, it.now, one)
		if err != nil {
			return nil, false, false, err
		}
		if len(got) > 0 {
			q.nextDue = engine.Earliest(q.nextDue, deadline)
		}
		if more || len(got) == want || it.now-q.groupLook[n] < int64(groupLookEvery) {
			return got, true, more, nil
		}
		q.groupLook[n] = it.now
		grouped, err := groupedReady(it.ctx, it.tx, q.id, n)
		if err != nil || !grouped {
			return got, true, false, err
		}
		q.grouped[n] = true
		items, want = got, want-len(got)
	}
	var used int64 // the bytes of the plain lease's items, which the bound counts
	for _, x := range items {
		used += int64(len(x.Payload) + len(x.Attributes))
	}
	if maxBytes > 0 && len(items) > 0 && used >= maxBytes {
		return items, true, true, nil // grouped items are ready: they wait for the next lease
	}
	cursor := q.groupCursor[n]
	got, more, err := leaseGroups(it.ctx, it.tx, q.id, n, want, deadline, it.now, it.info.Ordered, cursor, maxBytes, used, len(items) == 0, one)
	if err != nil {
		return nil, false, false, err
	}
	if len(got) > 0 {
		q.nextDue = engine.Earliest(q.nextDue, deadline)
		q.groupCursor[n] = nextCursor(cursor, got)
	}
	if !it.info.Ordered && !more && len(got) < want && !slices.ContainsFunc(got, func(x queue.LeasedItem) bool { return x.Group != "" }) {
		delete(q.grouped, n) // no grouped item was ready: the plain lease again
	}
	for i := range got {
		got[i].LeaseDeadline = queue.FromNanos(deadline)
	}
	return append(items, got...), true, more, nil
}

// Held implements engine.Tx.
func (it *iteration) Held(n int32, keys []string) (map[string]queue.Item, error) {
	if err := it.flush(); err != nil {
		return nil, err
	}
	return heldKeys(it.ctx, it.tx, it.q.id, keys)
}

// Import implements engine.Tx in one statement. The unique source-key index
// keeps one imported item per source_id and partition even when two nodes
// import at once: an insert that another transaction's copy beat
// (committed since Held) is skipped, and answered with that copy.
func (it *iteration) Import(n int32, items []queue.Item) ([]queue.Item, error) {
	if err := it.flush(); err != nil {
		return nil, err
	}
	ins := make([]insert, len(items))
	for i, si := range items {
		m := si.Meta
		in := insert{partition: n, state: stateReady, created: queue.Nanos(m.CreatedAt), attempts: m.Attempts,
			body: si.Body, lastError: si.Errors.LastError, errors: encodeErrors(si.Errors), group: m.Group}
		if m.Group != "" {
			it.q.grouped[n] = true
		}
		if m.SourceKey != "" {
			in.sourceKey = &m.SourceKey
		}
		if m.Leased {
			it.q.place(it, &in, 0, queue.Nanos(m.ExpireDeadline))
			in.state, in.deadline = stateLeased, queue.Nanos(m.LeaseDeadline)
			it.q.nextDue = engine.Earliest(it.q.nextDue, in.deadline)
		} else {
			it.q.place(it, &in, queue.Nanos(m.EnqueueAt), queue.Nanos(m.ExpireDeadline))
		}
		ins[i] = in
	}
	ids, err := newIDs(it.ctx, it.tx, len(ins))
	if err != nil {
		return nil, err
	}
	inserted, err := importInsert(it.ctx, it.tx, it.q.id, ins, ids)
	if err != nil {
		return nil, err
	}
	out := make([]queue.Item, len(items))
	var lost []string
	for j, si := range items {
		out[j] = si
		out[j].Meta.ID, out[j].Meta.BodyID = uint64(ids[j]), uint64(ids[j])
		if si.Meta.Group != "" {
			out[j].Meta.GroupSeq = uint64(ids[j])
		}
		if si.Meta.SourceKey != "" && !inserted[ids[j]] {
			lost = append(lost, si.Meta.SourceKey)
		}
	}
	if len(lost) > 0 {
		won, err := heldKeys(it.ctx, it.tx, it.q.id, lost)
		if err != nil {
			return nil, err
		}
		for j, si := range items {
			if h, ok := won[si.Meta.SourceKey]; ok && si.Meta.SourceKey != "" {
				out[j] = h
			}
		}
	}
	return out, nil
}

// Delete implements engine.Tx, in request order after the changes
// gathered so far.
func (it *iteration) Delete(refs []queue.ItemRef, exceptLeased bool) (int, error) {
	if err := it.flush(); err != nil {
		return 0, err
	}
	n, err := deleteRefs(it.ctx, it.tx, it.q.id, refs, exceptLeased)
	if n > 0 && it.info.Ordered {
		it.wakeQueue(it.q.id) // a group's head may have gone
	}
	return int(n), err
}

// Clear implements engine.Tx, in request order after the changes gathered
// so far.
func (it *iteration) Clear(p queue.ClearParams) error {
	if err := it.flush(); err != nil {
		return err
	}
	return clearItems(it.ctx, it.tx, it.q.id, p)
}

// Edit implements engine.Tx, in request order after the changes gathered
// so far.
func (it *iteration) Edit(ref queue.ItemRef, edit func(*queue.Item) error) (queue.Item, error) {
	if err := it.flush(); err != nil {
		return queue.Item{}, err
	}
	return editItem(it.ctx, it.tx, it.q.id, it.q.name, ref, edit)
}

// flush writes the changes gathered so far: they are sent with the next
// statement that reads, or with the COMMIT.
func (it *iteration) flush() error {
	ctx, tx, q := it.ctx, it.tx, it.q
	// The writes go with the statement that reads after them, or with the
	// COMMIT (pipelinedTx): no one reads their tags.
	deferred := it.ptx.deferWrites
	it.ptx.deferWrites = true
	defer func() { it.ptx.deferWrites = deferred }()
	if len(it.inserts) > 0 {
		if err := insertItems(ctx, tx, q.id, it.inserts, nil); err != nil {
			return err
		}
		it.inserts = it.inserts[:0]
	}
	if len(it.completed) > 0 {
		if _, err := deleteIDs(ctx, tx, q.id, it.completed); err != nil {
			return err
		}
		it.completed = it.completed[:0]
	}
	if len(it.newIDs) > 0 {
		ids, err := newIDs(ctx, tx, len(it.newIDs))
		if err != nil {
			return err
		}
		for k, n := range it.newIDs {
			it.requeues[n.requeue].newID = ids[k]
			*n.to = uint64(ids[k])
		}
		it.newIDs = it.newIDs[:0]
	}
	if len(it.requeues) > 0 {
		if err := requeueItems(ctx, tx, q.id, it.requeues); err != nil {
			return err
		}
		it.requeues = it.requeues[:0]
	}
	if len(it.deaths) > 0 {
		if err := q.bury(ctx, tx, it, it.deaths); err != nil {
			return err
		}
		it.deaths = it.deaths[:0]
	}
	if len(it.dyings) > 0 {
		if err := q.markDying(ctx, tx, it, it.dyings); err != nil {
			return err
		}
		it.dyings = it.dyings[:0]
	}
	if len(it.holders) > 0 {
		if err := setHolders(ctx, tx, q.id, it.holders); err != nil {
			return err
		}
		it.holders = it.holders[:0]
	}
	return nil
}

// Commit implements engine.Tx: the changes left are written and the
// lifecycle's next due time learnt, and the transaction committed, the
// writes in the COMMIT's round trip (pipelinedTx); then every reply is
// sent, and the loops of the queues whose items became ready are woken
// (Manager.wake). A failure rolls back and answers every request with it,
// and the waiting leases too (a database that is down answers 453 at once,
// not at the request timeout).
//
// The COMMIT is waited for in the loop. Running it on a goroutine while
// the loop ran the next iteration was measured (A/B in one run,
// bench/postgres.sh, 4 clients, with and without a synchronous standby):
// slower everywhere, produce at batch 1 by a third, as the requests that
// arrive during a commit then made a transaction of their own instead of
// joining the next.
func (it *iteration) Commit(replies []engine.Reply, err error) {
	q := it.q
	// The writes left go with the COMMIT (or with the statement that reads
	// after them), in its round trip: no one reads their tags.
	it.ptx.deferWrites = true
	if err == nil && !it.committed {
		err = it.flush()
		if err == nil {
			err = it.releaseClaims()
		}
		if err == nil && it.lifecycle {
			err = q.learnDue(it.ctx, it.tx, it)
		}
		if err == nil {
			err = commitTx(it.ctx, it.tx, "queue '"+q.name+"'")
		}
	}
	// Not before: after a panic in the statements above, Recover rolls the
	// transaction back and ends its context.
	q.open = nil
	if err != nil {
		err = q.failed(it, err, replies)
		q.Loop.Waiters.Fail(err)
		if it.lifecycle {
			q.nextDue = it.now + int64(busyBackoff)
			if errors.Is(err, queue.ErrQueueMoving) {
				q.nextDue = it.now + int64(fencedBackoff) // nothing is done until the fence is lifted
			}
		}
		return
	}
	it.cancel()
	for _, f := range it.metrics {
		f()
	}
	q.m.wake(it.notify)
	if len(it.moves) > 0 {
		replies = q.startMoves(it, replies)
	}
	for _, r := range replies {
		r.R.Answer(r.Err)
	}
}

// commitError is the client-facing error of an iteration that failed.
func (q *Queue) commitError(it *iteration, err error) error {
	err = wrap("queue '"+q.name+"'", err)
	if errors.Is(err, store.ErrQueueNotFound) {
		err = queue.NotFound(q.name)
	}
	return err
}

// failed rolls back an iteration that failed with err, logs it, answers
// every reply (its own error, or the failure) and returns the failure as
// answered. The caller tells the waiting leases.
func (q *Queue) failed(it *iteration, err error, replies []engine.Reply) error {
	q.rollback(it.tx)
	it.cancel()
	err = q.commitError(it, err)
	if !errors.Is(err, queue.ErrQueueMoving) { // every iteration while it moves: not worth a line each
		q.m.cfg.Log.Warn("transaction failed", "queue", q.name, "error", err)
	}
	for _, r := range replies {
		if r.Err != nil {
			r.R.Answer(r.Err)
		} else {
			r.R.Answer(err)
		}
	}
	return err
}

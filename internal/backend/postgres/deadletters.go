package postgres

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/styxq/styx/internal/apierr"
	"github.com/styxq/styx/internal/engine"
	"github.com/styxq/styx/internal/queue"
)

// The two-phase dead-letter move (ADR 0023, "Dead-letter move across
// clusters"; ADR 0003's protocol on PostgreSQL). When a queue and its
// dead-letter queue are in one database the move is one statement in the
// source's iteration (bury, moveDead). When the dead-letter queue is
// another cluster's (Config.DeadLetters), or always under
// Config.TwoPhaseDeadLetters, it is two transactions on two databases:
//
//  1. Kill marks the item dying (state 3) in the source's iteration, with
//     its dead_reason, dead_at and history (markDying): from the commit on
//     it is never leased, counted as dying, never as ready or leased, and
//     its lifecycle claim (deadline) is this node's for dyingClaim.
//  2. After that commit the source's node delivers the items
//     (DeadLetters.TakeDead, which reaches the dead-letter queue's home
//     Manager: Manager.TakeDead), which inserts them under new ids, unless
//     it holds their source key or took it within sourceKeyWindow, and
//     commits.
//  3. Then the source deletes its dying rows (runMove). Only then is a
//     retry that killed them answered (Reply.Moving; awaitMoved), or 453
//     at its deadline when the move does not end by then: the decision is
//     committed and the move finishes later.
//
// A node that stops between 1 and 3, or a delivery that fails, leaves dying
// rows whose claim runs out: every node's lifecycle claims the dying rows
// whose deadline passed (claimDying, FOR UPDATE SKIP LOCKED, a new claim of
// dyingClaim) and delivers them again; the dead-letter queue ignores a copy
// it holds or took within sourceKeyWindow (completed, deleted or redriven
// since), recorded in styx_dedup with the redriven items' keys (dedup.go).

// DeadLetters delivers dead items to a dead-letter queue, which may be on
// another cluster (Config.DeadLetters). The router over several clusters
// implements it by calling TakeDead on the dead-letter queue's home
// Manager.
//
// TakeDead stores items in the dead-letter queue named dlq, all or none,
// and returns nil once that is committed; it skips an item whose source
// key the queue holds or took within the last 10 minutes, so the same
// items may be delivered again. Errors: the dead-letter queue unknown
// (apierr NotFound), its database unreachable or failing (store
// ErrUnavailable and others); after an error the items may or may not be
// stored (a commit whose answer was lost): the caller delivers them again.
// Safe for concurrent use.
type DeadLetters interface {
	TakeDead(ctx context.Context, dlq string, items []DeadItem) error
}

// DeadItem is a dead item on its way to a dead-letter queue: what its dead
// copy is made of.
type DeadItem struct {
	// ID is the item's id in its source queue when it died.
	ID uint64
	// SourceKey is the dead copy's source key, queue.SourceKey(reason,
	// source queue, ID): a dead-letter queue holds one item per key.
	SourceKey string
	// Attempts are the item's attempts when it died.
	Attempts int32
	// CreatedAt and FirstLeasedAt are when the item was created and first
	// leased (Unix ns; 0: never leased): the dead copy keeps them.
	CreatedAt, FirstLeasedAt int64
	// Body is the item's body with its dead record: SourceQueue, SourceID
	// (ID formatted), DeadReason and DeadAt set.
	Body queue.ItemBody
	// Errors is the item's attempt history.
	Errors queue.ItemErrors
	// Group is the item's group, "" for none: the dead copy keeps it.
	Group string
}

const (
	// dyingClaim is how long the node that marked or claimed dying items
	// has to deliver them before any node's lifecycle delivers them again.
	dyingClaim = 5 * time.Second
	// movedPoll is how often a retry waiting for a move that failed on
	// this node looks whether another node (or a later try) finished it.
	movedPoll = 500 * time.Millisecond
)

// twoPhaseOn reports whether this Manager may mark items dying: it has a
// way to deliver them (DeadLetters), or the test switch is on.
func (m *Manager) twoPhaseOn() bool { return m.cfg.TwoPhaseDeadLetters || m.cfg.DeadLetters != nil }

// twoPhase reports whether a dead item of a queue whose dead_queue is dlq
// takes the two-phase move: under the switch, or when dlq is not a queue
// this node knows (another cluster's, or one created since on this
// cluster: the move is right either way, one statement is only cheaper).
func (m *Manager) twoPhase(dlq string) bool {
	if dlq == "" || !m.twoPhaseOn() {
		return false
	}
	if m.cfg.TwoPhaseDeadLetters {
		return true
	}
	_, local := m.cachedInfoByName(dlq)
	return !local
}

// deliverTo returns who takes dead items for dead-letter queue dlq:
// Config.DeadLetters when set (the router reaches the queue's home
// Manager, which may be this one), else this Manager (the switch, or
// dying items a node with a hook left).
func (m *Manager) deliverTo(string) DeadLetters {
	if m.cfg.DeadLetters != nil {
		return m.cfg.DeadLetters
	}
	return m
}

// deadMove is one delivery of dying items to a dead-letter queue: made by
// an iteration (markDying, claimDying), run after its commit (runMove).
type deadMove struct {
	q     *Queue
	dlq   string
	items []DeadItem
	// parts and seqs are each item's partition and GroupSeq in the source
	// (the held group's record, rule 5).
	parts []int32
	seqs  []int64
	// hold says the source queue holds the groups of its dead items
	// (ordered, GroupHold), with dlqID the dead-letter queue's id (0 when
	// it is not this Manager's: not held, see docs/storage/postgres.md).
	hold  bool
	dlqID uint64
	// done is closed when the move ended, err (written before) its
	// outcome: nil once the items are in the dead-letter queue and gone
	// from the source.
	done chan struct{}
	err  error
}

// dyingColumns are the columns of a dying row that make its DeadItem
// (scanDying), qualified by t.
const dyingColumns = `t.id, t.partition, t.attempts, t.created_at, coalesce(t.first_leased_at, 0), t.reference, t.kind, t.encoding,
	t.payload, t.attributes, t.redrive_count, t.last_error, t.errors, coalesce(t.grp, ''), coalesce(t.group_seq, t.first_id, t.id),
	t.dead_reason, t.dead_at`

// scanDyingRows reads rows of dyingColumns as a move's items, in id order.
func scanDyingRows(rows pgx.Rows, source string) ([]DeadItem, []int32, []int64, error) {
	type dying struct {
		d    DeadItem
		part int32
		seq  int64
	}
	all, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (dying, error) {
		var x dying
		var id, deadAt int64
		var errs []byte
		b := &x.d.Body
		err := r.Scan(&id, &x.part, &x.d.Attempts, &x.d.CreatedAt, &x.d.FirstLeasedAt, &b.Reference, &b.Kind, &b.Encoding,
			&b.Payload, &b.Attributes, &b.RedriveCount, &x.d.Errors.LastError, &errs, &x.d.Group, &x.seq, &b.DeadReason, &deadAt)
		if err != nil {
			return x, err
		}
		x.d.ID = uint64(id)
		x.d.SourceKey = queue.SourceKey(b.DeadReason, source, x.d.ID)
		b.SourceQueue, b.SourceID, b.DeadAt = source, queue.FormatID(x.d.ID), queue.FromNanos(deadAt)
		x.d.Errors, err = decodeErrors(x.d.Errors.LastError, errs)
		return x, err
	})
	if err != nil {
		return nil, nil, nil, err
	}
	slices.SortFunc(all, func(a, b dying) int { return cmp.Compare(a.d.ID, b.d.ID) })
	items, parts, seqs := make([]DeadItem, len(all)), make([]int32, len(all)), make([]int64, len(all))
	for i, x := range all {
		items[i], parts[i], seqs[i] = x.d, x.part, x.seq
	}
	return items, parts, seqs, nil
}

// newMove returns a move of queue q's dying items to its dead-letter queue
// as this iteration knows it.
func (it *iteration) newMove() *deadMove {
	q := it.q
	mv := &deadMove{q: q, dlq: it.info.DeadQueue, done: make(chan struct{}),
		hold: it.info.Ordered && it.info.GroupDeadPolicy == queue.GroupHold}
	if to, ok := q.m.cachedInfoByName(mv.dlq); ok {
		mv.dlqID = to.ID
	}
	return mv
}

// markDying marks the items of ds dying (step 1) and gathers them into a
// move that Commit starts: one statement, whose RETURNING reads what the
// dead copies are made of.
func (q *Queue) markDying(ctx context.Context, tx pgx.Tx, it *iteration, ds []death) error {
	n := len(ds)
	ids, reasons, attempts, set, lastErr, errs := make([]int64, n), make([]string, n), make([]int32, n), make([]bool, n),
		make([]string, n), make([]*string, n)
	for i, d := range ds {
		ids[i], reasons[i], attempts[i], set[i], lastErr[i] = d.id, d.reason, d.attempts, d.setErrors, d.lastError
		if d.errors != nil {
			s := string(d.errors)
			errs[i] = &s
		}
	}
	rows, err := tx.Query(ctx, `UPDATE styx_items t SET state=3, deadline=$3, expire_deadline=0, dead_reason=d.reason, dead_at=$4,
			attempts=d.attempts, last_error = CASE WHEN d.set THEN d.last_error ELSE t.last_error END,
			errors = CASE WHEN d.set THEN d.errs::jsonb ELSE t.errors END, holder_client=NULL, holder_key=NULL
		FROM unnest($2::bigint[], $5::text[], $6::integer[], $7::boolean[], $8::text[], $9::text[])
			AS d(id, reason, attempts, set, last_error, errs)
		WHERE t.queue_id=$1 AND t.id=d.id
		RETURNING `+dyingColumns,
		int64(q.id), ids, it.now+int64(dyingClaim), it.now, reasons, attempts, set, lastErr, errs)
	if err != nil {
		return err
	}
	mv := it.newMove()
	if mv.items, mv.parts, mv.seqs, err = scanDyingRows(rows, q.name); err != nil {
		return err
	}
	if len(mv.items) > 0 {
		it.moves = append(it.moves, mv)
	}
	return nil
}

// claimDying is the lifecycle's resend (Due): it claims, for dyingClaim,
// the queue's dying items whose claim ran out (their node stopped, or
// their delivery failed), at most lifecycleBatch of them, passing over
// those another transaction holds, and gathers them into a move that
// Commit starts. A queue that has no dead_queue any more drops them. It
// runs only on a Manager that marks items dying (twoPhaseOn), or once the
// lifecycle found an item due that it could not end (dyingHint: rows a
// node with the switch or the hook left).
func (it *iteration) claimDying() (int, error) {
	q := it.q
	if !q.m.twoPhaseOn() && !q.dyingHint {
		return 0, nil
	}
	q.dyingHint = false
	rows, err := it.tx.Query(it.ctx, `WITH c AS MATERIALIZED (
			SELECT ctid FROM styx_items WHERE queue_id=$1 AND state<>0 AND deadline <= $2 AND state=3
			ORDER BY deadline LIMIT $3 FOR UPDATE SKIP LOCKED)
		UPDATE styx_items t SET deadline=$4 FROM c WHERE t.ctid=c.ctid
		RETURNING `+dyingColumns,
		int64(q.id), it.now, lifecycleBatch, it.now+int64(dyingClaim))
	if err != nil {
		return 0, err
	}
	mv := it.newMove()
	if mv.items, mv.parts, mv.seqs, err = scanDyingRows(rows, q.name); err != nil || len(mv.items) == 0 {
		return 0, err
	}
	if mv.dlq == "" {
		ids := make([]int64, len(mv.items))
		for i, d := range mv.items {
			ids[i] = int64(d.ID)
			q.m.cfg.Log.Warn("dying item dropped: its queue has no dead_queue any more", "queue", q.name,
				"id", queue.FormatID(d.ID), "reason", d.Body.DeadReason)
		}
		_, err := deleteIDs(it.ctx, it.tx, q.id, ids)
		return len(ids), err
	}
	q.m.cfg.Log.Info("dead-letter move resent", "queue", q.name, "dead_queue", mv.dlq, "items", len(mv.items))
	it.moves = append(it.moves, mv)
	return len(mv.items), nil
}

// startMoves runs the moves of a committed iteration (step 2), each on a
// goroutine of its own, and has each retry reply that waits for some of
// their items answered when they moved (awaitMoved).
func (q *Queue) startMoves(it *iteration, replies []engine.Reply) []engine.Reply {
	for _, mv := range it.moves {
		q.m.wg.Go(mv.run)
	}
	kept := replies[:0:0]
	for _, r := range replies {
		if len(r.Moving) == 0 || r.Err != nil {
			kept = append(kept, r)
			continue
		}
		var waits []*deadMove
		var ids []int64
		for _, v := range r.Moving {
			for _, mv := range it.moves {
				if slices.ContainsFunc(mv.items, func(d DeadItem) bool { return d.ID == v.ID }) {
					if !slices.Contains(waits, mv) {
						waits = append(waits, mv)
					}
					ids = append(ids, int64(v.ID))
				}
			}
		}
		go q.awaitMoved(r.R, waits, ids)
	}
	return kept
}

// awaitMoved answers r once the moves it waits for ended: nil once each
// moved its items. A move that failed leaves its items to a later delivery
// (any node's claimDying): r then looks every movedPoll whether its items
// ids are still dying. It answers 453 when r's context ends first (its
// deadline) or the node stops: the decision is committed and the move
// finishes later; a retry of r then finds the items not leased (400).
func (q *Queue) awaitMoved(r *engine.Request, waits []*deadMove, ids []int64) {
	failed := false
	for _, mv := range waits {
		select {
		case <-mv.done:
			failed = failed || mv.err != nil
		case <-r.Ctx.Done():
			r.Answer(q.moveUnfinished(waits[0].dlq))
			return
		case <-q.m.ctx.Done():
			r.Answer(q.moveUnfinished(waits[0].dlq))
			return
		}
	}
	if !failed {
		r.Answer(nil)
		return
	}
	t := time.NewTicker(movedPoll)
	defer t.Stop()
	for {
		select {
		case <-r.Ctx.Done():
			r.Answer(q.moveUnfinished(waits[0].dlq))
			return
		case <-q.m.ctx.Done():
			r.Answer(q.moveUnfinished(waits[0].dlq))
			return
		case <-t.C:
		}
		var left bool
		err := q.m.st.pool.QueryRow(r.Ctx, `SELECT EXISTS (SELECT 1 FROM styx_items WHERE queue_id=$1 AND id = ANY($2) AND state=3)`,
			int64(q.id), ids).Scan(&left)
		if err == nil && !left {
			r.Answer(nil)
			return
		}
	}
}

// moveUnfinished is the answer to a retry whose dead items' move did not
// end in time.
func (q *Queue) moveUnfinished(dlq string) error {
	return apierr.New(apierr.Unavailable, "dead-letter move not finished; the items of queue '%s' are dead and wait to enter "+
		"dead-letter queue '%s', which did not take them in time (they move once it does)", q.name, dlq)
}

// run delivers the move's items (step 2) and deletes them from the source
// (step 3), holding their groups when the source holds them; it records
// the outcome and closes done. A failure is logged and counted
// (styx_dead_letter_errors_total): the items stay dying and any node's
// lifecycle sends them again once their claim runs out.
func (mv *deadMove) run() {
	defer close(mv.done)
	q, m := mv.q, mv.q.m
	ctx, cancel := context.WithTimeout(m.ctx, m.cfg.StatementTimeout)
	defer cancel()
	mv.err = mv.finish(ctx)
	if mv.err != nil {
		if m.ctx.Err() == nil {
			m.cfg.Log.Warn("dead-letter move failed; the items stay dying and are sent again", "queue", q.name,
				"dead_queue", mv.dlq, "items", len(mv.items), "error", mv.err, "again_within", dyingClaim)
		}
		m.cfg.Metrics.DeadLetterErrors.WithLabelValues(q.name).Inc()
		return
	}
	for _, d := range mv.items {
		m.cfg.Metrics.DeadLettered.WithLabelValues(q.name, mv.dlq, d.Body.DeadReason).Inc()
		m.cfg.Metrics.ItemAttempts.WithLabelValues("dead_lettered").Observe(float64(d.Attempts))
	}
}

// finish is run's work.
func (mv *deadMove) finish(ctx context.Context) error {
	q, m := mv.q, mv.q.m
	to := m.deliverTo(mv.dlq)
	if err := to.TakeDead(ctx, mv.dlq, mv.items); err != nil {
		return err
	}
	ids := make([]int64, len(mv.items))
	var groups bool
	for i, d := range mv.items {
		ids[i] = int64(d.ID)
		groups = groups || d.Group != ""
	}
	var hs []heldGroup
	if mv.hold && mv.dlqID != 0 {
		for i, d := range mv.items {
			if d.Group != "" {
				hs = append(hs, heldGroup{partition: mv.parts[i], group: d.Group, deadKey: d.SourceKey, seq: mv.seqs[i]})
			}
		}
	}
	now := m.cfg.Clock.Now().UnixNano()
	err := pgx.BeginFunc(ctx, m.st.pool, func(tx pgx.Tx) error {
		// A source queue moving to another cluster (fence.go) keeps its
		// dying rows: the copy carries them, and the destination's
		// lifecycle sends them again.
		if _, err := tx.Exec(ctx, checkFenceSQL, int64(q.id)); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `DELETE FROM styx_items WHERE queue_id=$1 AND id = ANY($2) AND state=3 RETURNING id`, int64(q.id), ids)
		if err != nil {
			return err
		}
		gone, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil || len(hs) == 0 {
			return err
		}
		// Only the groups of the items this delete removed: another
		// node's delivery held the others.
		hs = slices.DeleteFunc(hs, func(h heldGroup) bool {
			return !slices.ContainsFunc(mv.items, func(d DeadItem) bool { return d.SourceKey == h.deadKey && slices.Contains(gone, int64(d.ID)) })
		})
		if len(hs) == 0 {
			return nil
		}
		return wrapGroups("hold groups", holdGroups(ctx, tx, q.id, mv.dlqID, hs, now))
	})
	if err != nil {
		return wrap("queue '"+q.name+"': delete moved items", err)
	}
	if len(hs) > 0 {
		q.heldHint.Store(true)
		q.signal(false, now+int64(heldCheckEvery))
	}
	if groups {
		m.wake([]uint64{q.id}) // a group's head left: its next item may lease
	}
	return nil
}

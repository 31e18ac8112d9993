package engine

import (
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/styxq/styx/internal/apierr"
	"github.com/styxq/styx/internal/queue"
	"github.com/styxq/styx/metrics"
)

// The engine's iteration: what one loop iteration decides, on every
// backend (ADR 0014), over the Tx the backend began (contract.go): the
// lifecycle, each request by its op (ops.go; one handle method per op),
// the waiting leases and the commit. The rules themselves are in
// internal/queue/rules.go.

// pass is the engine's state of one iteration.
type pass struct {
	tx      Tx
	info    queue.QueueInfo
	now     int64
	ready   []int // the ready counts, nil until needed (and after a change the engine does not track)
	replies []Reply
	handled int // how many of the iteration's requests have run (replied, or answered by the backend)
	// joined are the leases that completed first (handleCompleteThenLease):
	// answered in this iteration, served or not.
	joined []*Request
	// waiting counts the leases that completed first and wait on
	// (LeaseWait.WaitAfterComplete).
	waiting int
	// ended: the lifecycle ended leases or killed items.
	ended bool
	// outcomes counts the outcomes of redriven items by redrive task
	// (outcomes.go); nil until there is one.
	outcomes map[string]*metrics.RedriveOutcome
}

func (it *pass) reply(r *Request, mode ReplyMode) {
	it.replies = append(it.replies, Reply{R: r, Mode: mode})
}

// iteration runs one iteration at now over reqs (leases are among the
// loop's waiters) on tx, which the backend began (Backend.Begin): Lock,
// the lifecycle (when lifecycle), the requests in arrival order, the
// waiting leases, and the commit.
func (e *Engine) iteration(tx Tx, now int64, reqs []*Request, lifecycle bool) {
	it := &pass{tx: tx, info: tx.Info(), now: now}
	err := e.iterate(it, reqs, lifecycle)
	if err != nil {
		// The iteration failed at reqs[it.handled] (or before the first,
		// in Lock or the lifecycle): that request and those after it get
		// the failure too, from Commit. Left out, they were never
		// answered and their callers, which may not abandon a write,
		// waited forever (a PostgreSQL connection cut mid-transaction).
		for _, r := range reqs[it.handled:] {
			it.replies = append(it.replies, Reply{R: r})
		}
	}
	if err == nil && !it.ended && len(reqs) > 0 && it.waiting == len(reqs) && len(it.replies) == 0 {
		// Nothing waits on these writes (Lazy).
		if l, ok := tx.(Lazy); ok {
			l.Lazy()
		}
	}
	tx.Commit(it.replies, err)
	if err == nil {
		e.reportOutcomes(it)
	}
}

func (e *Engine) iterate(it *pass, reqs []*Request, lifecycle bool) error {
	if l, ok := it.tx.(Locker); ok {
		if ids, clr := lockSet(reqs); len(ids) > 0 || clr != nil {
			if err := l.Lock(ids, clr); err != nil {
				return err
			}
		}
	}
	if d, ok := it.tx.(Deduplicator); ok {
		if ids := dedupSet(reqs); len(ids) > 0 {
			if err := d.Claim(ids); err != nil {
				return err
			}
		}
	}
	if lifecycle {
		if err := e.lifecycle(it); err != nil {
			return err
		}
	}
	for _, r := range reqs {
		mode, err := e.handle(it, r)
		switch {
		case err == nil:
			if mode != noReply {
				it.reply(r, mode)
			}
		case isClient(err):
			it.replies = append(it.replies, Reply{R: r, Err: err})
		default:
			return err
		}
		it.handled++
	}
	if e.Loop.Waiters.Len() == 0 {
		return nil
	}
	// A paused queue hands out nothing (queue.QueueInfo.Paused): its
	// waiting leases keep waiting until their request timeout (then no
	// items, Waiters.expire) or until an iteration after the resume serves
	// them. This is the one lease path of every door and backend.
	if !it.info.Paused() {
		if err := e.serve(it); err != nil {
			return err
		}
	}
	// A lease that completed first does not wait: unserved, it is answered
	// now with no items (once its completes are stored).
	for _, r := range it.joined {
		if e.Loop.Waiters.remove(r) {
			r.Lease.Result = queue.LeaseResult{}
			it.reply(r, Consume)
		}
	}
	return nil
}

// serve hands ready items to the waiting leases (Serve), each lease's items
// leased until its own deadline.
func (e *Engine) serve(it *pass) error {
	// A lease's deadline: now plus its own lease timeout, or the queue's.
	deadline := func(timeout time.Duration) int64 {
		if timeout <= 0 {
			timeout = it.info.LeaseTimeout
		}
		return it.now + int64(timeout)
	}
	var durable bool // of the partition last leased from: Serve gives its items next
	return Serve(&e.Loop.Waiters, &e.leaseNext,
		func() ([]int, error) { return it.tx.ReadyCounts() },
		func(n int32, want int, maxBytes int64, timeout time.Duration, to func(k int) *Request, last bool) (items []queue.LeasedItem, more bool, err error) {
			holder := func(k int) queue.Holder {
				w := to(k)
				return queue.Holder{ClientID: w.Lease.ClientID, KeyName: w.Lease.Owner}
			}
			// The iteration's last lease: nothing but Commit follows it.
			if lc, ok := it.tx.(LeaseCommitter); ok && last {
				items, durable, more, err = lc.LeaseAndCommit(n, want, maxBytes, deadline(timeout), holder)
				return items, more, err
			}
			items, durable, more, err = it.tx.Lease(n, want, maxBytes, deadline(timeout), holder)
			return items, more, err
		},
		func(w *Request, n int32, items []queue.LeasedItem) {
			mode := Durable
			if durable {
				mode = DurableItems
			}
			w.Lease.Result = queue.LeaseResult{Partition: n, Items: items}
			e.Loop.Consumers.leased(w.Lease.ClientID, w.Lease.Owner, n, items, it.now, deadline(w.Lease.LeaseTimeout))
			it.reply(w, mode)
		}, it.info.Ordered)
}

// noReply marks a request the backend answers itself (Housekeeping.Run's
// answered, Tx.Reload's done) or whose reply Retry already queued.
const noReply ReplyMode = 255

// handle runs one request: its result goes into its op, and the mode says
// when its reply may leave. Each op has its method (handleProduce and the
// others below); a mode returned with an error is not used.
func (e *Engine) handle(it *pass, r *Request) (ReplyMode, error) {
	switch op := r.Op.(type) {
	case *produceOp:
		return e.handleProduce(it, op)
	case *completeOp:
		if r.Lease != nil {
			return e.handleCompleteThenLease(it, r, op)
		}
		return e.handleComplete(it, op)
	case *retryOp:
		return e.handleRetry(it, r, op)
	case *renewOp:
		return e.handleRenew(it, op)
	case *importOp:
		return e.handleImport(it, op)
	case *redriveOp:
		return e.handleRedrive(it, op)
	case *receivedOp:
		return e.handleReceived(it, op)
	case *deleteOp:
		return e.handleDelete(it, op)
	case *clearOp:
		return e.handleClear(it, op)
	case *editOp:
		return e.handleEdit(it, op)
	case *statsOp:
		return e.handleStats(it, op)
	case *scheduledOp:
		return e.handleScheduled(it, op)
	case *errorGroupsOp:
		return e.handleErrorGroups(it, op)
	case *reloadOp:
		return e.handleReload(it, r)
	case *doOp:
		return Durable, op.f(it.tx, it.now)
	case Housekeeping:
		return e.handleHousekeeping(it, r, op)
	}
	return 0, fmt.Errorf("queue '%s': unknown request %T", it.info.Name, r.Op)
}

// handleProduce runs a produce (Engine.Produce): its items go to the
// partition with the fewest ready items, or to their group's.
func (e *Engine) handleProduce(it *pass, op *produceOp) (ReplyMode, error) {
	// The service refuses these times; checked again here so that one
	// request's bad time fails that request, not the iteration's commit.
	copied := false
	for i, pi := range op.items {
		if !queue.TimeInRange(pi.EnqueueAt) {
			return 0, queue.CheckTime("items["+strconv.Itoa(i)+"].enqueue_at", pi.EnqueueAt)
		}
		if queue.EnqueueNow(pi.EnqueueAt, it.now) && !pi.EnqueueAt.IsZero() {
			if !copied { // the caller's slice stays as it gave it
				op.items, copied = slices.Clone(op.items), true
			}
			op.items[i].EnqueueAt = time.Time{} // ready now: not scheduled
		}
	}
	n, err := e.produceTo(it)
	if err != nil {
		return 0, err
	}
	if d, ok := it.tx.(DeduplicationLimiter); ok {
		if err := d.AdmitDeduplication(op.items); err != nil {
			return 0, err
		}
	}
	expire := queue.ExpireDeadline(it.info, it.now)
	for _, part := range splitByGroup(op.items, func(pi *queue.ProduceItem) string { return pi.Group }, n, it.info.Partitions) {
		if err := it.tx.Produce(part.n, part.items, expire); err != nil {
			return 0, err
		}
		for _, pi := range part.items {
			if pi.EnqueueAt.IsZero() {
				it.ready[part.n]++
			}
		}
	}
	return Durable, nil
}

// handleComplete runs a complete (Engine.Complete).
func (e *Engine) handleComplete(it *pass, op *completeOp) (ReplyMode, error) {
	xs, err := it.leased(op.partition, op.ids)
	if err != nil {
		return 0, err
	}
	if err := it.tx.Complete(xs); err != nil {
		return 0, err
	}
	for _, x := range xs {
		it.redriven(x, outcomeCompleted)
	}
	e.Loop.Consumers.ended(op.partition, op.ids...)
	if e.completed != nil {
		for _, x := range xs {
			e.completed(x.Attempts)
		}
	}
	return Undoable, nil
}

// handleCompleteThenLease runs a lease that completes first (Engine.Lease
// with LeaseParams.Complete): the completes exactly as a complete's (an
// error changes nothing and answers the lease), then the lease joins the
// waiters that this iteration serves (iterate answers it in this
// iteration, with or without items, unless it waits after its completes:
// LeaseWait.WaitAfterComplete). A client_id already waiting is refused
// before anything is completed.
func (e *Engine) handleCompleteThenLease(it *pass, r *Request, op *completeOp) (ReplyMode, error) {
	if e.Loop.Waiters.waiting(r.Lease.ClientID, r.Lease.Owner) {
		return 0, errDuplicateClient
	}
	if _, err := e.handleComplete(it, op); err != nil {
		return 0, err
	}
	if err := e.Loop.Waiters.add(r, it.now); err != nil {
		return 0, fmt.Errorf("queue '%s': lease after its completes: %w", it.info.Name, err) // checked above
	}
	e.Loop.Consumers.seen(r.Lease.ClientID, r.Lease.Owner, it.now)
	r.Lease.completed = true
	if r.Lease.WaitAfterComplete {
		it.waiting++
	} else {
		it.joined = append(it.joined, r)
	}
	return noReply, nil
}

// handleRenew runs a renew (Engine.Renew).
func (e *Engine) handleRenew(it *pass, op *renewOp) (ReplyMode, error) {
	if err := queue.CheckPartition(it.info.Name, it.info.Partitions, op.partition); err != nil {
		return 0, err
	}
	deadline, err := queue.CheckRenew(it.info, op.partition, op.ids, op.timeout, it.now, func(id uint64) bool {
		_, ok := it.live(op.partition, id)
		return ok
	})
	if err != nil {
		return 0, err
	}
	xs := make([]Item, len(op.ids))
	op.out = make([]time.Time, len(op.ids))
	for i, id := range op.ids {
		xs[i], _ = it.tx.Item(op.partition, id)
		op.out[i] = queue.FromNanos(deadline)
	}
	holders := e.Loop.Consumers.renewed(op.partition, op.ids, deadline)
	return Consume, it.tx.Renew(xs, deadline, holders)
}

// handleImport runs an import (Engine.Import; importItems).
func (e *Engine) handleImport(it *pass, op *importOp) (ReplyMode, error) {
	var err error
	op.out, err = e.importItems(it, op)
	it.ready = nil
	return Durable, err
}

// handleRedrive runs a redrive into the queue (Engine.TakeRedriven).
func (e *Engine) handleRedrive(it *pass, op *redriveOp) (ReplyMode, error) {
	n, err := e.produceTo(it)
	if err != nil {
		return 0, err
	}
	// The redriven item's body: what its producer gave, the redrive
	// counted; the dead item's history fields stay with the dead item.
	items := make([]queue.RedriveItem, len(op.items))
	for i, ri := range op.items {
		b := ri.Body
		items[i] = queue.RedriveItem{SourceKey: ri.SourceKey, Errors: ri.Errors, Group: ri.Group, DeadKey: ri.DeadKey, Body: queue.ItemBody{Reference: b.Reference,
			Kind: b.Kind, Encoding: b.Encoding, Payload: b.Payload, Attributes: b.Attributes, RedriveCount: b.RedriveCount + 1}}
	}
	expire := queue.ExpireDeadline(it.info, it.now)
	for _, part := range splitByGroup(items, func(ri *queue.RedriveItem) string { return ri.Group }, n, it.info.Partitions) {
		if err := it.tx.Redrive(part.n, part.items, expire); err != nil {
			return 0, err
		}
		it.ready[part.n] += len(part.items)
	}
	return Durable, nil
}

// handleDelete runs a delete (Engine.Delete, Engine.DeleteDead).
func (e *Engine) handleDelete(it *pass, op *deleteOp) (ReplyMode, error) {
	for _, ref := range op.refs {
		if err := queue.CheckPartition(it.info.Name, it.info.Partitions, ref.Partition); err != nil {
			return 0, err
		}
	}
	if !op.exceptLeased {
		for _, ref := range op.refs {
			e.Loop.Consumers.ended(ref.Partition, ref.ID)
		}
	}
	var err error
	op.n, err = it.tx.Delete(op.refs, op.exceptLeased)
	it.ready = nil
	return Durable, err
}

// handleClear runs a clear (Engine.Clear).
func (e *Engine) handleClear(it *pass, op *clearOp) (ReplyMode, error) {
	it.ready = nil
	if op.p.Destructive {
		e.Loop.Consumers.endedAll()
	}
	return Durable, it.tx.Clear(op.p)
}

// handleEdit runs an edit of a dead item (Engine.EditDead).
func (e *Engine) handleEdit(it *pass, op *editOp) (ReplyMode, error) {
	if err := queue.CheckPartition(it.info.Name, it.info.Partitions, op.ref.Partition); err != nil {
		return 0, err
	}
	var err error
	op.out, err = it.tx.Edit(op.ref, op.edit)
	return Durable, err
}

// handleHousekeeping runs a backend's own work (Housekeeping): noReply
// when Run answered r itself.
func (e *Engine) handleHousekeeping(it *pass, r *Request, op Housekeeping) (ReplyMode, error) {
	answered, err := op.Run(it.now, r)
	// A backend's own request may change the ready counts in ways the
	// engine does not follow.
	it.ready = nil
	if err != nil || !answered {
		return Durable, err
	}
	return noReply, nil
}

// importItems runs an import (see Engine.Import): the items whose source_id
// the partition holds already, or an earlier item of the call holds, are
// answered with that copy; the others are inserted, leased (until their
// lease deadline, or for lease_timeout from now), scheduled (enqueue_at in
// the future) or ready, keeping their attempts, created_at and expire
// deadline (or expiring after expire_timeout from now). An item with a
// group must be imported into its group's partition (queue.GroupPartition;
// else apierr.Invalid, nothing imported).
func (e *Engine) importItems(it *pass, op *importOp) ([]queue.Item, error) {
	n := op.partition
	if err := queue.CheckPartition(it.info.Name, it.info.Partitions, n); err != nil {
		return nil, err
	}
	for i := range op.items { // as a produce's enqueue_at
		if err := queue.CheckItemTimes(i, &op.items[i]); err != nil {
			return nil, err
		}
		// A group lives in one partition (itemgroups.go): an item imported
		// elsewhere would be a second place of its group.
		if g := op.items[i].Meta.Group; g != "" {
			if p := queue.GroupPartition(g, it.info.Partitions); p != n {
				return nil, apierr.Invalidf("invalid items[%d].group; the items of group '%s' go to partition %d of queue '%s', not %d: import them there",
					i, g, p, it.info.Name, n)
			}
		}
	}
	keys := make([]string, len(op.items))
	first := map[string]int{} // source key -> the first item of the call with it
	var wanted []string
	for i, si := range op.items {
		if si.Body.SourceID == "" {
			continue
		}
		keys[i] = queue.ImportKey(n, si.Body.SourceID)
		if _, ok := first[keys[i]]; !ok {
			first[keys[i]] = i
			wanted = append(wanted, keys[i])
		}
	}
	held := map[string]queue.Item{}
	if len(wanted) > 0 {
		var err error
		if held, err = it.tx.Held(n, wanted); err != nil {
			return nil, err
		}
	}
	out := make([]queue.Item, len(op.items))
	var news []queue.Item
	var pos []int // the call's index of each new item
	for i, si := range op.items {
		if k := keys[i]; k != "" && (first[k] != i || held[k].Meta.ID != 0) {
			continue
		}
		m := queue.ItemMeta{Attempts: si.Meta.Attempts, SourceKey: keys[i], Group: si.Meta.Group,
			CreatedAt: queue.FromNanos(queue.Nanos(si.Meta.CreatedAt)), ExpireDeadline: queue.FromNanos(queue.Nanos(si.Meta.ExpireDeadline))}
		if m.CreatedAt.IsZero() {
			m.CreatedAt = queue.FromNanos(it.now)
		}
		if m.ExpireDeadline.IsZero() {
			m.ExpireDeadline = queue.FromNanos(queue.ExpireDeadline(it.info, it.now))
		}
		switch {
		case si.Meta.Leased:
			m.Leased, m.LeaseDeadline = true, queue.FromNanos(queue.Nanos(si.Meta.LeaseDeadline))
			if m.LeaseDeadline.IsZero() {
				m.LeaseDeadline = queue.FromNanos(it.now + int64(it.info.LeaseTimeout))
			}
		case queue.Nanos(si.Meta.EnqueueAt) > it.now:
			m.EnqueueAt = queue.FromNanos(queue.Nanos(si.Meta.EnqueueAt))
		}
		news = append(news, queue.Item{Partition: n, Meta: m, Body: si.Body, Errors: si.Errors})
		pos = append(pos, i)
	}
	if len(news) > 0 {
		stored, err := it.tx.Import(n, news)
		if err != nil {
			return nil, err
		}
		for j, i := range pos {
			out[i] = stored[j]
		}
	}
	for i, k := range keys {
		switch {
		case k == "":
		case held[k].Meta.ID != 0:
			out[i] = held[k]
		case first[k] != i:
			out[i] = out[first[k]]
		}
	}
	return out, nil
}

// partItems are the items of a produce or redrive that go to partition n.
type partItems[T any] struct {
	n     int32
	items []T
}

// splitByGroup returns items by partition, each part in request order:
// those with a group (group returns it) go to their group's partition
// (queue.GroupPartition), the others to n. The common cases (no group, one
// partition) return items as they are, in one part.
func splitByGroup[T any](items []T, group func(*T) string, n, partitions int32) []partItems[T] {
	grouped := false
	for i := range items {
		if group(&items[i]) != "" {
			grouped = true
			break
		}
	}
	if partitions <= 1 || !grouped {
		return []partItems[T]{{n, items}}
	}
	var parts []partItems[T]
	at := map[int32]int{}
	for i := range items {
		p := n
		if g := group(&items[i]); g != "" {
			p = queue.GroupPartition(g, partitions)
		}
		j, ok := at[p]
		if !ok {
			j = len(parts)
			at[p] = j
			parts = append(parts, partItems[T]{n: p})
		}
		parts[j].items = append(parts[j].items, items[i])
	}
	return parts
}

// produceTo returns the partition a produce (or redrive) request goes to:
// the one with the fewest ready items (FewestReady), and moves the
// cursor past it. The counts are read once per iteration and kept up to
// date with the iteration's produces.
func (e *Engine) produceTo(it *pass) (int32, error) {
	if it.ready == nil {
		ready, err := it.tx.ReadyCounts()
		if err != nil {
			return 0, err
		}
		it.ready = ready
	}
	n := FewestReady(it.ready, e.produceNext)
	e.produceNext = n + 1
	return int32(n), nil
}

// handleReceived runs a DeleteReceived: for each receipt, the item under
// its lease, or the one it became when that lease ended, if it has not
// been leased since (same attempts, and ready or scheduled: Tx.Requeued).
func (e *Engine) handleReceived(it *pass, op *receivedOp) (ReplyMode, error) {
	if err := queue.CheckPartition(it.info.Name, it.info.Partitions, op.partition); err != nil {
		return 0, err
	}
	op.deleted = make([]bool, len(op.rs))
	for i, r := range op.rs {
		ok, err := e.deleteReceipt(it, op.partition, r)
		if err != nil {
			return 0, err
		}
		op.deleted[i] = ok
	}
	return Undoable, nil
}

// deleteReceipt deletes the item of one receipt (handleReceived).
func (e *Engine) deleteReceipt(it *pass, n int32, r queue.Receipt) (bool, error) {
	x, ok := it.tx.Item(n, r.ID)
	if ok {
		// Ids change only at a requeue: an item leased under r.ID is
		// under r's lease.
		ok = x.Leased
	} else if r.FirstID != 0 {
		var err error
		if x, ok, err = it.tx.Requeued(n, r.FirstID); err != nil {
			return false, err
		}
		ok = ok && x.ID > r.ID && x.Attempts == r.Attempts
	}
	if !ok {
		return false, nil
	}
	if err := it.tx.Complete([]Item{x}); err != nil {
		return false, err
	}
	it.redriven(x, outcomeCompleted)
	e.Loop.Consumers.ended(n, x.ID)
	it.ready = nil
	if e.completed != nil {
		e.completed(x.Attempts)
	}
	return true, nil
}

// live returns item id of partition n when it is under a live lease.
func (it *pass) live(n int32, id uint64) (Item, bool) {
	x, ok := it.tx.Item(n, id)
	return x, ok && x.Leased && x.LeaseDeadline > it.now
}

// leased returns the items of ids, each under a live lease in partition n,
// or an apierr.Invalid error naming the first that is not (CheckLeased).
func (it *pass) leased(n int32, ids []uint64) ([]Item, error) {
	if err := queue.CheckPartition(it.info.Name, it.info.Partitions, n); err != nil {
		return nil, err
	}
	xs := make([]Item, 0, len(ids))
	err := queue.CheckLeased(it.info.Name, n, ids, func(id uint64) bool {
		x, ok := it.live(n, id)
		xs = append(xs, x)
		return ok
	})
	return xs, err
}

// handleRetry runs a retry (Engine.Retry): it ends the leases of op's
// items and queues the reply itself (noReply): once the dead items' moves
// ended when any is moving.
func (e *Engine) handleRetry(it *pass, r *Request, op *retryOp) (ReplyMode, error) {
	ids := make([]uint64, len(op.items))
	for i, ri := range op.items {
		if !queue.TimeInRange(ri.RetryAt) { // as a produce's enqueue_at
			return 0, queue.CheckTime("items["+strconv.Itoa(i)+"].retry_at", ri.RetryAt)
		}
		ids[i] = ri.ID
	}
	xs, err := it.leased(op.partition, ids)
	if err != nil {
		return 0, err
	}
	// Attempt history: the stored histories of the items that record an
	// error, and of the dead items of a dead-letter queue whose attempt
	// counts (a DLQ attempt, recorded with or without an error).
	var errs []Item
	for i, ri := range op.items {
		if ri.Error != "" || dlqAttempt(xs[i], ri.Release) {
			errs = append(errs, xs[i])
		}
	}
	history, err := it.histories(errs)
	if err != nil {
		return 0, err
	}
	outcomes := make([]queue.RetryOutcome, len(op.items))
	var moving []Item
	for i, ri := range op.items {
		x := xs[i]
		var h *queue.ItemErrors
		switch {
		case dlqAttempt(x, ri.Release):
			hh := queue.RecordDeadLetterAttempt(history[x.ID], ri.Error, it.now)
			h = &hh
		case ri.Error != "" && !x.DeadCopy:
			hh := queue.RecordError(history[x.ID], x.Attempts, ri.Error, it.now)
			h = &hh
		}
		e := queue.Ending{Attempts: x.Attempts, Reason: queue.ReasonExplicit}
		if !ri.Dead {
			e = queue.EndLease(it.info, x.Attempts, x.Expire, ri.Release, ri.RetryAt, it.now)
		}
		if e.Reason == "" {
			outcomes[i] = e.Requeued(0)
			err = it.tx.Requeue(x, e, h, &outcomes[i].NewID)
			it.requeued(x, e.Attempts)
		} else {
			outcomes[i] = queue.KillOutcome(it.info, e.Reason, e.Attempts)
			x.Attempts = e.Attempts
			var m bool
			if m, err = it.tx.Kill(x, e.Reason, h); m {
				moving = append(moving, x)
			}
			it.redriven(x, outcomeDeadAgain)
		}
		if err != nil {
			return 0, err
		}
		outcomes[i].ID = ri.ID
	}
	op.out = outcomes
	e.Loop.Consumers.ended(op.partition, ids...)
	it.replies = append(it.replies, Reply{R: r, Mode: Consume, Moving: moving})
	return noReply, nil
}

// dlqAttempt reports whether the end of x's lease is a DLQ attempt to
// record: x is a dead item in a dead-letter queue and the lease was not
// released (a released lease is no attempt).
func dlqAttempt(x Item, release bool) bool { return x.DeadCopy && !release }

// histories returns the stored attempt histories of those of xs that may
// have one, by id.
func (it *pass) histories(xs []Item) (map[uint64]queue.ItemErrors, error) {
	var read []Item
	for _, x := range xs {
		if x.HasHistory {
			read = append(read, x)
		}
	}
	out := make(map[uint64]queue.ItemErrors, len(read))
	if len(read) == 0 {
		return out, nil
	}
	hs, err := it.tx.Histories(read)
	for i, x := range read {
		if err == nil {
			out[x.ID] = hs[i]
		}
	}
	return out, err
}

// lifecycle ends the leases that expired (a failed attempt, recorded in the
// item's history, or in its DLQ attempt history for a dead item in a
// dead-letter queue) and kills the items past their expire deadline that are
// not leased (a leased one dies when its lease ends).
func (e *Engine) lifecycle(it *pass) error {
	leases, expired, err := it.tx.Due()
	if err != nil {
		return err
	}
	it.ended = len(leases) > 0 || len(expired) > 0
	if len(leases) > 0 {
		history, err := it.histories(leases)
		if err != nil {
			return err
		}
		msg := queue.LeaseExpiredError(it.info.LeaseTimeout)
		for _, x := range leases {
			e.Loop.Consumers.ended(x.Partition, x.ID)
			var h queue.ItemErrors
			if x.DeadCopy {
				h = queue.RecordDeadLetterAttempt(history[x.ID], msg, it.now)
			} else {
				h = queue.RecordError(history[x.ID], x.Attempts, msg, it.now)
			}
			e := queue.EndLease(it.info, x.Attempts, x.Expire, false, time.Time{}, it.now)
			if e.Reason == "" {
				err = it.tx.Requeue(x, e, &h, nil)
				it.requeued(x, e.Attempts)
			} else {
				_, err = it.tx.Kill(x, e.Reason, &h)
				it.redriven(x, outcomeDeadAgain)
			}
			if err != nil {
				return err
			}
		}
	}
	for _, x := range expired {
		if _, err := it.tx.Kill(x, queue.ReasonExpired, nil); err != nil {
			return err
		}
		it.redriven(x, outcomeDeadAgain)
	}
	return nil
}

// isClient reports whether err is the client's (an apierr error): it
// answers its request and changes nothing.
func isClient(err error) bool {
	_, ok := apierr.As(err)
	return ok
}

// dedupSet returns the deduplication ids of the produces among reqs,
// sorted and distinct (Deduplicator).
func dedupSet(reqs []*Request) []string {
	var ids []string
	for _, r := range reqs {
		if op, ok := r.Op.(*produceOp); ok {
			for _, pi := range op.items {
				if pi.DeduplicationID != "" {
					ids = append(ids, pi.DeduplicationID)
				}
			}
		}
	}
	slices.Sort(ids)
	return slices.Compact(ids)
}

// lockSet returns the ids the requests name (complete, retry, renew,
// delete-received, delete, Do) and the union of their clears, for Tx.Lock.
func lockSet(reqs []*Request) ([]uint64, *queue.ClearParams) {
	var ids []uint64
	var clr *queue.ClearParams
	for _, r := range reqs {
		switch op := r.Op.(type) {
		case *completeOp:
			ids = append(ids, op.ids...)
		case *retryOp:
			for _, ri := range op.items {
				ids = append(ids, ri.ID)
			}
		case *renewOp:
			ids = append(ids, op.ids...)
		case *receivedOp:
			for _, r := range op.rs {
				ids = append(ids, r.ID)
			}
		case *deleteOp:
			for _, ref := range op.refs {
				ids = append(ids, ref.ID)
			}
		case *doOp:
			ids = append(ids, op.ids...)
		case *clearOp:
			if clr == nil {
				clr = &queue.ClearParams{}
			}
			clr.Destructive = clr.Destructive || op.p.Destructive
			clr.Queue = clr.Queue || op.p.Queue
			clr.Scheduled = clr.Scheduled || op.p.Scheduled
		}
	}
	return ids, clr
}

package queuetest

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/apierr"
	"github.com/styxq/styx/internal/queue"
)

// cycleRows check the item cycle: leases (order, waiting, exclusivity,
// expiry), completes and deletes by receipt, retries and their outcomes,
// dead-letter queues, expire deadlines, scheduled items, renewals and the
// attempt history.
var cycleRows = []row{
	{"FIFOWithinPartition", func(e *env) {
		q := e.create("q", nil)
		e.produce(q, "a", "b", "c")
		e.produce(q, "d")
		e.produce(q, "e", "f", "g")
		first := e.lease(q, 3)
		require.Equal(e.t, []string{"a", "b", "c"}, payloads(first.Items))
		rest := e.lease(q, 10)
		require.Equal(e.t, []string{"d", "e", "f", "g"}, payloads(rest.Items))
		ids := slices.Concat(first.Items, rest.Items)
		for i := 1; i < len(ids); i++ {
			require.Greater(e.t, ids[i].ID, ids[i-1].ID, "ids increase in FIFO order")
		}
	}},
	{"FIFOWithinEachPartition", func(e *env) {
		// Which partition an item goes to is not asserted (on PostgreSQL
		// each node places from its own view; ADR 0014): only the order
		// within each.
		q := e.create("q", func(i *queue.QueueInfo) { i.Partitions = 3 })
		for i := range 12 {
			e.produce(q, fmt.Sprintf("%02d", i))
		}
		byPart := map[int32][]string{}
		for n := 0; n < 12; {
			res := e.lease(q, 2)
			byPart[res.Partition] = append(byPart[res.Partition], payloads(res.Items)...)
			n += len(res.Items)
		}
		for p, got := range byPart {
			require.True(e.t, slices.IsSorted(got), "partition %d handed out %v", p, got)
		}
		e.leaseNone(q)
	}},
	{"WaitingLeaseServedByProduce", func(e *env) {
		q := e.create("q", nil)
		wait := e.leaseWaiting(q, 5)
		// client_id is unique among the queue's waiting leases.
		_, err := q.Lease(e.ctx, queue.LeaseParams{BatchSize: 1, ClientID: "w", Timeout: time.Minute})
		ae, ok := apierr.As(err)
		require.True(e.t, ok, "duplicate client_id: %v", err)
		require.Equal(e.t, apierr.Invalid, ae.Code)
		require.Equal(e.t, "duplicate client id; a client cannot make multiple leased requests to the same queue", ae.Message)
		e.produce(q, "a")
		res, err := wait()
		require.NoError(e.t, err)
		require.Equal(e.t, []string{"a"}, payloads(res.Items))
	}},
	{"WaitingLeaseTimesOut", func(e *env) {
		q := e.create("q", nil)
		errc := make(chan error, 1)
		ctx, cancel := context.WithTimeout(e.ctx, waitTimeout)
		defer cancel()
		go func() {
			_, err := q.Lease(ctx, queue.LeaseParams{BatchSize: 1, ClientID: "w", Timeout: 5 * time.Second})
			errc <- err
		}()
		e.waitLeaseWaiting(q, 1)
		e.advance(5*time.Second-time.Millisecond, q)
		select {
		case err := <-errc:
			require.FailNow(e.t, "lease answered before its request timeout", "%v", err)
		default:
		}
		e.advance(time.Millisecond, q)
		err := <-errc
		ae, ok := apierr.As(err)
		require.True(e.t, ok, "%v", err)
		require.Equal(e.t, apierr.Retry, ae.Code)
		require.Equal(e.t, "request timeout; no items are in the queue, try again", ae.Message)
		require.ErrorIs(e.t, err, queue.ErrNoItems, "the doors recognise it by its sentinel")
		e.waitLeaseWaiting(q, 0)
	}},
	{"LeaseIsExclusive", func(e *env) {
		q := e.create("q", nil)
		e.produce(q, "a")
		_, x := e.leaseOne(q, "a")
		require.Equal(e.t, int32(1), x.Attempts)
		require.True(e.t, x.LeaseDeadline.Equal(Start.Add(leaseTimeout)), "lease deadline %v", x.LeaseDeadline)
		e.leaseNone(q)
		// Still exclusive just before the lease ends.
		e.advance(leaseTimeout-time.Millisecond, q)
		e.leaseNone(q)
		c, _ := e.counts(q)
		require.Equal(e.t, counts{total: 1, leased: 1}, c)
	}},
	{"LeaseExpiryCountsAttemptAndRequeues", func(e *env) {
		q := e.create("q", nil)
		e.produce(q, "a", "b")
		part, x := e.leaseOne(q, "a")
		e.advance(leaseTimeout, q)
		// The expired item went to the tail: b first, then a again with
		// its second attempt.
		e.leaseOne(q, "b")
		_, again := e.leaseOne(q, "a")
		require.Equal(e.t, int32(2), again.Attempts)
		require.NotEqual(e.t, x.ID, again.ID, "a requeued item gets a new id")
		// The old lease is gone.
		requireNotLeased(e.t, q.Complete(e.ctx, part, []uint64{x.ID}), x.ID)
		var a queue.Item
		for _, item := range e.items(q) {
			if string(item.Body.Payload) == "a" {
				a = item
			}
		}
		want := queue.LeaseExpiredError(leaseTimeout)
		require.Equal(e.t, "lease expired after 10s", want)
		require.Equal(e.t, want, a.Errors.LastError)
		require.Equal(e.t, []string{"1:" + want}, errorTexts(a.Errors))
		require.True(e.t, a.Errors.Errors[0].At.Equal(Start.Add(leaseTimeout)), "recorded at %v", a.Errors.Errors[0].At)
	}},
	{"CompleteRemoves", func(e *env) {
		q := e.create("q", nil)
		e.produce(q, "a", "b")
		res := e.lease(q, 2)
		require.Len(e.t, res.Items, 2)
		require.NoError(e.t, q.Complete(e.ctx, res.Partition, []uint64{res.Items[0].ID}))
		items := e.items(q)
		require.Len(e.t, items, 1)
		require.Equal(e.t, "b", string(items[0].Body.Payload))
		c, _ := e.counts(q)
		require.Equal(e.t, counts{total: 1, leased: 1}, c)
		// Completed items are gone: a second complete is refused.
		requireNotLeased(e.t, q.Complete(e.ctx, res.Partition, []uint64{res.Items[0].ID}), res.Items[0].ID)
		require.NoError(e.t, q.Complete(e.ctx, res.Partition, []uint64{res.Items[1].ID}))
		require.Empty(e.t, e.items(q))
	}},
	{"DeleteReceivedUnlessLeasedSince", func(e *env) {
		q, dlq := e.withDLQ(func(i *queue.QueueInfo) { i.MaxAttempts = 3 })
		receipt := func(x queue.LeasedItem) queue.Receipt {
			require.NotZero(e.t, x.FirstID)
			return queue.Receipt{ID: x.ID, FirstID: x.FirstID, Attempts: x.Attempts}
		}
		deleted := func(part int32, r queue.Receipt, want bool) {
			e.t.Helper()
			ok, err := q.DeleteReceived(e.ctx, part, []queue.Receipt{r})
			require.NoError(e.t, err)
			require.Equal(e.t, []bool{want}, ok)
		}
		// Under its lease.
		e.produce(q, "a")
		part, a := e.leaseOne(q, "a")
		require.Equal(e.t, a.ID, a.FirstID, "an item never requeued has its first id")
		deleted(part, receipt(a), true)
		require.Empty(e.t, e.items(q))
		deleted(part, receipt(a), false)
		// After its lease expired, nobody having leased it since: the
		// lease ends in the same iteration as the delete.
		e.produce(q, "b")
		part, b := e.leaseOne(q, "b")
		e.clk.Advance(leaseTimeout)
		deleted(part, receipt(b), true)
		require.Empty(e.t, e.items(q))
		// After a retry ended the lease, and after a second requeue.
		e.produce(q, "c")
		part, c := e.leaseOne(q, "c")
		out, err := q.Retry(e.ctx, part, []queue.RetryItem{{ID: c.ID}})
		require.NoError(e.t, err)
		require.NotEqual(e.t, c.ID, out[0].NewID)
		deleted(part, receipt(c), true)
		require.Empty(e.t, e.items(q))
		// Leased again since: the old receipt deletes nothing, whether the
		// new lease is live or has ended too; the new one deletes it.
		e.produce(q, "d")
		part, d1 := e.leaseOne(q, "d")
		e.advance(leaseTimeout, q)
		_, d2 := e.leaseOne(q, "d")
		require.Equal(e.t, d1.FirstID, d2.FirstID, "the first id stays across requeues")
		require.NotEqual(e.t, d1.ID, d2.ID)
		deleted(part, receipt(d1), false)
		e.advance(leaseTimeout, q)
		deleted(part, receipt(d1), false)
		c0, _ := e.counts(q)
		require.Equal(e.t, counts{total: 1, ready: 1, failures: 1}, c0)
		deleted(part, receipt(d2), true)
		c0, _ = e.counts(q)
		require.Equal(e.t, counts{}, c0)
		// A dead-lettered item is not deleted from its dead-letter queue.
		e.produce(q, "e")
		var x queue.LeasedItem
		for range 3 { // max_attempts 3: the third lease's end kills it
			part, x = e.leaseOne(q, "e")
			e.advance(leaseTimeout, q)
		}
		e.eventuallyItems(dlq, 1)
		// With the two-phase move (ADR 0023) the source keeps the dying
		// record until the move's second step.
		e.eventuallyItems(q, 0)
		deleted(part, receipt(x), false)
		require.Len(e.t, e.items(dlq), 1)
		// Several receipts in one call, the same one twice among them:
		// the second finds the item gone.
		e.produce(q, "f", "g")
		res := e.lease(q, 2)
		require.Len(e.t, res.Items, 2)
		f, g := receipt(res.Items[0]), receipt(res.Items[1])
		e.advance(leaseTimeout, q)
		ok, err := q.DeleteReceived(e.ctx, res.Partition, []queue.Receipt{f, g, f})
		require.NoError(e.t, err)
		require.Equal(e.t, []bool{true, true, false}, ok)
		require.Empty(e.t, e.items(q))
		// A partition the queue lacks is the client's error.
		_, err = q.DeleteReceived(e.ctx, 3, []queue.Receipt{receipt(x)})
		ae, isClient := apierr.As(err)
		require.True(e.t, isClient, "want a client error, got %v", err)
		require.Equal(e.t, apierr.Invalid, ae.Code)
	}},
	{"NotLeasedIsInvalid", func(e *env) {
		q := e.create("q", nil)
		e.produce(q, "a", "b")
		part, x := e.leaseOne(q, "a")
		ready := e.items(q)
		require.Len(e.t, ready, 2)
		var readyID uint64
		for _, item := range ready {
			if !item.Meta.Leased {
				readyID = item.Meta.ID
			}
		}
		require.NotZero(e.t, readyID)
		unknown := x.ID + 1000
		for _, id := range []uint64{readyID, unknown} {
			requireNotLeased(e.t, q.Complete(e.ctx, part, []uint64{id}), id)
			_, err := q.Retry(e.ctx, part, []queue.RetryItem{{ID: id}})
			requireNotLeased(e.t, err, id)
			_, err = q.Renew(e.ctx, part, []uint64{id}, 0)
			requireNotLeased(e.t, err, id)
		}
		// A request with one bad id changes nothing: the leased item is
		// still leased.
		requireNotLeased(e.t, q.Complete(e.ctx, part, []uint64{x.ID, readyID}), readyID)
		c, _ := e.counts(q)
		require.Equal(e.t, counts{total: 2, ready: 1, leased: 1}, c)
		require.NoError(e.t, q.Complete(e.ctx, part, []uint64{x.ID}))
	}},
	{"RetryRequeuesAtTail", func(e *env) {
		q := e.create("q", nil)
		e.produce(q, "a", "b")
		part, x := e.leaseOne(q, "a")
		out, err := q.Retry(e.ctx, part, []queue.RetryItem{{ID: x.ID, Error: "boom"}})
		require.NoError(e.t, err)
		require.Len(e.t, out, 1)
		require.Equal(e.t, queue.OutcomeRequeued, out[0].Outcome)
		require.Equal(e.t, x.ID, out[0].ID)
		require.Equal(e.t, int32(1), out[0].Attempts)
		require.NotZero(e.t, out[0].NewID)
		require.NotEqual(e.t, x.ID, out[0].NewID)
		c, _ := e.counts(q)
		require.Equal(e.t, counts{total: 2, ready: 2, failures: 1}, c)
		e.leaseOne(q, "b")
		_, again := e.leaseOne(q, "a")
		require.Equal(e.t, out[0].NewID, again.ID)
		require.Equal(e.t, int32(2), again.Attempts)
	}},
	{"RetryReleaseDoesNotCountAttempt", func(e *env) {
		q := e.create("q", func(i *queue.QueueInfo) { i.MaxAttempts = 1 })
		e.produce(q, "a")
		part, x := e.leaseOne(q, "a")
		out, err := q.Retry(e.ctx, part, []queue.RetryItem{{ID: x.ID, Release: true}})
		require.NoError(e.t, err)
		require.Equal(e.t, queue.OutcomeReleased, out[0].Outcome)
		require.Equal(e.t, int32(0), out[0].Attempts)
		// max_attempts 1 does not kill it: the released lease was not an
		// attempt.
		_, again := e.leaseOne(q, "a")
		require.Equal(e.t, int32(1), again.Attempts)
	}},
	{"RetryAtSchedules", func(e *env) {
		q := e.create("q", nil)
		e.produce(q, "a")
		part, x := e.leaseOne(q, "a")
		at := Start.Add(time.Minute)
		out, err := q.Retry(e.ctx, part, []queue.RetryItem{{ID: x.ID, RetryAt: at}})
		require.NoError(e.t, err)
		require.Equal(e.t, queue.OutcomeScheduled, out[0].Outcome)
		require.True(e.t, out[0].RetryAt.Equal(at), "retry_at %v", out[0].RetryAt)
		c, _ := e.counts(q)
		require.Equal(e.t, counts{total: 1, scheduled: 1, failures: 1}, c)
		sched, err := q.Scheduled(e.ctx, 0, 0, 10)
		require.NoError(e.t, err)
		require.Len(e.t, sched, 1)
		require.Equal(e.t, out[0].NewID, sched[0].Meta.ID)
		e.leasableAfter(q, time.Minute)
		_, again := e.leaseOne(q, "a")
		require.Equal(e.t, int32(2), again.Attempts)
	}},
	{"RetryDeadGoesToDeadQueue", func(e *env) {
		q, dlq := e.withDLQ(nil)
		e.produce(q, "a")
		out := e.deadLetter(q, "a", "bad input")
		require.Equal(e.t, queue.OutcomeDeadLettered, out.Outcome)
		require.Equal(e.t, queue.ReasonExplicit, out.Reason)
		require.Equal(e.t, "dlq", out.DeadQueue)
		require.Equal(e.t, int32(1), out.Attempts)
		require.Zero(e.t, out.NewID)
		// Taken by the dead-letter queue when Retry returns.
		dead := e.items(dlq)
		require.Len(e.t, dead, 1)
		d := dead[0]
		require.Equal(e.t, "a", string(d.Body.Payload))
		require.Equal(e.t, "q", d.Body.SourceQueue)
		require.Equal(e.t, queue.ReasonExplicit, d.Body.DeadReason)
		require.True(e.t, d.Body.DeadAt.Equal(Start), "dead_at %v", d.Body.DeadAt)
		require.Equal(e.t, int32(1), d.Meta.Attempts)
		require.Equal(e.t, "bad input", d.Errors.LastError)
		e.eventuallyItems(q, 0)
		e.leaseNone(q)
	}},
	{"RetryDeadWithoutDeadQueueDrops", func(e *env) {
		q := e.create("q", nil)
		e.produce(q, "a")
		out := e.deadLetter(q, "a", "bad input")
		require.Equal(e.t, queue.OutcomeDropped, out.Outcome)
		require.Equal(e.t, queue.ReasonExplicit, out.Reason)
		require.Empty(e.t, out.DeadQueue)
		require.Empty(e.t, e.items(q))
		e.leaseNone(q)
	}},
	{"MaxAttemptsDeadLettersWithHistory", func(e *env) {
		q, dlq := e.withDLQ(func(i *queue.QueueInfo) { i.MaxAttempts = 2 })
		e.produce(q, "a")
		part, x := e.leaseOne(q, "a")
		out, err := q.Retry(e.ctx, part, []queue.RetryItem{{ID: x.ID, Error: "e1"}})
		require.NoError(e.t, err)
		require.Equal(e.t, queue.OutcomeRequeued, out[0].Outcome)
		e.clk.Advance(time.Second)
		part, x = e.leaseOne(q, "a")
		require.Equal(e.t, int32(2), x.Attempts)
		out, err = q.Retry(e.ctx, part, []queue.RetryItem{{ID: x.ID, Error: "e2"}})
		require.NoError(e.t, err)
		require.Equal(e.t, queue.OutcomeDeadLettered, out[0].Outcome)
		require.Equal(e.t, queue.ReasonMaxAttempts, out[0].Reason)
		require.Equal(e.t, int32(2), out[0].Attempts)
		dead := e.items(dlq)
		require.Len(e.t, dead, 1)
		d := dead[0]
		require.Equal(e.t, "q", d.Body.SourceQueue)
		require.Equal(e.t, queue.ReasonMaxAttempts, d.Body.DeadReason)
		require.Equal(e.t, int32(2), d.Meta.Attempts)
		require.Equal(e.t, "e2", d.Errors.LastError)
		require.Equal(e.t, []string{"1:e1", "2:e2"}, errorTexts(d.Errors))
		require.True(e.t, d.Errors.Errors[1].At.Equal(Start.Add(time.Second)))
		e.eventuallyItems(q, 0)
	}},
	{"DeadItemsEnterFewestReadyPartition", func(e *env) {
		// The produce rule, item by item (docs/ARCHITECTURE.md
		// "Partitions"): each dead item of a move goes to the dead-letter
		// queue's partition with the fewest ready items, counting the items
		// placed before it in the same move; ties go to the first partition
		// at or after the one chosen last. With 4, 1, 4 and 0 ready items the
		// first goes to 3 (the only fewest); every tie after it (1 and 3)
		// comes right after a choice of 3, so it is broken from partition 0
		// and goes to 1: 3, 1, 3, 1, 3, whatever the ids and the cursor
		// before the move.
		dlq := e.create("dlq", func(i *queue.QueueInfo) { i.ExpireTimeout = dlqExpire; i.Partitions = 4 })
		q := e.create("q", func(i *queue.QueueInfo) { i.DeadQueue = "dlq"; i.MaxAttempts = 1 })
		for p, n := range []int{4, 1, 4, 0} {
			var items []queue.Item
			for i := range n {
				items = append(items, queue.Item{Body: queue.ItemBody{Kind: "k", Payload: fmt.Appendf(nil, "old%d-%d", p, i)}})
			}
			if n > 0 {
				_, err := dlq.Import(e.ctx, int32(p), items)
				require.NoError(e.t, err)
			}
		}
		e.produce(q, "a", "b", "c", "d", "e")
		res := e.lease(q, 5)
		require.Len(e.t, res.Items, 5)
		retry := make([]queue.RetryItem, len(res.Items))
		for i, x := range res.Items {
			retry[i] = queue.RetryItem{ID: x.ID, Error: "boom"}
		}
		// One retry call: the five die together (max_attempts 1).
		out, err := q.Retry(e.ctx, res.Partition, retry)
		require.NoError(e.t, err)
		for _, o := range out {
			require.Equal(e.t, queue.OutcomeDeadLettered, o.Outcome)
		}
		byPart := map[int32]int{}
		var placed []int32
		for _, item := range e.items(dlq) { // in id order: the order they were placed in
			byPart[item.Partition]++
			if item.Body.SourceQueue == "q" {
				placed = append(placed, item.Partition)
			}
		}
		require.Equal(e.t, []int32{3, 1, 3, 1, 3}, placed)
		require.Equal(e.t, map[int32]int{0: 4, 1: 3, 2: 4, 3: 3}, byPart)
		e.eventuallyItems(q, 0)
	}},
	{"MaxAttemptsByLeaseExpiry", func(e *env) {
		q, dlq := e.withDLQ(func(i *queue.QueueInfo) { i.MaxAttempts = 1 })
		e.produce(q, "a")
		e.leaseOne(q, "a")
		e.advance(leaseTimeout, q)
		d := e.eventuallyItems(dlq, 1)[0]
		require.Equal(e.t, queue.ReasonMaxAttempts, d.Body.DeadReason)
		require.Equal(e.t, "q", d.Body.SourceQueue)
		require.Equal(e.t, int32(1), d.Meta.Attempts)
		require.Equal(e.t, []string{"1:lease expired after 10s"}, errorTexts(d.Errors))
		e.eventuallyItems(q, 0)
		e.leaseNone(q)
	}},
	{"ExpireDeadlineKills", func(e *env) {
		q, dlq := e.withDLQ(func(i *queue.QueueInfo) { i.ExpireTimeout = time.Minute })
		e.produce(q, "a")
		e.advance(time.Minute-time.Millisecond, q)
		require.Empty(e.t, e.items(dlq))
		require.Len(e.t, e.items(q), 1)
		e.advance(time.Millisecond, q)
		d := e.eventuallyItems(dlq, 1)[0]
		require.Equal(e.t, "a", string(d.Body.Payload))
		require.Equal(e.t, queue.ReasonExpired, d.Body.DeadReason)
		require.Equal(e.t, "q", d.Body.SourceQueue)
		require.Equal(e.t, int32(0), d.Meta.Attempts)
		e.eventuallyItems(q, 0)
		e.leaseNone(q)
	}},
	{"ExpiredLeasedItemDiesWhenLeaseEnds", func(e *env) {
		q, dlq := e.withDLQ(func(i *queue.QueueInfo) { i.ExpireTimeout = time.Minute })
		e.produce(q, "a")
		e.advance(time.Minute-time.Second, q)
		part, x := e.leaseOne(q, "a")
		// Past its expire deadline but leased: it lives until the lease
		// ends, and a retry then kills it.
		e.advance(2*time.Second, q)
		require.Empty(e.t, e.items(dlq))
		out, err := q.Retry(e.ctx, part, []queue.RetryItem{{ID: x.ID}})
		require.NoError(e.t, err)
		require.Equal(e.t, queue.OutcomeDeadLettered, out[0].Outcome)
		require.Equal(e.t, queue.ReasonExpired, out[0].Reason)
		require.Equal(e.t, queue.ReasonExpired, e.items(dlq)[0].Body.DeadReason)
	}},
	{"EnqueueAtSchedules", func(e *env) {
		q := e.create("q", nil)
		at := Start.Add(time.Hour)
		require.NoError(e.t, q.Produce(e.ctx, []queue.ProduceItem{{Payload: []byte("later"), EnqueueAt: at}}))
		e.produce(q, "now")
		c, _ := e.counts(q)
		require.Equal(e.t, counts{total: 2, ready: 1, scheduled: 1}, c)
		sched, err := q.Scheduled(e.ctx, 0, 0, 10)
		require.NoError(e.t, err)
		require.Len(e.t, sched, 1)
		require.Equal(e.t, "later", string(sched[0].Body.Payload))
		require.True(e.t, sched[0].Meta.EnqueueAt.Equal(at), "enqueue_at %v", sched[0].Meta.EnqueueAt)
		part, now := e.leaseOne(q, "now")
		require.NoError(e.t, q.Complete(e.ctx, part, []uint64{now.ID}))
		e.leasableAfter(q, time.Hour)
		_, x := e.leaseOne(q, "later")
		require.Equal(e.t, int32(1), x.Attempts)
	}},
	{"EnqueueAtWithinResolutionIsReady", func(e *env) {
		// queue.ScheduleResolution (100ms, Querator's): an enqueue_at less
		// than that ahead enqueues at once, with no enqueue_at; List leaves
		// out the scheduled item, which Scheduled lists.
		q := e.create("q", nil)
		items := []queue.ProduceItem{
			{Payload: []byte("past"), EnqueueAt: Start.Add(-time.Hour)},
			{Payload: []byte("soon"), EnqueueAt: Start.Add(queue.ScheduleResolution - time.Nanosecond)},
			{Payload: []byte("later"), EnqueueAt: Start.Add(queue.ScheduleResolution)},
		}
		require.NoError(e.t, q.Produce(e.ctx, items))
		require.True(e.t, items[0].EnqueueAt.Equal(Start.Add(-time.Hour)) && items[1].EnqueueAt.Equal(Start.Add(queue.ScheduleResolution-time.Nanosecond)),
			"Produce leaves the caller's items as they were: %v, %v", items[0].EnqueueAt, items[1].EnqueueAt)
		c, _ := e.counts(q)
		require.Equal(e.t, counts{total: 3, ready: 2, scheduled: 1}, c)
		listed, err := q.List(e.ctx, 0, 0, 10)
		require.NoError(e.t, err)
		require.Len(e.t, listed, 2)
		for _, item := range listed {
			require.True(e.t, item.Meta.EnqueueAt.IsZero(), "%s: enqueue_at %v", item.Body.Payload, item.Meta.EnqueueAt)
		}
		sched, err := q.Scheduled(e.ctx, 0, 0, 10)
		require.NoError(e.t, err)
		require.Len(e.t, sched, 1)
		require.Equal(e.t, "later", string(sched[0].Body.Payload))
	}},
	{"RenewExtendsLease", func(e *env) {
		q := e.create("q", nil)
		e.produce(q, "a")
		part, x := e.leaseOne(q, "a")
		e.advance(8*time.Second, q)
		dl, err := q.Renew(e.ctx, part, []uint64{x.ID}, 0)
		require.NoError(e.t, err)
		require.Len(e.t, dl, 1)
		require.True(e.t, dl[0].Equal(Start.Add(8*time.Second+leaseTimeout)), "renewed deadline %v", dl[0])
		// Past the original deadline: still leased.
		e.advance(8*time.Second, q)
		e.leaseNone(q)
		c, _ := e.counts(q)
		require.Equal(e.t, counts{total: 1, leased: 1}, c)
		dl, err = q.Renew(e.ctx, part, []uint64{x.ID}, time.Minute)
		require.NoError(e.t, err)
		require.True(e.t, dl[0].Equal(Start.Add(16*time.Second+time.Minute)), "renewed deadline %v", dl[0])
		// Past the renewed deadline: expired, and no longer renewable.
		e.advance(time.Minute, q)
		_, err = q.Renew(e.ctx, part, []uint64{x.ID}, 0)
		requireNotLeased(e.t, err, x.ID)
		_, again := e.leaseOne(q, "a")
		require.Equal(e.t, int32(2), again.Attempts)
	}},
	{"LeaseTimeoutOfTheLease", func(e *env) {
		// A lease may last other than the queue's lease_timeout
		// (LeaseParams.LeaseTimeout: SQS's VisibilityTimeout), in one call;
		// two waiting leases of different timeouts get their own deadlines.
		q := e.create("q", nil)
		short := e.leaseAsync(q, queue.LeaseParams{BatchSize: 1, ClientID: "short", Timeout: time.Minute, LeaseTimeout: 3 * time.Second})
		long := e.leaseAsync(q, queue.LeaseParams{BatchSize: 1, ClientID: "long", Timeout: time.Minute, LeaseTimeout: 3 * leaseTimeout})
		e.waitLeaseWaiting(q, 2)
		e.produce(q, "a", "b")
		for _, w := range []struct {
			res     func() (queue.LeaseResult, error)
			timeout time.Duration
		}{{short, 3 * time.Second}, {long, 3 * leaseTimeout}} {
			res, err := w.res()
			require.NoError(e.t, err)
			require.Len(e.t, res.Items, 1)
			require.True(e.t, res.Items[0].LeaseDeadline.Equal(Start.Add(w.timeout)), "deadline %v, want now + %v", res.Items[0].LeaseDeadline, w.timeout)
		}
		// The short lease ends first: its item alone is ready again.
		e.advance(3*time.Second-time.Millisecond, q)
		c, _ := e.counts(q)
		require.Equal(e.t, counts{total: 2, leased: 2}, c)
		e.advance(time.Millisecond, q)
		c, _ = e.counts(q)
		require.Equal(e.t, counts{total: 2, ready: 1, leased: 1, failures: 1}, c)
	}},
	{"LeaseCompletesFirst", func(e *env) {
		// A lease may complete the previous batch in the same step
		// (LeaseParams.Complete): all of it or nothing, and it never waits.
		q := e.create("q", nil)
		e.produce(q, "a", "b", "c")
		part, a := e.leaseOne(q, "a")
		next := func(ids ...uint64) (queue.LeaseResult, error) {
			return q.Lease(e.ctx, queue.LeaseParams{BatchSize: 1, ClientID: "w", Timeout: time.Minute, Complete: ids, CompletePartition: part})
		}
		res, err := next(a.ID)
		require.NoError(e.t, err)
		require.Equal(e.t, []string{"b"}, payloads(res.Items))
		c, _ := e.counts(q)
		require.Equal(e.t, counts{total: 2, ready: 1, leased: 1}, c, "a completed, b leased")
		// An id not leased: nothing completed, nothing leased.
		b := res.Items[0]
		_, err = next(b.ID, a.ID)
		requireNotLeased(e.t, err, a.ID)
		c, _ = e.counts(q)
		require.Equal(e.t, counts{total: 2, ready: 1, leased: 1}, c, "b still leased, c still ready")
		e.leaseOne(q, "c") // another client: nothing is ready now
		// A client already waiting: refused before anything is completed.
		wait := e.leaseAsync(q, queue.LeaseParams{BatchSize: 1, ClientID: "w", Timeout: time.Minute})
		e.waitLeaseWaiting(q, 1)
		_, err = next(b.ID)
		ae, ok := apierr.As(err)
		require.True(e.t, ok, "%v", err)
		require.Equal(e.t, apierr.Invalid, ae.Code)
		require.Contains(e.t, ae.Message, "duplicate client id")
		e.produce(q, "d")
		res, err = wait()
		require.NoError(e.t, err)
		require.Equal(e.t, []string{"d"}, payloads(res.Items), "the waiting lease takes d")
		c, _ = e.counts(q)
		require.Equal(e.t, counts{total: 3, leased: 3}, c, "b was not completed")
		// Nothing ready: answered at once with no items (the fake clock
		// never reaches the minute's request timeout), b completed.
		res, err = next(b.ID)
		require.NoError(e.t, err)
		require.Empty(e.t, res.Items)
		c, _ = e.counts(q)
		require.Equal(e.t, counts{total: 2, leased: 2}, c)
		require.Zero(e.t, func() int { st, _ := q.Stats(e.ctx); return st.LeaseWaiting }(), "it does not stay waiting")
	}},
	{"LeaseWaitsAfterComplete", func(e *env) {
		// With WaitAfterComplete, a lease that completes first long-polls
		// after its completes: a produce meanwhile is handed to it, and at
		// its request timeout it is answered with no items and no error.
		q := e.create("q", nil)
		e.produce(q, "a")
		part, a := e.leaseOne(q, "a")
		next := func(timeout time.Duration, ids ...uint64) func() (queue.LeaseResult, error) {
			return e.leaseAsync(q, queue.LeaseParams{BatchSize: 1, ClientID: "w", Timeout: timeout, Complete: ids,
				CompletePartition: part, WaitAfterComplete: true})
		}
		wait := next(time.Minute, a.ID)
		e.waitLeaseWaiting(q, 1)
		c, _ := e.counts(q)
		require.Equal(e.t, counts{}, c, "a completed while the lease waits")
		e.produce(q, "b")
		res, err := wait()
		require.NoError(e.t, err)
		require.Equal(e.t, []string{"b"}, payloads(res.Items), "the waiting lease takes b")
		part, b := res.Partition, res.Items[0]
		// An id not leased: nothing completed, the lease does not wait.
		_, err = next(time.Minute, a.ID)()
		requireNotLeased(e.t, err, a.ID)
		c, _ = e.counts(q)
		require.Equal(e.t, counts{total: 1, leased: 1}, c, "b still leased")
		// Its request timeout passes with nothing produced: no items, no
		// error, and b completed.
		wait = next(time.Second, b.ID)
		e.waitLeaseWaiting(q, 1)
		e.advance(time.Second, q)
		res, err = wait()
		require.NoError(e.t, err)
		require.Empty(e.t, res.Items)
		c, _ = e.counts(q)
		require.Equal(e.t, counts{}, c)
		e.waitLeaseWaiting(q, 0)
	}},
	{"HistoryKeepsTenMostRecent", func(e *env) {
		q := e.create("q", nil)
		e.produce(q, "a")
		for i := 1; i <= 12; i++ {
			part, x := e.leaseOne(q, "a")
			require.Equal(e.t, int32(i), x.Attempts)
			_, err := q.Retry(e.ctx, part, []queue.RetryItem{{ID: x.ID, Error: fmt.Sprintf("e%d", i)}})
			require.NoError(e.t, err)
		}
		items := e.items(q)
		require.Len(e.t, items, 1)
		h := items[0].Errors
		require.Equal(e.t, "e12", h.LastError)
		want := make([]string, 0, queue.MaxAttemptErrors)
		for i := 3; i <= 12; i++ {
			want = append(want, fmt.Sprintf("%d:e%d", i, i))
		}
		require.Equal(e.t, 10, queue.MaxAttemptErrors)
		require.Equal(e.t, want, errorTexts(h))
	}},
}

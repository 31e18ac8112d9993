package queuetest

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/apierr"
	"github.com/styxq/styx/internal/queue"
)

// This file holds the rows that complete the suite's coverage of the wire
// contract's semantics: docs/conformance.md lists every rule of the
// contract and the row (or the wire-layer test) that checks it.

// info is the QueueInfo create uses for name, after change edits it.
func info(name string, change func(*queue.QueueInfo)) queue.QueueInfo {
	i := queue.QueueInfo{Name: name, LeaseTimeout: leaseTimeout, ExpireTimeout: expireTimeout, Partitions: 1}
	if change != nil {
		change(&i)
	}
	return i
}

// requireInvalid requires err to be an apierr.Invalid (400) error whose
// message contains every one of parts.
func requireInvalid(t *testing.T, err error, parts ...string) {
	t.Helper()
	require.Error(t, err)
	ae, ok := apierr.As(err)
	require.True(t, ok, "want a client error, got %v", err)
	require.Equal(t, apierr.Invalid, ae.Code, ae.Message)
	for _, p := range parts {
		require.Contains(t, ae.Message, p)
	}
}

// queueNames returns the names of the queues p lists.
func (e *env) queueNames(p queue.ListQueuesParams) []string {
	e.t.Helper()
	got, err := e.qs.List(e.ctx, p)
	require.NoError(e.t, err)
	names := make([]string, len(got))
	for i, x := range got {
		names[i] = x.Name
	}
	return names
}

// scanPayloads returns the payloads of the items of q that f matches, in
// id order, read in pages of limit items through Scan's next.
func (e *env) scanPayloads(q queue.Queue, f queue.DeadFilter, limit int) []string {
	e.t.Helper()
	var out []string
	var after uint64
	for range 100 {
		items, next, err := q.Scan(e.ctx, 1, &f, queue.ScanParams{After: after, Limit: limit})
		require.NoError(e.t, err)
		require.LessOrEqual(e.t, len(items), limit)
		for _, item := range items {
			out = append(out, string(item.Body.Payload))
		}
		if next == 0 || len(items) == 0 {
			return out
		}
		after = next
	}
	require.FailNow(e.t, "scan did not end")
	return nil
}

// byPayload returns q's stored item whose payload is p.
func (e *env) byPayload(q queue.Queue, p string) queue.Item {
	e.t.Helper()
	for _, item := range e.items(q) {
		if string(item.Body.Payload) == p {
			return item
		}
	}
	require.FailNow(e.t, "no item", "queue '%s' holds no item %q", q.Name(), p)
	return queue.Item{}
}

var coverageRows = []row{
	{"UnknownQueueIsInvalidOnEveryCall", func(e *env) {
		const msg = "queue does not exist; no such queue named 'nope'"
		_, err := e.qs.Get("nope")
		requireInvalid(e.t, err, msg)
		_, err = e.qs.Info(e.ctx, "nope")
		requireInvalid(e.t, err, msg)
		requireInvalid(e.t, e.qs.Update(e.ctx, "nope", func(i *queue.QueueInfo) error { i.MaxAttempts = 3; return nil }), msg)
		requireInvalid(e.t, e.qs.Delete(e.ctx, "nope"), msg)
		for _, err := range []error{err, e.qs.Delete(e.ctx, "nope")} {
			require.ErrorIs(e.t, err, queue.ErrQueueNotFound, "the doors recognise it by its sentinel")
		}
		require.Empty(e.t, e.queueNames(queue.ListQueuesParams{}))
	}},
	{"CreateExistingIsInvalid", func(e *env) {
		e.create("q", func(i *queue.QueueInfo) { i.Reference = "first" })
		requireInvalid(e.t, e.qs.Create(e.ctx, info("q", func(i *queue.QueueInfo) { i.Reference = "second" })), "queue already exists; 'q'")
		got, err := e.qs.Info(e.ctx, "q")
		require.NoError(e.t, err)
		require.Equal(e.t, "first", got.Reference, "the refused create changed nothing")
	}},
	{"InfoEchoesConfiguration", func(e *env) {
		e.create("dlq", nil)
		e.create("q", func(i *queue.QueueInfo) {
			i.DeadQueue, i.Reference, i.MaxAttempts, i.Partitions = "dlq", "ref", 7, 3
			i.LeaseTimeout, i.ExpireTimeout, i.Namespace = 1500*time.Millisecond, time.Hour, "ns"
			// The service stamps created_at and updated_at; the queue
			// layer keeps them as given.
			i.CreatedAt, i.UpdatedAt = Start.Add(-time.Hour), Start.Add(-time.Minute)
		})
		got, err := e.qs.Info(e.ctx, "q")
		require.NoError(e.t, err)
		require.Equal(e.t, "q", got.Name)
		require.Equal(e.t, "dlq", got.DeadQueue)
		require.Equal(e.t, "ref", got.Reference)
		require.Equal(e.t, int32(7), got.MaxAttempts)
		require.Equal(e.t, int32(3), got.Partitions)
		require.Equal(e.t, 1500*time.Millisecond, got.LeaseTimeout, "sub-second lease timeouts are kept")
		require.Equal(e.t, time.Hour, got.ExpireTimeout)
		require.Equal(e.t, "ns", got.Namespace)
		require.True(e.t, got.CreatedAt.Equal(Start.Add(-time.Hour)), "created_at %v", got.CreatedAt)
		require.True(e.t, got.UpdatedAt.Equal(Start.Add(-time.Minute)), "updated_at %v", got.UpdatedAt)
		q, err := e.qs.Get("q")
		require.NoError(e.t, err)
		_, st := e.counts(q)
		require.Len(e.t, st.Partitions, 3)
		for i, p := range st.Partitions {
			require.Equal(e.t, int32(i), p.Partition)
		}
	}},
	{"DeadQueueRules", func(e *env) {
		e.create("dlq", nil)
		e.create("q", func(i *queue.QueueInfo) { i.DeadQueue = "dlq" })
		// The dead_queue must exist and cannot be the queue itself.
		requireInvalid(e.t, e.qs.Create(e.ctx, info("a", func(i *queue.QueueInfo) { i.DeadQueue = "none" })), "dead_queue")
		requireInvalid(e.t, e.qs.Create(e.ctx, info("b", func(i *queue.QueueInfo) { i.DeadQueue = "b" })), "dead_queue")
		// No chains: a queue with a dead_queue cannot be one, and a
		// dead-letter queue cannot get one.
		requireInvalid(e.t, e.qs.Create(e.ctx, info("c", func(i *queue.QueueInfo) { i.DeadQueue = "q" })), "dead_queue")
		e.create("other", nil)
		requireInvalid(e.t, e.qs.Update(e.ctx, "dlq", func(i *queue.QueueInfo) error { i.DeadQueue = "other"; return nil }), "dead_queue")
		// A dead-letter queue cannot be deleted while referenced.
		requireInvalid(e.t, e.qs.Delete(e.ctx, "dlq"), "dead_queue", "'q'")
		require.Equal(e.t, []string{"dlq", "other", "q"}, e.queueNames(queue.ListQueuesParams{}), "refused calls changed nothing")
		d, err := e.qs.Info(e.ctx, "dlq")
		require.NoError(e.t, err)
		require.Empty(e.t, d.DeadQueue)
		// Once unreferenced it can be deleted.
		require.NoError(e.t, e.qs.Update(e.ctx, "q", func(i *queue.QueueInfo) error { i.DeadQueue = ""; return nil }))
		require.NoError(e.t, e.qs.Delete(e.ctx, "dlq"))
		require.Equal(e.t, []string{"other", "q"}, e.queueNames(queue.ListQueuesParams{}))
	}},
	{"UpdateAppliesAndNeverReducesPartitions", func(e *env) {
		q := e.create("q", func(i *queue.QueueInfo) { i.Partitions = 2 })
		requireInvalid(e.t, e.qs.Update(e.ctx, "q", func(i *queue.QueueInfo) error { i.Partitions = 1; return nil }),
			"requested_partitions", "cannot be reduced")
		require.NoError(e.t, e.qs.Update(e.ctx, "q", func(i *queue.QueueInfo) error {
			i.Partitions, i.MaxAttempts, i.LeaseTimeout = 3, 1, time.Minute
			return nil
		}))
		got, err := e.qs.Info(e.ctx, "q")
		require.NoError(e.t, err)
		require.Equal(e.t, int32(3), got.Partitions)
		require.Equal(e.t, int32(1), got.MaxAttempts)
		require.Equal(e.t, time.Minute, got.LeaseTimeout)
		_, st := e.counts(q)
		require.Len(e.t, st.Partitions, 3)
		// Later leases use the new lease_timeout, later retries the new
		// max_attempts.
		e.produce(q, "a")
		part, x := e.leaseOne(q, "a")
		require.True(e.t, x.LeaseDeadline.Equal(Start.Add(time.Minute)), "lease deadline %v", x.LeaseDeadline)
		out, err := q.Retry(e.ctx, part, []queue.RetryItem{{ID: x.ID}})
		require.NoError(e.t, err)
		require.Equal(e.t, queue.OutcomeDropped, out[0].Outcome)
		require.Equal(e.t, queue.ReasonMaxAttempts, out[0].Reason)
		require.Empty(e.t, e.items(q))
	}},
	{"DeleteQueue", func(e *env) {
		q := e.create("q", nil)
		e.produce(q, "a", "b")
		e.leaseOne(q, "a")
		require.NoError(e.t, e.qs.Delete(e.ctx, "q"))
		_, err := e.qs.Get("q")
		requireInvalid(e.t, err, "no such queue named 'q'")
		require.Empty(e.t, e.queueNames(queue.ListQueuesParams{}))
		// A queue re-created under the same name starts empty.
		q = e.create("q", nil)
		require.Empty(e.t, e.items(q))
		c, _ := e.counts(q)
		require.Equal(e.t, counts{}, c)
		e.leaseNone(q)
	}},
	{"ListQueuesInNameOrderWithLimit", func(e *env) {
		for _, n := range []string{"c", "a", "b", "B"} {
			e.create(n, nil)
		}
		require.Equal(e.t, []string{"B", "a", "b", "c"}, e.queueNames(queue.ListQueuesParams{}), "bytewise name order")
		require.Equal(e.t, []string{"B", "a"}, e.queueNames(queue.ListQueuesParams{Limit: 2}))
		require.Equal(e.t, []string{"b"}, e.queueNames(queue.ListQueuesParams{Pivot: "b", Limit: 1}), "the pivot is inclusive")
		require.Equal(e.t, []string{"b", "c"}, e.queueNames(queue.ListQueuesParams{Pivot: "az"}))
	}},
	{"IDsUniqueIncreasingNeverReused", func(e *env) {
		q := e.create("q", func(i *queue.QueueInfo) { i.Partitions = 2 })
		e.produce(q, "a")
		part, a := e.leaseOne(q, "a")
		require.NoError(e.t, q.Complete(e.ctx, part, []uint64{a.ID}))
		e.produce(q, "b")
		b := e.byPayload(q, "b")
		require.Greater(e.t, b.Meta.ID, a.ID, "a completed item's id is not reused")
		n, err := q.Delete(e.ctx, []queue.ItemRef{{Partition: b.Partition, ID: b.Meta.ID}})
		require.NoError(e.t, err)
		require.Equal(e.t, 1, n)
		e.produce(q, "c")
		c := e.byPayload(q, "c")
		require.Greater(e.t, c.Meta.ID, b.Meta.ID, "a deleted item's id is not reused")
		// Unique across partitions.
		for i := range 6 {
			e.produce(q, fmt.Sprint(i))
		}
		seen := map[uint64]bool{}
		for _, item := range e.items(q) {
			require.False(e.t, seen[item.Meta.ID], "id %d twice", item.Meta.ID)
			seen[item.Meta.ID] = true
		}
		require.Len(e.t, seen, 7)
	}},
	{"ProduceRequestNeverSplitLeaseFromOnePartition", func(e *env) {
		// Which partition is not asserted (on PostgreSQL each node
		// places from its own view; ADR 0014), only that a
		// request's items share one and a lease's items are that of the
		// answer.
		q := e.create("q", func(i *queue.QueueInfo) { i.Partitions = 3 })
		for r := range 6 {
			e.produce(q, fmt.Sprintf("r%d-0", r), fmt.Sprintf("r%d-1", r), fmt.Sprintf("r%d-2", r), fmt.Sprintf("r%d-3", r))
		}
		stored := e.items(q)
		require.Len(e.t, stored, 24)
		partOf := map[uint64]int32{}
		reqPart := map[string]int32{}
		for _, item := range stored {
			partOf[item.Meta.ID] = item.Partition
			r := strings.Split(string(item.Body.Payload), "-")[0]
			if p, ok := reqPart[r]; ok {
				require.Equal(e.t, p, item.Partition, "request %s split across partitions", r)
			}
			reqPart[r] = item.Partition
		}
		for n := 0; n < 24; {
			res := e.lease(q, 5)
			for _, x := range res.Items {
				require.Equal(e.t, partOf[x.ID], res.Partition, "leased item %d", x.ID)
			}
			n += len(res.Items)
		}
		e.leaseNone(q)
	}},
	{"CompleteRetryRenewInAnotherPartitionRefused", func(e *env) {
		q := e.create("q", func(i *queue.QueueInfo) { i.Partitions = 2 })
		e.produce(q, "a")
		part, x := e.leaseOne(q, "a")
		other := 1 - part
		err := q.Complete(e.ctx, other, []uint64{x.ID})
		requireNotLeased(e.t, err, x.ID)
		requireInvalid(e.t, err, fmt.Sprintf("partition %d", other))
		_, err = q.Retry(e.ctx, other, []queue.RetryItem{{ID: x.ID}})
		requireNotLeased(e.t, err, x.ID)
		_, err = q.Renew(e.ctx, other, []uint64{x.ID}, 0)
		requireNotLeased(e.t, err, x.ID)
		// The same id twice in one call.
		require.ErrorIs(e.t, q.Complete(e.ctx, part, []uint64{x.ID, x.ID}), queue.ErrDuplicateID)
		_, err = q.Renew(e.ctx, part, []uint64{x.ID, x.ID}, 0)
		require.ErrorIs(e.t, err, queue.ErrDuplicateID)
		c, _ := e.counts(q)
		require.Equal(e.t, counts{total: 1, leased: 1}, c)
		require.NoError(e.t, q.Complete(e.ctx, part, []uint64{x.ID}))
		require.Empty(e.t, e.items(q))
	}},
	{"PartitionOutOfRangeIsInvalid", func(e *env) {
		q := e.create("q", nil)
		e.produce(q, "a")
		_, x := e.leaseOne(q, "a")
		refs := []queue.ItemRef{{Partition: 0, ID: x.ID}, {Partition: 3, ID: x.ID}}
		_, err := q.Delete(e.ctx, refs)
		requireInvalid(e.t, err, "partition")
		_, err = q.DeleteDead(e.ctx, refs)
		requireInvalid(e.t, err, "partition")
		c, _ := e.counts(q)
		require.Equal(e.t, counts{total: 1, leased: 1}, c, "nothing deleted")
		requireInvalid(e.t, q.Complete(e.ctx, 3, []uint64{x.ID}), "partition")
		_, err = q.Retry(e.ctx, 3, []queue.RetryItem{{ID: x.ID}})
		requireInvalid(e.t, err, "partition")
		_, err = q.Renew(e.ctx, 3, []uint64{x.ID}, 0)
		requireInvalid(e.t, err, "partition")
		_, err = q.Import(e.ctx, 3, []queue.Item{{Body: queue.ItemBody{Payload: []byte("i")}}})
		requireInvalid(e.t, err, "partition")
		_, err = q.Scheduled(e.ctx, 3, 0, 10)
		requireInvalid(e.t, err, "partition")
		c, _ = e.counts(q)
		require.Equal(e.t, counts{total: 1, leased: 1}, c, "nothing changed")
	}},
	{"DeleteRemovesItemsInAnyState", func(e *env) {
		q := e.create("q", nil)
		e.produce(q, "leased", "ready")
		require.NoError(e.t, q.Produce(e.ctx, []queue.ProduceItem{{Payload: []byte("sched"), EnqueueAt: Start.Add(time.Hour)}}))
		part, x := e.leaseOne(q, "leased")
		var refs []queue.ItemRef
		for _, item := range e.items(q) {
			refs = append(refs, queue.ItemRef{Partition: item.Partition, ID: item.Meta.ID})
		}
		require.Len(e.t, refs, 3)
		n, err := q.Delete(e.ctx, append(refs, queue.ItemRef{Partition: 0, ID: x.ID + 1000}))
		require.NoError(e.t, err)
		require.Equal(e.t, 3, n, "unknown ids are ignored")
		require.Empty(e.t, e.items(q))
		c, _ := e.counts(q)
		require.Equal(e.t, counts{}, c)
		requireNotLeased(e.t, q.Complete(e.ctx, part, []uint64{x.ID}), x.ID)
		sched, err := q.Scheduled(e.ctx, 0, 0, 10)
		require.NoError(e.t, err)
		require.Empty(e.t, sched)
		e.advance(time.Hour, q)
		e.leaseNone(q)
	}},
	{"RetryOutcomesInRequestOrder", func(e *env) {
		q, dlq := e.withDLQ(nil)
		e.produce(q, "requeue", "schedule", "release", "dead")
		res := e.lease(q, 4)
		require.Equal(e.t, []string{"requeue", "schedule", "release", "dead"}, payloads(res.Items))
		at := Start.Add(time.Minute)
		out, err := q.Retry(e.ctx, res.Partition, []queue.RetryItem{
			{ID: res.Items[3].ID, Dead: true, Error: "d"},
			{ID: res.Items[1].ID, RetryAt: at, Error: "s"},
			{ID: res.Items[0].ID, Error: "r"},
			{ID: res.Items[2].ID, Release: true},
		})
		require.NoError(e.t, err)
		require.Len(e.t, out, 4)
		got := make([]string, len(out))
		for i, o := range out {
			got[i] = o.Outcome
		}
		require.Equal(e.t, []string{queue.OutcomeDeadLettered, queue.OutcomeScheduled, queue.OutcomeRequeued, queue.OutcomeReleased}, got)
		require.Equal(e.t, []uint64{res.Items[3].ID, res.Items[1].ID, res.Items[0].ID, res.Items[2].ID},
			[]uint64{out[0].ID, out[1].ID, out[2].ID, out[3].ID})
		require.Equal(e.t, []int32{1, 1, 1, 0}, []int32{out[0].Attempts, out[1].Attempts, out[2].Attempts, out[3].Attempts})
		require.Len(e.t, e.items(dlq), 1)
		// Requeued and released are ready, in retry order at the tail.
		rest := e.lease(q, 10)
		require.Equal(e.t, []string{"requeue", "release"}, payloads(rest.Items))
		require.Equal(e.t, []int32{2, 1}, []int32{rest.Items[0].Attempts, rest.Items[1].Attempts})
		// The error of a counted attempt is kept; a release records none.
		require.Equal(e.t, []string{"1:r"}, errorTexts(e.byPayload(q, "requeue").Errors))
		require.Empty(e.t, errorTexts(e.byPayload(q, "release").Errors))
		require.NoError(e.t, q.Complete(e.ctx, rest.Partition, []uint64{rest.Items[0].ID, rest.Items[1].ID}))
		e.leasableAfter(q, time.Minute)
		// The error of a counted attempt is kept in the item's history.
		require.Equal(e.t, []string{"1:s"}, errorTexts(e.byPayload(q, "schedule").Errors))
		e.leaseOne(q, "schedule")
	}},
	{"RetryAtNotAfterNowRequeues", func(e *env) {
		q := e.create("q", nil)
		e.produce(q, "a", "b")
		e.clk.Advance(time.Minute)
		res := e.lease(q, 2)
		now := Start.Add(time.Minute)
		out, err := q.Retry(e.ctx, res.Partition, []queue.RetryItem{{ID: res.Items[0].ID, RetryAt: now}, {ID: res.Items[1].ID, RetryAt: now.Add(-time.Second)}})
		require.NoError(e.t, err)
		require.Equal(e.t, queue.OutcomeRequeued, out[0].Outcome)
		require.Equal(e.t, queue.OutcomeRequeued, out[1].Outcome)
		require.True(e.t, out[0].RetryAt.IsZero())
		c, _ := e.counts(q)
		require.Equal(e.t, counts{total: 2, ready: 2, failures: 2}, c)
		again := e.lease(q, 2)
		require.Equal(e.t, []string{"a", "b"}, payloads(again.Items))
	}},
	{"RenewRefusesDuplicateIDs", func(e *env) {
		q := e.create("q", nil)
		e.produce(q, "a")
		part, x := e.leaseOne(q, "a")
		e.advance(5*time.Second, q)
		_, err := q.Renew(e.ctx, part, []uint64{x.ID, x.ID}, 0)
		requireInvalid(e.t, err, "'"+queue.FormatID(x.ID)+"'")
		// Nothing changed: the lease still ends at its first deadline.
		e.advance(leaseTimeout-5*time.Second, q)
		_, again := e.leaseOne(q, "a")
		require.Equal(e.t, int32(2), again.Attempts)
	}},
	{"RenewPastExpireDeadlineThenDiesAtLeaseEnd", func(e *env) {
		q, dlq := e.withDLQ(func(i *queue.QueueInfo) { i.ExpireTimeout = time.Minute })
		e.produce(q, "a")
		e.advance(time.Minute-time.Second, q)
		part, x := e.leaseOne(q, "a")
		e.advance(2*time.Second, q)
		dl, err := q.Renew(e.ctx, part, []uint64{x.ID}, 0)
		require.NoError(e.t, err, "an item past its expire deadline may be renewed")
		require.True(e.t, dl[0].Equal(Start.Add(time.Minute+time.Second+leaseTimeout)), "renewed deadline %v", dl[0])
		e.advance(leaseTimeout-time.Millisecond, q)
		require.Empty(e.t, e.items(dlq))
		e.advance(time.Millisecond, q)
		d := e.eventuallyItems(dlq, 1)[0]
		require.Equal(e.t, queue.ReasonExpired, d.Body.DeadReason)
		require.Equal(e.t, int32(1), d.Meta.Attempts)
		e.eventuallyItems(q, 0)
	}},
	{"ExpireKillsScheduledItem", func(e *env) {
		q, dlq := e.withDLQ(func(i *queue.QueueInfo) { i.ExpireTimeout = time.Minute })
		require.NoError(e.t, q.Produce(e.ctx, []queue.ProduceItem{{Payload: []byte("s"), EnqueueAt: Start.Add(time.Hour)}}))
		e.advance(time.Minute-time.Millisecond, q)
		require.Empty(e.t, e.items(dlq))
		e.advance(time.Millisecond, q)
		d := e.eventuallyItems(dlq, 1)[0]
		require.Equal(e.t, "s", string(d.Body.Payload))
		require.Equal(e.t, queue.ReasonExpired, d.Body.DeadReason)
		e.eventuallyItems(q, 0)
		e.advance(time.Hour, q)
		e.leaseNone(q)
	}},
	{"ExpiryWithoutDeadQueueDrops", func(e *env) {
		q := e.create("q", func(i *queue.QueueInfo) { i.ExpireTimeout = time.Minute })
		e.produce(q, "a")
		e.advance(time.Minute-time.Millisecond, q)
		require.Len(e.t, e.items(q), 1)
		e.advance(time.Millisecond, q)
		e.eventuallyItems(q, 0)
		e.leaseNone(q)
	}},
	{"DeadItemKeepsItsFieldsUnderANewIDAndExpiresFromDeadAt", func(e *env) {
		dlq := e.create("dlq", func(i *queue.QueueInfo) { i.ExpireTimeout = time.Hour })
		q := e.create("q", func(i *queue.QueueInfo) { i.DeadQueue = "dlq" })
		require.NoError(e.t, q.Produce(e.ctx, []queue.ProduceItem{{Kind: "kind1", Reference: "ref1", Encoding: "enc1", Payload: []byte("a")}}))
		part, x := e.leaseOne(q, "a")
		_, err := q.Retry(e.ctx, part, []queue.RetryItem{{ID: x.ID, Error: "e1"}})
		require.NoError(e.t, err)
		e.clk.Advance(50 * time.Minute)
		part, x = e.leaseOne(q, "a")
		out, err := q.Retry(e.ctx, part, []queue.RetryItem{{ID: x.ID, Dead: true, Error: "e2"}})
		require.NoError(e.t, err)
		require.Equal(e.t, queue.OutcomeDeadLettered, out[0].Outcome)
		deadAt := Start.Add(50 * time.Minute)
		d := e.items(dlq)[0]
		require.Equal(e.t, "kind1", d.Body.Kind)
		require.Equal(e.t, "ref1", d.Body.Reference)
		require.Equal(e.t, "enc1", d.Body.Encoding)
		require.Equal(e.t, "a", string(d.Body.Payload))
		require.Equal(e.t, "q", d.Body.SourceQueue)
		require.Equal(e.t, queue.FormatID(x.ID), d.Body.SourceID, "source_id is the item's id in the source")
		require.Equal(e.t, queue.ReasonExplicit, d.Body.DeadReason)
		require.True(e.t, d.Body.DeadAt.Equal(deadAt), "dead_at %v", d.Body.DeadAt)
		require.Equal(e.t, int32(2), d.Meta.Attempts)
		require.False(e.t, d.Meta.Leased)
		require.Equal(e.t, []string{"1:e1", "2:e2"}, errorTexts(d.Errors))
		require.True(e.t, d.Meta.ExpireDeadline.Equal(deadAt.Add(time.Hour)), "a dead item's expire deadline counts from dead_at: %v", d.Meta.ExpireDeadline)
		// Retention counts from dead_at, not from the item's creation.
		e.advance(time.Hour-time.Millisecond, dlq)
		require.Len(e.t, e.items(dlq), 1)
		e.advance(time.Millisecond, dlq)
		e.eventuallyItems(dlq, 0)
	}},
	{"WaitingLeaseOnDeadQueueServedByMove", func(e *env) {
		q, dlq := e.withDLQ(nil)
		wait := e.leaseWaiting(dlq, 10)
		e.produce(q, "a")
		e.deadLetter(q, "a", "x")
		res, err := wait()
		require.NoError(e.t, err)
		require.Equal(e.t, []string{"a"}, payloads(res.Items))
		require.NoError(e.t, dlq.Complete(e.ctx, res.Partition, []uint64{res.Items[0].ID}))
		require.Empty(e.t, e.items(dlq))
	}},
	{"ScanDeadFilter", func(e *env) {
		dlq := e.create("dlq", func(i *queue.QueueInfo) { i.ExpireTimeout = dlqExpire })
		q1 := e.create("q1", func(i *queue.QueueInfo) { i.DeadQueue, i.MaxAttempts = "dlq", 1 })
		q2 := e.create("q2", func(i *queue.QueueInfo) { i.DeadQueue, i.ExpireTimeout = "dlq", time.Hour })
		require.NoError(e.t, q1.Produce(e.ctx, []queue.ProduceItem{{Kind: "ka", Payload: []byte("a")}, {Kind: "kb", Payload: []byte("b"), Reference: "ref-b"}}))
		require.NoError(e.t, q2.Produce(e.ctx, []queue.ProduceItem{{Kind: "ka", Payload: []byte("c")}}))
		e.deadLetter(q1, "a", "disk full")
		e.clk.Advance(time.Minute)
		part, x := e.leaseOne(q1, "b")
		out, err := q1.Retry(e.ctx, part, []queue.RetryItem{{ID: x.ID, Error: "timeout talking to db"}})
		require.NoError(e.t, err)
		require.Equal(e.t, queue.ReasonMaxAttempts, out[0].Reason)
		e.advance(time.Hour-time.Minute, q2)
		dead := e.eventuallyItems(dlq, 3)
		require.Equal(e.t, []string{"a", "b", "c"}, []string{string(dead[0].Body.Payload), string(dead[1].Body.Payload), string(dead[2].Body.Payload)})
		at := func(d time.Duration) time.Time { return Start.Add(d) }
		for _, c := range []struct {
			name string
			f    queue.DeadFilter
			want []string
		}{
			{"empty", queue.DeadFilter{}, []string{"a", "b", "c"}},
			{"source q1", queue.DeadFilter{SourceQueue: "q1"}, []string{"a", "b"}},
			{"source q2", queue.DeadFilter{SourceQueue: "q2"}, []string{"c"}},
			{"reason explicit", queue.DeadFilter{Reason: queue.ReasonExplicit}, []string{"a"}},
			{"reason max_attempts", queue.DeadFilter{Reason: queue.ReasonMaxAttempts}, []string{"b"}},
			{"reason expired", queue.DeadFilter{Reason: queue.ReasonExpired}, []string{"c"}},
			{"kind", queue.DeadFilter{Kind: "ka"}, []string{"a", "c"}},
			{"error contains", queue.DeadFilter{ErrorContains: "db"}, []string{"b"}},
			{"reference", queue.DeadFilter{Reference: "ref-b"}, []string{"b"}},
			{"reference is exact", queue.DeadFilter{Reference: "ref-"}, nil},
			{"payload contains", queue.DeadFilter{PayloadContains: "c"}, []string{"c"}},
			{"dead after (inclusive)", queue.DeadFilter{DeadAfter: at(time.Minute)}, []string{"b", "c"}},
			{"dead before (exclusive)", queue.DeadFilter{DeadBefore: at(time.Minute)}, []string{"a"}},
			{"dead between", queue.DeadFilter{DeadAfter: at(time.Minute), DeadBefore: at(time.Hour)}, []string{"b"}},
			{"ids", queue.DeadFilter{IDs: []uint64{dead[2].Meta.ID, dead[0].Meta.ID}}, []string{"a", "c"}},
			{"every set field must match", queue.DeadFilter{SourceQueue: "q1", Kind: "ka"}, []string{"a"}},
			{"ids and another field", queue.DeadFilter{IDs: []uint64{dead[0].Meta.ID}, Reason: queue.ReasonExpired}, nil},
			{"no match", queue.DeadFilter{SourceQueue: "q3"}, nil},
		} {
			for _, limit := range []int{1, 2, 100} {
				require.Equal(e.t, c.want, e.scanPayloads(dlq, c.f, limit), "filter %s, pages of %d", c.name, limit)
			}
		}
	}},
	{"ScanPagesEndWhereTheItemsEnd", func(e *env) {
		q := e.create("q", func(i *queue.QueueInfo) { i.Partitions = 2 })
		e.produce(q, "a", "b", "c", "d")
		all := e.items(q)
		require.Len(e.t, all, 4)
		id := func(i int) uint64 { return all[i].Meta.ID }
		scan := func(f queue.DeadFilter, p queue.ScanParams) ([]string, uint64) {
			items, next, err := q.Scan(e.ctx, 2, &f, p)
			require.NoError(e.t, err)
			var out []string
			for _, item := range items {
				out = append(out, string(item.Body.Payload))
			}
			return out, next
		}
		for _, c := range []struct {
			name string
			f    queue.DeadFilter
			p    queue.ScanParams
			want []string
			next uint64 // 0: nothing left
		}{
			{"a full page with more after it", queue.DeadFilter{}, queue.ScanParams{Limit: 2}, []string{"a", "b"}, id(1)},
			{"a full last page", queue.DeadFilter{}, queue.ScanParams{After: id(1), Limit: 2}, []string{"c", "d"}, 0},
			{"after is exclusive", queue.DeadFilter{}, queue.ScanParams{After: id(0), Limit: 1}, []string{"b"}, id(1)},
			{"max scanned ends a page that found nothing", queue.DeadFilter{Kind: "none"}, queue.ScanParams{Limit: 10, MaxScanned: 3}, nil, id(2)},
			{"max scanned, continued", queue.DeadFilter{Kind: "none"}, queue.ScanParams{After: id(2), Limit: 10, MaxScanned: 3}, nil, 0},
			{"ids in any order, repeated or missing", queue.DeadFilter{IDs: []uint64{id(3), id(0), id(3), id(3) + 1000}}, queue.ScanParams{Limit: 1}, []string{"a"}, id(0)},
			{"ids, continued", queue.DeadFilter{IDs: []uint64{id(3), id(0)}}, queue.ScanParams{After: id(0), Limit: 1}, []string{"d"}, 0},
		} {
			got, next := scan(c.f, c.p)
			require.Equal(e.t, c.want, got, c.name)
			require.Equal(e.t, c.next, next, c.name)
		}
	}},
	{"ScheduledListsInIDOrder", func(e *env) {
		q := e.create("q", nil)
		for i, d := range []time.Duration{time.Hour, 2 * time.Hour, 30 * time.Minute} {
			require.NoError(e.t, q.Produce(e.ctx, []queue.ProduceItem{{Payload: []byte(fmt.Sprint("s", i)), EnqueueAt: Start.Add(d)}}))
		}
		e.produce(q, "ready")
		all, err := q.Scheduled(e.ctx, 0, 0, 10)
		require.NoError(e.t, err)
		got := make([]string, len(all))
		for i, item := range all {
			got[i] = string(item.Body.Payload)
		}
		require.Equal(e.t, []string{"s0", "s1", "s2"}, got, "id order, ready items left out")
		rest, err := q.Scheduled(e.ctx, 0, all[0].Meta.ID, 10)
		require.NoError(e.t, err)
		require.Len(e.t, rest, 2)
		require.Equal(e.t, "s1", string(rest[0].Body.Payload))
		one, err := q.Scheduled(e.ctx, 0, 0, 1)
		require.NoError(e.t, err)
		require.Len(e.t, one, 1)
		require.Equal(e.t, "s0", string(one[0].Body.Payload))
		// Due ones leave the list in enqueue_at order.
		e.advance(time.Hour, q)
		left, err := q.Scheduled(e.ctx, 0, 0, 10)
		require.NoError(e.t, err)
		require.Len(e.t, left, 1)
		require.Equal(e.t, "s1", string(left[0].Body.Payload))
	}},
	{"ListPagesBoundedByBytes", func(e *env) {
		// Items of 100 bytes (queue.ItemBytes), ready and scheduled ones
		// interleaved: a page of 250 bytes holds 2 of its kind, the other
		// kind not counted; one of 1 byte holds 1; each listing pages on
		// from its last id to every item once.
		q := e.create("q", nil)
		for i := range 6 {
			it := queue.ProduceItem{Payload: []byte(fmt.Sprintf("r%d%s", i, strings.Repeat("x", 98)))}
			require.NoError(e.t, q.Produce(e.ctx, []queue.ProduceItem{it}))
			it = queue.ProduceItem{Payload: []byte(fmt.Sprintf("s%d%s", i, strings.Repeat("x", 98))), EnqueueAt: Start.Add(time.Hour)}
			require.NoError(e.t, q.Produce(e.ctx, []queue.ProduceItem{it}))
		}
		for _, scheduled := range []bool{false, true} {
			kind := map[bool]string{false: "r", true: "s"}[scheduled]
			for _, c := range []struct{ maxBytes, perPage int }{{250, 2}, {200, 2}, {199, 1}, {1, 1}, {0, 6}} {
				var got []string
				var after uint64
				for pages := 0; ; pages++ {
					require.Less(e.t, pages, 10, "the listing ends")
					page, err := q.ListPage(e.ctx, queue.ListParams{After: after, Limit: 100, MaxBytes: c.maxBytes, Scheduled: scheduled})
					require.NoError(e.t, err)
					if len(page) == 0 {
						break
					}
					require.LessOrEqual(e.t, len(page), c.perPage, "scheduled %v, maxBytes %d", scheduled, c.maxBytes)
					for _, item := range page {
						require.Equal(e.t, 100, queue.ItemBytes(&item))
						got = append(got, string(item.Body.Payload[:2]))
					}
					after = page[len(page)-1].Meta.ID
				}
				require.Equal(e.t, []string{kind + "0", kind + "1", kind + "2", kind + "3", kind + "4", kind + "5"}, got,
					"scheduled %v, maxBytes %d", scheduled, c.maxBytes)
			}
		}
		// Scan: next continues from the matching item the page left out.
		items, next, err := q.Scan(e.ctx, 1, &queue.DeadFilter{}, queue.ScanParams{Limit: 100, MaxBytes: 250})
		require.NoError(e.t, err)
		require.Len(e.t, items, 2)
		require.Equal(e.t, items[1].Meta.ID, next)
		var got []string
		for after := uint64(0); ; {
			items, next, err := q.Scan(e.ctx, 1, &queue.DeadFilter{PayloadContains: "r"}, queue.ScanParams{After: after, Limit: 100, MaxBytes: 150})
			require.NoError(e.t, err)
			require.LessOrEqual(e.t, len(items), 1)
			for _, item := range items {
				got = append(got, string(item.Body.Payload[:2]))
			}
			if next == 0 {
				break
			}
			after = next
		}
		require.Equal(e.t, []string{"r0", "r1", "r2", "r3", "r4", "r5"}, got)
	}},
	{"ImportStatesAndPerPartitionSourceID", func(e *env) {
		q := e.create("q", func(i *queue.QueueInfo) { i.Partitions = 2 })
		for p := range int32(2) {
			got, err := q.Import(e.ctx, p, []queue.Item{{Body: queue.ItemBody{Payload: []byte(fmt.Sprint("p", p)), SourceID: "s1"}}})
			require.NoError(e.t, err)
			require.Equal(e.t, p, got[0].Partition)
		}
		require.Len(e.t, e.items(q), 2, "source_id is unique per partition, not per queue")
		_, err := q.Import(e.ctx, 0, []queue.Item{
			{Meta: queue.ItemMeta{Attempts: 2}, Body: queue.ItemBody{Payload: []byte("ready")}},
			{Meta: queue.ItemMeta{EnqueueAt: Start.Add(time.Hour)}, Body: queue.ItemBody{Payload: []byte("sched")}},
			{Meta: queue.ItemMeta{Leased: true}, Body: queue.ItemBody{Payload: []byte("nodeadline")}},
			{Meta: queue.ItemMeta{Leased: true, Attempts: 1, LeaseDeadline: Start.Add(-time.Second)}, Body: queue.ItemBody{Payload: []byte("past")}},
		})
		require.NoError(e.t, err)
		sched, err := q.Scheduled(e.ctx, 0, 0, 10)
		require.NoError(e.t, err)
		require.Len(e.t, sched, 1)
		require.Equal(e.t, "sched", string(sched[0].Body.Payload))
		nd := e.byPayload(q, "nodeadline")
		require.True(e.t, nd.Meta.Leased)
		require.True(e.t, nd.Meta.LeaseDeadline.Equal(Start.Add(leaseTimeout)), "a leased import without a deadline gets lease_timeout: %v", nd.Meta.LeaseDeadline)
		// The past deadline ends as an expired lease: the item is ready
		// again with its attempt recorded. Attempts are kept as imported.
		e.tick(q)
		require.Eventually(e.t, func() bool { return !e.byPayload(q, "past").Meta.Leased }, waitTimeout, 5*time.Millisecond)
		require.Equal(e.t, []string{"1:lease expired after 10s"}, errorTexts(e.byPayload(q, "past").Errors))
		var leased []string
		for n := 0; n < 4; {
			res := e.lease(q, 10)
			for _, x := range res.Items {
				leased = append(leased, fmt.Sprintf("%s:%d", x.Payload, x.Attempts))
			}
			n += len(res.Items)
		}
		slices.Sort(leased)
		require.Equal(e.t, []string{"p0:1", "p1:1", "past:2", "ready:3"}, leased)
		e.leaseNone(q)
	}},
	{"ReloadKeepsState", func(e *env) {
		q := e.create("q", nil)
		e.produce(q, "leased", "ready")
		require.NoError(e.t, q.Produce(e.ctx, []queue.ProduceItem{{Payload: []byte("sched"), EnqueueAt: Start.Add(time.Hour)}}))
		part, x := e.leaseOne(q, "leased")
		require.NoError(e.t, q.Reload(e.ctx))
		c, _ := e.counts(q)
		require.Equal(e.t, counts{total: 3, ready: 1, leased: 1, scheduled: 1}, c)
		e.leaseOne(q, "ready")
		e.leaseNone(q)
		require.NoError(e.t, q.Complete(e.ctx, part, []uint64{x.ID}), "a lease survives a reload")
		e.advance(time.Hour, q)
		e.leaseOne(q, "sched")
	}},
	{"StatsAverageAges", func(e *env) {
		q := e.create("q", nil)
		e.produce(q, "a", "b")
		e.clk.Advance(12 * time.Second)
		e.produce(q, "c")
		e.clk.Advance(2 * time.Second)
		e.leaseOne(q, "a")
		e.clk.Advance(4 * time.Second)
		_, st := e.counts(q)
		require.Len(e.t, st.Partitions, 1)
		p := st.Partitions[0]
		// Ages 18s, 18s, 6s; a leased 4s ago.
		require.Equal(e.t, 14*time.Second, p.AverageAge)
		require.Equal(e.t, 4*time.Second, p.AverageLeasedAge)
		require.True(e.t, st.Oldest.Equal(Start), "oldest %v", st.Oldest)
	}},
}

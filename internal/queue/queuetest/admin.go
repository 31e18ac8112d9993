package queuetest

import (
	"context"
	"strings"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/apierr"
	"github.com/styxq/styx/internal/queue"
)

// adminRows check the calls around the cycle: deletes of dead items,
// clear, statistics, error groups, consumers, attributes, redrive, import, item
// and queue lists, and unknown queues.
var adminRows = []row{
	{"DeleteDeadSkipsLeased", func(e *env) {
		q, dlq := e.withDLQ(nil)
		e.produce(q, "a", "b")
		e.deadLetter(q, "a", "x")
		e.deadLetter(q, "b", "x")
		dead := e.items(dlq)
		require.Len(e.t, dead, 2)
		part, x := e.leaseOne(dlq, "a")
		refs := []queue.ItemRef{{Partition: dead[0].Partition, ID: dead[0].Meta.ID}, {Partition: dead[1].Partition, ID: dead[1].Meta.ID}}
		n, err := dlq.DeleteDead(e.ctx, refs)
		require.NoError(e.t, err)
		require.Equal(e.t, 1, n)
		left := e.items(dlq)
		require.Len(e.t, left, 1)
		require.Equal(e.t, x.ID, left[0].Meta.ID)
		require.NoError(e.t, dlq.Complete(e.ctx, part, []uint64{x.ID}))
	}},
	{"Clear", func(e *env) {
		q := e.create("q", nil)
		e.produce(q, "leased", "r1", "r2")
		require.NoError(e.t, q.Produce(e.ctx, []queue.ProduceItem{{Payload: []byte("s"), EnqueueAt: Start.Add(time.Hour)}}))
		part, x := e.leaseOne(q, "leased")
		require.NoError(e.t, q.Clear(e.ctx, queue.ClearParams{Queue: true}))
		c, _ := e.counts(q)
		require.Equal(e.t, counts{total: 2, leased: 1, scheduled: 1}, c, "queue: true keeps leased and scheduled items")
		require.NoError(e.t, q.Clear(e.ctx, queue.ClearParams{Scheduled: true}))
		c, _ = e.counts(q)
		require.Equal(e.t, counts{total: 1, leased: 1}, c, "scheduled: true removes scheduled items only")
		require.NoError(e.t, q.Clear(e.ctx, queue.ClearParams{Queue: true, Destructive: true}))
		require.Empty(e.t, e.items(q), "destructive removes leased items too")
		requireNotLeased(e.t, q.Complete(e.ctx, part, []uint64{x.ID}), x.ID)
	}},
	{"StatsCounts", func(e *env) {
		q, dlq := e.withDLQ(nil)
		e.produce(q, "a", "b", "c", "d", "e")
		require.NoError(e.t, q.Produce(e.ctx, []queue.ProduceItem{{Payload: []byte("s"), EnqueueAt: Start.Add(time.Hour)}}))
		part, a := e.leaseOne(q, "a")
		_, err := q.Retry(e.ctx, part, []queue.RetryItem{{ID: a.ID}})
		require.NoError(e.t, err)
		e.deadLetter(q, "b", "x")
		e.leaseOne(q, "c")
		e.eventuallyItems(q, 5)
		c, st := e.counts(q)
		// d, e, a ready (a after a failed attempt); c leased; s scheduled.
		require.Equal(e.t, counts{total: 5, ready: 3, leased: 1, scheduled: 1, failures: 1}, c)
		require.Equal(e.t, 0, st.LeaseWaiting)
		require.True(e.t, st.Oldest.Equal(Start), "oldest %v", st.Oldest)
		dc, dst := e.counts(dlq)
		require.Equal(e.t, counts{total: 1, ready: 1}, dc)
		require.Equal(e.t, map[string]int{queue.ReasonExplicit: 1}, dst.DeadByReason)
		require.Equal(e.t, map[string]int{"q": 1}, dst.DeadBySource)
		require.Empty(e.t, st.DeadByReason)
	}},
	{"ErrorGroupsByFingerprint", func(e *env) {
		q, dlq := e.withDLQ(nil)
		e.produce(q, "a", "b", "c")
		e.deadLetter(q, "a", "dial tcp 10.0.0.1:5432: connection refused")
		e.deadLetter(q, "b", "dial tcp 10.0.0.2:5432: connection refused")
		e.deadLetter(q, "c", "disk full")
		g, err := dlq.ErrorGroups(e.ctx, queue.ErrorGroupFilter{}, 10)
		require.NoError(e.t, err)
		require.Equal(e.t, 2, g.TotalGroups)
		require.Equal(e.t, int64(3), g.TotalItems)
		require.Len(e.t, g.Groups, 2)
		big, small := g.Groups[0], g.Groups[1]
		require.Equal(e.t, int64(2), big.Count, "largest group first")
		require.Equal(e.t, "q", big.SourceQueue)
		require.Equal(e.t, queue.ReasonExplicit, big.Reason)
		require.Contains(e.t, big.SampleError, "connection refused")
		require.Equal(e.t, int64(1), small.Count)
		require.Equal(e.t, "disk full", small.SampleError)
		require.NotEqual(e.t, big.Fingerprint, small.Fingerprint)
		only, err := dlq.ErrorGroups(e.ctx, queue.ErrorGroupFilter{Fingerprint: small.Fingerprint}, 10)
		require.NoError(e.t, err)
		require.Equal(e.t, 1, only.TotalGroups)
		require.Equal(e.t, int64(1), only.TotalItems)
		// Deleting a dead item leaves its group.
		dead := e.items(dlq)
		n, err := dlq.DeleteDead(e.ctx, []queue.ItemRef{{Partition: dead[0].Partition, ID: dead[0].Meta.ID}})
		require.NoError(e.t, err)
		require.Equal(e.t, 1, n)
		g, err = dlq.ErrorGroups(e.ctx, queue.ErrorGroupFilter{}, 10)
		require.NoError(e.t, err)
		require.Equal(e.t, int64(2), g.TotalItems)
		require.Equal(e.t, 2, g.TotalGroups)
	}},
	{"AttributesTravelWithTheItem", func(e *env) {
		// ADR 0016: an item's opaque attributes survive a requeue with a new
		// id, an expired lease, a dead-letter move by max_attempts and a
		// redrive back.
		attrs := []byte{0, 1, 2, 'x'}
		q, dlq := e.withDLQ(func(i *queue.QueueInfo) { i.MaxAttempts = 3 })
		require.NoError(e.t, q.Produce(e.ctx, []queue.ProduceItem{{Payload: []byte("a"), Attributes: attrs}}))
		part, x := e.leaseOne(q, "a")
		require.Equal(e.t, attrs, x.Attributes)
		_, err := q.Retry(e.ctx, part, []queue.RetryItem{{ID: x.ID}})
		require.NoError(e.t, err)
		part, x = e.leaseOne(q, "a")
		require.Equal(e.t, attrs, x.Attributes, "after a requeue")
		_, err = q.Retry(e.ctx, part, []queue.RetryItem{{ID: x.ID}})
		require.NoError(e.t, err)
		_, x = e.leaseOne(q, "a")
		require.Equal(e.t, attrs, x.Attributes)
		e.advance(time.Minute, q) // the third lease expires: max_attempts
		d := e.eventuallyItems(dlq, 1)[0]
		require.Equal(e.t, attrs, d.Body.Attributes, "in the dead-letter queue")
		in := []queue.RedriveItem{{SourceKey: queue.RedriveKey("dlq", d.Meta.ID), Body: d.Body,
			Errors: queue.RedrivenHistory(&d, "dlq", "task1", e.clk.Now())}}
		require.NoError(e.t, q.TakeRedriven(e.ctx, in))
		_, x = e.leaseOne(q, "a")
		require.Equal(e.t, attrs, x.Attributes, "after a redrive")
		e.produce(q, "b")
		_, y := e.leaseOne(q, "b")
		require.Nil(e.t, y.Attributes, "an item without attributes has none")
	}},
	{"RedriveKeepsHistory", func(e *env) {
		q, dlq := e.withDLQ(nil)
		e.produce(q, "a")
		part, x := e.leaseOne(q, "a")
		_, err := q.Retry(e.ctx, part, []queue.RetryItem{{ID: x.ID, Error: "e1"}})
		require.NoError(e.t, err)
		e.deadLetter(q, "a", "e2")
		d := e.items(dlq)[0]
		e.clk.Advance(time.Minute)
		in := []queue.RedriveItem{{
			SourceKey: queue.RedriveKey("dlq", d.Meta.ID),
			Body:      d.Body,
			Errors:    queue.RedrivenHistory(&d, "dlq", "task1", e.clk.Now()),
		}}
		require.NoError(e.t, q.TakeRedriven(e.ctx, in))
		// A second copy (a redrive resumed after a crash) is ignored.
		require.NoError(e.t, q.TakeRedriven(e.ctx, in))
		n, err := dlq.DeleteDead(e.ctx, []queue.ItemRef{{Partition: d.Partition, ID: d.Meta.ID}})
		require.NoError(e.t, err)
		require.Equal(e.t, 1, n)
		items := e.items(q)
		require.Len(e.t, items, 1)
		r := items[0]
		require.Equal(e.t, int32(0), r.Meta.Attempts)
		require.Equal(e.t, int32(1), r.Body.RedriveCount)
		require.Empty(e.t, r.Body.DeadReason)
		require.Equal(e.t, []string{"1:e1", "2:e2", "2:redriven from dead-letter queue 'dlq' by task task1"}, errorTexts(r.Errors))
		require.True(e.t, r.Errors.Errors[2].At.Equal(Start.Add(time.Minute)))
		require.Equal(e.t, "e2", r.Errors.LastError)
		require.Empty(e.t, e.items(dlq))
		_, again := e.leaseOne(q, "a")
		require.Equal(e.t, int32(1), again.Attempts)
	}},
	{"ImportIdempotentOnSourceID", func(e *env) {
		q := e.create("q", nil)
		deadline := Start.Add(time.Minute)
		got, err := q.Import(e.ctx, 0, []queue.Item{
			{Meta: queue.ItemMeta{Attempts: 3, Leased: true, LeaseDeadline: deadline}, Body: queue.ItemBody{Payload: []byte("one"), SourceID: "s1"}},
			{Body: queue.ItemBody{Payload: []byte("dup"), SourceID: "s1"}},
		})
		require.NoError(e.t, err)
		require.Len(e.t, got, 2)
		require.Equal(e.t, got[0].Meta.ID, got[1].Meta.ID, "the duplicate answers with the item that holds its source_id")
		_, err = q.Import(e.ctx, 0, []queue.Item{{Body: queue.ItemBody{Payload: []byte("again"), SourceID: "s1"}}})
		require.NoError(e.t, err)
		items := e.items(q)
		require.Len(e.t, items, 1)
		item := items[0]
		require.Equal(e.t, "one", string(item.Body.Payload))
		require.Equal(e.t, int32(3), item.Meta.Attempts)
		require.True(e.t, item.Meta.Leased)
		require.True(e.t, item.Meta.LeaseDeadline.Equal(deadline), "lease deadline %v", item.Meta.LeaseDeadline)
		e.leaseNone(q)
		require.NoError(e.t, q.Complete(e.ctx, 0, []uint64{item.Meta.ID}))
	}},
	{"ListAfterIsExclusive", func(e *env) {
		q := e.create("q", nil)
		e.produce(q, "a", "b", "c")
		all, err := q.List(e.ctx, 0, 0, 10)
		require.NoError(e.t, err)
		require.Len(e.t, all, 3)
		// The wire's pivot is inclusive; the service maps it onto after.
		rest, err := q.List(e.ctx, 0, all[0].Meta.ID, 10)
		require.NoError(e.t, err)
		require.Len(e.t, rest, 2)
		require.Equal(e.t, "b", string(rest[0].Body.Payload))
		one, err := q.List(e.ctx, 0, 0, 1)
		require.NoError(e.t, err)
		require.Len(e.t, one, 1)
	}},
	{"ListQueuesByNamespace", func(e *env) {
		e.create("b1", func(i *queue.QueueInfo) { i.Namespace = "b" })
		e.create("a1", func(i *queue.QueueInfo) { i.Namespace = "a" })
		e.create("a2", func(i *queue.QueueInfo) { i.Namespace = "a" })
		got, err := e.qs.List(e.ctx, queue.ListQueuesParams{Namespace: "a"})
		require.NoError(e.t, err)
		names := make([]string, len(got))
		for i, x := range got {
			names[i] = x.Name
			require.Equal(e.t, "a", x.Namespace)
		}
		require.Equal(e.t, []string{"a1", "a2"}, names)
		all, err := e.qs.List(e.ctx, queue.ListQueuesParams{Pivot: "a2"})
		require.NoError(e.t, err)
		require.Len(e.t, all, 2, "pivot is inclusive, in name order")
		require.Equal(e.t, "a2", all[0].Name)
	}},
	{"ConsumersRecordedByLeases", func(e *env) {
		// Every read of queue.Queue has a row here; this one is the
		// consumers': a lease records its client, a complete ends what it
		// holds, on every backend (on PostgreSQL through its read half).
		q := e.create("q", nil)
		e.produce(q, "a", "b", "c")
		ctx, cancel := context.WithTimeout(e.ctx, waitTimeout)
		defer cancel()
		res, err := q.Lease(ctx, queue.LeaseParams{BatchSize: 2, ClientID: "worker-1", Timeout: time.Minute})
		require.NoError(e.t, err)
		require.Len(e.t, res.Items, 2)
		cs, err := q.Consumers(e.ctx)
		require.NoError(e.t, err)
		require.Len(e.t, cs, 1)
		require.Equal(e.t, "worker-1", cs[0].ClientID)
		require.EqualValues(e.t, 2, cs[0].Leased)
		require.Equal(e.t, 2, cs[0].Held)
		require.Equal(e.t, []string{queue.FormatID(res.Items[0].ID), queue.FormatID(res.Items[1].ID)}, cs[0].HeldIDs)
		require.NoError(e.t, q.Complete(e.ctx, res.Partition, []uint64{res.Items[0].ID}))
		cs, err = q.Consumers(e.ctx)
		require.NoError(e.t, err)
		require.Len(e.t, cs, 1)
		require.Equal(e.t, 1, cs[0].Held, "the complete ended one lease")
		require.EqualValues(e.t, 2, cs[0].Leased)
	}},
	{"NotFound", func(e *env) {
		_, err := e.qs.Get("nope")
		ae, ok := apierr.As(err)
		require.True(e.t, ok, "%v", err)
		require.Equal(e.t, apierr.Invalid, ae.Code)
		require.True(e.t, strings.Contains(ae.Message, "no such queue named 'nope'"), ae.Message)
	}},
}

package queuetest

import (
	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/apierr"
	"github.com/styxq/styx/internal/queue"
)

// idRows: an item's first id names it for its whole life in a queue (ADR
// 0031; issue 49, point 3), while its current id, the lease handle, changes
// at every requeue; and a lease's holder is stored with it (point 4).
var idRows = []row{
	{"FirstIDFindsARequeuedItem", func(e *env) {
		q := e.create("q", nil)
		e.produce(q, "a", "b")
		part, a := e.leaseOne(q, "a")
		require.Equal(e.t, a.ID, a.FirstID)
		out, err := q.Retry(e.ctx, part, []queue.RetryItem{{ID: a.ID, Error: "boom"}})
		require.NoError(e.t, err)
		require.NotEqual(e.t, a.ID, out[0].NewID, "a requeue gives a new current id")
		// Scanned by its first id, the retried item is found, and says
		// which is its first id; by its new id too.
		for _, id := range []uint64{a.ID, out[0].NewID} {
			got := e.scanIDs(q, id)
			require.Len(e.t, got, 1, "scan by %s", queue.FormatID(id))
			require.Equal(e.t, "a", string(got[0].Body.Payload))
			require.Equal(e.t, out[0].NewID, got[0].Meta.ID)
			require.Equal(e.t, a.ID, got[0].Meta.FirstID())
		}
		// Both ids of one item name it once.
		require.Len(e.t, e.scanIDs(q, a.ID, out[0].NewID), 1)
		// Leased again, its lease reports the same first id.
		_, b := e.leaseOne(q, "b")
		require.NoError(e.t, q.Complete(e.ctx, part, []uint64{b.ID}))
		_, a2 := e.leaseOne(q, "a")
		require.Equal(e.t, a.ID, a2.FirstID)
		require.Equal(e.t, out[0].NewID, a2.ID)
	}},
	{"DeadItemKeepsItsFirstIDWhenItsDLQLeaseExpires", func(e *env) {
		q, dlq := e.withDLQ(nil)
		e.produce(q, "a", "b")
		e.deadLetter(q, "a", "boom")
		e.deadLetter(q, "b", "boom")
		items := e.eventuallyItems(dlq, 2)
		first, newest := items[0].Meta.ID, items[1].Meta.ID
		require.Equal(e.t, first, items[0].Meta.FirstID())
		// A DLQ lease of it that runs out, twice: its current id changes
		// each time (it goes after b), its first id does not.
		_, x := e.leaseOne(dlq, "a")
		require.Equal(e.t, first, x.FirstID)
		e.advance(leaseTimeout, dlq)
		res := e.lease(dlq, 2)
		require.Equal(e.t, []string{"b", "a"}, payloads(res.Items))
		require.Equal(e.t, first, res.Items[1].FirstID)
		e.advance(leaseTimeout, dlq)
		got := e.scanIDs(dlq, first)
		require.Len(e.t, got, 1, "the dead item is found by the id it had when it died")
		require.Equal(e.t, "a", string(got[0].Body.Payload))
		require.Greater(e.t, got[0].Meta.ID, newest)
		require.Equal(e.t, first, got[0].Meta.FirstID())
		require.Equal(e.t, int32(2), got[0].Errors.DeadLetterAttempts())
		// A filter bounded by up_to, the newest id a client counted, still
		// matches it: it died before, though its current id is later now.
		require.Len(e.t, e.scanFilter(dlq, queue.DeadFilter{UpTo: newest}), 2)
		require.Len(e.t, e.scanFilter(dlq, queue.DeadFilter{UpTo: first}), 1)
		// Deleted by the current id a scan of its first id found (as
		// dead.delete --id does).
		n, err := dlq.DeleteDead(e.ctx, []queue.ItemRef{{Partition: got[0].Partition, ID: got[0].Meta.ID}})
		require.NoError(e.t, err)
		require.Equal(e.t, 1, n)
		require.Empty(e.t, e.scanIDs(dlq, first))
	}},
	{"StaleLeaseHandleRefusedAfterReLease", func(e *env) {
		q := e.create("q", nil)
		e.produce(q, "a")
		part, old := e.leaseOne(q, "a")
		e.advance(leaseTimeout, q)
		_, cur := e.leaseOne(q, "a")
		require.Equal(e.t, old.FirstID, cur.FirstID)
		require.NotEqual(e.t, old.ID, cur.ID)
		// The first lease's handle (its id, which is also the item's first
		// id) acts on no later lease: complete, retry and renew refuse it.
		requireNotLeased(e.t, q.Complete(e.ctx, part, []uint64{old.ID}), old.ID)
		_, err := q.Retry(e.ctx, part, []queue.RetryItem{{ID: old.ID}})
		requireNotLeased(e.t, err, old.ID)
		_, err = q.Renew(e.ctx, part, []uint64{old.ID}, 0)
		require.Error(e.t, err)
		ae, ok := apierr.As(err)
		require.True(e.t, ok, "want a client error, got %v", err)
		require.Equal(e.t, apierr.Invalid, ae.Code)
		// The item stays leased by its current lease, which completes it.
		c, _ := e.counts(q)
		require.Equal(e.t, 1, c.leased)
		require.NoError(e.t, q.Complete(e.ctx, part, []uint64{cur.ID}))
		require.Empty(e.t, e.items(q))
	}},
	{"LeaseStoresItsHolder", func(e *env) {
		q := e.create("q", nil)
		e.produce(q, "a", "b", "c")
		lease := func(client, key string, n int) queue.LeaseResult {
			res, err := q.Lease(e.ctx, queue.LeaseParams{BatchSize: n, ClientID: client, Owner: key, Timeout: waitTimeout})
			require.NoError(e.t, err)
			require.Len(e.t, res.Items, n)
			return res
		}
		r1 := lease("w1", "k1", 2)
		r2 := lease("w2", "", 1)
		holder := map[string]queue.Holder{}
		for _, it := range e.items(q) {
			require.True(e.t, it.Meta.Leased)
			holder[string(it.Body.Payload)] = it.Meta.Holder
		}
		require.Equal(e.t, map[string]queue.Holder{"a": {ClientID: "w1", KeyName: "k1"}, "b": {ClientID: "w1", KeyName: "k1"},
			"c": {ClientID: "w2"}}, holder)
		// A renewal keeps it.
		_, err := q.Renew(e.ctx, r2.Partition, []uint64{r2.Items[0].ID}, 0)
		require.NoError(e.t, err)
		require.Equal(e.t, queue.Holder{ClientID: "w2"}, e.byPayload(q, "c").Meta.Holder)
		// An item requeued is held by nobody; leased again, by its new
		// holder.
		require.NoError(e.t, q.Complete(e.ctx, r1.Partition, []uint64{r1.Items[1].ID}))
		_, err = q.Retry(e.ctx, r1.Partition, []queue.RetryItem{{ID: r1.Items[0].ID, Release: true}})
		require.NoError(e.t, err)
		require.Equal(e.t, queue.Holder{}, e.byPayload(q, "a").Meta.Holder)
		lease("w3", "k3", 1)
		require.Equal(e.t, queue.Holder{ClientID: "w3", KeyName: "k3"}, e.byPayload(q, "a").Meta.Holder)
		// The consumers read counts each holder's leases.
		cs, err := q.Consumers(e.ctx)
		require.NoError(e.t, err)
		held := map[string]int{}
		for _, c := range cs {
			held[c.ClientID+"/"+c.KeyName] = c.Held
		}
		require.Equal(e.t, map[string]int{"w1/k1": 0, "w2/": 1, "w3/k3": 1}, held)

		// Two waiting leases dealt one lease's items: each item is held by
		// the consumer it went to.
		d1 := e.leaseAsync(q, queue.LeaseParams{BatchSize: 1, ClientID: "d1", Owner: "k", Timeout: waitTimeout})
		d2 := e.leaseAsync(q, queue.LeaseParams{BatchSize: 1, ClientID: "d2", Owner: "k", Timeout: waitTimeout})
		e.waitLeaseWaiting(q, 2)
		e.produce(q, "x", "y")
		for client, wait := range map[string]func() (queue.LeaseResult, error){"d1": d1, "d2": d2} {
			res, err := wait()
			require.NoError(e.t, err)
			require.Len(e.t, res.Items, 1)
			require.Equal(e.t, queue.Holder{ClientID: client, KeyName: "k"}, e.byPayload(q, string(res.Items[0].Payload)).Meta.Holder)
		}
	}},
}

// scanIDs returns the items of q (one partition) that ids name.
func (e *env) scanIDs(q queue.Queue, ids ...uint64) []queue.Item {
	e.t.Helper()
	return e.scanFilter(q, queue.DeadFilter{IDs: ids})
}

// scanFilter returns the items of q (one partition) that f matches.
func (e *env) scanFilter(q queue.Queue, f queue.DeadFilter) []queue.Item {
	e.t.Helper()
	items, _, err := q.Scan(e.ctx, 1, &f, queue.ScanParams{Limit: 100})
	require.NoError(e.t, err)
	return items
}

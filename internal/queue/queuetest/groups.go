package queuetest

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/queue"
)

// groupRows check item groups (queue/itemgroups.go) on every backend:
// ordered groups (one lease of a group at a time, in produce order), the
// dead-letter policies of a group, and fairness across the groups of a
// queue that is not ordered.
var groupRows = []row{
	{"GroupOneLeaseAtATime", func(e *env) {
		q := e.create("q", ordered)
		e.produceGrouped(q, "a1:a", "a2:a", "b1:b", "a3:a", "c")
		var got []string
		for range 3 {
			got = append(got, payloads(e.lease(q, 1).Items)...)
		}
		require.ElementsMatch(e.t, []string{"a1", "b1", "c"}, got, "each group's head, and the item without a group")
		e.leaseNone(q)
		e.complete(q, "a1")
		_, x := e.leaseOne(q, "a2")
		require.Equal(e.t, "a", x.Group)
		e.leaseNone(q)
		e.complete(q, "a2")
		e.leaseOne(q, "a3")
	}},
	{"GroupBatchInOrder", func(e *env) {
		q := e.create("q", ordered)
		e.produceGrouped(q, "a1:a", "a2:a", "a3:a", "a4:a", "a5:a")
		require.Equal(e.t, []string{"a1", "a2", "a3"}, payloads(e.lease(q, 3).Items), "one batch takes several items of a group, in order")
		e.leaseNone(q)
		e.complete(q, "a1", "a2", "a3")
		require.Equal(e.t, []string{"a4", "a5"}, payloads(e.lease(q, 10).Items))
	}},
	{"GroupRequeuedItemIsHeadAgain", func(e *env) {
		q := e.create("q", ordered)
		e.produceGrouped(q, "a1:a", "a2:a", "a3:a")
		part, x := e.leaseOne(q, "a1")
		_, err := q.Retry(e.ctx, part, []queue.RetryItem{{ID: x.ID, Error: "boom"}})
		require.NoError(e.t, err)
		res := e.lease(q, 10)
		require.Equal(e.t, []string{"a1", "a2", "a3"}, payloads(res.Items), "the retried item first")
		require.Equal(e.t, int32(2), res.Items[0].Attempts)
		// Its lease expires: it is the head again, before a2 and a3.
		e.complete(q, "a2", "a3")
		e.produceGrouped(q, "a4:a")
		e.advance(leaseTimeout, q)
		require.Equal(e.t, []string{"a1", "a4"}, payloads(e.lease(q, 10).Items))
	}},
	{"GroupReleasedItemsStayBehindTheirHead", func(e *env) {
		// A consumer that leased a batch of a group and failed its first
		// item releases the others (the worker does): they keep their
		// place, behind the retried head, and count no attempt.
		q := e.create("q", ordered)
		e.produceGrouped(q, "a1:a", "a2:a", "a3:a")
		res := e.lease(q, 3)
		require.Equal(e.t, []string{"a1", "a2", "a3"}, payloads(res.Items))
		_, err := q.Retry(e.ctx, res.Partition, []queue.RetryItem{{ID: res.Items[0].ID, RetryAt: e.clk.Now().Add(time.Minute), Error: "boom"}})
		require.NoError(e.t, err)
		out, err := q.Retry(e.ctx, res.Partition, []queue.RetryItem{{ID: res.Items[1].ID, Release: true}, {ID: res.Items[2].ID, Release: true}})
		require.NoError(e.t, err)
		require.Equal(e.t, queue.OutcomeReleased, out[1].Outcome)
		e.produceGrouped(q, "b1:b")
		e.leaseOne(q, "b1") // another group is not held back
		e.complete(q, "b1")
		e.leasableAfter(q, time.Minute)
		res = e.lease(q, 10)
		require.Equal(e.t, []string{"a1", "a2", "a3"}, payloads(res.Items), "the released items after the retried head")
		require.Equal(e.t, []int32{2, 1, 1}, []int32{res.Items[0].Attempts, res.Items[1].Attempts, res.Items[2].Attempts})
	}},
	{"GroupScheduledHeadWaits", func(e *env) {
		// A head retried for later holds its group until it is due: a2 is
		// not leased before a1.
		q := e.create("q", ordered)
		e.produceGrouped(q, "a1:a", "a2:a", "b1:b")
		part, x := e.leaseOne(q, "a1")
		_, err := q.Retry(e.ctx, part, []queue.RetryItem{{ID: x.ID, RetryAt: e.clk.Now().Add(time.Minute)}})
		require.NoError(e.t, err)
		e.leaseOne(q, "b1")
		e.complete(q, "b1") // else its lease ends within the minute and b1 is leasable again
		e.leasableAfter(q, time.Minute)
		require.Equal(e.t, []string{"a1", "a2"}, payloads(e.lease(q, 10).Items))
	}},
	{"GroupsAreIndependent", func(e *env) {
		// A group whose head is leased (a slow consumer) blocks nothing of
		// the others, however many items it holds.
		q := e.create("q", ordered)
		hot := make([]string, 200)
		for i := range hot {
			hot[i] = fmt.Sprintf("h%d:hot", i)
		}
		e.produceGrouped(q, hot...)
		e.produceGrouped(q, "b1:b", "b2:b")
		// Each group's head, in either order (oldest first or round-robin).
		got := append(payloads(e.lease(q, 1).Items), payloads(e.lease(q, 1).Items)...)
		require.ElementsMatch(e.t, []string{"h0", "b1"}, got)
		e.leaseNone(q)
		e.complete(q, "b1")
		e.leaseOne(q, "b2")
	}},
	{"GroupOnePartition", func(e *env) {
		q := e.create("q", func(i *queue.QueueInfo) { i.Ordered, i.Partitions = true, 4 })
		for i := range 8 {
			e.produceGrouped(q, fmt.Sprintf("g%d:g", i), fmt.Sprintf("x%d", i), fmt.Sprintf("h%d:h", i))
		}
		parts := map[string]map[int32]bool{}
		for _, item := range e.items(q) {
			g := item.Meta.Group
			if parts[g] == nil {
				parts[g] = map[int32]bool{}
			}
			parts[g][item.Partition] = true
		}
		require.Equal(e.t, map[int32]bool{queue.GroupPartition("g", 4): true}, parts["g"], "every item of group g in its partition")
		require.Equal(e.t, map[int32]bool{queue.GroupPartition("h", 4): true}, parts["h"])
		// Leased in order, one at a time.
		for i := range 8 {
			_, x := e.leaseGroup(q, "g")
			require.Equal(e.t, fmt.Sprintf("g%d", i), string(x.Payload))
		}
	}},
	{"GroupDeadContinue", func(e *env) {
		q, dlq := e.withDLQ(ordered)
		e.produceGrouped(q, "a1:a", "a2:a")
		require.Equal(e.t, queue.OutcomeDeadLettered, e.deadLetter(q, "a1", "bad").Outcome)
		e.leaseOne(q, "a2")
		d := e.eventuallyItems(dlq, 1)[0]
		require.Equal(e.t, "a", d.Meta.Group, "the dead item keeps its group")
		_, st := e.counts(q)
		require.Empty(e.t, st.HeldGroups)
	}},
	{"GroupDeadItemsInTheirGroupPartition", func(e *env) {
		// A dead item with a group enters its group's partition of the
		// dead-letter queue, so that an ordered DLQ (an SQS FIFO queue's)
		// keeps the group's order.
		dlq := e.create("dlq", func(i *queue.QueueInfo) { i.Ordered, i.Partitions, i.ExpireTimeout = true, 4, dlqExpire })
		q := e.create("q", func(i *queue.QueueInfo) { i.Ordered, i.DeadQueue = true, "dlq" })
		for _, spec := range []string{"a1:a", "a2:a", "z1:z"} {
			e.produceGrouped(q, spec)
			e.deadLetter(q, spec[:2], "bad")
		}
		for _, d := range e.eventuallyItems(dlq, 3) {
			require.Equal(e.t, queue.GroupPartition(d.Meta.Group, 4), d.Partition, "dead item %s of group %s", d.Body.Payload, d.Meta.Group)
		}
		require.Equal(e.t, []string{"a1", "a2"}, payloads(e.leaseGroupRun(dlq, "a")))
	}},
	{"GroupDeadHoldRedriven", func(e *env) {
		q, dlq := e.withDLQ(func(i *queue.QueueInfo) { i.Ordered, i.GroupDeadPolicy = true, queue.GroupHold })
		e.produceGrouped(q, "a1:a", "a2:a", "b1:b")
		e.deadLetter(q, "a1", "bad")
		d := e.eventuallyItems(dlq, 1)[0]
		e.leaseOne(q, "b1")
		e.leaseNone(q) // a2 waits for a1
		_, st := e.counts(q)
		require.Equal(e.t, 1, st.HeldTotal)
		require.Len(e.t, st.HeldGroups, 1)
		require.Equal(e.t, "a", st.HeldGroups[0].Group)
		require.NotEmpty(e.t, st.HeldGroups[0].DeadKey)
		// Redriven (the copy in, then the dead item out, as a redrive
		// task does): a1 is the group's head again, before a2.
		in := []queue.RedriveItem{{SourceKey: queue.RedriveKey("dlq", d.Meta.ID), Body: d.Body, Group: d.Meta.Group, DeadKey: d.Meta.SourceKey,
			Errors: queue.RedrivenHistory(&d, "dlq", "task1", e.clk.Now())}}
		require.NoError(e.t, q.TakeRedriven(e.ctx, in))
		n, err := dlq.DeleteDead(e.ctx, []queue.ItemRef{{Partition: d.Partition, ID: d.Meta.ID}})
		require.NoError(e.t, err)
		require.Equal(e.t, 1, n)
		_, x := e.leaseOne(q, "a1")
		require.Equal(e.t, "a", x.Group)
		e.leaseNone(q)
		_, st = e.counts(q)
		require.Zero(e.t, st.HeldTotal)
		e.complete(q, "a1")
		e.leaseOne(q, "a2")
	}},
	{"GroupDeadHoldOtherRedriven", func(e *env) {
		// Only the copy of the dead item that holds the group releases it
		// (RedriveItem.DeadKey = HeldGroup.DeadKey): another redriven item
		// of the group joins it at its end and the group stays held.
		q, dlq := e.withDLQ(func(i *queue.QueueInfo) { i.Ordered, i.GroupDeadPolicy = true, queue.GroupHold })
		e.produceGrouped(q, "a1:a", "a2:a")
		e.deadLetter(q, "a1", "bad")
		d := e.eventuallyItems(dlq, 1)[0]
		e.produceGrouped(dlq, "x:a") // another item of the group in the dead-letter queue
		var other queue.Item
		for _, item := range e.eventuallyItems(dlq, 2) {
			if string(item.Body.Payload) == "x" {
				other = item
			}
		}
		require.NoError(e.t, q.TakeRedriven(e.ctx, []queue.RedriveItem{{SourceKey: queue.RedriveKey("dlq", other.Meta.ID), Body: other.Body,
			Group: "a", DeadKey: other.Meta.SourceKey}}))
		e.leaseNone(q)
		_, st := e.counts(q)
		require.Equal(e.t, 1, st.HeldTotal, "another redriven item of the group does not release it")
		require.NoError(e.t, q.TakeRedriven(e.ctx, []queue.RedriveItem{{SourceKey: queue.RedriveKey("dlq", d.Meta.ID), Body: d.Body,
			Group: "a", DeadKey: d.Meta.SourceKey}}))
		_, st = e.counts(q)
		require.Zero(e.t, st.HeldTotal, "the dead item's copy releases it")
		require.Equal(e.t, []string{"a1", "a2", "x"}, payloads(e.leaseGroupRun(q, "a")))
	}},
	{"GroupDeadHoldDeleted", func(e *env) {
		// The dead item deleted from the dead-letter queue releases its
		// group (the backend checks while it holds groups: poll).
		q, dlq := e.withDLQ(func(i *queue.QueueInfo) { i.Ordered, i.GroupDeadPolicy = true, queue.GroupHold })
		e.produceGrouped(q, "a1:a", "a2:a")
		e.deadLetter(q, "a1", "bad")
		d := e.eventuallyItems(dlq, 1)[0]
		e.leaseNone(q)
		n, err := dlq.DeleteDead(e.ctx, []queue.ItemRef{{Partition: d.Partition, ID: d.Meta.ID}})
		require.NoError(e.t, err)
		require.Equal(e.t, 1, n)
		require.Eventually(e.t, func() bool {
			e.advance(time.Second, q)
			_, st := e.counts(q)
			return st.HeldTotal == 0
		}, waitTimeout, 10*time.Millisecond, "the group is released")
		e.leaseOne(q, "a2")
	}},
	{"GroupDeadHoldFollowsItsDeadLetterQueue", func(e *env) {
		// A hold waits on the dead-letter queue its dead item went to, not
		// on the queue's dead_queue of the moment: after dead_queue
		// changes, deleting b1 from the old one releases b, and a stays
		// held while a1 is still there.
		q, dlq := e.withDLQ(func(i *queue.QueueInfo) { i.Ordered, i.GroupDeadPolicy = true, queue.GroupHold })
		e.create("dlq2", func(i *queue.QueueInfo) { i.ExpireTimeout = dlqExpire })
		e.produceGrouped(q, "a1:a", "b1:b", "a2:a", "b2:b")
		for range 2 { // a1 and b1, the groups' heads
			x := e.lease(q, 1)
			_, err := q.Retry(e.ctx, x.Partition, []queue.RetryItem{{ID: x.Items[0].ID, Dead: true}})
			require.NoError(e.t, err)
		}
		dead := e.eventuallyItems(dlq, 2)
		require.NoError(e.t, e.qs.Update(e.ctx, "q", func(i *queue.QueueInfo) error { i.DeadQueue = "dlq2"; return nil }))
		var b1 queue.Item
		for _, d := range dead {
			if d.Meta.Group == "b" {
				b1 = d
			}
		}
		n, err := dlq.DeleteDead(e.ctx, []queue.ItemRef{{Partition: b1.Partition, ID: b1.Meta.ID}})
		require.NoError(e.t, err)
		require.Equal(e.t, 1, n)
		var st queue.Stats
		require.Eventually(e.t, func() bool {
			e.advance(time.Second, q)
			_, st = e.counts(q)
			return st.HeldTotal < 2
		}, waitTimeout, 10*time.Millisecond, "b is released")
		require.Equal(e.t, 1, st.HeldTotal, "a is still held: a1 is in dlq")
		require.Equal(e.t, "a", st.HeldGroups[0].Group)
		e.leaseOne(q, "b2")
		e.leaseNone(q)
	}},
	{"GroupDeadHoldByLeaseExpiry", func(e *env) {
		// Dead by max_attempts (an expired lease) holds the group too;
		// without a dead-letter queue nothing is held.
		q, _ := e.withDLQ(func(i *queue.QueueInfo) {
			i.Ordered, i.GroupDeadPolicy, i.MaxAttempts = true, queue.GroupHold, 1
		})
		e.produceGrouped(q, "a1:a", "a2:a")
		e.leaseOne(q, "a1")
		e.advance(leaseTimeout, q)
		require.Eventually(e.t, func() bool {
			_, st := e.counts(q)
			return st.HeldTotal == 1
		}, waitTimeout, 5*time.Millisecond)
		e.leaseNone(q)

		free := e.create("free", func(i *queue.QueueInfo) { i.Ordered, i.GroupDeadPolicy, i.MaxAttempts = true, queue.GroupHold, 1 })
		e.produceGrouped(free, "f1:f", "f2:f")
		part, x := e.leaseOne(free, "f1")
		out, err := free.Retry(e.ctx, part, []queue.RetryItem{{ID: x.ID, Dead: true}})
		require.NoError(e.t, err)
		require.Equal(e.t, queue.OutcomeDropped, out[0].Outcome)
		e.leaseOne(free, "f2")
	}},
	{"GroupFairRoundRobin", func(e *env) {
		// Not ordered: ready items are leased round-robin across groups,
		// the items without a group taking one turn; no gate.
		q := e.create("q", nil)
		hot := make([]string, 100)
		for i := range hot {
			hot[i] = fmt.Sprintf("h%d:hot", i)
		}
		e.produceGrouped(q, hot...)
		var small []string
		for i := range 8 {
			small = append(small, fmt.Sprintf("s%d:s%d", i, i))
		}
		e.produceGrouped(q, small...)
		e.produceGrouped(q, "u1", "u2")
		got := payloads(e.lease(q, 10).Items)
		require.Len(e.t, got, 10)
		var hots, others []string
		for _, p := range got {
			if strings.HasPrefix(p, "h") {
				hots = append(hots, p)
			} else {
				others = append(others, p)
			}
		}
		require.Equal(e.t, []string{"h0"}, hots, "the hot group takes one turn of ten: %v", got)
		require.Len(e.t, others, 9, "every small group and one item without a group: %v", got)
		require.Contains(e.t, others, "u1")
		// No gate: the hot group's next items while h0 is leased.
		res := e.lease(q, 3)
		require.Contains(e.t, payloads(res.Items), "h1")
	}},
	{"GroupFairFIFOWithinGroup", func(e *env) {
		q := e.create("q", nil)
		e.produceGrouped(q, "a1:a", "a2:a", "a3:a")
		require.Equal(e.t, []string{"a1", "a2", "a3"}, payloads(e.lease(q, 10).Items))
	}},
	{"GroupKeptByMoves", func(e *env) {
		// The group is stored, listed, leased, and kept by a requeue, the
		// dead-letter move and an import.
		q, dlq := e.withDLQ(ordered)
		e.produceGrouped(q, "a1:a", "n")
		byPayload := map[string]string{}
		for _, item := range e.items(q) {
			byPayload[string(item.Body.Payload)] = item.Meta.Group
		}
		require.Equal(e.t, map[string]string{"a1": "a", "n": ""}, byPayload)
		e.deadLetter(q, "a1", "bad")
		require.Equal(e.t, "a", e.eventuallyItems(dlq, 1)[0].Meta.Group)
		out, err := q.Import(e.ctx, 0, []queue.Item{{Meta: queue.ItemMeta{Group: "imp", CreatedAt: e.clk.Now()}, Body: queue.ItemBody{Payload: []byte("i1")}}})
		require.NoError(e.t, err)
		require.Equal(e.t, "imp", out[0].Meta.Group)
	}},
}

// ordered makes a queue ordered (create's change).
func ordered(i *queue.QueueInfo) { i.Ordered = true }

// produceGrouped produces one ready item per spec, in order, in one call:
// "payload:group", or "payload" for an item without a group.
func (e *env) produceGrouped(q queue.Queue, specs ...string) {
	e.t.Helper()
	items := make([]queue.ProduceItem, len(specs))
	for i, s := range specs {
		p, g, _ := strings.Cut(s, ":")
		items[i] = queue.ProduceItem{Kind: "k", Payload: []byte(p), Group: g}
	}
	require.NoError(e.t, q.Produce(e.ctx, items))
}

// complete completes the leased items with the given payloads.
func (e *env) complete(q queue.Queue, want ...string) {
	e.t.Helper()
	byPart := map[int32][]uint64{}
	found := 0
	for _, item := range e.items(q) {
		if item.Meta.Leased && slices.Contains(want, string(item.Body.Payload)) {
			byPart[item.Partition] = append(byPart[item.Partition], item.Meta.ID)
			found++
		}
	}
	require.Equal(e.t, len(want), found, "leased items %v", want)
	for p, ids := range byPart {
		require.NoError(e.t, q.Complete(e.ctx, p, ids))
	}
}

// leaseGroup leases one item of group g, completing any item of another
// group it gets on the way.
func (e *env) leaseGroup(q queue.Queue, g string) (int32, queue.LeasedItem) {
	e.t.Helper()
	for {
		res := e.lease(q, 1)
		x := res.Items[0]
		if x.Group == g {
			require.NoError(e.t, q.Complete(e.ctx, res.Partition, []uint64{x.ID}))
			return res.Partition, x
		}
		require.NoError(e.t, q.Complete(e.ctx, res.Partition, []uint64{x.ID}))
	}
}

// leaseGroupRun leases from q until it gets items of group g, completing
// the others, and returns g's items of that lease.
func (e *env) leaseGroupRun(q queue.Queue, g string) []queue.LeasedItem {
	e.t.Helper()
	for {
		res := e.lease(q, 10)
		var run []queue.LeasedItem
		for _, x := range res.Items {
			if x.Group == g {
				run = append(run, x)
			}
		}
		if len(run) > 0 {
			return run
		}
		ids := make([]uint64, len(res.Items))
		for i, x := range res.Items {
			ids[i] = x.ID
		}
		require.NoError(e.t, q.Complete(e.ctx, res.Partition, ids))
	}
}

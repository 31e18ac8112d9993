package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/backend/postgres"
	"github.com/styxq/styx/internal/pgtest"
	"github.com/styxq/styx/internal/queue"
)

// Item groups with several PostgreSQL nodes (issue 37; itemgroups.go):
// what the conformance rows (queuetest/groups.go), which see one node, do
// not reach.

// groupLedger is the consumers' shared record of an ordered queue's
// groups: which group a consumer holds a lease of, and each group's next
// item (the first not completed), by index in produce order. A consumer
// updates it before it sends a complete or retry (the server still holds
// the lease until that commits, so no other lease of the group can be
// answered before), and checks every lease answer against it: a group
// held by another consumer, or a run that does not start at the group's
// next item and go on in order, is a broken rule.
type groupLedger struct {
	mu     sync.Mutex
	held   map[string]string // group -> consumer
	next   map[string]int
	broken []string
	leases atomic.Int64
	done   atomic.Int64
}

// take checks and records one lease answer of consumer c: runs maps each
// group to its item indexes in the answer's order.
func (l *groupLedger) take(c string, runs map[string][]int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for g, idx := range runs {
		if h, ok := l.held[g]; ok {
			l.broken = append(l.broken, fmt.Sprintf("group %s leased by %s while %s holds it (items %v)", g, c, h, idx))
		}
		l.held[g] = c
		for k, i := range idx {
			if i != l.next[g]+k {
				l.broken = append(l.broken, fmt.Sprintf("group %s: %s got items %v, the next is %d", g, c, idx, l.next[g]))
				break
			}
		}
	}
}

// end records that c ends its lease of g, having completed its first n
// items.
func (l *groupLedger) end(g string, n int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.held, g)
	l.next[g] += n
}

// parseGroupPayload splits a payload "<group>/<index>".
func parseGroupPayload(t *testing.T, p []byte) (string, int) {
	g, i, ok := strings.Cut(string(p), "/")
	require.True(t, ok, "payload %q", p)
	n, err := strconv.Atoi(i)
	require.NoError(t, err)
	return g, n
}

// TestGroupsTwoNodesOrdered races two nodes (two managers on one
// database) leasing one ordered queue of 2 partitions: 6 consumers per
// node lease batches of 1 to 6, complete, or fail the first item of a
// group's run (retried, the rest of the run released), until every item is
// completed. Never are two leases of a group held at once, and every lease
// of a group starts at its first item not completed and follows produce
// order. Rounds: STYX_GROUPS_ROUNDS (default 3).
func TestGroupsTwoNodesOrdered(t *testing.T) {
	rounds := 3
	if v := os.Getenv("STYX_GROUPS_ROUNDS"); v != "" {
		rounds, _ = strconv.Atoi(v)
	}
	url := pgtest.URL(t)
	nodes := []*postgres.Manager{open(t, url), open(t, url)}
	for r := range rounds {
		runGroupRace(t, nodes, fmt.Sprintf("race%d", r), 40, 25)
	}
}

// groupStall is how long runGroupRace waits with no item leased or
// completed before it fails the run as stalled (a deadlock, a group held
// for ever). The run is bounded by its progress, not by the clock: on a
// loaded machine (a CI runner, make test beside other packages) a round
// takes minutes, but no healthy one goes a minute without a lease.
const groupStall = time.Minute

func runGroupRace(t *testing.T, nodes []*postgres.Manager, name string, groups, perGroup int) {
	ctx, cancel := context.WithCancelCause(t.Context())
	defer cancel(nil)
	require.NoError(t, nodes[0].Create(ctx, queue.QueueInfo{Name: name, LeaseTimeout: 5 * time.Minute, ExpireTimeout: time.Hour,
		Partitions: 2, Ordered: true}))
	qs := make([]queue.Queue, len(nodes))
	for i, m := range nodes {
		q, err := m.Get(name)
		require.NoError(t, err)
		qs[i] = q
	}
	l := &groupLedger{held: map[string]string{}, next: map[string]int{}}
	total := int64(groups * perGroup)
	var wg sync.WaitGroup
	// The producers, one per node: each request holds one item of every
	// group of its half, in produce order.
	for n := range nodes {
		wg.Go(func() {
			for i := range perGroup {
				var items []queue.ProduceItem
				for g := n; g < groups; g += len(nodes) {
					items = append(items, queue.ProduceItem{Payload: fmt.Appendf(nil, "g%d/%d", g, i), Group: "g" + strconv.Itoa(g)})
				}
				if err := qs[n].Produce(ctx, items); err != nil {
					t.Errorf("produce: %v", err)
					return
				}
			}
		})
	}
	for n := range nodes {
		for c := range 6 {
			wg.Go(func() {
				who := fmt.Sprintf("n%d-c%d", n, c)
				rng := rand.New(rand.NewPCG(uint64(n), uint64(c)))
				for l.done.Load() < total && ctx.Err() == nil {
					// The wait is the lease's own request timeout, which the
					// queue's loop ends (ErrNoItems), never the client's
					// context: a lease abandoned by its context after the loop
					// leased items leaves them leased to nobody until their
					// lease_timeout (5 minutes here), which stalled loaded runs.
					res, err := qs[n].Lease(ctx, queue.LeaseParams{BatchSize: 1 + rng.IntN(6), ClientID: who, Timeout: 300 * time.Millisecond})
					if errors.Is(err, queue.ErrNoItems) {
						continue
					}
					if err != nil {
						t.Errorf("%s: lease: %v", who, err)
						return
					}
					l.leases.Add(1)
					runs, ids := map[string][]int{}, map[string][]uint64{}
					var order []string
					for _, x := range res.Items {
						g, i := parseGroupPayload(t, x.Payload)
						if g != x.Group {
							t.Errorf("item %s leased with group %q", x.Payload, x.Group)
						}
						if _, ok := runs[g]; !ok {
							order = append(order, g)
						}
						runs[g], ids[g] = append(runs[g], i), append(ids[g], x.ID)
					}
					l.take(who, runs)
					for _, g := range order {
						if rng.IntN(10) == 0 { // the first fails: retried; the rest released
							l.end(g, 0)
							retry := []queue.RetryItem{{ID: ids[g][0], Error: "boom"}}
							for _, id := range ids[g][1:] {
								retry = append(retry, queue.RetryItem{ID: id, Release: true})
							}
							if _, err := qs[n].Retry(ctx, res.Partition, retry); err != nil {
								t.Errorf("%s: retry: %v", who, err)
								return
							}
							continue
						}
						l.end(g, len(ids[g]))
						if err := qs[n].Complete(ctx, res.Partition, ids[g]); err != nil {
							t.Errorf("%s: complete: %v", who, err)
							return
						}
						l.done.Add(int64(len(ids[g])))
					}
				}
			})
		}
	}
	// The watchdog: cancels the run when no item moved for groupStall.
	watched := make(chan struct{})
	stop := make(chan struct{})
	go func() {
		defer close(watched)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		last, at := int64(-1), time.Now()
		for {
			select {
			case <-stop:
				return
			case <-ctx.Done():
				return
			case now := <-tick.C:
				moved := l.done.Load() + l.leases.Load()
				if moved != last {
					last, at = moved, now
					continue
				}
				if now.Sub(at) >= groupStall {
					cancel(fmt.Errorf("stalled: no item leased or completed for %s (%d of %d completed, %d leases)",
						groupStall, l.done.Load(), total, l.leases.Load()))
					return
				}
			}
		}
	}()
	wg.Wait()
	close(stop)
	<-watched
	require.NoError(t, context.Cause(ctx))
	require.Empty(t, l.broken)
	require.Equal(t, total, l.done.Load(), "every item completed")
	for g := range groups {
		require.Equal(t, perGroup, l.next["g"+strconv.Itoa(g)])
	}
	t.Logf("%s: %d items of %d groups completed in %d leases over %d nodes", name, total, groups, l.leases.Load(), len(nodes))
}

// TestGroupsHeldSharedAndRestart: a group held on one node (a dead item,
// GroupHold) is held on the other and after both restart; released on the
// other node by a redrive (rule 5(a)), and by its dead item's delete while
// the node that held it is gone (rule 5(b): the other node's lifecycle
// checks).
func TestGroupsHeldSharedAndRestart(t *testing.T) {
	url := pgtest.URL(t)
	ctx := t.Context()
	a, b := open(t, url), open(t, url)
	require.NoError(t, a.Create(ctx, queue.QueueInfo{Name: "dlq", LeaseTimeout: time.Minute, ExpireTimeout: 24 * time.Hour, Partitions: 1}))
	require.NoError(t, a.Create(ctx, queue.QueueInfo{Name: "q", LeaseTimeout: time.Minute, ExpireTimeout: 24 * time.Hour, Partitions: 1,
		DeadQueue: "dlq", Ordered: true, GroupDeadPolicy: queue.GroupHold}))
	qa, err := a.Get("q")
	require.NoError(t, err)
	require.NoError(t, qa.Produce(ctx, []queue.ProduceItem{{Payload: []byte("x1"), Group: "x"}, {Payload: []byte("x2"), Group: "x"},
		{Payload: []byte("y1"), Group: "y"}, {Payload: []byte("y2"), Group: "y"}}))
	// x1 and y1 die on node a: x and y are held.
	res, err := qa.Lease(ctx, queue.LeaseParams{BatchSize: 1, ClientID: "a", Timeout: time.Second})
	require.NoError(t, err)
	res2, err := qa.Lease(ctx, queue.LeaseParams{BatchSize: 1, ClientID: "a", Timeout: time.Second})
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"x1", "y1"}, payloadsOf(append(res.Items, res2.Items...)))
	out, err := qa.Retry(ctx, res.Partition, []queue.RetryItem{{ID: res.Items[0].ID, Dead: true}, {ID: res2.Items[0].ID, Dead: true}})
	require.NoError(t, err)
	require.Equal(t, queue.OutcomeDeadLettered, out[0].Outcome)
	require.Equal(t, queue.OutcomeDeadLettered, out[1].Outcome)
	heldOn := func(m *postgres.Manager) []string {
		q, err := m.Get("q")
		require.NoError(t, err)
		st, err := q.Stats(ctx)
		require.NoError(t, err)
		var gs []string
		for _, h := range st.HeldGroups {
			gs = append(gs, h.Group)
			require.Contains(t, h.DeadKey, "explicit:q~")
		}
		require.Equal(t, len(gs), st.HeldTotal)
		return gs
	}
	require.ElementsMatch(t, []string{"x", "y"}, heldOn(b), "node b sees the groups node a held")
	leaseNone := func(m *postgres.Manager) {
		q, err := m.Get("q")
		require.NoError(t, err)
		lctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		res, err := q.Lease(lctx, queue.LeaseParams{BatchSize: 10, ClientID: "none", Timeout: time.Minute})
		require.ErrorIs(t, err, context.DeadlineExceeded, "got %d items", len(res.Items))
	}
	leaseNone(b)

	// Both nodes restart: the groups are still held.
	a.Close()
	b.Close()
	a, b = open(t, url), open(t, url)
	require.ElementsMatch(t, []string{"x", "y"}, heldOn(a))
	leaseNone(a)
	leaseNone(b)

	// x's dead item is redriven through node b: x is released there, its
	// redriven item first, before x2 (rule 5(a)).
	dlq, err := b.Get("dlq")
	require.NoError(t, err)
	dead, _, err := dlq.Scan(ctx, 1, &queue.DeadFilter{}, queue.ScanParams{Limit: 10})
	require.NoError(t, err)
	require.Len(t, dead, 2)
	byGroup := map[string]queue.Item{}
	for _, d := range dead {
		byGroup[d.Meta.Group] = d
	}
	d := byGroup["x"]
	qb, err := b.Get("q")
	require.NoError(t, err)
	require.NoError(t, qb.TakeRedriven(ctx, []queue.RedriveItem{{SourceKey: queue.RedriveKey("dlq", d.Meta.ID), Body: d.Body, Group: "x",
		DeadKey: d.Meta.SourceKey, Errors: queue.RedrivenHistory(&d, "dlq", "task", time.Now())}}))
	_, err = dlq.DeleteDead(ctx, []queue.ItemRef{{Partition: d.Partition, ID: d.Meta.ID}})
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"y"}, heldOn(a))
	res, err = qb.Lease(ctx, queue.LeaseParams{BatchSize: 10, ClientID: "b", Timeout: time.Second})
	require.NoError(t, err)
	require.Equal(t, []string{"x1", "x2"}, payloadsOf(res.Items), "the redriven item heads its group")
	require.NoError(t, qb.Complete(ctx, res.Partition, []uint64{res.Items[0].ID, res.Items[1].ID}))

	// Node a, which held y, stops; y's dead item is deleted: node b
	// releases y (it checks while the queue holds groups) and y2 comes.
	a.Close()
	d = byGroup["y"]
	_, err = dlq.DeleteDead(ctx, []queue.ItemRef{{Partition: d.Partition, ID: d.Meta.ID}})
	require.NoError(t, err)
	res, err = qb.Lease(ctx, queue.LeaseParams{BatchSize: 10, ClientID: "b", Timeout: 10 * time.Second})
	require.NoError(t, err)
	require.Equal(t, []string{"y2"}, payloadsOf(res.Items))
	require.Empty(t, heldOn(b))
}

func payloadsOf(items []queue.LeasedItem) []string {
	out := make([]string, len(items))
	for i, x := range items {
		out[i] = string(x.Payload)
	}
	return out
}

// leaseWithin leases up to n items of q, waiting at most d; none is nil.
func leaseWithin(t *testing.T, q queue.Queue, n int, d time.Duration) []queue.LeasedItem {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), d)
	defer cancel()
	res, err := q.Lease(ctx, queue.LeaseParams{BatchSize: n, ClientID: "c", Timeout: time.Minute})
	if errors.Is(err, context.DeadlineExceeded) {
		return nil
	}
	require.NoError(t, err)
	return res.Items
}

// TestGroupsIndependentRoundRobin: on an ordered queue a group whose head
// is leased blocks nothing of the others, however many items it holds, and
// the groups take turns (round-robin in group order, from where the last
// lease stopped), whichever is older (the conformance row
// GroupsAreIndependent expects the oldest first).
func TestGroupsIndependentRoundRobin(t *testing.T) {
	m := open(t, pgtest.URL(t))
	ctx := t.Context()
	require.NoError(t, m.Create(ctx, queue.QueueInfo{Name: "q", LeaseTimeout: time.Minute, ExpireTimeout: time.Hour, Partitions: 1, Ordered: true}))
	q, err := m.Get("q")
	require.NoError(t, err)
	hot := make([]queue.ProduceItem, 200)
	for i := range hot {
		hot[i] = queue.ProduceItem{Payload: fmt.Appendf(nil, "h%d", i), Group: "hot"}
	}
	require.NoError(t, q.Produce(ctx, hot))
	require.NoError(t, q.Produce(ctx, []queue.ProduceItem{{Payload: []byte("b1"), Group: "b"}, {Payload: []byte("b2"), Group: "b"},
		{Payload: []byte("c1"), Group: "c"}}))
	var got []string
	for range 3 {
		items := leaseWithin(t, q, 1, 5*time.Second)
		require.Len(t, items, 1)
		got = append(got, string(items[0].Payload))
	}
	require.Equal(t, []string{"b1", "c1", "h0"}, got, "one turn each, in group order")
	require.Empty(t, leaseWithin(t, q, 1000, 200*time.Millisecond), "every group's head is leased")
}

// TestGroupsFairOtherNode: a node that never produced to a queue that is
// not ordered learns that it holds grouped items (its plain lease comes
// short and it looks) and leases them round-robin: a hot group of 100 and
// 9 small groups, produced through the other node, give a lease of 10 one
// item of each group.
func TestGroupsFairOtherNode(t *testing.T) {
	url := pgtest.URL(t)
	ctx := t.Context()
	a, b := open(t, url), open(t, url)
	require.NoError(t, a.Create(ctx, queue.QueueInfo{Name: "q", LeaseTimeout: time.Minute, ExpireTimeout: time.Hour, Partitions: 1}))
	qa, err := a.Get("q")
	require.NoError(t, err)
	var items []queue.ProduceItem
	for i := range 100 {
		items = append(items, queue.ProduceItem{Payload: fmt.Appendf(nil, "h%d", i), Group: "hot"})
	}
	for i := range 9 {
		items = append(items, queue.ProduceItem{Payload: fmt.Appendf(nil, "s%d", i), Group: fmt.Sprintf("s%d", i)})
	}
	require.NoError(t, qa.Produce(ctx, items))
	qb, err := b.Get("q")
	require.NoError(t, err)
	got := payloadsOf(leaseWithin(t, qb, 10, 5*time.Second))
	hot := 0
	for _, p := range got {
		if strings.HasPrefix(p, "h") {
			hot++
		}
	}
	require.Len(t, got, 10)
	require.Equal(t, 1, hot, "the hot group takes one turn of ten: %v", got)
}

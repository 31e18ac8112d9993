package service_test

import (
	"context"
	"fmt"
	"hash/fnv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	styx "github.com/styxq/styx"
	"github.com/styxq/styx/internal/pgtest"
	"github.com/styxq/styx/internal/redrive"
	"github.com/styxq/styx/internal/servertest"
	pb "github.com/styxq/styx/styxpb"
)

// faultLedger is what the clients of TestPostgresFaults saw: the produces
// answered 200, the live leases, the completes and dead-letterings.
type faultLedger struct {
	t            *testing.T
	leaseTimeout time.Duration

	mu        sync.Mutex
	acked     map[string]bool      // payloads whose produce was answered 200
	leases    map[string]leaseSeen // payload -> its latest lease
	completed map[string]bool      // payload -> completed (200)
	tried     map[string]bool      // payload -> a complete or retry was sent, whatever the answer
	perNode   [2]struct{ produced, completed int }

	failed  atomic.Int64 // requests answered 453
	slowest atomic.Int64 // longest failing call, ns
}

// leaseSeen is one lease a consumer was given.
type leaseSeen struct {
	id       string
	consumer string
	deadline time.Time
	released bool // completed or retried (200): the lease ended before its deadline
}

// fail records a request that failed after took; only 453 (storage
// unavailable) and the codes in also are expected.
func (l *faultLedger) fail(call string, err error, took time.Duration, also ...int) {
	code := styx.ErrorCode(err)
	if code == styx.CodeUnavailable {
		l.failed.Add(1)
		for old := l.slowest.Load(); int64(took) > old && !l.slowest.CompareAndSwap(old, int64(took)); old = l.slowest.Load() {
		}
		return
	}
	for _, c := range also {
		if code == c {
			return
		}
	}
	l.t.Errorf("%s: unexpected answer %v", call, err)
}

// leased records a lease and checks that no other consumer holds the item
// under a live lease: a lease's deadline is its grant time (the node's
// clock, shared by both in-process nodes) plus lease_timeout, and an
// unreleased lease is live until its deadline.
func (l *faultLedger) leased(consumer string, it *pb.QueueLeaseItem) {
	l.mu.Lock()
	defer l.mu.Unlock()
	p := string(it.Bytes)
	deadline := it.LeaseDeadline.AsTime()
	granted := deadline.Add(-l.leaseTimeout)
	if prev, ok := l.leases[p]; ok && !prev.released && granted.Before(prev.deadline) {
		l.t.Errorf("item %s (id %s) leased to %s at %s while %s held it (id %s) until %s",
			p, it.Id, consumer, granted.Format(time.RFC3339Nano), prev.consumer, prev.id, prev.deadline.Format(time.RFC3339Nano))
	}
	if l.completed[p] {
		l.t.Errorf("item %s (id %s) leased to %s after it was completed", p, it.Id, consumer)
	}
	l.leases[p] = leaseSeen{id: it.Id, consumer: consumer, deadline: deadline}
}

// ended records the end of leases: released when the call was answered
// 200, completed too when it was a complete.
func (l *faultLedger) ended(payloads []string, ok, complete bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, p := range payloads {
		l.tried[p] = true
		if !ok {
			continue
		}
		s := l.leases[p]
		s.released = true
		l.leases[p] = s
		if complete {
			l.completed[p] = true
		}
	}
}

// progress returns each node's produces and completes answered 200.
func (l *faultLedger) progress() [2]struct{ produced, completed int } {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.perNode
}

// TestPostgresFaults runs produce, lease, complete, dead-lettering and a
// redrive on two nodes sharing one PostgreSQL cluster of the test's own
// while the test kills their connections (pg_terminate_backend) and
// crashes the database (immediate shutdown, then crash recovery). It checks
// that every produce answered 200 is present exactly once (in the queue,
// its dead-letter queue, or completed), that no item is leased to two
// consumers while the first lease is live, that the redrive finishes and
// moves each item once, that requests fail fast with 453 while the database
// is away, and that both nodes recover by themselves.
func TestPostgresFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a PostgreSQL cluster")
	}
	pg := pgtest.StartServer(t)
	b := servertest.Backend{Name: "postgres", URL: pgtest.SchemaURL(t, pg.URL)}
	nodes := []*servertest.Server{servertest.Start(t, b), servertest.Start(t, b)}
	const leaseTimeout = 3 * time.Second
	nodes[0].CreateQueue(&pb.QueueInfo{QueueName: "pf-dlq"})
	nodes[0].CreateQueue(&pb.QueueInfo{QueueName: "pf", DeadQueue: "pf-dlq", LeaseTimeout: leaseTimeout.String(), RequestedPartitions: 2})
	nodes[0].CreateQueue(&pb.QueueInfo{QueueName: "rd-dlq"})
	nodes[0].CreateQueue(&pb.QueueInfo{QueueName: "rd", DeadQueue: "rd-dlq"})

	// The items to redrive: produced to rd and dead-lettered by retry
	// dead:true before the faults begin.
	const redriven = 200
	for i := 0; i < redriven; i += 50 {
		var payloads []string
		for j := i; j < i+50; j++ {
			payloads = append(payloads, fmt.Sprintf("r-%d", j))
		}
		nodes[i/50%2].Produce("rd", payloads...)
	}
	for dead := 0; dead < redriven; {
		res := nodes[0].Lease("rd", 100)
		var items []*pb.QueueRetryItem
		for _, it := range res.Items {
			items = append(items, &pb.QueueRetryItem{Id: it.Id, Dead: true, Error: "to redrive"})
		}
		for _, o := range nodes[0].Retry("rd", res.Partition, items...) {
			require.Equal(t, "dead_lettered", o.Outcome)
		}
		dead += len(items)
	}
	require.Len(t, nodes[1].Items("rd-dlq"), redriven)

	l := newFaultLedger(t, leaseTimeout)
	stopLoad := runFaultLoad(t, nodes, l, "pf", 7)

	// advance waits until each node has both produced and completed at
	// least n more items than now.
	advance := func(n int, within time.Duration, what string) {
		t.Helper()
		from := l.progress()
		require.Eventually(t, func() bool {
			now := l.progress()
			for i := range now {
				if now[i].produced < from[i].produced+n || now[i].completed < from[i].completed+n {
					return false
				}
			}
			return true
		}, within, 10*time.Millisecond, "%s: both nodes produce and complete again (from %+v)", what, from)
	}
	advance(50, 10*time.Second, "before the faults")

	task, err := nodes[0].C.DeadRedrive(ctx, &pb.DeadRedriveRequest{QueueName: "rd-dlq", All: true, RateLimit: 50})
	require.NoError(t, err)

	for round := range 3 {
		n := pg.TerminateBackends(t)
		t.Logf("round %d: terminated %d sessions", round, n)
		advance(20, 10*time.Second, fmt.Sprintf("after terminating sessions (round %d)", round))
	}

	// The database crashes; while it is away, requests answer 453 fast.
	pg.Crash(t)
	for i, node := range nodes {
		began := time.Now()
		err := node.C.QueueProduce(ctx, &pb.QueueProduceRequest{QueueName: "pf", RequestTimeout: "10s",
			Items: []*pb.QueueProduceItem{{Bytes: []byte(fmt.Sprintf("down-%d", i))}}})
		servertest.RequireCode(t, err, styx.CodeUnavailable, "postgres")
		_, err = node.C.QueueLease(ctx, &pb.QueueLeaseRequest{QueueName: "pf", BatchSize: 1, ClientId: "down", RequestTimeout: "30s"})
		servertest.RequireCode(t, err, styx.CodeUnavailable, "postgres")
		require.Less(t, time.Since(began), 5*time.Second, "node %d: requests while the database is down", i)
	}
	failedBefore := l.failed.Load()
	servertest.Eventually(t, func() bool { return l.failed.Load() >= failedBefore+10 }, "the workload's requests fail while the database is down")
	pg.Start(t)
	advance(50, 30*time.Second, "after the crash")

	n := pg.TerminateBackends(t)
	t.Logf("after the crash: terminated %d sessions", n)
	advance(20, 10*time.Second, "after terminating sessions again")

	// The redrive finishes by itself and moves each item once.
	require.Eventually(t, func() bool {
		task, err = nodes[0].C.RedrivesGet(ctx, &pb.RedriveTaskRequest{TaskId: task.TaskId})
		return err == nil && task.Status != redrive.StatusRunning
	}, 20*time.Second, 20*time.Millisecond, "the redrive task finishes")
	require.Equal(t, redrive.StatusCompleted, task.Status, "redrive task: %+v", task)
	// Nothing failed or was skipped (a second runner of the same task finds
	// the items gone: skipped). Moved may fall short of the items moved: a
	// step whose progress could not be saved before the task's claim was
	// lost is not counted by the server that resumes the task. The items
	// themselves are checked below.
	require.Zero(t, task.Failed, "redrive task: %+v", task)
	require.Zero(t, task.Skipped, "redrive task: %+v", task)
	require.LessOrEqual(t, task.Moved, int64(redriven), "redrive task: %+v", task)
	t.Logf("redrive task: %d of %d moved", task.Moved, task.Matched)
	stopLoad()

	rd := map[string]int{}
	for _, it := range nodes[1].Items("rd") {
		rd[string(it.Payload)]++
	}
	require.Len(t, rd, redriven, "rd holds each redriven item")
	for p, c := range rd {
		require.Equal(t, 1, c, "item %s redriven %d times", p, c)
	}
	require.Empty(t, nodes[1].Items("rd-dlq"))

	// Every acknowledged produce is present exactly once.
	where := map[string][]string{}
	for _, q := range []string{"pf", "pf-dlq"} {
		for _, it := range nodes[0].Items(q) {
			where[string(it.Payload)] = append(where[string(it.Payload)], q)
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for p := range l.completed {
		where[p] = append(where[p], "completed")
	}
	var lostAmbiguous int
	for p := range l.acked {
		switch w := where[p]; {
		case len(w) == 1:
		case len(w) == 0 && l.tried[p]:
			lostAmbiguous++ // completed or dead-lettered by a call whose answer was lost: gone, as asked
		default:
			t.Errorf("acknowledged item %s is in %v, want exactly one place", p, w)
		}
	}
	for p, w := range where {
		require.LessOrEqual(t, len(w), 1, "item %s (acknowledged %v) is in %v", p, l.acked[p], w)
	}
	t.Logf("%d produces acknowledged, %d completed, %d completes or retries whose answer was lost, %d requests failed with 453, slowest failure %s",
		len(l.acked), len(l.completed), lostAmbiguous, l.failed.Load(), time.Duration(l.slowest.Load()))
	require.Less(t, time.Duration(l.slowest.Load()), 5*time.Second, "no failing request waits past its timeout")
}

// faultCallTimeout ends a client's call that the server does not answer: a
// request left unanswered (as a failed iteration once left its later
// requests) fails the test instead of hanging it.
const faultCallTimeout = 10 * time.Second

// newFaultLedger returns an empty ledger of a load whose leases last
// leaseTimeout.
func newFaultLedger(t *testing.T, leaseTimeout time.Duration) *faultLedger {
	return &faultLedger{t: t, leaseTimeout: leaseTimeout, acked: map[string]bool{}, leases: map[string]leaseSeen{},
		completed: map[string]bool{}, tried: map[string]bool{}}
}

// runFaultLoad runs, on each node, a producer (batches of 5) and a consumer
// (leases of 10, completed; with deadEvery > 0, one item in deadEvery,
// picked by its payload's hash, is dead-lettered instead) on queue,
// recording every answer in l, until the returned stop is called (at the
// latest at the test's end); stop waits for them.
func runFaultLoad(t *testing.T, nodes []*servertest.Server, l *faultLedger, queue string, deadEvery uint32) (stop func()) {
	var (
		stopping atomic.Bool
		wg       sync.WaitGroup
	)
	for n, node := range nodes {
		wg.Go(func() { // a producer
			for k := 0; !stopping.Load(); k++ {
				var items []*pb.QueueProduceItem
				var payloads []string
				for j := range 5 {
					p := fmt.Sprintf("p-%d-%d-%d", n, k, j)
					payloads = append(payloads, p)
					items = append(items, &pb.QueueProduceItem{Bytes: []byte(p)})
				}
				began := time.Now()
				cctx, cancel := context.WithTimeout(ctx, faultCallTimeout)
				err := node.C.QueueProduce(cctx, &pb.QueueProduceRequest{QueueName: queue, RequestTimeout: "5s", Items: items})
				cancel()
				if err != nil {
					l.fail("produce", err, time.Since(began), styx.CodeRetry)
					time.Sleep(10 * time.Millisecond) // a client backing off
					continue
				}
				l.mu.Lock()
				for _, p := range payloads {
					l.acked[p] = true
				}
				l.perNode[n].produced += len(payloads)
				l.mu.Unlock()
			}
		})
		wg.Go(func() { // a consumer: completes its items, dead-letters one in deadEvery
			consumer := fmt.Sprintf("consumer-%d", n)
			for !stopping.Load() {
				began := time.Now()
				cctx, cancel := context.WithTimeout(ctx, faultCallTimeout)
				res, err := node.C.QueueLease(cctx, &pb.QueueLeaseRequest{QueueName: queue, BatchSize: 10, ClientId: consumer, RequestTimeout: "500ms"})
				cancel()
				if err != nil {
					if !styx.IsRetry(err) {
						l.fail("lease", err, time.Since(began))
						time.Sleep(10 * time.Millisecond)
					}
					continue
				}
				var done, dead []string
				var deadItems []*pb.QueueRetryItem
				var ids []string
				for _, it := range res.Items {
					l.leased(consumer, it)
					if h := fnv.New32a(); func() bool { h.Write(it.Bytes); return deadEvery > 0 && h.Sum32()%deadEvery == 0 }() {
						dead = append(dead, string(it.Bytes))
						deadItems = append(deadItems, &pb.QueueRetryItem{Id: it.Id, Dead: true, Error: "poison"})
					} else {
						done = append(done, string(it.Bytes))
						ids = append(ids, it.Id)
					}
				}
				if len(ids) > 0 {
					began := time.Now()
					cctx, cancel := context.WithTimeout(ctx, faultCallTimeout)
					err := node.C.QueueComplete(cctx, &pb.QueueCompleteRequest{QueueName: queue, Partition: res.Partition, Ids: ids, RequestTimeout: "5s"})
					cancel()
					if err != nil {
						// 400: a lease that ended while the database was away.
						l.fail("complete", err, time.Since(began), styx.CodeBadRequest, styx.CodeRetry)
					}
					l.ended(done, err == nil, true)
					if err == nil {
						l.mu.Lock()
						l.perNode[n].completed += len(ids)
						l.mu.Unlock()
					}
				}
				if len(deadItems) > 0 {
					began := time.Now()
					cctx, cancel := context.WithTimeout(ctx, faultCallTimeout)
					_, err := node.C.QueueRetry(cctx, &pb.QueueRetryRequest{QueueName: queue, Partition: res.Partition, Items: deadItems})
					cancel()
					if err != nil {
						l.fail("retry", err, time.Since(began), styx.CodeBadRequest, styx.CodeRetry)
					}
					l.ended(dead, err == nil, false)
				}
			}
		})
	}
	var once sync.Once
	stop = func() { once.Do(func() { stopping.Store(true); wg.Wait() }) }
	t.Cleanup(stop)
	return stop
}

package service_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	styx "github.com/styxq/styx"
	"github.com/styxq/styx/daemon"
	"github.com/styxq/styx/internal/pgtest"
	"github.com/styxq/styx/internal/servertest"
	pb "github.com/styxq/styx/styxpb"
)

// Several Styx nodes on one PostgreSQL database (ADR 0006,
// docs/storage/postgres.md): each test starts two in-process nodes on a
// schema of its own.

// cluster starts n nodes on one new postgres schema.
//
// The cluster tests wait on leases and rate limits more than they compute,
// and each has a schema of its own, so they run in parallel (t.Parallel)
// with one another.
func cluster(t *testing.T, n int) []*servertest.Server {
	return clusterWith(t, n, nil)
}

// clusterWith is cluster with a daemon Config that configure adjusts on
// every node (nil: none).
func clusterWith(t *testing.T, n int, configure func(*daemon.Config)) []*servertest.Server {
	b := servertest.Backend{Name: "postgres", URL: pgtest.URL(t)}
	nodes := make([]*servertest.Server, n)
	for i := range nodes {
		nodes[i] = servertest.StartWith(t, b, configure)
	}
	// Lock order (postgres): nodes never deadlock on each other's rows.
	t.Cleanup(func() {
		for i, n := range nodes {
			if logs := n.Logs.String(); strings.Contains(logs, "deadlock") || strings.Contains(logs, "40P01") {
				t.Errorf("node %d logged a deadlock:\n%s", i, logs)
			}
		}
	})
	return nodes
}

// TestClusterNoDoubleLease runs consumers on two nodes against one queue of
// 20,000 items and checks that every item was handed out exactly once (the
// leases are long, so an item is leased again only if two leases were live
// at once) and that every complete succeeded.
func TestClusterNoDoubleLease(t *testing.T) {
	t.Parallel()
	nodes := cluster(t, 2)
	nodes[0].CreateQueue(&pb.QueueInfo{QueueName: "many", LeaseTimeout: "10m", RequestedPartitions: 3})
	const n, batch = 20_000, 1000
	var wg sync.WaitGroup
	for i := 0; i < n; i += batch {
		node := nodes[(i/batch)%2]
		wg.Go(func() {
			req := &pb.QueueProduceRequest{QueueName: "many", RequestTimeout: "1m"}
			for j := i; j < i+batch; j++ {
				req.Items = append(req.Items, &pb.QueueProduceItem{Bytes: []byte(fmt.Sprint(j))})
			}
			assert.NoError(t, node.C.QueueProduce(ctx, req))
		})
	}

	var (
		mu        sync.Mutex
		leased    = map[string]int{}
		completed atomic.Int64
	)
	for c := range 12 {
		node := nodes[c%2]
		size := []int32{1, 10, 100}[c%3]
		wg.Go(func() {
			for completed.Load() < n {
				res, err := node.C.QueueLease(ctx, &pb.QueueLeaseRequest{QueueName: "many", BatchSize: size,
					ClientId: fmt.Sprint("c", c), RequestTimeout: "200ms"})
				if styx.ErrorCode(err) == styx.CodeRetry {
					continue
				}
				if !assert.NoError(t, err) {
					return
				}
				ids := make([]string, len(res.Items))
				mu.Lock()
				for i, it := range res.Items {
					leased[string(it.Bytes)]++
					ids[i] = it.Id
				}
				mu.Unlock()
				if !assert.NoError(t, node.C.QueueComplete(ctx, &pb.QueueCompleteRequest{QueueName: "many", Partition: res.Partition, Ids: ids})) {
					return
				}
				completed.Add(int64(len(ids)))
			}
		})
	}
	wg.Wait()
	require.Len(t, leased, n, "every item leased")
	for p, k := range leased {
		require.Equal(t, 1, k, "item %s leased %d times", p, k)
	}
	require.Equal(t, int64(n), completed.Load())
	require.Empty(t, nodes[1].Items("many"))
}

// TestClusterCrossNodeWake parks a lease on one node and produces on the
// other: the lease is answered through LISTEN/NOTIFY, well before the
// 1-second safety poll would find the item.
func TestClusterCrossNodeWake(t *testing.T) {
	nodes := cluster(t, 2)
	a, b := nodes[0], nodes[1]
	a.CreateQueue(&pb.QueueInfo{QueueName: "wake"})
	var waits []time.Duration
	for round := range 5 {
		got := make(chan time.Time, 1)
		go func() {
			res, err := b.C.QueueLease(ctx, &pb.QueueLeaseRequest{QueueName: "wake", BatchSize: 1, ClientId: "b", RequestTimeout: "10s"})
			if assert.NoError(t, err) && assert.Len(t, res.Items, 1) {
				assert.Equal(t, fmt.Sprint("x", round), string(res.Items[0].Bytes))
				assert.NoError(t, b.C.QueueComplete(ctx, &pb.QueueCompleteRequest{QueueName: "wake", Ids: []string{res.Items[0].Id}}))
			}
			got <- time.Now()
		}()
		servertest.WaitStat(t, b, "wake", func(st *pb.QueueLogicalStats) bool { return st.LeaseWaiting == 1 })
		produced := time.Now()
		a.Produce("wake", fmt.Sprint("x", round))
		woke := <-got
		t.Logf("round %d: leased on node b %s after the produce on node a returned", round, woke.Sub(produced))
		waits = append(waits, woke.Sub(produced))
	}
	// The median, so that one hiccup of a loaded machine does not fail it.
	slices.Sort(waits)
	require.Less(t, waits[len(waits)/2], 500*time.Millisecond, "woken by the notification, not by the 1 s safety poll")
}

// TestClusterQueueDefinitions changes a queue on one node and checks that
// the other applies the change within a second.
func TestClusterQueueDefinitions(t *testing.T) {
	nodes := cluster(t, 2)
	a, b := nodes[0], nodes[1]
	a.CreateQueue(&pb.QueueInfo{QueueName: "defs", LeaseTimeout: "1m"})
	b.Produce("defs", "first") // node b knows the queue at once

	require.NoError(t, a.C.QueuesUpdate(ctx, &pb.QueueInfo{QueueName: "defs", LeaseTimeout: "20m"}))
	changed := time.Now()
	servertest.Eventually(t, func() bool {
		b.Produce("defs", "probe")
		res := b.Lease("defs", 1)
		b.Complete("defs", res.Partition, res.Items[0].Id)
		return time.Until(res.Items[0].LeaseDeadline.AsTime()) > 10*time.Minute
	}, "node b uses the new lease_timeout")
	t.Logf("node b leased with the new lease_timeout %s after the update on node a", time.Since(changed))
	require.Less(t, time.Since(changed), 2*time.Second, "seen within the 1 s refresh (and the probes' own time)")

	require.NoError(t, a.C.QueuesDelete(ctx, &pb.QueuesDeleteRequest{QueueName: "defs"}))
	err := b.C.QueueProduce(ctx, &pb.QueueProduceRequest{QueueName: "defs", Items: []*pb.QueueProduceItem{{Bytes: []byte("late")}}})
	servertest.RequireCode(t, err, styx.CodeBadRequest, "queue does not exist; no such queue named 'defs'")
	_, err = b.C.QueuesInfo(ctx, &pb.QueuesInfoRequest{QueueName: "defs"})
	servertest.RequireCode(t, err, styx.CodeBadRequest, "queue does not exist")
}

// TestClusterDeadLetterVsLease races dead-letter moves against leases on
// the other node: items expire (max_attempts 1, short leases) while
// consumers on both nodes lease them and complete some in time and some too
// late. Every item must end either completed (its complete acknowledged)
// or in the dead-letter queue, never both, never twice, never lost.
func TestClusterDeadLetterVsLease(t *testing.T) {
	t.Parallel()
	nodes := cluster(t, 2)
	a := nodes[0]
	dlq := withDLQ(a, "race", &pb.QueueInfo{MaxAttempts: 1, LeaseTimeout: "1s", RequestedPartitions: 2})
	const n = 300
	for i := 0; i < n; i += 100 {
		var batch []string
		for j := i; j < i+100; j++ {
			batch = append(batch, fmt.Sprint(j))
		}
		nodes[(i/100)%2].Produce("race", batch...)
	}
	var (
		mu        sync.Mutex
		completed = map[string]int{}
		wg        sync.WaitGroup
		done      atomic.Bool
	)
	for c := range 6 {
		node := nodes[c%2]
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(c), 1))
			for !done.Load() {
				res, err := node.C.QueueLease(ctx, &pb.QueueLeaseRequest{QueueName: "race", BatchSize: 10, ClientId: fmt.Sprint("c", c), RequestTimeout: "100ms"})
				if err != nil {
					continue
				}
				for _, it := range res.Items {
					if rng.IntN(3) == 0 {
						// A slow consumer: complete around the lease deadline,
						// racing the lifecycle of both nodes.
						time.Sleep(time.Until(it.LeaseDeadline.AsTime()) + time.Duration(rng.IntN(20)-10)*time.Millisecond)
					}
					err := node.C.QueueComplete(ctx, &pb.QueueCompleteRequest{QueueName: "race", Partition: res.Partition, Ids: []string{it.Id}})
					if err == nil {
						mu.Lock()
						completed[string(it.Bytes)]++
						mu.Unlock()
					} else {
						assert.Equal(t, styx.CodeBadRequest, styx.ErrorCode(err), err.Error())
					}
				}
			}
		})
	}
	// Slow consumers hold each lease up to its deadline: about 5s in all.
	require.Eventually(t, func() bool { return len(a.Items("race")) == 0 }, time.Minute, 50*time.Millisecond, "every item completed or dead")
	done.Store(true)
	wg.Wait()

	dead := map[string]int{}
	for _, it := range nodes[1].Items(dlq) {
		dead[string(it.Payload)]++
		require.Equal(t, "race", it.SourceQueue)
	}
	for i := range n {
		p := fmt.Sprint(i)
		require.Equal(t, 1, completed[p]+dead[p], "item %s: completed %d times, dead %d times", p, completed[p], dead[p])
	}
	t.Logf("%d completed, %d dead-lettered", len(completed), len(dead))
	require.NotEmpty(t, dead, "some completes came too late")
}

// TestClusterRedrive runs a redrive task with two nodes: the task started on
// node a is listed and cancelled through node b, and a task started on node
// b over its items leaves them to it (issue 49: it was refused with 409); a
// second task, whose node stops mid-way, is taken over by node b and
// finishes with every item moved exactly once.
func TestClusterRedrive(t *testing.T) {
	t.Parallel()
	nodes := cluster(t, 2)
	a, b := nodes[0], nodes[1]
	withExpiredDead(a, "cr", 200)

	task, err := a.C.DeadRedrive(ctx, &pb.DeadRedriveRequest{QueueName: "cr-dlq", RateLimit: 40, All: true})
	require.NoError(t, err)
	over, err := b.C.DeadRedrive(ctx, &pb.DeadRedriveRequest{QueueName: "cr-dlq", All: true})
	require.NoError(t, err)
	require.Equal(t, map[string]int64{task.TaskId: over.Matched}, over.LeftTo, "node b's task leaves node a's items to it")
	require.Equal(t, int64(0), waitTask(b, over.TaskId).Moved)
	list, err := b.C.RedrivesList(ctx, &pb.RedrivesListRequest{QueueName: "cr-dlq"})
	require.NoError(t, err)
	require.Len(t, list.Tasks, 2)
	servertest.Eventually(t, func() bool {
		got, err := b.C.RedrivesGet(ctx, &pb.RedriveTaskRequest{TaskId: task.TaskId})
		return err == nil && got.Moved >= 10
	}, "node b sees the progress of node a's task")
	c, err := b.C.RedrivesCancel(ctx, &pb.RedriveTaskRequest{TaskId: task.TaskId})
	require.NoError(t, err)
	require.Equal(t, "cancelling", c.Status)
	done := waitTask(a, task.TaskId)
	require.Equal(t, "cancelled", done.Status)
	require.Less(t, done.Moved, int64(200))
	require.Equal(t, 200, len(a.Items("cr"))+len(a.Items("cr-dlq")), "nothing lost or doubled by the cancel")

	// Node a stops while its second task runs; node b takes it over.
	task, err = a.C.DeadRedrive(ctx, &pb.DeadRedriveRequest{QueueName: "cr-dlq", RateLimit: 40, All: true})
	require.NoError(t, err)
	servertest.Eventually(t, func() bool {
		got, err := b.C.RedrivesGet(ctx, &pb.RedriveTaskRequest{TaskId: task.TaskId})
		return err == nil && got.Moved >= 10
	}, "the second task moves items")
	a.Stop()
	require.Eventually(t, func() bool {
		got, err := b.C.RedrivesGet(ctx, &pb.RedriveTaskRequest{TaskId: task.TaskId})
		require.NoError(t, err)
		return got.Status == "completed"
	}, 30*time.Second, 50*time.Millisecond, "node b finishes the task of the stopped node")
	require.Empty(t, b.Items("cr-dlq"))
	seen := map[string]int{}
	for _, it := range b.Items("cr") {
		seen[string(it.Payload)]++
	}
	require.Len(t, seen, 200)
	for p, k := range seen {
		require.Equal(t, 1, k, "item %s redriven %d times", p, k)
	}
}

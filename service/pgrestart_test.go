package service_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	styx "github.com/styxq/styx"
	"github.com/styxq/styx/internal/pgtest"
	"github.com/styxq/styx/internal/servertest"
	pb "github.com/styxq/styx/styxpb"
)

// TestPostgresRestart restarts PostgreSQL (a cluster of the test's own)
// under a produce workload on two nodes: while it is down, requests fail at
// once with 453 naming the cause; every acknowledged item is there
// afterwards; and the nodes serve again without being restarted.
func TestPostgresRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a PostgreSQL cluster")
	}
	pg := pgtest.StartServer(t)
	b := servertest.Backend{Name: "postgres", URL: pgtest.SchemaURL(t, pg.URL)}
	nodes := []*servertest.Server{servertest.Start(t, b), servertest.Start(t, b)}
	nodes[0].CreateQueue(&pb.QueueInfo{QueueName: "pr"})

	var (
		mu      sync.Mutex
		acked   []string
		failed  atomic.Int64
		slowest atomic.Int64 // longest failing call, ns
		stop    atomic.Bool
		wg      sync.WaitGroup
	)
	for g := range 4 {
		node := nodes[g%2]
		wg.Go(func() {
			for k := 0; !stop.Load(); k++ {
				p := fmt.Sprintf("p-%d-%d", g, k)
				began := time.Now()
				err := node.C.QueueProduce(ctx, &pb.QueueProduceRequest{QueueName: "pr", RequestTimeout: "10s",
					Items: []*pb.QueueProduceItem{{Bytes: []byte(p)}}})
				if err == nil {
					mu.Lock()
					acked = append(acked, p)
					mu.Unlock()
					continue
				}
				// Only "request failed" while the database is away, naming it.
				assert.Equal(t, styx.CodeUnavailable, styx.ErrorCode(err), err.Error())
				assert.Contains(t, err.Error(), "postgres")
				failed.Add(1)
				d := int64(time.Since(began))
				for old := slowest.Load(); d > old && !slowest.CompareAndSwap(old, d); old = slowest.Load() {
				}
				time.Sleep(10 * time.Millisecond) // a client backing off
			}
		})
	}
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(acked) }
	servertest.Eventually(t, func() bool { return count() >= 200 }, "produces before the restart")

	pg.Stop(t)
	servertest.Eventually(t, func() bool { return failed.Load() >= 20 }, "produces fail while the database is down")
	// A waiting lease fails fast too.
	_, err := nodes[1].C.QueueLease(ctx, &pb.QueueLeaseRequest{QueueName: "pr", BatchSize: 1, ClientId: "down", RequestTimeout: "30s"})
	servertest.RequireCode(t, err, styx.CodeUnavailable, "postgres")
	pg.Start(t)

	before := count()
	require.Eventually(t, func() bool { return count() >= before+200 }, 30*time.Second, 10*time.Millisecond, "produces succeed again without restarting Styx")
	stop.Store(true)
	wg.Wait()
	t.Logf("%d produces acknowledged, %d failed during the outage, slowest failure %s", len(acked), failed.Load(), time.Duration(slowest.Load()))
	require.Less(t, time.Duration(slowest.Load()), 5*time.Second, "no failing request waits past its timeout")

	have := map[string]bool{}
	for _, it := range nodes[1].Items("pr") {
		have[string(it.Payload)] = true
	}
	for _, p := range acked {
		require.True(t, have[p], "acknowledged item %s lost", p)
	}
	// Both nodes lease again.
	for _, n := range nodes {
		res := n.Lease("pr", 10)
		require.Len(t, res.Items, 10)
	}
}

package main

import (
	"context"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	styx "github.com/styxq/styx"
	"github.com/styxq/styx/internal/pgtest"
	pb "github.com/styxq/styx/styxpb"
)

// TestHardStopDeadLetterAcrossClusters kills a server over two PostgreSQL
// clusters with SIGKILL while consumers send every item of a queue on main
// (qx) to its dead-letter queue on the other cluster (qed), a two-phase
// move each (ADR 0023), and restarts it: the consumers go on until qx is
// empty, and qed then holds every item exactly once: none lost in the
// window between the two commits (a dying item is sent again by the
// restarted node), none doubled (the dead-letter queue ignores a copy it
// took); then a redrive task moves them all back to qx, each once. The
// kill falls between the two commits of some move in about
// one run in three (measured with the resend left out: the test then
// failed one run in three).
func TestHardStopDeadLetterAcrossClusters(t *testing.T) {
	mainURL := pgtest.URL(t)
	east := pgtest.StartServer(t)
	storage := []string{"--storage", "postgres", "--postgres-url", mainURL, "--postgres-cluster", "east=" + east.URL}
	addr := freePort(t)
	p := startServerWith(t, addr, storage...)
	c := client(t, p.endpoint)
	ctx := context.Background()
	err := c.QueuesCreate(ctx, &pb.QueueInfo{QueueName: "qed", Cluster: "east", LeaseTimeout: "1m", ExpireTimeout: "24h", RequestedPartitions: 1})
	require.NoError(t, err)
	err = c.QueuesCreate(ctx, &pb.QueueInfo{QueueName: "qx", Cluster: "main", DeadQueue: "qed", LeaseTimeout: "2s", ExpireTimeout: "24h",
		RequestedPartitions: 1})
	require.NoError(t, err)
	const total = 400
	for i := 0; i < total; i += 100 {
		req := &pb.QueueProduceRequest{QueueName: "qx"}
		for j := range 100 {
			req.Items = append(req.Items, &pb.QueueProduceItem{Utf8: fmt.Sprintf("item-%d", i+j)})
		}
		require.NoError(t, c.QueueProduce(ctx, req))
	}

	// Consumers kill every item they lease (retry dead: true), until qx
	// is empty or the server is gone.
	var mu sync.Mutex
	killed := 0
	consume := func(c *styx.Client, stop <-chan struct{}) {
		for {
			select {
			case <-stop:
				return
			default:
			}
			res, err := c.QueueLease(ctx, &pb.QueueLeaseRequest{QueueName: "qx", BatchSize: 10, ClientId: "c", RequestTimeout: "200ms"})
			if err != nil && styx.ErrorCode(err) == styx.CodeRetry {
				continue
			}
			if err != nil {
				return // the server died
			}
			items := make([]*pb.QueueRetryItem, len(res.Items))
			for i, it := range res.Items {
				items[i] = &pb.QueueRetryItem{Id: it.Id, Dead: true, Error: "boom"}
			}
			if _, err := c.QueueRetry(ctx, &pb.QueueRetryRequest{QueueName: "qx", Partition: res.Partition, Items: items}); err == nil {
				mu.Lock()
				killed += len(items)
				mu.Unlock()
			}
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() { consume(c, stop) })
	}
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return killed >= 100 }, 60*time.Second, 5*time.Millisecond)
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGKILL))
	_ = p.cmd.Wait()
	close(stop)
	wg.Wait()

	p = startServerWith(t, addr, storage...)
	c = client(t, p.endpoint)
	stop = make(chan struct{})
	for range 2 {
		wg.Go(func() { consume(c, stop) })
	}
	count := func(q string) (map[string]int, int) {
		got, n := map[string]int{}, 0
		pivot := ""
		for {
			res, err := c.StorageItemsList(ctx, &pb.StorageItemsListRequest{QueueName: q, Partition: 0, Pivot: pivot, Limit: 1000})
			require.NoError(t, err)
			for i, it := range res.Items {
				if i == 0 && it.Id == pivot {
					continue
				}
				got[string(it.Payload)]++
				n++
			}
			if len(res.Items) < 1000 {
				return got, n
			}
			pivot = res.Items[len(res.Items)-1].Id
		}
	}
	require.Eventually(t, func() bool {
		_, left := count("qx")
		_, dead := count("qed")
		return left == 0 && dead >= total
	}, 60*time.Second, 50*time.Millisecond, "every item moves to qed (the leases the kill left end after 2 s, the dying items are sent again after 5 s)")
	close(stop)
	wg.Wait()
	got, n := count("qed")
	require.Equal(t, total, n, "no item twice in the dead-letter queue")
	for i := range total {
		require.Equal(t, 1, got[fmt.Sprintf("item-%d", i)], "item-%d", i)
	}

	// And back across the clusters: a redrive task (stored on main) moves
	// every dead item from qed (east) to its source queue qx (main), each
	// once.
	task, err := c.DeadRedrive(ctx, &pb.DeadRedriveRequest{QueueName: "qed", All: true})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		got, err := c.RedrivesGet(ctx, &pb.RedriveTaskRequest{TaskId: task.TaskId})
		return err == nil && got.Status == "completed"
	}, 60*time.Second, 50*time.Millisecond, "the redrive back to qx ends")
	back, n := count("qx")
	require.Equal(t, total, n, "every item back in qx, none twice")
	for i := range total {
		require.Equal(t, 1, back[fmt.Sprintf("item-%d", i)], "item-%d", i)
	}
	_, n = count("qed")
	require.Zero(t, n, "the dead-letter queue is empty after the redrive")
}

package service_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/styxq/styx/daemon"
	"github.com/styxq/styx/internal/servertest"
	pb "github.com/styxq/styx/styxpb"

	styx "github.com/styxq/styx"
)

// BenchmarkRedriveIncident redrives 119,762 dead items (the size of a real
// DLQ incident) back to their source queue on the embedded default (Pebble,
// fsync on), while one producer and one consumer keep working on that queue.
// It reports the redrive's duration and rate and the live traffic's rates
// during it and, for comparison, alone (5 s before the redrive starts). Run with:
//
//	go test -run '^$' -bench RedriveIncident -benchtime 1x ./service/
func BenchmarkRedriveIncident(b *testing.B) {
	const dead = 119_762
	for range b.N {
		d, err := daemon.New(context.Background(), daemon.Config{Listen: "127.0.0.1:0", DataDir: b.TempDir(), Log: servertest.TestLogger()})
		if err != nil {
			b.Fatal(err)
		}
		c, err := styx.NewClient(styx.ClientConfig{Endpoint: d.Endpoint()})
		if err != nil {
			b.Fatal(err)
		}
		ctx := context.Background()
		check := func(err error) {
			if err != nil {
				b.Fatal(err)
			}
		}
		check(c.QueuesCreate(ctx, &pb.QueueInfo{QueueName: "orders-dead"}))
		check(c.QueuesCreate(ctx, &pb.QueueInfo{QueueName: "orders", DeadQueue: "orders-dead"}))
		payload := make([]byte, 1024)
		for i := 0; i < dead; i += 1000 {
			req := &pb.StorageItemsImportRequest{QueueName: "orders-dead"}
			for j := i; j < min(i+1000, dead); j++ {
				req.Items = append(req.Items, &pb.StorageItem{Payload: payload, Kind: "charge", SourceQueue: "orders",
					DeadReason: "max_attempts", LastError: fmt.Sprint("card declined #", j%17), Attempts: 3})
			}
			_, err := c.StorageItemsImport(ctx, req)
			check(err)
		}

		var produced, consumed atomic.Int64
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() { // producer: batches of 10
			req := &pb.QueueProduceRequest{QueueName: "orders"}
			for range 10 {
				req.Items = append(req.Items, &pb.QueueProduceItem{Bytes: payload, Kind: "charge"})
			}
			for {
				select {
				case <-stop:
					return
				default:
				}
				if c.QueueProduce(ctx, req) == nil {
					produced.Add(10)
				}
			}
		})
		wg.Go(func() { // consumer: lease 10, complete them
			for {
				select {
				case <-stop:
					return
				default:
				}
				res, err := c.QueueLease(ctx, &pb.QueueLeaseRequest{QueueName: "orders", BatchSize: 10, ClientId: "bench", RequestTimeout: "1s"})
				if err != nil || len(res.Items) == 0 {
					continue
				}
				ids := make([]string, len(res.Items))
				for i, it := range res.Items {
					ids[i] = it.Id
				}
				if c.QueueComplete(ctx, &pb.QueueCompleteRequest{QueueName: "orders", Partition: res.Partition, Ids: ids}) == nil {
					consumed.Add(int64(len(ids)))
				}
			}
		})

		// Live traffic alone first, for comparison.
		a0, ac0 := produced.Load(), consumed.Load()
		time.Sleep(5 * time.Second) // a fixed measuring window, not a wait for an event
		aloneP, aloneC := float64(produced.Load()-a0)/5, float64(consumed.Load()-ac0)/5

		b.ResetTimer()
		start := time.Now()
		p0, c0 := produced.Load(), consumed.Load()
		task, err := c.DeadRedrive(ctx, &pb.DeadRedriveRequest{QueueName: "orders-dead", All: true})
		check(err)
		for task.Status == "running" || task.Status == "cancelling" {
			time.Sleep(100 * time.Millisecond) // polling the task, as the CLI does
			task, err = c.RedrivesGet(ctx, &pb.RedriveTaskRequest{TaskId: task.TaskId})
			check(err)
		}
		took := time.Since(start)
		p1, c1 := produced.Load(), consumed.Load()
		b.StopTimer()
		close(stop)
		wg.Wait()
		if task.Status != "completed" || task.Moved != dead {
			b.Fatalf("task %s: moved %d of %d", task.Status, task.Moved, dead)
		}
		b.ReportMetric(took.Seconds(), "redrive-s")
		b.ReportMetric(float64(task.Moved)/took.Seconds(), "redriven/s")
		b.ReportMetric(float64(p1-p0)/took.Seconds(), "produced/s")
		b.ReportMetric(float64(c1-c0)/took.Seconds(), "consumed/s")
		b.ReportMetric(aloneP, "produced/s-alone")
		b.ReportMetric(aloneC, "consumed/s-alone")
		c.Close()
		check(d.Close(context.Background()))
	}
}

package service_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	styx "github.com/styxq/styx"
	"github.com/styxq/styx/daemon"
	"github.com/styxq/styx/internal/servertest"
	pb "github.com/styxq/styx/styxpb"
)

// BenchmarkHTTPCycle drives produce → lease → complete through the Go
// client over HTTP against an in-process server on Pebble (sync on), with
// 1 KB payloads. One op is one item. Run with:
//
//	go test -run '^$' -bench HTTPCycle ./service/
func BenchmarkHTTPCycle(b *testing.B) {
	for _, c := range []struct{ clients, batch int }{{16, 1}, {4, 100}} {
		b.Run(fmt.Sprintf("clients%d/batch%d", c.clients, c.batch), func(b *testing.B) {
			d, err := daemon.New(context.Background(), daemon.Config{Listen: "127.0.0.1:0", DataDir: b.TempDir(), Log: servertest.TestLogger()})
			if err != nil {
				b.Fatal(err)
			}
			defer func() { _ = d.Close(context.Background()) }()
			cl, err := styx.NewClient(styx.ClientConfig{Endpoint: d.Endpoint()})
			if err != nil {
				b.Fatal(err)
			}
			defer cl.Close()
			ctx := context.Background()
			if err := cl.QueuesCreate(ctx, &pb.QueueInfo{QueueName: "bench"}); err != nil {
				b.Fatal(err)
			}
			payload := make([]byte, 1024)
			req := &pb.QueueProduceRequest{QueueName: "bench"}
			for range c.batch {
				req.Items = append(req.Items, &pb.QueueProduceItem{Bytes: payload})
			}
			rounds := b.N/(c.clients*c.batch) + 1
			b.SetBytes(1024)
			b.ResetTimer()
			var wg sync.WaitGroup
			for w := range c.clients {
				wg.Go(func() {
					for range rounds {
						if err := cl.QueueProduce(ctx, req); err != nil {
							b.Error(err)
							return
						}
						res, err := cl.QueueLease(ctx, &pb.QueueLeaseRequest{QueueName: "bench", BatchSize: int32(c.batch), ClientId: fmt.Sprint("c", w), RequestTimeout: "5s"})
						if err != nil {
							b.Error(err)
							return
						}
						ids := make([]string, len(res.Items))
						for i, it := range res.Items {
							ids[i] = it.Id
						}
						if err := cl.QueueComplete(ctx, &pb.QueueCompleteRequest{QueueName: "bench", Partition: res.Partition, Ids: ids}); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
		})
	}
}

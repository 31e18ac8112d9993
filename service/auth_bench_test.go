package service_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	styx "github.com/styxq/styx"
	"github.com/styxq/styx/daemon"
	"github.com/styxq/styx/internal/pgtest"
	"github.com/styxq/styx/internal/servertest"
	pb "github.com/styxq/styx/styxpb"
)

// BenchmarkAuthOverhead measures what --auth costs a request: queue.stats
// (a call that touches no item) and produce of one item, through the Go
// client over HTTP with 8 clients, with auth off and on (a stored key,
// looked up in the store on every request), on each backend. Run with:
//
//	go test -run '^$' -bench AuthOverhead ./service/
func BenchmarkAuthOverhead(b *testing.B) {
	type backendCfg struct {
		name string
		cfg  func(b *testing.B) daemon.Config
	}
	backends := []backendCfg{
		{"memory", func(*testing.B) daemon.Config { return daemon.Config{Storage: daemon.StorageMemory} }},
		{"pebble", func(b *testing.B) daemon.Config { return daemon.Config{DataDir: b.TempDir()} }},
	}
	if os.Getenv(pgtest.EnvURL) != "" {
		backends = append(backends, backendCfg{"postgres", func(b *testing.B) daemon.Config {
			return daemon.Config{Storage: daemon.StoragePostgres, PostgresURL: pgtest.URL(b)}
		}})
	}
	for _, be := range backends {
		for _, on := range []bool{false, true} {
			for _, call := range []string{"stats", "produce"} {
				b.Run(fmt.Sprintf("%s/auth=%v/%s", be.name, on, call), func(b *testing.B) {
					benchAuth(b, be.cfg(b), on, call)
				})
			}
		}
	}
}

func benchAuth(b *testing.B, cfg daemon.Config, on bool, call string) {
	ctx := context.Background()
	admin := "bench-admin-key-0123456789abcdef0123456789"
	cfg.Listen, cfg.Log = "127.0.0.1:0", servertest.TestLogger()
	if on {
		file := filepath.Join(b.TempDir(), "admin.key")
		if err := os.WriteFile(file, []byte(admin), 0o600); err != nil {
			b.Fatal(err)
		}
		cfg.Auth, cfg.AdminKeyFile = true, file
	}
	d, err := daemon.New(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = d.Close(ctx) }()
	adminC, err := styx.NewClient(styx.ClientConfig{Endpoint: d.Endpoint(), APIKey: admin})
	if err != nil {
		b.Fatal(err)
	}
	defer adminC.Close()
	if err := adminC.QueuesCreate(ctx, &pb.QueueInfo{QueueName: "bench"}); err != nil {
		b.Fatal(err)
	}
	key := ""
	if on {
		res, err := adminC.KeysCreate(ctx, &pb.KeysCreateRequest{Name: "worker", Scopes: []string{"produce", "read"}, Queues: []string{"bench*"}})
		if err != nil {
			b.Fatal(err)
		}
		key = res.Key
	}
	c, err := styx.NewClient(styx.ClientConfig{Endpoint: d.Endpoint(), APIKey: key})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	const clients = 8
	per := b.N/clients + 1
	b.ResetTimer()
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			for range per {
				var err error
				if call == "stats" {
					_, err = c.QueueStats(ctx, &pb.QueueStatsRequest{QueueName: "bench"})
				} else {
					err = c.QueueProduce(ctx, &pb.QueueProduceRequest{QueueName: "bench", Items: []*pb.QueueProduceItem{{Bytes: []byte("x")}}})
				}
				if err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}

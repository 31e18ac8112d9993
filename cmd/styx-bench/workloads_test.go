package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	styx "github.com/styxq/styx"
	"github.com/styxq/styx/daemon"
	pb "github.com/styxq/styx/styxpb"
	"github.com/styxq/styx/styxtest"
)

func TestClaim(t *testing.T) {
	unlimited := &bench{cfg: config{}}
	if n := unlimited.claim(100); n != 100 {
		t.Errorf("claim without --count = %d, want 100", n)
	}

	b := &bench{cfg: config{Count: 1050}}
	b.left.Store(b.cfg.Count)
	var total atomic.Int64
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for {
				n := b.claim(100)
				if n == 0 {
					return
				}
				if i == 0 && n == 100 && total.Load() < 500 {
					b.unclaim(n) // a failed produce gives its items back
					continue
				}
				total.Add(int64(n))
			}
		})
	}
	wg.Wait()
	if total.Load() != 1050 || b.left.Load() != 0 {
		t.Errorf("claimed %d items, %d left; want 1050 and 0", total.Load(), b.left.Load())
	}
}

func TestClientsSpreadOverEndpoints(t *testing.T) {
	cfg := config{Endpoints: []string{"http://127.0.0.1:1", "http://127.0.0.1:2", "http://127.0.0.1:3"}, Clients: 4}
	b, err := newBench(cfg, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	defer b.c.Close()
	if len(b.clients) != 3 || b.c != b.clients[0] {
		t.Fatalf("%d clients, setup client first: %v", len(b.clients), b.c == b.clients[0])
	}
	for i := range 7 {
		if r := b.newRecorder(i); r.c != b.clients[i%3] {
			t.Errorf("recorder %d does not use endpoint %d", i, i%3)
		}
	}
}

func TestWorkerWorkload(t *testing.T) {
	srv := styxtest.Start(t, styxtest.Options{})
	cfg, err := parseFlags([]string{"--endpoint", srv.Endpoint, "--workload", "worker", "--clients", "8",
		"--prefill", "2500", "--payload", "16", "--duration", "30s", "--lease-wait", "100ms"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := runBench(context.Background(), cfg, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Items != 2500 || rep.Prefill != 2500 || rep.Errors != 0 || len(rep.Requests) != 0 {
		t.Errorf("items %d, prefill %d, errors %d, requests %v: want 2500, 2500, 0 and none",
			rep.Items, rep.Prefill, rep.Errors, rep.Requests)
	}
	if rep.Seconds <= 0 || rep.Seconds > 30 || rep.ItemsPerSec != float64(rep.Items)/rep.Seconds {
		t.Errorf("%d items in %.3fs at %.1f items/s", rep.Items, rep.Seconds, rep.ItemsPerSec)
	}
	if _, err := srv.Client.QueueStats(context.Background(), &pb.QueueStatsRequest{QueueName: cfg.Queue}); err == nil {
		t.Errorf("queue %s was not deleted", cfg.Queue)
	}
}

// TestAPIKey runs a workload against a server with --auth: with --api-key it
// runs; without, it stops at once with the server's 401.
func TestAPIKey(t *testing.T) {
	keyFile := filepath.Join(t.TempDir(), "admin.key")
	admin := "styx_0123456789abcdef_" + strings.Repeat("cd", 32)
	if err := os.WriteFile(keyFile, []byte(admin), 0o600); err != nil {
		t.Fatal(err)
	}
	d, err := daemon.New(context.Background(), daemon.Config{Listen: "127.0.0.1:0", Storage: daemon.StorageMemory,
		Auth: true, AdminKeyFile: keyFile, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close(context.Background()) })
	args := []string{"--endpoint", d.Endpoint(), "--workload", "produce", "--clients", "2", "--count", "200",
		"--payload", "16", "--duration", "30s", "--warmup", "0s"}

	t.Setenv("STYX_API_KEY", "")
	cfg, err := parseFlags(args, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := runBench(context.Background(), cfg, io.Discard); styx.ErrorCode(err) != styx.CodeUnauthorized {
		t.Fatalf("without a key: %v, want 401", err)
	}

	cfg, err = parseFlags(append(args, "--api-key", admin), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := runBench(context.Background(), cfg, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Items != 200 || rep.Errors != 0 {
		t.Errorf("items %d, errors %d: want 200 and 0", rep.Items, rep.Errors)
	}
}

// TestWorkerConsumerCycle runs the cycle in River's shape: the clients only
// produce, a worker consumes, and its completions are the items counted.
func TestWorkerConsumerCycle(t *testing.T) {
	srv := styxtest.Start(t, styxtest.Options{})
	cfg, err := parseFlags([]string{"--endpoint", srv.Endpoint, "--workload", "cycle", "--worker-consumer",
		"--worker-concurrency", "10", "--backlog", "20", "--clients", "2", "--payload", "16", "--duration", "3s",
		"--warmup", "0s", "--lease-wait", "100ms"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := runBench(context.Background(), cfg, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	_, leased := rep.Requests["lease"]
	if rep.Items == 0 || rep.Errors != 0 || rep.Requests["produce"].Count == 0 || leased {
		t.Errorf("items %d, errors %d, requests %v: want items, no error, produces and no lease of the clients'",
			rep.Items, rep.Errors, rep.Requests)
	}

	for _, bad := range [][]string{
		{"--workload", "produce", "--worker-consumer"},
		{"--workload", "cycle", "--worker-consumer", "--complete-with-lease", "--lease-ahead"},
		{"--workload", "cycle", "--worker-consumer", "--worker-concurrency", "0"},
		{"--workload", "cycle", "--worker-consumer", "--backlog", "-1"},
	} {
		if _, err := parseFlags(bad, io.Discard); !errors.Is(err, errUsage) {
			t.Errorf("%q: %v, want a usage error", bad, err)
		}
	}
}

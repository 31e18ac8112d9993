package service_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/backend/embedded/pebble"
	"github.com/styxq/styx/internal/servertest"
	pb "github.com/styxq/styx/styxpb"
)

// TestHealthDegradedThroughSyncFault (issue 48, 2), through HTTP on Pebble:
// while every sync of the write-ahead log fails (a disk whose syncs fail
// and keep failing), under a steady produce load, /health answers 503
// "degraded" every time it is asked, never 200; once the syncs work again
// it answers 200 and produces are served, without a restart. Before the
// fix, the monitor's read-write reopen (which syncs no log) cleared the
// fault, /health answered 200 until the next produce's sync failed, and so
// on: a flap a load balancer reads as a healthy node.
func TestHealthDegradedThroughSyncFault(t *testing.T) {
	var failing atomic.Bool
	fs := errorfs.Wrap(vfs.NewMem(), errorfs.InjectorFunc(func(op errorfs.Op) error {
		switch op.Kind {
		case errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo:
			if failing.Load() && strings.HasSuffix(op.Path, ".log") {
				return errors.New("injected: sync failed")
			}
		}
		return nil
	}))
	s := servertest.Start(t, pebbleOn(func() vfs.FS { return fs }, pebble.Config{MinFreeBytes: -1, CheckInterval: 10 * time.Millisecond}))
	s.CreateQueue(&pb.QueueInfo{QueueName: "hf"})
	s.Produce("hf", "before")
	require.Equal(t, "ok", health(s))

	var produced atomic.Int64
	produce := func() error {
		n := produced.Add(1)
		return s.C.QueueProduce(ctx, &pb.QueueProduceRequest{QueueName: "hf", RequestTimeout: "10s",
			Items: []*pb.QueueProduceItem{{Bytes: fmt.Appendf(nil, "p%d", n)}}})
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			_ = produce()
			time.Sleep(2 * time.Millisecond) // a steady load, not a spin
		}
	})
	defer func() { close(stop); wg.Wait() }()

	failing.Store(true)
	servertest.Eventually(t, func() bool { code, _ := probe(s, "/health"); return code == 503 }, "/health says degraded once the syncs fail")
	// The monitor retries a read-write reopen after 10 ms, doubling: in
	// 3 s it tries about eight times.
	var asked, healthy int
	var last string
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); {
		code, status := probe(s, "/health")
		asked++
		if code == 200 {
			healthy++
		} else {
			last = status
		}
		time.Sleep(2 * time.Millisecond)
	}
	t.Logf("/health asked %d times during the fault, 200 %d times; degraded as %q", asked, healthy, last)
	require.Zero(t, healthy, "/health answered 200 during an ongoing sync fault")
	require.Contains(t, last, "degraded")

	failing.Store(false)
	servertest.Eventually(t, func() bool { code, _ := probe(s, "/health"); return code == 200 }, "/health is ok once the syncs work")
	servertest.Eventually(t, func() bool { return produce() == nil }, "produces are served once the syncs work")
}

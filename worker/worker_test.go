package worker_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	styx "github.com/styxq/styx"
	"github.com/styxq/styx/internal/clock"
	"github.com/styxq/styx/internal/servertest"
	pb "github.com/styxq/styx/styxpb"
	"github.com/styxq/styx/styxtest"
	"github.com/styxq/styx/worker"
)

// Every test runs the worker against a real in-process server on each
// storage backend, through the Go client over HTTP.

var ctx = context.Background()

// eachBackend runs f on a fresh server of every backend, as parallel
// subtests.
func eachBackend(t *testing.T, f func(t *testing.T, c *styx.Client)) {
	eachBackendClock(t, func(t *testing.T, c *styx.Client, _ *clock.Fake) { f(t, c) }, false)
}

// eachBackendFake is eachBackend with the server on a clock.Fake set to
// the current time, which f gives its worker (Config.Clock) and moves.
func eachBackendFake(t *testing.T, f func(t *testing.T, c *styx.Client, clk *clock.Fake)) {
	eachBackendClock(t, f, true)
}

func eachBackendClock(t *testing.T, f func(t *testing.T, c *styx.Client, clk *clock.Fake), fake bool) {
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		opts := b.Options()
		var clk *clock.Fake
		if fake {
			clk = clock.NewFake(time.Now())
			opts.Clock = clk
		}
		f(t, styxtest.Start(t, opts).Client, clk)
	})
}

// queue creates a queue with a dead-letter queue "<name>-dead" (when
// maxAttempts is set) and returns the dead-letter queue's name.
func queue(t *testing.T, c *styx.Client, name string, info *pb.QueueInfo) string {
	t.Helper()
	dead := ""
	if info.MaxAttempts > 0 || info.DeadQueue != "" {
		dead = name + "-dead"
		styxtest.CreateQueue(t, c, &pb.QueueInfo{QueueName: dead})
		info.DeadQueue = dead
	}
	info.QueueName = name
	styxtest.CreateQueue(t, c, info)
	return dead
}

func produce(t *testing.T, c *styx.Client, q string, payloads ...string) {
	t.Helper()
	items := make([]*pb.QueueProduceItem, len(payloads))
	for i, p := range payloads {
		items[i] = &pb.QueueProduceItem{Bytes: []byte(p)}
	}
	require.NoError(t, c.QueueProduce(ctx, &pb.QueueProduceRequest{QueueName: q, Items: items}))
}

// total is how many items q holds in every state, from queue.stats: one
// consistent read, where items' two lists are two reads that an item moving
// between them can slip through.
func total(t *testing.T, c *styx.Client, q string) int {
	t.Helper()
	st, err := c.QueueStats(ctx, &pb.QueueStatsRequest{QueueName: q})
	require.NoError(t, err)
	n := 0
	for _, l := range st.LogicalQueues {
		for _, p := range l.Partitions {
			n += int(p.Total)
		}
	}
	return n
}

// items lists every item of partition 0 of q, scheduled ones included.
func items(t *testing.T, c *styx.Client, q string) []*pb.StorageItem {
	t.Helper()
	res, err := c.StorageItemsList(ctx, &pb.StorageItemsListRequest{QueueName: q, Limit: 1000})
	require.NoError(t, err)
	scheduled, err := c.StorageScheduledList(ctx, &pb.StorageItemsListRequest{QueueName: q, Limit: 1000})
	require.NoError(t, err)
	return append(res.Items, scheduled.Items...)
}

// run starts w and returns a function that stops it and returns Run's
// error.
func run(t *testing.T, w *worker.Worker) (stop func() error) {
	t.Helper()
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(runCtx) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-done:
			case <-time.After(30 * time.Second):
				err = errors.New("Run did not return within 30s of its context's cancel")
			}
		})
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

// testLogger sends the worker's logs to t.Log.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

func newWorker(t *testing.T, c *styx.Client, cfg worker.Config) *worker.Worker {
	t.Helper()
	if cfg.LeaseWait == 0 {
		cfg.LeaseWait = 200 * time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = testLogger(t)
	}
	w, err := worker.New(c, cfg)
	require.NoError(t, err)
	return w
}

func TestOutcomes(t *testing.T) {
	eachBackend(t, func(t *testing.T, c *styx.Client) {
		dead := queue(t, c, "orders", &pb.QueueInfo{MaxAttempts: 2})
		var mu sync.Mutex
		seen := map[string]int{}
		reg := prometheus.NewRegistry()
		w := newWorker(t, c, worker.Config{
			Queue:       "orders",
			Concurrency: 4,
			Backoff:     func(int32) time.Duration { return 0 },
			Metrics:     reg,
			Handler: worker.HandlerFunc(func(ctx context.Context, it *worker.Item) error {
				mu.Lock()
				seen[string(it.Payload)]++
				mu.Unlock()
				switch string(it.Payload) {
				case "ok":
					return nil
				case "flaky":
					if it.Attempts == 1 {
						return errors.New("connection reset")
					}
					return nil
				case "failing":
					return fmt.Errorf("attempt %d failed", it.Attempts)
				case "poison":
					return worker.Dead(errors.New("malformed payload"))
				}
				return errors.New("unexpected payload")
			}),
		})
		produce(t, c, "orders", "ok", "flaky", "failing", "poison")
		stop := run(t, w)
		require.Eventually(t, func() bool {
			return total(t, c, "orders") == 0 && len(items(t, c, dead)) == 2
		}, 20*time.Second, 20*time.Millisecond)
		require.NoError(t, stop())

		mu.Lock()
		assert.Equal(t, map[string]int{"ok": 1, "flaky": 2, "failing": 2, "poison": 1}, seen)
		mu.Unlock()
		byPayload := map[string]*pb.StorageItem{}
		for _, it := range items(t, c, dead) {
			byPayload[string(it.Payload)] = it
		}
		require.Contains(t, byPayload, "failing")
		f := byPayload["failing"]
		assert.Equal(t, "max_attempts", f.DeadReason)
		assert.Equal(t, "attempt 2 failed", f.LastError)
		require.Len(t, f.Errors, 2)
		assert.Equal(t, "attempt 1 failed", f.Errors[0].Error)
		require.Contains(t, byPayload, "poison")
		p := byPayload["poison"]
		assert.Equal(t, "explicit", p.DeadReason)
		assert.Equal(t, "malformed payload", p.LastError)
		assert.Equal(t, int32(1), p.Attempts)

		for outcome, want := range map[string]float64{"completed": 2, "retried": 2, "dead": 2, "released": 0, "lost": 0} {
			assert.Equal(t, want, itemsTotal(t, reg, outcome), outcome)
		}
	})
}

// itemsTotal is the value of styx_worker_items_total{outcome} in reg.
func itemsTotal(t *testing.T, reg *prometheus.Registry, outcome string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != "styx_worker_items_total" {
			continue
		}
		for _, m := range mf.Metric {
			for _, l := range m.Label {
				if l.GetName() == "outcome" && l.GetValue() == outcome {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("no styx_worker_items_total series with outcome %q", outcome)
	return 0
}

func TestBackoffIsHonoured(t *testing.T) {
	eachBackend(t, func(t *testing.T, c *styx.Client) {
		queue(t, c, "slow", &pb.QueueInfo{})
		const backoff = 400 * time.Millisecond
		var mu sync.Mutex
		var at []time.Time
		w := newWorker(t, c, worker.Config{
			Queue:   "slow",
			Backoff: func(attempts int32) time.Duration { return time.Duration(attempts) * backoff },
			Handler: worker.HandlerFunc(func(ctx context.Context, it *worker.Item) error {
				mu.Lock()
				defer mu.Unlock()
				at = append(at, time.Now())
				if it.Attempts < 3 {
					return errors.New("not yet")
				}
				return nil
			}),
		})
		produce(t, c, "slow", "x")
		run(t, w)
		require.Eventually(t, func() bool { return total(t, c, "slow") == 0 }, 20*time.Second, 20*time.Millisecond)
		mu.Lock()
		defer mu.Unlock()
		require.Len(t, at, 3)
		for i := 1; i < len(at); i++ {
			gap := at[i].Sub(at[i-1])
			assert.GreaterOrEqual(t, gap, time.Duration(i)*backoff, "gap before attempt %d", i+1)
			t.Logf("gap before attempt %d: %s (backoff %s)", i+1, gap.Round(time.Millisecond), time.Duration(i)*backoff)
		}
	})
}

func TestRetryAfter(t *testing.T) {
	eachBackend(t, func(t *testing.T, c *styx.Client) {
		queue(t, c, "limited", &pb.QueueInfo{})
		var mu sync.Mutex
		var at []time.Time
		w := newWorker(t, c, worker.Config{
			Queue:   "limited",
			Backoff: func(int32) time.Duration { return time.Hour },
			Handler: worker.HandlerFunc(func(ctx context.Context, it *worker.Item) error {
				mu.Lock()
				defer mu.Unlock()
				at = append(at, time.Now())
				if it.Attempts == 1 {
					return worker.RetryAfter(300*time.Millisecond, errors.New("429 too many requests"))
				}
				return nil
			}),
		})
		produce(t, c, "limited", "x")
		run(t, w)
		require.Eventually(t, func() bool { return total(t, c, "limited") == 0 }, 20*time.Second, 20*time.Millisecond)
		mu.Lock()
		defer mu.Unlock()
		require.Len(t, at, 2)
		assert.GreaterOrEqual(t, at[1].Sub(at[0]), 300*time.Millisecond)
	})
}

func TestPanicIsRetriedThenDead(t *testing.T) {
	eachBackend(t, func(t *testing.T, c *styx.Client) {
		dead := queue(t, c, "panicky", &pb.QueueInfo{MaxAttempts: 2})
		var calls atomic.Int32
		w := newWorker(t, c, worker.Config{
			Queue:   "panicky",
			Backoff: func(int32) time.Duration { return 0 },
			Handler: worker.HandlerFunc(func(ctx context.Context, it *worker.Item) error {
				calls.Add(1)
				if string(it.Payload) == "boom" {
					var m map[string]int
					//lint:ignore SA5000 a handler's runtime panic, on purpose
					m["x"] = 1 // assignment to entry in nil map
				}
				return nil
			}),
		})
		produce(t, c, "panicky", "boom")
		run(t, w)
		require.Eventually(t, func() bool { return len(items(t, c, dead)) == 1 }, 20*time.Second, 20*time.Millisecond)
		d := items(t, c, dead)[0]
		assert.Equal(t, "max_attempts", d.DeadReason)
		assert.True(t, strings.HasPrefix(d.LastError, "panic: assignment to entry in nil map"), d.LastError)
		assert.Contains(t, d.LastError, "worker_test.go", "the stack names the panicking frame")
		require.Len(t, d.Errors, 2)
		assert.True(t, strings.HasPrefix(d.Errors[0].Error, "panic: "))

		// The worker survived its handler's panics.
		produce(t, c, "panicky", "fine")
		require.Eventually(t, func() bool { return total(t, c, "panicky") == 0 }, 20*time.Second, 20*time.Millisecond)
		assert.Equal(t, int32(3), calls.Load())
	})
}

// TestLongHandlerKeepsItsLease runs a handler three times as long as its
// lease: the worker renews it, so it is handled once. The server and the
// worker share a fake clock, which the handler moves.
func TestLongHandlerKeepsItsLease(t *testing.T) {
	eachBackendFake(t, func(t *testing.T, c *styx.Client, clk *clock.Fake) {
		queue(t, c, "long", &pb.QueueInfo{LeaseTimeout: "1s"})
		var calls atomic.Int32
		var deadlines [2]time.Time
		w := newWorker(t, c, worker.Config{
			Queue:       "long",
			Concurrency: 2,
			Clock:       clk,
			Handler: worker.HandlerFunc(func(ctx context.Context, it *worker.Item) error {
				calls.Add(1)
				deadlines[0] = it.Deadline()
				// Five steps of 600ms: after each, the lease is past half
				// its length, so due for renewal, and still live; the
				// handler waits until the worker has renewed it.
				for range 5 {
					clk.Advance(600 * time.Millisecond)
					renewed := assert.Eventually(t, func() bool {
						return ctx.Err() == nil && it.Deadline().Sub(clk.Now()) > 500*time.Millisecond
					}, 10*time.Second, time.Millisecond, "the worker renews the lease")
					if !renewed {
						return errors.New("not renewed")
					}
				}
				deadlines[1] = it.Deadline()
				return nil
			}),
		})
		produce(t, c, "long", "x")
		stop := run(t, w)
		require.Eventually(t, func() bool { return total(t, c, "long") == 0 }, 20*time.Second, 20*time.Millisecond)
		require.NoError(t, stop())
		assert.Equal(t, int32(1), calls.Load(), "handled once: the lease never expired")
		assert.Equal(t, 3*time.Second, deadlines[1].Sub(deadlines[0]).Round(time.Millisecond), "renewals moved the deadline")
	})
}

func TestShutdownReleasesUnstartedItems(t *testing.T) {
	eachBackend(t, func(t *testing.T, c *styx.Client) {
		queue(t, c, "drain", &pb.QueueInfo{})
		started := make(chan string, 10)
		proceed := make(chan struct{})
		w := newWorker(t, c, worker.Config{
			Queue:       "drain",
			Concurrency: 2,
			Prefetch:    4,
			Handler: worker.HandlerFunc(func(ctx context.Context, it *worker.Item) error {
				started <- string(it.Payload)
				<-proceed
				return nil
			}),
		})
		produce(t, c, "drain", "1", "2", "3", "4", "5", "6", "7", "8")
		stop := run(t, w)
		// Two handlers run, four items are prefetched: six leased.
		<-started
		<-started
		require.Eventually(t, func() bool {
			leased := 0
			for _, it := range items(t, c, "drain") {
				if it.IsLeased {
					leased++
				}
			}
			return leased == 6
		}, 10*time.Second, 10*time.Millisecond)
		stopped := make(chan error, 1)
		go func() { stopped <- stop() }()
		// Unstarted items are released while the handlers still run.
		require.Eventually(t, func() bool {
			released := 0
			for _, it := range items(t, c, "drain") {
				if !it.IsLeased && it.Attempts == 0 {
					released++
				}
			}
			return released == 6
		}, 10*time.Second, 10*time.Millisecond)
		close(proceed)
		require.NoError(t, <-stopped)
		left := items(t, c, "drain")
		require.Len(t, left, 6, "the two running items completed")
		for _, it := range left {
			assert.False(t, it.IsLeased, "nothing stays leased")
			assert.Equal(t, int32(0), it.Attempts, "a released attempt is not counted")
		}
		assert.Empty(t, started, "no handler started after the shutdown began")
	})
}

func TestShutdownTimeoutCancelsHandlers(t *testing.T) {
	eachBackend(t, func(t *testing.T, c *styx.Client) {
		queue(t, c, "stuck", &pb.QueueInfo{})
		started := make(chan struct{}, 1)
		cause := make(chan error, 1)
		w := newWorker(t, c, worker.Config{
			Queue:           "stuck",
			ShutdownTimeout: 100 * time.Millisecond,
			Handler: worker.HandlerFunc(func(ctx context.Context, it *worker.Item) error {
				started <- struct{}{}
				<-ctx.Done()
				cause <- context.Cause(ctx)
				return ctx.Err()
			}),
		})
		produce(t, c, "stuck", "x")
		stop := run(t, w)
		<-started
		require.NoError(t, stop())
		assert.ErrorIs(t, <-cause, worker.ErrShutdown)
		left := items(t, c, "stuck")
		require.Len(t, left, 1)
		assert.False(t, left[0].IsLeased)
		assert.Equal(t, int32(0), left[0].Attempts, "an item cut short by the shutdown is released")
	})
}

func TestLostLeaseCancelsHandler(t *testing.T) {
	eachBackend(t, func(t *testing.T, c *styx.Client) {
		queue(t, c, "lost", &pb.QueueInfo{LeaseTimeout: "1s"})
		leased := make(chan *worker.Item, 1)
		cause := make(chan error, 1)
		w := newWorker(t, c, worker.Config{
			Queue: "lost",
			Handler: worker.HandlerFunc(func(ctx context.Context, it *worker.Item) error {
				leased <- it
				<-ctx.Done()
				cause <- context.Cause(ctx)
				return ctx.Err()
			}),
		})
		produce(t, c, "lost", "x")
		run(t, w)
		it := <-leased
		// An operator deletes the leased item: the next renewal is refused.
		require.NoError(t, c.StorageItemsDelete(ctx, &pb.StorageItemsDeleteRequest{QueueName: "lost", Partition: it.Partition, Ids: []string{it.ID}}))
		select {
		case err := <-cause:
			assert.ErrorIs(t, err, worker.ErrLeaseLost)
		case <-time.After(10 * time.Second):
			t.Fatal("the handler's context was not cancelled after its lease was lost")
		}
	})
}

// blockRenewals is an http.RoundTripper that fails every queue.renew call
// while block is set: the server never hears of them.
type blockRenewals struct {
	block atomic.Bool
	next  http.RoundTripper
}

func (b *blockRenewals) RoundTrip(r *http.Request) (*http.Response, error) {
	if b.block.Load() && strings.HasSuffix(r.URL.Path, "/queue.renew") {
		return nil, errors.New("injected: network down")
	}
	return b.next.RoundTrip(r)
}

func TestExpiredLeaseCancelsHandler(t *testing.T) {
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		srv := styxtest.Start(t, b.Options())
		rt := &blockRenewals{next: http.DefaultTransport}
		rt.block.Store(true)
		c, err := styx.NewClient(styx.ClientConfig{Endpoint: srv.Endpoint, HTTPClient: &http.Client{Transport: rt}})
		require.NoError(t, err)
		t.Cleanup(c.Close)
		queue(t, c, "expiring", &pb.QueueInfo{LeaseTimeout: "1s"})
		causes := make(chan error, 2)
		var attempts []int32
		var mu sync.Mutex
		w := newWorker(t, c, worker.Config{
			Queue: "expiring",
			Handler: worker.HandlerFunc(func(ctx context.Context, it *worker.Item) error {
				mu.Lock()
				attempts = append(attempts, it.Attempts)
				mu.Unlock()
				if it.Attempts > 1 {
					return nil
				}
				<-ctx.Done() // a handler stuck past its lease
				causes <- context.Cause(ctx)
				rt.block.Store(false)
				return ctx.Err()
			}),
		})
		produce(t, c, "expiring", "x")
		stop := run(t, w)
		select {
		case err := <-causes:
			assert.ErrorIs(t, err, worker.ErrLeaseLost)
		case <-time.After(10 * time.Second):
			t.Fatal("the handler's context was not cancelled when its lease expired unrenewed")
		}
		// The expired lease counted as an attempt; the item came back and was
		// completed on the second.
		require.Eventually(t, func() bool { return total(t, c, "expiring") == 0 }, 10*time.Second, 10*time.Millisecond)
		require.NoError(t, stop())
		mu.Lock()
		defer mu.Unlock()
		assert.Equal(t, []int32{1, 2}, attempts)
	})
}

func TestConcurrencyLimit(t *testing.T) {
	eachBackend(t, func(t *testing.T, c *styx.Client) {
		queue(t, c, "many", &pb.QueueInfo{RequestedPartitions: 2})
		const limit = 4
		var running, peak, done atomic.Int32
		w := newWorker(t, c, worker.Config{
			Queue:       "many",
			Concurrency: limit,
			Prefetch:    3,
			Handler: worker.HandlerFunc(func(ctx context.Context, it *worker.Item) error {
				n := running.Add(1)
				for {
					p := peak.Load()
					if n <= p || peak.CompareAndSwap(p, n) {
						break
					}
				}
				time.Sleep(5 * time.Millisecond) // hold the slot so handlers overlap
				running.Add(-1)
				done.Add(1)
				return nil
			}),
		})
		for range 4 {
			produce(t, c, "many", strings.Split(strings.Repeat("x,", 25), ",")[:25]...)
		}
		stop := run(t, w)
		require.Eventually(t, func() bool { return done.Load() == 100 }, 30*time.Second, 10*time.Millisecond)
		require.NoError(t, stop())
		assert.LessOrEqual(t, peak.Load(), int32(limit))
		assert.Equal(t, int32(limit), peak.Load(), "the worker uses its slots")
	})
}

func TestNewValidatesConfig(t *testing.T) {
	c, err := styx.NewClient(styx.ClientConfig{})
	require.NoError(t, err)
	h := worker.HandlerFunc(func(context.Context, *worker.Item) error { return nil })
	for _, tc := range []struct {
		cfg  worker.Config
		want string
	}{
		{worker.Config{Handler: h}, "Queue is required"},
		{worker.Config{Queue: "q"}, "Handler is required"},
		{worker.Config{Queue: "q", Handler: h, Concurrency: -1}, "Concurrency is -1"},
		{worker.Config{Queue: "q", Handler: h, Concurrency: 900, Prefetch: 200}, "Concurrency + Prefetch is 1100, the limit is 1000"},
		{worker.Config{Queue: "q", Handler: h, Prefetch: -2}, "Prefetch is -2"},
		{worker.Config{Queue: "q", Handler: h, ShutdownTimeout: -time.Second}, "ShutdownTimeout is -1s"},
		{worker.Config{Queue: "q", Handler: h, LeaseWait: time.Millisecond}, "LeaseWait is 1ms"},
		{worker.Config{Queue: "q", Handler: h, LeaseTimeout: -time.Millisecond}, "LeaseTimeout is -1ms"},
		{worker.Config{Queue: "q", Handler: h, CompleteWithLease: 7}, "CompleteWithLease is 7"},
	} {
		_, err := worker.New(c, tc.cfg)
		require.Error(t, err)
		assert.Contains(t, err.Error(), tc.want)
	}
	_, err = worker.New(nil, worker.Config{Queue: "q", Handler: h})
	assert.ErrorContains(t, err, "client is nil")
}

func TestDefaultBackoff(t *testing.T) {
	for n, want := range map[int32]time.Duration{1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 10: 512 * time.Second, 11: 10 * time.Minute, 1000: 10 * time.Minute} {
		for range 50 {
			d := worker.DefaultBackoff(n)
			require.GreaterOrEqual(t, d, want/2, "attempt %d", n)
			require.LessOrEqual(t, d, want, "attempt %d", n)
		}
	}
}

func TestWorkersShareARegisterer(t *testing.T) {
	c, err := styx.NewClient(styx.ClientConfig{})
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	h := worker.HandlerFunc(func(context.Context, *worker.Item) error { return nil })
	for _, q := range []string{"a", "b", "a"} {
		_, err := worker.New(c, worker.Config{Queue: q, Handler: h, Metrics: reg})
		require.NoError(t, err, "queue %s", q)
	}
	mfs, err := reg.Gather()
	require.NoError(t, err)
	names := map[string]bool{}
	for _, mf := range mfs {
		names[mf.GetName()] = true
	}
	assert.True(t, names["styx_worker_items_total"])
	assert.True(t, names["styx_worker_items_in_flight"])
}

package worker_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	styx "github.com/styxq/styx"
	pb "github.com/styxq/styx/styxpb"
	"github.com/styxq/styx/styxtest"
	"github.com/styxq/styx/worker"
)

// The worker runs in its user's process: nothing a handler returns or
// does, and no callback in worker.Config, may crash that process (issue
// 41). These tests hand the worker what a buggy program would.

// deadItems lists every item of the dead-letter queue dead through
// dead.list, by payload.
func deadItems(t *testing.T, c *styx.Client, dead string) map[string]*pb.StorageItem {
	t.Helper()
	res, err := c.DeadList(ctx, &pb.DeadListRequest{QueueName: dead, Limit: 1000})
	require.NoError(t, err)
	out := map[string]*pb.StorageItem{}
	for _, it := range res.Items {
		out[string(it.Payload)] = it
	}
	return out
}

// checkLastError checks that a dead item's last error is valid UTF-8 of
// at least minBytes and at most the server's 4096, and a prefix of full.
func checkLastError(t *testing.T, it *pb.StorageItem, full string, minBytes int) {
	t.Helper()
	got := it.LastError
	assert.True(t, utf8.ValidString(got), "last_error is valid UTF-8")
	assert.GreaterOrEqual(t, len(got), minBytes, "last_error keeps what fits")
	assert.LessOrEqual(t, len(got), 4096)
	assert.True(t, strings.HasPrefix(full, got), "last_error is a prefix of the handler's error")
}

// TestLongErrorIsDeadLettered is issue 41's case: a handler error over the
// server's 4096-byte limit that is not ASCII. The worker used to panic
// (3,000 × "é": slice bounds out of range inside Worker.retry, no recover)
// or keep 15 bytes (Cyrillic).
func TestLongErrorIsDeadLettered(t *testing.T) {
	eachBackend(t, func(t *testing.T, c *styx.Client) {
		dead := queue(t, c, "cyr", &pb.QueueInfo{MaxAttempts: 1})
		cyrillic := strings.Repeat("ж", 5000) // 10,000 bytes
		eAcute := strings.Repeat("é", 3000)
		invalid := strings.Repeat("ошибка \xff", 1000)
		var done atomic.Int32
		w := newWorker(t, c, worker.Config{
			Queue: "cyr",
			Handler: worker.HandlerFunc(func(ctx context.Context, it *worker.Item) error {
				switch string(it.Payload) {
				case "cyrillic":
					return errors.New(cyrillic)
				case "e-acute":
					return errors.New(eAcute)
				case "dead-cyrillic":
					return worker.Dead(errors.New(cyrillic))
				case "invalid-utf8":
					return errors.New(invalid)
				}
				done.Add(1)
				return nil
			}),
		})
		produce(t, c, "cyr", "cyrillic", "e-acute", "dead-cyrillic", "invalid-utf8")
		stop := run(t, w)
		require.Eventually(t, func() bool { return len(deadItems(t, c, dead)) == 4 }, 20*time.Second, 20*time.Millisecond)

		got := deadItems(t, c, dead)
		assert.Equal(t, "max_attempts", got["cyrillic"].DeadReason)
		checkLastError(t, got["cyrillic"], cyrillic, 4094)
		checkLastError(t, got["e-acute"], eAcute, 4096)
		assert.Equal(t, "explicit", got["dead-cyrillic"].DeadReason)
		checkLastError(t, got["dead-cyrillic"], cyrillic, 4094)
		checkLastError(t, got["invalid-utf8"], strings.ToValidUTF8(invalid, "\uFFFD"), 4093)
		for name, it := range got {
			require.Len(t, it.Errors, 1, name)
			assert.Equal(t, it.LastError, it.Errors[0].Error, "%s: the attempt history keeps the same text", name)
		}

		// The process and the worker live on.
		produce(t, c, "cyr", "fine")
		require.Eventually(t, func() bool { return done.Load() == 1 && total(t, c, "cyr") == 0 }, 20*time.Second, 20*time.Millisecond)
		require.NoError(t, stop())
	})
}

// stringPanics panics in String with a value that panics in String: fmt
// recovers the first panic, not the second.
type stringPanics struct{ depth int }

func (s stringPanics) String() string {
	if s.depth > 0 {
		panic(stringPanics{s.depth - 1})
	}
	panic("String failed")
}

// nilPointerError is an error type whose Error method dereferences its
// receiver.
type nilPointerError struct{ msg string }

func (e *nilPointerError) Error() string { return e.msg }

// errorPanics is an error whose Error method panics with v.
type errorPanics struct{ v any }

func (e errorPanics) Error() string { panic(e.v) }

// selfWrapping is an error whose Unwrap returns itself: errors.As on it
// never returns.
type selfWrapping struct{}

func (selfWrapping) Error() string   { return "wraps itself" }
func (e selfWrapping) Unwrap() error { return e }

// unwrapPanics is an error whose Unwrap panics.
type unwrapPanics struct{}

func (unwrapPanics) Error() string { return "unwrap panics" }
func (unwrapPanics) Unwrap() error { panic("unwrap panics") }

// TestHandlerPanicsWithWeirdValues panics in handlers with values that are
// hard to print: each attempt fails (and is retried) with "panic: ..." as
// its error, and the worker lives on.
func TestHandlerPanicsWithWeirdValues(t *testing.T) {
	var typedNil *nilPointerError
	weird := map[string]any{
		"String panics twice": stringPanics{1},
		"String panics":       stringPanics{0},
		"nil":                 nil,
		"typed nil error":     typedNil,
		"Error panics":        errorPanics{stringPanics{2}},
		"long invalid UTF-8":  strings.Repeat("\xe2\x82", 5000),
		"long Cyrillic":       errors.New(strings.Repeat("ж", 5000)),
	}
	eachBackend(t, func(t *testing.T, c *styx.Client) {
		dead := queue(t, c, "weird", &pb.QueueInfo{MaxAttempts: 2})
		reg := prometheus.NewRegistry()
		var mu sync.Mutex
		attempts := map[string][]int32{}
		w := newWorker(t, c, worker.Config{
			Queue:       "weird",
			Concurrency: 3,
			Backoff:     func(int32) time.Duration { return 0 },
			Metrics:     reg,
			Handler: worker.HandlerFunc(func(ctx context.Context, it *worker.Item) error {
				mu.Lock()
				attempts[string(it.Payload)] = append(attempts[string(it.Payload)], it.Attempts)
				mu.Unlock()
				if v, ok := weird[string(it.Payload)]; ok {
					panic(v)
				}
				return nil
			}),
		})
		var names []string
		for name := range weird {
			names = append(names, name)
		}
		produce(t, c, "weird", names...)
		stop := run(t, w)
		require.Eventually(t, func() bool { return len(deadItems(t, c, dead)) == len(weird) }, 20*time.Second, 20*time.Millisecond)

		for name, it := range deadItems(t, c, dead) {
			assert.Equal(t, "max_attempts", it.DeadReason, name)
			require.Len(t, it.Errors, 2, "%s: retried once, then dead", name)
			for _, e := range it.Errors {
				assert.True(t, strings.HasPrefix(e.Error, "panic: "), "%s: %q", name, e.Error)
				assert.True(t, utf8.ValidString(e.Error), name)
				assert.LessOrEqual(t, len(e.Error), 4096, name)
			}
		}
		last := deadItems(t, c, dead)
		assert.True(t, strings.HasPrefix(last["String panics twice"].LastError, "panic: worker_test.stringPanics value whose String or Error method panicked"), last["String panics twice"].LastError)
		assert.True(t, strings.HasPrefix(last["nil"].LastError, "panic: panic called with nil argument"), last["nil"].LastError)
		assert.True(t, strings.HasPrefix(last["long Cyrillic"].LastError, "panic: жжж"))
		assert.GreaterOrEqual(t, len(last["long Cyrillic"].LastError), 4094)

		produce(t, c, "weird", "fine")
		require.Eventually(t, func() bool { return total(t, c, "weird") == 0 }, 20*time.Second, 20*time.Millisecond)
		require.NoError(t, stop())
		mu.Lock()
		defer mu.Unlock()
		for name := range weird {
			assert.Equal(t, []int32{1, 2}, attempts[name], name)
		}
		assert.Equal(t, []int32{1}, attempts["fine"])
		assert.Equal(t, float64(2*len(weird)), counter(t, reg, "styx_worker_panics_total"))
	})
}

// counter is the value of the counter name in reg (one series).
func counter(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.Metric) == 1 {
			return mf.Metric[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no counter %s", name)
	return 0
}

// TestHandlerReturnsBrokenErrors returns errors that break the usual ways
// of reading one: an Error method that panics (a nil pointer of an error
// type), an Unwrap that returns itself (errors.As never returns) or that
// panics. Each is an ordinary failed attempt, with a text saying what was
// wrong.
func TestHandlerReturnsBrokenErrors(t *testing.T) {
	var typedNil *nilPointerError
	broken := map[string]struct {
		err  error
		want string // last_error's prefix
	}{
		"typed nil pointer": {typedNil, "nil *worker_test.nilPointerError returned as an error; its Error method panicked: runtime error: invalid memory address or nil pointer dereference"},
		"Error panics":      {errorPanics{stringPanics{1}}, "worker_test.errorPanics: its Error method panicked: worker_test.stringPanics value whose String or Error method panicked"},
		"self-wrapping":     {fmt.Errorf("outer: %w", selfWrapping{}), "outer: wraps itself"},
		"Unwrap panics":     {fmt.Errorf("outer: %w", unwrapPanics{}), "outer: unwrap panics"},
		"Dead of typed nil": {worker.Dead(typedNil), "nil *worker_test.nilPointerError returned as an error; its Error method panicked"},
		"empty":             {errors.New(""), "*errors.errorString with no text"},
	}
	eachBackend(t, func(t *testing.T, c *styx.Client) {
		dead := queue(t, c, "broken", &pb.QueueInfo{MaxAttempts: 1})
		w := newWorker(t, c, worker.Config{
			Queue:       "broken",
			Concurrency: 2,
			Handler: worker.HandlerFunc(func(ctx context.Context, it *worker.Item) error {
				if b, ok := broken[string(it.Payload)]; ok {
					return b.err
				}
				return nil
			}),
		})
		var names []string
		for name := range broken {
			names = append(names, name)
		}
		produce(t, c, "broken", names...)
		stop := run(t, w)
		require.Eventually(t, func() bool { return len(deadItems(t, c, dead)) == len(broken) }, 20*time.Second, 20*time.Millisecond)
		for name, it := range deadItems(t, c, dead) {
			assert.True(t, strings.HasPrefix(it.LastError, broken[name].want), "%s: %q", name, it.LastError)
		}
		assert.Equal(t, "explicit", deadItems(t, c, dead)["Dead of typed nil"].DeadReason, "Dead is read without calling Error")
		produce(t, c, "broken", "fine")
		require.Eventually(t, func() bool { return total(t, c, "broken") == 0 }, 20*time.Second, 20*time.Millisecond)
		require.NoError(t, stop())
	})
}

// TestHandlerGoexit calls runtime.Goexit in a handler (what t.FailNow or
// require does in a handler under test): the item is retried with an
// error that says so, and the worker's only handler slot is not lost.
func TestHandlerGoexit(t *testing.T) {
	eachBackend(t, func(t *testing.T, c *styx.Client) {
		dead := queue(t, c, "exits", &pb.QueueInfo{MaxAttempts: 2})
		var attempts atomic.Int32
		w := newWorker(t, c, worker.Config{
			Queue:       "exits",
			Concurrency: 1,
			Backoff:     func(int32) time.Duration { return 0 },
			Handler: worker.HandlerFunc(func(ctx context.Context, it *worker.Item) error {
				if string(it.Payload) == "exit" {
					attempts.Add(1)
					runtime.Goexit()
				}
				return nil
			}),
		})
		produce(t, c, "exits", "exit")
		stop := run(t, w)
		require.Eventually(t, func() bool { return len(deadItems(t, c, dead)) == 1 }, 20*time.Second, 20*time.Millisecond)
		d := deadItems(t, c, dead)["exit"]
		require.NotNil(t, d)
		assert.Equal(t, "max_attempts", d.DeadReason)
		assert.Contains(t, d.LastError, "runtime.Goexit")
		assert.Equal(t, int32(2), attempts.Load())

		produce(t, c, "exits", "fine")
		require.Eventually(t, func() bool { return total(t, c, "exits") == 0 }, 20*time.Second, 20*time.Millisecond)
		require.NoError(t, stop())
	})
}

// panicClock panics in Now and After.
type panicClock struct{}

func (panicClock) Now() time.Time                       { panic("clock: no time") }
func (panicClock) After(time.Duration) <-chan time.Time { panic("clock: no timer") }

// panicLogHandler panics on every record.
type panicLogHandler struct{ slog.Handler }

func (panicLogHandler) Enabled(context.Context, slog.Level) bool  { return true }
func (panicLogHandler) Handle(context.Context, slog.Record) error { panic("logger: disk full") }
func (h panicLogHandler) WithAttrs([]slog.Attr) slog.Handler      { return h }

// panicTransport panics on the first call of each kind in panicOn.
type panicTransport struct {
	mu      sync.Mutex
	panicOn map[string]bool
	next    http.RoundTripper
}

func (p *panicTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	p.mu.Lock()
	for suffix, armed := range p.panicOn {
		if armed && strings.HasSuffix(r.URL.Path, suffix) {
			p.panicOn[suffix] = false
			p.mu.Unlock()
			panic("transport: " + suffix)
		}
	}
	p.mu.Unlock()
	return p.next.RoundTrip(r)
}

// TestConfigCallbacksPanic gives the worker a Clock, a Logger, a Backoff
// and a client transport that panic: each panic is recovered (the system
// clock, DefaultBackoff, a dropped log record, a failed call retried) and
// the items are handled.
func TestConfigCallbacksPanic(t *testing.T) {
	srv := styxtest.Start(t, styxtest.Options{})
	rt := &panicTransport{
		panicOn: map[string]bool{"/queue.lease": true, "/queue.retry": true, "/queue.complete": true},
		next:    http.DefaultTransport,
	}
	c, err := styx.NewClient(styx.ClientConfig{Endpoint: srv.Endpoint, HTTPClient: &http.Client{Transport: rt}})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	queue(t, c, "callbacks", &pb.QueueInfo{})
	var mu sync.Mutex
	attempts := map[string][]int32{}
	w := newWorker(t, c, worker.Config{
		Queue:   "callbacks",
		Clock:   panicClock{},
		Logger:  slog.New(panicLogHandler{}),
		Backoff: func(int32) time.Duration { panic("backoff: no idea") },
		Handler: worker.HandlerFunc(func(ctx context.Context, it *worker.Item) error {
			mu.Lock()
			defer mu.Unlock()
			attempts[string(it.Payload)] = append(attempts[string(it.Payload)], it.Attempts)
			if string(it.Payload) == "flaky" && it.Attempts == 1 {
				return errors.New("first attempt fails")
			}
			return nil
		}),
	})
	produce(t, c, "callbacks", "ok", "flaky")
	stop := run(t, w)
	require.Eventually(t, func() bool { return total(t, c, "callbacks") == 0 }, 30*time.Second, 20*time.Millisecond)
	require.NoError(t, stop())
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []int32{1, 2}, attempts["flaky"], "retried after DefaultBackoff")
	assert.NotEmpty(t, attempts["ok"])
}

// TestNewRecoversConfigPanics: a Middleware or Metrics registerer that
// panics, or a Middleware that returns nil, is an error from New.
func TestNewRecoversConfigPanics(t *testing.T) {
	c, err := styx.NewClient(styx.ClientConfig{})
	require.NoError(t, err)
	h := worker.HandlerFunc(func(context.Context, *worker.Item) error { return nil })
	_, err = worker.New(c, worker.Config{Queue: "q", Handler: h, Middleware: []worker.Middleware{
		func(h worker.Handler) worker.Handler { return h },
		func(worker.Handler) worker.Handler { panic("middleware: oops") },
	}})
	assert.ErrorContains(t, err, "styx worker: Middleware[1] panicked: middleware: oops")
	_, err = worker.New(c, worker.Config{Queue: "q", Handler: h, Middleware: []worker.Middleware{
		func(worker.Handler) worker.Handler { return nil },
	}})
	assert.ErrorContains(t, err, "styx worker: Middleware[0] returned a nil Handler")
	_, err = worker.New(c, worker.Config{Queue: "q", Handler: h, Metrics: panicRegisterer{}})
	assert.ErrorContains(t, err, "styx worker: Metrics: styx worker: registering the metrics panicked: registry: oops")
}

// panicRegisterer panics on every registration.
type panicRegisterer struct{ prometheus.Registerer }

func (panicRegisterer) Register(prometheus.Collector) error { panic("registry: oops") }

package worker_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	styx "github.com/styxq/styx"
	"github.com/styxq/styx/internal/servertest"
	pb "github.com/styxq/styx/styxpb"
	"github.com/styxq/styx/styxtest"
	"github.com/styxq/styx/worker"
)

// callLog is an http.RoundTripper that counts the client's calls by path
// and the leases that carried complete_ids, and can fail the first such
// lease or strip complete_ids from every lease.
type callLog struct {
	next http.RoundTripper
	// fail is "before" (the first lease with complete_ids never reaches the
	// server), "after" (the server answers it, the client gets an error
	// instead) or "" (none fails).
	fail string
	// strip removes complete_ids from every lease: a server that does not
	// know the field (Querator, Styx before issue 52) ignores it so.
	strip bool

	mu       sync.Mutex
	calls    map[string]int
	combined int
	failed   bool
}

func (l *callLog) RoundTrip(r *http.Request) (*http.Response, error) {
	path := r.URL.Path[strings.LastIndex(r.URL.Path, "/")+1:]
	completes := false
	if path == "queue.lease" {
		body, err := io.ReadAll(r.Body)
		_ = r.Body.Close()
		if err != nil {
			return nil, err
		}
		var req pb.QueueLeaseRequest
		if err := proto.Unmarshal(body, &req); err != nil {
			return nil, fmt.Errorf("callLog: %w", err)
		}
		completes = len(req.CompleteIds) > 0
		if completes && l.strip {
			req.CompleteIds, req.CompletePartition = nil, 0
			if body, err = proto.Marshal(&req); err != nil {
				return nil, err
			}
		}
		r = r.Clone(r.Context())
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
		r.Header.Set("Content-Length", strconv.Itoa(len(body)))
	}
	l.mu.Lock()
	if l.calls == nil {
		l.calls = map[string]int{}
	}
	l.calls[path]++
	fail := ""
	if completes {
		l.combined++
		if !l.failed {
			fail, l.failed = l.fail, l.fail != ""
		}
	}
	l.mu.Unlock()
	if fail == "before" {
		return nil, errors.New("injected: connection refused")
	}
	resp, err := l.next.RoundTrip(r)
	if fail == "after" && err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		return nil, errors.New("injected: connection reset after the request was sent")
	}
	return resp, err
}

func (l *callLog) count(path string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.calls[path]
}

func (l *callLog) leasesWithCompletes() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.combined
}

// handled records each payload's handler calls and their attempts.
type handled struct {
	mu       sync.Mutex
	attempts map[string][]int32
}

func (h *handled) handle(_ context.Context, it *worker.Item) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.attempts == nil {
		h.attempts = map[string][]int32{}
	}
	h.attempts[string(it.Payload)] = append(h.attempts[string(it.Payload)], it.Attempts)
	return nil
}

func (h *handled) copy() map[string][]int32 {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string][]int32{}
	for p, a := range h.attempts {
		out[p] = append([]int32(nil), a...)
	}
	return out
}

// completeWithLease starts a server of b, a client through l and a queue
// "q" (lease timeout 1m, so that no renewal falls within the test, or 1s
// with l.fail "after", for a lease that answered unread to end) holding n
// items produced ahead, "0" to "<n-1>",
// then runs a worker at batch 1 (Concurrency 1, no Prefetch) with
// CompleteWithLease sw until the queue is empty, and returns what its handler
// saw and its metrics.
func completeWithLease(t *testing.T, b servertest.Backend, l *callLog, n int, sw worker.Switch) (map[string][]int32, *prometheus.Registry) {
	srv := styxtest.Start(t, b.Options())
	l.next = http.DefaultTransport
	c, err := styx.NewClient(styx.ClientConfig{Endpoint: srv.Endpoint, HTTPClient: &http.Client{Transport: l}})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	lease := "1m"
	if l.fail == "after" {
		lease = "1s"
	}
	queue(t, c, "q", &pb.QueueInfo{LeaseTimeout: lease})
	payloads := make([]string, n)
	for i := range payloads {
		payloads[i] = strconv.Itoa(i)
	}
	produce(t, c, "q", payloads...)
	var h handled
	reg := prometheus.NewRegistry()
	w := newWorker(t, c, worker.Config{
		Queue: "q", Concurrency: 1, CompleteWithLease: sw, Metrics: reg,
		Handler: worker.HandlerFunc(h.handle),
	})
	stop := run(t, w)
	require.Eventually(t, func() bool { return total(t, c, "q") == 0 }, 20*time.Second, 10*time.Millisecond)
	require.NoError(t, stop())
	return h.copy(), reg
}

// TestCompleteWithLease: at batch 1 each lease completes the previous item,
// so the worker makes about one call per item, and no queue.complete.
func TestCompleteWithLease(t *testing.T) {
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		const n = 50
		l := &callLog{}
		seen, reg := completeWithLease(t, b, l, n, worker.SwitchDefault)
		require.Len(t, seen, n)
		for p, a := range seen {
			assert.Equal(t, []int32{1}, a, "item %s handled once, on its first attempt", p)
		}
		assert.Equal(t, float64(n), itemsTotal(t, reg, "completed"))
		assert.Equal(t, float64(0), itemsTotal(t, reg, "lost"))
		// Items 1 to n-1 each complete the item before; the last lease
		// completes item n-1 and finds nothing. A complete the ack loop
		// sends itself (the lease loop late by completeWindow) is rare.
		t.Logf("calls %v, leases with completes %d", l.calls, l.leasesWithCompletes())
		assert.LessOrEqual(t, l.count("queue.complete"), n/10, "completes sent alone")
		assert.GreaterOrEqual(t, l.leasesWithCompletes(), n-n/10, "leases that completed the item before")
		assert.LessOrEqual(t, l.count("queue.lease")-l.leasesWithCompletes(), 1+n/10+5,
			"plain leases: the first, one after each lease that found nothing, and the long polls (200ms) until the test stopped the worker")
		assert.Equal(t, 1, l.count("queue.renew"), "one renew checks that the server did the first lease's completes")
	})
}

// TestCompleteWithLeaseFails: a lease that carried a complete and failed
// (before the server got it, or after it answered) leaves the complete to
// the ack loop; no item is handled twice unless its lease ended.
func TestCompleteWithLeaseFails(t *testing.T) {
	for _, when := range []string{"before", "after"} {
		t.Run(when, func(t *testing.T) {
			servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
				const n = 20
				l := &callLog{fail: when}
				seen, reg := completeWithLease(t, b, l, n, worker.SwitchDefault)
				require.Len(t, seen, n)
				again := 0
				for p, a := range seen {
					require.Len(t, a, 1, "item %s handled once", p)
					if a[0] != 1 {
						again++
					}
				}
				assert.Positive(t, l.count("queue.complete"), "the ack loop sent the failed lease's complete")
				switch when {
				case "before":
					// The server never heard of it: the ack loop completes it.
					assert.Zero(t, again, "attempts other than the first")
					assert.Equal(t, float64(n), itemsTotal(t, reg, "completed"))
					assert.Equal(t, float64(0), itemsTotal(t, reg, "lost"))
				case "after":
					// The server completed it and leased the next item to
					// an answer the client never read: that item came back
					// when its lease expired (attempt 2), handled once. The
					// ack loop's complete was refused (not leased): counted
					// as a lost lease, as a retried queue.complete is.
					assert.Equal(t, 1, again, "items handled on their second attempt")
					assert.Equal(t, float64(n-1), itemsTotal(t, reg, "completed"))
					assert.Equal(t, float64(1), itemsTotal(t, reg, "lost"))
				}
			})
		})
	}
}

// TestCompleteWithLeaseIgnored: a server that ignores complete_ids leaves
// the items leased; the worker finds out with a renew and completes them
// with queue.complete, so none comes back.
func TestCompleteWithLeaseIgnored(t *testing.T) {
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		const n = 20
		l := &callLog{strip: true}
		seen, reg := completeWithLease(t, b, l, n, worker.SwitchDefault)
		require.Len(t, seen, n)
		for p, a := range seen {
			assert.Equal(t, []int32{1}, a, "item %s handled once, on its first attempt", p)
		}
		assert.Equal(t, float64(n), itemsTotal(t, reg, "completed"))
		assert.Equal(t, 1, l.leasesWithCompletes(), "no lease carries completes after the check")
		assert.Positive(t, l.count("queue.complete"), "the ack loop completed them")
	})
}

// TestCompleteWithLeaseOff: with SwitchOff no lease carries completes; the
// ack loop sends them all.
func TestCompleteWithLeaseOff(t *testing.T) {
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		const n = 20
		l := &callLog{}
		seen, reg := completeWithLease(t, b, l, n, worker.SwitchOff)
		require.Len(t, seen, n)
		assert.Equal(t, float64(n), itemsTotal(t, reg, "completed"))
		assert.Zero(t, l.leasesWithCompletes())
		assert.Zero(t, l.count("queue.renew"))
		assert.Positive(t, l.count("queue.complete"))
	})
}

package worker_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	styx "github.com/styxq/styx"
	"github.com/styxq/styx/internal/servertest"
	pb "github.com/styxq/styx/styxpb"
	"github.com/styxq/styx/styxtest"
	"github.com/styxq/styx/worker"
)

// eachServer runs f on a fresh server of every backend, as parallel
// subtests (servertest.ForEachBackend).
func eachServer(t *testing.T, f func(t *testing.T, storage string, srv *styxtest.Server)) {
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		f(t, b.Name, styxtest.Start(t, b.Options()))
	})
}

// groupsFromPayload is an http.RoundTripper that gives each leased item
// without a group the group its payload names ("<group>/<index>"), as a
// server that keeps groups would, and records each lease answer's
// payloads. The worker's own ordering is tested with it on a queue that is
// not ordered: the server leases the items FIFO, ungrouped, so one lease
// holds several items of a group, and nothing of the server's group rules
// is at work.
type groupsFromPayload struct {
	next   http.RoundTripper
	mu     sync.Mutex
	leases [][]string
}

func (g *groupsFromPayload) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := g.next.RoundTrip(r)
	if err != nil || resp.StatusCode != http.StatusOK || !strings.HasSuffix(r.URL.Path, "/queue.lease") {
		return resp, err
	}
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		return nil, err
	}
	var res pb.QueueLeaseResponse
	if err := proto.Unmarshal(body, &res); err != nil {
		return nil, fmt.Errorf("groupsFromPayload: %w", err)
	}
	var got []string
	for _, it := range res.Items {
		if it.Group == "" {
			it.Group, _, _ = strings.Cut(string(it.Bytes), "/")
		}
		got = append(got, string(it.Bytes))
	}
	g.mu.Lock()
	g.leases = append(g.leases, got)
	g.mu.Unlock()
	if body, err = proto.Marshal(&res); err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	resp.ContentLength = int64(len(body))
	resp.Header.Set("Content-Length", strconv.Itoa(len(body)))
	return resp, nil
}

// leasedTimes counts the leases that gave each payload.
func (g *groupsFromPayload) leasedTimes() map[string]int {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := map[string]int{}
	for _, l := range g.leases {
		for _, p := range l {
			out[p]++
		}
	}
	return out
}

// groupClient returns a client of srv whose lease answers pass through
// groupsFromPayload.
func groupClient(t *testing.T, srv *styxtest.Server) (*styx.Client, *groupsFromPayload) {
	t.Helper()
	rt := &groupsFromPayload{next: http.DefaultTransport}
	c, err := styx.NewClient(styx.ClientConfig{Endpoint: srv.Endpoint, HTTPClient: &http.Client{Transport: rt}})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c, rt
}

// call is one handler call, as the handler saw it: the order of its start
// and end among every call's starts and ends (one counter), and whether it
// returned nil.
type call struct {
	group      string
	index      int
	attempt    int32
	start, end int64
	ok         bool
}

// calls records handler calls and counts the calls of each group running
// at once.
type calls struct {
	seq     atomic.Int64
	mu      sync.Mutex
	list    []call
	running map[string]int
	// overlaps are the calls that started while a call of their group ran.
	overlaps []string
}

func newCalls() *calls { return &calls{running: map[string]int{}} }

// begin records the start of a call of it (payload "<group>/<index>") and
// returns the function that records its end.
func (cs *calls) begin(t *testing.T, it *worker.Item) (end func(ok bool)) {
	group, idx, _ := strings.Cut(string(it.Payload), "/")
	index, err := strconv.Atoi(idx)
	if err != nil {
		t.Errorf("payload %q", it.Payload)
	}
	if it.Group != group {
		t.Errorf("item %q: Item.Group %q, want %q", it.Payload, it.Group, group)
	}
	c := call{group: group, index: index, attempt: it.Attempts}
	cs.mu.Lock()
	c.start = cs.seq.Add(1)
	if cs.running[group]++; cs.running[group] > 1 {
		cs.overlaps = append(cs.overlaps, string(it.Payload))
	}
	cs.mu.Unlock()
	return func(ok bool) {
		cs.mu.Lock()
		defer cs.mu.Unlock()
		cs.running[group]--
		c.end, c.ok = cs.seq.Add(1), ok
		cs.list = append(cs.list, c)
	}
}

// byGroup returns the calls of each group in the order they started.
func (cs *calls) byGroup() map[string][]call {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	out := map[string][]call{}
	for _, c := range cs.list {
		out[c.group] = append(out[c.group], c)
	}
	for _, l := range out {
		slices.SortFunc(l, func(a, b call) int { return int(a.start - b.start) })
	}
	return out
}

// check requires that each group's calls ran one at a time, each after the
// previous one ended, in produce order: index 0 first, an index again only
// after a failed call of it, the next index only after a call of the
// previous one completed; and that every group's n items completed once.
func (cs *calls) check(t *testing.T, groups []string, n int) {
	t.Helper()
	cs.mu.Lock()
	assert.Empty(t, cs.overlaps, "calls that started while a call of their group ran")
	cs.mu.Unlock()
	by := cs.byGroup()
	for _, g := range groups {
		l := by[g]
		completed := 0
		for i, c := range l {
			if i > 0 {
				prev := l[i-1]
				if c.start < prev.end {
					t.Errorf("group %s: item %d started (%d) before item %d ended (%d)", g, c.index, c.start, prev.index, prev.end)
				}
				switch {
				case c.index == prev.index && !prev.ok:
				case c.index == prev.index+1 && prev.ok:
				default:
					t.Errorf("group %s: item %d (attempt %d) ran after item %d (attempt %d, ok %t)", g, c.index, c.attempt, prev.index, prev.attempt, prev.ok)
				}
			} else if c.index != 0 {
				t.Errorf("group %s: item %d ran first", g, c.index)
			}
			if c.ok {
				completed++
			}
		}
		assert.Equal(t, n, completed, "group %s: items completed", g)
	}
}

// grouped returns the payloads "<group>/<i>" for i in [from, to).
func grouped(group string, from, to int) []string {
	var out []string
	for i := from; i < to; i++ {
		out = append(out, fmt.Sprintf("%s/%d", group, i))
	}
	return out
}

// TestGroupItemsRunOneAtATimeInLeaseOrder feeds a worker (concurrency 8)
// lease answers that hold several items of a group each, on a queue that
// is not ordered (groupsFromPayload gives the groups): four groups of 25
// items, produced in runs of 5. Each group's items run one at a time, in
// produce order (the lease order), each once; two groups run at once.
func TestGroupItemsRunOneAtATimeInLeaseOrder(t *testing.T) {
	eachServer(t, func(t *testing.T, _ string, srv *styxtest.Server) {
		c, rt := groupClient(t, srv)
		queue(t, c, "runs", &pb.QueueInfo{})
		groups := []string{"g0", "g1", "g2", "g3"}
		var payloads []string
		for r := range 5 {
			for _, g := range groups {
				payloads = append(payloads, grouped(g, 5*r, 5*r+5)...)
			}
		}
		produce(t, c, "runs", payloads...)

		cs := newCalls()
		// The first call of a group waits until two groups run at once.
		two := make(chan struct{})
		var firsts atomic.Int32
		w := newWorker(t, c, worker.Config{
			Queue:       "runs",
			Concurrency: 8,
			Handler: worker.HandlerFunc(func(ctx context.Context, it *worker.Item) error {
				end := cs.begin(t, it)
				if strings.HasSuffix(string(it.Payload), "/0") {
					if firsts.Add(1) == 2 {
						close(two)
					}
					select {
					case <-two:
					case <-time.After(20 * time.Second):
						t.Errorf("item %s: no other group ran within 20s", it.Payload)
					}
				}
				end(true)
				return nil
			}),
		})
		stop := run(t, w)
		require.Eventually(t, func() bool { return total(t, c, "runs") == 0 }, 30*time.Second, 10*time.Millisecond)
		require.NoError(t, stop())
		cs.check(t, groups, 25)
		several := 0
		rt.mu.Lock()
		defer rt.mu.Unlock()
		for _, l := range rt.leases {
			perGroup := map[string]int{}
			for _, p := range l {
				g, _, _ := strings.Cut(p, "/")
				if perGroup[g]++; perGroup[g] == 2 {
					several++
				}
			}
		}
		assert.Positive(t, several, "some lease gave several items of a group: %v", rt.leases)
	})
}

// TestGroupFailureReleasesItemsBehind: a lease gives four items of a group
// to a worker (concurrency 1, prefetch 3); the second fails once. The two
// behind it do not run in its turn: the worker retries it (requeued at
// once: Backoff 0), then releases them, so even this queue, not ordered,
// gives them back behind it; they count no attempt. After Dead, the items
// behind the dead item are released likewise and run next.
func TestGroupFailureReleasesItemsBehind(t *testing.T) {
	eachServer(t, func(t *testing.T, _ string, srv *styxtest.Server) {
		c, rt := groupClient(t, srv)
		for _, tc := range []struct {
			name    string
			fail    error
			want    []string // the calls, as "<index>@<attempt>"
			leased  map[string]int
			deadLen int
		}{
			{"retry", errors.New("timeout"), []string{"0@1", "1@1", "1@2", "2@1", "3@1"},
				map[string]int{"g/0": 1, "g/1": 2, "g/2": 2, "g/3": 2}, 0},
			{"dead", worker.Dead(errors.New("malformed")), []string{"0@1", "1@1", "2@1", "3@1"},
				map[string]int{"g/0": 1, "g/1": 1, "g/2": 2, "g/3": 2}, 1},
		} {
			t.Run(tc.name, func(t *testing.T) {
				name := "fail-" + tc.name
				dead := queue(t, c, name, &pb.QueueInfo{MaxAttempts: 5})
				produce(t, c, name, grouped("g", 0, 4)...)
				before := rt.leasedTimes()
				var mu sync.Mutex
				var got []string
				w := newWorker(t, c, worker.Config{
					Queue:    name,
					Prefetch: 3,
					Backoff:  func(int32) time.Duration { return 0 },
					Handler: worker.HandlerFunc(func(ctx context.Context, it *worker.Item) error {
						_, idx, _ := strings.Cut(string(it.Payload), "/")
						mu.Lock()
						got = append(got, fmt.Sprintf("%s@%d", idx, it.Attempts))
						mu.Unlock()
						if idx == "1" && it.Attempts == 1 {
							return tc.fail
						}
						return nil
					}),
				})
				stop := run(t, w)
				require.Eventually(t, func() bool { return total(t, c, name) == 0 && len(items(t, c, dead)) == tc.deadLen },
					20*time.Second, 10*time.Millisecond)
				require.NoError(t, stop())
				mu.Lock()
				assert.Equal(t, tc.want, got)
				mu.Unlock()
				after := rt.leasedTimes()
				for p, n := range tc.leased {
					assert.Equal(t, n, after[p]-before[p], "leases of %s", p)
				}
			})
		}
	})
}

// TestOrderedGroups runs a worker of concurrency 8 on an ordered queue of
// two partitions holding 20 groups of 50 items, produced group after group
// (so a lease may give many items of one group), some of which fail once
// (retried at once, or after 10ms with RetryAfter). Each group's items run
// one at a time, in produce order, each completed once; eight groups run
// at once (the first item of each waits until eight do).
func TestOrderedGroups(t *testing.T) {
	eachServer(t, func(t *testing.T, _ string, srv *styxtest.Server) {
		c := srv.Client
		styxtest.CreateQueue(t, c, &pb.QueueInfo{QueueName: "orders", Ordered: true, RequestedPartitions: 2})
		const nGroups, perGroup, concurrency = 20, 50, 8
		var groups []string
		var all []*pb.QueueProduceItem
		for g := range nGroups {
			name := fmt.Sprintf("customer-%02d", g)
			groups = append(groups, name)
			all = append(all, styxtest.Grouped(name, grouped(name, 0, perGroup)...)...)
		}
		styxtest.Produce(t, c, "orders", all...)

		cs := newCalls()
		eight := make(chan struct{})
		var firsts atomic.Int32
		w := newWorker(t, c, worker.Config{
			Queue:       "orders",
			Concurrency: concurrency,
			Backoff:     func(int32) time.Duration { return 0 },
			Handler: worker.HandlerFunc(func(ctx context.Context, it *worker.Item) error {
				end := cs.begin(t, it)
				_, idx, _ := strings.Cut(string(it.Payload), "/")
				i, _ := strconv.Atoi(idx)
				if i == 0 && it.Attempts == 1 {
					if firsts.Add(1) == concurrency {
						close(eight)
					}
					select {
					case <-eight:
					case <-time.After(20 * time.Second):
						t.Errorf("item %s: fewer than %d groups ran at once within 20s", it.Payload, concurrency)
					}
				}
				if it.Attempts == 1 {
					switch {
					case i%7 == 3:
						end(false)
						return errors.New("first attempt fails")
					case i%13 == 6:
						end(false)
						return worker.RetryAfter(10*time.Millisecond, errors.New("come back in 10ms"))
					}
				}
				end(true)
				return nil
			}),
		})
		stop := run(t, w)
		require.Eventually(t, func() bool { return total(t, c, "orders") == 0 }, 60*time.Second, 20*time.Millisecond)
		require.NoError(t, stop())
		cs.check(t, groups, perGroup)
		select {
		case <-eight:
		default:
			t.Errorf("at most %d groups ran at once", firsts.Load())
		}
	})
}

// TestGroupShutdownReleasesItemsBehind: at shutdown, the items waiting
// behind a running item of their group are released (attempt not counted)
// while it runs, and none of them starts.
func TestGroupShutdownReleasesItemsBehind(t *testing.T) {
	eachServer(t, func(t *testing.T, _ string, srv *styxtest.Server) {
		c, _ := groupClient(t, srv)
		queue(t, c, "drain", &pb.QueueInfo{})
		started := make(chan string, 4)
		proceed := make(chan struct{})
		w := newWorker(t, c, worker.Config{
			Queue:    "drain",
			Prefetch: 3,
			Handler: worker.HandlerFunc(func(ctx context.Context, it *worker.Item) error {
				started <- string(it.Payload)
				<-proceed
				return nil
			}),
		})
		produce(t, c, "drain", grouped("g", 0, 4)...)
		stop := run(t, w)
		require.Equal(t, "g/0", <-started)
		leased := func(want bool) int {
			n := 0
			for _, it := range items(t, c, "drain") {
				if it.IsLeased == want && (want || it.Attempts == 0) {
					n++
				}
			}
			return n
		}
		require.Eventually(t, func() bool { return leased(true) == 4 }, 10*time.Second, 10*time.Millisecond)
		stopped := make(chan error, 1)
		go func() { stopped <- stop() }()
		if !assert.Eventually(t, func() bool { return leased(false) == 3 }, 10*time.Second, 10*time.Millisecond,
			"the three items behind g/0 released while it runs") {
			for _, it := range items(t, c, "drain") {
				t.Logf("%s: leased %t, attempts %d", it.Payload, it.IsLeased, it.Attempts)
			}
		}
		close(proceed)
		require.NoError(t, <-stopped)
		left := items(t, c, "drain")
		require.Len(t, left, 3, "g/0 completed")
		for _, it := range left {
			assert.False(t, it.IsLeased)
			assert.Equal(t, int32(0), it.Attempts)
		}
		assert.Empty(t, started, "no item behind g/0 started")
	})
}

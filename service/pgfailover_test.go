package service_test

import (
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/pgtest"
	"github.com/styxq/styx/internal/servertest"
	pb "github.com/styxq/styx/styxpb"
)

// multiHostURL returns the PostgreSQL URL u naming hosts (host:port, in
// order) instead of its own, with target_session_attrs=read-write: a
// connection goes to the first host that accepts writes.
func multiHostURL(t *testing.T, u string, hosts ...string) string {
	parsed, err := url.Parse(u)
	require.NoError(t, err)
	parsed.Host = strings.Join(hosts, ",")
	q := parsed.Query()
	q.Set("target_session_attrs", "read-write")
	parsed.RawQuery = q.Encode()
	return parsed.String()
}

// TestPostgresFailover runs produce, lease and complete on two nodes whose
// URL names a primary and its synchronous streaming standby
// (`postgres://…@primary,standby/…?target_session_attrs=read-write`,
// synchronous_commit = on, the standby in synchronous_standby_names, which
// each node logs at start as the guarantee that holds), then
// SIGKILLs the primary's postmaster and promotes the standby. It checks
// that while no primary is reachable requests fail with 453 and /health
// answers 503 naming PostgreSQL on both nodes; that both nodes find the
// new primary by themselves and produce and complete again (the time is
// logged); that every produce answered 200 is present exactly once (in the
// queue, or completed by a complete answered 200) and no complete answered
// 200 is undone: nothing acknowledged is lost; and that no item is leased
// to two consumers while the first lease is live.
func TestPostgresFailover(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts two PostgreSQL clusters")
	}
	began := time.Now()
	primary := pgtest.StartServer(t)
	standby := primary.StartStandby(t, true)
	schemaURL := pgtest.SchemaURL(t, primary.URL)
	b := servertest.Backend{Name: "postgres", URL: multiHostURL(t, schemaURL, primary.HostPort(), standby.HostPort())}
	var nodes []*servertest.Server
	for range 2 {
		s := &servertest.Server{T: t, B: b, LogInfo: true}
		s.Boot()
		t.Cleanup(s.Stop)
		// Each node says at start what an acknowledgement is worth.
		require.Contains(t, s.Logs.String(), "on a synchronous standby", "the node logs the guarantee")
		nodes = append(nodes, s)
	}
	const leaseTimeout = 5 * time.Second
	nodes[0].CreateQueue(&pb.QueueInfo{QueueName: "ha", LeaseTimeout: leaseTimeout.String(), RequestedPartitions: 2})
	t.Logf("primary, synchronous standby and two nodes ready in %s", time.Since(began).Round(time.Millisecond))

	l := newFaultLedger(t, leaseTimeout)
	stopLoad := runFaultLoad(t, nodes, l, "ha", 0)

	// serving returns, per node, whether it produced and completed more
	// than from says.
	serving := func(from [2]struct{ produced, completed int }) [2]bool {
		now := l.progress()
		var out [2]bool
		for i := range now {
			out[i] = now[i].produced > from[i].produced && now[i].completed > from[i].completed
		}
		return out
	}
	require.Eventually(t, func() bool { s := serving([2]struct{ produced, completed int }{}); return s[0] && s[1] },
		10*time.Second, 10*time.Millisecond, "both nodes produce and complete before the failover")
	time.Sleep(300 * time.Millisecond)

	killed := time.Now()
	primary.Kill(t)
	failedBefore := l.failed.Load()
	for i, node := range nodes {
		require.Eventually(t, func() bool {
			code, status := probe(node, "/health")
			return code == 503 && strings.Contains(status, "postgresql")
		}, 10*time.Second, 20*time.Millisecond, "node %d: /health answers 503 while no primary is reachable", i)
		_, status := probe(node, "/health")
		t.Logf("node %d, no primary: /health 503 %q", i, status)
	}
	servertest.Eventually(t, func() bool { return l.failed.Load() >= failedBefore+4 }, "requests fail with 453 while no primary is reachable")

	standby.Promote(t)
	promoted := time.Now()
	from := l.progress()
	var back [2]time.Duration
	require.Eventually(t, func() bool {
		s := serving(from)
		for i := range s {
			if s[i] && back[i] == 0 {
				back[i] = time.Since(killed)
			}
		}
		return back[0] != 0 && back[1] != 0
	}, 30*time.Second, 5*time.Millisecond, "both nodes produce and complete on the promoted standby")
	t.Logf("kill to promoted: %s; kill to both nodes writing: node 0 %s, node 1 %s (after the promotion: %s, %s)",
		promoted.Sub(killed).Round(time.Millisecond), back[0].Round(time.Millisecond), back[1].Round(time.Millisecond),
		(back[0] - promoted.Sub(killed)).Round(time.Millisecond), (back[1] - promoted.Sub(killed)).Round(time.Millisecond))
	for i, node := range nodes {
		require.Eventually(t, func() bool { code, _ := probe(node, "/health"); return code == 200 },
			5*time.Second, 20*time.Millisecond, "node %d: /health answers 200 again", i)
	}
	from = l.progress()
	require.Eventually(t, func() bool {
		now := l.progress()
		return now[0].completed >= from[0].completed+50 && now[1].completed >= from[1].completed+50
	}, 15*time.Second, 10*time.Millisecond, "the load goes on")
	stopLoad()

	// Every acknowledged produce is present exactly once, in the queue or
	// completed; a completed item in the queue is a complete undone.
	where := map[string][]string{}
	for _, it := range nodes[0].Items("ha") {
		where[string(it.Payload)] = append(where[string(it.Payload)], "queue")
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for p := range l.completed {
		where[p] = append(where[p], "completed")
	}
	var lost, ambiguous int
	for p := range l.acked {
		switch w := where[p]; {
		case len(w) == 1:
		case len(w) == 0 && l.tried[p]:
			ambiguous++ // completed by a call whose answer was lost: gone, as asked
		default:
			lost++
			t.Errorf("acknowledged item %s is in %v, want exactly one place", p, w)
		}
	}
	for p, w := range where {
		require.LessOrEqual(t, len(w), 1, "item %s (acknowledged %v) is in %v", p, l.acked[p], w)
	}
	t.Logf("%d produces acknowledged, %d completed, %d lost, %d completes whose answer was lost, %d requests failed with 453; test took %s",
		len(l.acked), len(l.completed), lost, ambiguous, l.failed.Load(), time.Since(began).Round(time.Millisecond))
}

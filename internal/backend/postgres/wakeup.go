package postgres

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// Wake-ups (issue 53). An iteration that makes items ready (a produce, a
// retry, a dead-letter move, scheduled items coming due) wakes the loops of
// those queues once it has committed: on this node directly (wake), and on
// the other nodes through a NOTIFY that the node's notifier sends after the
// commit, on a connection of its own, never inside the iteration's
// transaction. PostgreSQL takes one database-wide lock for every commit
// that NOTIFYs and holds it through that commit's WAL flush and its wait
// for a synchronous standby: a NOTIFY in the iteration serialized every
// such commit of every queue on every node, and one backend stalled inside
// its COMMIT stopped every other node's writes. The notifier's session runs
// with synchronous_commit off, so its short transactions hold that lock for
// no flush and no standby; it coalesces the queues of the commits that end
// while it sends. A notification it cannot send (its connection is down)
// is dropped: the other nodes' loops then find the items by their poll
// (pollInterval), as after a missed notification.
//
// A node notifies only while another node is there to hear it: each node
// says hello ("n:<node>") when its LISTEN connects and every peerHello,
// and answers the hello of a node it had not heard from within peerTTL (a
// new one, or one restarted under a new name); a node that heard no other
// within peerTTL sends no wake-ups (one node alone pays nothing for them,
// and opens no notifier session). The hellos go out on the LISTEN
// connection itself (Manager.listenOnce), between its waits.

// notifyPayload is the payload of the notification "items of queue id may
// be ready", which listen dispatches. The transactional-enqueue function
// sends the same.
func notifyPayload(id uint64) string { return "i:" + strconv.FormatUint(id, 10) }

// helloPayload is the notification "node is here" (listen).
func helloPayload(node string) string { return "n:" + node }

const (
	// peerHello is how often a node says hello to the others.
	peerHello = 10 * time.Second
	// peerTTL is how long a node keeps notifying after it last heard
	// another node.
	peerTTL = 3 * peerHello
)

// helloEvery, when set (nanoseconds), replaces peerHello as how often
// listenOnce says hello: tests shorten it (SetHelloEvery).
var helloEvery atomic.Int64

// helloInterval is how often listenOnce says hello.
func helloInterval() time.Duration {
	if d := helloEvery.Load(); d > 0 {
		return time.Duration(d)
	}
	return peerHello
}

// notifier sends the node's wake-ups to the other nodes (see above). Safe
// for concurrent use.
type notifier struct {
	m    *Manager
	kick chan struct{}

	mu      sync.Mutex
	pending map[uint64]struct{}
	// peers holds when each other node's hello was last heard (Unix ns),
	// guarded by mu, for peerTTL.
	peers map[string]int64
	// peerSeen is when another node's hello was last heard (Unix ns; 0:
	// never).
	peerSeen atomic.Int64

	// pid is the backend process id of the notifier's connection (0: none):
	// listen skips the notifications it sent, which this node's loops had
	// directly.
	pid atomic.Uint32
}

func newNotifier(m *Manager) *notifier {
	return &notifier{m: m, kick: make(chan struct{}, 1), pending: map[uint64]struct{}{}, peers: map[string]int64{}}
}

// wake wakes the loops of queues ids, on this node at once and on the other
// nodes by the notifier. It runs after the commit that made their items
// ready.
func (m *Manager) wake(ids []uint64) {
	if len(ids) == 0 {
		return
	}
	for _, id := range ids {
		m.signalQueue(id, true, 0)
	}
	n := m.notifier
	if time.Since(time.Unix(0, n.peerSeen.Load())) > peerTTL {
		return // no other node to wake
	}
	n.mu.Lock()
	for _, id := range ids {
		n.pending[id] = struct{}{}
	}
	n.mu.Unlock()
	select {
	case n.kick <- struct{}{}:
	default:
	}
}

// heard records a hello: from another node, it keeps the wake-ups on. It
// says whether to answer with this node's hello: node was not heard from
// within peerTTL (a new one, or one restarted under a new name), and
// answered it notifies this node from then on.
func (n *notifier) heard(node string) (answer bool) {
	if node == n.m.node {
		return false
	}
	now := time.Now().UnixNano()
	n.peerSeen.Store(now)
	n.mu.Lock()
	last, known := n.peers[node]
	n.peers[node] = now
	for p, at := range n.peers {
		if now-at > int64(peerTTL) {
			delete(n.peers, p)
		}
	}
	n.mu.Unlock()
	return !known || now-last > int64(peerTTL)
}

// take returns the notifications to send, and forgets them.
func (n *notifier) take() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make([]string, 0, len(n.pending))
	for id := range n.pending {
		out = append(out, notifyPayload(id))
		delete(n.pending, id)
	}
	return out
}

// run sends the pending notifications until the manager closes: one
// statement for all the queues pending, then the next.
func (n *notifier) run() {
	ctx := n.m.ctx
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			_ = conn.Close(context.Background())
		}
	}()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-n.kick:
		}
		payloads := n.take()
		if len(payloads) == 0 {
			continue
		}
		err := func() error {
			sctx, cancel := context.WithTimeout(ctx, n.m.cfg.StatementTimeout)
			defer cancel()
			if conn == nil {
				cfg := n.m.st.pool.Config().ConnConfig.Copy()
				cfg.RuntimeParams["synchronous_commit"] = "off"
				c, err := pgx.ConnectConfig(sctx, cfg)
				if err != nil {
					return err
				}
				conn = c
				n.pid.Store(c.PgConn().PID())
			}
			_, err := conn.Exec(sctx, `SELECT pg_notify($1, p) FROM unnest($2::text[]) AS p`, n.m.st.channel, payloads)
			return err
		}()
		switch {
		case err == nil && failing:
			failing = false
			n.m.cfg.Log.Info("postgres: the notifier sends wake-ups again")
		case err != nil:
			if conn != nil {
				_ = conn.Close(context.Background())
				conn = nil
				n.pid.Store(0)
			}
			if ctx.Err() != nil {
				return
			}
			if !failing {
				failing = true
				n.m.cfg.Log.Warn("postgres: the notifier could not wake the other nodes; they find the items by polling until it can", "error", err, "poll", pollInterval)
			}
			// Let a database that is down come back before the next try.
			select {
			case <-ctx.Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
}

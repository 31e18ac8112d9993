package postgres_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/backend/postgres"
	"github.com/styxq/styx/internal/pgtest"
	"github.com/styxq/styx/internal/queue"
	"github.com/styxq/styx/metrics"
)

// TestStalledCommitDoesNotStopOtherNodes: one node's COMMIT that never
// ends (it waits for a synchronous standby that is not there, as a backend
// stalled inside COMMIT does) must not stop another node's writes. Issue 53
// found that it did: every iteration that made items ready NOTIFYed inside
// its transaction, and PostgreSQL serializes the commits that NOTIFY on
// one database-wide lock, held through the synchronous-standby wait; the
// other node's produces waited for the stalled commit (19 s, until the
// operator's cancel). Now the wake-ups are sent after the commit
// (wakeup.go), and the other node produces, leases and completes while the
// first node's commit still waits. The second node's sessions commit with synchronous_commit
// = local, so that only the first node's commits wait for the standby.
func TestStalledCommitDoesNotStopOtherNodes(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a PostgreSQL cluster of its own")
	}
	srv := pgtest.StartServer(t)
	url := pgtest.SchemaURL(t, srv.URL)
	ctx := context.Background()
	open := func(url string) *postgres.Manager {
		m, err := postgres.Open(ctx, postgres.Config{URL: url, Log: testLog(), Metrics: metrics.New(),
			StatementTimeout: time.Minute})
		require.NoError(t, err)
		t.Cleanup(m.Close)
		return m
	}
	stalled := open(url)
	other := open(url + "&synchronous_commit=local")
	for _, name := range []string{"a", "b"} {
		require.NoError(t, stalled.Create(ctx, queue.QueueInfo{Name: name, LeaseTimeout: time.Minute, Partitions: 1}))
	}

	admin, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	t.Cleanup(func() { admin.Close(context.Background()) })
	setStandbys := func(names string) {
		_, err := admin.Exec(ctx, `ALTER SYSTEM SET synchronous_standby_names = '`+names+`'`)
		require.NoError(t, err)
		_, err = admin.Exec(ctx, `SELECT pg_reload_conf()`)
		require.NoError(t, err)
	}
	setStandbys("absent_standby")
	released := false
	release := func() {
		if !released {
			released = true
			setStandbys("")
		}
	}
	t.Cleanup(release)

	qa, err := stalled.Get("a")
	require.NoError(t, err)
	produced := make(chan error, 1)
	produce := func() { go func() { produced <- qa.Produce(ctx, []queue.ProduceItem{{Payload: []byte("stalled")}}) }() }
	produce()
	require.Eventually(t, func() bool {
		select {
		case <-produced:
			// Its commit ran before the reload reached its backend
			// (pg_reload_conf signals the backends, which read the file
			// at their next command): produce again.
			produce()
		default:
		}
		var n int
		err := admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep'`).Scan(&n)
		return err == nil && n > 0
	}, time.Minute, 20*time.Millisecond, "the first node's commit waits for the standby")

	// The other node's writes go on within a lease round (the queue's
	// lease timeout), while the first node's commit still waits.
	round, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	qb, err := other.Get("b")
	require.NoError(t, err)
	for i := range 3 {
		require.NoError(t, qb.Produce(round, []queue.ProduceItem{{Payload: []byte{byte(i)}}}), "produce %d on the other node", i)
		res, err := qb.Lease(round, queue.LeaseParams{ClientID: "c", BatchSize: 1, Timeout: 10 * time.Second})
		require.NoError(t, err)
		require.Len(t, res.Items, 1)
		require.Equal(t, []byte{byte(i)}, res.Items[0].Payload)
		require.NoError(t, qb.Complete(round, res.Partition, []uint64{res.Items[0].ID}))
	}
	select {
	case err := <-produced:
		t.Fatalf("the first node's produce was answered (%v) while its commit waited for the standby", err)
	default:
	}
	release()
	require.NoError(t, <-produced, "the first node's produce once the standby is no longer required")
}

// TestRestartedNodeWakesOthers: a node that starts while the others have
// heard each other already (a restart, under a new node name) is answered
// their hellos at once, so that its produces wake their waiting leases by
// notification, not by their once-a-second poll: the median of five
// produce-to-lease times on the other node stays well under that second.
func TestRestartedNodeWakesOthers(t *testing.T) {
	url := pgtest.URL(t)
	ctx := context.Background()
	open := func() *postgres.Manager {
		m, err := postgres.Open(ctx, postgres.Config{URL: url, Log: testLog(), Metrics: metrics.New()})
		require.NoError(t, err)
		return m
	}
	a := open()
	t.Cleanup(a.Close)
	b := open()
	require.NoError(t, a.Create(ctx, queue.QueueInfo{Name: "w", LeaseTimeout: time.Minute, Partitions: 1}))
	qb, err := b.Get("w")
	require.NoError(t, err)
	require.NoError(t, qb.Produce(ctx, []queue.ProduceItem{{Payload: []byte("before")}}))
	b.Close()
	c := open() // b restarted
	t.Cleanup(c.Close)
	qa, err := a.Get("w")
	require.NoError(t, err)
	res, err := qa.Lease(ctx, queue.LeaseParams{ClientID: "a", BatchSize: 1, Timeout: 10 * time.Second})
	require.NoError(t, err)
	require.NoError(t, qa.Complete(ctx, res.Partition, []uint64{res.Items[0].ID}))
	qc, err := c.Get("w")
	require.NoError(t, err)

	var waits []time.Duration
	for round := range 5 {
		got := make(chan time.Time, 1)
		go func() {
			res, err := qa.Lease(ctx, queue.LeaseParams{ClientID: "a", BatchSize: 1, Timeout: 10 * time.Second})
			if assert.NoError(t, err) && assert.Len(t, res.Items, 1) {
				assert.NoError(t, qa.Complete(ctx, res.Partition, []uint64{res.Items[0].ID}))
			}
			got <- time.Now()
		}()
		require.Eventually(t, func() bool {
			st, err := qa.Stats(ctx)
			return err == nil && st.LeaseWaiting == 1
		}, 10*time.Second, time.Millisecond)
		produced := time.Now()
		require.NoError(t, qc.Produce(ctx, []queue.ProduceItem{{Payload: []byte{byte(round)}}}))
		waits = append(waits, (<-got).Sub(produced))
	}
	slices.Sort(waits)
	require.Less(t, waits[len(waits)/2], 500*time.Millisecond, "woken by the restarted node's notification, not by the 1 s poll: %v", waits)
}

// TestHellosOnTheListenSession: a node says hello when its LISTEN session
// connects and every hello interval after, on that one session (no
// notifier session of its own while it is alone), which stays connected
// through the waits between hellos.
func TestHellosOnTheListenSession(t *testing.T) {
	postgres.SetHelloEvery(t, 100*time.Millisecond)
	url := pgtest.URL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m, err := postgres.Open(ctx, postgres.Config{URL: url, Log: testLog(), Metrics: metrics.New()})
	require.NoError(t, err)
	t.Cleanup(m.Close)
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, "LISTEN "+pgx.Identifier{m.Channel()}.Sanitize())
	require.NoError(t, err)
	pids := map[uint32]int{}
	for hellos := 0; hellos < 5; {
		n, err := conn.WaitForNotification(ctx)
		require.NoError(t, err, "hellos heard: %d", hellos)
		if n.Payload == "n:"+m.Node() {
			pids[n.PID]++
			hellos++
		}
	}
	require.Len(t, pids, 1, "every hello from one session: %v", pids)
}

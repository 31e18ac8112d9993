package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
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
	go func() { produced <- qa.Produce(ctx, []queue.ProduceItem{{Payload: []byte("stalled")}}) }()
	require.Eventually(t, func() bool {
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

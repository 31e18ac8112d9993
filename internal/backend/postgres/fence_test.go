package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/backend/postgres"
	"github.com/styxq/styx/internal/errclass"
	"github.com/styxq/styx/internal/pgtest"
	"github.com/styxq/styx/internal/queue"
)

// TestFence: a fence waits for the transactions that serve the queue in
// flight (an open one that checked the fence), then every iteration of
// the queue on either node answers 453 queue_moving and writes nothing (a
// produce, a complete, the transactional enqueue), a waiting lease at
// once; lifting it restores service, and a lease taken before completes
// under its id.
func TestFence(t *testing.T) {
	url := pgtest.URL(t)
	m1, m2 := open(t, url), open(t, url)
	ctx := t.Context()
	require.NoError(t, m1.Create(ctx, queue.QueueInfo{Name: "q", LeaseTimeout: time.Minute, Partitions: 1}))
	q1, err := m1.Get("q")
	require.NoError(t, err)
	require.NoError(t, q1.Produce(ctx, []queue.ProduceItem{{Payload: []byte("a")}}))
	held, err := q1.Lease(ctx, queue.LeaseParams{BatchSize: 1, ClientID: "c", Timeout: time.Second})
	require.NoError(t, err)
	require.Len(t, held.Items, 1)
	q2, err := m2.Get("q")
	require.NoError(t, err)

	// A transaction in flight: it checked the fence, as an iteration does.
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	inflight, err := conn.Begin(ctx)
	require.NoError(t, err)
	_, err = inflight.Exec(ctx, `SELECT styx_check_fence(id) FROM styx_queues WHERE name='q'`)
	require.NoError(t, err)

	// A lease waiting on node 2 when the fence comes.
	waiting := make(chan error, 1)
	go func() {
		_, err := q2.Lease(ctx, queue.LeaseParams{BatchSize: 1, ClientID: "w", Timeout: 30 * time.Second})
		waiting <- err
	}()
	require.Eventually(t, func() bool { st, err := q2.Stats(ctx); return err == nil && st.LeaseWaiting == 1 },
		10*time.Second, 10*time.Millisecond)

	fenced := make(chan error, 1)
	go func() {
		_, err := m1.Store().Fence(ctx, "q", 7)
		fenced <- err
	}()
	// The fence's wait: a backend waits on a lock while the transaction
	// in flight is open, and Fence has not returned.
	require.Eventually(t, func() bool {
		var n int
		err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type='Lock' AND datname=current_database()`).Scan(&n)
		return err == nil && n > 0
	}, 10*time.Second, 10*time.Millisecond)
	select {
	case err := <-fenced:
		t.Fatalf("Fence returned before the transaction in flight ended: %v", err)
	default:
	}
	// The waiting lease is answered at once (its timeout is 30 s).
	select {
	case err := <-waiting:
		assertMoving(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting lease was not answered when the fence came")
	}
	require.NoError(t, inflight.Commit(ctx))
	require.NoError(t, <-fenced)

	epoch, err := m1.Store().FencedEpoch(ctx, "q")
	require.NoError(t, err)
	assert.Equal(t, int64(7), epoch)
	for _, q := range []queue.Queue{q1, q2} {
		assertMoving(t, q.Produce(ctx, []queue.ProduceItem{{Payload: []byte("b")}}))
		assertMoving(t, q.Complete(ctx, held.Partition, []uint64{held.Items[0].ID}))
		_, err := q.Lease(ctx, queue.LeaseParams{BatchSize: 1, ClientID: "x", Timeout: time.Second})
		assertMoving(t, err)
	}
	_, err = conn.Exec(ctx, `SELECT styx_produce('q', '[{"utf8": "c"}]')`)
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	assert.Equal(t, "SXMOV", pgErr.Code)
	var n int
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM styx_items`).Scan(&n))
	assert.Equal(t, 1, n, "nothing written while fenced")

	// Another move's epoch neither fences nor lifts it.
	_, err = m1.Store().Fence(ctx, "q", 8)
	require.ErrorIs(t, err, postgres.ErrFencedOtherwise)
	require.ErrorIs(t, m1.Store().Unfence(ctx, "q", 8), postgres.ErrFencedOtherwise)

	require.NoError(t, m1.Store().Unfence(ctx, "q", 7))
	require.NoError(t, q2.Complete(ctx, held.Partition, []uint64{held.Items[0].ID}), "a lease taken before the fence is valid after")
	require.NoError(t, q1.Produce(ctx, []queue.ProduceItem{{Payload: []byte("d")}}))
	_, err = conn.Exec(ctx, `SELECT styx_produce('q', '[{"utf8": "e"}]')`)
	require.NoError(t, err)
	require.NoError(t, m1.Store().Unfence(ctx, "q", 7), "lifting a fence that is not there")
}

func assertMoving(t *testing.T, err error) {
	t.Helper()
	require.Error(t, err)
	c := errclass.Of(err)
	assert.Equal(t, errclass.QueueMoving, c.Reason, "%v", err)
	assert.EqualValues(t, 453, c.Code)
	assert.Contains(t, c.Message, "queue moving; queue 'q' is moving to another cluster")
}

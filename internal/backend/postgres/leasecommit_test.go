package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/backend/postgres"
	"github.com/styxq/styx/internal/pgtest"
	"github.com/styxq/styx/internal/queue"
)

// TestLeaseCommitsWithItsStatement: an iteration whose last statement is a
// lease sends it with its COMMIT (iteration.LeaseAndCommit, issue 53), and
// its answer means what a lease's answer means: the items are leased, as
// stored, when it comes, and an iteration whose COMMIT fails leases
// nothing: the waiting lease is answered the failure and the item is
// leased to the next consumer at its first attempt. The COMMIT fails here
// by a deferred constraint trigger that refuses a leased row, as a commit
// can fail (a serialization failure, a full disk) after every statement
// before it succeeded.
func TestLeaseCommitsWithItsStatement(t *testing.T) {
	url := pgtest.URL(t)
	m := open(t, url)
	ctx := t.Context()
	require.NoError(t, m.Create(ctx, queue.QueueInfo{Name: "q", LeaseTimeout: time.Minute, Partitions: 1}))
	q, err := m.Get("q")
	require.NoError(t, err)
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	state := func(id uint64) (state, attempts int) {
		t.Helper()
		require.NoError(t, conn.QueryRow(ctx, `SELECT state, attempts FROM styx_items WHERE id=$1`, int64(id)).Scan(&state, &attempts))
		return state, attempts
	}

	require.NoError(t, q.Produce(ctx, []queue.ProduceItem{{Payload: []byte("a")}}))
	before := postgres.LeaseCommits()
	got, err := q.Lease(ctx, queue.LeaseParams{BatchSize: 1, ClientID: "c1", Timeout: time.Minute})
	require.NoError(t, err)
	require.Len(t, got.Items, 1)
	assert.Greater(t, postgres.LeaseCommits(), before, "the lease went with its COMMIT")
	s, attempts := state(got.Items[0].ID)
	assert.Equal(t, 1, s, "leased as stored when answered")
	assert.Equal(t, 1, attempts)
	require.NoError(t, q.Complete(ctx, got.Partition, []uint64{got.Items[0].ID}))

	// Two consumers waiting, served by one lease whose items go to each:
	// their holders go in the lease's statement, with the COMMIT.
	type answer struct {
		client string
		res    queue.LeaseResult
		err    error
	}
	answers := make(chan answer, 2)
	for _, c := range []string{"w1", "w2"} {
		go func() {
			res, err := q.Lease(ctx, queue.LeaseParams{BatchSize: 1, ClientID: c, Owner: "key-" + c, Timeout: time.Minute})
			answers <- answer{c, res, err}
		}()
	}
	require.Eventually(t, func() bool { st, err := q.Stats(ctx); return err == nil && st.LeaseWaiting == 2 },
		10*time.Second, 10*time.Millisecond)
	before = postgres.LeaseCommits()
	require.NoError(t, q.Produce(ctx, []queue.ProduceItem{{Payload: []byte("x")}, {Payload: []byte("y")}}))
	for range 2 {
		a := <-answers
		require.NoError(t, a.err)
		require.Len(t, a.res.Items, 1)
		var client, key string
		require.NoError(t, conn.QueryRow(ctx, `SELECT holder_client, holder_key FROM styx_items WHERE id=$1`, int64(a.res.Items[0].ID)).Scan(&client, &key))
		assert.Equal(t, a.client, client, "each item's holder is the consumer that got it")
		assert.Equal(t, "key-"+a.client, key)
		require.NoError(t, q.Complete(ctx, a.res.Partition, []uint64{a.res.Items[0].ID}))
	}
	assert.Greater(t, postgres.LeaseCommits(), before)

	_, err = conn.Exec(ctx, `CREATE FUNCTION styx_test_refuse() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION 'the test refuses this commit'; END $$`)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `CREATE CONSTRAINT TRIGGER styx_test_refuse AFTER UPDATE ON styx_items
		DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN (NEW.state = 1) EXECUTE FUNCTION styx_test_refuse()`)
	require.NoError(t, err)
	require.NoError(t, q.Produce(ctx, []queue.ProduceItem{{Payload: []byte("b")}}))
	before = postgres.LeaseCommits()
	_, err = q.Lease(ctx, queue.LeaseParams{BatchSize: 1, ClientID: "c2", Timeout: time.Minute})
	require.Error(t, err, "a lease whose COMMIT failed is answered the failure")
	require.NotErrorIs(t, err, queue.ErrNoItems, "the failure, not the end of its wait")
	assert.Equal(t, before, postgres.LeaseCommits())
	var id int64
	require.NoError(t, conn.QueryRow(ctx, `SELECT id FROM styx_items`).Scan(&id))
	s, attempts = state(uint64(id))
	assert.Equal(t, 0, s, "nothing leased")
	assert.Equal(t, 0, attempts)

	_, err = conn.Exec(ctx, `DROP TRIGGER styx_test_refuse ON styx_items`)
	require.NoError(t, err)
	got, err = q.Lease(ctx, queue.LeaseParams{BatchSize: 1, ClientID: "c3", Timeout: time.Minute})
	require.NoError(t, err)
	require.Len(t, got.Items, 1)
	assert.Equal(t, uint64(id), got.Items[0].ID)
	assert.Equal(t, int32(1), got.Items[0].Attempts, "the failed lease was no attempt")
}

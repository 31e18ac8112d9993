package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/backend/postgres"
	"github.com/styxq/styx/internal/pgtest"
	"github.com/styxq/styx/internal/queue"
	"github.com/styxq/styx/internal/store"
	"github.com/styxq/styx/metrics"
)

// TestSyncRepWaitCancelled: a produce whose COMMIT waits for the synchronous
// standby (stopped, so the wait never ends: wait event SyncRep) and is then
// cancelled (pg_cancel_backend, as an operator clears "stuck" sessions) or
// terminated (pg_terminate_backend), a queue create, a redrive task record
// and an API key whose COMMIT is cancelled so, and produces to 8 queues
// cancelled together, are answered 453 "commit outcome unknown" (naming the
// synchronous standby when cancelled), never success: PostgreSQL answers the
// cancelled COMMIT as done, with only a WARNING that the transaction
// committed locally and may not have reached the standby, so a failover
// may lose the change. The test checks that each change did commit on the
// primary (what a success answer would have claimed is safe). The node's
// transaction timeout is a minute, so that the 453 is the cancel's, not
// the timeout's.
func TestSyncRepWaitCancelled(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two PostgreSQL clusters")
	}
	primary := pgtest.StartServer(t)
	standby := primary.StartStandby(t, true)
	url := pgtest.SchemaURL(t, primary.URL)
	m, err := postgres.Open(t.Context(), postgres.Config{URL: url, Log: testLog(), Metrics: metrics.New(),
		StatementTimeout: time.Minute})
	require.NoError(t, err)
	t.Cleanup(m.Close)
	ctx := context.Background()
	require.NoError(t, m.Create(ctx, queue.QueueInfo{Name: "q", LeaseTimeout: time.Minute, Partitions: 1}))
	q, err := m.Get("q")
	require.NoError(t, err)
	require.NoError(t, q.Produce(ctx, []queue.ProduceItem{{Payload: []byte("replicated")}}), "the standby acknowledges")

	admin, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	produce := func(payload string) error { return q.Produce(ctx, []queue.ProduceItem{{Payload: []byte(payload)}}) }
	create := func(name string) error {
		return m.Create(ctx, queue.QueueInfo{Name: name, LeaseTimeout: time.Minute, Partitions: 1})
	}
	putTask := func(id string) error {
		return m.Store().PutTask(ctx, store.TaskRecord{ID: id, Queue: "q", Data: []byte("{}")})
	}
	createKey := func(name string) error {
		return m.Store().CreateKey(ctx, store.KeyRecord{Name: name, ID: name, Hash: make([]byte, 32), Scopes: []string{"admin"},
			CreatedAt: time.Now()})
	}
	standby.Stop(t) // every COMMIT now waits in SyncRep
	t.Cleanup(func() {
		// Release the waiters, so that the node closes at once.
		for _, s := range []string{`ALTER SYSTEM RESET synchronous_standby_names`, `SELECT pg_reload_conf()`} {
			if _, err := admin.Exec(context.Background(), s); err != nil {
				t.Logf("%s: %v", s, err)
			}
		}
		admin.Close(context.Background())
	})

	for _, c := range []struct {
		name, fn string
		act      func(name string) error
		count    string // counts what act committed, named name
	}{
		{"cancel", "pg_cancel_backend", produce, `SELECT count(*) FROM styx_items WHERE payload = $1::text::bytea`},
		{"terminate", "pg_terminate_backend", produce, `SELECT count(*) FROM styx_items WHERE payload = $1::text::bytea`},
		{"queue create/cancel", "pg_cancel_backend", create, `SELECT count(*) FROM styx_queues WHERE name = $1`},
		{"task record/cancel", "pg_cancel_backend", putTask, `SELECT count(*) FROM styx_tasks WHERE id = $1::text::bytea`},
		{"api key/cancel", "pg_cancel_backend", createKey, `SELECT count(*) FROM styx_api_keys WHERE name = $1`},
	} {
		t.Run(c.name, func(t *testing.T) {
			name := "waited-" + strings.ReplaceAll(c.name, "/", "-")
			answer := make(chan error, 1)
			go func() { answer <- c.act(name) }()
			// Every session waiting for the standby is cancelled, again
			// and again, until the request is answered: the node's
			// other transactions (its counts, its consumers) wait too.
			var err error
			for answered := false; !answered; {
				_, cerr := admin.Exec(ctx, `SELECT `+c.fn+`(pid) FROM pg_stat_activity WHERE wait_event = 'SyncRep' AND pid <> pg_backend_pid()`)
				require.NoError(t, cerr)
				select {
				case err = <-answer:
					answered = true
				case <-time.After(20 * time.Millisecond):
				}
			}
			require.Error(t, err, "a request whose wait for the synchronous standby was cancelled is not a success")
			require.True(t, errors.Is(err, store.ErrUnavailable), "453: %v", err)
			require.ErrorContains(t, err, "commit outcome unknown")
			if c.fn == "pg_cancel_backend" {
				require.ErrorContains(t, err, "synchronous standby")
			}
			var n int
			require.NoError(t, admin.QueryRow(ctx, c.count, name).Scan(&n))
			require.Equal(t, 1, n, "committed on the primary only")
		})
	}

	// Produces to 8 queues at once, each its queue's COMMIT on a
	// connection of its own, all waiting and cancelled together: each is
	// told 453, none another's success.
	t.Run("concurrent", func(t *testing.T) {
		const k = 8
		qs := make([]queue.Queue, k)
		for i := range qs {
			name := fmt.Sprintf("c%d", i)
			// Created while the standby is away: the create is cancelled
			// too (453) but committed on the primary.
			created := make(chan error, 1)
			go func() { created <- create(name) }()
			for done := false; !done; {
				_, err := admin.Exec(ctx, `SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE wait_event = 'SyncRep' AND pid <> pg_backend_pid()`)
				require.NoError(t, err)
				select {
				case <-created:
					done = true
				case <-time.After(20 * time.Millisecond):
				}
			}
			var err error
			qs[i], err = m.Get(name)
			require.NoError(t, err)
		}
		answers := make(chan error, k)
		for i, q := range qs {
			go func() {
				answers <- q.Produce(ctx, []queue.ProduceItem{{Payload: fmt.Appendf(nil, "concurrent-%d", i)}})
			}()
		}
		for got := 0; got < k; {
			_, err := admin.Exec(ctx, `SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE wait_event = 'SyncRep' AND pid <> pg_backend_pid()`)
			require.NoError(t, err)
			select {
			case err := <-answers:
				got++
				require.Error(t, err, "a cancelled wait is not a success")
				require.True(t, errors.Is(err, store.ErrUnavailable), "453: %v", err)
				require.ErrorContains(t, err, "synchronous standby")
			case <-time.After(20 * time.Millisecond):
			}
		}
	})
}

package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/backend/postgres"
	"github.com/styxq/styx/internal/pgtest"
	"github.com/styxq/styx/internal/queue"
)

// rowsOf returns the rows of table of the queue name on the database at
// url, as JSON without queue_id, in order.
func rowsOf(t *testing.T, url, table, name, order string) []string {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), url)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	rows, err := conn.Query(t.Context(), `SELECT (to_jsonb(t) - 'queue_id')::text FROM `+table+` t
		WHERE queue_id = (SELECT id FROM styx_queues WHERE name=$1) ORDER BY `+order, name)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return out
}

// TestMoveQueue moves a queue between two databases through the
// primitives: a copy cut off after its first batch continues on a rerun
// without doubling, every row of the queue arrives as it was (items with
// ids, first ids, attempts, histories, groups, holders; deduplication ids;
// dead items of a dead-letter queue), the destination's ids stay above the
// source's, a lease taken on the source completes on the destination, a
// deduplication id used on the source still deduplicates, the source's
// rows are gone, and an aborted move leaves the source serving and no
// copy.
func TestMoveQueue(t *testing.T) {
	base := pgtest.BaseURL(t)
	urlA, urlB := pgtest.SchemaURL(t, base), pgtest.SchemaURL(t, base)
	mA, mB := open(t, urlA), open(t, urlB)
	ctx := t.Context()
	require.NoError(t, mA.Create(ctx, queue.QueueInfo{Name: "dlq", LeaseTimeout: time.Minute, Partitions: 1}))
	require.NoError(t, mA.Create(ctx, queue.QueueInfo{Name: "q", LeaseTimeout: time.Minute, Partitions: 2, DeadQueue: "dlq", MaxAttempts: 1}))
	q, err := mA.Get("q")
	require.NoError(t, err)
	var items []queue.ProduceItem
	for i := range 9 {
		pi := queue.ProduceItem{Payload: []byte{byte(i), 0xff}, DeduplicationID: "d" + string(rune('a'+i)), Kind: "k"}
		if i%3 == 0 {
			pi.Group = "g"
		}
		items = append(items, pi)
	}
	require.NoError(t, q.Produce(ctx, items))
	leased, err := q.Lease(ctx, queue.LeaseParams{BatchSize: 2, ClientID: "c", Timeout: time.Second})
	require.NoError(t, err)
	require.Len(t, leased.Items, 2)
	// The first one dies (max_attempts 1) into dlq, with its error.
	_, err = q.Retry(ctx, leased.Partition, []queue.RetryItem{{ID: leased.Items[0].ID, Error: "boom"}})
	require.NoError(t, err)
	held := leased.Items[1]

	before := map[string][]string{}
	for _, name := range []string{"q", "dlq"} {
		before[name] = rowsOf(t, urlA, "styx_items", name, "id")
	}
	dedupBefore := rowsOf(t, urlA, "styx_dedup", "q", "dedup_id")
	require.Len(t, before["q"], 8)
	require.Len(t, before["dlq"], 1)
	require.Len(t, dedupBefore, 9)
	var lastA int64
	conn, err := pgx.Connect(ctx, urlA)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	require.NoError(t, conn.QueryRow(ctx, `SELECT last_value FROM styx_item_ids`).Scan(&lastA))

	// The destination hands out ids of its own residue (ADR 0023's
	// clusters: 5 modulo 64), which the move keeps.
	connB, err := pgx.Connect(ctx, urlB)
	require.NoError(t, err)
	defer connB.Close(context.Background())
	_, err = connB.Exec(ctx, `ALTER SEQUENCE styx_item_ids INCREMENT BY 64; SELECT setval('styx_item_ids', 5)`)
	require.NoError(t, err)

	src, dst := mA.Store(), mB.Store()
	for _, name := range []string{"q", "dlq"} {
		const epoch = 3
		info, err := src.Fence(ctx, name, epoch)
		require.NoError(t, err)
		_, err = dst.PrepareMoveIn(ctx, info, epoch)
		require.NoError(t, err)
		_, err = dst.PrepareMoveIn(ctx, info, epoch) // a resumed move
		require.NoError(t, err)

		// Cut off after its first batch (a node gone mid-copy).
		cut, cancel := context.WithCancel(ctx)
		var seen []postgres.MoveProgress
		_, err = postgres.CopyQueue(cut, src, dst, name, epoch, postgres.CopyConfig{BatchItems: 3, Progress: func(p postgres.MoveProgress) {
			seen = append(seen, p)
			if p.Copied > 0 {
				cancel()
			}
		}})
		cancel()
		if name == "q" {
			require.Error(t, err)
			require.Len(t, rowsOf(t, urlB, "styx_items", name, "id"), 3, "the first batch stays")
		}
		p, err := postgres.CopyQueue(ctx, src, dst, name, epoch, postgres.CopyConfig{BatchItems: 3, Progress: func(p postgres.MoveProgress) {
			seen = append(seen, p)
		}})
		require.NoError(t, err)
		assert.Equal(t, postgres.MoveProgress{Copied: int64(len(before[name])), Total: int64(len(before[name]))}, p)
		for i := 1; i < len(seen); i++ {
			assert.LessOrEqual(t, seen[i-1].Copied, seen[i].Copied, "progress never goes back: %v", seen)
		}
		// A rerun after the copy changes nothing.
		p, err = postgres.CopyQueue(ctx, src, dst, name, epoch, postgres.CopyConfig{})
		require.NoError(t, err)
		assert.Equal(t, int64(len(before[name])), p.Copied)

		// Served nowhere until the switch.
		qb, err := mB.Get(name)
		require.NoError(t, err)
		assertMovingNamed(t, qb.Produce(ctx, []queue.ProduceItem{{Payload: []byte("x")}}), name)

		require.NoError(t, dst.GoLive(ctx, name, epoch))
		require.NoError(t, dst.GoLive(ctx, name, epoch), "done already")
		require.ErrorIs(t, postgres.AbortMove(ctx, src, dst, name, epoch), postgres.ErrFencedOtherwise, "no abort after the switch")
		n, err := src.DeleteMoved(ctx, name, epoch, 2)
		require.NoError(t, err)
		assert.Equal(t, int64(len(before[name])), n)
		n, err = src.DeleteMoved(ctx, name, epoch, 2)
		require.NoError(t, err, "gone already")
		assert.Zero(t, n)
		assert.Equal(t, before[name], rowsOf(t, urlB, "styx_items", name, "id"), "every row as it was")
		_, err = src.FencedEpoch(ctx, name)
		require.Error(t, err, "the source's row is gone")
	}
	assert.Equal(t, dedupBefore, rowsOf(t, urlB, "styx_dedup", "q", "dedup_id"))
	require.Eventually(t, func() bool { _, err := mA.Info(ctx, "q"); return err != nil }, 10*time.Second, 10*time.Millisecond)

	qb, err := mB.Get("q")
	require.NoError(t, err)
	require.NoError(t, qb.Complete(ctx, leased.Partition, []uint64{held.ID}), "a lease taken on the source completes on the destination")
	require.NoError(t, qb.Produce(ctx, []queue.ProduceItem{{Payload: []byte("again"), DeduplicationID: "da"}, {Payload: []byte("new")}}))
	after := rowsOf(t, urlB, "styx_items", "q", "id")
	require.Len(t, after, 7+1, "the deduplicated produce stored nothing, the other one item")
	var newID int64
	require.NoError(t, connB.QueryRow(ctx, `SELECT max(id) FROM styx_items`).Scan(&newID))
	assert.Greater(t, newID, lastA, "the destination's ids are past every id of the source")
	assert.Equal(t, int64(5), newID%64, "on the destination's residue")

	// An aborted move: the copy goes, the source serves again.
	info, err := dst.Fence(ctx, "q", 4)
	require.NoError(t, err)
	_, err = src.PrepareMoveIn(ctx, info, 4)
	require.NoError(t, err)
	_, err = postgres.CopyQueue(ctx, dst, src, "q", 4, postgres.CopyConfig{})
	require.NoError(t, err)
	require.NoError(t, postgres.AbortMove(ctx, dst, src, "q", 4))
	_, err = src.FencedEpoch(ctx, "q")
	require.Error(t, err, "the aborted copy is gone")
	require.NoError(t, qb.Produce(ctx, []queue.ProduceItem{{Payload: []byte("served")}}))
	require.Len(t, rowsOf(t, urlB, "styx_items", "q", "id"), 9)
}

func assertMovingNamed(t *testing.T, err error, name string) {
	t.Helper()
	require.Error(t, err)
	require.True(t, errors.Is(err, queue.ErrQueueMoving), "%v", err)
	assert.Contains(t, err.Error(), "queue '"+name+"' is moving")
}

package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/pgtest"
	"github.com/styxq/styx/internal/queue"
	"github.com/styxq/styx/internal/text"
)

// openProduceStore opens a store on a schema of the test's own, with a
// queue of the given partitions, and a pool on the same schema for the
// application's transactions.
func openProduceStore(t *testing.T, partitions int32) (*Store, *pgxpool.Pool, uint64) {
	url := pgtest.URL(t)
	ctx := t.Context()
	s, err := OpenStore(ctx, url, 4)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	info, err := s.CreateQueue(ctx, queue.QueueInfo{Name: "orders", LeaseTimeout: time.Minute, ExpireTimeout: time.Hour, Partitions: partitions})
	require.NoError(t, err)
	pool, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return s, pool, info.ID
}

// TestProduceRulesChannel: the rules styx_produce reads name the channel
// the nodes LISTEN on, and hold the Go limits.
func TestProduceRulesChannel(t *testing.T) {
	s, pool, _ := openProduceStore(t, 1)
	var channel string
	var max int
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT value->>'channel', (value->>'max_payload_bytes')::int FROM styx_settings
		WHERE name = 'produce'`).Scan(&channel, &max))
	require.Equal(t, s.channel, channel)
	require.Equal(t, queue.MaxPayloadBytes, max)
}

// TestHiddenClassMatchesText: the regular expression styx_produce refuses
// hidden characters with matches, in PostgreSQL, exactly the characters
// text.Hidden reports, over every character PostgreSQL text can hold.
func TestHiddenClassMatchesText(t *testing.T) {
	_, pool, _ := openProduceStore(t, 1)
	rows, err := pool.Query(t.Context(), `SELECT c FROM generate_series(1, 1114111) AS c
		WHERE c NOT BETWEEN 55296 AND 57343 AND chr(c) ~ (SELECT value->>'hidden' FROM styx_settings WHERE name = 'produce')`)
	require.NoError(t, err)
	got, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	require.NoError(t, err)
	var want []int32
	for r := rune(1); r <= utf8.MaxRune; r++ {
		if (r < 0xd800 || r > 0xdfff) && text.Hidden(r) {
			want = append(want, r)
		}
	}
	require.Equal(t, want, got)
}

// TestGroupPartitionSQL: styx_group_partition is queue.GroupPartition.
func TestGroupPartitionSQL(t *testing.T) {
	_, pool, _ := openProduceStore(t, 1)
	for _, g := range []string{"a", "customer-42", "~!{}", strings.Repeat("z", 128), "Hello, World"} {
		for _, n := range []int32{1, 2, 3, 7, 16, 256} {
			var got int32
			require.NoError(t, pool.QueryRow(t.Context(), `SELECT styx_group_partition($1, $2)`, g, n).Scan(&got))
			require.Equal(t, queue.GroupPartition(g, n), got, "group %q, %d partitions", g, n)
		}
	}
}

// produceSQL calls styx_produce in a transaction of its own and commits it.
func produceSQL(ctx context.Context, pool *pgxpool.Pool, queueName, items string) ([]*int64, error) {
	var ids []*int64
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, `SELECT styx_produce($1, $2::jsonb)`, queueName, items).Scan(&ids)
	})
	return ids, err
}

func countItems(t *testing.T, pool *pgxpool.Pool, queueID uint64) (items, counted int) {
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT (SELECT count(*) FROM styx_items WHERE queue_id = $1),
		(SELECT coalesce(sum(ready + scheduled), 0) FROM styx_item_counts WHERE queue_id = $1)`, int64(queueID)).Scan(&items, &counted))
	return items, counted
}

// TestStyxProduceRefuses: each rule refuses the call with SQLSTATE 22023
// naming the field (COLUMN) and the limit, and nothing of it is stored.
func TestStyxProduceRefuses(t *testing.T) {
	_, pool, qid := openProduceStore(t, 1)
	ok := `{"utf8": "fine"}`
	big := strings.Repeat("x", queue.MaxPayloadBytes+1)
	many := "[" + strings.TrimSuffix(strings.Repeat(ok+",", queue.MaxBatch+1), ",") + "]"
	for _, c := range []struct {
		name, items, field, message string
	}{
		{"NotAnArray", `{"utf8": "x"}`, "items", "invalid items; a JSON array of item objects is required"},
		{"Empty", `[]`, "items", "invalid items; at least one is required"},
		{"TooMany", many, "items", fmt.Sprintf("invalid items; %d given, the limit is %d", queue.MaxBatch+1, queue.MaxBatch)},
		{"NotAnObject", `[` + ok + `, "x"]`, "items[1]", "invalid items[1]; a JSON object is required"},
		{"UnknownField", `[{"payload": "x"}]`, "items[0]", "invalid items[0]; unknown field 'payload'"},
		{"NotAString", `[{"kind": 3}]`, "items[0].kind", "invalid items[0].kind; a JSON string (or null) is required"},
		{"PayloadTooLarge", `[` + ok + `, {"utf8": "` + big + `"}]`, "items[1].bytes",
			fmt.Sprintf("invalid items[1].bytes; payload is %d bytes, the limit is %d (5 MB)", len(big), queue.MaxPayloadBytes)},
		{"NotBase64", `[{"bytes": "a*=="}]`, "items[0].bytes", "invalid items[0].bytes; not base64"},
		{"KindTooLong", `[{"kind": "` + strings.Repeat("k", 1025) + `"}]`, "items[0].kind", "invalid items[0].kind; 1025 bytes, the limit is 1024"},
		{"HiddenReference", `[{"reference": "invoice\u202efdp.exe"}]`, "items[0].reference",
			"invalid items[0].reference; it holds U+202E at character 7; " + text.Rule},
		{"DeduplicationIDTooLong", `[{"deduplication_id": "` + strings.Repeat("d", 129) + `"}]`, "items[0].deduplication_id",
			"invalid items[0].deduplication_id; 129 bytes, the limit is 128"},
		{"DeduplicationIDSpace", `[{"deduplication_id": "a b"}]`, "items[0].deduplication_id",
			"invalid items[0].deduplication_id; byte 1 (0x20) is not an ASCII letter, digit or punctuation"},
		{"GroupNotASCII", `[{"group": "gé"}]`, "items[0].group",
			"invalid items[0].group; byte 1 (0xc3) is not an ASCII letter, digit or punctuation"},
		{"EnqueueAtMalformed", `[{"enqueue_at": "tomorrow"}]`, "items[0].enqueue_at", "invalid items[0].enqueue_at; 'tomorrow' is not an RFC 3339 time"},
		{"EnqueueAtNoSuchDay", `[{"enqueue_at": "2027-02-30T00:00:00Z"}]`, "items[0].enqueue_at", "is not an RFC 3339 time"},
		{"EnqueueAtOutOfRange", `[{"enqueue_at": "2300-01-01T00:00:00Z"}]`, "items[0].enqueue_at",
			"invalid items[0].enqueue_at; 2300-01-01T00:00:00Z is out of range 1677-09-21T00:12:43.145224192Z..2262-04-11T23:47:16.854775807Z"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := produceSQL(t.Context(), pool, "orders", c.items)
			var pgErr *pgconn.PgError
			require.True(t, errors.As(err, &pgErr), "%v", err)
			require.Equal(t, "22023", pgErr.Code)
			require.Equal(t, c.field, pgErr.ColumnName)
			require.Contains(t, pgErr.Message, c.message)
			require.NotEmpty(t, pgErr.Hint)
			items, counted := countItems(t, pool, qid)
			require.Zero(t, items)
			require.Zero(t, counted)
		})
	}
	t.Run("NoSuchQueue", func(t *testing.T) {
		_, err := produceSQL(t.Context(), pool, "nope", `[{"utf8": "x"}]`)
		var pgErr *pgconn.PgError
		require.True(t, errors.As(err, &pgErr), "%v", err)
		require.Equal(t, "P0001", pgErr.Code)
		require.Equal(t, "styx_queues", pgErr.TableName)
		require.Equal(t, "queue does not exist; no such queue named 'nope'", pgErr.Message)
	})
}

// TestStyxProduce: items stored with the ids returned, in item order,
// counted, their times and states; a duplicate id returns the first
// item's id and stores nothing; nothing is stored after a rollback; the
// partitions fill evenly; a group goes to its partition.
func TestStyxProduce(t *testing.T) {
	s, pool, qid := openProduceStore(t, 3)
	ctx := t.Context()
	at := time.Now().Add(time.Hour).UTC().Truncate(time.Microsecond)
	ids, err := produceSQL(ctx, pool, "orders", fmt.Sprintf(`[{"bytes": "aGVsbG8=", "kind": "k", "encoding": "e", "reference": "r"},
		{"utf8": "later", "enqueue_at": %q}, {"utf8": "once", "deduplication_id": "d-1"}, {"utf8": "twice", "deduplication_id": "d-1"},
		{"utf8": "now", "enqueue_at": "0001-01-01T00:00:00Z"}]`, at.Format(time.RFC3339Nano)))
	require.NoError(t, err)
	require.Len(t, ids, 5)
	require.Less(t, *ids[0], *ids[1])
	require.Less(t, *ids[1], *ids[2])
	require.Equal(t, *ids[2], *ids[3], "a duplicate returns the first item's id")
	require.Less(t, *ids[2], *ids[4])
	items, counted := countItems(t, pool, qid)
	require.Equal(t, 4, items)
	require.Equal(t, 4, counted)

	var payload []byte
	var kind, enc, ref string
	var state, part int32
	var deadline int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT payload, kind, encoding, reference, state, deadline, partition FROM styx_items
		WHERE queue_id = $1 AND id = $2`, int64(qid), *ids[0]).Scan(&payload, &kind, &enc, &ref, &state, &deadline, &part))
	require.Equal(t, "hello", string(payload))
	require.Equal(t, []string{"k", "e", "r"}, []string{kind, enc, ref})
	require.Equal(t, int32(stateReady), state)
	require.NoError(t, pool.QueryRow(ctx, `SELECT state, deadline FROM styx_items WHERE queue_id = $1 AND id = $2`,
		int64(qid), *ids[1]).Scan(&state, &deadline))
	require.Equal(t, int32(stateScheduled), state)
	require.Equal(t, at.UnixNano(), deadline)

	// Within the window, in another transaction: the first item's id.
	again, err := produceSQL(ctx, pool, "orders", `[{"utf8": "thrice", "deduplication_id": "d-1"}]`)
	require.NoError(t, err)
	require.Equal(t, *ids[2], *again[0])
	// A window a /v1 produce took: stored once, its id unknown.
	q, err := s.GetQueue(ctx, "orders")
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO styx_dedup (queue_id, dedup_id, deadline) VALUES ($1, 'api', $2)`, int64(q.ID), time.Now().Add(time.Minute).UnixNano())
	require.NoError(t, err)
	unknown, err := produceSQL(ctx, pool, "orders", `[{"utf8": "dup", "deduplication_id": "api"}]`)
	require.NoError(t, err)
	require.Nil(t, unknown[0])
	items, _ = countItems(t, pool, qid)
	require.Equal(t, 4, items)

	// A rollback stores nothing and keeps no deduplication id.
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `SELECT styx_produce('orders', '[{"utf8": "gone", "deduplication_id": "d-2"}]')`)
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(ctx))
	items, counted = countItems(t, pool, qid)
	require.Equal(t, 4, items)
	require.Equal(t, 4, counted)
	kept, err := produceSQL(ctx, pool, "orders", `[{"utf8": "kept", "deduplication_id": "d-2"}]`)
	require.NoError(t, err)
	require.NotNil(t, kept[0])

	// Produces without a group fill the partitions evenly; a group goes
	// to its own.
	for range 9 {
		_, err := produceSQL(ctx, pool, "orders", `[{"utf8": "spread"}]`)
		require.NoError(t, err)
	}
	rows, err := pool.Query(ctx, `SELECT count(*) FROM styx_items WHERE queue_id = $1 AND state = 0 GROUP BY partition ORDER BY partition`, int64(qid))
	require.NoError(t, err)
	per, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	require.Len(t, per, 3)
	require.LessOrEqual(t, max(per[0], per[1], per[2])-min(per[0], per[1], per[2]), int64(1), "ready items per partition: %v", per)
	grouped, err := produceSQL(ctx, pool, "orders", `[{"utf8": "g", "group": "customer-7"}]`)
	require.NoError(t, err)
	var grp string
	require.NoError(t, pool.QueryRow(ctx, `SELECT partition, grp FROM styx_items WHERE queue_id = $1 AND id = $2`, int64(qid), *grouped[0]).
		Scan(&part, &grp))
	require.Equal(t, queue.GroupPartition("customer-7", 3), part)
	require.Equal(t, "customer-7", grp)
}

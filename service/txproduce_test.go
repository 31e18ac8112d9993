package service_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/servertest"
	pb "github.com/styxq/styx/styxpb"
	"github.com/styxq/styx/txproduce"
)

// Transactional enqueue (issue 53; package txproduce, styx_produce): items
// produced inside an application's PostgreSQL transaction, on a cluster of
// two nodes. Node a creates the queue; the consumers wait on node b.

// appPool is the application's pool on the nodes' schema.
func appPool(t *testing.T, s *servertest.Server) *pgxpool.Pool {
	pool, err := pgxpool.New(ctx, s.B.URL)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// awaitLease starts a lease of one item on s, waiting up to 30s, and
// returns its answer's channel once the lease waits in the queue.
func awaitLease(t *testing.T, s *servertest.Server, queueName, client string) <-chan *pb.QueueLeaseResponse {
	got := make(chan *pb.QueueLeaseResponse, 1)
	go func() {
		res, err := s.C.QueueLease(ctx, &pb.QueueLeaseRequest{QueueName: queueName, BatchSize: 10, ClientId: client, RequestTimeout: "30s"})
		if err != nil {
			t.Errorf("lease on %s: %v", queueName, err)
			res = nil
		}
		got <- res
	}()
	servertest.WaitStat(t, s, queueName, func(st *pb.QueueLogicalStats) bool { return st.LeaseWaiting == 1 })
	return got
}

// listen LISTENs on the channel of the pool's schema, as the nodes do.
func listen(t *testing.T, pool *pgxpool.Pool) *pgx.Conn {
	var schema string
	require.NoError(t, pool.QueryRow(ctx, `SELECT current_schema()`).Scan(&schema))
	conn, err := pgx.ConnectConfig(ctx, pool.Config().ConnConfig.Copy())
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	h := fnv.New32a()
	h.Write([]byte(schema))
	_, err = conn.Exec(ctx, fmt.Sprintf(`LISTEN "styx_%08x"`, h.Sum32()))
	require.NoError(t, err)
	return conn
}

func TestTransactionalProduce(t *testing.T) {
	t.Parallel()
	nodes := cluster(t, 2)
	a, b := nodes[0], nodes[1]
	pool := appPool(t, a)
	_, err := pool.Exec(ctx, `CREATE TABLE app_orders (id text PRIMARY KEY)`)
	require.NoError(t, err)

	t.Run("CommitLeasedOnceOnTheOtherNode", func(t *testing.T) {
		a.CreateQueue(&pb.QueueInfo{QueueName: "commit", LeaseTimeout: "1m", RequestedPartitions: 2})
		var queueID int64
		require.NoError(t, pool.QueryRow(ctx, `SELECT id FROM styx_queues WHERE name = 'commit'`).Scan(&queueID))
		listener := listen(t, pool)
		leased := awaitLease(t, b, "commit", "waiting-on-b")

		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		_, err = tx.Exec(ctx, `INSERT INTO app_orders (id) VALUES ('o-1')`)
		require.NoError(t, err)
		var pid uint32
		require.NoError(t, tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid))
		ids, err := txproduce.Produce(ctx, tx, "commit", []txproduce.Item{{Payload: []byte("order o-1"), Kind: "order.created", Reference: "o-1"}})
		require.NoError(t, err)
		require.Len(t, ids, 1)
		require.NotZero(t, ids[0])
		// Not visible before the commit: nothing to list, the lease waits.
		require.Empty(t, b.Items("commit"))
		select {
		case res := <-leased:
			t.Fatalf("leased before the commit: %v", res)
		default:
		}

		committed := time.Now()
		require.NoError(t, tx.Commit(ctx))
		res := <-leased
		require.NotNil(t, res)
		t.Logf("leased on node b %s after the commit", time.Since(committed))
		require.Len(t, res.Items, 1)
		require.Equal(t, ids[0].String(), res.Items[0].Id)
		require.Equal(t, "order o-1", string(res.Items[0].Bytes))
		require.Equal(t, "order.created", res.Items[0].Kind)
		require.Equal(t, "o-1", res.Items[0].Reference)
		b.Complete("commit", res.Partition, res.Items[0].Id)
		a.LeaseNone("commit")
		b.LeaseNone("commit")

		// The wake-up: on the nodes' channel, with their payload, sent by
		// the application's transaction (the nodes send theirs too).
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		for {
			n, err := listener.WaitForNotification(wctx)
			require.NoError(t, err, "no notification from the application's transaction")
			if n.PID == pid {
				require.Equal(t, fmt.Sprintf("i:%d", queueID), n.Payload)
				break
			}
		}
	})

	t.Run("RollbackNeverSeen", func(t *testing.T) {
		a.CreateQueue(&pb.QueueInfo{QueueName: "rollback"})
		leased := awaitLease(t, b, "rollback", "waiting-on-b")
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		_, err = txproduce.Produce(ctx, tx, "rollback", []txproduce.Item{{Payload: []byte("gone")}, {Payload: []byte("gone too")}})
		require.NoError(t, err)
		require.NoError(t, tx.Rollback(ctx))
		// The next item the waiting lease gets is one produced after.
		a.Produce("rollback", "after")
		res := <-leased
		require.NotNil(t, res)
		require.Len(t, res.Items, 1)
		require.Equal(t, "after", string(res.Items[0].Bytes))
		b.Complete("rollback", res.Partition, res.Items[0].Id)
		b.LeaseNone("rollback")
		st, err := b.C.QueueStats(ctx, &pb.QueueStatsRequest{QueueName: "rollback"})
		require.NoError(t, err)
		for _, p := range st.LogicalQueues[0].Partitions {
			require.Zero(t, p.Total, "partition %d", p.Partition)
		}
	})

	t.Run("DuplicateWithinTheWindowIsOneItem", func(t *testing.T) {
		a.CreateQueue(&pb.QueueInfo{QueueName: "dedup"})
		var first txproduce.ID
		for i := range 3 {
			require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				ids, err := txproduce.Produce(ctx, tx, "dedup", []txproduce.Item{
					{Payload: []byte(fmt.Sprint("try ", i)), DeduplicationID: "order-7"},
					{Payload: []byte("same call"), DeduplicationID: "order-7"},
				})
				if err != nil {
					return err
				}
				if i == 0 {
					first = ids[0]
				}
				require.Equal(t, []txproduce.ID{first, first}, ids)
				return nil
			}))
		}
		// The API's produce shares the window.
		require.NoError(t, b.C.QueueProduce(ctx, &pb.QueueProduceRequest{QueueName: "dedup", RequestTimeout: "1m",
			Items: []*pb.QueueProduceItem{{Bytes: []byte("through /v1"), DeduplicationId: "order-7"}}}))
		items := b.Items("dedup")
		require.Len(t, items, 1)
		require.Equal(t, first.String(), items[0].Id)
		require.Equal(t, "try 0", string(items[0].Payload))
	})

	t.Run("BadItemRefusedNothingStored", func(t *testing.T) {
		a.CreateQueue(&pb.QueueInfo{QueueName: "bad"})
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		_, err = txproduce.Produce(ctx, tx, "bad", []txproduce.Item{{Payload: []byte("fine")}, {Kind: "invoice\u202efdp.exe"}})
		require.ErrorIs(t, err, txproduce.ErrInvalid)
		var ie *txproduce.InvalidError
		require.ErrorAs(t, err, &ie)
		require.Equal(t, "items[1].kind", ie.Field)
		require.Contains(t, ie.Message, "U+202E at character 7")
		require.False(t, ie.InTransaction, "refused before the statement")
		// The transaction goes on: the application decides.
		_, err = tx.Exec(ctx, `INSERT INTO app_orders (id) VALUES ('o-bad')`)
		require.NoError(t, err)
		require.NoError(t, tx.Commit(ctx))

		// The function checks again: SQL of the application's own.
		err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `SELECT styx_produce('bad', '[{"utf8": "fine"}, {"deduplication_id": "has space"}]')`)
			return err
		})
		var pe *pgconn.PgError
		require.ErrorAs(t, err, &pe)
		require.Equal(t, "22023", pe.Code)
		require.Equal(t, "items[1].deduplication_id", pe.ColumnName)
		require.Equal(t, "invalid items[1].deduplication_id; byte 3 (0x20) is not an ASCII letter, digit or punctuation", pe.Message)

		big := make([]byte, 5<<20+1)
		err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := txproduce.Produce(ctx, tx, "bad", []txproduce.Item{{Payload: big}})
			return err
		})
		require.ErrorAs(t, err, &ie)
		require.Equal(t, "items[0].bytes", ie.Field)
		require.Equal(t, "invalid items[0].bytes; payload is 5242881 bytes, the limit is 5242880 (5 MB)", ie.Message)
		require.Empty(t, b.AllItems("bad"))
	})

	t.Run("NoSuchQueue", func(t *testing.T) {
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		_, err = txproduce.Produce(ctx, tx, "nope", []txproduce.Item{{Payload: []byte("x")}})
		require.ErrorIs(t, err, txproduce.ErrQueueNotFound)
		require.EqualError(t, err, "txproduce: queue does not exist; no such queue named 'nope'")
	})

	t.Run("ScheduledItem", func(t *testing.T) {
		a.CreateQueue(&pb.QueueInfo{QueueName: "later"})
		at := time.Now().Add(time.Hour)
		require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := txproduce.Produce(ctx, tx, "later", []txproduce.Item{{Payload: []byte("in an hour"), EnqueueAt: at}})
			return err
		}))
		scheduled := b.List("later", b.C.StorageScheduledList)
		require.Len(t, scheduled, 1)
		require.WithinDuration(t, at, scheduled[0].EnqueueAt.AsTime(), time.Microsecond)
		b.LeaseNone("later")
	})

	t.Run("GrantsOfTheApplicationRole", func(t *testing.T) {
		a.CreateQueue(&pb.QueueInfo{QueueName: "granted"})
		var schema string
		require.NoError(t, pool.QueryRow(ctx, `SELECT current_schema()`).Scan(&schema))
		var r [4]byte
		_, _ = rand.Read(r[:])
		role := "styx_app_" + hex.EncodeToString(r[:])
		_, err := pool.Exec(ctx, `CREATE ROLE `+role)
		require.NoError(t, err)
		t.Cleanup(func() { _, _ = pool.Exec(context.Background(), `DROP OWNED BY `+role+`; DROP ROLE `+role) })
		_, err = pool.Exec(ctx, `GRANT USAGE ON SCHEMA `+schema+` TO `+role)
		require.NoError(t, err)
		asApp := func() error {
			return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, `SET LOCAL ROLE `+role); err != nil {
					return err
				}
				_, err := txproduce.Produce(ctx, tx, "granted", []txproduce.Item{{Payload: []byte("from the app")}})
				return err
			})
		}
		err = asApp()
		require.ErrorAs(t, err, new(*pgconn.PgError))
		require.Contains(t, err.Error(), "permission denied for function styx_produce", "EXECUTE is not granted to PUBLIC")
		_, err = pool.Exec(ctx, `GRANT EXECUTE ON FUNCTION `+schema+`.styx_produce(text, jsonb) TO `+role)
		require.NoError(t, err)
		require.NoError(t, asApp())
		res := b.Lease("granted", 1)
		require.Equal(t, "from the app", string(res.Items[0].Bytes))
		// The role reads no table of Styx's.
		err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SET LOCAL ROLE `+role); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `SELECT count(*) FROM styx_items`)
			return err
		})
		require.Error(t, err)
		require.True(t, strings.Contains(err.Error(), "permission denied"), err.Error())
		require.False(t, errors.Is(err, txproduce.ErrInvalid))
	})

}

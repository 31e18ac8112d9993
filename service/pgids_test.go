package service_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	styx "github.com/styxq/styx"
	"github.com/styxq/styx/internal/pgtest"
	"github.com/styxq/styx/internal/servertest"
	pb "github.com/styxq/styx/styxpb"
)

// TestPostgresIDsAfterAsyncFailover (issue 53): item ids never repeat
// after a failover to an asynchronous standby that was behind. A node on
// the multi-host URL of a primary and its asynchronous standby produces
// and completes items, the standby replays it all, and then its
// replication is cut (primary_conninfo set empty), so the 100 items produced
// and leased next live on the primary only: their ids are the stale
// clients' lease handles. The primary is SIGKILLed and the standby
// promoted; the node finds it, produces 100 new items and leases them.
// No new item has an id the old primary handed out, and each stale
// handle's complete is refused (400 "not leased"), never 200: on main
// the promoted standby's styx_item_ids handed out the lost ids again, and
// the stale completes deleted the new consumer's items.
func TestPostgresIDsAfterAsyncFailover(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts two PostgreSQL clusters")
	}
	primary := pgtest.StartServer(t)
	standby := primary.StartStandby(t, false)
	schemaURL := pgtest.SchemaURL(t, primary.URL)
	s := &servertest.Server{T: t, B: servertest.Backend{Name: "postgres", URL: multiHostURL(t, schemaURL, primary.HostPort(), standby.HostPort())}}
	s.Boot()
	t.Cleanup(s.Stop)
	s.CreateQueue(&pb.QueueInfo{QueueName: "ids", LeaseTimeout: "10m"})

	// Items before the cut: on both.
	var before []string
	for i := range 10 {
		before = append(before, fmt.Sprintf("before-%d", i))
	}
	s.Produce("ids", before...)
	for _, got := range leaseAll(t, s, "ids", before) {
		s.Complete("ids", got.partition, got.id)
	}
	pc, err := pgx.Connect(ctx, primary.URL)
	require.NoError(t, err)
	defer pc.Close(context.Background())
	var lsn string
	require.NoError(t, pc.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&lsn))
	servertest.Eventually(t, func() bool {
		var replayed bool
		require.NoError(t, pc.QueryRow(ctx, `SELECT coalesce(bool_and(replay_lsn >= $1::pg_lsn), false) FROM pg_stat_replication`, lsn).Scan(&replayed))
		return replayed
	}, "the standby replays the items before the cut")

	// The cut: the standby stops streaming.
	sc, err := pgx.Connect(ctx, standby.URL)
	require.NoError(t, err)
	for _, q := range []string{`ALTER SYSTEM SET primary_conninfo = ''`, `SELECT pg_reload_conf()`} {
		_, err := sc.Exec(ctx, q)
		require.NoError(t, err, q)
	}
	sc.Close(context.Background())
	servertest.Eventually(t, func() bool {
		var n int
		require.NoError(t, pc.QueryRow(ctx, `SELECT count(*) FROM pg_stat_replication`).Scan(&n))
		return n == 0
	}, "the standby stops streaming")

	// On the primary only: 100 items produced and leased, the stale
	// clients' handles.
	var lost []string
	for i := range 100 {
		lost = append(lost, fmt.Sprintf("lost-%d", i))
	}
	s.Produce("ids", lost...)
	stale := leaseAll(t, s, "ids", lost)
	staleIDs := map[string]bool{}
	for _, l := range stale {
		staleIDs[l.id] = true
	}

	primary.Kill(t)
	standby.Promote(t)

	// The node finds the promoted standby; a produce that failed with 453
	// may have committed, so payloads may repeat.
	var after []string
	for i := range 100 {
		after = append(after, fmt.Sprintf("after-%d", i))
	}
	req := &pb.QueueProduceRequest{QueueName: "ids", RequestTimeout: "5s"}
	for _, p := range after {
		req.Items = append(req.Items, &pb.QueueProduceItem{Bytes: []byte(p)})
	}
	require.Eventually(t, func() bool { return s.C.QueueProduce(ctx, req) == nil }, 30*time.Second, 20*time.Millisecond,
		"the node produces on the promoted standby")
	fresh := leaseAll(t, s, "ids", after)
	var reused int
	for _, f := range fresh {
		if staleIDs[f.id] {
			reused++
		}
	}
	var completed int
	for _, l := range stale {
		err := s.C.QueueComplete(ctx, &pb.QueueCompleteRequest{QueueName: "ids", Partition: l.partition, Ids: []string{l.id}})
		if err == nil {
			completed++
			continue
		}
		servertest.RequireCode(t, err, styx.CodeBadRequest, "not leased")
	}
	require.Zero(t, reused, "of %d new items, %d got an id the old primary handed out", len(fresh), reused)
	require.Contains(t, s.Logs.String(), "item ids now start past those the old primary may have handed out", "the node logs the move")
	require.Zero(t, completed, "of %d stale lease handles, %d completed an item", len(stale), completed)
	n := 0
	for _, it := range s.Items("ids") {
		if strings.HasPrefix(string(it.Payload), "after-") {
			n++
		}
	}
	require.GreaterOrEqual(t, n, len(after), "every new item is still there")
}

// leased is an item a lease handed out: its id and partition.
type leased struct {
	id        string
	partition int32
	payload   string
}

// leaseAll leases from queue until every payload of want was handed out,
// and returns the leases of those (a payload produced twice: each).
func leaseAll(t *testing.T, s *servertest.Server, queue string, want []string) []leased {
	t.Helper()
	missing := map[string]bool{}
	for _, p := range want {
		missing[p] = true
	}
	wanted := make(map[string]bool, len(want))
	for _, p := range want {
		wanted[p] = true
	}
	var got []leased
	require.Eventually(t, func() bool {
		res, err := s.C.QueueLease(ctx, &pb.QueueLeaseRequest{QueueName: queue, BatchSize: 1000, ClientId: "leaseAll", RequestTimeout: "1s"})
		if err != nil {
			return false
		}
		for _, it := range res.Items {
			if wanted[string(it.Bytes)] {
				got = append(got, leased{id: it.Id, partition: res.Partition, payload: string(it.Bytes)})
				delete(missing, string(it.Bytes))
			}
		}
		return len(missing) == 0
	}, 30*time.Second, time.Millisecond, "lease %d items of %s", len(want), queue)
	return got
}

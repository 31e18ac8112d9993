package service_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	styx "github.com/styxq/styx"
	"github.com/styxq/styx/internal/servertest"
	pb "github.com/styxq/styx/styxpb"
)

// Acting on a live queue (issue 49, "Live queues"): pausing a queue's
// consumption and the dry run of a clear, through the Go client on every
// backend.

// leaseAsync starts a lease of one item on queue at s (client id, 1m
// request timeout) and returns a channel with its answer. The timeout
// bounds a test that goes wrong, not the steps a test takes while the
// lease waits: on a loaded machine (a PostgreSQL subtest under -parallel
// 8) those steps took over 10 s, and a paused queue's waiting lease was
// answered 454 before the test looked.
func leaseAsync(s *servertest.Server, queue, client string) <-chan leaseAnswer {
	return sendLease(s, &pb.QueueLeaseRequest{QueueName: queue, BatchSize: 1, ClientId: client, RequestTimeout: "1m"})
}

// sendLease sends req to s on a goroutine of its own and returns a channel
// with its answer.
func sendLease(s *servertest.Server, req *pb.QueueLeaseRequest) <-chan leaseAnswer {
	out := make(chan leaseAnswer, 1)
	go func() {
		res, err := s.C.QueueLease(ctx, req)
		out <- leaseAnswer{res, err}
	}()
	return out
}

type leaseAnswer struct {
	res *pb.QueueLeaseResponse
	err error
}

// TestPauseHoldsLeasesUntilResume: a paused queue's leases get nothing
// while its produces, and the completes and renewals of leases held, go
// on; a lease waiting when it resumes gets the item. queues.info and
// queues.list show the pause; queues.update cannot set it.
func TestPauseHoldsLeasesUntilResume(t *testing.T) {
	t.Parallel()
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.Start(t, b)
		s.CreateQueue(&pb.QueueInfo{QueueName: "live"})
		s.Produce("live", "held")
		held := s.Lease("live", 1)

		before := time.Now()
		info, err := s.C.QueuesPause(ctx, &pb.QueuesPauseRequest{QueueName: "live"})
		require.NoError(t, err)
		require.True(t, info.Paused)
		require.NotNil(t, info.PausedAt)
		at := info.PausedAt.AsTime()
		require.False(t, at.Before(before.Truncate(time.Second)) || at.After(time.Now()), "paused_at %s is when the call was made", at)
		again, err := s.C.QueuesPause(ctx, &pb.QueuesPauseRequest{QueueName: "live"})
		require.NoError(t, err)
		require.True(t, again.PausedAt.AsTime().Equal(info.PausedAt.AsTime()), "pausing twice keeps paused_at")
		got, err := s.C.QueuesInfo(ctx, &pb.QueuesInfoRequest{QueueName: "live"})
		require.NoError(t, err)
		require.True(t, got.Paused)
		list, err := s.C.QueuesList(ctx, &pb.QueuesListRequest{})
		require.NoError(t, err)
		require.Len(t, list.Items, 1)
		require.True(t, list.Items[0].Paused)

		// Produces go on; a lease gets nothing (454 at its request timeout).
		s.Produce("live", "a")
		s.LeaseNone("live")
		waiting := leaseAsync(s, "live", "waiter")
		servertest.WaitStat(t, s, "live", func(st *pb.QueueLogicalStats) bool { return st.LeaseWaiting == 1 })
		// The lease already held goes on.
		_, err = s.C.QueueRenew(ctx, &pb.QueueRenewRequest{QueueName: "live", Partition: held.Partition, Ids: []string{held.Items[0].Id}})
		require.NoError(t, err)
		s.Complete("live", held.Partition, held.Items[0].Id)
		// queues.update does not pause.
		err = s.C.QueuesUpdate(ctx, &pb.QueueInfo{QueueName: "other", Paused: true})
		servertest.RequireCode(t, err, styx.CodeBadRequest)
		s.CreateQueue(&pb.QueueInfo{QueueName: "other"})
		err = s.C.QueuesUpdate(ctx, &pb.QueueInfo{QueueName: "other", Paused: true})
		servertest.RequireCode(t, err, styx.CodeBadRequest, "invalid paused; queue 'other' is not paused")
		err = s.C.QueuesCreate(ctx, &pb.QueueInfo{QueueName: "third", Paused: true})
		servertest.RequireCode(t, err, styx.CodeBadRequest, "invalid paused")
		select {
		case a := <-waiting:
			t.Fatalf("a paused queue answered a waiting lease: %v, %v", a.res, a.err)
		default:
		}

		resumed, err := s.C.QueuesResume(ctx, &pb.QueuesPauseRequest{QueueName: "live"})
		require.NoError(t, err)
		require.False(t, resumed.Paused)
		require.Nil(t, resumed.PausedAt)
		a := <-waiting
		require.NoError(t, a.err)
		require.Len(t, a.res.Items, 1)
		require.Equal(t, "a", string(a.res.Items[0].Bytes))

		_, err = s.C.QueuesPause(ctx, &pb.QueuesPauseRequest{QueueName: "missing"})
		servertest.RequireCode(t, err, styx.CodeBadRequest, "queue does not exist")
	})
}

// TestPauseSurvivesRestart: the pause is stored with the queue.
func TestPauseSurvivesRestart(t *testing.T) {
	t.Parallel()
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.Start(t, b)
		s.CreateQueue(&pb.QueueInfo{QueueName: "kept", LeaseTimeout: "2m"})
		info, err := s.C.QueuesPause(ctx, &pb.QueuesPauseRequest{QueueName: "kept"})
		require.NoError(t, err)
		s.Produce("kept", "a")
		s.Restart()
		got, err := s.C.QueuesInfo(ctx, &pb.QueuesInfoRequest{QueueName: "kept"})
		require.NoError(t, err)
		require.True(t, got.Paused)
		require.True(t, got.PausedAt.AsTime().Equal(info.PausedAt.AsTime()))
		require.Equal(t, "2m0s", got.LeaseTimeout)
		s.LeaseNone("kept")
		_, err = s.C.QueuesResume(ctx, &pb.QueuesPauseRequest{QueueName: "kept"})
		require.NoError(t, err)
		require.Equal(t, "a", string(s.Lease("kept", 1).Items[0].Bytes))
	})
}

// TestPauseAudited: queues.pause and queues.resume are audited with the
// key, and need the admin scope (a consume key is refused).
func TestPauseAudited(t *testing.T) {
	s, _ := servertest.StartAuth(t, servertest.Backends(t)[0])
	s.CreateQueue(&pb.QueueInfo{QueueName: "audited"})
	_, err := s.C.QueuesPause(ctx, &pb.QueuesPauseRequest{QueueName: "audited"})
	require.NoError(t, err)
	_, err = s.C.QueuesResume(ctx, &pb.QueuesPauseRequest{QueueName: "audited"})
	require.NoError(t, err)
	logs := s.Logs.String()
	assert.Contains(t, logs, `msg="audit: queues.pause" path=/v1/queues.pause key=bootstrap-admin queue=audited`)
	assert.Contains(t, logs, `msg="audit: queues.resume" path=/v1/queues.resume key=bootstrap-admin queue=audited`)
	worker := s.Client(s.NewKey("worker", []string{"consume", "read"}))
	_, err = worker.QueuesPause(ctx, &pb.QueuesPauseRequest{QueueName: "audited"})
	servertest.RequireCode(t, err, styx.CodeForbidden)
	// The dry run of a clear counts, as queue.stats: the read scope.
	_, err = worker.QueueClearDryRun(ctx, &pb.QueueClearRequest{QueueName: "audited", Queue: true})
	require.NoError(t, err)
	err = worker.QueueClear(ctx, &pb.QueueClearRequest{QueueName: "audited", Queue: true})
	servertest.RequireCode(t, err, styx.CodeForbidden)
}

// TestClearDryRun: queue.clear_dry_run says what queue.clear would remove,
// by state, and removes nothing.
func TestClearDryRun(t *testing.T) {
	t.Parallel()
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.Start(t, b)
		s.CreateQueue(&pb.QueueInfo{QueueName: "purge"})
		s.Produce("purge", "leased", "r1", "r2")
		require.NoError(t, s.C.QueueProduce(ctx, &pb.QueueProduceRequest{QueueName: "purge", RequestTimeout: "1m",
			Items: []*pb.QueueProduceItem{{Bytes: []byte("s"), EnqueueAt: servertest.At(time.Now().Add(time.Hour))}}}))
		s.Lease("purge", 1)
		dry := func(req *pb.QueueClearRequest) *pb.QueueClearDryRunResponse {
			t.Helper()
			req.QueueName = "purge"
			n, err := s.C.QueueClearDryRun(ctx, req)
			require.NoError(t, err)
			return n
		}
		n := dry(&pb.QueueClearRequest{Queue: true})
		require.Equal(t, [4]int64{2, 0, 0, 2}, [4]int64{n.Ready, n.Scheduled, n.Leased, n.Total})
		require.Equal(t, "purge", n.QueueName)
		n = dry(&pb.QueueClearRequest{Scheduled: true})
		require.Equal(t, [4]int64{0, 1, 0, 1}, [4]int64{n.Ready, n.Scheduled, n.Leased, n.Total})
		n = dry(&pb.QueueClearRequest{Queue: true, Scheduled: true, Destructive: true})
		require.Equal(t, [4]int64{2, 1, 1, 4}, [4]int64{n.Ready, n.Scheduled, n.Leased, n.Total})
		require.Len(t, s.AllItems("purge"), 4, "the dry run removed nothing")

		require.NoError(t, s.C.QueueClear(ctx, &pb.QueueClearRequest{QueueName: "purge", Queue: true}))
		n = dry(&pb.QueueClearRequest{Destructive: true})
		require.Equal(t, [4]int64{0, 1, 1, 2}, [4]int64{n.Ready, n.Scheduled, n.Leased, n.Total}, "the clear removed what its dry run said")

		_, err := s.C.QueueClearDryRun(ctx, &pb.QueueClearRequest{QueueName: "purge"})
		servertest.RequireCode(t, err, styx.CodeBadRequest, "set at least one of queue, scheduled or destructive")
		_, err = s.C.QueueClearDryRun(ctx, &pb.QueueClearRequest{QueueName: "missing", Queue: true})
		servertest.RequireCode(t, err, styx.CodeBadRequest, "queue does not exist")
	})
}

// TestClusterPause: a queue paused on one PostgreSQL node is honoured by
// the other (within its refresh, which styx_queue_paused shows), and a
// lease waiting there gets the item when it resumes.
func TestClusterPause(t *testing.T) {
	t.Parallel()
	nodes := cluster(t, 2)
	a, b := nodes[0], nodes[1]
	a.CreateQueue(&pb.QueueInfo{QueueName: "shared"})
	b.Produce("shared", "first") // node b serves the queue
	b.Complete("shared", 0, b.Lease("shared", 1).Items[0].Id)

	_, err := a.C.QueuesPause(ctx, &pb.QueuesPauseRequest{QueueName: "shared"})
	require.NoError(t, err)
	paused := time.Now()
	servertest.Eventually(t, func() bool {
		return metricValue(t, scrape(b), `styx_queue_paused{queue="shared"}`) == 1
	}, "node b applies the pause")
	t.Logf("node b applied the pause %s after node a's answer (its refresh is 1s, the notification at once)", time.Since(paused))
	b.Produce("shared", "x")
	b.LeaseNone("shared")
	waiting := leaseAsync(b, "shared", "b-waiter")
	servertest.WaitStat(t, b, "shared", func(st *pb.QueueLogicalStats) bool { return st.LeaseWaiting == 1 })
	lctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	_, err = a.C.QueueLease(lctx, &pb.QueueLeaseRequest{QueueName: "shared", BatchSize: 1, ClientId: "a", RequestTimeout: "10s"})
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded, "node a leases nothing either")

	_, err = a.C.QueuesResume(ctx, &pb.QueuesPauseRequest{QueueName: "shared"})
	require.NoError(t, err)
	got := <-waiting
	require.NoError(t, got.err)
	require.Len(t, got.res.Items, 1)
	require.Equal(t, "x", string(got.res.Items[0].Bytes))
}

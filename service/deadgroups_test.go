package service_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	styx "github.com/styxq/styx"
	"github.com/styxq/styx/internal/servertest"
	"github.com/styxq/styx/internal/store"
	pb "github.com/styxq/styx/styxpb"
)

// killWith produces one item per error text into q, leases them all and
// dead-letters each with its error (retry dead: true).
func killWith(s *servertest.Server, q string, errs ...string) {
	s.T.Helper()
	payloads := make([]string, len(errs))
	for i := range errs {
		payloads[i] = "p" + errs[i]
	}
	s.Produce(q, payloads...)
	res := s.Lease(q, int32(len(errs)))
	require.Len(s.T, res.Items, len(errs))
	var items []*pb.QueueRetryItem
	for _, it := range res.Items {
		items = append(items, &pb.QueueRetryItem{Id: it.Id, Dead: true, Error: string(it.Bytes[1:])})
	}
	s.Retry(q, res.Partition, items...)
}

func groups(s *servertest.Server, dlq string, f *pb.DeadFilter, limit int32) *pb.DeadGroupsResponse {
	s.T.Helper()
	res, err := s.C.DeadGroups(ctx, &pb.DeadGroupsRequest{QueueName: dlq, Filter: f, Limit: limit})
	require.NoError(s.T, err)
	return res
}

// groupSummary is what a test compares of a group.
type groupSummary struct {
	Count   int64
	Source  string
	Reason  string
	Pattern string
}

func summaries(gs []*pb.DeadGroup) []groupSummary {
	out := make([]groupSummary, len(gs))
	for i, g := range gs {
		out[i] = groupSummary{g.Count, g.SourceQueue, g.Reason, g.Pattern}
	}
	return out
}

func TestDeadGroups(t *testing.T) {
	t.Parallel()
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.Start(t, b)
		dlq := withDLQ(s, "orders", &pb.QueueInfo{RequestedPartitions: 2})
		s.CreateQueue(&pb.QueueInfo{QueueName: "billing", DeadQueue: dlq})
		killWith(s, "orders",
			"order 1001 not found", "order 1002 not found", "order 77 not found",
			"dial tcp 10.0.0.1:5432: connect: connection refused", "dial tcp 10.0.0.2:6432: connect: connection refused")
		killWith(s, "billing", "order 5 not found")
		servertest.Eventually(t, func() bool { return groups(s, dlq, nil, 0).TotalItems == 6 }, "the DLQ holds 6 grouped items")

		res := groups(s, dlq, nil, 0)
		require.Equal(t, []groupSummary{
			{3, "orders", "explicit", "order <n> not found"},
			{2, "orders", "explicit", "dial tcp <ip>: connect: connection refused"},
			{1, "billing", "explicit", "order <n> not found"},
		}, summaries(res.Groups))
		assert.EqualValues(t, 3, res.TotalGroups)
		assert.EqualValues(t, 6, res.TotalItems)
		orders, refused := res.Groups[0], res.Groups[1]
		assert.Equal(t, orders.Fingerprint, res.Groups[2].Fingerprint, "one shape, two sources: one fingerprint")
		assert.NotEqual(t, orders.Fingerprint, refused.Fingerprint)
		assert.Contains(t, []string{"order 1001 not found", "order 1002 not found", "order 77 not found"}, orders.SampleError)
		assert.False(t, orders.LastDeadAt.AsTime().Before(orders.FirstDeadAt.AsTime()))

		// The group's items, by fingerprint: each carries it.
		items := deadList(s, dlq, &pb.DeadFilter{Fingerprint: orders.Fingerprint, SourceQueue: "orders"}, 0)
		require.Len(t, items, 3)
		ids := []string{}
		for _, it := range items {
			assert.Equal(t, orders.Fingerprint, it.Fingerprint)
			ids = append(ids, it.Id)
		}
		assert.Contains(t, ids, orders.SampleId)
		assert.Len(t, deadList(s, dlq, &pb.DeadFilter{Fingerprint: orders.Fingerprint}, 0), 4, "both sources")

		t.Run("StatsOldest", func(t *testing.T) {
			st, err := s.C.QueueStats(ctx, &pb.QueueStatsRequest{QueueName: dlq})
			require.NoError(t, err)
			require.NotNil(t, st.OldestCreatedAt)
			oldest := st.OldestCreatedAt.AsTime()
			for _, it := range s.Items(dlq) {
				assert.False(t, it.CreatedAt.AsTime().Before(oldest), "oldest_created_at is the oldest item's created_at")
			}
			st, err = s.C.QueueStats(ctx, &pb.QueueStatsRequest{QueueName: "billing"})
			require.NoError(t, err)
			assert.Nil(t, st.OldestCreatedAt, "an empty queue has no oldest item")
		})

		t.Run("FilterAndLimit", func(t *testing.T) {
			one := groups(s, dlq, nil, 1)
			require.Len(t, one.Groups, 1)
			assert.EqualValues(t, 3, one.TotalGroups)
			assert.EqualValues(t, 6, one.TotalItems)
			bySource := groups(s, dlq, &pb.DeadFilter{SourceQueue: "billing"}, 0)
			assert.Equal(t, []groupSummary{{1, "billing", "explicit", "order <n> not found"}}, summaries(bySource.Groups))
			byFP := groups(s, dlq, &pb.DeadFilter{Fingerprint: orders.Fingerprint}, 0)
			assert.EqualValues(t, 4, byFP.TotalItems)
			assert.Empty(t, groups(s, dlq, &pb.DeadFilter{Reason: "expired"}, 0).Groups)
			_, err := s.C.DeadGroups(ctx, &pb.DeadGroupsRequest{QueueName: "orders"})
			servertest.RequireCode(t, err, styx.CodeBadRequest, "queue_name", "'orders' is not a dead-letter queue")
		})

		t.Run("BadInput", func(t *testing.T) {
			_, err := s.C.DeadGroups(ctx, &pb.DeadGroupsRequest{QueueName: dlq, Filter: &pb.DeadFilter{Kind: "x"}})
			servertest.RequireCode(t, err, styx.CodeBadRequest, "filter.kind", "source_queue, reason and fingerprint")
			_, err = s.C.DeadGroups(ctx, &pb.DeadGroupsRequest{QueueName: dlq, Limit: 1001})
			servertest.RequireCode(t, err, styx.CodeBadRequest, "limit", "0..1000")
			_, err = s.C.DeadGroups(ctx, &pb.DeadGroupsRequest{QueueName: dlq, Filter: &pb.DeadFilter{Fingerprint: "XYZ"}})
			servertest.RequireCode(t, err, styx.CodeBadRequest, "filter.fingerprint", "16 lowercase hex digits")
			_, err = s.C.DeadList(ctx, &pb.DeadListRequest{QueueName: dlq, Filter: &pb.DeadFilter{Fingerprint: "0123"}})
			servertest.RequireCode(t, err, styx.CodeBadRequest, "filter.fingerprint")
			_, err = s.C.DeadGroups(ctx, &pb.DeadGroupsRequest{QueueName: "nope"})
			servertest.RequireCode(t, err, styx.CodeBadRequest, "no such queue")
		})

		// Groups survive a restart: rebuilt from storage.
		s.Restart()
		require.Equal(t, summaries(res.Groups), summaries(groups(s, dlq, nil, 0).Groups))

		t.Run("RedriveAndDeleteAGroup", func(t *testing.T) {
			f := &pb.DeadFilter{Fingerprint: orders.Fingerprint, SourceQueue: "orders", Reason: "explicit"}
			dry, err := s.C.DeadRedrive(ctx, &pb.DeadRedriveRequest{QueueName: dlq, Filter: f, DryRun: true})
			require.NoError(t, err)
			assert.EqualValues(t, 3, dry.Matched, "a dry run counts the group")
			task, err := s.C.DeadRedrive(ctx, &pb.DeadRedriveRequest{QueueName: dlq, Filter: f})
			require.NoError(t, err)
			done := waitTask(s, task.TaskId)
			assert.EqualValues(t, 3, done.Moved)
			assert.Equal(t, orders.Fingerprint, done.Filter.Fingerprint)
			assert.Len(t, s.Items("orders"), 3, "the group is back in its source queue")
			assert.Equal(t, []groupSummary{
				{2, "orders", "explicit", "dial tcp <ip>: connect: connection refused"},
				{1, "billing", "explicit", "order <n> not found"},
			}, summaries(groups(s, dlq, nil, 0).Groups))

			del, err := s.C.DeadDelete(ctx, &pb.DeadDeleteRequest{QueueName: dlq, Filter: &pb.DeadFilter{Fingerprint: refused.Fingerprint}})
			require.NoError(t, err)
			assert.EqualValues(t, 2, del.Deleted)
			assert.Equal(t, []groupSummary{{1, "billing", "explicit", "order <n> not found"}}, summaries(groups(s, dlq, nil, 0).Groups))
			s.Restart()
			assert.Equal(t, []groupSummary{{1, "billing", "explicit", "order <n> not found"}}, summaries(groups(s, dlq, nil, 0).Groups))
		})
	})
}

// Dead items stored before fingerprints existed (no stored fingerprint)
// get one derived from their last error when the server starts.
func TestDeadGroupsOfOldItems(t *testing.T) {
	t.Parallel()
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.Start(t, b)
		dlq := withDLQ(s, "old", &pb.QueueInfo{})
		killWith(s, "old", "order 1 not found", "order 2 not found", "timeout after 5s")
		servertest.Eventually(t, func() bool { return groups(s, dlq, nil, 0).TotalItems == 3 }, "the DLQ holds 3 grouped items")
		want := summaries(groups(s, dlq, nil, 0).Groups)

		s.Stop()
		forgetFingerprints(t, b, dlq)
		s.Boot()
		// On postgres the update that forgot them took them out of the
		// counts, as before migration 5; the start-up backfill puts them
		// back.
		assert.Equal(t, want, summaries(groups(s, dlq, nil, 0).Groups))
		s.Restart()
		assert.Equal(t, want, summaries(groups(s, dlq, nil, 0).Groups))
	})
}

// forgetFingerprints rewrites the dead items of queue as an earlier
// version stored them: without a fingerprint (and, on the embedded
// backends, without dead_at in the metadata). The server must be stopped.
func forgetFingerprints(t *testing.T, b servertest.Backend, queue string) {
	t.Helper()
	if b.Postgres() {
		pool, err := pgxpool.New(ctx, b.URL)
		require.NoError(t, err)
		defer pool.Close()
		tag, err := pool.Exec(ctx, `UPDATE styx_items SET fingerprint = '' WHERE dead_reason <> ''`)
		require.NoError(t, err)
		require.EqualValues(t, 3, tag.RowsAffected())
		var n int64
		require.NoError(t, pool.QueryRow(ctx, `SELECT coalesce(sum(count), 0) FROM styx_dead_groups`).Scan(&n))
		require.Zero(t, n, "no item is counted")
		return
	}
	st := b.Open(t)
	defer st.Close()
	info, err := st.GetQueue(ctx, queue)
	require.NoError(t, err)
	items, err := st.ListItems(ctx, info.ID, 0, 0, 100)
	require.NoError(t, err)
	require.Len(t, items, 3)
	batch := &store.Batch{QueueID: info.ID}
	for _, it := range items {
		require.NotEmpty(t, it.Meta.Fingerprint)
		it.Meta.Fingerprint, it.Meta.DeadAt = "", time.Time{}
		batch.Update(0, it.Meta)
	}
	require.NoError(t, st.Write(ctx, batch))
}

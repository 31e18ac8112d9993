package service_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/styxq/styx/internal/servertest"
	pb "github.com/styxq/styx/styxpb"
)

// TestDeadRecordImmutable (issue 39, 1): leasing a dead item in its
// dead-letter queue, letting that lease expire and retrying it there are
// DLQ attempts, recorded apart; why and when the item died, its last
// source error, its attempt history, its fingerprint and its error group
// stay as they were. A redrive carries the source history, not the DLQ
// attempts (ADR 0003, amendment of issue 39).
func TestDeadRecordImmutable(t *testing.T) {
	t.Parallel()
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.StartFake(t, b)
		s.CreateQueue(&pb.QueueInfo{QueueName: "pay-dead", LeaseTimeout: "1m"})
		s.CreateQueue(&pb.QueueInfo{QueueName: "pay", DeadQueue: "pay-dead", MaxAttempts: 2})
		s.Produce("pay", "a")
		for _, msg := range []string{"gateway timeout", "card declined: order 1234"} {
			it := s.Lease("pay", 1).Items[0]
			s.Retry("pay", 0, &pb.QueueRetryItem{Id: it.Id, Error: msg})
		}
		s.WaitItems("pay-dead", 1)
		before := deadList(s, "pay-dead", nil, 10)[0]
		require.Equal(t, "card declined: order 1234", before.LastError)
		require.Zero(t, before.DeadLetterAttempts)
		require.Empty(t, before.DeadLetterErrors)
		groups := func() []*pb.DeadGroup {
			res, err := s.C.DeadGroups(ctx, &pb.DeadGroupsRequest{QueueName: "pay-dead"})
			require.NoError(t, err)
			for _, g := range res.Groups {
				g.SampleId = "" // the item's id changes with every requeue
			}
			return res.Groups
		}
		groupsBefore := groups()
		require.Len(t, groupsBefore, 1)

		// DLQ attempt 1: an operator leases the dead item to look at it,
		// and the lease runs out.
		require.Len(t, s.Lease("pay-dead", 1).Items, 1)
		s.Advance(61*time.Second, "pay-dead")
		servertest.Eventually(t, func() bool { got := s.Items("pay-dead"); return len(got) == 1 && !got[0].IsLeased }, "the DLQ lease expires")
		// DLQ attempt 2: retried with an error; attempt 3: retried without.
		leased := s.Lease("pay-dead", 1).Items[0]
		s.Retry("pay-dead", 0, &pb.QueueRetryItem{Id: leased.Id, Error: "looked at by on-call"})
		leased = s.Lease("pay-dead", 1).Items[0]
		s.Retry("pay-dead", 0, &pb.QueueRetryItem{Id: leased.Id})
		// A released lease is no attempt.
		leased = s.Lease("pay-dead", 1).Items[0]
		s.Retry("pay-dead", 0, &pb.QueueRetryItem{Id: leased.Id, Release: true})

		after := deadList(s, "pay-dead", nil, 10)[0]
		assert.Equal(t, before.LastError, after.LastError, "the last source error")
		assert.Equal(t, before.Fingerprint, after.Fingerprint)
		assert.Equal(t, before.DeadReason, after.DeadReason)
		assert.True(t, before.DeadAt.AsTime().Equal(after.DeadAt.AsTime()), "dead_at %v, then %v", before.DeadAt.AsTime(), after.DeadAt.AsTime())
		assert.Equal(t, before.SourceQueue, after.SourceQueue)
		assert.Equal(t, before.SourceId, after.SourceId)
		assert.True(t, proto.Equal(&pb.StorageItem{Errors: before.Errors}, &pb.StorageItem{Errors: after.Errors}),
			"the source attempt history: %v, then %v", before.Errors, after.Errors)
		gotGroups := groups()
		require.Len(t, gotGroups, 1)
		assert.True(t, proto.Equal(groupsBefore[0], gotGroups[0]), "the error group: %v, then %v", groupsBefore[0], gotGroups[0])
		inGroup := deadList(s, "pay-dead", &pb.DeadFilter{Fingerprint: before.Fingerprint, ErrorContains: "card declined"}, 10)
		assert.Len(t, inGroup, 1, "the item is still found by its group and its error")

		assert.Equal(t, int32(3), after.DeadLetterAttempts)
		var dlq []string
		for _, e := range after.DeadLetterErrors {
			dlq = append(dlq, fmt.Sprintf("%d %s", e.Attempt, e.Error))
			assert.NotNil(t, e.At)
		}
		assert.Equal(t, []string{"1 lease expired after 1m0s", "2 looked at by on-call", "3 "}, dlq)
		assert.True(t, after.DeadLetterErrors[0].At.AsTime().After(before.DeadAt.AsTime()))

		// A redrive sends the source history back, with its own entry,
		// numbered by the attempts the item had when it died; the DLQ
		// attempts stay behind with the dead record.
		task, err := s.C.DeadRedrive(ctx, &pb.DeadRedriveRequest{QueueName: "pay-dead", All: true})
		require.NoError(t, err)
		require.Equal(t, int64(1), waitTask(s, task.TaskId).Moved)
		back := s.WaitItems("pay", 1)[0]
		assert.Equal(t, "card declined: order 1234", back.LastError)
		assert.Zero(t, back.DeadLetterAttempts)
		assert.Empty(t, back.DeadLetterErrors)
		var hist []string
		for _, e := range back.Errors {
			hist = append(hist, fmt.Sprintf("%d %s", e.Attempt, e.Error))
		}
		assert.Equal(t, []string{"1 gateway timeout", "2 card declined: order 1234",
			"2 redriven from dead-letter queue 'pay-dead' by task " + task.TaskId}, hist)
	})
}

package service_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/styxq/styx/internal/servertest"
	pb "github.com/styxq/styx/styxpb"
)

// TestRetryOutcomes checks that queue.retry answers what became of each
// item, in request order, and that the answer is true.
func TestRetryOutcomes(t *testing.T) {
	t.Parallel()
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.Start(t, b)

		t.Run("Requeued", func(t *testing.T) {
			s.CreateQueue(&pb.QueueInfo{QueueName: "o-req"})
			s.Produce("o-req", "a")
			it := s.Lease("o-req", 1).Items[0]
			out := s.Retry("o-req", 0, &pb.QueueRetryItem{Id: it.Id, Error: "boom"})
			require.Len(t, out, 1)
			o := out[0]
			assert.Equal(t, it.Id, o.Id)
			assert.Equal(t, "requeued", o.Outcome)
			assert.Equal(t, int32(1), o.Attempts)
			assert.Empty(t, o.Reason)
			assert.Empty(t, o.DeadQueue)
			assert.Nil(t, o.RetryAt)
			require.NotEmpty(t, o.NewId)
			assert.NotEqual(t, it.Id, o.NewId)
			again := s.Lease("o-req", 1).Items[0]
			assert.Equal(t, o.NewId, again.Id, "the new id is the item's id in the queue")
			assert.Equal(t, int32(2), again.Attempts)
		})

		t.Run("Scheduled", func(t *testing.T) {
			s.CreateQueue(&pb.QueueInfo{QueueName: "o-sched"})
			s.Produce("o-sched", "a")
			it := s.Lease("o-sched", 1).Items[0]
			when := time.Now().Add(time.Hour).Truncate(time.Microsecond)
			o := s.Retry("o-sched", 0, &pb.QueueRetryItem{Id: it.Id, RetryAt: servertest.At(when)})[0]
			assert.Equal(t, "scheduled", o.Outcome)
			require.NotNil(t, o.RetryAt)
			assert.True(t, when.Equal(o.RetryAt.AsTime()), "retry_at %s, want %s", o.RetryAt.AsTime(), when)
			assert.Equal(t, int32(1), o.Attempts)
			res, err := s.C.StorageScheduledList(ctx, &pb.StorageItemsListRequest{QueueName: "o-sched"})
			require.NoError(t, err)
			require.Len(t, res.Items, 1)
			assert.Equal(t, o.NewId, res.Items[0].Id)
			assert.True(t, when.Equal(res.Items[0].EnqueueAt.AsTime()))
		})

		t.Run("Released", func(t *testing.T) {
			s.CreateQueue(&pb.QueueInfo{QueueName: "o-rel", MaxAttempts: 1})
			s.Produce("o-rel", "a")
			it := s.Lease("o-rel", 1).Items[0]
			o := s.Retry("o-rel", 0, &pb.QueueRetryItem{Id: it.Id, Release: true})[0]
			assert.Equal(t, "released", o.Outcome, "max_attempts 1 does not apply to a release")
			assert.Equal(t, int32(0), o.Attempts, "the released attempt is not counted")
			again := s.Lease("o-rel", 1).Items[0]
			assert.Equal(t, o.NewId, again.Id)
			assert.Equal(t, int32(1), again.Attempts)
		})

		t.Run("DeadLetteredExplicit", func(t *testing.T) {
			dlq := withDLQ(s, "o-dead", &pb.QueueInfo{})
			s.Produce("o-dead", "a")
			it := s.Lease("o-dead", 1).Items[0]
			o := s.Retry("o-dead", 0, &pb.QueueRetryItem{Id: it.Id, Dead: true})[0]
			assert.Equal(t, "dead_lettered", o.Outcome)
			assert.Equal(t, "explicit", o.Reason)
			assert.Equal(t, dlq, o.DeadQueue)
			assert.Equal(t, int32(1), o.Attempts)
			assert.Empty(t, o.NewId)
			dead := s.Items(dlq)
			require.Len(t, dead, 1, "the retry returns once the dead-letter queue holds the item")
			assert.Equal(t, it.Id, dead[0].SourceId)
		})

		t.Run("DeadLetteredMaxAttempts", func(t *testing.T) {
			dlq := withDLQ(s, "o-max", &pb.QueueInfo{MaxAttempts: 2})
			s.Produce("o-max", "a")
			it := s.Lease("o-max", 1).Items[0]
			o := s.Retry("o-max", 0, &pb.QueueRetryItem{Id: it.Id})[0]
			require.Equal(t, "requeued", o.Outcome)
			it = s.Lease("o-max", 1).Items[0]
			o = s.Retry("o-max", 0, &pb.QueueRetryItem{Id: it.Id})[0]
			assert.Equal(t, "dead_lettered", o.Outcome)
			assert.Equal(t, "max_attempts", o.Reason)
			assert.Equal(t, dlq, o.DeadQueue)
			assert.Equal(t, int32(2), o.Attempts)
			require.Len(t, s.Items(dlq), 1)
		})

		t.Run("Dropped", func(t *testing.T) {
			s.CreateQueue(&pb.QueueInfo{QueueName: "o-drop", MaxAttempts: 1})
			s.Produce("o-drop", "a", "b")
			items := s.Lease("o-drop", 2).Items
			out := s.Retry("o-drop", 0, &pb.QueueRetryItem{Id: items[0].Id, Dead: true}, &pb.QueueRetryItem{Id: items[1].Id})
			require.Len(t, out, 2)
			for i, want := range []string{"explicit", "max_attempts"} {
				assert.Equal(t, items[i].Id, out[i].Id)
				assert.Equal(t, "dropped", out[i].Outcome)
				assert.Equal(t, want, out[i].Reason)
				assert.Empty(t, out[i].DeadQueue)
				assert.Empty(t, out[i].NewId)
			}
			assert.Empty(t, s.Items("o-drop"), "a dropped item is gone")
		})

		t.Run("MixedInRequestOrder", func(t *testing.T) {
			dlq := withDLQ(s, "o-mix", &pb.QueueInfo{})
			s.Produce("o-mix", "a", "b", "c", "d")
			items := s.Lease("o-mix", 4).Items
			require.Len(t, items, 4)
			out := s.Retry("o-mix", 0,
				&pb.QueueRetryItem{Id: items[0].Id, Release: true},
				&pb.QueueRetryItem{Id: items[1].Id, Dead: true},
				&pb.QueueRetryItem{Id: items[2].Id, RetryAt: servertest.At(time.Now().Add(time.Hour))},
				&pb.QueueRetryItem{Id: items[3].Id})
			require.Len(t, out, 4)
			for i, want := range []string{"released", "dead_lettered", "scheduled", "requeued"} {
				assert.Equal(t, items[i].Id, out[i].Id)
				assert.Equal(t, want, out[i].Outcome, "item %d", i)
			}
			assert.Equal(t, dlq, out[1].DeadQueue)
			require.Len(t, s.Items(dlq), 1)
		})
	})
}

// renew renews ids of partition 0 with leaseTimeout ("" for the queue's).
func renew(s *servertest.Server, queue, leaseTimeout string, ids ...string) (*pb.QueueRenewResponse, error) {
	return s.C.QueueRenew(ctx, &pb.QueueRenewRequest{QueueName: queue, Ids: ids, LeaseTimeout: leaseTimeout})
}

// TestRenew checks queue.renew: it moves the lease deadline that the
// lifecycle acts on, durably, and refuses anything but live leases. The
// server runs on a fake clock: deadlines pass by s.advance, not by sleeps.
func TestRenew(t *testing.T) {
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.StartFake(t, b)

		t.Run("ExtendsLease", func(t *testing.T) {
			s.CreateQueue(&pb.QueueInfo{QueueName: "r-ext", LeaseTimeout: "1s"})
			s.Produce("r-ext", "a")
			it := s.Lease("r-ext", 1).Items[0]
			before := s.Now()
			res, err := renew(s, "r-ext", "1m", it.Id)
			require.NoError(t, err)
			require.Len(t, res.Items, 1)
			assert.Equal(t, it.Id, res.Items[0].Id)
			got := res.Items[0].LeaseDeadline.AsTime()
			assert.WithinDuration(t, before.Add(time.Minute), got, time.Millisecond)
			stored := s.Items("r-ext")[0]
			assert.True(t, stored.IsLeased)
			assert.True(t, got.Equal(stored.LeaseDeadline.AsTime()), "the new deadline is stored")
			// Past the original deadline the item is not handed out again.
			s.Advance(2*time.Second, "r-ext")
			require.True(t, s.Now().After(it.LeaseDeadline.AsTime()))
			s.LeaseNone("r-ext")
			s.Complete("r-ext", 0, it.Id)
			assert.Empty(t, s.Items("r-ext"))
		})

		t.Run("DefaultIsQueueLeaseTimeout", func(t *testing.T) {
			s.CreateQueue(&pb.QueueInfo{QueueName: "r-def", LeaseTimeout: "10m"})
			s.Produce("r-def", "a", "b")
			items := s.Lease("r-def", 2).Items
			before := s.Now()
			res, err := renew(s, "r-def", "", items[1].Id, items[0].Id)
			require.NoError(t, err)
			require.Len(t, res.Items, 2)
			assert.Equal(t, items[1].Id, res.Items[0].Id, "in request order")
			assert.Equal(t, items[0].Id, res.Items[1].Id)
			assert.WithinDuration(t, before.Add(10*time.Minute), res.Items[0].LeaseDeadline.AsTime(), time.Millisecond)
		})

		t.Run("ShortensLease", func(t *testing.T) {
			// The lifecycle acts on the renewed deadline, earlier here.
			s.CreateQueue(&pb.QueueInfo{QueueName: "r-short", LeaseTimeout: "1h"})
			s.Produce("r-short", "a")
			it := s.Lease("r-short", 1).Items[0]
			_, err := renew(s, "r-short", "1s", it.Id)
			require.NoError(t, err)
			s.Advance(999*time.Millisecond, "r-short")
			s.LeaseNone("r-short")
			s.Advance(2*time.Millisecond, "r-short")
			again := s.Lease("r-short", 1).Items[0]
			assert.Equal(t, int32(2), again.Attempts, "the renewed lease expired after 1s")
		})

		t.Run("SurvivesRestart", func(t *testing.T) {
			s.CreateQueue(&pb.QueueInfo{QueueName: "r-restart", LeaseTimeout: "1s"})
			s.Produce("r-restart", "a")
			it := s.Lease("r-restart", 1).Items[0]
			res, err := renew(s, "r-restart", "1h", it.Id)
			require.NoError(t, err)
			s.Restart()
			s.Advance(2*time.Second, "r-restart") // past the lease's first deadline
			stored := s.Items("r-restart")[0]
			assert.True(t, stored.IsLeased)
			assert.True(t, res.Items[0].LeaseDeadline.AsTime().Equal(stored.LeaseDeadline.AsTime()))
			s.Complete("r-restart", 0, it.Id)
		})

		t.Run("RefusesWhatIsNotLeased", func(t *testing.T) {
			s.CreateQueue(&pb.QueueInfo{QueueName: "r-bad", LeaseTimeout: "1s"})
			s.Produce("r-bad", "leased", "done", "expired")
			items := s.Lease("r-bad", 3).Items
			require.Len(t, items, 3)
			keep, done, expired := items[0], items[1], items[2]
			s.Produce("r-bad", "ready")
			s.Complete("r-bad", 0, done.Id)
			// Renew keep (and nothing else), then let expired's lease end:
			// the lifecycle puts it back under a new id.
			_, err := renew(s, "r-bad", "1m", keep.Id)
			require.NoError(t, err)
			s.Advance(2*time.Second, "r-bad")
			var ready string
			for _, x := range s.Items("r-bad") {
				require.NotEqual(t, expired.Id, x.Id, "the lease of %s has expired", expired.Id)
				if string(x.Payload) == "ready" {
					ready = x.Id
				}
			}
			require.NotEmpty(t, ready)
			unknown := "vvvvvvvvvvvvu" // the largest id
			before := s.Items("r-bad")

			_, err = renew(s, "r-bad", "1m", keep.Id, ready, done.Id, expired.Id, unknown)
			servertest.RequireCode(t, err, 400, "invalid ids", "'"+ready+"'", "'"+done.Id+"'", "'"+expired.Id+"'", "'"+unknown+"'",
				"are not leased in partition 0 of queue 'r-bad'")
			assert.NotContains(t, err.Error(), keep.Id, "only the bad ids are named")

			_, err = renew(s, "r-bad", "1m", done.Id)
			servertest.RequireCode(t, err, 400, "'"+done.Id+"' is not leased in partition 0")
			_, err = s.C.QueueRenew(ctx, &pb.QueueRenewRequest{QueueName: "r-bad", Partition: 0, Ids: []string{keep.Id, keep.Id}})
			servertest.RequireCode(t, err, 400, keep.Id, "more than once")
			_, err = s.C.QueueRenew(ctx, &pb.QueueRenewRequest{QueueName: "r-bad", Partition: 3, Ids: []string{keep.Id}})
			servertest.RequireCode(t, err, 400, "partition", "3")
			for _, lt := range []string{"0s", "-1s", "8761h", "soon"} {
				_, err = renew(s, "r-bad", lt, keep.Id)
				servertest.RequireCode(t, err, 400, "lease_timeout", lt)
			}
			after := s.Items("r-bad")
			require.Len(t, after, len(before))
			for i := range before {
				assert.True(t, proto.Equal(before[i], after[i]), "item %d changed:\n%v\n%v", i, before[i], after[i])
			}
		})
	})
}

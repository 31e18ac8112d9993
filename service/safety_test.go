package service_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	styx "github.com/styxq/styx"
	"github.com/styxq/styx/internal/servertest"
	pb "github.com/styxq/styx/styxpb"
)

// Safety rails (issue 14): dead.* calls touch only the dead items of a
// dead-letter queue, an empty filter must be confirmed, updates can clear
// fields and never answer success for nothing, and the attempt history
// explains every attempt.

// deadItemsIn makes n dead items in src's dead-letter queue (retry with
// dead) and returns the dead-letter queue's items.
func deadItemsIn(s *servertest.Server, src, dlq string, n int) []*pb.StorageItem {
	s.T.Helper()
	for i := range n {
		s.Produce(src, fmt.Sprint("dead-", i))
		it := s.Lease(src, 1).Items[0]
		s.Retry(src, 0, &pb.QueueRetryItem{Id: it.Id, Dead: true, Error: "bad input"})
	}
	return s.WaitItems(dlq, n)
}

func TestDeadCallsOnlyOnDeadLetterQueues(t *testing.T) {
	t.Parallel()
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.Start(t, b)

		t.Run("OrdinaryQueueRefused", func(t *testing.T) {
			// A work queue that is no queue's dead_queue, with a leased
			// item a consumer is working on and a ready one.
			s.CreateQueue(&pb.QueueInfo{QueueName: "work"})
			s.Produce("work", "busy", "idle")
			leased := s.Lease("work", 1).Items[0]
			for _, c := range []struct {
				name string
				call func() error
			}{
				{"DeadList", func() error {
					_, err := s.C.DeadList(ctx, &pb.DeadListRequest{QueueName: "work"})
					return err
				}},
				{"DeadDelete", func() error {
					_, err := s.C.DeadDelete(ctx, &pb.DeadDeleteRequest{QueueName: "work", All: true})
					return err
				}},
				{"DeadDeleteFiltered", func() error {
					_, err := s.C.DeadDelete(ctx, &pb.DeadDeleteRequest{QueueName: "work", Filter: &pb.DeadFilter{Kind: "test"}})
					return err
				}},
				{"DeadRedrive", func() error {
					_, err := s.C.DeadRedrive(ctx, &pb.DeadRedriveRequest{QueueName: "work", All: true, Destination: "work-other"})
					return err
				}},
			} {
				t.Run(c.name, func(t *testing.T) {
					servertest.RequireCode(t, c.call(), styx.CodeBadRequest, "queue_name", "'work' is not a dead-letter queue")
				})
			}
			assert.Len(t, s.Items("work"), 2, "nothing deleted")
			s.Complete("work", 0, leased.Id) // the consumer's lease is intact
		})

		t.Run("EmptyFilterNeedsAll", func(t *testing.T) {
			dlq := withDLQ(s, "ef", &pb.QueueInfo{})
			deadItemsIn(s, "ef", dlq, 2)
			_, err := s.C.DeadDelete(ctx, &pb.DeadDeleteRequest{QueueName: dlq})
			servertest.RequireCode(t, err, styx.CodeBadRequest, "invalid all", "empty filter")
			_, err = s.C.DeadDelete(ctx, &pb.DeadDeleteRequest{QueueName: dlq, Filter: &pb.DeadFilter{}})
			servertest.RequireCode(t, err, styx.CodeBadRequest, "invalid all")
			_, err = s.C.DeadDelete(ctx, &pb.DeadDeleteRequest{QueueName: dlq, All: true, Filter: &pb.DeadFilter{Reason: "explicit"}})
			servertest.RequireCode(t, err, styx.CodeBadRequest, "invalid all", "cannot be combined")
			_, err = s.C.DeadRedrive(ctx, &pb.DeadRedriveRequest{QueueName: dlq})
			servertest.RequireCode(t, err, styx.CodeBadRequest, "invalid all")
			_, err = s.C.DeadRedrive(ctx, &pb.DeadRedriveRequest{QueueName: dlq, All: true, Filter: &pb.DeadFilter{Kind: "test"}})
			servertest.RequireCode(t, err, styx.CodeBadRequest, "invalid all", "cannot be combined")
			require.Len(t, s.Items(dlq), 2, "refused calls delete nothing")

			dry, err := s.C.DeadRedrive(ctx, &pb.DeadRedriveRequest{QueueName: dlq, DryRun: true})
			require.NoError(t, err, "a dry run changes nothing and needs no confirmation")
			assert.Equal(t, int64(2), dry.Matched)
			res, err := s.C.DeadDelete(ctx, &pb.DeadDeleteRequest{QueueName: dlq, All: true})
			require.NoError(t, err)
			assert.Equal(t, int64(2), res.Deleted)
			assert.Empty(t, s.Items(dlq))
		})

		t.Run("LeasedDeadItemsUntouched", func(t *testing.T) {
			dlq := withDLQ(s, "lt", &pb.QueueInfo{})
			deadItemsIn(s, "lt", dlq, 3)
			// A consumer of the dead-letter queue leases one dead item.
			held := s.Lease(dlq, 1).Items[0]

			res, err := s.C.DeadDelete(ctx, &pb.DeadDeleteRequest{QueueName: dlq, All: true})
			require.NoError(t, err)
			assert.Equal(t, int64(2), res.Deleted, "the leased item is not deleted")
			left := s.Items(dlq)
			require.Len(t, left, 1)
			assert.Equal(t, held.Id, left[0].Id)
			assert.True(t, left[0].IsLeased)

			res, err = s.C.DeadDelete(ctx, &pb.DeadDeleteRequest{QueueName: dlq, Filter: &pb.DeadFilter{Ids: []string{held.Id}}})
			require.NoError(t, err)
			assert.Equal(t, int64(0), res.Deleted, "not even by id")

			task, err := s.C.DeadRedrive(ctx, &pb.DeadRedriveRequest{QueueName: dlq, All: true})
			require.NoError(t, err)
			task = waitTask(s, task.TaskId)
			assert.Equal(t, "completed", task.Status)
			assert.Equal(t, int64(0), task.Moved)
			assert.Equal(t, int64(1), task.Skipped, "a redrive skips the leased item")
			assert.Empty(t, s.Items("lt"), "nothing redriven")
			s.Complete(dlq, 0, held.Id) // the consumer's lease is intact
			assert.Empty(t, s.Items(dlq))
		})
	})
}

func TestQueuesUpdateMask(t *testing.T) {
	t.Parallel()
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.Start(t, b)
		info := func(name string) *pb.QueueInfo {
			t.Helper()
			i, err := s.C.QueuesInfo(ctx, &pb.QueuesInfoRequest{QueueName: name})
			require.NoError(t, err)
			return i
		}

		t.Run("ClearDeadQueueAndMaxAttempts", func(t *testing.T) {
			dlq := withDLQ(s, "um", &pb.QueueInfo{MaxAttempts: 3, Reference: "billing"})
			require.NoError(t, s.C.QueuesUpdate(ctx, &pb.QueueInfo{QueueName: "um", UpdateMask: []string{"dead_queue", "max_attempts"}}))
			got := info("um")
			assert.Empty(t, got.DeadQueue, "dead_queue removed")
			assert.Equal(t, int32(0), got.MaxAttempts, "max_attempts back to unlimited")
			assert.Equal(t, "billing", got.Reference, "fields not in the mask are kept")
			assert.Equal(t, "1m0s", got.LeaseTimeout)

			// The dead-letter queue is no longer referenced: it can go.
			require.NoError(t, s.C.QueuesDelete(ctx, &pb.QueuesDeleteRequest{QueueName: dlq}))
			// An item that dies now is dropped, and the retry says so.
			s.Produce("um", "x")
			it := s.Lease("um", 1).Items[0]
			o := s.Retry("um", 0, &pb.QueueRetryItem{Id: it.Id, Dead: true})[0]
			assert.Equal(t, "dropped", o.Outcome)
			assert.Equal(t, "explicit", o.Reason)
			assert.Empty(t, o.DeadQueue)
			assert.Empty(t, s.Items("um"))

			// Proto field names work too; reference clears.
			require.NoError(t, s.C.QueuesUpdate(ctx, &pb.QueueInfo{QueueName: "um", UpdateMask: []string{"reference", "maxAttempts"}, MaxAttempts: 5}))
			got = info("um")
			assert.Empty(t, got.Reference)
			assert.Equal(t, int32(5), got.MaxAttempts)
		})

		t.Run("WithoutMaskKeepsQueratorBehaviour", func(t *testing.T) {
			withDLQ(s, "nm", &pb.QueueInfo{MaxAttempts: 3})
			// Zero values mean "not set" without a mask.
			require.NoError(t, s.C.QueuesUpdate(ctx, &pb.QueueInfo{QueueName: "nm", LeaseTimeout: "30s"}))
			got := info("nm")
			assert.Equal(t, "nm-dlq", got.DeadQueue)
			assert.Equal(t, int32(3), got.MaxAttempts)
			assert.Equal(t, "30s", got.LeaseTimeout)
		})

		t.Run("Refused", func(t *testing.T) {
			withDLQ(s, "ur", &pb.QueueInfo{MaxAttempts: 3})
			before := info("ur")
			for _, c := range []struct {
				name  string
				req   *pb.QueueInfo
				parts []string
			}{
				{"NothingToUpdate", &pb.QueueInfo{QueueName: "ur"}, []string{"invalid update_mask", "nothing to update"}},
				{"NothingButNamespace", &pb.QueueInfo{QueueName: "ur", Namespace: "_system"}, []string{"invalid update_mask", "nothing to update"}},
				{"UnknownField", &pb.QueueInfo{QueueName: "ur", UpdateMask: []string{"max_attempts", "colour"}}, []string{"update_mask[1]", "'colour'"}},
				{"Namespace", &pb.QueueInfo{QueueName: "ur", UpdateMask: []string{"namespace"}}, []string{"update_mask[0]", "'namespace'"}},
				{"SetButNotListed", &pb.QueueInfo{QueueName: "ur", UpdateMask: []string{"dead_queue"}, MaxAttempts: 4}, []string{"invalid update_mask", "max_attempts is set but not listed"}},
				{"ZeroPartitions", &pb.QueueInfo{QueueName: "ur", UpdateMask: []string{"requested_partitions"}}, []string{"invalid requested_partitions", "0 is out of range 1..256"}},
				{"EmptyLeaseTimeout", &pb.QueueInfo{QueueName: "ur", UpdateMask: []string{"lease_timeout"}}, []string{"invalid lease_timeout"}},
			} {
				t.Run(c.name, func(t *testing.T) {
					servertest.RequireCode(t, s.C.QueuesUpdate(ctx, c.req), styx.CodeBadRequest, c.parts...)
				})
			}
			after := info("ur")
			assert.Equal(t, before.DeadQueue, after.DeadQueue)
			assert.Equal(t, before.MaxAttempts, after.MaxAttempts)
			assert.Equal(t, before.UpdatedAt.AsTime(), after.UpdatedAt.AsTime(), "a refused update changes nothing")
		})
	})
}

func TestAttemptHistory(t *testing.T) {
	t.Parallel()
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.Start(t, b)

		t.Run("LeaseExpiryRecorded", func(t *testing.T) {
			dlq := withDLQ(s, "hx", &pb.QueueInfo{MaxAttempts: 3, LeaseTimeout: "200ms"})
			s.Produce("hx", "a")
			it := s.Lease("hx", 1).Items[0]
			s.Retry("hx", 0, &pb.QueueRetryItem{Id: it.Id, Error: "gateway timeout"})
			// Attempt 2: the consumer crashes; the lease runs out.
			require.Equal(t, int32(2), s.Lease("hx", 1).Items[0].Attempts)
			var back []*pb.StorageItem
			servertest.Eventually(t, func() bool {
				back = s.Items("hx")
				return len(back) == 1 && !back[0].IsLeased
			}, "the expired lease ends")
			assert.Equal(t, "lease expired after 200ms", back[0].LastError)
			require.Len(t, back[0].Errors, 2)
			assert.Equal(t, int32(2), back[0].Errors[1].Attempt)
			assert.Equal(t, "lease expired after 200ms", back[0].Errors[1].Error)
			// Attempt 3 expires too: the item dies of max_attempts, and its
			// last error says why, not the older gateway timeout.
			require.Equal(t, int32(3), s.Lease("hx", 1).Items[0].Attempts)
			dead := s.WaitItems(dlq, 1)[0]
			assert.Equal(t, "max_attempts", dead.DeadReason)
			assert.Equal(t, "lease expired after 200ms", dead.LastError)
			var got []string
			for _, e := range dead.Errors {
				got = append(got, fmt.Sprintf("%d %s", e.Attempt, e.Error))
				assert.NotNil(t, e.At)
			}
			assert.Equal(t, []string{"1 gateway timeout", "2 lease expired after 200ms", "3 lease expired after 200ms"}, got)
		})

		t.Run("RedriveKeepsHistory", func(t *testing.T) {
			dlq := withDLQ(s, "hr", &pb.QueueInfo{MaxAttempts: 2})
			s.Produce("hr", "a")
			for _, msg := range []string{"first", "second"} {
				it := s.Lease("hr", 1).Items[0]
				s.Retry("hr", 0, &pb.QueueRetryItem{Id: it.Id, Error: msg})
			}
			require.Len(t, s.Items(dlq), 1)
			task, err := s.C.DeadRedrive(ctx, &pb.DeadRedriveRequest{QueueName: dlq, All: true})
			require.NoError(t, err)
			task = waitTask(s, task.TaskId)
			require.Equal(t, int64(1), task.Moved)
			back := s.Items("hr")
			require.Len(t, back, 1)
			it := back[0]
			assert.Equal(t, int32(0), it.Attempts, "fresh work")
			assert.Equal(t, int32(1), it.RedriveCount)
			assert.Equal(t, "second", it.LastError, "the last attempt's error is kept")
			require.Len(t, it.Errors, 3)
			assert.Equal(t, "first", it.Errors[0].Error)
			assert.Equal(t, "second", it.Errors[1].Error)
			redriven := it.Errors[2]
			assert.Equal(t, fmt.Sprintf("redriven from dead-letter queue '%s' by task %s", dlq, task.TaskId), redriven.Error)
			assert.Equal(t, int32(2), redriven.Attempt, "the attempts the item had when it died")
			require.NotNil(t, redriven.At)
			assert.False(t, redriven.At.AsTime().Before(task.StartedAt.AsTime()), "when it was redriven")

			// It fails again: the history tells the whole story.
			l := s.Lease("hr", 1).Items[0]
			s.Retry("hr", 0, &pb.QueueRetryItem{Id: l.Id, Error: "third", Dead: true})
			dead := s.WaitItems(dlq, 1)[0]
			var got []string
			for _, e := range dead.Errors {
				got = append(got, e.Error)
			}
			assert.Equal(t, []string{"first", "second", redriven.Error, "third"}, got)
		})

		t.Run("RedriveRespectsTheCap", func(t *testing.T) {
			s.CreateQueue(&pb.QueueInfo{QueueName: "hc-dlq"})
			s.CreateQueue(&pb.QueueInfo{QueueName: "hc", DeadQueue: "hc-dlq"})
			full := &pb.StorageItem{Payload: []byte("x"), SourceQueue: "hc", DeadReason: "max_attempts", Attempts: 10, LastError: "e10"}
			for i := 1; i <= 10; i++ {
				full.Errors = append(full.Errors, &pb.AttemptError{Attempt: int32(i), Error: fmt.Sprint("e", i), At: full.DeadAt})
			}
			_, err := s.C.StorageItemsImport(ctx, &pb.StorageItemsImportRequest{QueueName: "hc-dlq", Items: []*pb.StorageItem{full}})
			require.NoError(t, err)
			task := waitTask(s, must(s.C.DeadRedrive(ctx, &pb.DeadRedriveRequest{QueueName: "hc-dlq", All: true})).TaskId)
			require.Equal(t, int64(1), task.Moved)
			it := s.Items("hc")[0]
			require.Len(t, it.Errors, 10, "the 10 most recent entries are kept")
			assert.Equal(t, "e2", it.Errors[0].Error, "the oldest one goes")
			assert.True(t, strings.HasPrefix(it.Errors[9].Error, "redriven from dead-letter queue 'hc-dlq'"))
			assert.Equal(t, "e10", it.LastError)
		})
	})
}

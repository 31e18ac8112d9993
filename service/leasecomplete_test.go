package service_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/servertest"
	"github.com/styxq/styx/internal/store"
	pb "github.com/styxq/styx/styxpb"
)

// TestLeaseCompletesFirst checks queue.lease's complete_ids (issue 52)
// through the Go client on every backend: the lease completes the previous
// batch and takes the next in one call, all or nothing, and answers at once
// with no items when none is ready.
func TestLeaseCompletesFirst(t *testing.T) {
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.Start(t, b)
		s.CreateQueue(&pb.QueueInfo{QueueName: "lc"})
		s.Produce("lc", "a", "b")
		first := s.Lease("lc", 1)
		require.Len(t, first.Items, 1)
		next := func(ids ...string) (*pb.QueueLeaseResponse, error) {
			return s.C.QueueLease(ctx, &pb.QueueLeaseRequest{QueueName: "lc", BatchSize: 1, ClientId: "w", RequestTimeout: "1m",
				CompleteIds: ids, CompletePartition: first.Partition})
		}
		res, err := next(first.Items[0].Id)
		require.NoError(t, err)
		require.Len(t, res.Items, 1)
		assert.Equal(t, "b", string(res.Items[0].Bytes))
		assert.Len(t, s.Items("lc"), 1, "a completed")

		// An id not leased: 400 naming it, nothing completed or leased.
		_, err = next(res.Items[0].Id, first.Items[0].Id)
		servertest.RequireCode(t, err, 400, first.Items[0].Id, "not leased")
		items := s.Items("lc")
		require.Len(t, items, 1)
		assert.Equal(t, res.Items[0].Id, items[0].Id, "b is still there")

		// A malformed id: 400 naming the field.
		_, err = next("nope")
		servertest.RequireCode(t, err, 400, "complete_ids")

		// Nothing ready: answered at once (not after the minute's
		// request_timeout) with no items, b completed.
		start := time.Now()
		empty, err := next(res.Items[0].Id)
		require.NoError(t, err)
		assert.Empty(t, empty.Items)
		assert.Less(t, time.Since(start), 30*time.Second, "it does not wait for request_timeout")
		assert.Empty(t, s.Items("lc"))
	})
}

// TestLeaseWaitsAfterComplete checks wait_after_complete (issue 52) through
// the Go client on every backend: the lease completes the previous item,
// waits, and takes the item a producer sends meanwhile; at its
// request_timeout it is answered 200 with no items (not 454), its
// completes done.
func TestLeaseWaitsAfterComplete(t *testing.T) {
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.Start(t, b)
		s.CreateQueue(&pb.QueueInfo{QueueName: "lw"})
		s.Produce("lw", "a")
		first := s.Lease("lw", 1)
		require.Len(t, first.Items, 1)
		next := func(timeout string, ids ...string) (*pb.QueueLeaseResponse, error) {
			return s.C.QueueLease(ctx, &pb.QueueLeaseRequest{QueueName: "lw", BatchSize: 1, ClientId: "w", RequestTimeout: timeout,
				CompleteIds: ids, CompletePartition: first.Partition, WaitAfterComplete: true})
		}
		type answer struct {
			res *pb.QueueLeaseResponse
			err error
		}
		got := make(chan answer, 1)
		go func() {
			res, err := next("1m", first.Items[0].Id)
			got <- answer{res, err}
		}()
		require.Eventually(t, func() bool { return len(s.Items("lw")) == 0 }, 30*time.Second, 5*time.Millisecond,
			"a is completed while the lease waits")
		s.Produce("lw", "b")
		a := <-got
		require.NoError(t, a.err)
		require.Len(t, a.res.Items, 1, "the waiting lease takes b")
		assert.Equal(t, "b", string(a.res.Items[0].Bytes))

		// Nothing produced: 200 with no items at request_timeout, b
		// completed.
		empty, err := next("100ms", a.res.Items[0].Id)
		require.NoError(t, err)
		assert.Empty(t, empty.Items)
		assert.Empty(t, s.Items("lw"))
	})
}

// TestLeaseWaitsAfterCompleteWriteFails: when the write of a waiting
// lease's completes fails, the lease is answered 453 at once (a failed
// iteration fails the waiting leases: engine.Tx.Commit), never later with
// 200 for completes that were not stored. Only the embedded backends' item
// log lets the test fail the write; PostgreSQL fails the waiting leases
// with its failed COMMIT the same way.
func TestLeaseWaitsAfterCompleteWriteFails(t *testing.T) {
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		servertest.RequireItemLog(t, b)
		s := servertest.Start(t, b)
		s.CreateQueue(&pb.QueueInfo{QueueName: "wf", LeaseTimeout: "10m"})
		s.Produce("wf", "a")
		first := s.Lease("wf", 1)
		require.Len(t, first.Items, 1)
		s.Faults.SetWriteHook(func(*store.Batch) error { return errors.New("the disk is gone") })
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second) // bounds the test if the lease kept waiting
		defer cancel()
		_, err := s.C.QueueLease(cctx, &pb.QueueLeaseRequest{QueueName: "wf", BatchSize: 1, ClientId: "w", RequestTimeout: "1m",
			CompleteIds: []string{first.Items[0].Id}, CompletePartition: first.Partition, WaitAfterComplete: true})
		servertest.RequireCode(t, err, 453)
		s.Faults.SetWriteHook(nil)
		items := s.Items("wf")
		require.Len(t, items, 1, "a was not completed")
		assert.True(t, items[0].IsLeased)
	})
}

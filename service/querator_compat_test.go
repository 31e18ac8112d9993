package service_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	styx "github.com/styxq/styx"
	"github.com/styxq/styx/internal/queue"
	"github.com/styxq/styx/internal/servertest"
	pb "github.com/styxq/styx/styxpb"
)

// The tests in this file pin behaviour that Querator's own functional tests
// check (issue 12): inclusive list pivots, the default list limit, 400 for a
// queue that does not exist, sub-second leases, and the status of empty or
// malformed requests with the field Querator names first.

// ids returns the ids of items.
func ids(items []*pb.StorageItem) []string {
	out := make([]string, len(items))
	for i, it := range items {
		out[i] = it.Id
	}
	return out
}

func TestQueratorInclusivePivots(t *testing.T) {
	t.Parallel()
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.Start(t, b)
		s.CreateQueue(&pb.QueueInfo{QueueName: "pv"})
		s.CreateQueue(&pb.QueueInfo{QueueName: "pv-src", DeadQueue: "pv"}) // dead.list reads dead-letter queues only
		s.Produce("pv", "a", "b", "c", "d", "e")
		all := ids(s.Items("pv"))
		require.Len(t, all, 5)

		list := func(pivot string, limit int32) []string {
			t.Helper()
			res, err := s.C.StorageItemsList(ctx, &pb.StorageItemsListRequest{QueueName: "pv", Pivot: pivot, Limit: limit})
			require.NoError(t, err)
			return ids(res.Items)
		}
		t.Run("ItemsListStartsAtThePivot", func(t *testing.T) {
			assert.Equal(t, all[2:4], list(all[2], 2))
			assert.Equal(t, all[4:], list(all[4], 10), "the last item as pivot lists itself")
			assert.Equal(t, all[:1], list(all[0], 1))
		})
		t.Run("QueratorPaging", func(t *testing.T) {
			// Querator's clients page by passing the last id seen and
			// dropping the first item of the next page.
			page := list("", 2)
			got := append([]string{}, page...)
			for len(page) == 2 {
				page = list(page[len(page)-1], 2)
				require.Equal(t, got[len(got)-1], page[0], "the page starts with its pivot")
				got = append(got, page[1:]...)
			}
			assert.Equal(t, all, got)
		})
		t.Run("IDZeroListsFromTheStart", func(t *testing.T) {
			assert.Equal(t, all, list(queue.FormatID(0), 0))
		})
		t.Run("DeletedPivotListsFromTheNextItem", func(t *testing.T) {
			require.NoError(t, s.C.StorageItemsDelete(ctx, &pb.StorageItemsDeleteRequest{QueueName: "pv", Ids: []string{all[1]}}))
			assert.Equal(t, all[2:4], list(all[1], 2))
		})
		t.Run("ScheduledListStartsAtThePivot", func(t *testing.T) {
			s.CreateQueue(&pb.QueueInfo{QueueName: "pv-sched"})
			req := &pb.QueueProduceRequest{QueueName: "pv-sched", RequestTimeout: "1m"}
			for i := range 4 {
				req.Items = append(req.Items, &pb.QueueProduceItem{Utf8: fmt.Sprint(i), EnqueueAt: servertest.At(time.Now().Add(time.Hour))})
			}
			require.NoError(t, s.C.QueueProduce(ctx, req))
			res, err := s.C.StorageScheduledList(ctx, &pb.StorageItemsListRequest{QueueName: "pv-sched"})
			require.NoError(t, err)
			sched := ids(res.Items)
			require.Len(t, sched, 4)
			res, err = s.C.StorageScheduledList(ctx, &pb.StorageItemsListRequest{QueueName: "pv-sched", Pivot: sched[1], Limit: 2})
			require.NoError(t, err)
			assert.Equal(t, sched[1:3], ids(res.Items))
		})
		t.Run("DeadListKeepsItsExclusiveNextPivot", func(t *testing.T) {
			// dead.list is a Styx call: next_pivot continues after the
			// last item it returned.
			res, err := s.C.DeadList(ctx, &pb.DeadListRequest{QueueName: "pv", Limit: 2})
			require.NoError(t, err)
			first := ids(res.Items)
			require.Len(t, first, 2)
			require.NotEmpty(t, res.NextPivot)
			res, err = s.C.DeadList(ctx, &pb.DeadListRequest{QueueName: "pv", Pivot: res.NextPivot, Limit: 10})
			require.NoError(t, err)
			assert.Equal(t, []string{all[0], all[2], all[3], all[4]}, append(first, ids(res.Items)...))
		})
	})
}

func TestQueratorDefaultListLimit(t *testing.T) {
	t.Parallel()
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.Start(t, b)
		s.CreateQueue(&pb.QueueInfo{QueueName: "many"})
		for range 2 {
			payloads := make([]string, 550)
			for i := range payloads {
				payloads[i] = fmt.Sprint(i)
			}
			s.Produce("many", payloads...)
		}
		t.Run("ItemsList", func(t *testing.T) {
			res, err := s.C.StorageItemsList(ctx, &pb.StorageItemsListRequest{QueueName: "many"})
			require.NoError(t, err)
			assert.Len(t, res.Items, 1000, "limit 0 is 1000")
			res, err = s.C.StorageItemsList(ctx, &pb.StorageItemsListRequest{QueueName: "many", Limit: 20_000})
			require.NoError(t, err)
			assert.Len(t, res.Items, 1100, "limits above 1000 are accepted, as in Querator")
		})
		t.Run("ScheduledList", func(t *testing.T) {
			s.CreateQueue(&pb.QueueInfo{QueueName: "many-sched"})
			req := &pb.QueueProduceRequest{QueueName: "many-sched", RequestTimeout: "1m"}
			for i := range 150 {
				req.Items = append(req.Items, &pb.QueueProduceItem{Utf8: fmt.Sprint(i), EnqueueAt: servertest.At(time.Now().Add(time.Hour))})
			}
			require.NoError(t, s.C.QueueProduce(ctx, req))
			res, err := s.C.StorageScheduledList(ctx, &pb.StorageItemsListRequest{QueueName: "many-sched"})
			require.NoError(t, err)
			assert.Len(t, res.Items, 150, "limit 0 is 1000, not 100")
		})
		t.Run("QueuesList", func(t *testing.T) {
			for i := range 110 {
				s.CreateQueue(&pb.QueueInfo{QueueName: fmt.Sprintf("q-%03d", i)})
			}
			res, err := s.C.QueuesList(ctx, &pb.QueuesListRequest{Pivot: "q-"})
			require.NoError(t, err)
			require.Len(t, res.Items, 110, "limit 0 is 1000, not 100")
			assert.Equal(t, "q-000", res.Items[0].QueueName)
			res, err = s.C.QueuesList(ctx, &pb.QueuesListRequest{Limit: 20_000})
			require.NoError(t, err)
			assert.Len(t, res.Items, 112)
			_, err = s.C.QueuesList(ctx, &pb.QueuesListRequest{Limit: -1})
			servertest.RequireCode(t, err, styx.CodeBadRequest, "invalid limit")
			_, err = s.C.QueuesList(ctx, &pb.QueuesListRequest{Limit: 65537})
			servertest.RequireCode(t, err, styx.CodeBadRequest, "invalid limit", "65536")
		})
	})
}

func TestQueratorUnknownQueue(t *testing.T) {
	t.Parallel()
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.Start(t, b)
		createDLQ(s, &pb.QueueInfo{QueueName: "known-dlq"})
		id := queue.FormatID(1)
		const msg = "queue does not exist; no such queue named 'ghost'"
		for _, c := range []struct {
			name string
			call func() error
		}{
			{"QueueProduce", func() error {
				return s.C.QueueProduce(ctx, &pb.QueueProduceRequest{QueueName: "ghost", RequestTimeout: "1m", Items: []*pb.QueueProduceItem{{Utf8: "x"}}})
			}},
			{"QueueLease", func() error {
				_, err := s.C.QueueLease(ctx, &pb.QueueLeaseRequest{QueueName: "ghost", BatchSize: 1, ClientId: "c", RequestTimeout: "1s"})
				return err
			}},
			{"QueueComplete", func() error {
				return s.C.QueueComplete(ctx, &pb.QueueCompleteRequest{QueueName: "ghost", RequestTimeout: "1m", Ids: []string{id}})
			}},
			{"QueueRetry", func() error {
				return servertest.RetryErr(s.C.QueueRetry(ctx, &pb.QueueRetryRequest{QueueName: "ghost", Items: []*pb.QueueRetryItem{{Id: id}}}))
			}},
			{"QueueRenew", func() error {
				_, err := s.C.QueueRenew(ctx, &pb.QueueRenewRequest{QueueName: "ghost", Ids: []string{id}})
				return err
			}},
			{"QueueStats", func() error {
				_, err := s.C.QueueStats(ctx, &pb.QueueStatsRequest{QueueName: "ghost"})
				return err
			}},
			{"QueueClear", func() error {
				return s.C.QueueClear(ctx, &pb.QueueClearRequest{QueueName: "ghost", Queue: true})
			}},
			{"QueueReload", func() error {
				return s.C.QueueReload(ctx, &pb.QueueReloadRequest{QueueName: "ghost"})
			}},
			{"QueuesInfo", func() error {
				_, err := s.C.QueuesInfo(ctx, &pb.QueuesInfoRequest{QueueName: "ghost"})
				return err
			}},
			{"QueuesUpdate", func() error {
				return s.C.QueuesUpdate(ctx, &pb.QueueInfo{QueueName: "ghost", MaxAttempts: 3})
			}},
			{"QueuesDelete", func() error {
				return s.C.QueuesDelete(ctx, &pb.QueuesDeleteRequest{QueueName: "ghost"})
			}},
			{"StorageItemsList", func() error {
				_, err := s.C.StorageItemsList(ctx, &pb.StorageItemsListRequest{QueueName: "ghost"})
				return err
			}},
			{"StorageScheduledList", func() error {
				_, err := s.C.StorageScheduledList(ctx, &pb.StorageItemsListRequest{QueueName: "ghost"})
				return err
			}},
			{"StorageItemsImport", func() error {
				_, err := s.C.StorageItemsImport(ctx, &pb.StorageItemsImportRequest{QueueName: "ghost", Items: []*pb.StorageItem{{Payload: []byte("x")}}})
				return err
			}},
			{"StorageItemsDelete", func() error {
				return s.C.StorageItemsDelete(ctx, &pb.StorageItemsDeleteRequest{QueueName: "ghost", Ids: []string{id}})
			}},
			{"DeadList", func() error {
				_, err := s.C.DeadList(ctx, &pb.DeadListRequest{QueueName: "ghost"})
				return err
			}},
			{"DeadDelete", func() error {
				_, err := s.C.DeadDelete(ctx, &pb.DeadDeleteRequest{QueueName: "ghost"})
				return err
			}},
			{"DeadRedrive", func() error {
				_, err := s.C.DeadRedrive(ctx, &pb.DeadRedriveRequest{QueueName: "ghost"})
				return err
			}},
		} {
			t.Run(c.name, func(t *testing.T) {
				err := c.call()
				servertest.RequireCode(t, err, styx.CodeBadRequest, msg)
				assert.True(t, styx.IsQueueNotExist(err))
			})
		}
		t.Run("RedriveDestination", func(t *testing.T) {
			_, err := s.C.DeadRedrive(ctx, &pb.DeadRedriveRequest{QueueName: "known-dlq", Destination: "ghost", All: true})
			servertest.RequireCode(t, err, styx.CodeBadRequest, "invalid destination; no such queue named 'ghost'")
			assert.False(t, styx.IsQueueNotExist(err), "the queue of the request exists")
		})
		t.Run("RedriveTaskStays404", func(t *testing.T) {
			_, err := s.C.RedrivesGet(ctx, &pb.RedriveTaskRequest{TaskId: "rd-ghost"})
			servertest.RequireCode(t, err, styx.CodeNotFound, "rd-ghost")
			assert.False(t, styx.IsQueueNotExist(err))
		})
	})
}

func TestQueratorSubSecondLease(t *testing.T) {
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.Start(t, b)
		s.CreateQueue(&pb.QueueInfo{QueueName: "fast", LeaseTimeout: "300ms", ExpireTimeout: "1m"})
		info, err := s.C.QueuesInfo(ctx, &pb.QueuesInfoRequest{QueueName: "fast"})
		require.NoError(t, err)
		assert.Equal(t, "300ms", info.LeaseTimeout)

		t.Run("LeaseRunsOut", func(t *testing.T) {
			s.Produce("fast", "x")
			before := time.Now()
			first := s.Lease("fast", 1).Items[0]
			deadline := first.LeaseDeadline.AsTime()
			assert.WithinDuration(t, before.Add(300*time.Millisecond), deadline, 250*time.Millisecond)
			// Not completed: after 300ms the item is handed out again as
			// its second attempt.
			var again *pb.QueueLeaseItem
			servertest.Eventually(t, func() bool {
				res, err := s.C.QueueLease(ctx, &pb.QueueLeaseRequest{QueueName: "fast", BatchSize: 1, ClientId: "again", RequestTimeout: "100ms"})
				if err != nil {
					return false
				}
				again = res.Items[0]
				return true
			}, "the 300ms lease should run out")
			assert.Equal(t, int32(2), again.Attempts)
			assert.False(t, time.Now().Before(deadline), "not handed out before the lease deadline")
			s.Complete("fast", 0, again.Id)
		})
		t.Run("RenewBySubSecond", func(t *testing.T) {
			s.Produce("fast", "y")
			item := s.Lease("fast", 1).Items[0]
			res, err := s.C.QueueRenew(ctx, &pb.QueueRenewRequest{QueueName: "fast", Ids: []string{item.Id}, LeaseTimeout: "250ms"})
			require.NoError(t, err)
			assert.WithinDuration(t, time.Now().Add(250*time.Millisecond), res.Items[0].LeaseDeadline.AsTime(), 250*time.Millisecond)
			s.Complete("fast", 0, item.Id)
		})
		t.Run("UpdateAndBounds", func(t *testing.T) {
			require.NoError(t, s.C.QueuesUpdate(ctx, &pb.QueueInfo{QueueName: "fast", LeaseTimeout: "250ms", ExpireTimeout: "500ms"}))
			info, err := s.C.QueuesInfo(ctx, &pb.QueuesInfoRequest{QueueName: "fast"})
			require.NoError(t, err)
			assert.Equal(t, "250ms", info.LeaseTimeout)
			assert.Equal(t, "500ms", info.ExpireTimeout)
			err = s.C.QueuesUpdate(ctx, &pb.QueueInfo{QueueName: "fast", LeaseTimeout: "600ms"})
			servertest.RequireCode(t, err, styx.CodeBadRequest, "lease_timeout", "expire_timeout")
			err = s.C.QueuesCreate(ctx, &pb.QueueInfo{QueueName: "zero", LeaseTimeout: "0s"})
			servertest.RequireCode(t, err, styx.CodeBadRequest, "lease_timeout", "above 0")
			err = s.C.QueuesCreate(ctx, &pb.QueueInfo{QueueName: "zero", ExpireTimeout: "-1s"})
			servertest.RequireCode(t, err, styx.CodeBadRequest, "expire_timeout", "above 0")
		})
	})
}

// TestQueratorEmptyRequests sends the empty and malformed requests of
// Querator's functional tests (service/queue_test.go, retry_test.go,
// queues_test.go, storage_test.go "Errors"): each is a 400 naming the field
// Querator names first. Messages keep Styx's wording ("invalid <field>; …").
func TestQueratorEmptyRequests(t *testing.T) {
	t.Parallel()
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.Start(t, b)
		s.CreateQueue(&pb.QueueInfo{QueueName: "e"})
		tooMany := make([]string, 1001)
		for i := range tooMany {
			tooMany[i] = queue.FormatID(1)
		}
		for _, c := range []struct {
			name  string
			call  func() error
			field string
		}{
			// queue.produce
			{"ProduceEmptyRequest", func() error { return s.C.QueueProduce(ctx, &pb.QueueProduceRequest{}) }, "invalid queue_name"},
			{"ProduceInvalidQueue", func() error {
				return s.C.QueueProduce(ctx, &pb.QueueProduceRequest{QueueName: "invalid~queue", RequestTimeout: "1m"})
			}, "invalid queue_name"},
			{"ProduceNoItems", func() error {
				return s.C.QueueProduce(ctx, &pb.QueueProduceRequest{QueueName: "e", RequestTimeout: "1m"})
			}, "invalid items"},
			{"ProduceRequestTimeoutTooLong", func() error {
				return s.C.QueueProduce(ctx, &pb.QueueProduceRequest{QueueName: "e", RequestTimeout: "16m", Items: []*pb.QueueProduceItem{{}}})
			}, "request timeout is invalid"},
			{"ProduceRequestTimeoutBeforeItems", func() error {
				return s.C.QueueProduce(ctx, &pb.QueueProduceRequest{QueueName: "e", RequestTimeout: "foo"})
			}, "request timeout is invalid"},
			// queue.lease
			{"LeaseEmptyRequest", func() error {
				_, err := s.C.QueueLease(ctx, &pb.QueueLeaseRequest{})
				return err
			}, "invalid queue_name"},
			{"LeaseClientIDBeforeBatchSize", func() error {
				_, err := s.C.QueueLease(ctx, &pb.QueueLeaseRequest{QueueName: "e"})
				return err
			}, "invalid client_id"},
			{"LeaseBatchSizeZero", func() error {
				_, err := s.C.QueueLease(ctx, &pb.QueueLeaseRequest{QueueName: "e", ClientId: "c"})
				return err
			}, "invalid batch_size"},
			{"LeaseBatchSizeTooBig", func() error {
				_, err := s.C.QueueLease(ctx, &pb.QueueLeaseRequest{QueueName: "e", ClientId: "c", BatchSize: 1001})
				return err
			}, "invalid batch_size"},
			{"LeaseMalformedRequestTimeoutFirst", func() error {
				_, err := s.C.QueueLease(ctx, &pb.QueueLeaseRequest{QueueName: "e", RequestTimeout: "foo"})
				return err
			}, "request timeout is invalid"},
			{"LeaseBatchSizeBeforeRequestTimeoutRange", func() error {
				_, err := s.C.QueueLease(ctx, &pb.QueueLeaseRequest{QueueName: "e", ClientId: "c", RequestTimeout: "16m"})
				return err
			}, "invalid batch_size"},
			{"LeaseRequestTimeoutTooLong", func() error {
				_, err := s.C.QueueLease(ctx, &pb.QueueLeaseRequest{QueueName: "e", ClientId: "c", BatchSize: 1000, RequestTimeout: "16m"})
				return err
			}, "request timeout is invalid"},
			{"LeaseRequestTimeoutTooShort", func() error {
				_, err := s.C.QueueLease(ctx, &pb.QueueLeaseRequest{QueueName: "e", ClientId: "c", BatchSize: 1000, RequestTimeout: "1ms"})
				return err
			}, "request timeout is invalid"},
			// queue.complete
			{"CompleteEmptyRequest", func() error { return s.C.QueueComplete(ctx, &pb.QueueCompleteRequest{}) }, "invalid queue_name"},
			{"CompleteNoIDs", func() error {
				return s.C.QueueComplete(ctx, &pb.QueueCompleteRequest{QueueName: "e", RequestTimeout: "1m0s"})
			}, "invalid ids"},
			{"CompletePartitionBeforeIDs", func() error {
				return s.C.QueueComplete(ctx, &pb.QueueCompleteRequest{QueueName: "e", RequestTimeout: "1m0s", Partition: 65234, Ids: []string{"valid-id"}})
			}, "invalid partition"},
			{"CompleteRequestTimeoutTooLong", func() error {
				return s.C.QueueComplete(ctx, &pb.QueueCompleteRequest{QueueName: "e", RequestTimeout: "16m0s", Ids: []string{queue.FormatID(1)}})
			}, "request timeout is invalid"},
			{"CompleteInvalidIDs", func() error {
				return s.C.QueueComplete(ctx, &pb.QueueCompleteRequest{QueueName: "e", RequestTimeout: "1m", Ids: []string{"invalid-id", "invalid-ids"}})
			}, "'invalid-id'"},
			{"CompleteTooManyIDs", func() error {
				return s.C.QueueComplete(ctx, &pb.QueueCompleteRequest{QueueName: "e", RequestTimeout: "1m", Ids: tooMany})
			}, "invalid ids"},
			// queue.retry
			{"RetryEmptyRequest", func() error { return servertest.RetryErr(s.C.QueueRetry(ctx, &pb.QueueRetryRequest{})) }, "invalid queue_name"},
			{"RetryEmptyItems", func() error {
				return servertest.RetryErr(s.C.QueueRetry(ctx, &pb.QueueRetryRequest{QueueName: "e", Items: []*pb.QueueRetryItem{}}))
			}, "invalid items"},
			{"RetryPartitionBeforeItems", func() error {
				return servertest.RetryErr(s.C.QueueRetry(ctx, &pb.QueueRetryRequest{QueueName: "e", Partition: 65234, Items: []*pb.QueueRetryItem{{Id: "test-id"}}}))
			}, "invalid partition"},
			{"RetryInvalidID", func() error {
				return servertest.RetryErr(s.C.QueueRetry(ctx, &pb.QueueRetryRequest{QueueName: "e", Items: []*pb.QueueRetryItem{{Id: "invalid-id"}}}))
			}, "'invalid-id'"},
			{"RetryNotLeased", func() error {
				return servertest.RetryErr(s.C.QueueRetry(ctx, &pb.QueueRetryRequest{QueueName: "e", Items: []*pb.QueueRetryItem{{Id: queue.FormatID(1 << 40)}}}))
			}, "not leased"},
			// storage
			{"ItemsListPartition", func() error {
				_, err := s.C.StorageItemsList(ctx, &pb.StorageItemsListRequest{QueueName: "e", Partition: 1})
				return err
			}, "invalid partition"},
			{"ImportEmptyRequest", func() error {
				_, err := s.C.StorageItemsImport(ctx, &pb.StorageItemsImportRequest{})
				return err
			}, "invalid queue_name"},
			{"ImportNoItems", func() error {
				_, err := s.C.StorageItemsImport(ctx, &pb.StorageItemsImportRequest{QueueName: "e"})
				return err
			}, "invalid items"},
			{"ImportPartitionBeforeItems", func() error {
				_, err := s.C.StorageItemsImport(ctx, &pb.StorageItemsImportRequest{QueueName: "e", Partition: 500, Items: []*pb.StorageItem{}})
				return err
			}, "invalid partition"},
			{"DeleteEmptyRequest", func() error { return s.C.StorageItemsDelete(ctx, &pb.StorageItemsDeleteRequest{}) }, "invalid queue_name"},
			{"DeleteNoIDs", func() error {
				return s.C.StorageItemsDelete(ctx, &pb.StorageItemsDeleteRequest{QueueName: "e"})
			}, "invalid ids"},
			// queues
			{"QueuesCreateEmptyRequest", func() error { return s.C.QueuesCreate(ctx, &pb.QueueInfo{}) }, "invalid queue_name"},
			{"QueuesCreateWhitespace", func() error {
				return s.C.QueuesCreate(ctx, &pb.QueueInfo{QueueName: "Friendship is Magic"})
			}, "invalid queue_name"},
			{"QueuesCreateNameTooLong", func() error {
				return s.C.QueuesCreate(ctx, &pb.QueueInfo{QueueName: strings.Repeat("q", 2001)})
			}, "invalid queue_name"},
			{"QueuesCreateLeaseLongerThanExpire", func() error {
				return s.C.QueuesCreate(ctx, &pb.QueueInfo{QueueName: "lt", LeaseTimeout: "1h0m0s", ExpireTimeout: "30m0s"})
			}, "invalid lease_timeout"},
			{"QueuesCreateNegativeMaxAttempts", func() error {
				return s.C.QueuesCreate(ctx, &pb.QueueInfo{QueueName: "ma", MaxAttempts: -1})
			}, "invalid max_attempts"},
			{"QueuesUpdateEmptyRequest", func() error { return s.C.QueuesUpdate(ctx, &pb.QueueInfo{}) }, "invalid queue_name"},
			{"QueuesDeleteEmptyRequest", func() error { return s.C.QueuesDelete(ctx, &pb.QueuesDeleteRequest{}) }, "invalid queue_name"},
			{"QueuesInfoEmptyRequest", func() error {
				_, err := s.C.QueuesInfo(ctx, &pb.QueuesInfoRequest{})
				return err
			}, "invalid queue_name"},
			{"QueuesListNegativeLimit", func() error {
				_, err := s.C.QueuesList(ctx, &pb.QueuesListRequest{Limit: -1})
				return err
			}, "invalid limit"},
			{"StatsEmptyRequest", func() error {
				_, err := s.C.QueueStats(ctx, &pb.QueueStatsRequest{})
				return err
			}, "invalid queue_name"},
			{"ClearEmptyRequest", func() error { return s.C.QueueClear(ctx, &pb.QueueClearRequest{}) }, "invalid queue_name"},
		} {
			t.Run(c.name, func(t *testing.T) {
				servertest.RequireCode(t, c.call(), styx.CodeBadRequest, c.field)
			})
		}
		t.Run("ProduceItemsWithNoPayloadAreOkay", func(t *testing.T) {
			require.NoError(t, s.C.QueueProduce(ctx, &pb.QueueProduceRequest{QueueName: "e", RequestTimeout: "5m", Items: []*pb.QueueProduceItem{{}, {}}}))
			assert.Len(t, s.Items("e"), 2)
		})
	})
}

// TestQueratorDuplicateClientID (issue 25, 2): a second waiting lease of one
// client_id is refused 400 with Querator's message, word for word, in JSON
// as Querator's client sends it and in protobuf.
func TestQueratorDuplicateClientID(t *testing.T) {
	t.Parallel()
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.Start(t, b)
		s.CreateQueue(&pb.QueueInfo{QueueName: "dq"})
		go func() {
			_, _ = s.C.QueueLease(ctx, &pb.QueueLeaseRequest{QueueName: "dq", BatchSize: 1, ClientId: "dup", RequestTimeout: "3s"})
		}()
		servertest.WaitStat(t, s, "dq", func(st *pb.QueueLogicalStats) bool { return st.LeaseWaiting == 1 })
		const msg = "duplicate client id; a client cannot make multiple leased requests to the same queue"
		code, _, body := raw(s, http.MethodPost, "/v1/queue.lease", "application/json", "",
			[]byte(`{"queue_name":"dq","batch_size":1,"client_id":"dup","request_timeout":"1s"}`))
		require.Equal(t, http.StatusBadRequest, code, string(body))
		var reply struct{ Message string }
		require.NoError(t, json.Unmarshal(body, &reply))
		require.Equal(t, msg, reply.Message)
		_, err := s.C.QueueLease(ctx, &pb.QueueLeaseRequest{QueueName: "dq", BatchSize: 1, ClientId: "dup", RequestTimeout: "1s"})
		servertest.RequireCode(t, err, styx.CodeBadRequest)
		var e *styx.Error
		require.ErrorAs(t, err, &e)
		require.Equal(t, msg, e.Message)
	})
}

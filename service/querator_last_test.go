package service_test

import (
	"bytes"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "github.com/duh-rpc/duh-go/proto/v1"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	styx "github.com/styxq/styx"
	"github.com/styxq/styx/internal/servertest"
	pb "github.com/styxq/styx/styxpb"
)

// The tests in this file pin the last behaviours in which Styx differed from
// Querator (issue 25). Each request goes as Querator's client sends it, in
// both of its encodings: JSON (the wire's snake_case names) and protobuf.

// wire is one of the encodings Querator's clients speak.
type wire struct{ name, contentType string }

var wires = []wire{{"json", "application/json"}, {"protobuf", "application/protobuf"}}

// send posts req to path in w's encoding and returns the HTTP status and,
// when it is not 200, the error reply's message; a 200 reply is decoded into
// out (nil: not decoded).
func send(s *servertest.Server, w wire, path string, req, out proto.Message) (int, string) {
	s.T.Helper()
	var body []byte
	var err error
	if w.name == "json" {
		body, err = protojson.Marshal(req)
	} else {
		body, err = proto.Marshal(req)
	}
	require.NoError(s.T, err)
	return sendBody(s, w, path, body, out)
}

// sendBody is send with the request already encoded in w's encoding.
func sendBody(s *servertest.Server, w wire, path string, body []byte, out proto.Message) (int, string) {
	s.T.Helper()
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, s.D.Endpoint()+path, bytes.NewReader(body))
	require.NoError(s.T, err)
	hreq.Header.Set("Content-Type", w.contentType)
	resp, reply := do(s, hreq)
	require.Equal(s.T, w.contentType, resp.Header.Get("Content-Type"), string(reply))
	unmarshal := proto.Unmarshal
	if w.name == "json" {
		unmarshal = protojson.Unmarshal
	}
	if resp.StatusCode != http.StatusOK {
		var e v1.Reply
		require.NoError(s.T, unmarshal(reply, &e), string(reply))
		return resp.StatusCode, e.Message
	}
	if out != nil {
		require.NoError(s.T, unmarshal(reply, out), string(reply))
	}
	return resp.StatusCode, ""
}

// TestQueratorRequestTimeout (issue 25, 1): request_timeout is required on
// queue.produce, queue.lease and queue.complete, parsed and bounded (10ms..15m) with
// Querator's messages word for word; the Go client sends its default when a
// caller leaves it empty.
func TestQueratorRequestTimeout(t *testing.T) {
	const required = "request timeout is required; '5m' is recommended, 15m is the maximum"
	const invalid = `request timeout is invalid; time: invalid duration "foo" - expected format: 900ms, 5m or 15m`
	const tooShort = "request timeout is invalid; minimum timeout is '10ms' but '1ms' was requested"
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.Start(t, b)
		s.CreateQueue(&pb.QueueInfo{QueueName: "rt", LeaseTimeout: "1m", RequestedPartitions: 1})
		for _, w := range wires {
			t.Run(w.name, func(t *testing.T) {
				produce := func(timeout string) *pb.QueueProduceRequest {
					return &pb.QueueProduceRequest{QueueName: "rt", RequestTimeout: timeout, Items: []*pb.QueueProduceItem{{Utf8: "x"}}}
				}
				for _, c := range []struct{ timeout, msg string }{
					{"", required},
					{"0s", required},
					{"foo", invalid},
					{"16m", "request timeout is invalid; maximum timeout is '15m' but '16m0s' was requested"},
					{"1ms", tooShort},
				} {
					code, msg := send(s, w, "/v1/queue.produce", produce(c.timeout), nil)
					assert.Equal(t, http.StatusBadRequest, code, "produce with request_timeout %q", c.timeout)
					assert.Equal(t, c.msg, msg, "produce with request_timeout %q", c.timeout)
				}
				for _, timeout := range []string{"10ms", "15m"} {
					code, msg := send(s, w, "/v1/queue.produce", produce(timeout), nil)
					require.Equal(t, http.StatusOK, code, "produce with request_timeout %q: %s", timeout, msg)
				}

				lease := func(timeout string) *pb.QueueLeaseRequest {
					return &pb.QueueLeaseRequest{QueueName: "rt", BatchSize: 111, ClientId: "c-" + w.name, RequestTimeout: timeout}
				}
				for _, c := range []struct{ timeout, msg string }{
					{"", required},
					{"foo", invalid},
					// Querator's lease message has no "was" here; its produce message has.
					{"16m", "request timeout is invalid; maximum timeout is '15m' but '16m0s' requested"},
					{"1ms", tooShort},
				} {
					code, msg := send(s, w, "/v1/queue.lease", lease(c.timeout), nil)
					assert.Equal(t, http.StatusBadRequest, code, "lease with request_timeout %q", c.timeout)
					assert.Equal(t, c.msg, msg, "lease with request_timeout %q", c.timeout)
				}
				var got pb.QueueLeaseResponse
				code, msg := send(s, w, "/v1/queue.lease", lease("10ms"), &got)
				require.Equal(t, http.StatusOK, code, "the minimum request_timeout is allowed: %s", msg)
				require.Len(t, got.Items, 2, "the two items produced above")

				// queue.complete requires one too (after its ids).
				complete := func(timeout string, ids ...string) *pb.QueueCompleteRequest {
					return &pb.QueueCompleteRequest{QueueName: "rt", Partition: got.Partition, RequestTimeout: timeout, Ids: ids}
				}
				for _, c := range []struct{ timeout, msg string }{
					{"", required},
					{"0ms", required},
					{"foo", invalid},
					{"16m0s", "request timeout is invalid; maximum timeout is '15m' but '16m0s' requested"},
				} {
					code, msg := send(s, w, "/v1/queue.complete", complete(c.timeout, got.Items[0].Id), nil)
					assert.Equal(t, http.StatusBadRequest, code, "complete with request_timeout %q", c.timeout)
					assert.Equal(t, c.msg, msg, "complete with request_timeout %q", c.timeout)
				}
				code, msg = send(s, w, "/v1/queue.complete", complete(""), nil)
				assert.Equal(t, http.StatusBadRequest, code)
				assert.Contains(t, msg, "ids", "empty ids are named before a missing request_timeout")
				code, msg = send(s, w, "/v1/queue.complete", complete("5s", got.Items[0].Id, got.Items[1].Id), nil)
				require.Equal(t, http.StatusOK, code, msg)
			})
		}
		t.Run("GoClientDefault", func(t *testing.T) {
			require.NoError(t, s.C.QueueProduce(ctx, &pb.QueueProduceRequest{QueueName: "rt", Items: []*pb.QueueProduceItem{{Utf8: "y"}}}))
			req := &pb.QueueLeaseRequest{QueueName: "rt", BatchSize: 1, ClientId: "go"}
			res, err := s.C.QueueLease(ctx, req)
			require.NoError(t, err)
			require.Len(t, res.Items, 1)
			assert.Empty(t, req.RequestTimeout, "the caller's request is left as it was")
		})
	})
}

// TestQueratorZeroTimes (issue 25, 3): the times of Querator's fields that
// are not set are sent as Go's zero time, not omitted, so that a Querator
// client's AsTime().IsZero() holds; a lease reply's deadline equals the one
// storage/items.list reports for the item; and an import that sends zero
// times (as Querator's client does for unset ones) takes them as unset.
func TestQueratorZeroTimes(t *testing.T) {
	t.Parallel()
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.Start(t, b)
		s.CreateQueue(&pb.QueueInfo{QueueName: "zt", LeaseTimeout: "1m", RequestedPartitions: 1})
		for _, w := range wires {
			t.Run(w.name, func(t *testing.T) {
				code, msg := send(s, w, "/v1/queue.produce", &pb.QueueProduceRequest{QueueName: "zt", RequestTimeout: "1m",
					Items: []*pb.QueueProduceItem{{Reference: "a", Utf8: "a"}, {Reference: "b", Utf8: "b"}}}, nil)
				require.Equal(t, http.StatusOK, code, msg)

				var list pb.StorageItemsListResponse
				code, msg = send(s, w, "/v1/storage/items.list", &pb.StorageItemsListRequest{QueueName: "zt"}, &list)
				require.Equal(t, http.StatusOK, code, msg)
				require.Len(t, list.Items, 2)
				for _, it := range list.Items {
					require.NotNil(t, it.LeaseDeadline, "lease_deadline is sent")
					assert.True(t, it.LeaseDeadline.AsTime().IsZero(), "an item not leased: lease_deadline is Go's zero time, not %s", it.LeaseDeadline.AsTime())
					require.NotNil(t, it.EnqueueAt, "enqueue_at is sent")
					assert.True(t, it.EnqueueAt.AsTime().IsZero(), "an item not scheduled: enqueue_at is Go's zero time")
					assert.False(t, it.ExpireDeadline.AsTime().IsZero())
					assert.False(t, it.CreatedAt.AsTime().IsZero())
				}

				var lease pb.QueueLeaseResponse
				code, msg = send(s, w, "/v1/queue.lease", &pb.QueueLeaseRequest{QueueName: "zt", BatchSize: 1, ClientId: "z", RequestTimeout: "5s"}, &lease)
				require.Equal(t, http.StatusOK, code, msg)
				require.Len(t, lease.Items, 1)
				leased := lease.Items[0]
				code, msg = send(s, w, "/v1/storage/items.list", &pb.StorageItemsListRequest{QueueName: "zt", Pivot: leased.Id, Limit: 1}, &list)
				require.Equal(t, http.StatusOK, code, msg)
				require.Len(t, list.Items, 1)
				require.Equal(t, leased.Id, list.Items[0].Id)
				require.True(t, list.Items[0].IsLeased)
				assert.Equal(t, leased.LeaseDeadline.AsTime().Truncate(time.Microsecond), list.Items[0].LeaseDeadline.AsTime().Truncate(time.Microsecond),
					"the lease reply's deadline and the stored one agree at microsecond precision")
				assert.True(t, leased.LeaseDeadline.AsTime().Equal(list.Items[0].LeaseDeadline.AsTime()), "and to the nanosecond")
				s.Complete("zt", 0, leased.Id)

				// An import as Querator's client sends it: every time set, the
				// unset ones to Go's zero time.
				zero := timestamppb.New(time.Time{})
				var imported pb.StorageItemsImportResponse
				code, msg = send(s, w, "/v1/storage/items.import", &pb.StorageItemsImportRequest{QueueName: "zt", Items: []*pb.StorageItem{{
					Reference: "imported", Payload: []byte("i"), LeaseDeadline: zero, ExpireDeadline: zero, DeadDeadline: zero,
					CreatedAt: zero, UpdatedAt: zero, EnqueueAt: zero,
				}}}, &imported)
				require.Equal(t, http.StatusOK, code, msg)
				require.Len(t, imported.Items, 1)
				it := imported.Items[0]
				assert.False(t, it.IsLeased)
				assert.True(t, it.EnqueueAt.AsTime().IsZero(), "a zero enqueue_at is unset: the item is ready")
				assert.False(t, it.CreatedAt.AsTime().IsZero(), "a zero created_at is unset: the server sets it")
				var sched pb.StorageItemsListResponse
				code, msg = send(s, w, "/v1/storage/scheduled.list", &pb.StorageItemsListRequest{QueueName: "zt"}, &sched)
				require.Equal(t, http.StatusOK, code, msg)
				assert.Empty(t, sched.Items)
				for _, it := range s.Items("zt") {
					deleteItems(s, "zt", it.Id)
				}
			})
		}
	})
}

// deleteItems removes items of partition 0 by id.
func deleteItems(s *servertest.Server, queue string, ids ...string) {
	s.T.Helper()
	require.NoError(s.T, s.C.StorageItemsDelete(ctx, &pb.StorageItemsDeleteRequest{QueueName: queue, Ids: ids}))
}

// TestQueratorNearImmediateEnqueueAt (issue 25, 4): an enqueue_at already
// reached, or within the scheduling resolution (100ms, as in Querator), puts
// the item straight into the queue, with no enqueue_at; a later one is
// scheduled.
func TestQueratorNearImmediateEnqueueAt(t *testing.T) {
	t.Parallel()
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.Start(t, b)
		s.CreateQueue(&pb.QueueInfo{QueueName: "ne", LeaseTimeout: "1m", RequestedPartitions: 1})
		for _, w := range wires {
			t.Run(w.name, func(t *testing.T) {
				now := time.Now()
				code, msg := send(s, w, "/v1/queue.produce", &pb.QueueProduceRequest{QueueName: "ne", RequestTimeout: "1m", Items: []*pb.QueueProduceItem{
					{Reference: "past", EnqueueAt: timestamppb.New(now.Add(-time.Minute))},
					{Reference: "now", EnqueueAt: timestamppb.New(now)},
					{Reference: "soon", EnqueueAt: timestamppb.New(now.Add(50 * time.Millisecond))},
					{Reference: "later", EnqueueAt: timestamppb.New(now.Add(time.Hour))},
				}}, nil)
				require.Equal(t, http.StatusOK, code, msg)
				var sched, list pb.StorageItemsListResponse
				code, msg = send(s, w, "/v1/storage/scheduled.list", &pb.StorageItemsListRequest{QueueName: "ne"}, &sched)
				require.Equal(t, http.StatusOK, code, msg)
				require.Len(t, sched.Items, 1)
				assert.Equal(t, "later", sched.Items[0].Reference)
				code, msg = send(s, w, "/v1/storage/items.list", &pb.StorageItemsListRequest{QueueName: "ne"}, &list)
				require.Equal(t, http.StatusOK, code, msg)
				require.Len(t, list.Items, 3)
				for i, ref := range []string{"past", "now", "soon"} {
					assert.Equal(t, ref, list.Items[i].Reference)
					assert.True(t, list.Items[i].EnqueueAt.AsTime().IsZero(), "%s: not scheduled, no enqueue_at", ref)
				}
				var lease pb.QueueLeaseResponse
				code, msg = send(s, w, "/v1/queue.lease", &pb.QueueLeaseRequest{QueueName: "ne", BatchSize: 10, ClientId: "ne", RequestTimeout: "1s"}, &lease)
				require.Equal(t, http.StatusOK, code, msg)
				require.Len(t, lease.Items, 3, "the three are ready at once")
				require.NoError(t, s.C.QueueClear(ctx, &pb.QueueClearRequest{QueueName: "ne", Scheduled: true, Queue: true, Destructive: true}))
			})
		}
	})
}

// partitionStats returns partition 0's stats of a queue.
func partitionStats(s *servertest.Server, queue string) *pb.QueuePartitionStats {
	s.T.Helper()
	st, err := s.C.QueueStats(ctx, &pb.QueueStatsRequest{QueueName: queue})
	require.NoError(s.T, err)
	require.Len(s.T, st.LogicalQueues, 1)
	for _, p := range st.LogicalQueues[0].Partitions {
		if p.Partition == 0 {
			return p
		}
	}
	s.T.Fatalf("queue %s: no stats for partition 0", queue)
	return nil
}

// TestQueratorItemsListLeavesOutScheduled (issue 25, 5): storage/items.list
// lists the items in the queue and storage/scheduled.list the scheduled ones
// (10 and 20, not 30 and 20); queue.clear with scheduled removes the
// scheduled ones, with queue and scheduled both kinds.
func TestQueratorItemsListLeavesOutScheduled(t *testing.T) {
	t.Parallel()
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.Start(t, b)
		for _, w := range wires {
			t.Run(w.name, func(t *testing.T) {
				name := "ls-" + w.name
				s.CreateQueue(&pb.QueueInfo{QueueName: name, LeaseTimeout: "1m", RequestedPartitions: 1})
				fill := func() {
					var items []*pb.QueueProduceItem
					for i := range 30 {
						it := &pb.QueueProduceItem{Reference: fmt.Sprint(i)}
						if i%3 != 0 {
							it.EnqueueAt = timestamppb.New(time.Now().Add(time.Hour))
						}
						items = append(items, it)
					}
					code, msg := send(s, w, "/v1/queue.produce", &pb.QueueProduceRequest{QueueName: name, RequestTimeout: "1m", Items: items}, nil)
					require.Equal(t, http.StatusOK, code, msg)
				}
				counts := func() (ready, scheduled int) {
					var list, sched pb.StorageItemsListResponse
					code, msg := send(s, w, "/v1/storage/items.list", &pb.StorageItemsListRequest{QueueName: name}, &list)
					require.Equal(t, http.StatusOK, code, msg)
					code, msg = send(s, w, "/v1/storage/scheduled.list", &pb.StorageItemsListRequest{QueueName: name}, &sched)
					require.Equal(t, http.StatusOK, code, msg)
					return len(list.Items), len(sched.Items)
				}
				clear := func(queue, scheduled bool) {
					code, msg := send(s, w, "/v1/queue.clear", &pb.QueueClearRequest{QueueName: name, Queue: queue, Scheduled: scheduled}, nil)
					require.Equal(t, http.StatusOK, code, msg)
				}

				fill()
				ready, scheduled := counts()
				assert.Equal(t, 10, ready, "items.list: the ready items only")
				assert.Equal(t, 20, scheduled)
				st := partitionStats(s, name)
				assert.Equal(t, int32(30), st.Total)
				assert.Equal(t, int32(20), st.Scheduled)

				clear(false, true)
				ready, scheduled = counts()
				assert.Equal(t, 10, ready)
				assert.Equal(t, 0, scheduled)
				st = partitionStats(s, name)
				assert.Equal(t, int32(10), st.Total)
				assert.Equal(t, int32(0), st.Scheduled)

				fill()
				clear(true, true)
				ready, scheduled = counts()
				assert.Equal(t, 0, ready)
				assert.Equal(t, 0, scheduled)
				st = partitionStats(s, name)
				assert.Equal(t, int32(0), st.Total)
			})
		}
	})
}

// TestQueratorImportTenThousand (issue 25, 6): storage/items.import takes
// 10,000 items in one request (Querator's storage tests do), and pages back
// through storage/items.list with inclusive pivots and a limit, from a
// pivot that no longer exists, and deletes ids already deleted; an import
// over MaxImportItems is refused before it is decoded.
//
// The 10,000 items go over protobuf to Pebble and PostgreSQL; JSON, whose
// codec costs ten times more under -race, and memory (the Pebble engine on
// an in-memory file system) import 2,500 (still three pages). The storage
// sees the same items whatever the wire. The limit is checked by the
// service before any storage (service.MaxImportItems), so OverTheLimit runs
// on one backend.
func TestQueratorImportTenThousand(t *testing.T) {
	t.Parallel()
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.Start(t, b)
		for _, w := range wires {
			n := 10_000
			if w.name == "json" || b.Name == "memory" {
				n = 2_500
			}
			t.Run(w.name, func(t *testing.T) {
				name := "imp-" + w.name
				s.CreateQueue(&pb.QueueInfo{QueueName: name, LeaseTimeout: "1m", RequestedPartitions: 1})
				items := make([]*pb.StorageItem, n)
				for i := range items {
					items[i] = &pb.StorageItem{Reference: fmt.Sprint(i), Payload: []byte(fmt.Sprintf("payload %d", i))}
				}
				var imported pb.StorageItemsImportResponse
				code, msg := send(s, w, "/v1/storage/items.import", &pb.StorageItemsImportRequest{QueueName: name, Items: items}, &imported)
				// A 453 is an import whose one transaction did not commit
				// within PostgreSQL's bound on a loop transaction
				// (postgres.DefaultStatementTimeout, widened by
				// postgres.ItemAllowance per item: 15 s here, about thirty
				// times what the import takes on an idle machine). It
				// stored nothing, and the client sends it again, as
				// clients do.
				for attempt := 1; code == 453 && attempt < 3; attempt++ {
					t.Logf("import answered 453 (%s); sending it again", msg)
					require.Empty(t, s.Items(name), "an import answered 453 stored nothing")
					code, msg = send(s, w, "/v1/storage/items.import", &pb.StorageItemsImportRequest{QueueName: name, Items: items}, &imported)
				}
				require.Equal(t, http.StatusOK, code, msg)
				require.Len(t, imported.Items, n)

				// Page through 1,000 at a time: each page starts with the pivot.
				var seen []*pb.StorageItem
				pivot := ""
				for {
					var page pb.StorageItemsListResponse
					code, msg := send(s, w, "/v1/storage/items.list", &pb.StorageItemsListRequest{QueueName: name, Pivot: pivot, Limit: 1000}, &page)
					require.Equal(t, http.StatusOK, code, msg)
					got := page.Items
					if pivot != "" {
						require.NotEmpty(t, got)
						require.Equal(t, pivot, got[0].Id, "the pivot is inclusive")
						got = got[1:]
					}
					seen = append(seen, got...)
					if len(page.Items) < 1000 {
						break
					}
					pivot = page.Items[len(page.Items)-1].Id
				}
				require.Len(t, seen, n)
				for i, it := range seen {
					require.Equal(t, imported.Items[i].Id, it.Id)
					require.Equal(t, fmt.Sprint(i), it.Reference)
				}

				// A pivot that no longer exists: the list starts after it.
				gone := []string{seen[500].Id, seen[501].Id}
				deleteItems(s, name, gone...)
				deleteItems(s, name, gone...) // already deleted: OK
				var page pb.StorageItemsListResponse
				code, msg = send(s, w, "/v1/storage/items.list", &pb.StorageItemsListRequest{QueueName: name, Pivot: gone[0], Limit: 3}, &page)
				require.Equal(t, http.StatusOK, code, msg)
				require.Equal(t, []string{seen[502].Id, seen[503].Id, seen[504].Id}, ids(page.Items))
			})
		}
		t.Run("OverTheLimit", func(t *testing.T) {
			if b.Name != "memory" {
				t.Skip("the service refuses the import before any storage: checked on memory")
			}
			s.CreateQueue(&pb.QueueInfo{QueueName: "imp-over", LeaseTimeout: "1m", RequestedPartitions: 1})
			for _, w := range wires {
				code, msg := sendBody(s, w, "/v1/storage/items.import", emptyImport(t, w, "imp-over", 100_001), nil)
				require.Equal(t, http.StatusBadRequest, code)
				assert.Contains(t, msg, "items")
				assert.Contains(t, msg, "100000")
			}
			assert.Empty(t, s.Items("imp-over"))
		})
	})
}

// emptyImport returns a storage/items.import request for queue holding n
// empty items, encoded in w's encoding without building n messages: under
// -race, protojson.Marshal of 100,001 items took about 11 s of CPU for one
// refusal. The body is what a client's encoder sends (protobuf: the queue
// name, then n copies of the one-item field; JSON: the wire's names), which
// it checks for three items against the real encoders' output.
func emptyImport(t *testing.T, w wire, queue string, n int) []byte {
	t.Helper()
	build := func(n int) []byte {
		if w.name == "json" {
			return []byte(`{"queue_name":` + strconv.Quote(queue) + `,"items":[` + strings.Repeat("{},", n-1) + `{}]}`)
		}
		head, err := proto.Marshal(&pb.StorageItemsImportRequest{QueueName: queue})
		require.NoError(t, err)
		one, err := proto.Marshal(&pb.StorageItemsImportRequest{Items: []*pb.StorageItem{{}}})
		require.NoError(t, err)
		return append(head, bytes.Repeat(one, n)...)
	}
	want := &pb.StorageItemsImportRequest{QueueName: queue, Items: []*pb.StorageItem{{}, {}, {}}}
	got := &pb.StorageItemsImportRequest{}
	if w.name == "json" {
		require.NoError(t, protojson.Unmarshal(build(3), got))
	} else {
		require.NoError(t, proto.Unmarshal(build(3), got))
		enc, err := proto.Marshal(want)
		require.NoError(t, err)
		require.Equal(t, enc, build(3), "the real encoder's bytes")
	}
	require.True(t, proto.Equal(want, got), "%v", got)
	return build(n)
}

// TestQueratorQueuesListPivot (issue 25, 7): queues.list with a pivot no
// queue name can hold is a 400 with Querator's message.
func TestQueratorQueuesListPivot(t *testing.T) {
	t.Parallel()
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.Start(t, b)
		s.CreateQueue(&pb.QueueInfo{QueueName: "lp"})
		for _, w := range wires {
			code, msg := send(s, w, "/v1/queues.list", &pb.QueuesListRequest{Pivot: "invalid~queue"}, nil)
			assert.Equal(t, http.StatusBadRequest, code, w.name)
			assert.Equal(t, "pivot is invalid; 'invalid~queue' cannot contain '~' character", msg, w.name)
			var res pb.QueuesListResponse
			code, msg = send(s, w, "/v1/queues.list", &pb.QueuesListRequest{Pivot: "lp"}, &res)
			require.Equal(t, http.StatusOK, code, msg)
			require.Len(t, res.Items, 1)
		}
		_, err := s.C.QueuesList(ctx, &pb.QueuesListRequest{Pivot: "a~b"})
		servertest.RequireCode(t, err, styx.CodeBadRequest, "pivot is invalid")
	})
}

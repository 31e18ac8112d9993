package service_test

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	styx "github.com/styxq/styx"
	"github.com/styxq/styx/internal/servertest"
	pb "github.com/styxq/styx/styxpb"
)

// TestBadInput checks that each kind of bad input is refused with a 400 or
// 455 naming the field and the limit, and that storage is unchanged.
func TestBadInput(t *testing.T) {
	t.Parallel()
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.Start(t, b)
		s.CreateQueue(&pb.QueueInfo{QueueName: "bad", MaxAttempts: 3})
		s.Produce("bad", "keep-1", "keep-2")
		leased := s.Lease("bad", 1)
		before := s.AllItems("bad")

		big := make([]*pb.QueueProduceItem, 1001)
		for i := range big {
			big[i] = &pb.QueueProduceItem{Utf8: "x"}
		}
		cases := []struct {
			name  string
			call  func() error
			code  int
			parts []string
		}{
			{"EmptyProduce", func() error {
				return s.C.QueueProduce(ctx, &pb.QueueProduceRequest{QueueName: "bad"})
			}, 400, []string{"items", "at least one"}},
			{"OversizedProduce", func() error {
				return s.C.QueueProduce(ctx, &pb.QueueProduceRequest{QueueName: "bad", Items: big})
			}, 400, []string{"items", "1001", "1000"}},
			{"PayloadOver5MB", func() error {
				return s.C.QueueProduce(ctx, &pb.QueueProduceRequest{QueueName: "bad", Items: []*pb.QueueProduceItem{{Bytes: make([]byte, 5<<20+1)}}})
			}, 400, []string{"items[0].bytes", "5 MB"}},
			{"NameTooLong", func() error {
				return s.C.QueuesCreate(ctx, &pb.QueueInfo{QueueName: strings.Repeat("q", 513)})
			}, 400, []string{"queue_name", "513", "512"}},
			{"NameWithWhitespace", func() error {
				return s.C.QueuesCreate(ctx, &pb.QueueInfo{QueueName: "a b"})
			}, 400, []string{"queue_name", "whitespace"}},
			{"NameWithTilde", func() error {
				return s.C.QueuesCreate(ctx, &pb.QueueInfo{QueueName: "a~b"})
			}, 400, []string{"queue_name", "~"}},
			{"EmptyName", func() error {
				return s.C.QueueProduce(ctx, &pb.QueueProduceRequest{Items: []*pb.QueueProduceItem{{Utf8: "x"}}})
			}, 400, []string{"queue_name", "required"}},
			{"UnknownQueue", func() error {
				return s.C.QueueProduce(ctx, &pb.QueueProduceRequest{QueueName: "nope", Items: []*pb.QueueProduceItem{{Utf8: "x"}}})
			}, 400, []string{"queue does not exist; no such queue named 'nope'"}},
			{"DurationDoesNotParse", func() error {
				return s.C.QueuesCreate(ctx, &pb.QueueInfo{QueueName: "d1", LeaseTimeout: "soon"})
			}, 400, []string{"lease_timeout", "soon"}},
			{"LeaseTimeoutNotAboveZero", func() error {
				return s.C.QueuesCreate(ctx, &pb.QueueInfo{QueueName: "d2", LeaseTimeout: "0s"})
			}, 400, []string{"lease_timeout", "0s", "above 0"}},
			{"LeaseLongerThanExpire", func() error {
				return s.C.QueuesCreate(ctx, &pb.QueueInfo{QueueName: "d3", LeaseTimeout: "2h", ExpireTimeout: "1h"})
			}, 400, []string{"lease_timeout", "expire_timeout"}},
			{"MaxAttemptsOutOfRange", func() error {
				return s.C.QueuesCreate(ctx, &pb.QueueInfo{QueueName: "d4", MaxAttempts: 65537})
			}, 400, []string{"max_attempts", "65536"}},
			{"NegativePartitions", func() error {
				return s.C.QueuesCreate(ctx, &pb.QueueInfo{QueueName: "d5", RequestedPartitions: -1})
			}, 400, []string{"requested_partitions"}},
			{"LeaseBatchZero", func() error {
				_, err := s.C.QueueLease(ctx, &pb.QueueLeaseRequest{QueueName: "bad", ClientId: "c", RequestTimeout: "1s"})
				return err
			}, 400, []string{"batch_size", "1..1000"}},
			{"LeaseBatchTooBig", func() error {
				_, err := s.C.QueueLease(ctx, &pb.QueueLeaseRequest{QueueName: "bad", BatchSize: 1001, ClientId: "c", RequestTimeout: "1s"})
				return err
			}, 400, []string{"batch_size", "1001"}},
			{"LeaseNoClientID", func() error {
				_, err := s.C.QueueLease(ctx, &pb.QueueLeaseRequest{QueueName: "bad", BatchSize: 1, RequestTimeout: "1s"})
				return err
			}, 400, []string{"client_id"}},
			{"LeaseWaitTooShort", func() error {
				_, err := s.C.QueueLease(ctx, &pb.QueueLeaseRequest{QueueName: "bad", BatchSize: 1, ClientId: "c", RequestTimeout: "9ms"})
				return err
			}, 400, []string{"request timeout is invalid", "10ms"}},
			{"LeaseWaitTooLong", func() error {
				_, err := s.C.QueueLease(ctx, &pb.QueueLeaseRequest{QueueName: "bad", BatchSize: 1, ClientId: "c", RequestTimeout: "16m"})
				return err
			}, 400, []string{"request timeout is invalid", "15m"}},
			{"CompleteEmpty", func() error {
				return s.C.QueueComplete(ctx, &pb.QueueCompleteRequest{QueueName: "bad"})
			}, 400, []string{"ids", "at least one"}},
			{"CompleteMalformedID", func() error {
				return s.C.QueueComplete(ctx, &pb.QueueCompleteRequest{QueueName: "bad", Ids: []string{"not-an-id"}})
			}, 400, []string{"ids", "not-an-id"}},
			{"CompleteNotLeased", func() error {
				return s.C.QueueComplete(ctx, &pb.QueueCompleteRequest{QueueName: "bad", Ids: []string{before[1].Id}})
			}, 400, []string{before[1].Id, "not leased"}},
			{"PartitionDoesNotExist", func() error {
				return s.C.QueueComplete(ctx, &pb.QueueCompleteRequest{QueueName: "bad", Partition: 7, Ids: []string{leased.Items[0].Id}})
			}, 400, []string{"partition", "7"}},
			{"ListPartitionDoesNotExist", func() error {
				_, err := s.C.StorageItemsList(ctx, &pb.StorageItemsListRequest{QueueName: "bad", Partition: 3})
				return err
			}, 400, []string{"partition", "3"}},
			{"RetryReleaseWithDead", func() error {
				return servertest.RetryErr(s.C.QueueRetry(ctx, &pb.QueueRetryRequest{QueueName: "bad", Items: []*pb.QueueRetryItem{{Id: leased.Items[0].Id, Dead: true, Release: true}}}))
			}, 400, []string{"release and dead"}},
			{"RetryAtFarInThePast", func() error {
				return servertest.RetryErr(s.C.QueueRetry(ctx, &pb.QueueRetryRequest{QueueName: "bad", Items: []*pb.QueueRetryItem{{Id: leased.Items[0].Id, RetryAt: servertest.At(time.Now().Add(-48 * time.Hour))}}}))
			}, 400, []string{"retry_at", "in the past"}},
			{"RetryErrorTooLong", func() error {
				return servertest.RetryErr(s.C.QueueRetry(ctx, &pb.QueueRetryRequest{QueueName: "bad", Items: []*pb.QueueRetryItem{{Id: leased.Items[0].Id, Error: strings.Repeat("e", 4097)}}}))
			}, 400, []string{"error", "4097", "4096"}},
			{"RetryNotLeased", func() error {
				return servertest.RetryErr(s.C.QueueRetry(ctx, &pb.QueueRetryRequest{QueueName: "bad", Items: []*pb.QueueRetryItem{{Id: leased.Items[0].Id}, {Id: before[1].Id}}}))
			}, 400, []string{before[1].Id, "not leased"}},
			{"RenewEmpty", func() error {
				return renewErr(s.C.QueueRenew(ctx, &pb.QueueRenewRequest{QueueName: "bad"}))
			}, 400, []string{"ids", "at least one"}},
			{"RenewMalformedID", func() error {
				return renewErr(s.C.QueueRenew(ctx, &pb.QueueRenewRequest{QueueName: "bad", Ids: []string{"not-an-id"}}))
			}, 400, []string{"ids", "not-an-id"}},
			{"RenewNotLeased", func() error {
				return renewErr(s.C.QueueRenew(ctx, &pb.QueueRenewRequest{QueueName: "bad", Ids: []string{leased.Items[0].Id, before[1].Id, "vvvvvvvvvvvvu"}}))
			}, 400, []string{"'" + before[1].Id + "', 'vvvvvvvvvvvvu' are not leased"}},
			{"RenewDuplicateID", func() error {
				return renewErr(s.C.QueueRenew(ctx, &pb.QueueRenewRequest{QueueName: "bad", Ids: []string{leased.Items[0].Id, leased.Items[0].Id}}))
			}, 400, []string{leased.Items[0].Id, "more than once"}},
			{"RenewLeaseTimeoutNotAboveZero", func() error {
				return renewErr(s.C.QueueRenew(ctx, &pb.QueueRenewRequest{QueueName: "bad", Ids: []string{leased.Items[0].Id}, LeaseTimeout: "-1s"}))
			}, 400, []string{"lease_timeout", "-1s", "above 0"}},
			{"RenewLeaseTimeoutTooLong", func() error {
				return renewErr(s.C.QueueRenew(ctx, &pb.QueueRenewRequest{QueueName: "bad", Ids: []string{leased.Items[0].Id}, LeaseTimeout: "8761h"}))
			}, 400, []string{"lease_timeout", "8761h", "8760h"}},
			{"RenewPartitionDoesNotExist", func() error {
				return renewErr(s.C.QueueRenew(ctx, &pb.QueueRenewRequest{QueueName: "bad", Partition: 7, Ids: []string{leased.Items[0].Id}}))
			}, 400, []string{"partition", "7"}},
			{"ListLimitTooBig", func() error {
				_, err := s.C.StorageItemsList(ctx, &pb.StorageItemsListRequest{QueueName: "bad", Limit: 65537})
				return err
			}, 400, []string{"limit", "65536"}},
			{"ReducePartitions", func() error {
				s.CreateQueue(&pb.QueueInfo{QueueName: "three", RequestedPartitions: 3})
				return s.C.QueuesUpdate(ctx, &pb.QueueInfo{QueueName: "three", RequestedPartitions: 2})
			}, 400, []string{"requested_partitions", "cannot be reduced"}},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				servertest.RequireCode(t, c.call(), c.code, c.parts...)
			})
		}

		endpoint := s.D.Endpoint()
		post := func(path, contentType string, body []byte) (int, string) {
			req, err := http.NewRequest(http.MethodPost, endpoint+path, bytes.NewReader(body))
			require.NoError(t, err)
			req.Header.Set("Content-Type", contentType)
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, string(b)
		}
		t.Run("MalformedJSON", func(t *testing.T) {
			code, body := post("/v1/queue.produce", "application/json", []byte(`{"queue_name": "bad", "items": [`))
			assert.Equal(t, 455, code)
			assert.Contains(t, body, "invalid request body")
		})
		t.Run("UnknownJSONField", func(t *testing.T) {
			code, body := post("/v1/queue.produce", "application/json", []byte(`{"queue_name": "bad", "colour": "red", "items": [{"utf8": "x"}]}`))
			assert.Equal(t, 455, code)
			assert.Contains(t, body, "colour")
		})
		t.Run("JSONAcceptsBothFieldNames", func(t *testing.T) {
			code, body := post("/v1/queues.info", "application/json", []byte(`{"queueName": "bad"}`))
			assert.Equal(t, 200, code, body)
			code, body = post("/v1/queues.info", "application/json", []byte(`{"queue_name": "bad"}`))
			assert.Equal(t, 200, code, body)
			assert.Contains(t, body, `"queue_name":"bad"`)
		})
		t.Run("MalformedProtobuf", func(t *testing.T) {
			code, body := post("/v1/queue.produce", "application/protobuf", []byte{0x0a, 0xff, 0xff, 0xff})
			assert.Equal(t, 455, code)
			assert.Contains(t, body, "invalid request body")
		})
		t.Run("UnsupportedContentType", func(t *testing.T) {
			code, body := post("/v1/queue.produce", "text/plain", []byte("hello"))
			assert.Equal(t, 455, code)
			assert.Contains(t, body, "Content-Type")
		})
		t.Run("UnknownPath", func(t *testing.T) {
			code, _ := post("/v1/queue.explode", "application/json", []byte(`{}`))
			assert.Equal(t, 501, code)
		})
		t.Run("WrongMethod", func(t *testing.T) {
			resp, err := http.Get(endpoint + "/v1/queue.produce")
			require.NoError(t, err)
			resp.Body.Close()
			assert.Equal(t, 400, resp.StatusCode)
		})
		t.Run("HealthAndMetrics", func(t *testing.T) {
			for _, p := range []string{"/health", "/metrics"} {
				resp, err := http.Get(endpoint + p)
				require.NoError(t, err)
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				assert.Equal(t, 200, resp.StatusCode, p)
				if p == "/metrics" {
					assert.Contains(t, string(b), "styx_http_requests_total")
				}
			}
		})
		t.Run("GarbageNeverPanics", func(t *testing.T) {
			// Every path with assorted garbage: never a 500. (Some of it is
			// valid, so it goes to a queue of its own.)
			s.CreateQueue(&pb.QueueInfo{QueueName: "trash"})
			garbage := [][]byte{nil, []byte("{}"), []byte("null"), []byte(`{"items":[null]}`), []byte{0xff, 0x00, 0x12}, []byte(`{"queue_name":"trash","items":[{}]}`)}
			for path := range paths() {
				for _, g := range garbage {
					for _, ct := range []string{"application/json", "application/protobuf"} {
						code, body := post(path, ct, g)
						assert.NotEqual(t, 500, code, "%s %s %q: %s", path, ct, g, body)
					}
				}
			}
		})
		t.Run("NothingChanged", func(t *testing.T) {
			after := s.AllItems("bad")
			require.Len(t, after, len(before))
			for i := range before {
				assert.True(t, proto.Equal(before[i], after[i]), "item %d changed:\n%v\n%v", i, before[i], after[i])
			}
		})
		_ = styx.CodeBadRequest
	})
}

func paths() map[string]bool {
	return map[string]bool{
		"/v1/queue.produce": true, "/v1/queue.lease": true, "/v1/queue.complete": true, "/v1/queue.retry": true,
		"/v1/queue.stats": true, "/v1/queue.clear": true, "/v1/queue.reload": true, "/v1/queues.create": true,
		"/v1/queues.update": true, "/v1/queues.list": true, "/v1/queues.info": true, "/v1/queues.delete": true,
		"/v1/storage/items.list": true, "/v1/storage/scheduled.list": true, "/v1/storage/items.import": true,
		"/v1/storage/items.delete": true, "/v1/queue.renew": true,
	}
}

// renewErr is the error of a QueueRenew call.
func renewErr(_ *pb.QueueRenewResponse, err error) error { return err }

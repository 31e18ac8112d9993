package servertest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/timestamppb"

	styx "github.com/styxq/styx"
	pb "github.com/styxq/styx/styxpb"
	"github.com/styxq/styx/styxtest"
)

// The HTTP client helpers: each call goes over the wire through the Go
// client (or the AWS SDK) and fails the test on an unexpected error.

// CreateQueue creates a queue.
func (s *Server) CreateQueue(info *pb.QueueInfo) {
	s.T.Helper()
	require.NoError(s.T, s.C.QueuesCreate(ctx, info))
}

// Produce produces one item per payload (kind "test", reference
// "ref-<payload>"), in one request.
func (s *Server) Produce(queue string, payloads ...string) {
	s.T.Helper()
	req := &pb.QueueProduceRequest{QueueName: queue, RequestTimeout: "1m"}
	for _, p := range payloads {
		req.Items = append(req.Items, &pb.QueueProduceItem{Bytes: []byte(p), Kind: "test", Reference: "ref-" + p})
	}
	require.NoError(s.T, s.C.QueueProduce(ctx, req))
}

// Lease leases up to n items, waiting up to 5s (of the server's time: on a
// fake clock, 30s of real time bound the call instead).
func (s *Server) Lease(queue string, n int32) *pb.QueueLeaseResponse {
	s.T.Helper()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	res, err := s.C.QueueLease(ctx, &pb.QueueLeaseRequest{QueueName: queue, BatchSize: n, ClientId: s.T.Name(), RequestTimeout: "5s"})
	require.NoError(s.T, err)
	return res
}

// LeaseNone asserts that a short lease finds nothing: a request timeout of
// 50ms ends it with the retry code. On a fake clock, whose request timeouts
// never pass unless advanced, the client gives up after 50ms of real time,
// and LeaseNone waits until the server has dropped the abandoned lease: one
// left waiting would take the next item that comes due.
func (s *Server) LeaseNone(queue string) {
	s.T.Helper()
	if s.Clock != nil {
		ctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		res, err := s.C.QueueLease(ctx, &pb.QueueLeaseRequest{QueueName: queue, BatchSize: 10, ClientId: s.T.Name(), RequestTimeout: "1m"})
		cancel()
		require.Error(s.T, err, "lease from queue %s got %v", queue, res)
		require.ErrorIs(s.T, err, context.DeadlineExceeded)
		WaitStat(s.T, s, queue, func(st *pb.QueueLogicalStats) bool { return st.LeaseWaiting == 0 })
		return
	}
	_, err := s.C.QueueLease(ctx, &pb.QueueLeaseRequest{QueueName: queue, BatchSize: 10, ClientId: s.T.Name(), RequestTimeout: "50ms"})
	require.Error(s.T, err)
	require.Equal(s.T, styx.CodeRetry, styx.ErrorCode(err), err.Error())
}

// Retry retries items and returns what became of each.
func (s *Server) Retry(queue string, partition int32, items ...*pb.QueueRetryItem) []*pb.QueueRetryOutcome {
	s.T.Helper()
	res, err := s.C.QueueRetry(ctx, &pb.QueueRetryRequest{QueueName: queue, Partition: partition, Items: items})
	require.NoError(s.T, err)
	return res.Outcomes
}

// RetryErr is the error of a QueueRetry call.
func RetryErr(_ *pb.QueueRetryResponse, err error) error { return err }

// Complete completes the items ids of a partition.
func (s *Server) Complete(queue string, partition int32, ids ...string) {
	s.T.Helper()
	require.NoError(s.T, s.C.QueueComplete(ctx, &pb.QueueCompleteRequest{QueueName: queue, Partition: partition, Ids: ids}))
}

// Items lists the items of every partition of a queue that
// storage/items.list lists: every item but the scheduled ones.
func (s *Server) Items(queue string) []*pb.StorageItem {
	s.T.Helper()
	return s.List(queue, s.C.StorageItemsList)
}

// AllItems lists every item of every partition of a queue, scheduled ones
// included (storage/items.list, then storage/scheduled.list).
func (s *Server) AllItems(queue string) []*pb.StorageItem {
	s.T.Helper()
	return append(s.Items(queue), s.List(queue, s.C.StorageScheduledList)...)
}

// List pages through one of the storage lists (call) on every partition
// of a queue, 1000 items a page.
func (s *Server) List(queue string, call func(context.Context, *pb.StorageItemsListRequest) (*pb.StorageItemsListResponse, error)) []*pb.StorageItem {
	s.T.Helper()
	info, err := s.C.QueuesInfo(ctx, &pb.QueuesInfoRequest{QueueName: queue})
	require.NoError(s.T, err)
	var all []*pb.StorageItem
	for p := range info.RequestedPartitions {
		pivot := ""
		for {
			res, err := call(ctx, &pb.StorageItemsListRequest{QueueName: queue, Partition: p, Pivot: pivot, Limit: 1000})
			require.NoError(s.T, err)
			page := res.Items
			if pivot != "" && len(page) > 0 && page[0].Id == pivot {
				page = page[1:] // the pivot is inclusive: seen on the last page
			}
			all = append(all, page...)
			if len(res.Items) < 1000 {
				break
			}
			pivot = res.Items[len(res.Items)-1].Id
		}
	}
	return all
}

// WaitItems polls until queue holds n items (as Items lists them) and
// returns them.
func (s *Server) WaitItems(queue string, n int) []*pb.StorageItem {
	s.T.Helper()
	var got []*pb.StorageItem
	Eventually(s.T, func() bool { got = s.Items(queue); return len(got) == n }, "queue %s should hold %d items", queue, n)
	return got
}

// WaitStat polls queue.stats of s until cond holds for the queue's one
// logical queue.
func WaitStat(t *testing.T, s *Server, queue string, cond func(*pb.QueueLogicalStats) bool) {
	t.Helper()
	Eventually(t, func() bool {
		st, err := s.C.QueueStats(ctx, &pb.QueueStatsRequest{QueueName: queue})
		return err == nil && len(st.LogicalQueues) == 1 && cond(st.LogicalQueues[0])
	}, "stats of %s", queue)
}

// Client returns a Go client of s sending key (none when empty), closed
// when the test ends.
func (s *Server) Client(key string) *styx.Client {
	s.T.Helper()
	c, err := styx.NewClient(styx.ClientConfig{Endpoint: s.Endpoint, APIKey: key})
	require.NoError(s.T, err)
	s.T.Cleanup(c.Close)
	return c
}

// NewKey creates a key with s.C and returns its secret.
func (s *Server) NewKey(name string, scopes []string, queues ...string) string {
	s.T.Helper()
	res, err := s.C.KeysCreate(ctx, &pb.KeysCreateRequest{Name: name, Scopes: scopes, Queues: queues})
	require.NoError(s.T, err)
	require.Equal(s.T, name, res.Name)
	require.NotEmpty(s.T, res.Key)
	return res.Key
}

// SQSClient is the real AWS SDK's SQS client pointed at s, with static
// credentials (any signature is accepted without --auth) and no retries,
// so each call is one request.
func (s *Server) SQSClient(keyID, secret string) *awssqs.Client {
	return awssqs.New(awssqs.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(s.Endpoint),
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: keyID, SecretAccessKey: secret}, nil
		}),
		Retryer:    aws.NopRetryer{},
		HTTPClient: styxtest.AWSHTTPClient(),
	})
}

// Eventually polls cond every 10ms until it holds or 30s pass. The bound
// is for work that never ends, not a speed check: most of the service
// tests run side by side (t.Parallel, four at a time) beside other
// packages on a loaded machine, where a redrive task's end on a second
// node once took more than the 10s this was.
func Eventually(t *testing.T, cond func() bool, msg string, args ...any) {
	t.Helper()
	require.Eventually(t, cond, 30*time.Second, 10*time.Millisecond, append([]any{msg}, args...)...)
}

// At is t as a protobuf timestamp.
func At(t time.Time) *timestamppb.Timestamp { return timestamppb.New(t) }

// RequireCode asserts err is a /v1 client error with code and a message
// containing each of parts.
func RequireCode(t *testing.T, err error, code int, parts ...string) {
	t.Helper()
	require.Error(t, err)
	require.Equal(t, code, styx.ErrorCode(err), err.Error())
	for _, p := range parts {
		require.Contains(t, err.Error(), p)
	}
}

// RequireSQSError asserts err is the SQS error code (the SDK's ErrorCode,
// which is the legacy code of x-amzn-query-error when it is sent) with a
// message containing each of parts.
func RequireSQSError(t *testing.T, err error, code string, parts ...string) {
	t.Helper()
	require.Error(t, err)
	var ae smithy.APIError
	require.True(t, errors.As(err, &ae), "not an API error: %v", err)
	require.Equal(t, code, ae.ErrorCode(), err.Error())
	for _, p := range parts {
		require.Contains(t, ae.ErrorMessage(), p)
	}
}

package service_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/timestamppb"

	styx "github.com/styxq/styx"
	"github.com/styxq/styx/internal/servertest"
	pb "github.com/styxq/styx/styxpb"
)

// The range every backend stores (Unix nanoseconds in an int64), as the
// messages give it.
const (
	minTimeText = "1677-09-21T00:12:43.145224192Z"
	maxTimeText = "2262-04-11T23:47:16.854775807Z"
)

// TestTimesOutOfRange checks that every time a client sends is refused
// with a 400 naming the field and the range storage keeps when it lies
// outside 1677-09-21..2262-04-11, and that nothing is stored: such a time
// used to wrap (a year-2300 enqueue_at became 1715, ready at once).
func TestTimesOutOfRange(t *testing.T) {
	t.Parallel()
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.Start(t, b)
		createDLQ(s, &pb.QueueInfo{QueueName: "times-dlq"})
		s.CreateQueue(&pb.QueueInfo{QueueName: "times", DeadQueue: "times-dlq"})
		s.Produce("times", "keep")
		leased := s.Lease("times", 1)
		require.Len(t, leased.Items, 1)
		before := s.Items("times")

		for _, year := range []int{2300, 1600} {
			bad := timestamppb.New(time.Date(year, 1, 1, 0, 0, 0, 0, time.UTC))
			good := servertest.At(time.Now().Add(time.Hour))
			t.Run(fmt.Sprint(year), func(t *testing.T) {
				t.Run("ProduceEnqueueAt", func(t *testing.T) {
					err := s.C.QueueProduce(ctx, &pb.QueueProduceRequest{QueueName: "times", Items: []*pb.QueueProduceItem{
						{Utf8: "good", EnqueueAt: good}, {Utf8: "bad", EnqueueAt: bad},
					}})
					servertest.RequireCode(t, err, styx.CodeBadRequest, "items[1].enqueue_at", minTimeText, maxTimeText)
				})
				t.Run("RetryAt", func(t *testing.T) {
					_, err := s.C.QueueRetry(ctx, &pb.QueueRetryRequest{QueueName: "times", Partition: leased.Partition,
						Items: []*pb.QueueRetryItem{{Id: leased.Items[0].Id, RetryAt: bad}}})
					servertest.RequireCode(t, err, styx.CodeBadRequest, "items[0].retry_at", minTimeText, maxTimeText)
				})
				fields := []struct {
					name string
					set  func(*pb.StorageItem)
				}{
					{"created_at", func(it *pb.StorageItem) { it.CreatedAt = bad }},
					{"expire_deadline", func(it *pb.StorageItem) { it.ExpireDeadline = bad }},
					{"enqueue_at", func(it *pb.StorageItem) { it.EnqueueAt = bad }},
					{"lease_deadline", func(it *pb.StorageItem) { it.IsLeased, it.LeaseDeadline = true, bad }},
					{"dead_at", func(it *pb.StorageItem) { it.DeadReason, it.SourceQueue, it.DeadAt = "explicit", "times", bad }},
					{"errors[1].at", func(it *pb.StorageItem) {
						it.Errors = []*pb.AttemptError{{Attempt: 1, Error: "e1", At: good}, {Attempt: 2, Error: "e2", At: bad}}
					}},
				}
				for _, f := range fields {
					t.Run("Import/"+f.name, func(t *testing.T) {
						it := &pb.StorageItem{Payload: []byte("bad"), Attempts: 1}
						f.set(it)
						_, err := s.C.StorageItemsImport(ctx, &pb.StorageItemsImportRequest{QueueName: "times",
							Items: []*pb.StorageItem{{Payload: []byte("good")}, it}})
						servertest.RequireCode(t, err, styx.CodeBadRequest, "items[1]."+f.name, minTimeText, maxTimeText)
					})
				}
				for _, name := range []string{"dead_after", "dead_before"} {
					t.Run("DeadFilter/"+name, func(t *testing.T) {
						f := &pb.DeadFilter{}
						if name == "dead_after" {
							f.DeadAfter = bad
						} else {
							f.DeadBefore = bad
						}
						_, err := s.C.DeadList(ctx, &pb.DeadListRequest{QueueName: "times-dlq", Filter: f})
						servertest.RequireCode(t, err, styx.CodeBadRequest, "filter."+name, minTimeText, maxTimeText)
						_, err = s.C.DeadRedrive(ctx, &pb.DeadRedriveRequest{QueueName: "times-dlq", Filter: f})
						servertest.RequireCode(t, err, styx.CodeBadRequest, "filter."+name, minTimeText, maxTimeText)
					})
				}
			})
		}

		t.Run("NothingStored", func(t *testing.T) {
			require.Equal(t, before, s.Items("times"))
			require.Empty(t, s.Items("times-dlq"))
			// The lease the refused retries named is still live: it completes.
			s.Complete("times", leased.Partition, leased.Items[0].Id)
			require.Empty(t, s.Items("times"))
		})
		t.Run("EdgesOfTheRange", func(t *testing.T) {
			// The range's own ends are kept as they are.
			lo, hi := time.Unix(0, -1<<63).UTC(), time.Unix(0, 1<<63-1).UTC()
			res, err := s.C.StorageItemsImport(ctx, &pb.StorageItemsImportRequest{QueueName: "times", Items: []*pb.StorageItem{
				{Payload: []byte("edges"), CreatedAt: servertest.At(lo), EnqueueAt: servertest.At(hi), ExpireDeadline: servertest.At(hi)},
			}})
			require.NoError(t, err)
			require.Len(t, res.Items, 1)
			got := res.Items[0]
			require.True(t, lo.Equal(got.CreatedAt.AsTime()), "created_at %s", got.CreatedAt.AsTime())
			require.True(t, hi.Equal(got.EnqueueAt.AsTime()), "enqueue_at %s", got.EnqueueAt.AsTime())
			require.True(t, hi.Equal(got.ExpireDeadline.AsTime()), "expire_deadline %s", got.ExpireDeadline.AsTime())
			s.LeaseNone("times") // scheduled for 2262, not ready
		})
	})
}

// TestBadImportAmongGoodProduces checks that an import with a time storage
// cannot keep, sent while other clients produce to the same queue, is
// refused alone: every good produce is answered and stored. Such an import
// used to fail the whole loop iteration, and with it the produces batched
// with it.
func TestBadImportAmongGoodProduces(t *testing.T) {
	t.Parallel()
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.Start(t, b)
		s.CreateQueue(&pb.QueueInfo{QueueName: "shared", RequestedPartitions: 2})
		const producers, produces = 4, 25
		bad := servertest.At(time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC))

		var wg sync.WaitGroup
		done := make(chan struct{})
		errs := make(chan error, producers*produces)
		for p := range producers {
			c, err := styx.NewClient(styx.ClientConfig{Endpoint: s.D.Endpoint()})
			require.NoError(t, err)
			t.Cleanup(c.Close)
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range produces {
					errs <- c.QueueProduce(ctx, &pb.QueueProduceRequest{QueueName: "shared", RequestTimeout: "1m",
						Items: []*pb.QueueProduceItem{{Utf8: fmt.Sprintf("p%d-%d", p, i)}}})
				}
			}()
		}
		go func() { wg.Wait(); close(done) }()

		importer, err := styx.NewClient(styx.ClientConfig{Endpoint: s.D.Endpoint()})
		require.NoError(t, err)
		t.Cleanup(importer.Close)
		var imports, refused int
		var other []error // import answers other than the 400, checked after the produces
		for stop := false; !stop; imports++ {
			select {
			case <-done:
				stop = true
			default:
			}
			_, err := importer.StorageItemsImport(ctx, &pb.StorageItemsImportRequest{QueueName: "shared", Items: []*pb.StorageItem{
				{Payload: []byte("bad-dead"), SourceQueue: "elsewhere", DeadReason: "explicit", DeadAt: bad},
				{Payload: []byte("bad-errors"), Errors: []*pb.AttemptError{{Attempt: 1, Error: "boom", At: bad}}},
			}})
			if styx.ErrorCode(err) == styx.CodeBadRequest {
				refused++
				servertest.RequireCode(t, err, styx.CodeBadRequest, "items[0].dead_at", minTimeText, maxTimeText)
			} else {
				other = append(other, err)
			}
		}
		close(errs)
		failed := 0
		for err := range errs {
			if err != nil {
				failed++
				t.Errorf("a good produce failed: %v", err)
			}
		}
		require.Zero(t, failed, "of %d produces, with %d bad imports", producers*produces, imports)
		require.Empty(t, other, "bad imports answered other than 400")
		require.Equal(t, imports, refused)
		got := s.Items("shared")
		require.Len(t, got, producers*produces)
		for _, it := range got {
			require.Regexp(t, `^p\d-\d+$`, string(it.Payload))
		}
	})
}

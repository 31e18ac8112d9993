package service_test

import (
	"context"
	"fmt"
	"math/big"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/styxq/styx/internal/servertest"
	pb "github.com/styxq/styx/styxpb"
)

// TestStatsMatchListing drives a random mix of produce (ready, scheduled,
// expiring), lease, complete, retry (requeued, scheduled, dead), renew,
// lease expiry, scheduled items coming due, expiry, dead-lettering,
// redrive, delete and clear through the client, restarting the server
// twice on the way, and after every step requires queue.stats of the
// source queue and of its dead-letter queue to equal what a full listing
// (storage/items.list and storage/scheduled.list) recomputes (ADR 0024: the
// counts stats answers from are kept as items change and rebuilt at a
// load; a count that drifted fails here).
func TestStatsMatchListing(t *testing.T) {
	t.Parallel()
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.StartFake(t, b)
		s.CreateQueue(&pb.QueueInfo{QueueName: "st-dead", LeaseTimeout: "1m", ExpireTimeout: "1h", RequestedPartitions: 2})
		s.CreateQueue(&pb.QueueInfo{QueueName: "st", LeaseTimeout: "30s", ExpireTimeout: "10m", MaxAttempts: 3,
			DeadQueue: "st-dead", RequestedPartitions: 3})
		seed := uint64(time.Now().UnixNano())
		t.Logf("seed %d", seed)
		rng := rand.New(rand.NewPCG(seed, 0))
		type held struct {
			p  int32
			id string
		}
		leased := map[string][]held{} // by queue
		n := 0
		for step := range 120 {
			q := "st"
			if rng.IntN(4) == 0 {
				q = "st-dead"
			}
			var did string
			switch k := rng.IntN(13); {
			case k < 3 && q == "st":
				req := &pb.QueueProduceRequest{QueueName: q, RequestTimeout: "1m"}
				for range 1 + rng.IntN(5) {
					n++
					it := &pb.QueueProduceItem{Bytes: fmt.Appendf(nil, "item-%d", n), Kind: "k"}
					if rng.IntN(3) == 0 {
						it.EnqueueAt = timestamppb.New(s.Now().Add(time.Duration(1+rng.IntN(90)) * time.Second))
					}
					req.Items = append(req.Items, it)
				}
				require.NoError(t, s.C.QueueProduce(ctx, req))
				did = fmt.Sprintf("produce %d", len(req.Items))
			case k < 5:
				res := leaseUpTo(s, q, int32(1+rng.IntN(4)))
				for _, it := range res.Items {
					leased[q] = append(leased[q], held{res.Partition, it.Id})
				}
				did = fmt.Sprintf("lease %d", len(res.Items))
			case k < 9 && len(leased[q]) > 0:
				i := rng.IntN(len(leased[q]))
				it := leased[q][i]
				leased[q] = slices.Delete(leased[q], i, i+1)
				var err error
				switch rng.IntN(5) {
				case 0:
					err = s.C.QueueComplete(ctx, &pb.QueueCompleteRequest{QueueName: q, Partition: it.p, Ids: []string{it.id}})
					did = "complete"
				case 1:
					_, err = s.C.QueueRetry(ctx, &pb.QueueRetryRequest{QueueName: q, Partition: it.p,
						Items: []*pb.QueueRetryItem{{Id: it.id, Error: "boom " + it.id}}})
					did = "retry"
				case 2:
					_, err = s.C.QueueRetry(ctx, &pb.QueueRetryRequest{QueueName: q, Partition: it.p,
						Items: []*pb.QueueRetryItem{{Id: it.id, Error: "later", RetryAt: timestamppb.New(s.Now().Add(20 * time.Second))}}})
					did = "retry later"
				case 3:
					_, err = s.C.QueueRetry(ctx, &pb.QueueRetryRequest{QueueName: q, Partition: it.p,
						Items: []*pb.QueueRetryItem{{Id: it.id, Dead: true, Error: "fatal"}}})
					did = "retry dead"
				default:
					_, err = s.C.QueueRenew(ctx, &pb.QueueRenewRequest{QueueName: q, Partition: it.p, Ids: []string{it.id},
						LeaseTimeout: fmt.Sprintf("%ds", 10+rng.IntN(60))})
					leased[q] = append(leased[q], it)
					did = "renew"
				}
				_ = err // a lease that ended meanwhile answers an error: nothing changes
			case k == 9:
				s.Advance(time.Duration(1+rng.IntN(40))*time.Second, "st", "st-dead")
				did = "advance"
			case k == 10 && q == "st-dead":
				task, err := s.C.DeadRedrive(ctx, &pb.DeadRedriveRequest{QueueName: "st-dead", All: true})
				require.NoError(t, err)
				servertest.Eventually(t, func() bool {
					got, err := s.C.RedrivesGet(ctx, &pb.RedriveTaskRequest{TaskId: task.TaskId})
					return err == nil && got.Status != "running"
				}, "redrive ends")
				did = "redrive"
			case k == 11 && step%3 == 0:
				c := &pb.QueueClearRequest{QueueName: q}
				switch rng.IntN(3) {
				case 0:
					c.Queue = true
				case 1:
					c.Scheduled = true
				default:
					c.Destructive = true
				}
				require.NoError(t, s.C.QueueClear(ctx, c))
				leased[q] = nil
				did = fmt.Sprintf("clear %v", c)
			case k == 12 && (step == 40 || step == 80):
				s.Restart()
				did = "restart"
			default:
				continue
			}
			for _, name := range []string{"st", "st-dead"} {
				requireStatsMatch(t, s, name, fmt.Sprintf("step %d (%s on %s)", step, did, q))
			}
		}
		s.Restart()
		for _, name := range []string{"st", "st-dead"} {
			requireStatsMatch(t, s, name, "after the last restart")
		}
	})
}

// leaseUpTo leases up to n items, none when none is ready: on the fake
// clock a waiting lease never times out, so the client gives up after
// 200ms of real time and the server drops the abandoned lease.
func leaseUpTo(s *servertest.Server, queue string, n int32) *pb.QueueLeaseResponse {
	s.T.Helper()
	c, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	res, err := s.C.QueueLease(c, &pb.QueueLeaseRequest{QueueName: queue, BatchSize: n, ClientId: s.T.Name(), RequestTimeout: "1m"})
	if err != nil {
		require.ErrorIs(s.T, err, context.DeadlineExceeded)
		servertest.WaitStat(s.T, s, queue, func(st *pb.QueueLogicalStats) bool { return st.LeaseWaiting == 0 })
		return &pb.QueueLeaseResponse{}
	}
	return res
}

// requireStatsMatch requires queue.stats of queue to equal what its full
// listing recomputes. Dead-letter moves are asynchronous: it compares a
// listing with the stats read before and after it, once those agree.
func requireStatsMatch(t *testing.T, s *servertest.Server, queue, when string) {
	t.Helper()
	info, err := s.C.QueuesInfo(ctx, &pb.QueuesInfoRequest{QueueName: queue})
	require.NoError(t, err)
	leaseTimeout, err := time.ParseDuration(info.LeaseTimeout)
	require.NoError(t, err)
	var last string
	for range 100 {
		before, err := s.C.QueueStats(ctx, &pb.QueueStatsRequest{QueueName: queue})
		require.NoError(t, err)
		items, sched := byPartition(s, queue, s.C.StorageItemsList), byPartition(s, queue, s.C.StorageScheduledList)
		after, err := s.C.QueueStats(ctx, &pb.QueueStatsRequest{QueueName: queue})
		require.NoError(t, err)
		if fmt.Sprint(before) != fmt.Sprint(after) {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		want := recount(queue, info.RequestedPartitions, items, sched, s.Now(), leaseTimeout)
		if last = diffStats(before, want); last == "" {
			return
		}
		time.Sleep(10 * time.Millisecond) // a move may have ended between the reads
	}
	t.Fatalf("%s: queue.stats of %s differs from its listing: %s", when, queue, last)
}

// byPartition lists every item of queue that call lists, by partition
// (storage/items.list or storage/scheduled.list).
func byPartition(s *servertest.Server, queue string, call listCall) [][]*pb.StorageItem {
	s.T.Helper()
	info, err := s.C.QueuesInfo(ctx, &pb.QueuesInfoRequest{QueueName: queue})
	require.NoError(s.T, err)
	out := make([][]*pb.StorageItem, info.RequestedPartitions)
	for p := range info.RequestedPartitions {
		pivot := ""
		for {
			res, err := call(ctx, &pb.StorageItemsListRequest{QueueName: queue, Partition: p, Pivot: pivot, Limit: 100})
			require.NoError(s.T, err)
			page := res.Items
			if pivot != "" && len(page) > 0 && page[0].Id == pivot {
				page = page[1:] // the pivot is inclusive: seen on the last page
			}
			out[p] = append(out[p], page...)
			if len(res.Items) < 100 {
				break
			}
			pivot = res.Items[len(res.Items)-1].Id
		}
	}
	return out
}

type listCall = func(context.Context, *pb.StorageItemsListRequest) (*pb.StorageItemsListResponse, error)

// recount is queue.stats as a full listing says it should be: items
// (storage/items.list) and sched (storage/scheduled.list) at time now.
func recount(queue string, partitions int32, items, sched [][]*pb.StorageItem, now time.Time, leaseTimeout time.Duration) *pb.QueueStatsResponse {
	out := &pb.QueueStatsResponse{QueueName: queue}
	ls := &pb.QueueLogicalStats{}
	ages := make([]*big.Int, partitions)
	leasedAges := make([]*big.Int, partitions)
	for p := range partitions {
		ls.Partitions = append(ls.Partitions, &pb.QueuePartitionStats{Partition: p})
		ages[p], leasedAges[p] = new(big.Int), new(big.Int)
	}
	var oldest *timestamppb.Timestamp
	type listed struct {
		p         int32
		scheduled bool
		it        *pb.StorageItem
	}
	var all []listed
	for p := range partitions {
		for _, it := range items[p] {
			all = append(all, listed{p, false, it})
		}
		for _, it := range sched[p] {
			all = append(all, listed{p, true, it})
		}
	}
	for _, x := range all {
		p, it := x.p, x.it
		ps := ls.Partitions[p]
		ps.Total++
		ages[p].Add(ages[p], big.NewInt(now.UnixNano()-it.CreatedAt.AsTime().UnixNano()))
		if oldest == nil || it.CreatedAt.AsTime().Before(oldest.AsTime()) {
			oldest = it.CreatedAt
		}
		switch {
		case it.IsLeased:
			ps.TotalLeased++
			ls.InFlight++
			leasedAges[p].Add(leasedAges[p], big.NewInt(now.UnixNano()-(it.LeaseDeadline.AsTime().UnixNano()-int64(leaseTimeout))))
		case it.Attempts > 0 && it.DeadReason == "":
			ps.Failures++
		}
		if x.scheduled {
			ps.Scheduled++
		}
		if it.DeadReason != "" && it.SourceQueue != "" && it.SourceQueue != queue {
			if out.DeadByReason == nil {
				out.DeadByReason, out.DeadBySource = map[string]int64{}, map[string]int64{}
			}
			out.DeadByReason[it.DeadReason]++
			out.DeadBySource[it.SourceQueue]++
		}
	}
	for p, ps := range ls.Partitions {
		ps.AverageAge, ps.AverageLeasedAge = mean(ages[p], ps.Total), mean(leasedAges[p], ps.TotalLeased)
	}
	out.LogicalQueues = []*pb.QueueLogicalStats{ls}
	out.OldestCreatedAt = oldest
	return out
}

func mean(sum *big.Int, n int32) string {
	if n == 0 {
		return time.Duration(0).String()
	}
	return time.Duration(new(big.Int).Quo(sum, big.NewInt(int64(n))).Int64()).String()
}

// diffStats says how got differs from want, "" when it does not. Average
// ages may differ by a nanosecond (PostgreSQL rounds, the embedded
// backends truncate); LeaseWaiting is not compared.
func diffStats(got, want *pb.QueueStatsResponse) string {
	if len(got.LogicalQueues) != 1 {
		return fmt.Sprintf("%d logical queues", len(got.LogicalQueues))
	}
	g, w := got.LogicalQueues[0], want.LogicalQueues[0]
	if g.InFlight != w.InFlight || len(g.Partitions) != len(w.Partitions) {
		return fmt.Sprintf("in flight %d, %d partitions; want %d, %d", g.InFlight, len(g.Partitions), w.InFlight, len(w.Partitions))
	}
	for i, gp := range g.Partitions {
		wp := w.Partitions[i]
		if gp.Partition != wp.Partition || gp.Total != wp.Total || gp.TotalLeased != wp.TotalLeased || gp.Failures != wp.Failures ||
			gp.Scheduled != wp.Scheduled || !near(gp.AverageAge, wp.AverageAge) || !near(gp.AverageLeasedAge, wp.AverageLeasedAge) {
			return fmt.Sprintf("partition %d: %v; want %v", i, gp, wp)
		}
	}
	if fmt.Sprint(got.DeadByReason) != fmt.Sprint(want.DeadByReason) || fmt.Sprint(got.DeadBySource) != fmt.Sprint(want.DeadBySource) {
		return fmt.Sprintf("dead by reason %v, by source %v; want %v, %v", got.DeadByReason, got.DeadBySource, want.DeadByReason, want.DeadBySource)
	}
	if !got.OldestCreatedAt.AsTime().Equal(want.OldestCreatedAt.AsTime()) || (got.OldestCreatedAt == nil) != (want.OldestCreatedAt == nil) {
		return fmt.Sprintf("oldest %v; want %v", got.OldestCreatedAt.AsTime(), want.OldestCreatedAt.AsTime())
	}
	return ""
}

// near reports whether two durations as stats words them are within 1ns.
func near(a, b string) bool {
	x, err1 := time.ParseDuration(a)
	y, err2 := time.ParseDuration(b)
	return err1 == nil && err2 == nil && x-y <= 1 && y-x <= 1
}

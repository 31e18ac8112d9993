package service_test

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	styx "github.com/styxq/styx"
	"github.com/styxq/styx/internal/groupcheck"
	"github.com/styxq/styx/internal/queue"
	"github.com/styxq/styx/internal/servertest"
	pb "github.com/styxq/styx/styxpb"
)

// Ordered item groups through the /v1 API (issue 37, docs/groups.md): the
// rules are the conformance rows' (internal/queue/queuetest/groups.go);
// these tests load them from concurrent consumers over HTTP and check the
// recorded history with internal/groupcheck.

// groupLoad is a concurrent load on one ordered queue: groups x perGroup
// items produced in rounds while consumers lease (batches of 1 to 5),
// complete, retry (10%: the item and the rest of its group's run in the
// batch) and abandon (3%: left to expire, with the rest of the run).
type groupLoad struct {
	queue              string
	groups, perGroup   int
	consumers          int
	leaseTimeout       string
	nodes              []*servertest.Server
	history            *groupcheck.History
	completed, retried atomic.Int64
	abandoned, leases  atomic.Int64
}

// groupStall is how long a group load goes with no item leased or
// completed before its consumers give up (a deadlock, a group held for
// ever): no healthy run, however loaded the machine, goes a minute without
// a lease.
const groupStall = time.Minute

// progressWatch tells a loop that has made no progress for a while: the
// stall it measures ends whenever the progress count it is given changes.
// Safe for concurrent use.
type progressWatch struct {
	mu   sync.Mutex
	last int64
	at   time.Time
}

// stalled reports whether moved (a count that grows with progress) has not
// changed for stall.
func (p *progressWatch) stalled(moved int64, stall time.Duration) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	if p.at.IsZero() || moved != p.last {
		p.last, p.at = moved, now
		return false
	}
	return now.Sub(p.at) >= stall
}

// groupItem names item i of group g in its payload.
func groupItem(g, i int) string { return fmt.Sprintf("g%d-%d", g, i) }

// parseGroupItem returns the item index of a payload made by groupItem.
func parseGroupItem(t *testing.T, p []byte) int {
	_, idx, ok := strings.Cut(string(p), "-")
	require.True(t, ok, "payload %q", p)
	i, err := strconv.Atoi(idx)
	require.NoError(t, err)
	return i
}

func (l *groupLoad) run(t *testing.T) {
	l.history = groupcheck.New()
	l.nodes[0].CreateQueue(&pb.QueueInfo{QueueName: l.queue, LeaseTimeout: l.leaseTimeout, RequestedPartitions: 3, Ordered: true})
	total := int64(l.groups * l.perGroup)
	var wg sync.WaitGroup
	wg.Go(func() { // the producer: one item of every group per request, groups shuffled
		for i := range l.perGroup {
			req := &pb.QueueProduceRequest{QueueName: l.queue, RequestTimeout: "1m"}
			for _, g := range rand.Perm(l.groups) {
				req.Items = append(req.Items, &pb.QueueProduceItem{Bytes: []byte(groupItem(g, i)), Group: fmt.Sprint("g", g)})
			}
			if !assert.NoError(t, l.nodes[i%len(l.nodes)].C.QueueProduce(ctx, req)) {
				return
			}
			for g := range l.groups {
				l.history.Produced(fmt.Sprint("g", g), 1)
			}
		}
	})
	// Bounded by progress, not by the clock (issue 48): the consumers stop
	// when no item was leased or completed for groupStall; a loaded
	// machine only makes the run longer.
	var watch progressWatch
	for c := range l.consumers {
		node := l.nodes[c%len(l.nodes)]
		wg.Go(func() {
			for l.completed.Load() < total && !watch.stalled(l.completed.Load()+l.leases.Load(), groupStall) {
				res, err := node.C.QueueLease(ctx, &pb.QueueLeaseRequest{QueueName: l.queue, BatchSize: int32(1 + rand.IntN(5)),
					ClientId: fmt.Sprint("c", c), RequestTimeout: "300ms"})
				got := time.Now()
				if styx.ErrorCode(err) == styx.CodeRetry {
					continue
				}
				if !assert.NoError(t, err) {
					return
				}
				l.leases.Add(1)
				l.consume(t, node, fmt.Sprint("node", c%len(l.nodes)), res, got)
			}
		})
	}
	wg.Wait()
	require.Equal(t, total, l.completed.Load(), "every item completed before the run stalled (%s with no lease or complete)", groupStall)
	t.Logf("%d items in %d groups, %d consumers on %d nodes: %d leases, %d retried, %d abandoned to expire",
		total, l.groups, l.consumers, len(l.nodes), l.leases.Load(), l.retried.Load(), l.abandoned.Load())
	require.Empty(t, l.history.Check(true, 10))
}

// consume handles one lease answer: each group's run of items in order.
func (l *groupLoad) consume(t *testing.T, node *servertest.Server, name string, res *pb.QueueLeaseResponse, got time.Time) {
	items := make([]groupcheck.Item, len(res.Items))
	for k, it := range res.Items {
		if !assert.NotEmpty(t, it.Group, "item %s has its group", it.Bytes) {
			return
		}
		items[k] = groupcheck.Item{Group: it.Group, Index: parseGroupItem(t, it.Bytes)}
	}
	deadline := res.Items[0].LeaseDeadline.AsTime()
	for _, r := range groupcheck.Runs(items, got, deadline, name) {
		lease := r.Lease
		ids := make([]string, len(r.At))
		for j, k := range r.At {
			ids[j] = res.Items[k].Id
		}
		// Complete a prefix, then retry or abandon the rest (or none).
		cut := len(ids)
		action := rand.IntN(100)
		if action < 13 {
			cut = rand.IntN(len(ids))
		}
		if cut > 0 {
			lease.End = groupcheck.EndAt(time.Now(), deadline)
			err := node.C.QueueComplete(ctx, &pb.QueueCompleteRequest{QueueName: l.queue, Partition: res.Partition, Ids: ids[:cut]})
			if err != nil { // the lease expired first (a slow machine): it ended at its deadline
				assert.Contains(t, err.Error(), "not leased")
				lease.End = deadline
				l.history.Add(lease)
				continue
			}
			lease.Completed = lease.Items[:cut]
			l.completed.Add(int64(cut))
		}
		switch {
		case cut == len(ids):
		case action < 10:
			retry := &pb.QueueRetryRequest{QueueName: l.queue, Partition: res.Partition}
			for _, id := range ids[cut:] {
				retry.Items = append(retry.Items, &pb.QueueRetryItem{Id: id, Error: "failed on purpose"})
			}
			lease.End = groupcheck.EndAt(time.Now(), deadline)
			if _, err := node.C.QueueRetry(ctx, retry); err != nil {
				assert.Contains(t, err.Error(), "not leased")
				lease.End = deadline
			}
			l.retried.Add(1)
		default:
			lease.End = deadline
			l.abandoned.Add(1)
		}
		l.history.Add(lease)
	}
}

// TestGroupsOrderedUnderLoad: 8 consumers on one ordered queue with
// retries and lease expiries never hold two leases of a group at once and
// get each group's items in produce order, on every backend.
func TestGroupsOrderedUnderLoad(t *testing.T) {
	t.Parallel()
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		l := &groupLoad{queue: "ordered", groups: 16, perGroup: 25, consumers: 8, leaseTimeout: "2s", nodes: []*servertest.Server{servertest.Start(t, b)}}
		l.run(t)
	})
}

// TestClusterGroupsOrderedUnderLoad is TestGroupsOrderedUnderLoad with the
// consumers and the producer spread over two nodes on one PostgreSQL
// database: across nodes, no group ever has two leases at once.
func TestClusterGroupsOrderedUnderLoad(t *testing.T) {
	t.Parallel()
	l := &groupLoad{queue: "ordered", groups: 16, perGroup: 25, consumers: 8, leaseTimeout: "2s", nodes: cluster(t, 2)}
	l.run(t)
}

// TestGroupsValidation: bad groups and group policies are refused naming
// the field; ordered is set at creation only; queues.info shows both.
func TestGroupsValidation(t *testing.T) {
	t.Parallel()
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.Start(t, b)
		s.CreateQueue(&pb.QueueInfo{QueueName: "plain"})
		s.CreateQueue(&pb.QueueInfo{QueueName: "fifo", Ordered: true, GroupDeadPolicy: "hold"})
		info, err := s.C.QueuesInfo(ctx, &pb.QueuesInfoRequest{QueueName: "fifo"})
		require.NoError(t, err)
		require.True(t, info.Ordered)
		require.Equal(t, "hold", info.GroupDeadPolicy)

		for _, c := range []struct {
			group, want string
		}{
			{strings.Repeat("g", 129), "items[0].group; 129 bytes, the limit is 128"},
			{"has space", "items[0].group; byte 3 (0x20)"},
			{"é", "items[0].group; byte 0 (0xc3)"},
		} {
			err := s.C.QueueProduce(ctx, &pb.QueueProduceRequest{QueueName: "fifo", RequestTimeout: "5s",
				Items: []*pb.QueueProduceItem{{Bytes: []byte("x"), Group: c.group}}})
			servertest.RequireCode(t, err, 400, c.want)
		}
		servertest.RequireCode(t, s.C.QueuesCreate(ctx, &pb.QueueInfo{QueueName: "bad", GroupDeadPolicy: "hold"}), 400,
			"invalid group_dead_policy; 'hold' needs an ordered queue")
		servertest.RequireCode(t, s.C.QueuesCreate(ctx, &pb.QueueInfo{QueueName: "bad", Ordered: true, GroupDeadPolicy: "wait"}), 400,
			"invalid group_dead_policy; 'wait' is not 'continue' or 'hold'")
		servertest.RequireCode(t, s.C.QueuesUpdate(ctx, &pb.QueueInfo{QueueName: "plain", Ordered: true, Reference: "r"}), 400,
			"ordered is set when a queue is created")
		require.NoError(t, s.C.QueuesUpdate(ctx, &pb.QueueInfo{QueueName: "fifo", GroupDeadPolicy: "continue"}))
		info, err = s.C.QueuesInfo(ctx, &pb.QueuesInfoRequest{QueueName: "fifo"})
		require.NoError(t, err)
		require.Equal(t, "continue", info.GroupDeadPolicy)
		require.Empty(t, s.Items("fifo"), "nothing stored by a refused produce")

		// An import keeps a group in its partition and checks it.
		s.CreateQueue(&pb.QueueInfo{QueueName: "parts", Ordered: true, RequestedPartitions: 4})
		home := queue.GroupPartition("g", 4)
		imp := func(p int32, group string) error {
			_, err := s.C.StorageItemsImport(ctx, &pb.StorageItemsImportRequest{QueueName: "parts", Partition: p,
				Items: []*pb.StorageItem{{Payload: []byte("x"), Group: group}}})
			return err
		}
		servertest.RequireCode(t, imp((home+1)%4, "g"), 400, fmt.Sprintf("invalid items[0].group; the items of group 'g' go to partition %d of queue 'parts', not %d", home, (home+1)%4))
		servertest.RequireCode(t, imp(home, strings.Repeat("g", 129)), 400, "invalid items[0].group; 129 bytes, the limit is 128")
		require.NoError(t, imp(home, "g"))
		items := s.Items("parts")
		require.Len(t, items, 1)
		require.Equal(t, "g", items[0].Group)
	})
}

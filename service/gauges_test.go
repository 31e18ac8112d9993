package service_test

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	styx "github.com/styxq/styx"
	"github.com/styxq/styx/internal/servertest"
	pb "github.com/styxq/styx/styxpb"
)

// itemCounts are a queue's items by state.
type itemCounts struct{ Ready, Leased, Scheduled int }

// gauges returns a queue's styx_queue_items gauges and oldest-item age from
// one scrape; ok is false when the queue has no series.
func gauges(s *servertest.Server, queue string) (c itemCounts, oldest float64, ok bool) {
	s.T.Helper()
	text := scrape(s)
	value := func(series string) (float64, bool) {
		l := metricLine(text, series)
		if l == "" {
			return 0, false
		}
		v, err := strconv.ParseFloat(strings.TrimPrefix(l, series+" "), 64)
		require.NoError(s.T, err, l)
		return v, true
	}
	r, ok1 := value(`styx_queue_items{queue="` + queue + `",state="ready"}`)
	l, ok2 := value(`styx_queue_items{queue="` + queue + `",state="leased"}`)
	sc, ok3 := value(`styx_queue_items{queue="` + queue + `",state="scheduled"}`)
	oldest, ok4 := value(`styx_queue_oldest_item_age_seconds{queue="` + queue + `"}`)
	return itemCounts{Ready: int(r), Leased: int(l), Scheduled: int(sc)}, oldest, ok1 && ok2 && ok3 && ok4
}

// statsCounts recounts a queue by queue.stats.
func statsCounts(s *servertest.Server, queue string) (itemCounts, int, error) {
	st, err := s.C.QueueStats(ctx, &pb.QueueStatsRequest{QueueName: queue})
	if err != nil {
		return itemCounts{}, 0, err
	}
	var c itemCounts
	total := 0
	for _, lq := range st.LogicalQueues {
		for _, p := range lq.Partitions {
			total += int(p.Total)
			c.Leased += int(p.TotalLeased)
			c.Scheduled += int(p.Scheduled)
		}
	}
	c.Ready = total - c.Leased - c.Scheduled
	return c, total, nil
}

// requireGauges checks, on a quiet queue, that the gauges of each queue
// equal its true counts by queue.stats, whose total storage.items.list
// confirms, and that its oldest-item age is the listing's (within 2s).
func requireGauges(s *servertest.Server, step string, queues ...string) {
	s.T.Helper()
	for _, q := range queues {
		want, total, err := statsCounts(s, q)
		require.NoError(s.T, err)
		items := s.AllItems(q)
		require.Equal(s.T, total, len(items), "%s: queue.stats and storage's item lists of %s agree", step, q)
		var oldest time.Time
		for _, it := range items {
			if t := it.CreatedAt.AsTime(); oldest.IsZero() || t.Before(oldest) {
				oldest = t
			}
		}
		age := time.Duration(0)
		if !oldest.IsZero() {
			age = s.Now().Sub(oldest)
		}
		got, gotAge, ok := gauges(s, q)
		require.True(s.T, ok, "%s: queue %s has its gauges", step, q)
		require.Equal(s.T, want, got, "%s: gauges of %s", step, q)
		require.InDelta(s.T, age.Seconds(), gotAge, 2, "%s: oldest item age of %s", step, q)
	}
}

// eventuallyGauges waits until the gauges of queue equal want and its
// counts by queue.stats (lifecycle work runs on the server's timers).
func eventuallyGauges(s *servertest.Server, step, queue string, want itemCounts) {
	s.T.Helper()
	var got, truth itemCounts
	var err error
	require.Eventually(s.T, func() bool {
		if truth, _, err = statsCounts(s, queue); err != nil {
			return false
		}
		got, _, _ = gauges(s, queue)
		return got == truth && got == want
	}, 10*time.Second, 20*time.Millisecond, "%s: gauges of %s: got %+v, true %+v (%v), want %+v", step, queue, &got, &truth, &err, want)
}

// TestQueueGauges checks, on every backend, that styx_queue_items and
// styx_queue_oldest_item_age_seconds equal the queue's true counts (by
// queue.stats and storage.items.list) after every way items change state
// or queue: on PostgreSQL they are read from the kept counts, not
// recounted. The server runs on a fake clock: the lifecycle's deadlines
// pass by s.advance.
func TestQueueGauges(t *testing.T) {
	t.Parallel()
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.StartFake(t, b)
		dlq := withDLQ(s, "g", &pb.QueueInfo{MaxAttempts: 3, LeaseTimeout: "1m", RequestedPartitions: 2})
		later := servertest.At(s.Now().Add(time.Hour))

		s.Produce("g", "a", "b", "c", "d", "e")
		require.NoError(t, s.C.QueueProduce(ctx, &pb.QueueProduceRequest{QueueName: "g", Items: []*pb.QueueProduceItem{
			{Bytes: []byte("s1"), EnqueueAt: later}, {Bytes: []byte("s2"), EnqueueAt: later}}}))
		requireGauges(s, "produce", "g", dlq)
		got, _, _ := gauges(s, "g")
		require.Equal(t, itemCounts{Ready: 5, Scheduled: 2}, got)

		l := s.Lease("g", 3)
		require.Len(t, l.Items, 3)
		requireGauges(s, "lease", "g")
		s.Complete("g", l.Partition, l.Items[0].Id)
		requireGauges(s, "complete", "g")
		s.Retry("g", l.Partition, &pb.QueueRetryItem{Id: l.Items[1].Id, Error: "again"})
		requireGauges(s, "retry: requeue", "g")
		s.Retry("g", l.Partition, &pb.QueueRetryItem{Id: l.Items[2].Id, RetryAt: later})
		requireGauges(s, "retry: schedule", "g")
		got, _, _ = gauges(s, "g")
		require.Equal(t, itemCounts{Ready: 3, Scheduled: 3}, got)

		l = s.Lease("g", 1)
		s.Retry("g", l.Partition, &pb.QueueRetryItem{Id: l.Items[0].Id, Dead: true})
		requireGauges(s, "retry: dead-letter move", "g", dlq)
		got, _, _ = gauges(s, dlq)
		require.Equal(t, itemCounts{Ready: 1}, got, "the dead-letter queue gains what the source loses")

		// Lifecycle: a lease that expires is requeued; items past their
		// expire deadline move to the dead-letter queue.
		edlq := withDLQ(s, "life", &pb.QueueInfo{LeaseTimeout: "1s", ExpireTimeout: "4s"})
		s.Produce("life", "x", "y")
		s.Lease("life", 1)
		requireGauges(s, "lease", "life")
		s.Advance(1001*time.Millisecond, "life")
		eventuallyGauges(s, "lease expiry", "life", itemCounts{Ready: 2})
		s.Advance(3*time.Second, "life")
		eventuallyGauges(s, "expiry: source", "life", itemCounts{})
		eventuallyGauges(s, "expiry: dead-letter queue", edlq, itemCounts{Ready: 2})
		requireGauges(s, "after the lifecycle", "life", edlq)

		// storage.items.import: ready and scheduled.
		_, err := s.C.StorageItemsImport(ctx, &pb.StorageItemsImportRequest{QueueName: "g", Partition: 1, Items: []*pb.StorageItem{
			{Payload: []byte("i1")}, {Payload: []byte("i2")}, {Payload: []byte("i3"), EnqueueAt: later},
			{Payload: []byte("old"), CreatedAt: servertest.At(s.Now().Add(-time.Hour))},
		}})
		require.NoError(t, err)
		requireGauges(s, "import", "g")
		_, oldest, _ := gauges(s, "g")
		require.InDelta(t, time.Hour.Seconds(), oldest, 60, "an imported item keeps its created_at")

		// storage.items.delete.
		res, err := s.C.StorageItemsList(ctx, &pb.StorageItemsListRequest{QueueName: "g", Partition: 1, Limit: 100})
		require.NoError(t, err)
		var ids []string
		for _, it := range res.Items {
			if string(it.Payload) != "old" && len(ids) < 2 {
				ids = append(ids, it.Id)
			}
		}
		require.Len(t, ids, 2)
		require.NoError(t, s.C.StorageItemsDelete(ctx, &pb.StorageItemsDeleteRequest{QueueName: "g", Partition: 1, Ids: ids}))
		requireGauges(s, "storage delete", "g")

		l = s.Lease("g", 2)
		require.NoError(t, s.C.QueueClear(ctx, &pb.QueueClearRequest{QueueName: "g", Queue: true}))
		requireGauges(s, "clear: ready", "g")
		got, _, _ = gauges(s, "g")
		require.Zero(t, got.Ready)
		require.NotZero(t, got.Leased)
		require.NotZero(t, got.Scheduled)
		require.NoError(t, s.C.QueueClear(ctx, &pb.QueueClearRequest{QueueName: "g", Scheduled: true}))
		requireGauges(s, "clear: scheduled", "g")
		got, _, _ = gauges(s, "g")
		require.Equal(t, itemCounts{Leased: len(l.Items)}, got)
		s.Produce("g", "p", "q")
		require.NoError(t, s.C.QueueClear(ctx, &pb.QueueClearRequest{QueueName: "g", Destructive: true}))
		requireGauges(s, "clear: destructive", "g")
		got, oldest, _ = gauges(s, "g")
		require.Equal(t, itemCounts{}, got)
		require.Zero(t, oldest, "an empty queue's oldest age is 0")

		// A deleted queue's gauges go; one re-created under its name starts
		// from 0.
		s.Produce("g", "r", "s")
		require.NoError(t, s.C.QueuesDelete(ctx, &pb.QueuesDeleteRequest{QueueName: "g", Force: true}))
		_, _, ok := gauges(s, "g")
		require.False(t, ok, "a deleted queue has no gauges")
		s.CreateQueue(&pb.QueueInfo{QueueName: "g"})
		requireGauges(s, "re-created", "g", dlq)
		got, _, _ = gauges(s, "g")
		require.Equal(t, itemCounts{}, got)
	})
}

// TestClusterGauges runs producers and consumers (completing, requeueing,
// scheduling, dead-lettering and keeping leases) on two nodes at once;
// when they stop, both nodes' gauges equal the true counts of the queue and
// of its dead-letter queue.
func TestClusterGauges(t *testing.T) {
	t.Parallel()
	nodes := cluster(t, 2)
	dlq := withDLQ(nodes[0], "busy", &pb.QueueInfo{LeaseTimeout: "1m", MaxAttempts: 3, RequestedPartitions: 3})
	const producers, batches, batch = 4, 10, 25
	var producing, consuming sync.WaitGroup
	for p := range producers {
		node := nodes[p%2]
		producing.Go(func() {
			for i := range batches {
				req := &pb.QueueProduceRequest{QueueName: "busy", RequestTimeout: "1m"}
				for j := range batch {
					it := &pb.QueueProduceItem{Bytes: []byte(fmt.Sprint(p, i, j))}
					if j%10 == 0 {
						it.EnqueueAt = servertest.At(time.Now().Add(time.Hour))
					}
					req.Items = append(req.Items, it)
				}
				assert.NoError(t, node.C.QueueProduce(ctx, req))
			}
		})
	}
	done := make(chan struct{})
	stop := sync.OnceFunc(func() { close(done); consuming.Wait() })
	defer stop()
	for c := range 4 {
		node := nodes[c%2]
		consuming.Go(func() {
			for k := 0; ; k++ {
				select {
				case <-done:
					return
				default:
				}
				res, err := node.C.QueueLease(ctx, &pb.QueueLeaseRequest{QueueName: "busy", BatchSize: 10,
					ClientId: fmt.Sprint("c", c), RequestTimeout: "100ms"})
				if styx.ErrorCode(err) == styx.CodeRetry {
					continue
				}
				if !assert.NoError(t, err) {
					return
				}
				var complete []string
				var retry []*pb.QueueRetryItem
				for i, it := range res.Items {
					switch (k + i) % 5 {
					case 0:
						retry = append(retry, &pb.QueueRetryItem{Id: it.Id, Error: "again"})
					case 1:
						retry = append(retry, &pb.QueueRetryItem{Id: it.Id, RetryAt: servertest.At(time.Now().Add(time.Hour))})
					case 2:
						retry = append(retry, &pb.QueueRetryItem{Id: it.Id, Dead: true})
					case 3:
						// Kept leased.
					default:
						complete = append(complete, it.Id)
					}
				}
				if len(complete) > 0 {
					assert.NoError(t, node.C.QueueComplete(ctx, &pb.QueueCompleteRequest{QueueName: "busy", Partition: res.Partition, Ids: complete}))
				}
				if len(retry) > 0 {
					_, err := node.C.QueueRetry(ctx, &pb.QueueRetryRequest{QueueName: "busy", Partition: res.Partition, Items: retry})
					assert.NoError(t, err)
				}
			}
		})
	}
	producing.Wait()
	require.Eventually(t, func() bool {
		c, _, err := statsCounts(nodes[0], "busy")
		return err == nil && c.Ready == 0
	}, 60*time.Second, 50*time.Millisecond, "the consumers take every ready item")
	stop()
	for i, n := range nodes {
		requireGauges(n, fmt.Sprint("node ", i), "busy", dlq)
	}
	got, _, _ := gauges(nodes[0], "busy")
	dead, _, _ := gauges(nodes[0], dlq)
	t.Logf("busy %+v, %s %+v", got, dlq, dead)
	require.NotZero(t, got.Leased)
	require.NotZero(t, got.Scheduled)
	require.NotZero(t, dead.Ready)
}

package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	styx "github.com/styxq/styx"
	"github.com/styxq/styx/internal/groupcheck"
	pb "github.com/styxq/styx/styxpb"
)

// TestHardStopOrderedGroups kills the server with SIGKILL under a load of
// ordered groups (issue 37's crash test): producers send each item with a
// deduplication id and resend it until acknowledged, across the kill;
// consumers lease, complete and now and then retry. After the restart the
// load runs to the end. Then: no acknowledged item is lost (every one was
// completed), none is delivered after its acknowledged complete (once a
// later lease of its consumer was acknowledged: a complete is answered
// before its fsync, which that lease's covers, ADR 0033) or out of
// its group's order, no group had two leases at once (internal/groupcheck
// over the whole history, the kill included), and an item produced again
// after the restart with the deduplication id it had before the kill is not
// stored again.
func TestHardStopOrderedGroups(t *testing.T) {
	if testing.Short() {
		t.Skip("starts server processes")
	}
	const groups, perGroup, producers, consumers = 12, 60, 4, 4
	dir, addr := t.TempDir(), freePort(t)
	p := startServerProcess(t, dir, addr)
	c := client(t, p.endpoint)
	ctx := context.Background()
	require.NoError(t, c.QueuesCreate(ctx, &pb.QueueInfo{QueueName: "fifo", LeaseTimeout: "3s", RequestedPartitions: 2, Ordered: true}))

	h := groupcheck.New()
	var (
		mu        sync.Mutex
		completed = map[string]int{}  // payload -> acknowledged completes
		unknown   = map[string]bool{} // payloads of completes without an answer
		acked     atomic.Int64
		finished  atomic.Bool // every item acknowledged and the queue empty
		down      atomic.Bool // the server is being killed and restarted
	)
	// empty reports whether the queue holds no item.
	empty := func() bool {
		st, err := c.QueueStats(ctx, &pb.QueueStatsRequest{QueueName: "fifo"})
		if err != nil {
			return false
		}
		for _, ls := range st.LogicalQueues {
			for _, ps := range ls.Partitions {
				if ps.Total > 0 {
					return false
				}
			}
		}
		return true
	}
	// retry runs call until it succeeds (the server may be down).
	retry := func(call func() error) {
		for {
			if call() == nil {
				return
			}
			time.Sleep(20 * time.Millisecond) // the server restarts: nothing to poll but the call itself
		}
	}
	var wg sync.WaitGroup
	for w := range producers {
		wg.Go(func() {
			for i := range perGroup {
				for g := w; g < groups; g += producers {
					payload := fmt.Sprintf("g%d-%d", g, i)
					req := &pb.QueueProduceRequest{QueueName: "fifo", RequestTimeout: "10s", Items: []*pb.QueueProduceItem{{
						Utf8: payload, Group: fmt.Sprint("g", g), DeduplicationId: payload}}}
					retry(func() error { return c.QueueProduce(ctx, req) })
					h.Produced(fmt.Sprint("g", g), 1)
					acked.Add(1)
				}
			}
		})
	}
	total := int64(groups * perGroup)
	for k := range consumers {
		wg.Go(func() {
			// pending are this consumer's leases whose complete was
			// acknowledged and not yet covered by a later acknowledged
			// write: settled as completed once one is, or as unknown when
			// the server dies first (the kill may undo them).
			var pending []groupcheck.Lease
			settle := func(covered bool) {
				mu.Lock()
				defer mu.Unlock()
				for _, l := range pending {
					if covered {
						for _, x := range l.Completed {
							completed[fmt.Sprintf("%s-%d", l.Group, x)]++
						}
					} else {
						l.Completed, l.Unknown = nil, l.Items
						for _, x := range l.Items {
							unknown[fmt.Sprintf("%s-%d", l.Group, x)] = true
						}
					}
					h.Add(l)
				}
				pending = pending[:0]
			}
			defer settle(true) // the load ran to its end: no kill after it
			for n := 0; !finished.Load(); n++ {
				res, err := c.QueueLease(ctx, &pb.QueueLeaseRequest{QueueName: "fifo", BatchSize: int32(1 + n%4), ClientId: fmt.Sprint("c", k), RequestTimeout: "300ms"})
				got := time.Now()
				if err != nil {
					if styx.ErrorCode(err) != styx.CodeRetry {
						settle(false)
						time.Sleep(20 * time.Millisecond) // down: the call is the poll
					} else if acked.Load() == total && empty() {
						finished.Store(true)
					}
					continue
				}
				settle(true) // a lease of items, acknowledged: its fsync covered them
				deadline := res.Items[0].LeaseDeadline.AsTime()
				items := make([]groupcheck.Item, len(res.Items))
				for k, it := range res.Items {
					_, idx, _ := strings.Cut(string(it.Bytes), "-")
					x, err := strconv.Atoi(idx)
					require.NoError(t, err)
					items[k] = groupcheck.Item{Group: it.Group, Index: x}
				}
				for _, r := range groupcheck.Runs(items, got, deadline, "") {
					l, g := &r.Lease, r.Lease.Group
					ids := make([]string, len(r.At))
					for j, k := range r.At {
						ids[j] = res.Items[k].Id
					}
					if n%10 == 0 { // retry the run: it comes back first in its group
						retryReq := &pb.QueueRetryRequest{QueueName: "fifo", Partition: res.Partition}
						for _, id := range ids {
							retryReq.Items = append(retryReq.Items, &pb.QueueRetryItem{Id: id})
						}
						l.End = groupcheck.EndAt(time.Now(), deadline)
						// Failed or not, the lease ends by its deadline; with no
						// answer the server may have died since the completes.
						if _, err := c.QueueRetry(ctx, retryReq); err == nil {
							settle(true) // a retry waits for its fsync, which covered them
						} else if down.Load() || styx.ErrorCode(err) == 0 {
							settle(false)
						}
						h.Add(*l)
						continue
					}
					l.End = groupcheck.EndAt(time.Now(), deadline)
					err := c.QueueComplete(ctx, &pb.QueueCompleteRequest{QueueName: "fifo", Partition: res.Partition, Ids: ids})
					switch {
					case err == nil:
						l.Completed = l.Items
						pending = append(pending, *l)
						continue // recorded once settled
					case down.Load() || styx.ErrorCode(err) == 0:
						// No answer: the complete may have happened, and the
						// server may have died since the pending ones.
						settle(false)
						l.Unknown = l.Items
						mu.Lock()
						for _, x := range l.Items {
							unknown[fmt.Sprintf("%s-%d", g, x)] = true
						}
						mu.Unlock()
					default:
						assert.Contains(t, err.Error(), "not leased", "only an expired lease refuses a complete")
					}
					h.Add(*l)
				}
			}
		})
	}
	require.Eventually(t, func() bool { return acked.Load() >= total/3 }, time.Minute, 5*time.Millisecond)
	down.Store(true)
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGKILL))
	_ = p.cmd.Wait()
	killedAt := acked.Load()
	startServerProcess(t, dir, addr) // stopped at the test's end
	down.Store(false)
	wg.Wait()

	// An id acknowledged before the kill is still deduplicated: its item,
	// completed since, is not stored again.
	require.NoError(t, c.QueueProduce(ctx, &pb.QueueProduceRequest{QueueName: "fifo", RequestTimeout: "10s",
		Items: []*pb.QueueProduceItem{{Utf8: "g0-0", Group: "g0", DeduplicationId: "g0-0"}}}))
	require.True(t, empty(), "the item resent with its deduplication id is not stored again")
	require.Empty(t, h.Check(false, 10))
	mu.Lock()
	defer mu.Unlock()
	for payload, n := range completed {
		require.Equal(t, 1, n, "item %s completed %d times", payload, n)
	}
	for g := range groups {
		for i := range perGroup {
			payload := fmt.Sprintf("g%d-%d", g, i)
			require.True(t, completed[payload] == 1 || unknown[payload], "acknowledged item %s lost: never completed", payload)
		}
	}
	t.Logf("%d of %d items acknowledged before SIGKILL; %d leases checked, %d completes acknowledged", killedAt, total, h.Len(), len(completed))
}

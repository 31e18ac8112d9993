package service_test

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/servertest"
	pb "github.com/styxq/styx/styxpb"
)

// TestNothingLostNothingDoubled runs consumers that complete, retry,
// release, dead-letter or abandon items at random, restarts the server in
// the middle, and checks that every item ends completed once or in the
// dead-letter queue once, never both and never lost.
func TestNothingLostNothingDoubled(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs for several seconds")
	}
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.Start(t, b)
		dlq := withDLQ(s, "inv", &pb.QueueInfo{MaxAttempts: 3, LeaseTimeout: "1s", RequestedPartitions: 2})
		const n = 400
		for i := 0; i < n; i += 50 {
			var batch []string
			for j := i; j < i+50; j++ {
				batch = append(batch, fmt.Sprint("p-", j))
			}
			s.Produce("inv", batch...)
		}

		var (
			pause     sync.RWMutex // held for writing while the server restarts
			mu        sync.Mutex
			completed = map[string]int{}
			stop      = make(chan struct{})
			wg        sync.WaitGroup
		)
		for c := range 4 {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(c), 7))
				for {
					select {
					case <-stop:
						return
					default:
					}
					pause.RLock()
					cl := s.C
					res, err := cl.QueueLease(ctx, &pb.QueueLeaseRequest{QueueName: "inv", BatchSize: 10, ClientId: fmt.Sprint("c", c), RequestTimeout: "100ms"})
					if err != nil || len(res.Items) == 0 {
						pause.RUnlock()
						continue
					}
					for _, it := range res.Items {
						var err error
						switch r := rng.IntN(10); {
						case r < 4:
							err = cl.QueueComplete(ctx, &pb.QueueCompleteRequest{QueueName: "inv", Partition: res.Partition, Ids: []string{it.Id}})
							if err == nil {
								mu.Lock()
								completed[string(it.Bytes)]++
								mu.Unlock()
							}
						case r < 7:
							_, err = cl.QueueRetry(ctx, &pb.QueueRetryRequest{QueueName: "inv", Partition: res.Partition, Items: []*pb.QueueRetryItem{{Id: it.Id, Error: "flaky"}}})
						case r < 8:
							_, err = cl.QueueRetry(ctx, &pb.QueueRetryRequest{QueueName: "inv", Partition: res.Partition, Items: []*pb.QueueRetryItem{{Id: it.Id, Dead: true}}})
						case r < 9:
							_, err = cl.QueueRetry(ctx, &pb.QueueRetryRequest{QueueName: "inv", Partition: res.Partition, Items: []*pb.QueueRetryItem{{Id: it.Id, Release: true}}})
						default:
							// abandoned: the lease expires and counts as an attempt
						}
						_ = err // a lease that expired meanwhile is refused; the item comes back
					}
					pause.RUnlock()
				}
			})
		}

		// Restart once some items have been handled. A liveness wait, not a
		// timing check: under a loaded machine (a parallel suite with -race
		// on PostgreSQL) the first quarter has taken over 10s, so it gets the
		// final wait's bound, polled as gently. The waits poll queue.stats's
		// totals (every item, leased and scheduled ones included), not a
		// listing: listing 400 items every 50 ms read each one's body and
		// was a third of the test's CPU on Pebble; the listing is checked
		// once at the end.
		require.Eventually(t, func() bool {
			pause.RLock()
			defer pause.RUnlock()
			total := queueTotal(s, "inv")
			return total >= 0 && total < n*3/4
		}, 60*time.Second, 50*time.Millisecond, "consumers make progress")
		pause.Lock()
		s.Restart()
		pause.Unlock()

		require.Eventually(t, func() bool {
			pause.RLock()
			defer pause.RUnlock()
			return queueTotal(s, "inv") == 0
		}, 60*time.Second, 50*time.Millisecond, "every item ends completed or dead")
		close(stop)
		wg.Wait()
		require.Empty(t, s.AllItems("inv"), "the listing agrees with queue.stats: no item left")

		dead := map[string]int{}
		for _, it := range s.Items(dlq) {
			dead[string(it.Payload)]++
		}
		for i := range n {
			p := fmt.Sprint("p-", i)
			c, d := completed[p], dead[p]
			assert.True(t, (c == 1 && d == 0) || (c == 0 && d == 1), "%s: completed %d times, %d copies in the DLQ", p, c, d)
		}
		assert.Len(t, dead, len(s.Items(dlq)), "no payload twice in the DLQ")
		t.Logf("%d completed, %d dead", len(completed), len(dead))
	})
}

// queueTotal returns how many items queue holds by queue.stats (every
// partition's total: ready, leased and scheduled), or -1 when the call
// fails (a restart).
func queueTotal(s *servertest.Server, queue string) int {
	st, err := s.C.QueueStats(ctx, &pb.QueueStatsRequest{QueueName: queue})
	if err != nil {
		return -1
	}
	n := 0
	for _, l := range st.LogicalQueues {
		for _, p := range l.Partitions {
			n += int(p.Total)
		}
	}
	return n
}

package clusters_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/backend/clusters"
	"github.com/styxq/styx/internal/backend/postgres"
	"github.com/styxq/styx/internal/pgtest"
	"github.com/styxq/styx/internal/queue"
	"github.com/styxq/styx/metrics"
)

// router opens a node over the clusters main (mainURL) and b (bURL).
func router(t *testing.T, mainURL, bURL string) *clusters.Router {
	t.Helper()
	r, err := clusters.Open(t.Context(), clusters.Config{
		Clusters: []clusters.Cluster{{Name: clusters.Main, URL: mainURL, Weight: 1}, {Name: "b", URL: bURL, Weight: 1}},
		Log:      slog.New(slog.NewTextHandler(io.Discard, nil)), Metrics: metrics.New(), MoveBatchItems: 50})
	require.NoError(t, err)
	t.Cleanup(r.Close)
	return r
}

// retry calls f until it succeeds, while it answers 453 (the queue
// moving, or a cluster's failure), for at most 30 s.
func retry(t *testing.T, what string, f func() error) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := f()
		if err == nil || !errors.Is(err, queue.ErrQueueMoving) || time.Now().After(deadline) {
			if err != nil {
				return fmt.Errorf("%s: %w", what, err)
			}
			return nil
		}
	}
}

// TestMoveUnderLoad moves a queue from main to b through one node while
// producers on both nodes (deduplication ids, retrying the 453s) and
// consumers on both nodes (completing) run: every acknowledged item is
// completed exactly once, leases taken before the fence complete after it
// through the other node under their ids, a produce repeated after the
// move with its deduplication ids stores nothing, and both nodes serve the
// queue from b.
func TestMoveUnderLoad(t *testing.T) {
	base := pgtest.BaseURL(t)
	mainURL, bURL := pgtest.SchemaURL(t, base), pgtest.SchemaURL(t, base)
	n1, n2 := router(t, mainURL, bURL), router(t, mainURL, bURL)
	ctx := t.Context()
	require.NoError(t, n1.Create(ctx, queue.QueueInfo{Name: "q", Cluster: clusters.Main, LeaseTimeout: time.Minute, Partitions: 2,
		Namespace: queue.DefaultNamespace}))
	q1, err := n1.Get("q")
	require.NoError(t, err)
	var pre []queue.ProduceItem
	for i := range 400 {
		id := fmt.Sprintf("pre-%d", i)
		pre = append(pre, queue.ProduceItem{Payload: []byte(id), DeduplicationID: id})
	}
	require.NoError(t, q1.Produce(ctx, pre))
	q2, err := n2.Get("q")
	require.NoError(t, err)
	held, err := q2.Lease(ctx, queue.LeaseParams{BatchSize: 5, ClientID: "held", Timeout: time.Second})
	require.NoError(t, err)
	require.Len(t, held.Items, 5)

	var mu sync.Mutex
	acked := map[string]bool{}
	for _, p := range pre {
		acked[string(p.Payload)] = true
	}
	completed := map[string]int{}
	for _, it := range held.Items {
		completed[string(it.Payload)]++ // completed below, after the move
	}
	moved := make(chan struct{})
	fenced := make(chan struct{})
	var fencedOnce sync.Once
	var producers, consumers sync.WaitGroup
	for p, n := range []*clusters.Router{n1, n2} {
		producers.Go(func() { // a producer: batches of 5 with deduplication ids, 20 batches after the move
			after := 0
			for i := 0; after < 20; i++ {
				select {
				case <-moved:
					after++
				default:
				}
				var items []queue.ProduceItem
				for k := range 5 {
					id := fmt.Sprintf("p%d-%d-%d", p, i, k)
					items = append(items, queue.ProduceItem{Payload: []byte(id), DeduplicationID: id})
				}
				err := retry(t, "produce", func() error {
					q, err := n.Get("q")
					if err == nil {
						err = q.Produce(ctx, items)
					}
					if errors.Is(err, queue.ErrQueueMoving) {
						fencedOnce.Do(func() { close(fenced) })
					}
					return err
				})
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				for _, it := range items {
					acked[string(it.Payload)] = true
				}
				mu.Unlock()
			}
		})
	}
	stop := make(chan struct{})
	for c, n := range []*clusters.Router{n1, n2} {
		consumers.Go(func() { // a consumer
			for {
				select {
				case <-stop:
					return
				default:
				}
				var res queue.LeaseResult
				err := retry(t, "lease", func() error {
					q, err := n.Get("q")
					if err == nil {
						res, err = q.Lease(ctx, queue.LeaseParams{BatchSize: 10, ClientID: fmt.Sprint("c", c), Timeout: 100 * time.Millisecond})
					}
					return err
				})
				if errors.Is(err, queue.ErrNoItems) || (err == nil && len(res.Items) == 0) {
					continue
				}
				if err != nil {
					t.Error(err)
					return
				}
				ids := make([]uint64, len(res.Items))
				for i, it := range res.Items {
					ids[i] = it.ID
				}
				if err := retry(t, "complete", func() error {
					q, err := n.Get("q")
					if err == nil {
						err = q.Complete(ctx, res.Partition, ids)
					}
					return err
				}); err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				for _, it := range res.Items {
					completed[string(it.Payload)]++
				}
				mu.Unlock()
			}
		})
	}

	// The copy waits, after its first batch, until a producer met the
	// fence: the load spans the move.
	metFence := time.Now().Add(15 * time.Second) // a deadline, not a pace: the fence is met within milliseconds
	var missed sync.Once
	clusters.SetMoveBatchHook(n1, func(ctx context.Context, p postgres.MoveProgress) {
		if p.Copied > 0 {
			select {
			case <-fenced:
				return
			default:
			}
			select {
			case <-fenced:
			case <-time.After(time.Until(metFence)):
				missed.Do(func() { t.Error("no producer met the fence: a produce was written while the queue was copied") })
			case <-ctx.Done():
			}
		}
	})
	res, err := n1.Move(ctx, "q", "b")
	require.NoError(t, err)
	close(moved)
	assert.Equal(t, clusters.Main, res.From)
	assert.Equal(t, "b", res.To)
	assert.GreaterOrEqual(t, res.Items, int64(400-5))
	for _, n := range []*clusters.Router{n1, n2} {
		require.Eventually(t, func() bool {
			info, err := n.Info(ctx, "q")
			return err == nil && info.Cluster == "b" && info.Move == nil
		},
			10*time.Second, 10*time.Millisecond)
	}
	// The leases taken before the fence, completed through the other node.
	ids := make([]uint64, len(held.Items))
	for i, it := range held.Items {
		ids[i] = it.ID
	}
	q1, err = n1.Get("q")
	require.NoError(t, err)
	require.NoError(t, q1.Complete(ctx, held.Partition, ids), "a lease taken before the fence is valid after it")
	// A produce repeated after the move: its deduplication ids hold.
	require.NoError(t, q1.Produce(ctx, pre[:10]))

	producers.Wait() // the consumers drain
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(completed) >= len(acked)
	}, 60*time.Second, 10*time.Millisecond)
	close(stop)
	consumers.Wait()
	mu.Lock()
	defer mu.Unlock()
	for id := range acked {
		assert.Equal(t, 1, completed[id], "item %s completed once", id)
	}
	assert.Len(t, completed, len(acked), "nothing completed that was not acknowledged")
	st, err := q1.Stats(ctx)
	require.NoError(t, err)
	total := 0
	for _, p := range st.Partitions {
		total += p.Total
	}
	assert.Zero(t, total, "nothing left")
}

// TestMoveInterrupted: the node that moves a queue closes mid-copy; the
// other node's sweep takes the move over and finishes it, nothing lost or
// doubled, and the source's rows go.
func TestMoveInterrupted(t *testing.T) {
	base := pgtest.BaseURL(t)
	mainURL, bURL := pgtest.SchemaURL(t, base), pgtest.SchemaURL(t, base)
	n1, n2 := router(t, mainURL, bURL), router(t, mainURL, bURL)
	ctx := t.Context()
	require.NoError(t, n1.Create(ctx, queue.QueueInfo{Name: "q", Cluster: clusters.Main, LeaseTimeout: time.Minute, Partitions: 1,
		Namespace: queue.DefaultNamespace}))
	q1, err := n1.Get("q")
	require.NoError(t, err)
	var items []queue.ProduceItem
	for i := range 300 {
		items = append(items, queue.ProduceItem{Payload: fmt.Appendf(nil, "i-%d", i)})
	}
	require.NoError(t, q1.Produce(ctx, items))

	midCopy := make(chan struct{})
	var once sync.Once
	clusters.SetMoveBatchHook(n1, func(ctx context.Context, p postgres.MoveProgress) {
		if p.Copied > 0 {
			once.Do(func() { close(midCopy) })
			<-ctx.Done() // held until the node closes
		}
	})
	moveErr := make(chan error, 1)
	go func() {
		_, err := n1.Move(ctx, "q", "b")
		moveErr <- err
	}()
	<-midCopy
	// n2 learns of the move from its cached placement (refreshed by a
	// notification, or its poll): wait for it; the move holds until n1
	// closes.
	var info queue.QueueInfo
	require.Eventually(t, func() bool {
		info, err = n2.Info(ctx, "q")
		return err == nil && info.Move != nil
	}, 30*time.Second, 10*time.Millisecond, "queues.info shows the move in progress")
	assert.Equal(t, "b", info.Move.To)
	assert.Equal(t, int64(300), info.Move.Total)
	assert.Equal(t, int64(50), info.Move.Copied)
	n1.Close()
	require.Error(t, <-moveErr, "the closed node's move did not finish")

	res, err := n2.Move(ctx, "q", "b") // waits for the sweep's run, or runs it
	require.NoError(t, err)
	assert.Equal(t, "b", res.To)
	require.Eventually(t, func() bool { info, err := n2.Info(ctx, "q"); return err == nil && info.Cluster == "b" },
		30*time.Second, 10*time.Millisecond)
	q2, err := n2.Get("q")
	require.NoError(t, err)
	got := map[string]bool{}
	for len(got) < 300 {
		l, err := q2.Lease(ctx, queue.LeaseParams{BatchSize: 100, ClientID: "c", Timeout: time.Second})
		require.NoError(t, err)
		for _, it := range l.Items {
			require.False(t, got[string(it.Payload)], "item %s twice", it.Payload)
			got[string(it.Payload)] = true
		}
	}
	st, err := q2.Stats(ctx)
	require.NoError(t, err)
	assert.Equal(t, 300, st.Partitions[0].Total, "nothing doubled")
	// The source's rows go (two refresh intervals after the switch, or at a
	// sweep).
	src, err := postgres.OpenStore(ctx, mainURL, 2)
	require.NoError(t, err)
	defer src.Close()
	require.Eventually(t, func() bool { _, err := src.FencedEpoch(ctx, "q"); return err != nil }, 30*time.Second, 50*time.Millisecond)
}

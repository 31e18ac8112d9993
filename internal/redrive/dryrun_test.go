package redrive

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/queue"
)

// TestDryRunEstimates: a dry run reads at most DryRunScan items; over a
// larger dead-letter queue its counts are scaled to the queue's size and
// it says so (Estimated, Warning), and over a smaller one they are exact.
func TestDryRunEstimates(t *testing.T) {
	ctx := context.Background()
	r, _ := newShared(t, func(*sharedStore, int, string) bool { return true })
	src, err := r.cfg.Queues.Get("q")
	require.NoError(t, err)
	items := make([]queue.ProduceItem, 40)
	for i := range items {
		items[i] = queue.ProduceItem{Payload: []byte("x")}
	}
	require.NoError(t, src.Produce(ctx, items))
	res, err := src.Lease(ctx, queue.LeaseParams{BatchSize: 40, ClientID: "c", Timeout: time.Second})
	require.NoError(t, err)
	var dead []queue.RetryItem
	for _, it := range res.Items {
		dead = append(dead, queue.RetryItem{ID: it.ID, Dead: true})
	}
	_, err = src.Retry(ctx, res.Partition, dead)
	require.NoError(t, err)
	dlq, err := r.cfg.Queues.Get("q-dead")
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		st, err := dlq.Stats(ctx)
		return err == nil && st.Partitions[0].Total == 40
	}, 10*time.Second, 10*time.Millisecond)

	exact, err := r.Start(ctx, StartParams{Queue: "q-dead", DryRun: true})
	require.NoError(t, err)
	require.False(t, exact.Estimated)
	require.Empty(t, exact.Warning)
	require.EqualValues(t, 40, exact.Matched)
	require.EqualValues(t, 40, exact.WouldMove)

	defer func(n int) { DryRunScan = n }(DryRunScan)
	DryRunScan = 10
	est, err := r.Start(ctx, StartParams{Queue: "q-dead", DryRun: true})
	require.NoError(t, err)
	require.True(t, est.Estimated)
	require.Contains(t, est.Warning, "estimate: the dry run read the first 10 of the 40 items")
	require.EqualValues(t, 40, est.Matched)
	require.EqualValues(t, 40, est.WouldMove)
	require.EqualValues(t, 40, est.ByDestination["q"].WouldMove)
}

package queuetest

import (
	"time"

	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/queue"
)

// liveRows are the rules of acting on a live queue (issue 49): pausing its
// consumption (queue.QueueInfo.Pause, Resume) and the dry run of a clear
// (queue.ClearDryRun).
var liveRows = []row{
	{"PauseHoldsLeasesAndResumeServesThem", func(e *env) {
		q, dlq := e.withDLQ(func(i *queue.QueueInfo) { i.MaxAttempts = 1 })
		e.produce(q, "held", "dies")
		part, held := e.leaseOne(q, "held")
		e.leaseOne(q, "dies")
		require.NoError(e.t, e.qs.Update(e.ctx, "q", func(i *queue.QueueInfo) error {
			require.True(e.t, i.Pause(e.clk.Now()))
			return nil
		}))
		info, err := e.qs.Info(e.ctx, "q")
		require.NoError(e.t, err)
		require.True(e.t, info.Paused())
		require.True(e.t, info.PausedAt.Equal(Start), "paused_at is when it was paused")

		// Produces go on; leases get nothing, and one waits.
		e.produce(q, "a")
		e.leaseNone(q)
		wait := e.leaseWaiting(q, 1)
		// The leases held go on: renew, complete; one runs out and dies
		// (max_attempts 1) into the dead-letter queue.
		_, err = q.Renew(e.ctx, part, []uint64{held.ID}, 0)
		require.NoError(e.t, err)
		require.NoError(e.t, q.Complete(e.ctx, part, []uint64{held.ID}))
		e.advance(leaseTimeout+time.Second, q)
		dead := e.eventuallyItems(dlq, 1)
		require.Equal(e.t, "dies", string(dead[0].Body.Payload))
		// The source's copy goes once the move is confirmed (asynchronous
		// on the embedded engine: ADR 0003).
		require.Eventually(e.t, func() bool {
			e.tick(q)
			c, _ := e.counts(q)
			return c == counts{total: 1, ready: 1}
		}, waitTimeout, 5*time.Millisecond, "the paused queue holds its produced item, ready")

		// Resume: the waiting lease gets the item.
		require.NoError(e.t, e.qs.Update(e.ctx, "q", func(i *queue.QueueInfo) error {
			require.True(e.t, i.Resume())
			return nil
		}))
		res, err := wait()
		require.NoError(e.t, err)
		require.Len(e.t, res.Items, 1)
		require.Equal(e.t, "a", string(res.Items[0].Payload))
		info, err = e.qs.Info(e.ctx, "q")
		require.NoError(e.t, err)
		require.False(e.t, info.Paused())
	}},
	{"ClearDryRunCountsWhatClearRemoves", func(e *env) {
		q := e.create("q", nil)
		e.produce(q, "leased", "r1", "r2")
		require.NoError(e.t, q.Produce(e.ctx, []queue.ProduceItem{{Payload: []byte("s"), EnqueueAt: Start.Add(time.Hour)}}))
		e.leaseOne(q, "leased")
		for _, c := range []struct {
			p    queue.ClearParams
			want queue.ClearCounts
		}{
			{queue.ClearParams{Queue: true}, queue.ClearCounts{Ready: 2, Total: 2}},
			{queue.ClearParams{Scheduled: true}, queue.ClearCounts{Scheduled: 1, Total: 1}},
			{queue.ClearParams{Queue: true, Scheduled: true}, queue.ClearCounts{Ready: 2, Scheduled: 1, Total: 3}},
			{queue.ClearParams{Destructive: true}, queue.ClearCounts{Ready: 2, Scheduled: 1, Leased: 1, Total: 4}},
		} {
			got, err := queue.ClearDryRun(e.ctx, q, c.p)
			require.NoError(e.t, err)
			require.Equal(e.t, c.want, got, "%+v", c.p)
		}
		// Nothing was removed; a clear then removes what its dry run said.
		require.Len(e.t, e.items(q), 4)
		before, err := queue.ClearDryRun(e.ctx, q, queue.ClearParams{Queue: true, Scheduled: true})
		require.NoError(e.t, err)
		require.NoError(e.t, q.Clear(e.ctx, queue.ClearParams{Queue: true, Scheduled: true}))
		require.Len(e.t, e.items(q), 4-before.Total)
		after, err := queue.ClearDryRun(e.ctx, q, queue.ClearParams{Destructive: true})
		require.NoError(e.t, err)
		require.Equal(e.t, queue.ClearCounts{Leased: 1, Total: 1}, after)
	}},
}

package service_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/daemon"
	"github.com/styxq/styx/internal/clock"
	"github.com/styxq/styx/internal/pgtest"
	"github.com/styxq/styx/internal/servertest"
	pb "github.com/styxq/styx/styxpb"
)

// queueHistory reads a queue's history (every queue's with q empty) and
// checks its shape.
func queueHistory(s *servertest.Server, q string) *pb.QueuesHistoryResponse {
	s.T.Helper()
	h, err := s.C.QueuesHistory(ctx, &pb.QueuesHistoryRequest{QueueName: q})
	require.NoError(s.T, err)
	require.Len(s.T, h.Points, 60)
	return h
}

// TestQueuesHistoryAfterRestart (issue 39, 5): the minutes behind the charts
// are kept in the store, so after a restart queues.history still returns
// the minutes before it, counts, depth and a DLQ's arrivals by error group
// alike, and the hour goes on from there. Time is the fake clock's.
func TestQueuesHistoryAfterRestart(t *testing.T) {
	t.Parallel()
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		clk := clock.NewFake(time.Now().Truncate(time.Minute).Add(10 * time.Second))
		s := servertest.StartWith(t, b, func(cfg *daemon.Config) { cfg.Clock = clk })
		s.CreateQueue(&pb.QueueInfo{QueueName: "hr-dlq"})
		s.CreateQueue(&pb.QueueInfo{QueueName: "hr", DeadQueue: "hr-dlq"})
		queueHistory(s, "hr-dlq") // the groups' starting point

		s.Produce("hr", "1", "2", "3", "4", "5")
		queueHistory(s, "hr") // a sample of the minute's depth
		clk.Advance(time.Minute)
		s.Produce("hr", "6", "7", "8")
		res := s.Lease("hr", 3)
		require.Len(t, res.Items, 3)
		s.Complete("hr", res.Partition, res.Items[0].Id, res.Items[1].Id)
		s.Retry("hr", res.Partition, &pb.QueueRetryItem{Id: res.Items[2].Id, Dead: true, Error: "upstream 503 for order 17"})
		waitDeadList(s, "hr-dlq", 1)
		queueHistory(s, "hr-dlq") // samples the arrival

		s.Restart()
		h := queueHistory(s, "hr")
		before, now := h.Points[58], h.Points[59]
		assert.Equal(t, clk.Now().Truncate(time.Minute).UTC(), now.At.AsTime())
		assert.EqualValues(t, 5, before.Produced, "the minute before the restart's")
		assert.EqualValues(t, 5, before.Depth)
		assert.EqualValues(t, 3, now.Produced, "the restart's minute: counted before it")
		assert.EqualValues(t, 2, now.Completed)
		assert.EqualValues(t, 1, now.DeadLettered)
		assert.EqualValues(t, 5, now.Depth, "8 produced, 2 completed, 1 dead")

		d := queueHistory(s, "hr-dlq")
		require.Len(t, d.Points[59].DeadByGroup, 1)
		for fp, n := range d.Points[59].DeadByGroup {
			assert.EqualValues(t, 1, n)
			assert.Equal(t, "upstream <n> for order <n>", d.GroupPatterns[fp])
		}

		// The hour goes on: a minute later the restart's minute is the one
		// before, and the new process counts beside it.
		clk.Advance(time.Minute)
		s.Produce("hr", "9", "10")
		h = queueHistory(s, "hr")
		assert.EqualValues(t, 5, h.Points[57].Produced)
		assert.EqualValues(t, 3, h.Points[58].Produced)
		assert.EqualValues(t, 2, h.Points[59].Produced)
		assert.EqualValues(t, 7, h.Points[59].Depth)
		all := queueHistory(s, "")
		assert.EqualValues(t, 5, all.Points[57].Produced)
		assert.EqualValues(t, 3, all.Points[58].Produced)
		assert.EqualValues(t, 1, all.Points[58].DeadLettered)
		assert.EqualValues(t, 8, all.Points[59].Depth, "7 in hr, 1 in hr-dlq")

		// A deleted queue's history goes with it.
		require.NoError(t, s.C.QueuesDelete(ctx, &pb.QueuesDeleteRequest{QueueName: "hr"}))
		s.CreateQueue(&pb.QueueInfo{QueueName: "hr"})
		s.Restart()
		for _, p := range queueHistory(s, "hr").Points {
			assert.Zero(t, p.Produced, "minute %v", p.At.AsTime())
		}
	})
}

// TestClusterHistory (issue 39, 5): two nodes on one PostgreSQL database
// share one history: each writes the minutes it counted, and either node's
// queues.history has the produces and completes both served, counted once,
// and the shared queue's depth once (not a sum of the nodes' samples).
func TestClusterHistory(t *testing.T) {
	b := servertest.Backend{Name: "postgres", URL: pgtest.URL(t)}
	clk := clock.NewFake(time.Now().Truncate(time.Minute).Add(10 * time.Second))
	nodes := []*servertest.Server{
		servertest.StartWith(t, b, func(cfg *daemon.Config) { cfg.Clock = clk }),
		servertest.StartWith(t, b, func(cfg *daemon.Config) { cfg.Clock = clk }),
	}
	a, c := nodes[0], nodes[1]
	a.CreateQueue(&pb.QueueInfo{QueueName: "ch"})
	a.Produce("ch", "1", "2", "3")
	c.Produce("ch", "4", "5")
	res := c.Lease("ch", 2)
	require.Len(t, res.Items, 2)
	c.Complete("ch", res.Partition, res.Items[0].Id, res.Items[1].Id)
	for _, n := range nodes {
		queueHistory(n, "ch") // each node samples the depth
	}

	clk.Advance(time.Minute) // the minute has ended: each node writes it once it sees the next
	for _, n := range nodes {
		// Each node sees the next minute (a sample of it) and writes the
		// last one now, not at its next periodic sample (every 10 s of real
		// time, which the wait below could outlast).
		queueHistory(n, "ch")
	}
	for i, n := range nodes {
		servertest.Eventually(t, func() bool {
			p := queueHistory(n, "ch").Points[58]
			return p.Produced == 5 && p.Completed == 2
		}, "node %d should see both nodes' counts of the minute", i)
		h := queueHistory(n, "ch")
		assert.EqualValues(t, 5, h.Points[58].Produced, "node %d: 3 produced on one node, 2 on the other", i)
		assert.EqualValues(t, 2, h.Points[58].Completed, "node %d", i)
		assert.EqualValues(t, 3, h.Points[58].Depth, "node %d: the queue's depth, not the sum of two samples", i)
		all := queueHistory(n, "")
		assert.EqualValues(t, 5, all.Points[58].Produced, "node %d", i)
		assert.EqualValues(t, 3, all.Points[58].Depth, "node %d", i)
	}
}

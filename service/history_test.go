package service_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/daemon"
	"github.com/styxq/styx/internal/clock"
	"github.com/styxq/styx/internal/pgtest"
	pb "github.com/styxq/styx/styxpb"
)

// queueHistory reads a queue's history (every queue's with q empty) and
// checks its shape.
func (s *server) queueHistory(q string) *pb.QueuesHistoryResponse {
	s.t.Helper()
	h, err := s.C.QueuesHistory(ctx, &pb.QueuesHistoryRequest{QueueName: q})
	require.NoError(s.t, err)
	require.Len(s.t, h.Points, 60)
	return h
}

// TestQueuesHistoryAfterRestart (issue 39, 5): the minutes behind the charts
// are kept in the store, so after a restart queues.history still returns
// the minutes before it, counts, depth and a DLQ's arrivals by error group
// alike, and the hour goes on from there. Time is the fake clock's.
func TestQueuesHistoryAfterRestart(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		clk := clock.NewFake(time.Now().Truncate(time.Minute).Add(10 * time.Second))
		s := startWith(t, b, func(cfg *daemon.Config) { cfg.Clock = clk })
		s.createQueue(&pb.QueueInfo{QueueName: "hr-dlq"})
		s.createQueue(&pb.QueueInfo{QueueName: "hr", DeadQueue: "hr-dlq"})
		s.queueHistory("hr-dlq") // the groups' starting point

		s.produce("hr", "1", "2", "3", "4", "5")
		s.queueHistory("hr") // a sample of the minute's depth
		clk.Advance(time.Minute)
		s.produce("hr", "6", "7", "8")
		res := s.lease("hr", 3)
		require.Len(t, res.Items, 3)
		s.complete("hr", res.Partition, res.Items[0].Id, res.Items[1].Id)
		s.retry("hr", res.Partition, &pb.QueueRetryItem{Id: res.Items[2].Id, Dead: true, Error: "upstream 503 for order 17"})
		s.waitDeadList("hr-dlq", 1)
		s.queueHistory("hr-dlq") // samples the arrival

		s.restart()
		h := s.queueHistory("hr")
		before, now := h.Points[58], h.Points[59]
		assert.Equal(t, clk.Now().Truncate(time.Minute).UTC(), now.At.AsTime())
		assert.EqualValues(t, 5, before.Produced, "the minute before the restart's")
		assert.EqualValues(t, 5, before.Depth)
		assert.EqualValues(t, 3, now.Produced, "the restart's minute: counted before it")
		assert.EqualValues(t, 2, now.Completed)
		assert.EqualValues(t, 1, now.DeadLettered)
		assert.EqualValues(t, 5, now.Depth, "8 produced, 2 completed, 1 dead")

		d := s.queueHistory("hr-dlq")
		require.Len(t, d.Points[59].DeadByGroup, 1)
		for fp, n := range d.Points[59].DeadByGroup {
			assert.EqualValues(t, 1, n)
			assert.Equal(t, "upstream <n> for order <n>", d.GroupPatterns[fp])
		}

		// The hour goes on: a minute later the restart's minute is the one
		// before, and the new process counts beside it.
		clk.Advance(time.Minute)
		s.produce("hr", "9", "10")
		h = s.queueHistory("hr")
		assert.EqualValues(t, 5, h.Points[57].Produced)
		assert.EqualValues(t, 3, h.Points[58].Produced)
		assert.EqualValues(t, 2, h.Points[59].Produced)
		assert.EqualValues(t, 7, h.Points[59].Depth)
		all := s.queueHistory("")
		assert.EqualValues(t, 5, all.Points[57].Produced)
		assert.EqualValues(t, 3, all.Points[58].Produced)
		assert.EqualValues(t, 1, all.Points[58].DeadLettered)
		assert.EqualValues(t, 8, all.Points[59].Depth, "7 in hr, 1 in hr-dlq")

		// A deleted queue's history goes with it.
		require.NoError(t, s.C.QueuesDelete(ctx, &pb.QueuesDeleteRequest{QueueName: "hr"}))
		s.createQueue(&pb.QueueInfo{QueueName: "hr"})
		s.restart()
		for _, p := range s.queueHistory("hr").Points {
			assert.Zero(t, p.Produced, "minute %v", p.At.AsTime())
		}
	})
}

// TestClusterHistory (issue 39, 5): two nodes on one PostgreSQL database
// share one history: each writes the minutes it counted, and either node's
// queues.history has the produces and completes both served, counted once,
// and the shared queue's depth once (not a sum of the nodes' samples).
func TestClusterHistory(t *testing.T) {
	b := backend{name: "postgres", url: pgtest.URL(t)}
	clk := clock.NewFake(time.Now().Truncate(time.Minute).Add(10 * time.Second))
	nodes := []*server{
		startWith(t, b, func(cfg *daemon.Config) { cfg.Clock = clk }),
		startWith(t, b, func(cfg *daemon.Config) { cfg.Clock = clk }),
	}
	a, c := nodes[0], nodes[1]
	a.createQueue(&pb.QueueInfo{QueueName: "ch"})
	a.produce("ch", "1", "2", "3")
	c.produce("ch", "4", "5")
	res := c.lease("ch", 2)
	require.Len(t, res.Items, 2)
	c.complete("ch", res.Partition, res.Items[0].Id, res.Items[1].Id)
	for _, n := range nodes {
		n.queueHistory("ch") // each node samples the depth
	}

	clk.Advance(time.Minute) // the minute has ended: each node writes it once it sees the next
	for _, n := range nodes {
		// Each node sees the next minute (a sample of it) and writes the
		// last one now, not at its next periodic sample (every 10 s of real
		// time, which the wait below could outlast).
		n.queueHistory("ch")
	}
	for i, n := range nodes {
		eventually(t, func() bool {
			p := n.queueHistory("ch").Points[58]
			return p.Produced == 5 && p.Completed == 2
		}, "node %d should see both nodes' counts of the minute", i)
		h := n.queueHistory("ch")
		assert.EqualValues(t, 5, h.Points[58].Produced, "node %d: 3 produced on one node, 2 on the other", i)
		assert.EqualValues(t, 2, h.Points[58].Completed, "node %d", i)
		assert.EqualValues(t, 3, h.Points[58].Depth, "node %d: the queue's depth, not the sum of two samples", i)
		all := n.queueHistory("")
		assert.EqualValues(t, 5, all.Points[58].Produced, "node %d", i)
		assert.EqualValues(t, 3, all.Points[58].Depth, "node %d", i)
	}
}

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

// TestArrivalsCountedAtDeath (issue 49, 5): a dead-letter queue's arrivals
// by error group are counted as the items die, so a redrive or a delete
// between two of the history's samples hides none of them (5 died: 5
// counted, not the 2 the group holds at the read), a redrive's arrivals in
// its destination count as produced, and a group's pattern outlives its
// items, across a restart too. Time is the fake clock's.
func TestArrivalsCountedAtDeath(t *testing.T) {
	t.Parallel()
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		clk := clock.NewFake(time.Now().Truncate(time.Minute).Add(10 * time.Second))
		s := servertest.StartWith(t, b, func(cfg *daemon.Config) { cfg.Clock = clk })
		s.CreateQueue(&pb.QueueInfo{QueueName: "ar-dlq"})
		s.CreateQueue(&pb.QueueInfo{QueueName: "ar", DeadQueue: "ar-dlq"})
		s.CreateQueue(&pb.QueueInfo{QueueName: "ar-fixed"})
		queueHistory(s, "ar-dlq") // a sample before the deaths
		kill := func(n int) {
			t.Helper()
			for i := range n {
				s.Produce("ar", "x")
				res := s.Lease("ar", 1)
				require.Len(t, res.Items, 1)
				s.Retry("ar", res.Partition, &pb.QueueRetryItem{Id: res.Items[0].Id, Dead: true, Error: "order " + string(rune('1'+i)) + " not found"})
			}
		}
		kill(3)
		waitDeadList(s, "ar-dlq", 3)
		task, err := s.C.DeadRedrive(ctx, &pb.DeadRedriveRequest{QueueName: "ar-dlq", Destination: "ar-fixed", All: true})
		require.NoError(t, err)
		require.Equal(t, "completed", waitTask(s, task.TaskId).Status)
		kill(2)
		waitDeadList(s, "ar-dlq", 2)

		d := queueHistory(s, "ar-dlq")
		require.Len(t, d.Points[59].DeadByGroup, 1, "one error group: %v", d.Points[59].DeadByGroup)
		var fp string
		for f, n := range d.Points[59].DeadByGroup {
			fp = f
			assert.EqualValues(t, 5, n, "5 died in the minute; 3 of them were redriven before the read")
		}
		assert.Equal(t, "order <n> not found", d.GroupPatterns[fp])
		assert.EqualValues(t, 3, queueHistory(s, "ar-fixed").Points[59].Produced, "the redriven arrivals count as produced")
		assert.EqualValues(t, 5+3, queueHistory(s, "").Points[59].Produced, "5 produced to ar, 3 redriven to ar-fixed")

		// The group's items go: its pattern stays with the minutes.
		del, err := s.C.DeadDelete(ctx, &pb.DeadDeleteRequest{QueueName: "ar-dlq", All: true})
		require.NoError(t, err)
		require.EqualValues(t, 2, del.Deleted)
		d = queueHistory(s, "ar-dlq")
		assert.EqualValues(t, 5, d.Points[59].DeadByGroup[fp])
		assert.Equal(t, "order <n> not found", d.GroupPatterns[fp], "the pattern of a group whose items are gone")

		clk.Advance(time.Minute)
		queueHistory(s, "ar-dlq") // the next minute: the last is written
		s.Restart()
		d = queueHistory(s, "ar-dlq")
		assert.EqualValues(t, 5, d.Points[58].DeadByGroup[fp], "after a restart")
		assert.Equal(t, "order <n> not found", d.GroupPatterns[fp], "after a restart, from the stored minutes")
	})
}

// TestClusterArrivals (issue 49, 5): on two nodes of one PostgreSQL
// database each node counts the deaths its own loops moved, and either
// node's history adds them up once: 2 died through one node, 1 through the
// other, 3 arrived.
func TestClusterArrivals(t *testing.T) {
	b := servertest.Backend{Name: "postgres", URL: pgtest.URL(t)}
	clk := clock.NewFake(time.Now().Truncate(time.Minute).Add(10 * time.Second))
	nodes := []*servertest.Server{
		servertest.StartWith(t, b, func(cfg *daemon.Config) { cfg.Clock = clk }),
		servertest.StartWith(t, b, func(cfg *daemon.Config) { cfg.Clock = clk }),
	}
	nodes[0].CreateQueue(&pb.QueueInfo{QueueName: "ca-dlq"})
	nodes[0].CreateQueue(&pb.QueueInfo{QueueName: "ca", DeadQueue: "ca-dlq"})
	for i, n := range []int{2, 1} {
		s := nodes[i]
		for range n {
			s.Produce("ca", "x")
			res := s.Lease("ca", 1)
			require.Len(t, res.Items, 1)
			s.Retry("ca", res.Partition, &pb.QueueRetryItem{Id: res.Items[0].Id, Dead: true, Error: "order 7 not found"})
		}
	}
	waitDeadList(nodes[0], "ca-dlq", 3)
	clk.Advance(time.Minute)
	for _, n := range nodes {
		queueHistory(n, "ca-dlq") // each node sees the next minute and writes the last
	}
	for i, n := range nodes {
		servertest.Eventually(t, func() bool {
			return sumGroups(queueHistory(n, "ca-dlq").Points[58].DeadByGroup) == 3
		}, "node %d should count 3 arrivals: %v", i, queueHistory(n, "ca-dlq").Points[58].DeadByGroup)
		h := queueHistory(n, "ca-dlq")
		require.Len(t, h.Points[58].DeadByGroup, 1)
		for fp := range h.Points[58].DeadByGroup {
			assert.Equal(t, "order <n> not found", h.GroupPatterns[fp], "node %d", i)
		}
	}
}

func sumGroups(m map[string]int64) int64 {
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}

package service_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/servertest"
	pb "github.com/styxq/styx/styxpb"
)

// TestDeadItemsExpiringWithinDay (issue 49): a dead-letter queue's stats
// count the dead items its retention deletes within a day (expire_timeout
// from dead_at), and so does the gauge styx_dead_items_expiring_within_day,
// on every backend; a leased dead item is not counted, nor are the items of
// a queue that holds no dead item.
func TestDeadItemsExpiringWithinDay(t *testing.T) {
	servertest.ForEachBackend(t, func(t *testing.T, b servertest.Backend) {
		s := servertest.Start(t, b)
		// Dead items as the dead-letter move leaves them: their expire
		// deadline is dead_at plus the DLQ's expire timeout: 12h for
		// exp-dlq's (within a day), 48h for keep-dlq's.
		s.CreateQueue(&pb.QueueInfo{QueueName: "exp-dlq", ExpireTimeout: "12h"})
		s.CreateQueue(&pb.QueueInfo{QueueName: "exp", DeadQueue: "exp-dlq", ExpireTimeout: "1h"})
		s.CreateQueue(&pb.QueueInfo{QueueName: "keep-dlq", ExpireTimeout: "48h"})
		s.CreateQueue(&pb.QueueInfo{QueueName: "keep", DeadQueue: "keep-dlq"})
		killWith(s, "exp", "a", "b", "c")
		killWith(s, "keep", "d", "e")
		s.WaitItems("exp-dlq", 3)
		s.WaitItems("keep-dlq", 2)
		s.Produce("exp", "live") // expires within the hour, but is no dead item

		expiring := func(q string) int64 {
			st, err := s.C.QueueStats(ctx, &pb.QueueStatsRequest{QueueName: q})
			require.NoError(t, err)
			return st.ExpiringWithinDay
		}
		require.EqualValues(t, 3, expiring("exp-dlq"))
		require.Zero(t, expiring("keep-dlq"))
		require.Zero(t, expiring("exp"))
		require.Equal(t, `styx_dead_items_expiring_within_day{queue="exp-dlq"} 3`,
			metricLine(scrape(s), `styx_dead_items_expiring_within_day{queue="exp-dlq"}`))
		require.Equal(t, `styx_dead_items_expiring_within_day{queue="exp"} 0`,
			metricLine(scrape(s), `styx_dead_items_expiring_within_day{queue="exp"}`))

		// A DLQ consumer's lease of one: it is not deleted while leased,
		// so it is not counted.
		res, err := s.C.QueueLease(ctx, &pb.QueueLeaseRequest{QueueName: "exp-dlq", BatchSize: 1, ClientId: "c", RequestTimeout: "5s"})
		require.NoError(t, err)
		require.Len(t, res.Items, 1)
		require.EqualValues(t, 2, expiring("exp-dlq"))
	})
}

package postgres

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/queue"
)

// BenchmarkGroupLease measures a lease of 10 items and their complete (one
// op) on queues whose items have groups, against the same on a queue
// without groups (plain), each queue filled by one SQL statement before the
// timer starts (100,000 items, or 120,000 for the hot ones; 1 partition):
//
//   - plain: no groups.
//   - ordered/1000x100: an ordered queue of 1,000 groups of 100 items,
//     produced interleaved (a lease takes one group's run).
//   - ordered/hot-blocked: an ordered queue whose one hot group holds
//     100,000 items and whose head is leased (its items are all blocked),
//     beside 20,000 groups of one item each: a lease must not read the hot
//     group's items.
//   - ordered/one-group: one group of 100,000 items (each lease takes its
//     next 10).
//   - fair/1000x100 and fair/hot: the same on a queue that is not ordered
//     (the hot group's head leased too, which blocks nothing there).
//
// Run with STYX_TEST_POSTGRES_URL, e.g. -bench BenchmarkGroupLease
// -benchtime=2000x (ordered/hot-blocked has 2,000 ops of free items).
func BenchmarkGroupLease(b *testing.B) {
	ctx := context.Background()
	type fill struct {
		name    string
		ordered bool
		// group is the SQL of item g's group (g from 0), NULL for none;
		// items are items.
		group string
		items int
		// blockHot leases the first item of group 'hot' before the timer.
		blockHot bool
	}
	for _, f := range []fill{
		{"plain", false, `NULL`, 100_000, false},
		{"ordered/1000x100", true, `'g' || (g % 1000)`, 100_000, false},
		{"ordered/hot-blocked", true, `CASE WHEN g < 100000 THEN 'hot' ELSE 's' || g END`, 120_000, true},
		{"ordered/one-group", true, `'one'`, 100_000, false},
		{"fair/1000x100", false, `'g' || (g % 1000)`, 100_000, false},
		{"fair/hot", false, `CASE WHEN g < 100000 THEN 'hot' ELSE 's' || g END`, 120_000, true},
	} {
		b.Run(f.name, func(b *testing.B) {
			m := openManager(b, benchURL(b))
			require.NoError(b, m.Create(ctx, queue.QueueInfo{Name: "q", LeaseTimeout: time.Hour, ExpireTimeout: 24 * time.Hour,
				Partitions: 1, Ordered: f.ordered}))
			info, err := m.Info(ctx, "q")
			require.NoError(b, err)
			now := time.Now().UnixNano()
			_, err = m.st.pool.Exec(ctx, fmt.Sprintf(`INSERT INTO styx_items (queue_id, id, partition, state, created_at, expire_deadline, payload, grp)
				SELECT $1, nextval('styx_item_ids'), 0, 0, $2, $3, '\x0102', %s FROM generate_series(0, $4 - 1) g`, f.group),
				int64(info.ID), now, now+int64(24*time.Hour), f.items)
			require.NoError(b, err)
			if f.blockHot {
				_, err = m.st.pool.Exec(ctx, `UPDATE styx_items SET state=1, deadline=$2 WHERE queue_id=$1 AND id =
					(SELECT min(id) FROM styx_items WHERE queue_id=$1 AND grp='hot')`, int64(info.ID), now+int64(time.Hour))
				require.NoError(b, err)
			}
			_, err = m.st.pool.Exec(ctx, `VACUUM ANALYZE styx_items`)
			require.NoError(b, err)
			q, err := m.Get("q")
			require.NoError(b, err)
			b.ResetTimer()
			for range b.N {
				res, err := q.Lease(ctx, queue.LeaseParams{BatchSize: 10, ClientID: "c", Timeout: time.Second})
				require.NoError(b, err)
				ids := make([]uint64, len(res.Items))
				for i, it := range res.Items {
					ids[i] = it.ID
					if f.blockHot && f.ordered && it.Group == "hot" {
						b.Fatalf("leased %s of the blocked group", queue.FormatID(it.ID))
					}
				}
				require.NoError(b, q.Complete(ctx, res.Partition, ids))
			}
		})
	}
}

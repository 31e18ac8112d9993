package postgres

import (
	"context"

	"github.com/styxq/styx/internal/queue"
)

// expiringWithin counts the dead items of the queue (dead_reason set, as
// styx_dead_counts counts them) that are not leased and whose expire
// deadline is before now + queue.ExpiringWindow (issue 49;
// queue.Stats.ExpiringWithinDay): a range of the partial index
// styx_items_expiry (expireCountSQL). 0, with no query, when the queue holds
// no dead item (deadByReason, from styx_dead_counts).
func expiringWithin(ctx context.Context, db querier, queueID uint64, deadByReason map[string]int, now int64) (int, error) {
	held := 0
	for _, n := range deadByReason {
		held += n
	}
	if held == 0 {
		return 0, nil
	}
	var n int64
	err := db.QueryRow(ctx, `SELECT `+expiringCountSQL("$1", "$2"), int64(queueID), now+int64(queue.ExpiringWindow)).Scan(&n)
	return int(n), err
}

// expiringCountSQL is the count of the dead items of queue id q that are
// not leased and expire before limit (SQL expressions), by a range of
// styx_items_expiry, whose predicate it repeats.
func expiringCountSQL(q, limit string) string {
	return `(SELECT count(*) FROM styx_items e WHERE e.queue_id = ` + q + ` AND e.expire_deadline <> 0 AND e.state <> 1
		AND e.expire_deadline < ` + limit + ` AND e.dead_reason <> '')`
}

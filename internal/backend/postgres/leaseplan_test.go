package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/pgtest"
	"github.com/styxq/styx/internal/queue"
)

// TestLockedRowsUpdatedByTID checks the plans of the statements that lock
// rows in a CTE and then update them: the update must find each row by its
// ctid (a TID scan), whatever the statistics say. Joined on (queue_id, id),
// the generic plan made while a queue's statistics said it was nearly
// empty rescanned every index entry of the queue, dead ones included, once
// per row (cycle ×10 at about 900 items/s instead of 3,500).
func TestLockedRowsUpdatedByTID(t *testing.T) {
	ctx := context.Background()
	m := openManager(t, pgtest.URL(t))
	require.NoError(t, m.Create(ctx, queue.QueueInfo{Name: "q", LeaseTimeout: time.Minute, Partitions: 1}))
	info, err := m.Info(ctx, "q")
	require.NoError(t, err)
	q, err := m.Get("q")
	require.NoError(t, err)
	require.NoError(t, q.Produce(ctx, []queue.ProduceItem{{Payload: []byte("a")}, {Payload: []byte("b")}}))

	// The group leases' arguments: as lease's, then the cursor.
	groupArgs := []any{int64(info.ID), int32(0), 10, time.Now().Add(time.Minute).UnixNano(), time.Now().UnixNano(), "''"}
	for name, c := range map[string]struct {
		sql  string
		args []any
	}{
		"lease":           {leaseSQL, []any{int64(info.ID), int32(0), 10, time.Now().Add(time.Minute).UnixNano(), time.Now().UnixNano()}},
		"ready scheduled": {readyScheduledSQL, []any{int64(info.ID), time.Now().UnixNano(), lifecycleBatch}},
		"ordered lease":   {orderedLeaseSQL, groupArgs},
		"fair lease":      {fairLeaseSQL, groupArgs},
	} {
		t.Run(name, func(t *testing.T) {
			err := pgx.BeginFunc(ctx, m.st.pool, func(tx pgx.Tx) error {
				// The generic plan is the one a pooled connection keeps.
				if _, err := tx.Exec(ctx, `SET LOCAL plan_cache_mode = force_generic_plan`); err != nil {
					return err
				}
				if _, err := tx.Exec(ctx, `PREPARE styx_plan_check AS `+c.sql); err != nil {
					return err
				}
				defer func() { _, _ = tx.Exec(ctx, `DEALLOCATE styx_plan_check`) }()
				// EXECUTE takes literals: force_generic_plan makes them
				// parameters of the generic plan all the same.
				lits := make([]string, len(c.args))
				for i, a := range c.args {
					lits[i] = fmt.Sprint(a)
				}
				var out []byte
				if err := tx.QueryRow(ctx, `EXPLAIN (FORMAT JSON) EXECUTE styx_plan_check(`+strings.Join(lits, ", ")+`)`).Scan(&out); err != nil {
					return err
				}
				var plans []struct{ Plan planNode }
				if err := json.Unmarshal(out, &plans); err != nil {
					return err
				}
				require.Len(t, plans, 1)
				target := plans[0].Plan.find("t")
				require.NotNil(t, target, "no scan of the update's target in %s", out)
				require.Equal(t, "Tid Scan", target.NodeType, "plan: %s", out)
				return errRollback
			})
			require.ErrorIs(t, err, errRollback)
		})
	}
}

// errRollback ends a transaction that must change nothing.
var errRollback = errors.New("rollback")

// planNode is a node of EXPLAIN (FORMAT JSON)'s plan tree.
type planNode struct {
	NodeType string     `json:"Node Type"`
	Alias    string     `json:"Alias"`
	Plans    []planNode `json:"Plans"`
}

// find returns the scan node of the relation aliased alias (not the
// ModifyTable node, which names it too), or nil.
func (n *planNode) find(alias string) *planNode {
	if n.Alias == alias && n.NodeType != "ModifyTable" {
		return n
	}
	for i := range n.Plans {
		if f := n.Plans[i].find(alias); f != nil {
			return f
		}
	}
	return nil
}

package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/pgtest"
	"github.com/styxq/styx/internal/queue"
)

// planManager opens a manager on a new schema (pgtest.EmptyURL), never
// one of pgtest's pool: a pooled schema keeps its tables' and indexes'
// pages from the tests it served (pgtest deletes their rows), and with
// statistics of a few rows the planner weighs scans by those pages
// (TestLockByIDPlan then found styx_items_created in CI, and
// TestLockedRowsUpdatedByTID a sequential scan when run again, -count=3).
func planManager(t *testing.T) *Manager {
	t.Helper()
	return openManager(t, pgtest.EmptyURL(t))
}

// TestLockedRowsUpdatedByTID checks the plans of the statements that lock
// rows in a CTE and then update them: the update must find each row by its
// ctid (a TID scan), whatever the statistics say. Joined on (queue_id, id),
// the generic plan made while a queue's statistics said it was nearly
// empty rescanned every index entry of the queue, dead ones included, once
// per row (cycle ×10 at about 900 items/s instead of 3,500).
func TestLockedRowsUpdatedByTID(t *testing.T) {
	ctx := context.Background()
	m := planManager(t)
	require.NoError(t, m.Create(ctx, queue.QueueInfo{Name: "q", LeaseTimeout: time.Minute, Partitions: 1}))
	info, err := m.Info(ctx, "q")
	require.NoError(t, err)
	q, err := m.Get("q")
	require.NoError(t, err)
	require.NoError(t, q.Produce(ctx, []queue.ProduceItem{{Payload: []byte("a")}, {Payload: []byte("b")}}))

	// The leases' arguments: queue, partition, count, deadline, now; the
	// group leases' then the cursor and the byte bound (boundedTake: a
	// bound, and whether the first item goes whatever its size).
	// Then the lease's holder (holderArgs: NULL, NULL here), last for the
	// group leases.
	leaseArgs := []any{int64(info.ID), int32(0), 10, time.Now().Add(time.Minute).UnixNano(), time.Now().UnixNano()}
	noHolder := []any{"NULL", "NULL"}
	groupArgs := append(append(append([]any{}, leaseArgs...), "''", 64<<20, true), noHolder...)
	leaseArgs = append(leaseArgs, noHolder...)
	for name, c := range map[string]struct {
		sql  string
		args []any
	}{
		"lease":           {leaseSQL, leaseArgs},
		"lease bytes":     {leaseBytesSQL, append(append([]any{}, leaseArgs...), 64<<20)},
		"ready scheduled": {readyScheduledSQL, []any{int64(info.ID), time.Now().UnixNano(), lifecycleBatch}},
		"ordered lease":   {orderedLeaseSQL, groupArgs},
		"fair lease":      {fairLeaseSQL, groupArgs},
	} {
		t.Run(name, func(t *testing.T) {
			plan := genericPlan(t, m, c.sql, c.args)
			target := plan.find("t")
			require.NotNil(t, target, "no scan of the update's target in %+v", plan)
			require.Equal(t, "Tid Scan", target.NodeType, "plan: %+v", plan)
		})
	}
}

// TestLockByIDPlan checks that the row lock of an iteration finds each
// item by its primary key, with the id in the index condition, even when
// the generic plan is made while the statistics say the queue holds two
// rows and it holds 2,000: "id = ANY($2)" and the joins of the ids with
// the table scanned every index entry of the queue there, filtering by id.
func TestLockByIDPlan(t *testing.T) {
	ctx := context.Background()
	m := planManager(t)
	require.NoError(t, m.Create(ctx, queue.QueueInfo{Name: "q", LeaseTimeout: time.Minute, Partitions: 1}))
	info, err := m.Info(ctx, "q")
	require.NoError(t, err)
	q, err := m.Get("q")
	require.NoError(t, err)
	require.NoError(t, q.Produce(ctx, []queue.ProduceItem{{Payload: []byte("a")}, {Payload: []byte("b")}}))
	_, err = m.st.pool.Exec(ctx, `ANALYZE styx_items`)
	require.NoError(t, err)
	items := make([]queue.ProduceItem, 1000)
	for i := range items {
		items[i] = queue.ProduceItem{Payload: []byte("c")}
	}
	for range 2 {
		require.NoError(t, q.Produce(ctx, items))
	}
	plan := genericPlan(t, m, lockByIDSQL, []any{int64(info.ID), "'{1,2,3}'", 3})
	scan := plan.indexScan("styx_items")
	require.NotNil(t, scan, "no index scan of styx_items in %+v", plan)
	require.Equal(t, "styx_items_pkey", scan.IndexName, "plan: %+v", plan)
	require.Contains(t, scan.IndexCond, "id = u.id", "plan: %+v", plan)
}

// TestLeaseOnGenericPlanUsesReadyIndex checks the plan the plain leases run
// on (onGenericPlan's settings) when it is made while the statistics say
// styx_items is empty, as on a fresh database or after a vacuum of a
// drained queue: it must scan the ready index in id order, never the whole
// table (a prepared statement keeps that plan while the queue fills).
func TestLeaseOnGenericPlanUsesReadyIndex(t *testing.T) {
	ctx := context.Background()
	m := planManager(t)
	require.NoError(t, m.Create(ctx, queue.QueueInfo{Name: "q", LeaseTimeout: time.Minute, Partitions: 1}))
	info, err := m.Info(ctx, "q")
	require.NoError(t, err)
	_, err = m.st.pool.Exec(ctx, `VACUUM ANALYZE styx_items`)
	require.NoError(t, err)
	args := []any{int64(info.ID), int32(0), 1, time.Now().Add(time.Minute).UnixNano(), time.Now().UnixNano(), "NULL", "NULL"}
	for name, c := range map[string]struct {
		sql  string
		args []any
	}{
		"lease":         {leaseSQL, args},
		"lease bytes":   {leaseBytesSQL, append(append([]any{}, args...), 64<<20)},
		"lease holders": {leaseHoldersSQL, append(append([]any{}, args[:5]...), "'{a}'", "'{k}'")},
	} {
		t.Run(name, func(t *testing.T) {
			plan := genericPlanWith(t, m, genericPlanOn, c.sql, c.args)
			scan := plan.findRelation("styx_items")
			require.NotNil(t, scan, "no scan of styx_items in %+v", plan)
			require.Equal(t, "styx_items_ready", scan.IndexName, "plan: %+v", plan)
		})
	}
}

// genericPlan returns the generic plan of sql (the one a pooled connection
// keeps) for the literal arguments args, in a transaction rolled back.
func genericPlan(t *testing.T, m *Manager, sql string, args []any) planNode {
	t.Helper()
	return genericPlanWith(t, m, []string{`SET LOCAL plan_cache_mode = force_generic_plan`}, sql, args)
}

// genericPlanWith is genericPlan with the settings of settings (SET LOCAL
// statements, forcing the generic plan among them).
func genericPlanWith(t *testing.T, m *Manager, settings []string, sql string, args []any) planNode {
	t.Helper()
	ctx := context.Background()
	var plan planNode
	// A prepared statement outlives a failed transaction on its pooled
	// connection: each plan gets a name of its own.
	name := fmt.Sprintf("styx_plan_check_%d", planChecks.Add(1))
	err := pgx.BeginFunc(ctx, m.st.pool, func(tx pgx.Tx) error {
		for _, s := range settings {
			if _, err := tx.Exec(ctx, s); err != nil {
				return err
			}
		}
		if _, err := tx.Exec(ctx, `PREPARE `+name+` AS `+sql); err != nil {
			return err
		}
		defer func() { _, _ = tx.Exec(ctx, `DEALLOCATE `+name) }()
		// EXECUTE takes literals: force_generic_plan makes them
		// parameters of the generic plan all the same.
		lits := make([]string, len(args))
		for i, a := range args {
			lits[i] = fmt.Sprint(a)
		}
		var out []byte
		if err := tx.QueryRow(ctx, `EXPLAIN (FORMAT JSON) EXECUTE `+name+`(`+strings.Join(lits, ", ")+`)`).Scan(&out); err != nil {
			return err
		}
		var plans []struct{ Plan planNode }
		if err := json.Unmarshal(out, &plans); err != nil {
			return err
		}
		require.Len(t, plans, 1)
		plan = plans[0].Plan
		return errRollback
	})
	require.ErrorIs(t, err, errRollback)
	return plan
}

// planChecks numbers the statements genericPlan prepares.
var planChecks atomic.Int64

// errRollback ends a transaction that must change nothing.
var errRollback = errors.New("rollback")

// planNode is a node of EXPLAIN (FORMAT JSON)'s plan tree.
type planNode struct {
	NodeType  string     `json:"Node Type"`
	Alias     string     `json:"Alias"`
	Relation  string     `json:"Relation Name"`
	IndexName string     `json:"Index Name"`
	IndexCond string     `json:"Index Cond"`
	Plans     []planNode `json:"Plans"`
}

// find returns the scan node of the relation aliased alias (not the
// ModifyTable node, which names it too), or nil.
func (n *planNode) find(alias string) *planNode {
	return n.first(func(x *planNode) bool { return x.Alias == alias && x.NodeType != "ModifyTable" })
}

// findRelation returns the first scan node of the table named relation, or
// nil.
func (n *planNode) findRelation(relation string) *planNode {
	return n.first(func(x *planNode) bool { return x.Relation == relation && x.NodeType != "ModifyTable" })
}

// indexScan returns the node that reads the table named relation through
// an index: an Index Scan (or Index Only Scan) of it, or the Bitmap Index
// Scan under a Bitmap Heap Scan of it (each is a lookup by the index's
// condition; which PostgreSQL picks for one row per outer row depends on
// the table's size and bloat, which a reused test schema varies); nil if
// it reads relation otherwise or not at all.
func (n *planNode) indexScan(relation string) *planNode {
	scan := n.findRelation(relation)
	switch {
	case scan == nil:
		return nil
	case scan.IndexName != "":
		return scan
	case scan.NodeType == "Bitmap Heap Scan":
		return scan.first(func(x *planNode) bool { return x.NodeType == "Bitmap Index Scan" })
	}
	return nil
}

// first returns the first node of the tree, depth first, that match
// accepts, or nil.
func (n *planNode) first(match func(*planNode) bool) *planNode {
	if match(n) {
		return n
	}
	for i := range n.Plans {
		if f := n.Plans[i].first(match); f != nil {
			return f
		}
	}
	return nil
}

package clusters

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/styxq/styx/internal/backend/postgres"
	"github.com/styxq/styx/internal/queue"
)

// Placement states (styx_placements.state; postgres clustersMigration).
const (
	// stateCreating: recorded, the queue perhaps not yet created on its
	// home; not routed. Finished (ready) or undone (deleted) under the
	// catalog lock by whichever node finds it (resolveCreating).
	stateCreating = "creating"
	// stateReady: routed to its cluster.
	stateReady = "ready"
)

// placement is one row of styx_placements.
type placement struct {
	Cluster string
	Epoch   int64
	State   string
}

// catalogLockKey is the key of the advisory lock every change of the
// catalog holds (a transaction's, on main): creates, updates and deletes
// of queues are checked one after the other across every node.
// catalogLock takes it, waiting; catalogTryLock tries it (reconcile).
const (
	catalogLockKey = `hashtext('styx-catalog:' || current_schema())`
	catalogLock    = `SELECT pg_advisory_xact_lock(` + catalogLockKey + `)`
	catalogTryLock = `SELECT pg_try_advisory_xact_lock(` + catalogLockKey + `)`
)

func (r *Router) placement(name string) (placement, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	p, ok := r.placements[name]
	return p, ok
}

func (r *Router) isLoaded() bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.loaded
}

// readPlacements reads the catalog on q.
func readPlacements(ctx context.Context, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}) (map[string]placement, error) {
	rows, err := q.Query(ctx, `SELECT queue, cluster, epoch, state FROM styx_placements`)
	if err != nil {
		return nil, postgres.Classify("read the placements", err)
	}
	out := map[string]placement{}
	var name string
	var p placement
	_, err = pgx.ForEachRow(rows, []any{&name, &p.Cluster, &p.Epoch, &p.State}, func() error {
		out[name] = p
		return nil
	})
	return out, postgres.Classify("read the placements", err)
}

// loadPlacements re-reads the catalog into the cache.
func (r *Router) loadPlacements(ctx context.Context) error {
	m, err := r.main.manager()
	if err != nil {
		return err
	}
	ps, err := readPlacements(ctx, m.Store().Pool())
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.placements, r.loaded = ps, true
	r.mu.Unlock()
	return nil
}

func (r *Router) requestRefresh() {
	select {
	case r.refresh <- struct{}{}:
	default:
	}
}

// refresher re-reads the placements every RefreshInterval and when main
// notifies a change, and reconciles the catalog every reconcileEvery.
func (r *Router) refresher() {
	t := time.NewTicker(r.cfg.RefreshInterval)
	defer t.Stop()
	rec := time.NewTicker(reconcileEvery)
	defer rec.Stop()
	for {
		select {
		case <-r.ctx.Done():
			return
		case <-t.C:
		case <-r.refresh:
		case <-rec.C:
			ctx, cancel := context.WithTimeout(r.ctx, 2*r.cfg.StatementTimeout)
			if err := r.reconcile(ctx, false); err != nil && r.ctx.Err() == nil {
				r.cfg.Log.Warn("postgres clusters: reconciling the catalog failed", "error", err)
			}
			cancel()
			continue
		}
		ctx, cancel := context.WithTimeout(r.ctx, r.cfg.StatementTimeout)
		if err := r.loadPlacements(ctx); err != nil && r.ctx.Err() == nil {
			r.cfg.Log.Warn("postgres clusters: reading the placements failed", "error", err)
		}
		cancel()
	}
}

// number gives every configured cluster its stable number (styx_clusters
// on main): main is 0, a cluster seen for the first time takes the
// smallest free one. Numbers are never derived from the configuration's
// order, so reordering or removing clusters renumbers none.
func (r *Router) number(ctx context.Context) error {
	m, _ := r.main.manager()
	tx, err := m.Store().Pool().Begin(ctx)
	if err != nil {
		return postgres.Classify("number the clusters", err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := tx.Exec(ctx, catalogLock); err != nil {
		return postgres.Classify("number the clusters", err)
	}
	rows, err := tx.Query(ctx, `SELECT name, number FROM styx_clusters`)
	if err != nil {
		return postgres.Classify("number the clusters", err)
	}
	numbers := map[string]int{}
	var name string
	var n int
	if _, err := pgx.ForEachRow(rows, []any{&name, &n}, func() error { numbers[name] = n; return nil }); err != nil {
		return postgres.Classify("number the clusters", err)
	}
	used := map[int]bool{}
	for _, n := range numbers {
		used[n] = true
	}
	if n, ok := numbers[Main]; ok && n != 0 {
		return fmt.Errorf("postgres clusters: the catalog numbers %q %d, not 0", Main, n)
	}
	for _, name := range append([]string{Main}, r.names...) {
		if _, ok := numbers[name]; ok {
			continue
		}
		free := 0
		for used[free] {
			free++
		}
		if free >= postgres.MaxClusters {
			return fmt.Errorf("postgres clusters: every number 0..%d is taken; cluster %q has none", postgres.MaxClusters-1, name)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO styx_clusters (name, number) VALUES ($1, $2)`, name, free); err != nil {
			return postgres.Classify("number the clusters", err)
		}
		numbers[name], used[free] = free, true
	}
	if err := tx.Commit(ctx); err != nil {
		return postgres.Classify("number the clusters", err)
	}
	for name, c := range r.members {
		c.number = numbers[name]
	}
	return nil
}

// catalog runs fn in a transaction on main holding the catalog lock, with
// the placements read under it, after finishing or undoing the creates
// interrupted before (resolveCreating); at the end it notifies every node.
// The placements' own writes are committed by fn on their own (on the
// pool), each durable before the step after it: the transaction holds the
// lock and nothing else.
func (r *Router) catalog(ctx context.Context, fn func(ps map[string]placement) error) error {
	r.admin.Lock()
	defer r.admin.Unlock()
	m, err := r.main.manager()
	if err != nil {
		return err
	}
	pool := m.Store().Pool()
	tx, err := pool.Begin(ctx)
	if err != nil {
		return postgres.Classify("queue admin: the catalog", err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := tx.Exec(ctx, catalogLock); err != nil {
		return postgres.Classify("queue admin: the catalog", err)
	}
	ps, err := readPlacements(ctx, tx)
	if err != nil {
		return err
	}
	if err := r.resolveCreating(ctx, ps); err != nil {
		return err
	}
	ferr := fn(ps)
	if _, err := tx.Exec(ctx, `SELECT pg_notify($1, 'c')`, m.Store().Channel()); err == nil {
		err = tx.Commit(ctx)
		if err != nil && ferr == nil {
			// fn's writes are committed; only the notification may be
			// lost (the others' refresh reads them within a second).
			r.cfg.Log.Warn("postgres clusters: notifying a catalog change failed", "error", err)
		}
	}
	if ferr == nil {
		_ = r.loadPlacements(ctx) // this node routes the change at once
	}
	return ferr
}

// resolveCreating finishes (ready) each create interrupted after its
// placement was recorded, when its queue exists on its home cluster, and
// undoes it (the placement deleted) when it does not; a cluster that does
// not answer keeps its placements creating. Needs the catalog lock (no
// create is in progress then: its node held the lock, and died).
func (r *Router) resolveCreating(ctx context.Context, ps map[string]placement) error {
	for name, p := range ps {
		if p.State != stateCreating {
			continue
		}
		c := r.members[p.Cluster]
		if c == nil {
			continue
		}
		m, err := r.answering(c)
		if err != nil {
			continue
		}
		ictx, cancel := context.WithTimeout(ctx, r.cfg.StatementTimeout)
		_, err = m.Info(ictx, name)
		cancel()
		switch {
		case err == nil:
			err = r.setState(ctx, name, stateReady)
			p.State = stateReady
			ps[name] = p
			r.cfg.Log.Info("postgres clusters: finished an interrupted create", "queue", name, "cluster", p.Cluster)
		case errors.Is(err, queue.ErrQueueNotFound):
			err = r.deletePlacement(ctx, name)
			delete(ps, name)
			r.cfg.Log.Info("postgres clusters: undid an interrupted create", "queue", name, "cluster", p.Cluster)
		default:
			continue
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// pool is main's connection pool.
func (r *Router) pool() (*pgxpool.Pool, error) {
	m, err := r.main.manager()
	if err != nil {
		return nil, err
	}
	return m.Store().Pool(), nil
}

func (r *Router) setState(ctx context.Context, name, state string) error {
	p, err := r.pool()
	if err != nil {
		return err
	}
	_, err = p.Exec(ctx, `UPDATE styx_placements SET state = $2, definition = NULL, updated_at = $3 WHERE queue = $1`,
		name, state, r.cfg.Clock.Now().UnixNano())
	return postgres.Classify("record the placement", err)
}

func (r *Router) deletePlacement(ctx context.Context, name string) error {
	p, err := r.pool()
	if err != nil {
		return err
	}
	_, err = p.Exec(ctx, `DELETE FROM styx_placements WHERE queue = $1`, name)
	return postgres.Classify("delete the placement", err)
}

// insertPlacement records name's placement on cluster in state; false when
// the name has one.
func (r *Router) insertPlacement(ctx context.Context, name, cluster, state string, def *queue.QueueInfo) (bool, error) {
	p, err := r.pool()
	if err != nil {
		return false, err
	}
	var js []byte
	if def != nil {
		if js, err = json.Marshal(def); err != nil {
			return false, err
		}
	}
	tag, err := p.Exec(ctx, `INSERT INTO styx_placements (queue, cluster, state, definition, updated_at) VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (queue) DO NOTHING`, name, cluster, state, js, r.cfg.Clock.Now().UnixNano())
	if err != nil {
		return false, postgres.Classify("record the placement", err)
	}
	return tag.RowsAffected() == 1, nil
}

// Create implements queue.Queues (ADR 0023): under the catalog lock, it
// chooses the queue's cluster (info.Cluster, or its dead_queue's, or a
// weighted choice among the open clusters), records the placement
// (creating), creates the queue on that cluster (whose Manager checks the
// rules against every cluster's definitions) and marks it ready. A create
// that fails on the cluster deletes its placement; one interrupted between
// the steps is finished or undone by the next catalog step of any node.
func (r *Router) Create(ctx context.Context, info queue.QueueInfo) error {
	if err := queue.CheckCluster(info.Cluster, r.names); err != nil {
		return err
	}
	return r.catalog(ctx, func(ps map[string]placement) error {
		if _, ok := ps[info.Name]; ok {
			return queue.Exists(info.Name)
		}
		home := info.Cluster
		if home == "" {
			home = r.choose(ps, info)
		}
		c := r.members[home]
		m, err := c.manager()
		if err != nil {
			return err
		}
		def := info
		def.Cluster = ""
		ok, err := r.insertPlacement(ctx, info.Name, home, stateCreating, &def)
		if err != nil {
			return err
		}
		if !ok {
			return queue.Exists(info.Name)
		}
		if err := m.Create(ctx, def); err != nil {
			if derr := r.deletePlacement(context.WithoutCancel(ctx), info.Name); derr != nil {
				r.cfg.Log.Warn("postgres clusters: undoing a failed create's placement failed; the next catalog step will",
					"queue", info.Name, "error", derr)
			}
			return err
		}
		return r.setState(ctx, info.Name, stateReady)
	})
}

// choose returns the cluster of a create that names none: its dead_queue's
// (so that the dead-letter move stays one statement), else a weighted
// random choice among the open clusters (Cluster.Weight), else main.
func (r *Router) choose(ps map[string]placement, info queue.QueueInfo) string {
	if p, ok := ps[info.DeadQueue]; ok && info.DeadQueue != "" {
		return p.Cluster
	}
	total := 0
	for _, name := range r.names {
		if c := r.members[name]; c.mgr.Load() != nil {
			total += c.Weight
		}
	}
	if total == 0 {
		return Main
	}
	n := rand.IntN(total)
	for _, name := range r.names {
		c := r.members[name]
		if c.mgr.Load() == nil {
			continue
		}
		if n < c.Weight {
			return name
		}
		n -= c.Weight
	}
	return Main
}

// Update implements queue.Queues: on the queue's home cluster, under the
// catalog lock.
func (r *Router) Update(ctx context.Context, name string, change func(*queue.QueueInfo) error) error {
	return r.catalog(ctx, func(ps map[string]placement) error {
		p, ok := ps[name]
		if !ok || p.State == stateCreating {
			return queue.NotFound(name)
		}
		if p.State == stateMoving {
			return moving(name) // its definition is copied already (move.go)
		}
		c := r.members[p.Cluster]
		if c == nil {
			return queue.NotFound(name)
		}
		m, err := c.manager()
		if err != nil {
			return err
		}
		return m.Update(ctx, name, change)
	})
}

// Delete implements queue.Queues: on the queue's home cluster (whose
// Manager refuses a queue that is any cluster's queue's dead_queue), then
// its placement, under the catalog lock.
func (r *Router) Delete(ctx context.Context, name string) error {
	return r.catalog(ctx, func(ps map[string]placement) error {
		p, ok := ps[name]
		if !ok || p.State == stateCreating {
			return queue.NotFound(name)
		}
		if p.State == stateMoving {
			return moving(name) // abort the move first (move.go)
		}
		c := r.members[p.Cluster]
		if c == nil {
			return queue.NotFound(name)
		}
		m, err := c.manager()
		if err != nil {
			return err
		}
		if err := m.Delete(ctx, name); err != nil {
			return err
		}
		return r.deletePlacement(ctx, name)
	})
}

// reconcile checks the catalog against the clusters' queues under the
// catalog lock (waiting for it when wait, else only when it is free): a
// queue on a cluster without a placement gets one (ready: queues created
// before the deployment had several clusters, or by an undone create whose
// node lived on), a ready placement whose cluster answers without the
// queue is deleted (a delete interrupted after the queue went), and
// interrupted creates are resolved. Each cluster's listing is kept for
// others.
func (r *Router) reconcile(ctx context.Context, wait bool) error {
	if wait {
		r.admin.Lock()
	} else if !r.admin.TryLock() {
		return nil // this node's own step runs
	}
	defer r.admin.Unlock()
	m, err := r.main.manager()
	if err != nil {
		return err
	}
	tx, err := m.Store().Pool().Begin(ctx)
	if err != nil {
		return postgres.Classify("reconcile the catalog", err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if wait {
		_, err = tx.Exec(ctx, catalogLock)
	} else {
		var got bool
		err = tx.QueryRow(ctx, catalogTryLock).Scan(&got)
		if err == nil && !got {
			return nil // another node's step, or reconcile, is running
		}
	}
	if err != nil {
		return postgres.Classify("reconcile the catalog", err)
	}
	ps, err := readPlacements(ctx, tx)
	if err != nil {
		return err
	}
	if err := r.resolveCreating(ctx, ps); err != nil {
		return err
	}
	changed := false
	for _, name := range r.names {
		c := r.members[name]
		if c.mgr.Load() == nil {
			continue
		}
		defs, err := r.definitions(ctx, c)
		if err != nil {
			continue
		}
		for q := range defs {
			if _, ok := ps[q]; ok {
				continue
			}
			if _, err := r.insertPlacement(ctx, q, c.Name, stateReady, nil); err != nil {
				return err
			}
			ps[q] = placement{Cluster: c.Name, Epoch: 1, State: stateReady}
			changed = true
		}
		for q, p := range ps {
			if p.Cluster != c.Name || p.State != stateReady {
				continue
			}
			if _, ok := defs[q]; ok {
				continue
			}
			if _, err := c.mgr.Load().Info(ctx, q); !errors.Is(err, queue.ErrQueueNotFound) {
				continue // there after all (created since the listing), or no answer
			}
			if err := r.deletePlacement(ctx, q); err != nil {
				return err
			}
			delete(ps, q)
			changed = true
		}
	}
	if changed {
		if _, err := tx.Exec(ctx, `SELECT pg_notify($1, 'c')`, m.Store().Channel()); err != nil {
			return postgres.Classify("reconcile the catalog", err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return postgres.Classify("reconcile the catalog", err)
	}
	return r.loadPlacements(ctx)
}

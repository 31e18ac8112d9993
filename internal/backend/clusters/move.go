package clusters

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/styxq/styx/internal/apierr"
	"github.com/styxq/styx/internal/backend/postgres"
	"github.com/styxq/styx/internal/engine"
	"github.com/styxq/styx/internal/queue"
	"github.com/styxq/styx/internal/store"
)

// Moving a queue from its cluster to another (queues.move; ADR 0023,
// "Rebalancing"; docs/storage/postgres.md, "Moving a queue"). The catalog
// drives it, keyed by the placement's epoch:
//
//  1. Under the catalog lock, the placement becomes moving with a new
//     epoch and the destination (move_to).
//  2. The backend's steps (postgres.Store.Fence on the source,
//     PrepareMoveIn on the destination, CopyQueue with its progress written
//     to the placement, GoLive on the destination), each idempotent.
//  3. Under the catalog lock, the placement switches to the destination
//     (epoch + 1, ready), and every node is notified.
//  4. After two refresh intervals (every node routes to the destination by
//     then), the source's rows are deleted (DeleteMoved).
//
// One node runs a move at a time: the runner holds a session advisory lock
// on main (moveLock) for the move's length, so a node that dies releases it
// with its connection, and every node's sweep (sweepMoves) takes over a
// moving placement whose lock is free and runs the steps again from the
// first. A move is aborted, before its switch, by moving the queue back to
// the cluster it is on (Move with the source): the destination's copy is
// deleted and the source's fence lifted.

// stateMoving: the queue moves to move_to; routed to its cluster (the
// source), which answers 453 queue moving once fenced.
const stateMoving = "moving"

// sweepMovesEvery is how often each node looks for moves to take over
// and for a moved queue's rows left on its source.
const sweepMovesEvery = 2 * time.Second

// moving is the client-facing error of a catalog step refused while name
// moves: 453 queue moving, as its iterations answer.
func moving(name string) error {
	return apierr.Wrap(queue.ErrQueueMoving, apierr.Unavailable, "queue moving; queue '%s' is moving to another cluster; retry", name)
}

// move is a moving placement's row.
type move struct {
	name, from, to string
	epoch          int64
	copied, total  int64
}

// readMove reads name's placement as a move; ok is false when it is not
// moving.
func readMove(ctx context.Context, db interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, name string) (move, bool, error) {
	mv := move{name: name}
	var state string
	err := db.QueryRow(ctx, `SELECT cluster, epoch, state, move_to, move_copied, move_total FROM styx_placements WHERE queue=$1`, name).
		Scan(&mv.from, &mv.epoch, &state, &mv.to, &mv.copied, &mv.total)
	if errors.Is(err, pgx.ErrNoRows) {
		return mv, false, nil
	}
	if err != nil {
		return mv, false, postgres.Classify("read the move", err)
	}
	return mv, state == stateMoving, nil
}

// stillMoving reads mv's queue's placement again and reports whether mv is
// still in progress: moving, under mv's epoch (another node may have
// finished or aborted it meanwhile). cur is the placement read.
func stillMoving(ctx context.Context, pool *pgxpool.Pool, mv move) (cur move, live bool, err error) {
	cur, moving, err := readMove(ctx, pool, mv.name)
	return cur, err == nil && moving && cur.epoch == mv.epoch, err
}

// moveStatus returns name's move in progress for Info, nil when none.
func (r *Router) moveStatus(ctx context.Context, name string) *queue.MoveStatus {
	p, ok := r.placement(name)
	if !ok || p.State != stateMoving {
		return nil
	}
	pool, err := r.pool()
	if err != nil {
		return nil
	}
	mv, ok, err := readMove(ctx, pool, name)
	if err != nil || !ok {
		return nil
	}
	return &queue.MoveStatus{To: mv.to, Epoch: mv.epoch, Copied: mv.copied, Total: mv.total}
}

// Move implements queue.Mover (see above and queue.Mover): it begins the
// move of name to cluster, or finds the one in progress, runs it (or waits
// for the node that does) and returns once the queue serves on cluster. A
// move to the cluster the queue is on while it moves elsewhere aborts that
// move (before its switch; after it, the move is finished instead, and the
// answer names where the queue is). A queue may move away from its
// dead_queue, and a dead-letter queue away from its queues: their
// dead-letter moves then take the two-phase path (deadletters.go). 400
// naming cluster for an unknown cluster; 409 while it moves to a third.
func (r *Router) Move(ctx context.Context, name, cluster string) (queue.MoveResult, error) {
	if err := queue.CheckCluster(cluster, r.names); err != nil {
		return queue.MoveResult{}, err
	}
	var mv move
	var done *queue.MoveResult
	var abort bool
	err := r.catalog(ctx, func(ps map[string]placement) error {
		p, ok := ps[name]
		if !ok || p.State == stateCreating {
			return queue.NotFound(name)
		}
		pool, err := r.pool()
		if err != nil {
			return err
		}
		cur, moving, err := readMove(ctx, pool, name)
		if err != nil {
			return err
		}
		switch {
		case moving && cur.to == cluster:
			mv = cur // in progress: run it, or wait for it
			return nil
		case moving && cur.from == cluster:
			mv, abort = cur, true
			return nil
		case moving:
			return apierr.New(apierr.Conflict, "queue '%s' is moving to cluster '%s'; move it to '%s' (where it is) to abort that move, "+
				"or wait for it", name, cur.to, cur.from)
		case p.Cluster == cluster:
			done = &queue.MoveResult{From: cluster, To: cluster, Epoch: p.Epoch}
			return nil
		}
		mv = move{name: name, from: p.Cluster, to: cluster, epoch: p.Epoch + 1}
		_, err = pool.Exec(ctx, `UPDATE styx_placements SET state=$2, epoch=$3, move_to=$4, move_copied=0, move_total=0, updated_at=$5
			WHERE queue=$1`, name, stateMoving, mv.epoch, cluster, r.cfg.Clock.Now().UnixNano())
		return postgres.Classify("record the move", err)
	})
	if err != nil || done != nil {
		if done != nil {
			return *done, nil
		}
		return queue.MoveResult{}, err
	}
	if abort {
		return r.abortMove(ctx, mv)
	}
	return r.runOrWait(ctx, mv)
}

// runOrWait runs mv on this node when no other node runs it (moveLock),
// else waits, polling the catalog, until the queue serves on mv.to (or
// the move was aborted, or ctx ends).
func (r *Router) runOrWait(ctx context.Context, mv move) (queue.MoveResult, error) {
	for {
		res, ran, err := r.tryRun(ctx, mv)
		if ran || err != nil {
			return res, err
		}
		pool, err := r.pool()
		if err != nil {
			return queue.MoveResult{}, err
		}
		cur, live, err := stillMoving(ctx, pool, mv)
		if err != nil {
			return queue.MoveResult{}, err
		}
		if !live {
			p, _ := r.placementNow(ctx, mv.name)
			if p.Cluster != mv.to {
				return queue.MoveResult{}, apierr.New(apierr.Conflict, "the move of queue '%s' to cluster '%s' was aborted; it is on '%s'",
					mv.name, mv.to, p.Cluster)
			}
			return queue.MoveResult{From: mv.from, To: mv.to, Epoch: mv.epoch, Items: cur.total}, nil
		}
		select {
		case <-ctx.Done():
			return queue.MoveResult{}, store.Unavailable("queue '"+mv.name+"'", fmt.Errorf("the move to cluster '%s' goes on: %w", mv.to, ctx.Err()))
		case <-time.After(sweepMovesEvery / 4):
		}
	}
}

// placementNow reads name's placement from the catalog.
func (r *Router) placementNow(ctx context.Context, name string) (placement, error) {
	if err := r.loadPlacements(ctx); err != nil {
		return placement{}, err
	}
	p, _ := r.placement(name)
	return p, nil
}

// moveLock holds the run lock of a queue's move: a session advisory lock
// on a connection of main's pool, released with the connection (Close), or
// when the node dies with its session.
type moveLock struct{ conn *pgxpool.Conn }

// lockMove takes name's run lock without waiting; nil when another node
// (or another goroutine) holds it.
func (r *Router) lockMove(ctx context.Context, name string) (*moveLock, error) {
	pool, err := r.pool()
	if err != nil {
		return nil, err
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, postgres.Classify("lock the move", err)
	}
	var got bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock(hashtext('styx-move:' || current_schema() || ':' || $1))`, name).
		Scan(&got); err != nil {
		conn.Release()
		return nil, postgres.Classify("lock the move", err)
	}
	if !got {
		conn.Release()
		return nil, nil
	}
	return &moveLock{conn: conn}, nil
}

// unlock releases the lock (closing the connection when it cannot say so,
// which ends the session and its lock).
func (l *moveLock) unlock(name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := l.conn.Exec(ctx, `SELECT pg_advisory_unlock(hashtext('styx-move:' || current_schema() || ':' || $1))`, name); err != nil {
		_ = l.conn.Conn().Close(ctx)
	}
	l.conn.Release()
}

// tryRun runs mv when its run lock is free (ran), in the router's context
// (a caller that goes away stops waiting, not the move): ctx bounds the
// wait for the answer only.
func (r *Router) tryRun(ctx context.Context, mv move) (queue.MoveResult, bool, error) {
	if r.ctx.Err() != nil {
		return queue.MoveResult{}, false, engine.ErrShuttingDown
	}
	lock, err := r.lockMove(ctx, mv.name)
	if err != nil || lock == nil {
		return queue.MoveResult{}, false, err
	}
	type result struct {
		res queue.MoveResult
		err error
	}
	out := make(chan result, 1)
	r.wg.Go(func() {
		defer lock.unlock(mv.name)
		res, err := r.runMove(r.ctx, mv)
		out <- result{res, err}
	})
	select {
	case o := <-out:
		return o.res, true, o.err
	case <-ctx.Done():
		return queue.MoveResult{}, true, store.Unavailable("queue '"+mv.name+"'",
			fmt.Errorf("the move to cluster '%s' goes on: %w", mv.to, ctx.Err()))
	}
}

// managers returns the Managers of mv's clusters.
func (r *Router) managers(mv move) (src, dst *postgres.Manager, err error) {
	from, to := r.members[mv.from], r.members[mv.to]
	if from == nil || to == nil {
		return nil, nil, store.Unavailable("queue '"+mv.name+"'", fmt.Errorf("cluster '%s' or '%s' is not configured on this node", mv.from, mv.to))
	}
	if src, err = from.manager(); err != nil {
		return nil, nil, err
	}
	dst, err = to.manager()
	return src, dst, err
}

// runMove runs mv's steps from the first (each is idempotent): see above.
// The caller holds its run lock.
func (r *Router) runMove(ctx context.Context, mv move) (queue.MoveResult, error) {
	srcM, dstM, err := r.managers(mv)
	if err != nil {
		return queue.MoveResult{}, err
	}
	src, dst := srcM.Store(), dstM.Store()
	log := r.cfg.Log.With("queue", mv.name, "from", mv.from, "to", mv.to, "epoch", mv.epoch)
	pool, err := r.pool()
	if err != nil {
		return queue.MoveResult{}, err
	}
	// Still this move? (another node may have finished or aborted it
	// before this one took the lock)
	if cur, live, err := stillMoving(ctx, pool, mv); err != nil || !live {
		if err != nil {
			return queue.MoveResult{}, err
		}
		return queue.MoveResult{From: mv.from, To: mv.to, Epoch: mv.epoch, Items: cur.total}, nil
	}
	log.Info("postgres clusters: moving a queue")
	info, err := src.Fence(ctx, mv.name, mv.epoch)
	if err != nil {
		return queue.MoveResult{}, err
	}
	if _, err := dst.PrepareMoveIn(ctx, info, mv.epoch); err != nil {
		return queue.MoveResult{}, err
	}
	progress := func(p postgres.MoveProgress) {
		if _, err := pool.Exec(ctx, `UPDATE styx_placements SET move_copied=$3, move_total=$4 WHERE queue=$1 AND epoch=$2 AND state=$5`,
			mv.name, mv.epoch, p.Copied, p.Total, stateMoving); err != nil {
			log.Warn("postgres clusters: recording a move's progress failed", "error", err)
		}
		if r.moveBatch != nil {
			r.moveBatch(ctx, p)
		}
	}
	p, err := postgres.CopyQueue(ctx, src, dst, mv.name, mv.epoch, postgres.CopyConfig{BatchItems: r.cfg.MoveBatchItems, Progress: progress})
	if err != nil {
		return queue.MoveResult{}, err
	}
	if err := dst.GoLive(ctx, mv.name, mv.epoch); err != nil {
		return queue.MoveResult{}, err
	}
	err = r.catalog(ctx, func(map[string]placement) error {
		_, err := pool.Exec(ctx, `UPDATE styx_placements SET cluster=$3, epoch=$2 + 1, state=$4, move_to='', move_copied=0, move_total=0,
			updated_at=$5 WHERE queue=$1 AND epoch=$2 AND state=$6`, mv.name, mv.epoch, mv.to, stateReady, r.cfg.Clock.Now().UnixNano(), stateMoving)
		return postgres.Classify("switch the placement", err)
	})
	if err != nil {
		return queue.MoveResult{}, err
	}
	log.Info("postgres clusters: a queue moved; deleting its source's rows", "items", p.Total)
	r.deleteSourceLater(mv)
	return queue.MoveResult{From: mv.from, To: mv.to, Epoch: mv.epoch + 1, Items: p.Total}, nil
}

// deleteSourceLater deletes mv's source rows two refresh intervals after
// its switch, when every node routes to the destination; the sweep
// (sweepMoves) deletes those of a node that died before.
func (r *Router) deleteSourceLater(mv move) {
	r.wg.Go(func() {
		select {
		case <-r.ctx.Done():
			return
		case <-time.After(2 * r.cfg.RefreshInterval):
		}
		srcM, _, err := r.managers(mv)
		if err == nil {
			_, err = srcM.Store().DeleteMoved(r.ctx, mv.name, mv.epoch, r.cfg.MoveBatchItems)
		}
		if err != nil && r.ctx.Err() == nil {
			r.cfg.Log.Warn("postgres clusters: deleting a moved queue's source rows failed; the sweep will", "queue", mv.name,
				"cluster", mv.from, "error", err)
		}
	})
}

// abortMove aborts mv before its switch (the run lock held meanwhile, so
// no node copies): the destination's copy is deleted, the source's fence
// lifted, the placement ready on the source with a new epoch.
func (r *Router) abortMove(ctx context.Context, mv move) (queue.MoveResult, error) {
	var lock *moveLock
	for lock == nil {
		var err error
		if lock, err = r.lockMove(ctx, mv.name); err != nil {
			return queue.MoveResult{}, err
		}
		if lock == nil {
			select {
			case <-ctx.Done():
				return queue.MoveResult{}, store.Unavailable("queue '"+mv.name+"'", fmt.Errorf("abort the move: another node runs it: %w", ctx.Err()))
			case <-time.After(sweepMovesEvery / 4):
			}
		}
	}
	defer lock.unlock(mv.name)
	pool, err := r.pool()
	if err != nil {
		return queue.MoveResult{}, err
	}
	if _, live, err := stillMoving(ctx, pool, mv); err != nil {
		return queue.MoveResult{}, err
	} else if !live {
		p, err := r.placementNow(ctx, mv.name)
		return queue.MoveResult{From: p.Cluster, To: p.Cluster, Epoch: p.Epoch}, err // finished (or aborted) meanwhile
	}
	srcM, dstM, err := r.managers(mv)
	if err != nil {
		return queue.MoveResult{}, err
	}
	if err := postgres.AbortMove(ctx, srcM.Store(), dstM.Store(), mv.name, mv.epoch); err != nil {
		if errors.Is(err, postgres.ErrFencedOtherwise) {
			return queue.MoveResult{}, apierr.New(apierr.Conflict, "the move of queue '%s' to cluster '%s' is past its copy and "+
				"finishes; it cannot be aborted now", mv.name, mv.to)
		}
		return queue.MoveResult{}, err
	}
	err = r.catalog(ctx, func(map[string]placement) error {
		_, err := pool.Exec(ctx, `UPDATE styx_placements SET epoch=$2 + 1, state=$3, move_to='', move_copied=0, move_total=0, updated_at=$4
			WHERE queue=$1 AND epoch=$2 AND state=$5`, mv.name, mv.epoch, stateReady, r.cfg.Clock.Now().UnixNano(), stateMoving)
		return postgres.Classify("abort the move", err)
	})
	if err != nil {
		return queue.MoveResult{}, err
	}
	r.cfg.Log.Info("postgres clusters: a queue's move aborted", "queue", mv.name, "from", mv.from, "to", mv.to, "epoch", mv.epoch)
	return queue.MoveResult{From: mv.from, To: mv.from, Epoch: mv.epoch + 1}, nil
}

// sweepMoves takes over, every sweepMovesEvery, the moves whose run lock
// is free (their node died or closed mid-move), and deletes the rows of a
// moved queue left fenced on a cluster that is not its home.
func (r *Router) sweepMoves() {
	t := time.NewTicker(sweepMovesEvery)
	defer t.Stop()
	for {
		select {
		case <-r.ctx.Done():
			return
		case <-t.C:
		}
		r.sweepOnce()
	}
}

// leftover is a moved queue's row left fenced on a cluster that is not its
// home (sweepOnce).
type leftover struct {
	cluster, queue string
	epoch          int64
}

// sweepOnce is one sweep (sweepMoves); run by sweepMoves' goroutine only,
// which owns r.leftovers.
func (r *Router) sweepOnce() {
	r.mu.RLock()
	ps := make(map[string]placement, len(r.placements))
	for name, p := range r.placements {
		ps[name] = p
	}
	r.mu.RUnlock()
	pool, err := r.pool()
	if err != nil {
		return
	}
	for name, p := range ps {
		if p.State != stateMoving {
			continue
		}
		mv, moving, err := readMove(r.ctx, pool, name)
		if err != nil || !moving {
			continue
		}
		if _, ran, err := r.tryRun(r.ctx, mv); ran && err != nil && r.ctx.Err() == nil {
			r.cfg.Log.Warn("postgres clusters: a queue's move failed; it is tried again", "queue", name, "to", mv.to, "error", err)
		}
	}
	// Moved queues' rows left on a cluster that is not their home (a node
	// died between the switch and the delete): fenced, by an older epoch.
	next := map[leftover]bool{}
	defer func() { r.leftovers = next }()
	for _, cname := range r.names {
		m := r.members[cname].mgr.Load()
		if m == nil {
			continue
		}
		fenced, err := m.Store().FencedQueues(r.ctx)
		if err != nil {
			continue
		}
		for name, epoch := range fenced {
			p, ok := ps[name]
			if !ok || p.Cluster == cname || p.State != stateReady || epoch >= p.Epoch {
				continue
			}
			key := leftover{cname, name, epoch}
			if !r.leftovers[key] {
				// Seen for the first time: deleted at the next sweep, when
				// every node routes to its new home (the switch may be
				// this moment's; deleteSourceLater waits as long).
				next[key] = true
				continue
			}
			if _, err := m.Store().DeleteMoved(r.ctx, name, epoch, r.cfg.MoveBatchItems); err != nil && r.ctx.Err() == nil {
				r.cfg.Log.Warn("postgres clusters: deleting a moved queue's rows left on its old cluster failed", "queue", name,
					"cluster", cname, "error", err)
			}
		}
	}
}

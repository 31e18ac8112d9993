package postgres

import (
	"context"
	"sync"

	"github.com/jackc/pgx/v5"
)

// claimSession is the one database session of a Store that holds its task
// claims (store.TaskClaimer): session-level advisory locks, outside the
// connection pool, so that claims (one per running redrive task, and one
// while a task starts) never take connections from the requests. A node
// that dies loses its session, and with it its claims; so does a node whose
// session is cut, which ClaimHeld tells.
type claimSession struct {
	mu   sync.Mutex
	conn *pgx.Conn // nil until the first claim, and after the session was lost
	// gen counts the sessions opened: a release of a claim taken on an
	// earlier session does nothing (its lock went with that session).
	gen  int
	held map[string]int // the keys held, by the session that holds them
}

// claimKey is the advisory lock of a claim key: per schema, so that
// installations sharing a database do not meet.
const claimKey = `hashtextextended('styx-task:' || current_schema() || ':' || encode($1::bytea, 'hex'), 0)`

// session returns the claim session, opened when there is none. Needs mu.
func (c *claimSession) session(ctx context.Context, s *Store) (*pgx.Conn, error) {
	if c.conn != nil && !c.conn.IsClosed() {
		return c.conn, nil
	}
	c.lost()
	ctx, cancel := context.WithTimeout(ctx, DefaultConnectTimeout)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, s.pool.Config().ConnConfig.Copy())
	if err != nil {
		return nil, err
	}
	c.conn, c.gen = conn, c.gen+1
	return conn, nil
}

// lost forgets the session and its claims (it is gone or going). Needs mu.
func (c *claimSession) lost() {
	if c.conn != nil {
		_ = c.conn.Close(context.Background())
	}
	c.conn = nil
	clear(c.held)
}

// close ends the session, and with it every claim.
func (c *claimSession) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lost()
}

// ClaimTask implements store.TaskClaimer with a session-level advisory lock
// taken on the store's claim session (claimSession) and held until release.
// A key this store already holds is refused like one held elsewhere.
func (s *Store) ClaimTask(ctx context.Context, id string) (func(), bool, error) {
	c := &s.claims
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.held[id]; ok {
		return nil, false, nil
	}
	conn, err := c.session(ctx, s)
	if err != nil {
		return nil, false, wrap("claim task", err)
	}
	qctx, cancel := context.WithTimeout(ctx, DefaultConnectTimeout)
	defer cancel()
	var ok bool
	if err := conn.QueryRow(qctx, `SELECT pg_try_advisory_lock(`+claimKey+`)`, []byte(id)).Scan(&ok); err != nil {
		c.lost()
		return nil, false, wrap("claim task", err)
	}
	if !ok {
		return nil, false, nil
	}
	if c.held == nil {
		c.held = map[string]int{}
	}
	gen := c.gen
	c.held[id] = gen
	release := func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if g, ok := c.held[id]; !ok || g != gen || c.conn == nil {
			return // lost with its session
		}
		delete(c.held, id)
		ctx, cancel := context.WithTimeout(context.Background(), DefaultConnectTimeout)
		defer cancel()
		if _, err := c.conn.Exec(ctx, `SELECT pg_advisory_unlock(`+claimKey+`)`, []byte(id)); err != nil {
			c.lost() // the session is gone, and the lock with it
		}
	}
	return release, true, nil
}

// ClaimHeld implements store.ClaimChecker: the claim session holds its
// advisory locks as long as it lives, so a claim is held when the session
// that took it still answers. A session that fails to answer (cut, or the
// database away) is closed: its locks are gone or going, and the keys may
// be claimed again (by this server too) once the database is back.
func (s *Store) ClaimHeld(ctx context.Context, id string) bool {
	c := &s.claims
	c.mu.Lock()
	defer c.mu.Unlock()
	g, ok := c.held[id]
	if !ok || c.conn == nil || g != c.gen {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, DefaultConnectTimeout)
	defer cancel()
	if _, err := c.conn.Exec(ctx, `SELECT 1`); err != nil {
		c.lost()
		return false
	}
	return true
}

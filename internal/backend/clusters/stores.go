package clusters

import (
	"context"
	"errors"
	"time"

	"github.com/styxq/styx/internal/fifo"
	"github.com/styxq/styx/internal/store"
)

// The stores the daemon needs besides the queues (ADR 0023, as built): the
// API keys, redrive tasks (and their claims) and the activity log are
// main's (Router.Main().Store()); a queue's history minutes and its SQS
// FIFO records are kept on its home cluster, beside its items, whose
// tables they reference (Stores).

// Stores returns the queue history and SQS FIFO store of the Router: each
// call goes to the home cluster of the queue it names.
func (r *Router) Stores() *Stores { return &Stores{r: r} }

// Stores implements store.HistoryStore and fifo.Store over the clusters
// of a Router, routing each call to its queue's home cluster.
type Stores struct{ r *Router }

var (
	_ store.HistoryStore = (*Stores)(nil)
	_ fifo.Store         = (*Stores)(nil)
)

// PutHistory implements store.HistoryStore: each queue's minutes on its
// home cluster; minutes of a queue not placed (or still being created) are dropped,
// as the store drops those of a queue that does not exist. The first
// error is returned after every cluster was written.
func (s *Stores) PutHistory(ctx context.Context, minutes []store.HistoryMinute) error {
	by := map[string][]store.HistoryMinute{}
	for _, m := range minutes {
		if p, ok := s.r.placement(m.Queue); ok && p.State != stateCreating {
			by[p.Cluster] = append(by[p.Cluster], m)
		}
	}
	var first error
	for cluster, ms := range by {
		if err := s.forCluster(cluster, func(st storeOf) error { return st.PutHistory(ctx, ms) }); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// ReadHistory implements store.HistoryStore: each queue's minutes from its
// home cluster, queues ordered as the store orders them (by name).
func (s *Stores) ReadHistory(ctx context.Context, queues []string, from, to time.Time) ([]store.HistoryMinute, error) {
	by := map[string][]string{}
	for _, q := range queues {
		if p, ok := s.r.placement(q); ok {
			by[p.Cluster] = append(by[p.Cluster], q)
		}
	}
	var out []store.HistoryMinute
	for _, name := range s.r.names {
		qs := by[name]
		if len(qs) == 0 {
			continue
		}
		err := s.forCluster(name, func(st storeOf) error {
			ms, err := st.ReadHistory(ctx, qs, from, to)
			out = append(out, ms...)
			return err
		})
		if err != nil {
			return nil, err
		}
	}
	sortMinutes(out)
	return out, nil
}

// PruneHistory implements store.HistoryStore on every open cluster.
func (s *Stores) PruneHistory(ctx context.Context, before time.Time) error {
	var errs []error
	for _, name := range s.r.names {
		if m := s.r.members[name].mgr.Load(); m != nil {
			errs = append(errs, m.Store().PruneHistory(ctx, before))
		}
	}
	return errors.Join(errs...)
}

// storeOf is what Stores needs of a cluster's postgres.Store.
type storeOf interface {
	store.HistoryStore
	fifo.Store
}

// forCluster runs fn on the named cluster's store (453 when it is not
// open).
func (s *Stores) forCluster(name string, fn func(storeOf) error) error {
	c := s.r.members[name]
	if c == nil {
		return store.Unavailable("postgres cluster '"+name+"'", errors.New("not configured"))
	}
	m, err := c.manager()
	if err != nil {
		return err
	}
	return fn(m.Store())
}

// forQueue runs fn on the store of the cluster a global queue ID names
// (Router.global), with the cluster's own queue ID.
func (s *Stores) forQueue(id uint64, fn func(st storeOf, local uint64) error) error {
	c, local, err := s.r.local(id)
	if err != nil {
		return err
	}
	return s.forCluster(c.Name, func(st storeOf) error { return fn(st, local) })
}

// Send implements fifo.Store on the queue's cluster.
func (s *Stores) Send(ctx context.Context, queue uint64, key string, id [16]byte, now time.Time, window time.Duration) (sent fifo.Sent, err error) {
	err = s.forQueue(queue, func(st storeOf, local uint64) error {
		sent, err = st.Send(ctx, local, key, id, now, window)
		return err
	})
	return sent, err
}

// BeginAttempt implements fifo.Store on the queue's cluster.
func (s *Stores) BeginAttempt(ctx context.Context, k fifo.AttemptKey, now time.Time, replace string) (a fifo.Attempt, fresh bool, err error) {
	err = s.forQueue(k.Queue, func(st storeOf, local uint64) error {
		lk := k
		lk.Queue = local
		a, fresh, err = st.BeginAttempt(ctx, lk, now, replace)
		a.Key = k
		return err
	})
	return a, fresh, err
}

// FinishAttempt implements fifo.Store on the queue's cluster.
func (s *Stores) FinishAttempt(ctx context.Context, a fifo.Attempt) error {
	return s.forQueue(a.Key.Queue, func(st storeOf, local uint64) error {
		a.Key.Queue = local
		return st.FinishAttempt(ctx, a)
	})
}

// DropAttempt implements fifo.Store on the queue's cluster.
func (s *Stores) DropAttempt(ctx context.Context, k fifo.AttemptKey, token string) error {
	return s.forQueue(k.Queue, func(st storeOf, local uint64) error {
		k.Queue = local
		return st.DropAttempt(ctx, k, token)
	})
}

// RenewAttempt implements fifo.Store on the queue's cluster.
func (s *Stores) RenewAttempt(ctx context.Context, k fifo.AttemptKey, token string, deadline time.Time) error {
	return s.forQueue(k.Queue, func(st storeOf, local uint64) error {
		k.Queue = local
		return st.RenewAttempt(ctx, k, token, deadline)
	})
}

// Touch implements fifo.Store on the queue's cluster.
func (s *Stores) Touch(ctx context.Context, queue uint64, partition int32, ids []uint64) error {
	return s.forQueue(queue, func(st storeOf, local uint64) error { return st.Touch(ctx, local, partition, ids) })
}

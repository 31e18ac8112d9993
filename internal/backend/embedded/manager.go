package embedded

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/styxq/styx/internal/apierr"
	"github.com/styxq/styx/internal/engine"
	"github.com/styxq/styx/internal/queue"
	"github.com/styxq/styx/internal/store"
	"github.com/styxq/styx/metrics"
)

// Manager owns the logical queues of one server: it starts one per stored
// queue, and it serializes queue administration (create, update, delete) so
// that the dead-letter configuration rules hold across queues.
//
// Locks: adminMu is taken first, then mu. mu guards queues only and is never
// held while calling into a logical queue's loop.
type Manager struct {
	cfg Config

	adminMu sync.Mutex // serializes Create, Update, Delete
	mu      sync.RWMutex
	queues  map[string]*Logical
	closed  bool
	// checker releases held groups (heldgroups.go).
	checker heldChecker
}

// NewManager starts a logical queue for every stored queue. Each loads its
// items in its own goroutine; requests wait for the load.
func NewManager(ctx context.Context, cfg Config) (*Manager, error) {
	m := &Manager{cfg: cfg, queues: make(map[string]*Logical),
		checker: heldChecker{stop: make(chan struct{}), done: make(chan struct{})}}
	infos, err := cfg.Store.ListQueues(ctx, queue.ListQueuesParams{})
	if err != nil {
		return nil, fmt.Errorf("list queues: %w", err)
	}
	// Register every queue before any loop can look up its dead-letter
	// queue.
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, info := range infos {
		m.queues[info.Name] = newLogical(cfg, info, m.lookup)
	}
	go m.runHeldChecks()
	return m, nil
}

// lookup returns the running logical queue of name, or nil. Never blocks
// on a loop.
func (m *Manager) lookup(name string) *Logical {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.queues[name]
}

// Get returns the logical queue of name, or the apierr.Invalid error of
// NotFound.
func (m *Manager) Get(name string) (queue.Queue, error) {
	if l := m.lookup(name); l != nil {
		return l, nil
	}
	return nil, queue.NotFound(name)
}

// Info returns a queue's stored configuration, or the error of NotFound.
func (m *Manager) Info(ctx context.Context, name string) (queue.QueueInfo, error) {
	info, err := m.cfg.Store.GetQueue(ctx, name)
	if errors.Is(err, store.ErrQueueNotFound) {
		return info, queue.NotFound(name)
	}
	return info, catalogErr(err)
}

// List returns the stored queues p selects (see store.Catalog.ListQueues).
func (m *Manager) List(ctx context.Context, p queue.ListQueuesParams) ([]queue.QueueInfo, error) {
	infos, err := m.cfg.Store.ListQueues(ctx, p)
	return infos, catalogErr(err)
}

// adminOf is the manager's engine.Admin for a step that changes the queue
// name: adminMu serializes the steps, the definitions are the store's.
// Each store call is durable on its own (there is no transaction to roll
// back), so a step that fails is aborted by making the running queue
// match what the store holds (reconcile): both stay as before, or, when
// the store applied a change although it reported a failure, both are as
// after it.
func (m *Manager) adminOf(name string) engine.Admin {
	return func(ctx context.Context, fn func(engine.Definitions, map[string]queue.QueueInfo) error) error {
		m.adminMu.Lock()
		defer m.adminMu.Unlock()
		all, err := m.all(ctx)
		if err != nil {
			return err
		}
		err = fn(m.cfg.Store, all)
		if _, refused := apierr.As(err); err != nil && !refused {
			// A rule that refused the step changed nothing; a failure of
			// the store or of the running queue may have.
			m.reconcile(ctx, name, all[name])
		}
		return catalogErr(err)
	}
}

// reconcile makes the running queue of name match the store's definition
// after a failed step: no logical queue when the store holds none, else
// one running the stored definition (started again after a delete that
// failed, handed the definition after an update). When the store cannot
// be read, the step is taken to have changed nothing (store.Catalog: a
// failed call applies nothing) and before, the definition read at its
// start, is restored. Runs under adminMu.
func (m *Manager) reconcile(ctx context.Context, name string, before queue.QueueInfo) {
	stored, err := m.cfg.Store.GetQueue(ctx, name)
	switch {
	case errors.Is(err, store.ErrQueueNotFound):
		m.stop(name)
		m.cfg.Log.Warn("queue admin step failed; the store holds no such queue, and none runs", "queue", name)
		return
	case err != nil:
		if before.Name == "" {
			return // a create: no queue of the name ran before it, and none runs
		}
		stored = before
	}
	m.mu.Lock()
	l := m.queues[name]
	if l == nil && !m.closed {
		m.queues[name] = newLogical(m.cfg, stored, m.lookup)
	}
	m.mu.Unlock()
	if l != nil {
		if err := l.setConfig(stored); err != nil {
			m.cfg.Log.Error("queue admin step failed, and the running queue refused its stored definition", "queue", name, "error", err)
			return
		}
	}
	m.cfg.Log.Warn("queue admin step failed; the queue runs its stored definition", "queue", name)
}

// stop removes the logical queue of name and stops it (finishing the
// requests it took; later ones learn the queue does not exist).
func (m *Manager) stop(name string) {
	m.mu.Lock()
	l := m.queues[name]
	delete(m.queues, name)
	m.mu.Unlock()
	if l != nil {
		l.Loop.Stop(queue.NotFound(name))
		m.cfg.Metrics.ForgetQueue(name)
	}
}

// Create stores a new queue and starts its logical queue
// (engine.CreateQueue).
func (m *Manager) Create(ctx context.Context, info queue.QueueInfo) error {
	if err := queue.CheckCluster(info.Cluster, nil); err != nil {
		return err // PostgreSQL's clusters only (ADR 0023)
	}
	_, err := engine.CreateQueue(ctx, m.adminOf(info.Name), info, func(info queue.QueueInfo) error {
		m.mu.Lock()
		defer m.mu.Unlock()
		if m.closed {
			return engine.ErrShuttingDown
		}
		m.queues[info.Name] = newLogical(m.cfg, info, m.lookup)
		return nil
	})
	return err
}

// Update changes a queue's stored configuration (engine.UpdateQueue) and
// hands it to the logical queue, which applies it before its next
// iteration (setConfig never refuses).
func (m *Manager) Update(ctx context.Context, name string, change func(*queue.QueueInfo) error) error {
	_, err := engine.UpdateQueue(ctx, m.adminOf(name), name, change, func(info queue.QueueInfo) error {
		l := m.lookup(name)
		if l == nil {
			return queue.NotFound(name)
		}
		return l.setConfig(info)
	})
	return err
}

// Delete stops a queue's logical queue (finishing the requests it took)
// and deletes the queue with its items (engine.DeleteQueue); when the
// store's delete fails, the queue runs again (adminOf).
func (m *Manager) Delete(ctx context.Context, name string) error {
	_, err := engine.DeleteQueue(ctx, m.adminOf(name), name, func(queue.QueueInfo) error {
		m.stop(name)
		return nil
	})
	return err
}

// Close stops the held-group checker and every logical queue, finishing
// the requests each has taken.
func (m *Manager) Close() {
	m.stopHeldChecks()
	engine.CloseAll(&m.mu, &m.closed, m.queues)
}

// all returns every stored queue by name.
func (m *Manager) all(ctx context.Context) (map[string]queue.QueueInfo, error) {
	infos, err := m.cfg.Store.ListQueues(ctx, queue.ListQueuesParams{})
	if err != nil {
		return nil, catalogErr(fmt.Errorf("list queues: %w", err))
	}
	all := make(map[string]queue.QueueInfo, len(infos))
	for _, i := range infos {
		all[i.Name] = i
	}
	return all, nil
}

// Sample returns every queue's state for the queue gauges (the daemon
// registers it with metrics.RegisterQueueSampler), from the counts
// each logical queue keeps (Logical.Gauges): a scrape costs O(queues ×
// partitions), not O(items). A queue that does not answer within a second
// is left out of this sample.
func (m *Manager) Sample() []metrics.QueueSample {
	m.mu.RLock()
	ls := make([]*Logical, 0, len(m.queues))
	for _, l := range m.queues {
		ls = append(ls, l)
	}
	m.mu.RUnlock()
	out := make([]metrics.QueueSample, 0, len(ls))
	for _, l := range ls {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		s, err := l.Gauges(ctx)
		cancel()
		if err == nil {
			out = append(out, s)
		}
	}
	return out
}

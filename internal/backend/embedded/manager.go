package embedded

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

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
}

// NewManager starts a logical queue for every stored queue. Each loads its
// items in its own goroutine; requests wait for the load.
func NewManager(ctx context.Context, cfg Config) (*Manager, error) {
	m := &Manager{cfg: cfg, queues: make(map[string]*Logical)}
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

// admin is the manager's engine.Admin: adminMu serializes the steps, the
// definitions are the store's.
func (m *Manager) admin(ctx context.Context, fn func(engine.Definitions, map[string]queue.QueueInfo) error) error {
	m.adminMu.Lock()
	defer m.adminMu.Unlock()
	all, err := m.all(ctx)
	if err != nil {
		return err
	}
	return catalogErr(fn(m.cfg.Store, all))
}

// Create stores a new queue and starts its logical queue
// (engine.CreateQueue).
func (m *Manager) Create(ctx context.Context, info queue.QueueInfo) error {
	_, err := engine.CreateQueue(ctx, m.admin, info, func(info queue.QueueInfo) error {
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
// hands it to the logical queue.
func (m *Manager) Update(ctx context.Context, name string, change func(*queue.QueueInfo) error) error {
	_, err := engine.UpdateQueue(ctx, m.admin, name, change, func(info queue.QueueInfo) error {
		l := m.lookup(name)
		if l == nil {
			return queue.NotFound(name)
		}
		return l.setConfig(ctx, info)
	})
	return err
}

// Delete stops a queue's logical queue (finishing the requests it took)
// and deletes the queue with its items (engine.DeleteQueue).
func (m *Manager) Delete(ctx context.Context, name string) error {
	_, err := engine.DeleteQueue(ctx, m.admin, name, func(queue.QueueInfo) error {
		m.mu.Lock()
		l := m.queues[name]
		delete(m.queues, name)
		m.mu.Unlock()
		if l != nil {
			l.Loop.Stop(queue.NotFound(name))
		}
		m.cfg.Metrics.ForgetQueue(name)
		return nil
	})
	return err
}

// Close stops every logical queue, finishing the requests each has taken.
func (m *Manager) Close() {
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

package queue

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/styxq/styx/internal/apierr"
	"github.com/styxq/styx/internal/engine"
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
	infos, err := cfg.Store.ListQueues(ctx, store.ListQueuesParams{})
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
func (m *Manager) Get(name string) (Queue, error) {
	if l := m.lookup(name); l != nil {
		return l, nil
	}
	return nil, notFound(name)
}

// notFound is the error for a queue that does not exist: 400, with
// Querator's message, on every path (../shared/docs/wire-contract.md).
// queueExists answers a create of a queue that exists: 400, as Querator
// answers it (its AlreadyExists test), with a message styx.IsQueueExists
// recognises.
func queueExists(name string) error {
	return apierr.Invalidf("queue already exists; '%s'", name)
}

func notFound(name string) error {
	return apierr.Invalidf("queue does not exist; no such queue named '%s'", name)
}

// Info returns a queue's stored configuration, or the error of NotFound.
func (m *Manager) Info(ctx context.Context, name string) (store.QueueInfo, error) {
	info, err := m.cfg.Store.GetQueue(ctx, name)
	if errors.Is(err, store.ErrQueueNotFound) {
		return info, notFound(name)
	}
	return info, catalogErr(err)
}

// List returns the stored queues p selects (see store.Catalog.ListQueues).
func (m *Manager) List(ctx context.Context, p store.ListQueuesParams) ([]store.QueueInfo, error) {
	infos, err := m.cfg.Store.ListQueues(ctx, p)
	return infos, catalogErr(err)
}

// Create stores a new queue and starts its logical queue. Returns
// apierr.Invalid if it exists, apierr.Invalid if its dead_queue breaks a
// rule (see checkDeadQueue).
func (m *Manager) Create(ctx context.Context, info store.QueueInfo) error {
	m.adminMu.Lock()
	defer m.adminMu.Unlock()
	all, err := m.all(ctx)
	if err != nil {
		return err
	}
	if err := ValidateCreate(all, info); err != nil {
		return err
	}
	info, err = m.cfg.Store.CreateQueue(ctx, info)
	if errors.Is(err, store.ErrQueueExists) {
		return queueExists(info.Name)
	}
	if err != nil {
		return catalogErr(fmt.Errorf("create queue '%s': %w", info.Name, err))
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return engine.ErrShuttingDown
	}
	m.queues[info.Name] = newLogical(m.cfg, info, m.lookup)
	return nil
}

// Update applies change to the stored configuration of name, checks the
// result against the dead-letter rules, stores it and hands it to the
// logical queue. Partitions can be added, not removed.
func (m *Manager) Update(ctx context.Context, name string, change func(*store.QueueInfo) error) error {
	m.adminMu.Lock()
	defer m.adminMu.Unlock()
	all, err := m.all(ctx)
	if err != nil {
		return err
	}
	old, ok := all[name]
	if !ok {
		return notFound(name)
	}
	info := old
	if err := change(&info); err != nil {
		return err
	}
	if err := ValidateUpdate(all, old, info); err != nil {
		return err
	}
	if err := m.cfg.Store.UpdateQueue(ctx, info); err != nil {
		if errors.Is(err, store.ErrQueueNotFound) {
			return notFound(name)
		}
		return catalogErr(fmt.Errorf("update queue '%s': %w", name, err))
	}
	l := m.lookup(name)
	if l == nil {
		return notFound(name)
	}
	return l.setConfig(ctx, info)
}

// Delete stops a queue's logical queue and deletes the queue with its items.
// Returns apierr.Invalid if the queue is some queue's dead_queue.
func (m *Manager) Delete(ctx context.Context, name string) error {
	m.adminMu.Lock()
	defer m.adminMu.Unlock()
	all, err := m.all(ctx)
	if err != nil {
		return err
	}
	if err := ValidateDelete(all, name); err != nil {
		return err
	}
	m.mu.Lock()
	l := m.queues[name]
	delete(m.queues, name)
	m.mu.Unlock()
	if l != nil {
		l.Loop.Shutdown()
	}
	m.cfg.Metrics.ForgetQueue(name)
	if err := m.cfg.Store.DeleteQueue(ctx, name); err != nil && !errors.Is(err, store.ErrQueueNotFound) {
		return catalogErr(fmt.Errorf("delete queue '%s': %w", name, err))
	}
	return nil
}

// Close stops every logical queue, finishing the requests each has taken.
func (m *Manager) Close() {
	m.mu.Lock()
	m.closed = true
	qs := make([]*Logical, 0, len(m.queues))
	for _, l := range m.queues {
		qs = append(qs, l)
	}
	m.mu.Unlock()
	var wg sync.WaitGroup
	for _, l := range qs {
		wg.Go(l.Loop.Shutdown)
	}
	wg.Wait()
}

// all returns every stored queue by name.
func (m *Manager) all(ctx context.Context) (map[string]store.QueueInfo, error) {
	infos, err := m.cfg.Store.ListQueues(ctx, store.ListQueuesParams{})
	if err != nil {
		return nil, catalogErr(fmt.Errorf("list queues: %w", err))
	}
	all := make(map[string]store.QueueInfo, len(infos))
	for _, i := range infos {
		all[i.Name] = i
	}
	return all, nil
}

// ValidateCreate checks a new queue against the stored ones (all, by name):
// apierr.Invalid if the name is taken, apierr.Invalid if its dead_queue
// breaks a rule (see checkDeadQueue).
func ValidateCreate(all map[string]store.QueueInfo, info store.QueueInfo) error {
	if _, ok := all[info.Name]; ok {
		return queueExists(info.Name)
	}
	return checkDeadQueue(all, info)
}

// ValidateUpdate checks a queue's new configuration against its old one and
// the other queues: partitions are never removed, a dead-letter queue gets
// no dead_queue of its own, and the dead_queue rules hold.
func ValidateUpdate(all map[string]store.QueueInfo, old, info store.QueueInfo) error {
	if info.Partitions < old.Partitions {
		return apierr.Invalidf("invalid requested_partitions; queue '%s' has %d partitions, which cannot be reduced to %d",
			info.Name, old.Partitions, info.Partitions)
	}
	if info.DeadQueue != "" && info.DeadQueue != old.DeadQueue {
		if refs := referrers(all, info.Name); len(refs) > 0 {
			return apierr.Invalidf("invalid dead_queue; queue '%s' is the dead_queue of %s, and a dead-letter queue cannot have one of its own",
				info.Name, quoteList(refs))
		}
	}
	return checkDeadQueue(all, info)
}

// ValidateDelete checks that name exists (the error of NotFound) and is no
// queue's dead_queue (apierr.Invalid).
func ValidateDelete(all map[string]store.QueueInfo, name string) error {
	if _, ok := all[name]; !ok {
		return notFound(name)
	}
	if refs := referrers(all, name); len(refs) > 0 {
		return apierr.Invalidf("queue '%s' cannot be deleted; it is the dead_queue of %s", name, quoteList(refs))
	}
	return nil
}

// checkDeadQueue enforces the dead-letter configuration rules on info: its
// dead_queue exists, is not the queue itself, and has no dead_queue of its
// own (no chains).
func checkDeadQueue(all map[string]store.QueueInfo, info store.QueueInfo) error {
	if info.DeadQueue == "" {
		return nil
	}
	if info.DeadQueue == info.Name {
		return apierr.Invalidf("invalid dead_queue; a queue cannot be its own dead_queue ('%s')", info.Name)
	}
	dlq, ok := all[info.DeadQueue]
	if !ok {
		return apierr.Invalidf("invalid dead_queue; queue '%s' does not exist", info.DeadQueue)
	}
	if dlq.DeadQueue != "" {
		return apierr.Invalidf("invalid dead_queue; '%s' has a dead_queue of its own ('%s'), and dead-letter queues cannot be chained",
			info.DeadQueue, dlq.DeadQueue)
	}
	return nil
}

// referrers returns the names of the queues whose dead_queue is name.
func referrers(all map[string]store.QueueInfo, name string) []string {
	var refs []string
	for _, i := range all {
		if i.DeadQueue == name {
			refs = append(refs, i.Name)
		}
	}
	slices.Sort(refs)
	return refs
}

func quoteList(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = "'" + n + "'"
	}
	return strings.Join(q, ", ")
}

// Sample returns every queue's state for the queue gauges, from the counts
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

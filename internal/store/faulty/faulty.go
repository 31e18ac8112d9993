// Package faulty wraps a store.Store to inject faults in tests: a hook runs
// before every Write and may fail it, so tests can stop a move between the
// dead-letter queue's write and the source's delete; a sync hook can hold
// or fail the durability of a pipelined write (store.AsyncWriter); SetDown
// fails every call, as a disk or database that is gone would; SetCallFault
// fails one kind of queue definition call, before or after the store
// applied it; a history hook may fail the queue history's writes
// (store.HistoryStore.PutHistory) alone, and an activity hook the activity
// log's (store.ActivityStore.PutActivity).
package faulty

import (
	"context"
	"fmt"
	"sync"

	"github.com/styxq/styx/internal/queue"
	"github.com/styxq/styx/internal/store"
)

// Store is a store.Store whose writes pass through a hook. It is a
// store.AsyncWriter: WriteAsync uses the wrapped store's when it has one, so
// the logical queue pipelines over a wrapped Pebble store as it does over a
// bare one.
type Store struct {
	store.Store
	mu       sync.Mutex
	hook     func(b *store.Batch) error
	syncHook func(b *store.Batch) func() error
	down     error
	call     *CallFault
	history  func(ms []store.HistoryMinute) error
	stored   func(ms []store.HistoryMinute)
	activity func(r store.ActivityRecord) error
}

// CallFault fails the queue definition calls named Call: "create queue",
// "update queue" or "delete queue". With After false the wrapped store
// never sees the call; with After true the wrapped store applies it and
// the call returns Err nonetheless, as a store does whose write was
// applied before its sync failed or before the store was found faulted.
type CallFault struct {
	Call  string
	After bool
	Err   error
}

// SetCallFault installs f until SetCallFault(nil). Safe to call
// concurrently with calls.
func (s *Store) SetCallFault(f *CallFault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.call = f
}

// faultCall runs do, the call named call, failing it as the CallFault
// says (after the outage check, fail).
func (s *Store) faultCall(call string, do func() error) error {
	if err := s.fail(call); err != nil {
		return err
	}
	s.mu.Lock()
	f := s.call
	s.mu.Unlock()
	if f == nil || f.Call != call {
		return do()
	}
	if !f.After {
		return fmt.Errorf("faulty: %s: %w", call, f.Err)
	}
	if err := do(); err != nil {
		return err
	}
	return fmt.Errorf("faulty: %s (applied): %w", call, f.Err)
}

var (
	_ store.AsyncWriter = (*Store)(nil)
	_ store.Syncer      = (*Store)(nil)
)

// New wraps s. With no hook set, it behaves exactly as s.
func New(s store.Store) *Store { return &Store{Store: s} }

// SetWriteHook installs fn, called before each Write; a non-nil error fails
// that Write without applying it. nil removes the hook. Safe to call
// concurrently with writes.
func (s *Store) SetWriteHook(fn func(b *store.Batch) error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hook = fn
}

// SetHistoryHook installs fn, called before each PutHistory with the
// minutes to write; a non-nil error fails that PutHistory without writing
// any of them. nil removes the hook. Safe to call concurrently with
// writes.
func (s *Store) SetHistoryHook(fn func(ms []store.HistoryMinute) error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.history = fn
}

// SetHistoryStored installs fn, called after each PutHistory that the
// wrapped store completed without error, with the minutes it stored: what
// a test waits for before it restarts a server, since the history hook
// runs before the write, which a shutdown can still cancel. nil removes
// it. Safe to call concurrently with writes.
func (s *Store) SetHistoryStored(fn func(ms []store.HistoryMinute)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stored = fn
}

// PutHistory runs the history hook, then the wrapped PutHistory, then,
// when that stored the minutes, the SetHistoryStored function.
func (s *Store) PutHistory(ctx context.Context, ms []store.HistoryMinute) error {
	s.mu.Lock()
	hook, stored := s.history, s.stored
	s.mu.Unlock()
	if hook != nil {
		if err := hook(ms); err != nil {
			return err
		}
	}
	if err := s.Store.PutHistory(ctx, ms); err != nil {
		return err
	}
	if stored != nil {
		stored(ms)
	}
	return nil
}

// SetActivityHook installs fn, called before each PutActivity with the
// record to write; a non-nil error fails that PutActivity without writing
// it. nil removes the hook. Safe to call concurrently with writes.
func (s *Store) SetActivityHook(fn func(r store.ActivityRecord) error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.activity = fn
}

// PutActivity fails while the store is down, then runs the activity hook,
// then the wrapped PutActivity.
func (s *Store) PutActivity(ctx context.Context, r store.ActivityRecord) (uint64, error) {
	if err := s.fail("put activity"); err != nil {
		return 0, err
	}
	s.mu.Lock()
	hook := s.activity
	s.mu.Unlock()
	if hook != nil {
		if err := hook(r); err != nil {
			return 0, err
		}
	}
	return s.Store.PutActivity(ctx, r)
}

// SetSyncHook installs fn, called by each WriteAsync with the batch once
// it is applied (b is valid only during the call). The function fn returns,
// when not nil, runs when the write's durability is awaited, after the
// wrapped store's own wait: it may block (to hold the replies of that batch
// and every later one) or return an error (a failed sync). With a sync hook
// set, WriteAsync pipelines even over a store that is not an AsyncWriter
// (a plain store.Store). nil removes the hook.
func (s *Store) SetSyncHook(fn func(b *store.Batch) func() error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.syncHook = fn
}

// WriteAsync runs the write hook, then the wrapped store's WriteAsync (or
// Write), then the sync hook.
func (s *Store) WriteAsync(ctx context.Context, b *store.Batch) (func() error, error) {
	if err := s.fail("write"); err != nil {
		return nil, err
	}
	s.mu.Lock()
	hook, syncHook := s.hook, s.syncHook
	s.mu.Unlock()
	if hook != nil {
		if err := hook(b); err != nil {
			return nil, err
		}
	}
	var wait func() error
	if aw, ok := s.Store.(store.AsyncWriter); ok {
		w, err := aw.WriteAsync(ctx, b)
		if err != nil {
			return nil, err
		}
		wait = w
	} else if err := s.Store.Write(ctx, b); err != nil {
		return nil, err
	}
	if syncHook == nil {
		return wait, nil
	}
	extra := syncHook(b)
	if extra == nil {
		return wait, nil
	}
	return func() error {
		var err error
		if wait != nil {
			err = wait()
		}
		if herr := extra(); err == nil {
			err = herr
		}
		return err
	}, nil
}

// Sync implements store.Syncer: the wrapped store's Sync when it has one
// (a lazy batch, store.Batch.Lazy, then reached it unsynced), else nothing
// (a store without one syncs every batch it applies). A store set down
// fails it.
func (s *Store) Sync(ctx context.Context) error {
	if err := s.fail("sync"); err != nil {
		return err
	}
	if sy, ok := s.Store.(store.Syncer); ok {
		return sy.Sync(ctx)
	}
	return nil
}

// Write runs the hook, then the wrapped Write.
func (s *Store) Write(ctx context.Context, b *store.Batch) error {
	if err := s.fail("write"); err != nil {
		return err
	}
	s.mu.Lock()
	hook := s.hook
	s.mu.Unlock()
	if hook != nil {
		if err := hook(b); err != nil {
			return err
		}
	}
	return s.Store.Write(ctx, b)
}

// SetDown makes every call of the store (catalog, items, tasks, keys; not
// Close) fail with "faulty: <call>: <err>" until SetDown(nil), the way a
// disk or a database that is gone fails them: an outage. The error is
// returned unclassified, as a driver returns it; classifying it is the
// engine's work. Safe to call concurrently with calls.
func (s *Store) SetDown(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.down = err
}

// fail returns the outage error for call, or nil when the store is up.
func (s *Store) fail(call string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.down == nil {
		return nil
	}
	return fmt.Errorf("faulty: %s: %w", call, s.down)
}

// CreateQueue fails while the store is down or as a CallFault says, else
// calls the wrapped store.
func (s *Store) CreateQueue(ctx context.Context, info queue.QueueInfo) (queue.QueueInfo, error) {
	var created queue.QueueInfo
	err := s.faultCall("create queue", func() (err error) {
		created, err = s.Store.CreateQueue(ctx, info)
		return err
	})
	if err != nil {
		return queue.QueueInfo{}, err
	}
	return created, nil
}

// UpdateQueue fails while the store is down or as a CallFault says, else
// calls the wrapped store.
func (s *Store) UpdateQueue(ctx context.Context, info queue.QueueInfo) error {
	return s.faultCall("update queue", func() error { return s.Store.UpdateQueue(ctx, info) })
}

// GetQueue fails while the store is down, else calls the wrapped store.
func (s *Store) GetQueue(ctx context.Context, name string) (queue.QueueInfo, error) {
	if err := s.fail("get queue"); err != nil {
		return queue.QueueInfo{}, err
	}
	return s.Store.GetQueue(ctx, name)
}

// ListQueues fails while the store is down, else calls the wrapped store.
func (s *Store) ListQueues(ctx context.Context, p queue.ListQueuesParams) ([]queue.QueueInfo, error) {
	if err := s.fail("list queues"); err != nil {
		return nil, err
	}
	return s.Store.ListQueues(ctx, p)
}

// DeleteQueue fails while the store is down or as a CallFault says, else
// calls the wrapped store.
func (s *Store) DeleteQueue(ctx context.Context, name string) error {
	return s.faultCall("delete queue", func() error { return s.Store.DeleteQueue(ctx, name) })
}

// LoadItems fails while the store is down, else calls the wrapped store.
func (s *Store) LoadItems(ctx context.Context, queueID uint64, partition int32, fn func(queue.ItemMeta) error) error {
	if err := s.fail("load items"); err != nil {
		return err
	}
	return s.Store.LoadItems(ctx, queueID, partition, fn)
}

// LastID fails while the store is down, else calls the wrapped store.
func (s *Store) LastID(ctx context.Context, queueID uint64) (uint64, error) {
	if err := s.fail("last id"); err != nil {
		return 0, err
	}
	return s.Store.LastID(ctx, queueID)
}

// ReadBodies fails while the store is down, else calls the wrapped store.
func (s *Store) ReadBodies(ctx context.Context, queueID uint64, partition int32, bodyIDs []uint64) ([]queue.ItemBody, []queue.ItemErrors, error) {
	if err := s.fail("read bodies"); err != nil {
		return nil, nil, err
	}
	return s.Store.ReadBodies(ctx, queueID, partition, bodyIDs)
}

// ListItems fails while the store is down, else calls the wrapped store.
func (s *Store) ListItems(ctx context.Context, queueID uint64, partition int32, afterID uint64, limit int) ([]queue.Item, error) {
	if err := s.fail("list items"); err != nil {
		return nil, err
	}
	return s.Store.ListItems(ctx, queueID, partition, afterID, limit)
}

// ListItemsWithin fails while the store is down, else calls the wrapped
// store.
func (s *Store) ListItemsWithin(ctx context.Context, queueID uint64, partition int32, afterID uint64, limit, maxBytes int) ([]queue.Item, error) {
	if err := s.fail("list items"); err != nil {
		return nil, err
	}
	return s.Store.ListItemsWithin(ctx, queueID, partition, afterID, limit, maxBytes)
}

// ReadBodiesWithin fails while the store is down, else calls the wrapped
// store.
func (s *Store) ReadBodiesWithin(ctx context.Context, queueID uint64, partition int32, bodyIDs []uint64, maxBytes int) ([]queue.ItemBody, []queue.ItemErrors, error) {
	if err := s.fail("read bodies"); err != nil {
		return nil, nil, err
	}
	return s.Store.ReadBodiesWithin(ctx, queueID, partition, bodyIDs, maxBytes)
}

// PutTask fails while the store is down, else calls the wrapped store.
func (s *Store) PutTask(ctx context.Context, t store.TaskRecord) error {
	if err := s.fail("put task"); err != nil {
		return err
	}
	return s.Store.PutTask(ctx, t)
}

// ListTasks fails while the store is down, else calls the wrapped store.
func (s *Store) ListTasks(ctx context.Context) ([]store.TaskRecord, error) {
	if err := s.fail("list tasks"); err != nil {
		return nil, err
	}
	return s.Store.ListTasks(ctx)
}

// DeleteTask fails while the store is down, else calls the wrapped store.
func (s *Store) DeleteTask(ctx context.Context, id string) error {
	if err := s.fail("delete task"); err != nil {
		return err
	}
	return s.Store.DeleteTask(ctx, id)
}

// CreateKey fails while the store is down, else calls the wrapped store.
func (s *Store) CreateKey(ctx context.Context, k store.KeyRecord) error {
	if err := s.fail("create key"); err != nil {
		return err
	}
	return s.Store.CreateKey(ctx, k)
}

// GetKey fails while the store is down, else calls the wrapped store.
func (s *Store) GetKey(ctx context.Context, id string) (store.KeyRecord, error) {
	if err := s.fail("get key"); err != nil {
		return store.KeyRecord{}, err
	}
	return s.Store.GetKey(ctx, id)
}

// ListKeys fails while the store is down, else calls the wrapped store.
func (s *Store) ListKeys(ctx context.Context) ([]store.KeyRecord, error) {
	if err := s.fail("list keys"); err != nil {
		return nil, err
	}
	return s.Store.ListKeys(ctx)
}

// DeleteKey fails while the store is down, else calls the wrapped store.
func (s *Store) DeleteKey(ctx context.Context, name string) error {
	if err := s.fail("delete key"); err != nil {
		return err
	}
	return s.Store.DeleteKey(ctx, name)
}

// WriteFault, InsertFault, Generation and Health forward store.Guard to the
// wrapped store when it is one (the Pebble store); otherwise the store never
// refuses writes on its own.
func (s *Store) WriteFault() error {
	if g, ok := s.Store.(store.Guard); ok {
		return g.WriteFault()
	}
	return nil
}

// InsertFault forwards store.Guard (see WriteFault).
func (s *Store) InsertFault() error {
	if g, ok := s.Store.(store.Guard); ok {
		return g.InsertFault()
	}
	return nil
}

// Generation forwards store.Guard (see WriteFault).
func (s *Store) Generation() uint64 {
	if g, ok := s.Store.(store.Guard); ok {
		return g.Generation()
	}
	return 0
}

// Health reports an outage (SetDown) as a store's health probe would see
// it, else forwards store.Guard (see WriteFault).
func (s *Store) Health() string {
	if err := s.fail("health"); err != nil {
		return "storage unavailable: " + err.Error()
	}
	if g, ok := s.Store.(store.Guard); ok {
		return g.Health()
	}
	return ""
}

var _ store.Guard = (*Store)(nil)

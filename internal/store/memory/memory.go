// Package memory is an in-memory store.Store, for tests and for running Styx
// without durability. Nothing survives Close or the process.
//
// Every value crossing the API is copied (payloads, error histories, task
// data, stored queue infos), so callers can neither see nor corrupt internal
// state through slices they passed in or got back. Times are stored with their monotonic
// clock reading stripped, as a durable backend would return them.
package memory

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/styxq/styx/internal/store"
)

// Store is an in-memory store.Store. Create it with New; the zero value is
// not usable. It is safe for concurrent use.
//
// One sync.RWMutex (mu) guards all state: catalog, item and task reads take
// it shared; Write, the queue mutations and the task changes take it
// exclusively. No lock is held while a LoadItems callback runs, so the
// callback may call back into the store.
type Store struct {
	mu      sync.RWMutex
	closed  bool
	lastQID uint64                      // last queue ID assigned; IDs are never reused
	byName  map[string]*queueData       // live queues by name
	byID    map[uint64]*queueData       // the same queues by ID
	tasks   map[string]store.TaskRecord // by ID; Data owned by the store
	keys    map[string]store.KeyRecord  // API keys by name; slices owned by the store
}

// queueData is one queue's state. Guarded by Store.mu.
type queueData struct {
	info   store.QueueInfo
	lastID uint64
	parts  map[int32]*partition
}

// partition holds one partition's items. Guarded by Store.mu.
type partition struct {
	ids    []uint64 // IDs in metas, sorted ascending
	metas  map[uint64]store.ItemMeta
	bodies map[uint64]store.ItemBody   // by BodyID
	errs   map[uint64]store.ItemErrors // by BodyID; never holds a zero value
}

var _ store.Store = (*Store)(nil)

// New returns an empty, open store.
func New() *Store {
	return &Store{
		byName: make(map[string]*queueData),
		byID:   make(map[uint64]*queueData),
		tasks:  make(map[string]store.TaskRecord),
		keys:   make(map[string]store.KeyRecord),
	}
}

// CreateQueue implements store.Store. info.ID is ignored and assigned.
func (s *Store) CreateQueue(ctx context.Context, info store.QueueInfo) (store.QueueInfo, error) {
	if err := ctx.Err(); err != nil {
		return store.QueueInfo{}, fmt.Errorf("memory: create queue %q: %w", info.Name, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return store.QueueInfo{}, fmt.Errorf("memory: create queue %q: %w", info.Name, store.ErrClosed)
	}
	if _, ok := s.byName[info.Name]; ok {
		return store.QueueInfo{}, fmt.Errorf("memory: create queue %q: %w", info.Name, store.ErrQueueExists)
	}
	s.lastQID++
	info.ID = s.lastQID
	info = cleanInfo(info)
	q := &queueData{info: info, parts: make(map[int32]*partition)}
	s.byName[info.Name] = q
	s.byID[info.ID] = q
	return info, nil
}

// UpdateQueue implements store.Store. It returns store.ErrQueueNotFound when
// no queue has info.Name or when its ID is not info.ID.
func (s *Store) UpdateQueue(ctx context.Context, info store.QueueInfo) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memory: update queue %q: %w", info.Name, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("memory: update queue %q: %w", info.Name, store.ErrClosed)
	}
	q, ok := s.byName[info.Name]
	if !ok || q.info.ID != info.ID {
		return fmt.Errorf("memory: update queue %q: %w", info.Name, store.ErrQueueNotFound)
	}
	q.info = cleanInfo(info)
	return nil
}

// GetQueue implements store.Store.
func (s *Store) GetQueue(ctx context.Context, name string) (store.QueueInfo, error) {
	if err := ctx.Err(); err != nil {
		return store.QueueInfo{}, fmt.Errorf("memory: get queue %q: %w", name, err)
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return store.QueueInfo{}, fmt.Errorf("memory: get queue %q: %w", name, store.ErrClosed)
	}
	q, ok := s.byName[name]
	if !ok {
		return store.QueueInfo{}, fmt.Errorf("memory: get queue %q: %w", name, store.ErrQueueNotFound)
	}
	return q.info, nil
}

// ListQueues implements store.Store.
func (s *Store) ListQueues(ctx context.Context, p store.ListQueuesParams) ([]store.QueueInfo, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("memory: list queues: %w", err)
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, fmt.Errorf("memory: list queues: %w", store.ErrClosed)
	}
	var out []store.QueueInfo
	for name, q := range s.byName {
		if name >= p.Pivot && (p.Namespace == "" || q.info.Namespace == p.Namespace) {
			out = append(out, q.info)
		}
	}
	slices.SortFunc(out, func(a, b store.QueueInfo) int { return cmp.Compare(a.Name, b.Name) })
	if p.Limit > 0 && len(out) > p.Limit {
		out = out[:p.Limit]
	}
	return out, nil
}

// DeleteQueue implements store.Store.
func (s *Store) DeleteQueue(ctx context.Context, name string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memory: delete queue %q: %w", name, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("memory: delete queue %q: %w", name, store.ErrClosed)
	}
	q, ok := s.byName[name]
	if !ok {
		return fmt.Errorf("memory: delete queue %q: %w", name, store.ErrQueueNotFound)
	}
	delete(s.byName, name)
	delete(s.byID, q.info.ID)
	return nil
}

// LoadItems implements store.Store. It copies the metadata out in chunks
// under the read lock and calls fn with no lock held.
func (s *Store) LoadItems(ctx context.Context, queueID uint64, partition int32, fn func(store.ItemMeta) error) error {
	var (
		chunk = make([]store.ItemMeta, 0, loadChunk)
		after uint64
		first = true
	)
	for {
		var err error
		chunk, err = s.nextMetas(ctx, queueID, partition, first, after, chunk[:0])
		if err != nil {
			return err
		}
		for _, m := range chunk {
			if err := fn(m); err != nil {
				return err
			}
		}
		if len(chunk) < loadChunk {
			return nil
		}
		first, after = false, chunk[len(chunk)-1].ID
	}
}

// loadChunk is how many metas LoadItems copies per lock acquisition.
const loadChunk = 1024

// nextMetas appends to buf up to loadChunk metas of a partition, those with
// ID > after unless first.
func (s *Store) nextMetas(ctx context.Context, queueID uint64, partition int32, first bool, after uint64, buf []store.ItemMeta) ([]store.ItemMeta, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	p, err := s.partitionLocked(ctx, "load items of", queueID, partition)
	if err != nil || p == nil {
		return buf, err
	}
	i := 0
	if !first {
		i = sort.Search(len(p.ids), func(i int) bool { return p.ids[i] > after })
	}
	for ; i < len(p.ids) && len(buf) < loadChunk; i++ {
		buf = append(buf, p.metas[p.ids[i]])
	}
	return buf, nil
}

// LastID implements store.Store.
func (s *Store) LastID(ctx context.Context, queueID uint64) (uint64, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	q, err := s.queueLocked(ctx, "last id of", queueID)
	if err != nil {
		return 0, err
	}
	return q.lastID, nil
}

// Write implements store.Store. The batch is validated before anything is
// applied, so an invalid batch changes nothing.
func (s *Store) Write(ctx context.Context, b *store.Batch) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	q, err := s.queueLocked(ctx, "write", b.QueueID)
	if err != nil {
		return err
	}
	for i := range b.Ops {
		if k := b.Ops[i].Kind; k < store.OpInsert || k > store.OpSetErrors {
			return fmt.Errorf("memory: write queue %d: op %d: unknown op kind %d", b.QueueID, i, k)
		}
	}
	last := max(q.lastID, b.LastID)
	for i := range b.Ops {
		op := &b.Ops[i]
		p := q.parts[op.Partition]
		if p == nil {
			p = &partition{
				metas:  make(map[uint64]store.ItemMeta),
				bodies: make(map[uint64]store.ItemBody),
				errs:   make(map[uint64]store.ItemErrors),
			}
			q.parts[op.Partition] = p
		}
		switch op.Kind {
		case store.OpInsert:
			p.putMeta(op.Meta)
			var body store.ItemBody
			if op.Body != nil {
				body = copyBody(*op.Body)
			}
			p.bodies[op.Meta.BodyID] = body
			p.putErrors(op.Meta.BodyID, op.Errors)
			last = max(last, op.Meta.ID)
		case store.OpUpdate:
			p.putMeta(op.Meta)
			last = max(last, op.Meta.ID)
		case store.OpRequeue:
			p.deleteMeta(op.OldID)
			p.putMeta(op.Meta)
			last = max(last, op.Meta.ID)
		case store.OpDelete:
			p.deleteMeta(op.Meta.ID)
			delete(p.bodies, op.Meta.BodyID)
			delete(p.errs, op.Meta.BodyID)
		case store.OpSetErrors:
			p.putErrors(op.Meta.BodyID, op.Errors)
		}
	}
	q.lastID = last
	return nil
}

// ReadBodies implements store.Store.
func (s *Store) ReadBodies(ctx context.Context, queueID uint64, partition int32, bodyIDs []uint64) ([]store.ItemBody, []store.ItemErrors, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	p, err := s.partitionLocked(ctx, "read bodies of", queueID, partition)
	if err != nil {
		return nil, nil, err
	}
	bodies := make([]store.ItemBody, len(bodyIDs))
	errs := make([]store.ItemErrors, len(bodyIDs))
	if p == nil {
		return bodies, errs, nil
	}
	for i, id := range bodyIDs {
		bodies[i] = copyBody(p.bodies[id])
		errs[i] = copyErrors(p.errs[id])
	}
	return bodies, errs, nil
}

// ListItems implements store.Store.
func (s *Store) ListItems(ctx context.Context, queueID uint64, partition int32, afterID uint64, limit int) ([]store.Item, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	p, err := s.partitionLocked(ctx, "list items of", queueID, partition)
	if err != nil {
		return nil, err
	}
	if limit <= 0 {
		return nil, fmt.Errorf("memory: list items of queue %d: limit %d must be > 0", queueID, limit)
	}
	if p == nil {
		return nil, nil
	}
	i := sort.Search(len(p.ids), func(i int) bool { return p.ids[i] > afterID })
	var items []store.Item
	for ; i < len(p.ids) && len(items) < limit; i++ {
		m := p.metas[p.ids[i]]
		items = append(items, store.Item{
			Partition: partition,
			Meta:      m,
			Body:      copyBody(p.bodies[m.BodyID]),
			Errors:    copyErrors(p.errs[m.BodyID]),
		})
	}
	return items, nil
}

// PutTask implements store.TaskStore. It stores a copy of t.Data.
func (s *Store) PutTask(ctx context.Context, t store.TaskRecord) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memory: put task %q: %w", t.ID, err)
	}
	if err := checkTaskID(t.ID); err != nil {
		return fmt.Errorf("memory: put task: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("memory: put task %q: %w", t.ID, store.ErrClosed)
	}
	s.tasks[t.ID] = copyTask(t)
	return nil
}

// ListTasks implements store.TaskStore. The records' Data are copies.
func (s *Store) ListTasks(ctx context.Context) ([]store.TaskRecord, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("memory: list tasks: %w", err)
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, fmt.Errorf("memory: list tasks: %w", store.ErrClosed)
	}
	var out []store.TaskRecord
	for _, t := range s.tasks {
		out = append(out, copyTask(t))
	}
	slices.SortFunc(out, func(a, b store.TaskRecord) int { return cmp.Compare(a.ID, b.ID) })
	return out, nil
}

// DeleteTask implements store.TaskStore.
func (s *Store) DeleteTask(ctx context.Context, id string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memory: delete task %q: %w", id, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("memory: delete task %q: %w", id, store.ErrClosed)
	}
	delete(s.tasks, id)
	return nil
}

// Close implements store.Store. It drops all data.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("memory: close: %w", store.ErrClosed)
	}
	s.closed = true
	s.byName, s.byID, s.tasks = nil, nil, nil
	return nil
}

// queueLocked returns the live queue with the given ID. s.mu must be held.
func (s *Store) queueLocked(ctx context.Context, op string, queueID uint64) (*queueData, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("memory: %s queue %d: %w", op, queueID, err)
	}
	if s.closed {
		return nil, fmt.Errorf("memory: %s queue %d: %w", op, queueID, store.ErrClosed)
	}
	q, ok := s.byID[queueID]
	if !ok {
		return nil, fmt.Errorf("memory: %s queue %d: %w", op, queueID, store.ErrQueueNotFound)
	}
	return q, nil
}

// partitionLocked returns a partition of a live queue, nil if it holds
// nothing yet. s.mu must be held.
func (s *Store) partitionLocked(ctx context.Context, op string, queueID uint64, partition int32) (*partition, error) {
	q, err := s.queueLocked(ctx, op, queueID)
	if err != nil {
		return nil, err
	}
	return q.parts[partition], nil
}

// putMeta stores m under m.ID, keeping ids sorted. Appending a new highest
// ID, the common case, is O(1).
func (p *partition) putMeta(m store.ItemMeta) {
	if _, ok := p.metas[m.ID]; !ok {
		if n := len(p.ids); n == 0 || p.ids[n-1] < m.ID {
			p.ids = append(p.ids, m.ID)
		} else {
			i, _ := slices.BinarySearch(p.ids, m.ID)
			p.ids = slices.Insert(p.ids, i, m.ID)
		}
	}
	p.metas[m.ID] = cleanMeta(m)
}

// deleteMeta removes the meta stored under id, if any. Removing the lowest
// ID, the common case, is O(1).
func (p *partition) deleteMeta(id uint64) {
	if _, ok := p.metas[id]; !ok {
		return
	}
	delete(p.metas, id)
	if p.ids[0] == id {
		p.ids = p.ids[1:]
		return
	}
	i, _ := slices.BinarySearch(p.ids, id)
	p.ids = slices.Delete(p.ids, i, i+1)
}

// putErrors stores a copy of e under bodyID; a nil or zero e deletes it.
func (p *partition) putErrors(bodyID uint64, e *store.ItemErrors) {
	if e == nil || e.IsZero() {
		delete(p.errs, bodyID)
		return
	}
	p.errs[bodyID] = copyErrors(*e)
}

// cleanTime strips t's monotonic clock reading.
func cleanTime(t time.Time) time.Time { return t.Round(0) }

func cleanInfo(q store.QueueInfo) store.QueueInfo {
	q.CreatedAt = cleanTime(q.CreatedAt)
	q.UpdatedAt = cleanTime(q.UpdatedAt)
	return q
}

func cleanMeta(m store.ItemMeta) store.ItemMeta {
	m.LeaseDeadline = cleanTime(m.LeaseDeadline)
	m.EnqueueAt = cleanTime(m.EnqueueAt)
	m.ExpireDeadline = cleanTime(m.ExpireDeadline)
	m.CreatedAt = cleanTime(m.CreatedAt)
	m.DeadAt = cleanTime(m.DeadAt)
	return m
}

// copyBody returns b with its own payload and a clean DeadAt. An empty
// payload becomes nil.
func copyBody(b store.ItemBody) store.ItemBody {
	if len(b.Payload) == 0 {
		b.Payload = nil
	} else {
		b.Payload = slices.Clone(b.Payload)
	}
	b.DeadAt = cleanTime(b.DeadAt)
	return b
}

// maxTaskID is the longest task ID accepted, in bytes (see
// store.TaskRecord.ID).
const maxTaskID = 128

// checkTaskID rejects an empty ID or one longer than maxTaskID.
func checkTaskID(id string) error {
	if id == "" || len(id) > maxTaskID {
		return fmt.Errorf("task id of %d bytes: want 1 to %d", len(id), maxTaskID)
	}
	return nil
}

// copyTask returns t with its own Data. Empty Data becomes nil.
func copyTask(t store.TaskRecord) store.TaskRecord {
	if len(t.Data) == 0 {
		t.Data = nil
	} else {
		t.Data = slices.Clone(t.Data)
	}
	return t
}

// copyErrors returns e with its own Errors slice and clean times. An empty
// slice becomes nil.
func copyErrors(e store.ItemErrors) store.ItemErrors {
	if len(e.Errors) == 0 {
		e.Errors = nil
		return e
	}
	errs := make([]store.AttemptError, len(e.Errors))
	for i, a := range e.Errors {
		a.At = cleanTime(a.At)
		errs[i] = a
	}
	e.Errors = errs
	return e
}

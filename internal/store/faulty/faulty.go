// Package faulty wraps a store.Store to inject faults in tests: a hook runs
// before every Write and may fail it, so tests can stop a move between the
// dead-letter queue's write and the source's delete; a sync hook can hold
// or fail the durability of a pipelined write (store.AsyncWriter).
package faulty

import (
	"context"
	"sync"

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
}

var _ store.AsyncWriter = (*Store)(nil)

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

// SetSyncHook installs fn, called by each WriteAsync with the batch once
// it is applied (b is valid only during the call). The function fn returns,
// when not nil, runs when the write's durability is awaited, after the
// wrapped store's own wait: it may block (to hold the replies of that batch
// and every later one) or return an error (a failed sync). With a sync hook
// set, WriteAsync pipelines even over a store that is not an AsyncWriter
// (the memory store). nil removes the hook.
func (s *Store) SetSyncHook(fn func(b *store.Batch) func() error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.syncHook = fn
}

// WriteAsync runs the write hook, then the wrapped store's WriteAsync (or
// Write), then the sync hook.
func (s *Store) WriteAsync(ctx context.Context, b *store.Batch) (func() error, error) {
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

// Write runs the hook, then the wrapped Write.
func (s *Store) Write(ctx context.Context, b *store.Batch) error {
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

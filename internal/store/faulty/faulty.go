// Package faulty wraps a store.Store to inject faults in tests: a hook runs
// before every Write and may fail it, so tests can stop a move between the
// dead-letter queue's write and the source's delete.
package faulty

import (
	"context"
	"sync"

	"github.com/styxq/styx/internal/store"
)

// Store is a store.Store whose writes pass through a hook.
type Store struct {
	store.Store
	mu   sync.Mutex
	hook func(b *store.Batch) error
}

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

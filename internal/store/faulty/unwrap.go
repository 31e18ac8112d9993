package faulty

import "github.com/styxq/styx/internal/store"

// Unwrap returns the wrapped store, so that a caller that needs more than
// store.Store of it (internal/backup's Checkpoint) finds it.
func (s *Store) Unwrap() store.Store { return s.Store }

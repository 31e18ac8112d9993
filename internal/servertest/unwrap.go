package servertest

import "github.com/styxq/styx/internal/store"

// Unwrap returns the memory store NopClose keeps open, so that a caller
// that needs more than store.Store of it (internal/backup's Checkpoint)
// finds it.
func (n NopClose) Unwrap() store.Store { return n.Store }

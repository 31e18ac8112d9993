package queue

import "time"

// ErrorGroupFilter selects error groups: every set field must match.
type ErrorGroupFilter struct {
	SourceQueue string
	Reason      string
	Fingerprint string
}

// ErrorGroup is an error group: the dead items of one source queue, dead
// reason and error fingerprint (not an item group: see docs/CONTEXT.md).
// (Wire: DeadGroup.)
type ErrorGroup struct {
	SourceQueue string
	Reason      string
	// Fingerprint is the fingerprint of the items' last error
	// (internal/fingerprint).
	Fingerprint string
	// Pattern is the shape of SampleError (fingerprint.Pattern).
	Pattern string
	// SampleError is the last error of the item SampleID.
	SampleError string
	Count       int64
	// FirstDeadAt and LastDeadAt are the dead_at of the group's first and
	// last item in queue (id) order.
	FirstDeadAt time.Time
	LastDeadAt  time.Time
	// SampleID is the group's first item.
	SampleID uint64
}

// ErrorGroups is the answer to an ErrorGroups call.
type ErrorGroups struct {
	// Groups are the largest groups first (ties by source queue, reason,
	// fingerprint), at most the limit asked for.
	Groups []ErrorGroup
	// TotalGroups and TotalItems count every group that matches the filter
	// and their items.
	TotalGroups int
	TotalItems  int64
}

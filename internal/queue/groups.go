package queue

import "time"

// GroupFilter selects error groups: every set field must match.
type GroupFilter struct {
	SourceQueue string
	Reason      string
	Fingerprint string
}

// DeadGroup is the dead items of one source queue, dead reason and error
// fingerprint. (Wire: DeadGroup.)
type DeadGroup struct {
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

// Groups is the answer to a Groups call.
type Groups struct {
	// Groups are the largest groups first (ties by source queue, reason,
	// fingerprint), at most the limit asked for.
	Groups []DeadGroup
	// TotalGroups and TotalItems count every group that matches the filter
	// and their items.
	TotalGroups int
	TotalItems  int64
}

package engine

// Partition choice (ADR 0007, docs/ARCHITECTURE.md "Partitions"): the rule
// of every backend, applied by the engine (Engine.produceTo, Serve) to the
// counts its Tx gives: the embedded backends' in-memory counts, or counts
// PostgreSQL reads in the iteration's transaction. The functions are pure;
// callers own the cursors.
//
// - A produce request goes whole to the partition with the fewest ready
//   items.
// - The items of a dead-letter move enter the dead-letter queue one at a
//   time by the produce rule, each counting those placed before it
//   (embedded.Logical.takeDead; postgres's Queue.deadPartitions).
// - A waiting lease is served from one partition: the one with the most
//   ready items not yet promised to an older waiter of the same iteration.
//   When every ready item is promised, the waiter shares the partition with
//   the most ready items. The items a partition hands out in one iteration
//   are dealt one at a time, oldest item first, to its waiters in waiter
//   order, skipping waiters that have their batch size.
// - Ties go to the first partition at or after a cursor (wrapping), and the
//   cursor moves past each partition chosen, so equals take turns.

// FewestReady returns the partition a produce request goes to: the one with
// the fewest ready items, ties to the first at or after from (wrapping).
// ready holds one count per partition and must not be empty; from may be any
// non-negative number.
func FewestReady(ready []int, from int) int {
	n := len(ready)
	best := -1
	for i := range n {
		p := (from + i) % n
		if best < 0 || ready[p] < ready[best] {
			best = p
		}
	}
	return best
}

// MostReady returns the partition with the most ready items, ties to the
// first at or after from (wrapping), or -1 when no partition has any.
func MostReady(ready []int, from int) int {
	n := len(ready)
	best := -1
	for i := range n {
		p := (from + i) % n
		if ready[p] > 0 && (best < 0 || ready[p] > ready[best]) {
			best = p
		}
	}
	return best
}

// AssignLeases assigns waiting leases, oldest first, to partitions. ready
// holds each partition's ready items; wants holds each waiter's batch size
// (at least 1). It returns each waiter's partition (-1: none has ready
// items) and the cursor for the next call (from moved past the last
// partition chosen).
func AssignLeases(ready, wants []int, from int) (assign []int, next int) {
	left := make([]int, len(ready))
	copy(left, ready)
	assign = make([]int, len(wants))
	next = from
	for i, w := range wants {
		p := MostReady(left, next)
		if p >= 0 {
			left[p] -= min(left[p], w)
		} else {
			// Every ready item is promised: share the partition that has
			// the most.
			p = MostReady(ready, next)
		}
		assign[i] = p
		if p >= 0 {
			next = p + 1
		}
	}
	return assign, next
}

// Deal hands n items, oldest first, to waiters that want wants[i] items
// each: one item at a time, in waiter order, skipping waiters that have
// theirs. It returns the waiter of each item; items beyond the sum of wants
// are not dealt (the result is shorter than n).
func Deal(n int, wants []int) []int {
	order := make([]int, 0, n)
	got := make([]int, len(wants))
	for len(order) < n {
		dealt := false
		for i, w := range wants {
			if len(order) == n {
				break
			}
			if got[i] < w {
				got[i]++
				order = append(order, i)
				dealt = true
			}
		}
		if !dealt {
			break
		}
	}
	return order
}

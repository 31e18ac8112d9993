package engine

import (
	"slices"
	"sync/atomic"
	"time"

	"github.com/styxq/styx/internal/apierr"
)

// errDuplicateClient refuses a second waiting lease of one client_id (and
// key): Querator's answer, 400 with its message.
var errDuplicateClient = apierr.Invalidf("duplicate client id; a client cannot make multiple leased requests to the same queue")

// Waiters are a loop's waiting leases, oldest first. Owned by the loop
// goroutine, except Len.
type Waiters struct {
	queue  string
	list   []*Request
	n      atomic.Int32
	joined uint64
}

// Len returns how many leases wait. Any goroutine.
func (ws *Waiters) Len() int { return int(ws.n.Load()) }

// Joined returns how many leases have joined the waiters so far: a backend
// that serves only when something changed (PostgreSQL) compares it with the
// count it saw last.
func (ws *Waiters) Joined() uint64 { return ws.joined }

// waiting reports whether a live lease of client (of owner) waits.
func (ws *Waiters) waiting(client, owner string) bool {
	for _, w := range ws.list {
		if w.Lease.ClientID == client && w.Lease.Owner == owner && w.Ctx.Err() == nil {
			return true
		}
	}
	return false
}

// remove drops r from the waiters; false when it is not among them.
func (ws *Waiters) remove(r *Request) bool {
	i := slices.Index(ws.list, r)
	if i < 0 {
		return false
	}
	ws.list = slices.Delete(ws.list, i, i+1)
	ws.n.Store(int32(len(ws.list)))
	return true
}

// add adds a lease request; a client_id that has a live lease waiting is
// refused (400).
func (ws *Waiters) add(r *Request, now int64) error {
	if ws.waiting(r.Lease.ClientID, r.Lease.Owner) {
		// Querator's message, word for word (issue 25).
		return errDuplicateClient
	}
	r.Deadline = now + int64(r.Lease.Timeout)
	ws.list = append(ws.list, r)
	ws.joined++
	ws.n.Store(int32(len(ws.list)))
	return nil
}

// expire drops the waiting leases that were answered, answering those whose
// client went away and those whose request timeout has passed (ErrNoItems;
// a lease that completed first through completed instead).
func (ws *Waiters) expire(now int64, completed func(*Request)) {
	kept := ws.list[:0]
	for _, w := range ws.list {
		switch {
		case w.answered.Load():
		case w.Ctx.Err() != nil:
			w.Answer(w.Ctx.Err())
		case w.Deadline <= now && w.Lease.completed:
			completed(w)
		case w.Deadline <= now:
			w.Answer(ErrNoItems)
		default:
			kept = append(kept, w)
		}
	}
	clear(ws.list[len(kept):])
	ws.list = kept
	ws.n.Store(int32(len(kept)))
}

// Fail answers every waiting lease with err and drops them: the storage
// failed (a waiting lease learns of an outage at once, not at its timeout),
// or the loop stops.
func (ws *Waiters) Fail(err error) {
	for _, w := range ws.list {
		w.Answer(err)
	}
	clear(ws.list)
	ws.list = ws.list[:0]
	ws.n.Store(0)
}

// FailCompleted answers err to the waiting leases that completed first
// (LeaseWait.WaitAfterComplete) and drops them; the others wait on. A
// backend whose write failed calls it: their completes may be among what
// was not stored.
func (ws *Waiters) FailCompleted(err error) {
	kept := ws.list[:0]
	for _, w := range ws.list {
		if w.Lease.completed {
			w.Answer(err)
		} else {
			kept = append(kept, w)
		}
	}
	clear(ws.list[len(kept):])
	ws.list = kept
	ws.n.Store(int32(len(kept)))
}

// Serve hands ready items to the waiting leases by the partition rule
// (distribution.go). counts returns each partition's ready items; lease
// takes up to n of partition p's oldest ready items and leases them (fewer
// when it has fewer); give answers a waiter with its items (an iteration's
// reply: sent once the leases are durable). The waiters, oldest first, are
// assigned to partitions (AssignLeases, from the tie cursor *next), each
// partition leases its waiters' total at once and deals the items
// (Deal); a waiter dealt nothing waits on. When a partition hands out fewer
// items than counted (the counts were stale: on PostgreSQL another node took
// them), it counts as empty for the rest of the call and the waiters left
// without items are assigned again from fresh counts: at most
// partitions+1 rounds, each of which serves a waiter or empties a
// partition. With exact counts (memory, Pebble) there is one round. Served
// waiters leave the list. An error from counts or lease stops the call and
// is returned; the waiters not yet served stay.
//
// With apart (an ordered queue: queue/itemgroups.go), the waiters of a
// partition are not dealt one lease's items: each gets a lease of its own,
// in waiter order, so that the items of a group that one lease takes
// together (a group's run) go to one consumer; once a lease finds fewer
// than its waiter wants, the partition's later waiters get nothing from it
// in that round.
//
// A waiter's MaxBytes bounds its items' bytes (LeaseWait.MaxBytes): a
// partition's lease for its waiters is bounded by the smallest MaxBytes
// among them (so that however its items are dealt, none gets more), and
// lease reports more when it stopped at that bound with items left. The
// partition then does not count as empty, and its waiters left without
// items are served in another round (each such round serves at least one
// waiter: a lease takes at least one item).
//
// lease gets the waiters' lease timeout (LeaseWait.LeaseTimeout; 0: the
// queue's): one lease gives its items one deadline, so a partition whose
// waiters' timeouts differ leases for each apart, as with apart. It also
// gets to, the waiter each of its items will be given to, by the item's
// place in its answer (to(k) for the k-th item, k < n): a backend stores
// the consumer with the lease (issue 49).
//
// lease gets last true when it is the call's only lease, whatever it
// returns: one partition, every waiter assigned to it and dealt one
// lease's items, and no bytes bound that could leave items for another
// round (a second round could then find nothing: the partition it would
// look at again is the one just leased). Serve returns after it. A
// backend may send its commit with such a lease (LeaseCommitter).
func Serve[T any](ws *Waiters, next *int, counts func() ([]int, error), lease func(p int32, n int, maxBytes int64, timeout time.Duration, to func(k int) *Request, last bool) (items []T, more bool, err error),
	give func(r *Request, p int32, items []T), apart bool) error {
	var live []*Request
	for _, w := range ws.list {
		if !w.answered.Load() && w.Ctx.Err() == nil {
			live = append(live, w)
		}
	}
	if len(live) == 0 {
		return nil
	}
	served := make(map[*Request]bool, len(live))
	defer ws.dropServed(served)
	var empty []bool
	cut := 0 // rounds repeated because a lease stopped at its bytes
	for round := 0; len(live) > 0; round++ {
		if empty != nil && round > len(empty)+cut {
			return nil
		}
		ready, err := counts()
		if err != nil {
			return err
		}
		if empty == nil {
			empty = make([]bool, len(ready))
		}
		for p := range ready {
			if empty[p] {
				ready[p] = 0
			}
		}
		wants := make([]int, len(live))
		for i, w := range live {
			wants[i] = w.Lease.BatchSize
		}
		assign, cursor := AssignLeases(ready, wants, *next)
		*next = cursor
		again, bounded := false, false
		for p := range ready {
			var mine, pw []int // the partition's waiters (indexes into live) and their wants
			total := 0
			var maxBytes int64 // the smallest bound among them (0: none)
			// Waiters whose leases last differently lease apart: one lease
			// gives its items one deadline.
			separate := apart
			for i, a := range assign {
				if a == p {
					mine, pw = append(mine, i), append(pw, wants[i])
					total += wants[i]
					if b := live[i].Lease.MaxBytes; b > 0 && (maxBytes == 0 || b < maxBytes) {
						maxBytes = b
					}
					separate = separate || live[i].Lease.LeaseTimeout != live[mine[0]].Lease.LeaseTimeout
				}
			}
			if len(mine) == 0 {
				continue
			}
			if separate && len(mine) > 1 {
				given := 0
				for j, i := range mine {
					w := live[i]
					items, more, err := lease(int32(p), pw[j], w.Lease.MaxBytes, w.Lease.LeaseTimeout, func(int) *Request { return w }, false)
					if err != nil {
						return err
					}
					if len(items) > 0 {
						give(live[i], int32(p), items)
						served[live[i]] = true
						given += len(items)
					}
					if more {
						continue // the next waiter leases what this one left
					}
					if len(items) < pw[j] {
						empty[p] = true
						if j < len(mine)-1 || len(items) == 0 {
							// Waiters are left without items: the count was
							// stale when it promised more.
							again = again || given < ready[p]
						}
						break
					}
				}
				continue
			}
			// Deal is a prefix of itself: the k-th item goes to the same
			// waiter however many the lease finds.
			order := Deal(total, pw)
			last := len(ready) == 1 && len(mine) == len(live) && (maxBytes == 0 || total == 1)
			items, more, err := lease(int32(p), total, maxBytes, live[mine[0]].Lease.LeaseTimeout,
				func(k int) *Request { return live[mine[order[k]]] }, last)
			if err != nil {
				return err
			}
			if last {
				deal(items, order, mine, live, served, p, give)
				return nil
			}
			if len(items) < total && !more {
				empty[p] = true
			}
			if deal(items, order, mine, live, served, p, give) < len(mine) {
				// More waiters than items, the count was stale, or the
				// lease stopped at its bytes (more).
				again = again || more || len(items) < ready[p]
				bounded = bounded || more
			}
		}
		if !again {
			return nil
		}
		if bounded {
			cut++
		}
		rest := live[:0]
		for _, w := range live {
			if !served[w] {
				rest = append(rest, w)
			}
		}
		live = rest
	}
	return nil
}

// deal gives the items of partition p's one lease to its waiters, live's
// mine, the k-th item to mine[order[k]] (Deal), marks those given items
// served and returns how many were.
func deal[T any](items []T, order, mine []int, live []*Request, served map[*Request]bool, p int, give func(r *Request, p int32, items []T)) int {
	got := make([][]T, len(mine))
	for k, j := range order[:len(items)] {
		got[j] = append(got[j], items[k])
	}
	n := 0
	for j, xs := range got {
		if len(xs) > 0 {
			give(live[mine[j]], int32(p), xs)
			served[live[mine[j]]] = true
			n++
		}
	}
	return n
}

// dropServed removes the served waiters from the list.
func (ws *Waiters) dropServed(served map[*Request]bool) {
	if len(served) == 0 {
		return
	}
	kept := ws.list[:0]
	for _, w := range ws.list {
		if !served[w] {
			kept = append(kept, w)
		}
	}
	clear(ws.list[len(kept):])
	ws.list = kept
	ws.n.Store(int32(len(kept)))
}

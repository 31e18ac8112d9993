// Package groupcheck checks a recorded history of leases against the rules
// of ordered item groups (queue/itemgroups.go, issue 37): within a group,
// never two leases at once, and items leased in produce order, each from
// the first one not yet completed. It is the tests' and benchmarks'
// checker, in the spirit of the porcupine checks of leases: clients record
// what they saw, with their own clock, and the checker accepts only
// histories that some server-side order of events explains.
//
// Soundness: a client records a lease when its answer arrived (after the
// server granted it) and its end as the earlier of the lease deadline and
// the send of its complete or retry (the server ends a lease at or after
// both: by the request, or by expiry at the deadline), or the deadline when
// it sent nothing. The recorded interval lies within the server's, so two
// recorded intervals of one group that overlap prove two leases at once. A
// complete whose answer never came (the server died) may or may not have
// happened: the client records its items as Unknown, and the checker
// accepts either.
package groupcheck

import (
	"fmt"
	"slices"
	"sync"
	"time"
)

// Lease is what one lease answer gave of one group: its items, in the
// order the answer listed them, each named by its index in the group's
// produce order (0 first).
type Lease struct {
	Group string
	Items []int
	// Got is when the answer arrived; End when the last of these items'
	// leases ended as the client saw it: the earlier of the lease deadline
	// and the send of its last complete or retry (EndAt), or the deadline
	// when the client sent none.
	Got, End time.Time
	// Completed lists the items of Items the client completed (acknowledged):
	// a prefix of Items. Unknown lists the items after them whose complete
	// got no answer.
	Completed, Unknown []int
	// Node names the server that answered (for messages).
	Node string
}

// Item is one item of a lease answer as the checker names it: its Group
// and its Index in the group's produce order (0 first), the numbers
// Lease.Items holds.
type Item struct {
	Group string
	Index int
}

// Run is one group's share of a lease answer.
type Run struct {
	// Lease is the group's record: Group, Items (the indexes, in answer
	// order), Got, End and Node set by Runs; Completed and Unknown are
	// the caller's to fill.
	Lease Lease
	// At holds, for each of Lease.Items, its position in the answer (an
	// index into the items given to Runs), for the caller to find the
	// item's id or receipt handle: len(At) == len(Lease.Items).
	At []int
}

// Runs splits one lease answer into its groups' runs. items lists the
// answer's items in the order it gave them. It returns one Run per group,
// in the order the groups first appear in items, with Got set to got (when
// the answer arrived, by the client's clock) and End to deadline (the
// lease deadline: the end of a lease the client lets expire; the caller
// moves it earlier with EndAt when it sends a complete or retry). node
// names the server that answered, for messages ("" for none). Nil when
// items is empty.
func Runs(items []Item, got, deadline time.Time, node string) []Run {
	var runs []Run
	at := map[string]int{} // group -> its run in runs
	for k, item := range items {
		i, ok := at[item.Group]
		if !ok {
			i = len(runs)
			at[item.Group] = i
			runs = append(runs, Run{Lease: Lease{Group: item.Group, Got: got, End: deadline, Node: node}})
		}
		r := &runs[i]
		r.Lease.Items = append(r.Lease.Items, item.Index)
		r.At = append(r.At, k)
	}
	return runs
}

// History collects leases from concurrent consumers.
type History struct {
	mu     sync.Mutex
	leases []Lease
	// produced counts the items produced per group (acknowledged).
	produced map[string]int
}

// New returns an empty history.
func New() *History { return &History{produced: map[string]int{}} }

// Produced records that n more items of group g were acknowledged, after
// those recorded before (their indexes follow).
func (h *History) Produced(g string, n int) {
	h.mu.Lock()
	h.produced[g] += n
	h.mu.Unlock()
}

// Add records one lease of a group.
func (h *History) Add(l Lease) {
	h.mu.Lock()
	h.leases = append(h.leases, l)
	h.mu.Unlock()
}

// EndAt returns a lease's End for an end sent at sent: the earlier of sent
// and the lease deadline.
func EndAt(sent, deadline time.Time) time.Time {
	if sent.Before(deadline) {
		return sent
	}
	return deadline
}

// Len returns how many leases were recorded.
func (h *History) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.leases)
}

// Check returns the violations found (at most max, 0 for all): two leases
// of a group at once, an item leased out of order (not the first item not
// completed, or a batch not consecutive), and, when complete is true, a
// group whose produced items were not all completed. Nil when the history
// keeps the rules.
func (h *History) Check(complete bool, max int) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	byGroup := map[string][]Lease{}
	for _, l := range h.leases {
		byGroup[l.Group] = append(byGroup[l.Group], l)
	}
	var out []string
	add := func(format string, args ...any) bool {
		out = append(out, fmt.Sprintf(format, args...))
		return max > 0 && len(out) >= max
	}
	groups := make([]string, 0, len(byGroup))
	for g := range byGroup {
		groups = append(groups, g)
	}
	slices.Sort(groups)
	for _, g := range groups {
		ls := byGroup[g]
		slices.SortFunc(ls, func(a, b Lease) int { return a.Got.Compare(b.Got) })
		next := 0  // the first item not surely completed
		maybe := 0 // how many after it may be (a complete without an answer)
		for i, l := range ls {
			if i > 0 && ls[i-1].End.After(l.Got) {
				if add("group %s: leased at %s (%s, items %v) while its lease of %s (%s, items %v) lasted until %s",
					g, l.Got.Format(time.StampMicro), l.Node, l.Items, ls[i-1].Got.Format(time.StampMicro), ls[i-1].Node, ls[i-1].Items,
					ls[i-1].End.Format(time.StampMicro)) {
					return out
				}
			}
			if len(l.Items) == 0 {
				continue
			}
			if first := l.Items[0]; first < next || first > next+maybe {
				if add("group %s: lease at %s (%s) gave items %v; the first not completed was %d", g,
					l.Got.Format(time.StampMicro), l.Node, l.Items, next) {
					return out
				}
			}
			next, maybe = l.Items[0], 0
			for j, x := range l.Items {
				if x != next+j {
					if add("group %s: lease at %s (%s) gave items %v: not consecutive", g, l.Got.Format(time.StampMicro), l.Node, l.Items) {
						return out
					}
					break
				}
			}
			// The items completed must be a prefix of the lease's, and those
			// of unknown outcome follow them: a later one completed while an
			// earlier one goes back breaks the order.
			ends := append(append([]int(nil), l.Completed...), l.Unknown...)
			for k, x := range ends {
				if k >= len(l.Items) || l.Items[k] != x {
					if add("group %s: lease of items %v completed %v (unknown %v): not in order", g, l.Items, l.Completed, l.Unknown) {
						return out
					}
					break
				}
			}
			next += len(l.Completed)
			maybe = len(l.Unknown)
		}
		if n := h.produced[g]; complete && n != next && n != next+maybe {
			if add("group %s: %d of %d produced items completed", g, next, n) {
				return out
			}
		}
	}
	if complete {
		for g, n := range h.produced {
			if _, ok := byGroup[g]; !ok && n > 0 {
				if add("group %s: %d items produced, none leased", g, n) {
					return out
				}
			}
		}
	}
	return out
}

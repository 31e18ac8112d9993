package embedded

import (
	"math/big"
	"math/bits"
	"slices"
	"sync"
	"time"

	"github.com/styxq/styx/internal/queue"
)

// The counts queue.stats answers from (ADR 0024): each partition keeps
// them as its items change (partition.file, unfile, add, remove), and the
// logical queue its dead items by reason and source (setSourceKey), so a
// stats call is O(partitions + reasons + sources), whatever the number of
// items. A load rebuilds them with the index.

// wideSum is a sum of int64 values (Unix nanoseconds) in 128 bits, so that
// a million creation times add up without overflow. The zero value is 0.
type wideSum struct {
	hi int64
	lo uint64
}

// add adds v (negative: subtracts).
func (s *wideSum) add(v int64) {
	var carry uint64
	s.lo, carry = bits.Add64(s.lo, uint64(v), 0)
	ext := int64(0)
	if v < 0 {
		ext = -1 // sign extension of v into the high word
	}
	s.hi += ext + int64(carry)
}

// big returns the sum.
func (s wideSum) big() *big.Int {
	b := new(big.Int).SetInt64(s.hi)
	b.Lsh(b, 64)
	return b.Add(b, new(big.Int).SetUint64(s.lo))
}

// meanAge returns the mean of base - t over n values t whose sum is s,
// truncated toward zero as an int64 division would: (n·base - s) / n.
// n > 0.
func meanAge(s wideSum, n int, base int64) time.Duration {
	nb := big.NewInt(int64(n))
	total := new(big.Int).Mul(nb, big.NewInt(base))
	total.Sub(total, s.big())
	return time.Duration(total.Quo(total, nb).Int64())
}

// schedIndex lists a partition's scheduled items by id, for scheduled.list:
// a sorted slice of ids. A scheduled item is added when it is filed (its id
// is nearly always the newest, so an append); one that leaves the scheduled
// state leaves a stale entry behind, skipped by page (the item is no longer
// scheduled, or gone) and dropped when the stale entries outnumber the live
// ones (compact: amortized O(1) per change). A page is a binary search and
// a walk: O(log n + page + stale entries in its range).
type schedIndex struct {
	ids    []uint64
	nStale int
}

// add enters id.
func (s *schedIndex) add(id uint64) {
	if n := len(s.ids); n == 0 || id > s.ids[n-1] {
		s.ids = append(s.ids, id)
		return
	}
	i, found := slices.BinarySearch(s.ids, id)
	if found {
		// A stale entry of the same id (an item scheduled again under
		// its id, as at a load): it is live again.
		s.nStale--
		return
	}
	s.ids = slices.Insert(s.ids, i, id)
}

// stale counts one more stale entry; live is the number of scheduled items
// left. It calls for a compaction (a walk of the partition's items) when
// the stale entries outnumber the live ones.
func (s *schedIndex) stale(live int) {
	s.nStale++
	if live == 0 {
		s.ids, s.nStale = s.ids[:0], 0
	}
}

// due reports whether the index should be compacted.
func (s *schedIndex) due() bool { return s.nStale > 64 && s.nStale > len(s.ids)/2 }

// compact keeps the ids that are still scheduled.
func (s *schedIndex) compact(live func(id uint64) bool) {
	s.ids = slices.DeleteFunc(s.ids, func(id uint64) bool { return !live(id) })
	s.nStale = 0
}

// page calls f with the scheduled ids greater than after, in order, until
// f returns false.
func (s *schedIndex) page(after uint64, live func(id uint64) bool, f func(id uint64) bool) {
	i, found := slices.BinarySearch(s.ids, after)
	if found {
		i++
	}
	for ; i < len(s.ids); i++ {
		if id := s.ids[i]; live(id) && !f(id) {
			return
		}
	}
}

// Dead reasons are kept in an item as a code (item.reason), 0 for none:
// the engine's three reasons have fixed codes, any other text read from
// storage gets one when first seen.
var reasons = struct {
	sync.RWMutex
	names []string
	codes map[string]uint8
}{
	names: []string{"", queue.ReasonMaxAttempts, queue.ReasonExpired, queue.ReasonExplicit},
	codes: map[string]uint8{"": 0, queue.ReasonMaxAttempts: 1, queue.ReasonExpired: 2, queue.ReasonExplicit: 3},
}

// reasonCode returns the code of dead reason r. Past 255 distinct reasons
// (none are known beyond the engine's three), the last code is reused.
func reasonCode(r string) uint8 {
	switch r {
	case "":
		return 0
	case queue.ReasonMaxAttempts:
		return 1
	case queue.ReasonExpired:
		return 2
	case queue.ReasonExplicit:
		return 3
	}
	reasons.Lock()
	defer reasons.Unlock()
	if c, ok := reasons.codes[r]; ok {
		return c
	}
	if len(reasons.names) == 256 {
		return 255
	}
	c := uint8(len(reasons.names))
	reasons.names = append(reasons.names, r)
	reasons.codes[r] = c
	return c
}

// reasonName returns the dead reason of code c.
func reasonName(c uint8) string {
	if c <= 3 {
		return [...]string{"", queue.ReasonMaxAttempts, queue.ReasonExpired, queue.ReasonExplicit}[c]
	}
	reasons.RLock()
	defer reasons.RUnlock()
	return reasons.names[c]
}

// deadCounts counts a dead-letter queue's dead items by reason and by
// source queue (queue.stats' dead_by_reason and dead_by_source), from the
// source keys it holds (Logical.setSourceKey, dropSourceKey).
type deadCounts struct {
	byReason map[string]int
	bySource map[string]int
}

func newDeadCounts() deadCounts {
	return deadCounts{byReason: map[string]int{}, bySource: map[string]int{}}
}

// count adds n (1 or -1) items of source key key, when it is a dead
// item's.
func (d deadCounts) count(key string, n int) {
	if !queue.IsDeadCopyKey(key) {
		return
	}
	why, src := queue.ParseSourceKey(key)
	bump(d.byReason, why, n)
	bump(d.bySource, src, n)
}

func bump(m map[string]int, k string, n int) {
	if v := m[k] + n; v != 0 {
		m[k] = v
	} else {
		delete(m, k)
	}
}

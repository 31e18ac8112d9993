package engine

import (
	"cmp"
	"slices"
	"sync"
	"time"

	"github.com/styxq/styx/internal/queue"
)

// The consumers of a queue (issue 39), written once for every backend: the
// loop records each lease call's client_id and API key when it joins the
// waiters (LastSeenAt), the items each is dealt (Leased) and, per leased item,
// which consumer holds it until the lease ends (Held). What a loop records
// is its node's: on PostgreSQL, where several nodes serve one queue, each
// node's records are merged by the backend (postgres.Queue.Consumers).

const (
	// MaxConsumers bounds the consumers a queue keeps (per node): when a
	// new one comes and the table is full, the least recently seen that
	// holds no lease is forgotten (or, when all hold leases, the least
	// recently seen).
	MaxConsumers = 100
	// MaxLeaseLinks bounds the leases whose consumer a queue remembers
	// (per node): a lease beyond it counts in its consumer's Leased but
	// not in Held.
	MaxLeaseLinks = 100_000
)

// ItemKey names an item of a queue by partition and id.
type ItemKey struct {
	Partition int32
	ID        uint64
}

// Consumers is a queue's record of its consumers. The loop goroutine
// writes it; Snapshot and the backend's lease checks (Links, Verify) may
// run on any goroutine. mu is a leaf lock (docs/ARCHITECTURE.md).
type Consumers struct {
	mu    sync.Mutex
	byKey map[consumerKey]*consumer
	// links are the live leases this loop dealt: the item's consumer and
	// its lease deadline (Unix ns). A lease leaves when the engine ends it
	// (complete, retry, expiry, delete, clear), when its deadline passes,
	// or when the backend finds it ended elsewhere (Verify).
	links map[ItemKey]link
}

type consumerKey struct{ client, key string }

type consumer struct {
	consumerKey
	first, last int64 // Unix ns
	leased      int64
}

type link struct {
	c        *consumer
	deadline int64
}

// seen records a lease call of client under key at now.
func (cs *Consumers) seen(client, key string, now int64) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	cs.get(consumerKey{client, key}, now).last = now
}

// get returns the consumer of k, made when there is none (the table then
// forgets one when full). Under mu.
func (cs *Consumers) get(k consumerKey, now int64) *consumer {
	if c := cs.byKey[k]; c != nil {
		return c
	}
	if cs.byKey == nil {
		cs.byKey = map[consumerKey]*consumer{}
	}
	if len(cs.byKey) >= MaxConsumers {
		cs.forgetOne(now)
	}
	c := &consumer{consumerKey: k, first: now, last: now}
	cs.byKey[k] = c
	return c
}

// forgetOne drops the least recently seen consumer, preferring one that
// holds no lease. Under mu.
func (cs *Consumers) forgetOne(now int64) {
	held := cs.held(now)
	before := func(c, v *consumer) bool { // c goes before v
		if idle := held[c] == 0; idle != (held[v] == 0) {
			return idle
		}
		return c.last < v.last
	}
	var victim *consumer
	for _, c := range cs.byKey {
		if victim == nil || before(c, victim) {
			victim = c
		}
	}
	delete(cs.byKey, victim.consumerKey)
	for k, l := range cs.links {
		if l.c == victim {
			delete(cs.links, k)
		}
	}
}

// leased records the items of partition n that the lease call of client
// under key was dealt at now, until deadline (Unix ns).
func (cs *Consumers) leased(client, key string, n int32, items []queue.LeasedItem, now, deadline int64) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	c := cs.get(consumerKey{client, key}, now)
	c.last = now
	c.leased += int64(len(items))
	if cs.links == nil {
		cs.links = map[ItemKey]link{}
	}
	for _, x := range items {
		if len(cs.links) >= MaxLeaseLinks {
			cs.prune(now)
			if len(cs.links) >= MaxLeaseLinks {
				return
			}
		}
		cs.links[ItemKey{n, x.ID}] = link{c: c, deadline: deadline}
	}
}

// ended records that the leases of the items ids of partition n ended
// (the items were completed, retried, expired or deleted).
func (cs *Consumers) ended(n int32, ids ...uint64) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	for _, id := range ids {
		delete(cs.links, ItemKey{n, id})
	}
}

// endedAll records that every lease ended (a destructive clear).
func (cs *Consumers) endedAll() {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	clear(cs.links)
}

// renewed records the new lease deadline of the items ids of partition n
// and returns each one's holder (zero when not known).
func (cs *Consumers) renewed(n int32, ids []uint64, deadline int64) []queue.Holder {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	holders := make([]queue.Holder, len(ids))
	for i, id := range ids {
		if l, ok := cs.links[ItemKey{n, id}]; ok {
			l.deadline = deadline
			cs.links[ItemKey{n, id}] = l
			holders[i] = queue.Holder{ClientID: l.c.client, KeyName: l.c.key}
		}
	}
	return holders
}

// Restore records a lease that storage holds with its holder (queue.
// ItemMeta.Holder), as a backend finds it when it loads a queue: the lease
// of item id of partition n, live until deadline (Unix ns), held by h. A
// consumer known only so has no lease call seen yet (FirstSeenAt and
// LastSeenAt zero) until its next one. A zero h, or a lease already
// recorded, is left alone. Any goroutine.
func (cs *Consumers) Restore(n int32, id uint64, h queue.Holder, deadline int64) {
	if h.IsZero() {
		return
	}
	cs.mu.Lock()
	defer cs.mu.Unlock()
	k := ItemKey{n, id}
	if _, ok := cs.links[k]; ok || len(cs.links) >= MaxLeaseLinks {
		return
	}
	ck := consumerKey{h.ClientID, h.KeyName}
	c := cs.byKey[ck]
	if c == nil {
		if cs.byKey == nil {
			cs.byKey = map[consumerKey]*consumer{}
		}
		if len(cs.byKey) >= MaxConsumers {
			return
		}
		c = &consumer{consumerKey: ck}
		cs.byKey[ck] = c
	}
	if cs.links == nil {
		cs.links = map[ItemKey]link{}
	}
	cs.links[k] = link{c: c, deadline: deadline}
}

// prune drops the links whose deadline passed by now. Under mu.
func (cs *Consumers) prune(now int64) {
	for k, l := range cs.links {
		if l.deadline <= now {
			delete(cs.links, k)
		}
	}
}

// held counts each consumer's live links at now (pruning the others). Under
// mu.
func (cs *Consumers) held(now int64) map[*consumer]int {
	cs.prune(now)
	out := map[*consumer]int{}
	for _, l := range cs.links {
		out[l.c]++
	}
	return out
}

// Snapshot returns the consumers at now, most recently seen first, after
// forgetting those last seen more than queue.ConsumerWindow before now
// that hold no lease. Any goroutine.
func (cs *Consumers) Snapshot(now time.Time) []queue.Consumer {
	t := now.UnixNano()
	cs.mu.Lock()
	defer cs.mu.Unlock()
	held := cs.held(t)
	ids := map[*consumer][]uint64{}
	for k, l := range cs.links {
		ids[l.c] = append(ids[l.c], k.ID)
	}
	out := make([]queue.Consumer, 0, len(cs.byKey))
	for k, c := range cs.byKey {
		if held[c] == 0 && c.last <= t-int64(queue.ConsumerWindow) {
			delete(cs.byKey, k)
			continue
		}
		out = append(out, queue.Consumer{ClientID: c.client, KeyName: c.key, FirstSeenAt: queue.FromNanos(c.first),
			LastSeenAt: queue.FromNanos(c.last), Leased: c.leased, Held: held[c], HeldIDs: heldIDs(ids[c])})
	}
	SortConsumers(out)
	return out
}

// heldIDs returns the lowest queue.MaxHeldIDs of ids, formatted.
func heldIDs(ids []uint64) []string {
	slices.Sort(ids)
	ids = ids[:min(len(ids), queue.MaxHeldIDs)]
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = queue.FormatID(id)
	}
	return out
}

// SortConsumers orders cs most recently seen first, then by client id and
// key name.
func SortConsumers(cs []queue.Consumer) {
	slices.SortFunc(cs, func(a, b queue.Consumer) int {
		return cmp.Or(b.LastSeenAt.Compare(a.LastSeenAt), cmp.Compare(a.ClientID, b.ClientID), cmp.Compare(a.KeyName, b.KeyName))
	})
}

// Links returns the items of the live leases the queue remembers at now,
// for a backend to check against storage (Verify). Any goroutine.
func (cs *Consumers) Links(now time.Time) []ItemKey {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	cs.prune(now.UnixNano())
	out := make([]ItemKey, 0, len(cs.links))
	for k := range cs.links {
		out = append(out, k)
	}
	return out
}

// Verify applies what storage says of the leases of checked (a Links
// answer): each of them is live until live[k] (Unix ns), or ended when
// absent from live (completed or retried through another node; item ids
// change when a lease ends, so a live lease of the same id is the same
// lease). Leases recorded since the check are left alone. Any goroutine.
func (cs *Consumers) Verify(checked []ItemKey, live map[ItemKey]int64) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	for _, k := range checked {
		l, ok := cs.links[k]
		if !ok {
			continue
		}
		if d, ok := live[k]; ok {
			l.deadline = d
			cs.links[k] = l
		} else {
			delete(cs.links, k)
		}
	}
}

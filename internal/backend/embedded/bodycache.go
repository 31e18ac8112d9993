package embedded

import (
	"github.com/styxq/styx/internal/queue"
)

// defaultBodyCacheBytes bounds the payload bytes a logical queue keeps in
// its body cache.
const defaultBodyCacheBytes = 16 << 20

// bodyCache keeps the bodies of recently stored items of one queue, so that
// a lease soon after the produce reads nothing from storage. A body never
// changes once stored and body ids are never reused while the cache lives
// (it is emptied whenever the queue reloads), so an entry is never stale;
// dropping one only frees memory early. Eviction is oldest first, bounded
// by payload bytes. Owned by the logical queue's goroutine.
type bodyCache struct {
	max, size int
	m         map[uint64]*queue.ItemBody
	order     fifo // insertion order; ids already dropped are skipped
}

func newBodyCache(maxBytes int) *bodyCache {
	return &bodyCache{max: maxBytes, m: make(map[uint64]*queue.ItemBody)}
}

// put caches b under id, evicting the oldest bodies beyond the bound. A body
// larger than the bound is not cached.
func (c *bodyCache) put(id uint64, b *queue.ItemBody) {
	n := len(b.Payload) + len(b.Attributes)
	if n > c.max {
		return
	}
	c.m[id] = b
	c.size += n
	c.order.push(id)
	for c.size > c.max && c.order.len() > 0 {
		c.drop(c.order.pop())
	}
}

// get returns the cached body of id, or nil.
func (c *bodyCache) get(id uint64) *queue.ItemBody { return c.m[id] }

// drop forgets id.
func (c *bodyCache) drop(id uint64) {
	if b, ok := c.m[id]; ok {
		c.size -= len(b.Payload) + len(b.Attributes)
		delete(c.m, id)
	}
}

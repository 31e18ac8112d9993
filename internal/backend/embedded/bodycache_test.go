package embedded

import (
	"github.com/styxq/styx/internal/queue"
	"testing"
)

func TestBodyCacheBoundAndDrop(t *testing.T) {
	c := newBodyCache(10)
	body := func(n int) *queue.ItemBody { return &queue.ItemBody{Payload: make([]byte, n)} }
	c.put(1, body(4))
	c.put(2, body(4))
	c.put(3, body(4)) // 12 > 10: the oldest goes
	if c.get(1) != nil || c.get(2) == nil || c.get(3) == nil || c.size != 8 {
		t.Fatalf("after eviction: 1=%v 2=%v 3=%v size=%d", c.get(1), c.get(2), c.get(3), c.size)
	}
	c.drop(2)
	if c.get(2) != nil || c.size != 4 {
		t.Fatalf("after drop: size=%d", c.size)
	}
	c.put(4, body(11)) // larger than the bound: not cached, nothing evicted
	if c.get(4) != nil || c.get(3) == nil {
		t.Fatal("an oversized body must not be cached or evict others")
	}
	c.drop(99) // unknown: no effect
	if c.size != 4 {
		t.Fatalf("size=%d", c.size)
	}
}

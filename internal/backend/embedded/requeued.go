package embedded

// The index of requeued items: a requeue gives an item a new id, and a
// receipt of its ended lease (queue.Receipt, the SQS API's DeleteMessage)
// finds it by the id it entered the queue under (its bodyID), which the
// in-memory index is not keyed by.

// requeuedFloor is how many stale entries partition.requeued may hold
// beyond twice its items before link sweeps them.
const requeuedFloor = 1024

// link records it in the partition's index of requeued items when its id
// is no longer the one it entered the queue under (a requeue, or an item
// loaded after one). Entries of items that have left stay until a sweep:
// requeuedItem checks what it finds, and link sweeps once the index holds
// more than twice the partition's items (plus requeuedFloor), so its
// size stays proportional to the items and its upkeep O(1) amortized.
func (p *partition) link(it *item) {
	if it.id == it.bodyID {
		return
	}
	if p.requeued == nil {
		p.requeued = make(map[uint64]uint64)
	}
	p.requeued[it.bodyID] = it.id
	if len(p.requeued) > 2*len(p.items)+requeuedFloor {
		for first, id := range p.requeued {
			if x := p.items[id]; x == nil || x.bodyID != first {
				delete(p.requeued, first)
			}
		}
	}
}

// requeuedItem returns the item that entered the partition under id first
// and has been requeued since, or nil.
func (p *partition) requeuedItem(first uint64) *item {
	id, ok := p.requeued[first]
	if !ok {
		return nil
	}
	x := p.items[id]
	if x == nil || x.bodyID != first {
		return nil
	}
	return x
}

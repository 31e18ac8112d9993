package queue

// ListParams selects one page of Queue.ListPage: a partition's items with
// ids above After, in id order, at most Limit of them and at most MaxBytes
// of them (Page).
type ListParams struct {
	Partition int32
	// After is the id to start after (0: from the first item).
	After uint64
	// Limit is the most items the page holds; it must be > 0.
	Limit int
	// MaxBytes bounds the page's size, as Page counts it (ItemBytes); 0
	// means no bound.
	MaxBytes int
	// Scheduled lists the scheduled items (storage/scheduled.list) instead
	// of the others (storage/items.list).
	Scheduled bool
}

// ItemBytes is an item's size as a page counts it (Page): its payload,
// attributes, text fields and the error texts of its attempt history (DLQ
// attempts included), in
// bytes. It leaves out the fixed-size fields, so it is close to the
// memory the item's variable parts take, and to their size on the wire.
func ItemBytes(it *Item) int {
	b := &it.Body
	n := len(b.Payload) + len(b.Attributes) + len(b.Reference) + len(b.Kind) + len(b.Encoding) +
		len(b.SourceQueue) + len(b.SourceID) + len(it.Errors.LastError)
	for _, e := range it.Errors.Errors {
		n += len(e.Error)
	}
	for _, e := range it.Errors.DeadLetter {
		n += len(e.Error)
	}
	return n
}

// Page bounds the items of one listing page by their size: a page takes
// items while their ItemBytes add up to at most MaxBytes, and always takes
// its first item, whatever its size, so that a client paging by id always
// moves on. A listing stops at the first item the page does not take and
// reports that item's predecessor as where to continue. The zero Page (and
// one with MaxBytes <= 0) takes every item. Not safe for concurrent use.
type Page struct {
	// MaxBytes is the bound, in bytes; <= 0 means none.
	MaxBytes int
	// Bytes and Items are the size and count of the items taken so far.
	Bytes, Items int
}

// Take reports whether it joins the page, and counts it when it does.
func (p *Page) Take(it *Item) bool {
	n := ItemBytes(it)
	if p.MaxBytes > 0 && p.Items > 0 && p.Bytes+n > p.MaxBytes {
		return false
	}
	p.Bytes += n
	p.Items++
	return true
}

// Left returns how many more bytes the page may take (at least 1, and the
// whole bound while it is empty, since the first item is always taken);
// 0 means no bound. A read for the page can be bounded by it.
func (p *Page) Left() int {
	if p.MaxBytes <= 0 {
		return 0
	}
	return max(p.MaxBytes-p.Bytes, 1)
}

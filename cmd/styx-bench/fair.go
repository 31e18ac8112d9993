package main

// The fair workload (issue 37): a hot group's backlog, then many small
// groups; how long each group waits for its last item to complete shows
// whether the queue leases groups round-robin (fair) or oldest first.

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	pb "github.com/styxq/styx/styxpb"
)

const (
	// fairSmall small groups of fairSmallItems items each follow the hot
	// group's backlog.
	fairSmall      = 100
	fairSmallItems = 10
)

// Fairness is when each group of the fair workload finished: the time of
// its last item's complete, in seconds from the first lease.
type Fairness struct {
	// Grouped says whether the items carried their group (--fair-groups).
	Grouped bool `json:"grouped"`
	// HotDone is the hot group's (-1: not finished when the window
	// closed); Small counts the small groups that finished, Unfinished
	// those that did not, and SmallP50, SmallP99 and SmallMax are the
	// finished ones' times.
	HotDone    float64 `json:"hot_done_s"`
	Small      int     `json:"small_groups"`
	Unfinished int     `json:"small_groups_unfinished,omitempty"`
	SmallP50   float64 `json:"small_done_p50_s"`
	SmallP99   float64 `json:"small_done_p99_s"`
	SmallMax   float64 `json:"small_done_max_s"`
}

// fairItems returns n items of group g, each payload starting "g:" so that
// the drain knows its group whether or not the item carries it.
func (b *bench) fairItems(g string, n int) []*pb.QueueProduceItem {
	items := batchOf(n, b.cfg.Payload)
	for _, item := range items {
		item.Bytes = append([]byte(g+":"), item.Bytes...)
		if b.cfg.FairGroups {
			item.Group = g
		}
	}
	return items
}

// prefillFair produces the hot group's backlog, then the small groups'
// items, in batches of prefillBatch.
func (b *bench) prefillFair(ctx context.Context) error {
	var items []*pb.QueueProduceItem
	items = append(items, b.fairItems("hot", b.cfg.Hot)...)
	for k := range fairSmall {
		items = append(items, b.fairItems(fmt.Sprint("s", k), fairSmallItems)...)
	}
	for len(items) > 0 {
		n := min(len(items), prefillBatch)
		if err := b.c.QueueProduce(ctx, &pb.QueueProduceRequest{QueueName: b.queue, RequestTimeout: "10s", Items: items[:n]}); err != nil {
			return fmt.Errorf("prefill: %w", err)
		}
		items = items[n:]
	}
	b.groupDone = map[string]time.Time{}
	b.groupLeft = map[string]int{"hot": b.cfg.Hot}
	for k := range fairSmall {
		b.groupLeft[fmt.Sprint("s", k)] = fairSmallItems
	}
	return nil
}

// noteGroupsDone records, for the groups of resp's items, that one more
// of their items completed at t: a group finished when its last item did.
func (b *bench) noteGroupsDone(resp *pb.QueueLeaseResponse, t time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, item := range resp.Items {
		g, _, _ := strings.Cut(string(item.Bytes), ":")
		b.groupLeft[g]--
		if b.groupLeft[g] == 0 {
			b.groupDone[g] = t
		}
	}
}

// fairness summarises groupDone, from b.start.
func (b *bench) fairness() *Fairness {
	b.mu.Lock()
	defer b.mu.Unlock()
	f := &Fairness{Grouped: b.cfg.FairGroups, HotDone: -1}
	var small []float64
	for g, t := range b.groupDone {
		s := t.Sub(b.start).Seconds()
		if g == "hot" {
			f.HotDone = s
		} else {
			small = append(small, s)
		}
	}
	slices.Sort(small)
	f.Small, f.Unfinished = len(small), fairSmall-len(small)
	if n := len(small); n > 0 {
		at := func(q float64) float64 { return small[min(n-1, int(q*float64(n)))] }
		f.SmallP50, f.SmallP99, f.SmallMax = at(0.5), at(0.99), small[n-1]
	}
	return f
}

// String says when the groups finished, from the first lease: the hot
// group, then the small ones.
func (f *Fairness) String() string {
	hot := "the hot group not finished"
	if f.HotDone >= 0 {
		hot = fmt.Sprintf("the hot group done at %.2fs", f.HotDone)
	}
	small := fmt.Sprintf("%d small groups done at p50 %.2fs, p99 %.2fs, max %.2fs", f.Small, f.SmallP50, f.SmallP99, f.SmallMax)
	if f.Small == 0 {
		small = "no small group done"
	}
	if f.Unfinished > 0 {
		small += fmt.Sprintf(", %d not finished when the window closed", f.Unfinished)
	}
	return hot + "; " + small
}

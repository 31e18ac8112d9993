// Package history keeps a short history of each queue's activity, so that
// the UI and the CLI can draw rates without Prometheus: per minute, the
// items produced, completed and dead-lettered, the queue's depth at the
// minute's last sample and, for a dead-letter queue, the items that arrived
// by error group; for the last hour (Points minutes), in a ring buffer per
// queue. Nothing is stored: a restart starts an empty history.
//
// The counts come from what the server does anyway: produce and complete
// calls through the queues Counting wraps, the styx_dead_lettered_total
// counter (metrics.Metrics.DeadLettered), each queue's stats (depth) and a
// dead-letter queue's error groups (their counts' growth between samples;
// a redrive or delete in the same minute hides as many arrivals). Samples
// are taken every SampleEvery (real time) by Run, and for one queue when
// its history is read. On PostgreSQL with several servers, each server
// counts the calls it served and the deaths its loops caused; depth and
// groups are the shared queue's.
package history

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/styxq/styx/internal/clock"
	"github.com/styxq/styx/internal/queue"
	"github.com/styxq/styx/metrics"
)

const (
	// Interval is the width of a point.
	Interval = time.Minute
	// Points is how many points a queue keeps: an hour.
	Points = 60
	// SampleEvery is how often Run samples every queue's depth, dead
	// letters and groups.
	SampleEvery = 10 * time.Second
	// maxGroups bounds the error groups followed per dead-letter queue
	// (the largest).
	maxGroups = 100
)

// Point is one minute of a queue's history.
type Point struct {
	// At is the start of the minute.
	At time.Time
	// Produced, Completed and DeadLettered count items in the minute:
	// produced to the queue, completed from it, moved from it to its
	// dead-letter queue.
	Produced, Completed, DeadLettered int64
	// Depth is the queue's items (ready, leased, scheduled) at the
	// minute's last sample; -1 when none was taken.
	Depth int64
	// DeadByGroup, on a dead-letter queue, counts the items that arrived
	// in the minute by error group fingerprint.
	DeadByGroup map[string]int64
}

// bucket is a ring slot: minute is the slot's minute (Unix minutes), 0 when
// unused.
type bucket struct {
	minute                    int64
	produced, completed, dead int64
	depth                     int64
	byGroup                   map[string]int64
}

// ring is one queue's history and what its sampling remembers.
type ring struct {
	b [Points]bucket
	// deadSeen is the styx_dead_lettered_total of the queue (every dead
	// queue and reason) at the last sample: 0 before the first, as the
	// counter (both start with the process).
	deadSeen float64
	// groups are the dead-letter queue's group counts at the last sample
	// (nil before the first), and patterns their error patterns.
	groups   map[string]int64
	patterns map[string]string
}

// Recorder keeps the history of every queue of a server. Its methods are
// safe for concurrent use.
type Recorder struct {
	m     queue.Queues
	clock clock.Clock
	dead  *prometheus.CounterVec
	start time.Time // when the recorder began: queues created since are watched from birth
	mu    sync.Mutex
	rings map[string]*ring
}

// New returns a Recorder over the queues of m, reading time from c and
// dead letters from met's counter.
func New(m queue.Queues, c clock.Clock, met *metrics.Metrics) *Recorder {
	return &Recorder{m: m, clock: c, dead: met.DeadLettered, start: c.Now(), rings: map[string]*ring{}}
}

// ringOf returns the ring of q, made on first use. Needs mu.
func (r *Recorder) ringOf(q string) *ring {
	g := r.rings[q]
	if g == nil {
		g = &ring{}
		r.rings[q] = g
	}
	return g
}

// at returns q's bucket of the minute of t, reset if it held an older
// minute. Needs mu.
func (r *Recorder) at(q string, t time.Time) *bucket {
	minute := t.Unix() / int64(Interval/time.Second)
	b := &r.ringOf(q).b[minute%Points]
	if b.minute != minute {
		*b = bucket{minute: minute, depth: -1}
	}
	return b
}

// Produced counts n items produced to q now.
func (r *Recorder) Produced(q string, n int) {
	now := r.clock.Now()
	r.mu.Lock()
	r.at(q, now).produced += int64(n)
	r.mu.Unlock()
}

// Completed counts n items completed from q now.
func (r *Recorder) Completed(q string, n int) {
	now := r.clock.Now()
	r.mu.Lock()
	r.at(q, now).completed += int64(n)
	r.mu.Unlock()
}

// Forget drops the history of q (a deleted queue).
func (r *Recorder) Forget(q string) {
	r.mu.Lock()
	delete(r.rings, q)
	r.mu.Unlock()
}

// deadTotals reads styx_dead_lettered_total by source queue.
func (r *Recorder) deadTotals() map[string]float64 {
	out := map[string]float64{}
	ch := make(chan prometheus.Metric, 64)
	go func() {
		r.dead.Collect(ch)
		close(ch)
	}()
	for m := range ch {
		var d dto.Metric
		if m.Write(&d) != nil {
			continue
		}
		for _, l := range d.GetLabel() {
			if l.GetName() == "queue" {
				out[l.GetValue()] += d.GetCounter().GetValue()
			}
		}
	}
	return out
}

// Sample samples every queue: depth, dead letters, and the groups of
// dead-letter queues. Run calls it every SampleEvery.
func (r *Recorder) Sample(ctx context.Context) error {
	infos, err := r.m.List(ctx, queue.ListQueuesParams{})
	if err != nil {
		return err
	}
	dlqs := queue.DeadLetterQueues(infos)
	dead := r.deadTotals()
	for _, info := range infos {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		r.sampleQueue(ctx, info, dlqs[info.Name], dead)
	}
	r.mu.Lock()
	for q := range r.rings { // deleted queues
		found := false
		for _, info := range infos {
			if info.Name == q {
				found = true
				break
			}
		}
		if !found {
			delete(r.rings, q)
		}
	}
	r.mu.Unlock()
	return nil
}

// sampleQueue samples one queue; dead holds the dead-letter totals by
// source queue (nil: read them).
func (r *Recorder) sampleQueue(ctx context.Context, info queue.QueueInfo, isDLQ bool, dead map[string]float64) {
	q := info.Name
	l, err := r.m.Get(q)
	if err != nil {
		return
	}
	if dead == nil {
		dead = r.deadTotals()
	}
	depth := int64(-1)
	if st, err := l.Stats(ctx); err == nil {
		depth = 0
		for _, p := range st.Partitions {
			depth += int64(p.Total)
		}
	}
	var groups map[string]int64
	var patterns map[string]string
	if isDLQ {
		if g, err := l.Groups(ctx, queue.GroupFilter{}, maxGroups); err == nil {
			groups, patterns = map[string]int64{}, map[string]string{}
			for _, x := range g.Groups {
				groups[x.Fingerprint] += x.Count
				patterns[x.Fingerprint] = x.Pattern
			}
		}
	}
	now := r.clock.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	g := r.ringOf(q)
	b := r.at(q, now)
	if depth >= 0 {
		b.depth = depth
	}
	if d := dead[q]; d > g.deadSeen {
		b.dead += int64(d - g.deadSeen)
	}
	g.deadSeen = dead[q]
	if groups != nil {
		if g.groups == nil && !info.CreatedAt.IsZero() && !info.CreatedAt.Before(r.start) {
			// Created while the recorder ran: every item it holds
			// arrived since, counted now.
			g.groups = map[string]int64{}
		}
		if g.groups != nil {
			for fp, n := range groups {
				if grew := n - g.groups[fp]; grew > 0 {
					if b.byGroup == nil {
						b.byGroup = map[string]int64{}
					}
					b.byGroup[fp] += grew
				}
			}
		}
		g.groups, g.patterns = groups, patterns
	}
}

// Run samples every queue every SampleEvery until ctx ends.
func (r *Recorder) Run(ctx context.Context) {
	t := time.NewTicker(SampleEvery)
	defer t.Stop()
	for {
		_ = r.Sample(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// History samples q and returns its last Points minutes, oldest first (the
// current minute last), and the error patterns of the groups its points
// name. isDLQ says whether q is a dead-letter queue (its groups are
// followed).
func (r *Recorder) History(ctx context.Context, q string, isDLQ bool) ([]Point, map[string]string) {
	info, err := r.m.Info(ctx, q)
	if err != nil {
		info = queue.QueueInfo{Name: q}
	}
	r.sampleQueue(ctx, info, isDLQ, nil)
	now := r.clock.Now()
	cur := now.Unix() / int64(Interval/time.Second)
	r.mu.Lock()
	defer r.mu.Unlock()
	g := r.ringOf(q)
	out := make([]Point, Points)
	patterns := map[string]string{}
	for i := range out {
		minute := cur - int64(Points-1-i)
		p := Point{At: time.Unix(minute*int64(Interval/time.Second), 0).UTC(), Depth: -1}
		if b := &g.b[minute%Points]; b.minute == minute {
			p.Produced, p.Completed, p.DeadLettered, p.Depth = b.produced, b.completed, b.dead, b.depth
			if len(b.byGroup) > 0 {
				p.DeadByGroup = make(map[string]int64, len(b.byGroup))
				for fp, n := range b.byGroup {
					p.DeadByGroup[fp] = n
					patterns[fp] = g.patterns[fp]
				}
			}
		}
		out[i] = p
	}
	return out, patterns
}

// Counting returns m with the produce and complete calls of its queues
// counted in r.
func Counting(m queue.Queues, r *Recorder) queue.Queues {
	return countingQueues{Queues: m, r: r}
}

type countingQueues struct {
	queue.Queues
	r *Recorder
}

func (c countingQueues) Get(name string) (queue.Queue, error) {
	l, err := c.Queues.Get(name)
	if err != nil {
		return nil, err
	}
	return countingQueue{Queue: l, r: c.r}, nil
}

func (c countingQueues) Delete(ctx context.Context, name string) error {
	err := c.Queues.Delete(ctx, name)
	if err == nil {
		c.r.Forget(name)
	}
	return err
}

type countingQueue struct {
	queue.Queue
	r *Recorder
}

func (c countingQueue) Produce(ctx context.Context, items []queue.ProduceItem) error {
	err := c.Queue.Produce(ctx, items)
	if err == nil {
		c.r.Produced(c.Name(), len(items))
	}
	return err
}

func (c countingQueue) Complete(ctx context.Context, partition int32, ids []uint64) error {
	err := c.Queue.Complete(ctx, partition, ids)
	if err == nil {
		c.r.Completed(c.Name(), len(ids))
	}
	return err
}

func (c countingQueue) DeleteReceived(ctx context.Context, partition int32, rs []queue.Receipt) ([]bool, error) {
	deleted, err := c.Queue.DeleteReceived(ctx, partition, rs)
	if n := countTrue(deleted); n > 0 {
		c.r.Completed(c.Name(), n)
	}
	return deleted, err
}

func countTrue(bs []bool) int {
	n := 0
	for _, b := range bs {
		if b {
			n++
		}
	}
	return n
}

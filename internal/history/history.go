// Package history keeps a short history of each queue's activity, so that
// the UI and the CLI can draw rates without Prometheus: per minute, the
// items produced, completed and dead-lettered, the queue's depth at the
// minute's last sample and, for a dead-letter queue, the items that arrived
// by error group. A Recorder keeps the last hour (Points minutes) in a ring
// buffer per queue and, given a store (WithStore; ADR 0025), writes each
// finished minute there once, so that the history survives restarts and,
// on PostgreSQL, every server reads the same one. The store keeps
// Retention (24 hours); minutes older are pruned, and a queue's history is
// deleted with it.
//
// The counts come from what the server does anyway: produce and complete
// calls through the queues Counting wraps (a redrive's arrivals in its
// destination count as produced), the styx_dead_lettered_total counter
// (metrics.Metrics.DeadLettered), each queue's stats (depth) and the dead
// items' arrivals in a dead-letter queue by error group, counted by the
// backends' dead-letter moves as the items die (metrics.DeadArrival;
// issue 49: sampling the groups' counts let a redrive or delete in the
// same sample hide as many arrivals). Each arrival brings its group's
// error pattern, which the minute keeps, so a chart names a group whose
// items are gone. Samples (depth, dead-lettered) are taken every
// SampleEvery (real time) by Run, and for one queue when its history is
// read.
//
// Each server (process) writes records of its own, under a node id that
// orders servers by start time (store.HistoryMinute.Node); a record is
// replaced, never added to, when written again. A read merges the stored
// records of the other servers with this one's ring: produced, completed,
// dead-lettered and arrivals by group add up (each server counts the calls
// it served and the deaths its loops caused), while depth, which every
// server observes of the same shared queue, is taken from one server per
// minute, the earliest started that sampled it, so it is not doubled.
// A restart therefore continues the chart, and a crash loses at most the
// minute in progress and the finished one
// not yet written (Run writes within SampleEvery of a minute's end, and
// at once when a count or sample starts a new minute). A failed write is
// logged and retried at the next flush while the minute is in the ring; it
// never fails a request.
package history

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/styxq/styx/internal/clock"
	"github.com/styxq/styx/internal/queue"
	"github.com/styxq/styx/internal/store"
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
	// Retention is how long the store keeps a queue's minutes (WithStore):
	// older ones are pruned.
	Retention = 24 * time.Hour
	// maxGroups bounds the error groups a minute counts apart; the
	// arrivals of others in the minute count under OtherGroups.
	maxGroups = 100
	// maxPatternBytes bounds the error pattern kept per group and minute
	// (a chart's legend): longer ones are cut.
	maxPatternBytes = 512
	// pruneEvery is how often Run prunes the store.
	pruneEvery = time.Hour
	// writeTimeout bounds one write (or prune) of the store by Run.
	writeTimeout = 10 * time.Second
	// finalSampleTimeout and finalWriteTimeout bound the sample and the
	// write Run makes as it ends (a shutdown waits for them).
	finalSampleTimeout = 500 * time.Millisecond
	finalWriteTimeout  = time.Second
	// writeChunk is the most minutes one PutHistory call carries.
	writeChunk = 1000
)

// OtherGroups is the key of Point.DeadByGroup that counts the arrivals of
// the error groups beyond the first 100 of a minute. It is no fingerprint
// (16 hex digits) and has no pattern.
const OtherGroups = "other"

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
	// in the minute by error group fingerprint (OtherGroups past 100
	// groups), counted as they died.
	DeadByGroup map[string]int64
}

// bucket is a ring slot: minute is the slot's minute (Unix minutes), 0 when
// unused. changes counts its changes and written the value changes had
// when the store last took it (equal: nothing to write).
type bucket struct {
	minute                    int64
	produced, completed, dead int64
	depth                     int64
	byGroup                   map[string]int64
	// patterns are the error patterns of byGroup's fingerprints.
	patterns         map[string]string
	changes, written uint32
}

// ring is one queue's history and what its sampling remembers.
type ring struct {
	b [Points]bucket
	// deadSeen is the styx_dead_lettered_total of the queue (every dead
	// queue and reason) at the last sample: 0 before the first, as the
	// counter (both start with the process).
	deadSeen float64
	// made is the Recorder's made count when the ring was made: Sample
	// drops only rings made before its list of queues was read.
	made uint64
}

// Recorder keeps the history of every queue of a server. Its methods are
// safe for concurrent use.
type Recorder struct {
	m     queue.Queues
	clock clock.Clock
	dead  *prometheus.CounterVec
	// node is this recorder's id in the store: its start (Unix
	// nanoseconds, 16 hex digits, so that ids sort by start) and 8 random
	// hex digits.
	node string
	// st and log are set by WithStore before Run (st nil: nothing is
	// stored).
	st  store.HistoryStore
	log *slog.Logger
	// kick wakes Run to write the minutes just finished.
	kick chan struct{}
	// failing, lastPrune and readFailing are Run's (failing,
	// lastPrune) and History's (readFailing, atomic through mu): whether
	// the last write failed (a failure is logged once until one
	// succeeds), and when Run last pruned the store.
	failing     bool
	lastPrune   time.Time
	readFailing bool
	mu          sync.Mutex
	rings       map[string]*ring
	made        uint64 // rings made so far
}

// New returns a Recorder over the queues of m, reading time from c, dead
// letters from met's counter and dead items' arrivals by error group from
// met's listeners (metrics.Metrics.OnDeadArrival). It keeps its history in
// memory only until WithStore gives it a store.
func New(m queue.Queues, c clock.Clock, met *metrics.Metrics) *Recorder {
	start := c.Now()
	r := &Recorder{m: m, clock: c, dead: met.DeadLettered, rings: map[string]*ring{},
		node: fmt.Sprintf("%016x-%08x", uint64(start.UnixNano()), rand.Uint32()), kick: make(chan struct{}, 1)}
	met.OnDeadArrival(r.arrived)
	return r
}

// WithStore makes r keep its minutes in st as well (see the package
// comment): Run writes them, History reads them. Failures are logged to
// log. Call it before Run and History.
func (r *Recorder) WithStore(st store.HistoryStore, log *slog.Logger) *Recorder {
	// Under mu: the dead-arrival listener New registered may already run
	// (a loop that moves items at start), and at reads st.
	r.mu.Lock()
	r.st, r.log = st, log
	r.mu.Unlock()
	return r
}

// Node returns the id r writes its minutes under.
func (r *Recorder) Node() string { return r.node }

// ringOf returns the ring of q, made on first use. Needs mu.
func (r *Recorder) ringOf(q string) *ring {
	g := r.rings[q]
	if g == nil {
		r.made++
		g = &ring{made: r.made}
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
		if r.st != nil {
			select { // a minute has ended: Run writes it
			case r.kick <- struct{}{}:
			default:
			}
		}
	}
	b.changes++ // the callers change it
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

// arrived counts dead items that arrived in a dead-letter queue now, by
// error group, with the group's pattern. Called by the backends' loops
// (metrics.Metrics.DeadArrived): it only takes mu.
func (r *Recorder) arrived(a metrics.DeadArrival) {
	now := r.clock.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	b := r.at(a.DeadQueue, now)
	fp := a.Fingerprint
	if _, ok := b.byGroup[fp]; !ok && len(b.byGroup) >= maxGroups {
		fp = OtherGroups
	}
	if b.byGroup == nil {
		b.byGroup, b.patterns = map[string]int64{}, map[string]string{}
	}
	b.byGroup[fp] += int64(a.Count)
	if fp != OtherGroups {
		b.patterns[fp] = cutPattern(a.Pattern)
	}
}

// cutPattern returns p cut to maxPatternBytes on a character boundary.
func cutPattern(p string) string {
	if len(p) <= maxPatternBytes {
		return p
	}
	return strings.ToValidUTF8(p[:maxPatternBytes], "")
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

// Sample samples every queue: depth and dead letters. Run calls it every
// SampleEvery.
func (r *Recorder) Sample(ctx context.Context) error {
	r.mu.Lock()
	listed := r.made // a ring made after this may be of a queue created after the list
	r.mu.Unlock()
	infos, err := r.m.List(ctx, queue.ListQueuesParams{})
	if err != nil {
		return err
	}
	dead := r.deadTotals()
	for _, info := range infos {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		r.sampleQueue(ctx, info.Name, dead)
	}
	live := make(map[string]bool, len(infos))
	for _, info := range infos {
		live[info.Name] = true
	}
	r.mu.Lock()
	for q, g := range r.rings { // deleted queues
		if g.made <= listed && !live[q] {
			delete(r.rings, q)
		}
	}
	r.mu.Unlock()
	return nil
}

// sampleQueue samples one queue; dead holds the dead-letter totals by
// source queue (nil: read them).
func (r *Recorder) sampleQueue(ctx context.Context, q string, dead map[string]float64) {
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
}

// Run samples every queue every SampleEvery until ctx ends. With a store
// (WithStore) it writes the finished minutes after each sample and when a
// minute ends, prunes the store every hour, and as it ends writes every
// minute not yet written, the current one included, after a last sample
// (within 1.5 s).
func (r *Recorder) Run(ctx context.Context) {
	t := time.NewTicker(SampleEvery)
	defer t.Stop()
	sample := true
	for {
		if sample {
			_ = r.Sample(ctx)
		}
		r.write(ctx, false)
		select {
		case <-ctx.Done():
			if r.st != nil { // the last sample (deaths since the one before), then the last write
				final, cancel := context.WithTimeout(context.Background(), finalSampleTimeout)
				_ = r.Sample(final)
				cancel()
				final, cancel = context.WithTimeout(context.Background(), finalWriteTimeout)
				r.write(final, true)
				cancel()
			}
			return
		case <-t.C:
			sample = true
		case <-r.kick:
			sample = false
		}
	}
}

// written names a bucket handed to the store, and its changes then.
type written struct {
	queue   string
	minute  int64
	changes uint32
}

// write hands the store every bucket changed since it last took it, of a
// finished minute (all: of the current one too), and prunes the store once
// an hour. Errors are logged (once until a write succeeds) and the buckets
// are written again next time. Only Run calls it.
func (r *Recorder) write(ctx context.Context, all bool) {
	if r.st == nil {
		return
	}
	now := r.clock.Now()
	cur := now.Unix() / int64(Interval/time.Second)
	var out []store.HistoryMinute
	var refs []written
	r.mu.Lock()
	for q, g := range r.rings {
		for i := range g.b {
			b := &g.b[i]
			if b.minute == 0 || b.changes == b.written || (!all && b.minute >= cur) {
				continue
			}
			m := store.HistoryMinute{Queue: q, At: minuteTime(b.minute), Node: r.node, Produced: b.produced,
				Completed: b.completed, DeadLettered: b.dead, Depth: b.depth}
			if len(b.byGroup) > 0 {
				m.DeadByGroup, m.GroupPatterns = maps.Clone(b.byGroup), maps.Clone(b.patterns)
			}
			out = append(out, m)
			refs = append(refs, written{queue: q, minute: b.minute, changes: b.changes})
		}
	}
	r.mu.Unlock()
	for len(out) > 0 {
		n := min(len(out), writeChunk)
		wctx, cancel := context.WithTimeout(ctx, writeTimeout)
		err := r.st.PutHistory(wctx, out[:n])
		cancel()
		if err != nil {
			if !r.failing && r.log != nil {
				r.log.Warn("queue history: writing minutes failed; retrying at the next flush", "minutes", len(out), "error", err)
			}
			r.failing = true
			return
		}
		r.mu.Lock()
		for _, w := range refs[:n] {
			if g := r.rings[w.queue]; g != nil {
				if b := &g.b[w.minute%Points]; b.minute == w.minute {
					b.written = w.changes
				}
			}
		}
		r.mu.Unlock()
		out, refs = out[n:], refs[n:]
	}
	if r.failing && r.log != nil {
		r.log.Info("queue history: writing minutes works again")
	}
	r.failing = false
	if !all && now.Sub(r.lastPrune) >= pruneEvery {
		pctx, cancel := context.WithTimeout(ctx, writeTimeout)
		if err := r.st.PruneHistory(pctx, now.Add(-Retention)); err != nil {
			if r.log != nil {
				r.log.Warn("queue history: pruning minutes older than the retention failed", "retention", Retention.String(), "error", err)
			}
		} else {
			r.lastPrune = now
		}
		cancel()
	}
}

// minuteTime is the start of a minute given in Unix minutes.
func minuteTime(minute int64) time.Time {
	return time.Unix(minute*int64(Interval/time.Second), 0).UTC()
}

// History samples q and returns its last Points minutes, oldest first (the
// current minute last), and the error patterns of the groups its points
// name, as the minutes kept them ("" for a group whose pattern is not
// known, such as one counted before patterns were kept; none for
// OtherGroups). With a store, the minutes of other servers and of earlier
// processes are merged in (see the package comment); when the store
// cannot be read, the answer is this server's ring alone (logged).
func (r *Recorder) History(ctx context.Context, q string) ([]Point, map[string]string) {
	r.sampleQueue(ctx, q, nil)
	cur := r.clock.Now().Unix() / int64(Interval/time.Second)
	stored := r.read(ctx, []string{q}, cur)
	r.mu.Lock()
	defer r.mu.Unlock()
	patterns := map[string]string{}
	out := r.merge(r.ringOf(q), stored[q], cur, patterns)
	return out, patterns
}

// Sum samples the given queues and returns the sum of their last Points
// minutes, oldest first: counts and depth (of the queues that have a depth
// in the minute; -1 when none has), no groups. One read of the store
// serves every queue.
func (r *Recorder) Sum(ctx context.Context, queues []queue.QueueInfo) []Point {
	dead := r.deadTotals()
	names := make([]string, len(queues))
	for i, info := range queues {
		r.sampleQueue(ctx, info.Name, dead)
		names[i] = info.Name
	}
	cur := r.clock.Now().Unix() / int64(Interval/time.Second)
	stored := r.read(ctx, names, cur)
	out := make([]Point, Points)
	for i := range out {
		out[i] = Point{At: minuteTime(cur - int64(Points-1-i)), Depth: -1}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, q := range names {
		for i, p := range r.merge(r.ringOf(q), stored[q], cur, nil) {
			o := &out[i]
			o.Produced += p.Produced
			o.Completed += p.Completed
			o.DeadLettered += p.DeadLettered
			if p.Depth >= 0 {
				o.Depth = max(o.Depth, 0) + p.Depth
			}
		}
	}
	return out
}

// read returns the stored minutes of queues in the window ending with
// minute cur, by queue, leaving out this recorder's own (its ring has
// them). Nil without a store or when the read fails (logged once until a
// read succeeds).
func (r *Recorder) read(ctx context.Context, queues []string, cur int64) map[string][]store.HistoryMinute {
	if r.st == nil || len(queues) == 0 {
		return nil
	}
	ms, err := r.st.ReadHistory(ctx, queues, minuteTime(cur-Points+1), minuteTime(cur))
	r.mu.Lock()
	failing := r.readFailing
	r.readFailing = err != nil
	r.mu.Unlock()
	if err != nil {
		if !failing && r.log != nil && ctx.Err() == nil {
			r.log.Warn("queue history: reading stored minutes failed; answering with this server's own", "error", err)
		}
		return nil
	}
	out := map[string][]store.HistoryMinute{}
	for _, m := range ms {
		if m.Node != r.node {
			out[m.Queue] = append(out[m.Queue], m)
		}
	}
	return out
}

// merge returns the Points minutes ending with minute cur of ring g and
// the stored records of other servers (sorted by minute, then node):
// counts added, arrivals by group too (when patterns is not nil, which
// gets the groups' patterns), depth from the earliest started server that
// sampled the minute (the smallest node id with a depth), or else the
// earliest of all. Needs mu.
func (r *Recorder) merge(g *ring, stored []store.HistoryMinute, cur int64, patterns map[string]string) []Point {
	out := make([]Point, Points)
	first := cur - Points + 1
	type obs struct {
		node  string
		depth int64
	}
	addGroups := func(p *Point, byGroup map[string]int64, ps map[string]string) {
		if patterns == nil || len(byGroup) == 0 {
			return
		}
		if p.DeadByGroup == nil {
			p.DeadByGroup = make(map[string]int64, len(byGroup))
		}
		for fp, n := range byGroup {
			p.DeadByGroup[fp] += n
			if fp == OtherGroups {
				continue
			}
			if pattern, ok := ps[fp]; ok {
				patterns[fp] = pattern
			} else if _, ok := patterns[fp]; !ok {
				patterns[fp] = "" // named in the answer, its pattern unknown
			}
		}
	}
	chosen := make([]*obs, Points)
	pick := func(i int, o obs) {
		c := chosen[i]
		if c == nil || (o.depth >= 0 && c.depth < 0) || ((o.depth >= 0) == (c.depth >= 0) && o.node < c.node) {
			chosen[i] = &o
		}
	}
	for i := range out {
		minute := first + int64(i)
		out[i] = Point{At: minuteTime(minute), Depth: -1}
		if b := &g.b[minute%Points]; b.minute == minute {
			out[i].Produced, out[i].Completed, out[i].DeadLettered = b.produced, b.completed, b.dead
			addGroups(&out[i], b.byGroup, b.patterns)
			pick(i, obs{node: r.node, depth: b.depth})
		}
	}
	for _, m := range stored {
		i := m.At.Unix()/int64(Interval/time.Second) - first
		if i < 0 || i >= Points {
			continue
		}
		out[i].Produced += m.Produced
		out[i].Completed += m.Completed
		out[i].DeadLettered += m.DeadLettered
		addGroups(&out[i], m.DeadByGroup, m.GroupPatterns)
		pick(int(i), obs{node: m.Node, depth: m.Depth})
	}
	for i, c := range chosen {
		if c != nil {
			out[i].Depth = c.depth
		}
	}
	return out
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

// Unwrap returns the Queues c counts for (queue.AsMover).
func (c countingQueues) Unwrap() queue.Queues { return c.Queues }

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

// TakeRedriven counts a redrive's arrivals in q as produced (issue 49: a
// queue that got 101 redriven items showed 0 produced).
func (c countingQueue) TakeRedriven(ctx context.Context, items []queue.RedriveItem) error {
	err := c.Queue.TakeRedriven(ctx, items)
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

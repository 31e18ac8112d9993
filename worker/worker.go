// Package worker is the consumer half of Styx: it leases items from a
// queue, runs a Handler on each with bounded concurrency, and completes,
// retries (with backoff) or dead-letters each according to the handler's
// result, renewing leases while handlers run and shutting down without
// losing or stranding work.
//
//	w, err := worker.New(client, worker.Config{
//		Queue:       "orders",
//		Concurrency: 8,
//		Handler: worker.HandlerFunc(func(ctx context.Context, it *worker.Item) error {
//			var o Order
//			if err := json.Unmarshal(it.Payload, &o); err != nil {
//				return worker.Dead(err) // never retried: straight to the DLQ
//			}
//			return charge(ctx, o) // an error is retried after a backoff
//		}),
//	})
//	err = w.Run(ctx) // until ctx is cancelled
//
// Every failure ends either retried with its error recorded in the item's
// history, or in the queue's dead-letter queue with its reason and history:
// the server counts attempts toward the queue's max_attempts and moves the
// item when they run out. Delivery is at least once: a handler may see an
// item again if its complete was lost (a crash between the handler and the
// acknowledgement, or a lease that could not be renewed).
//
// The worker never takes its user's process down: a panic in a handler or
// in any callback of Config is recovered (a handler's becomes a failed
// attempt with the panic as its error), and any error a handler returns is
// recorded, whatever its text or its methods do (see Handler).
//
// # Item groups
//
// An item may belong to a group (Item.Group, set by its producer:
// QueueProduceItem.group, say a customer or an order id). The worker runs
// the items of one group one at a time, in the order it leased them, and
// other groups (and items without a group, which run as ever) in parallel
// up to Concurrency. On an ordered queue (QueueInfo.ordered) the server
// leases a group's items in produce order and none while an earlier one is
// leased, so a group's items are processed in produce order, one at a time
// across every worker of the queue.
//
// One lease may hold several items of a group (an ordered queue gives the
// group's first ready item and the ready ones after it): the first takes a
// handler slot and the others wait behind it without taking one, then run
// in the same slot one after another, each once the previous handler
// returned nil. So that a group with many items does not keep free slots
// from other groups, the worker holds up to Concurrency + Prefetch such
// waiting items besides its slots: it asks for fewer items per lease as
// they near that many, and none while they are more (one lease may bring
// one too many on a queue that is not ordered, where a lease can give
// items of a group the worker runs already).
//
// When an item of a group does not complete (its handler failed, returned
// Dead or RetryAfter, or panicked; its lease was lost; a shutdown), the
// items of its group waiting behind it do not run: the worker first sends
// the item's retry (or dead-letter), then releases them (queue.retry with
// release: the attempt is not counted, they did not fail). On an ordered
// queue a released item keeps its place in its group, so the server gives
// them again only after the failed item, which is its group's first item
// again when its backoff is over: nothing of a group runs before its failed
// item's next attempt, and a retry does not use up the attempts of the
// items behind it. After Dead they come back at once as the group's next
// items under group_dead_policy "continue", and wait for the dead item
// under "hold".
//
// The completion of an item is sent in the background (batched, see
// Config); the next item of its group starts when the handler returns, not
// when the server acknowledged the completion. If that completion is lost
// (a crash, a lease that expired), the item comes back after later items of
// its group ran: delivery stays at least once.
//
// On a queue that is not ordered, groups serve fairness on the server, and
// the worker still runs each group's items one at a time in lease order;
// but the server holds nothing back: another worker may run later items of
// a group at the same time, and the items released after a failure may
// come back before the failed item (after it only if its retry is requeued
// at once: a Backoff of 0, since the retry is sent first).
package worker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/types/known/timestamppb"

	styx "github.com/styxq/styx"
	pb "github.com/styxq/styx/styxpb"
)

// Limits of Config.
const (
	// MaxConcurrency bounds Concurrency + Prefetch: the items a worker holds
	// at once (the server's batch limit), not counting the items of a group
	// that wait behind an earlier one of it (see "Item groups" in the
	// package comment).
	MaxConcurrency = 1000
	// DefaultShutdownTimeout is Config.ShutdownTimeout when zero.
	DefaultShutdownTimeout = 30 * time.Second
	// DefaultLeaseWait is Config.LeaseWait when zero.
	DefaultLeaseWait = 10 * time.Second
	// DefaultPanicStackLines is Config.PanicStackLines when zero.
	DefaultPanicStackLines = 20
	// maxErrorBytes is the server's limit on a retry's error text.
	maxErrorBytes = 4096
	// maxBatch is the server's limit on ids per call.
	maxBatch = 1000
	// shutdownLeaseGrace is how long a shutdown that released items waits
	// for the lease in flight to answer before it cancels it (Run).
	shutdownLeaseGrace = time.Second
)

// Config configures a Worker. Queue and Handler are required; every other
// field has a default.
type Config struct {
	// Queue is the queue to consume. Required.
	Queue string
	// Handler processes each item. Required.
	Handler Handler
	// Concurrency is how many handlers run at once. Default 1; at most
	// MaxConcurrency together with Prefetch. The items of one group run one
	// at a time, so a group takes one handler slot however many of its
	// items the worker holds (see "Item groups" in the package comment).
	Concurrency int
	// Prefetch is how many items the worker leases beyond its free handler
	// slots, so the next item is at hand when a handler finishes. Prefetched
	// items are leased (their leases renewed) but not started; a shutdown
	// releases them without counting an attempt. Default 0: lease only for
	// free slots. An item that waits behind an earlier item of its group
	// takes no slot; the worker holds up to Concurrency + Prefetch (+1)
	// such items besides its slots (see "Item groups" in the package
	// comment).
	Prefetch int
	// Backoff returns how long an item waits before its next attempt after
	// its handler failed, given the attempts so far (1 after the first
	// delivery). Default DefaultBackoff (exponential with jitter, 0.5s to 10
	// minutes). RetryAfter overrides it per item. If it panics, the panic
	// is logged and DefaultBackoff used.
	Backoff func(attempts int32) time.Duration
	// ShutdownTimeout is how long Run waits for running handlers once its
	// context is cancelled; then it cancels their contexts (cause
	// ErrShutdown) and waits for them to return. Default 30s.
	ShutdownTimeout time.Duration
	// LeaseWait is the request_timeout of each lease: how long one lease
	// request waits on the server for items (a long poll). Default 10s;
	// above 10ms and at most 15m.
	LeaseWait time.Duration
	// LeaseTimeout is how long each renewal extends a lease. Default 0: the
	// queue's lease_timeout. The worker renews an item when half of its lease
	// has passed.
	LeaseTimeout time.Duration
	// ClientID identifies the worker's lease requests to the server; unique
	// per worker. Default "<hostname>-<pid>-<random>".
	ClientID string
	// Middleware wrap Handler, the first outermost. New calls each once;
	// one that panics or returns nil is an error from New.
	Middleware []Middleware
	// PanicStackLines is how many lines of the goroutine stack (below the
	// panic) a recovered panic's error text keeps; it starts with "panic: "
	// and the panic value. Default 20 (about 10 frames); negative keeps none.
	// The whole text is cut to 4096 bytes, the server's limit.
	PanicStackLines int
	// Logger receives the worker's logs, each with the queue's name.
	// Default slog.Default(). A record whose handling panics (in the
	// logger's slog.Handler) is dropped.
	Logger *slog.Logger
	// Metrics, when set, registers the worker's Prometheus metrics (see
	// docs/metrics.md, styx_worker_*), labelled with the queue. Several
	// workers may share one registerer. Default nil: no metrics. A
	// registration that fails or panics is an error from New.
	Metrics prometheus.Registerer
	// Clock is the time the worker reads and waits on: renewals (half a
	// lease after the server's lease deadline), Backoff and RetryAfter
	// times, ShutdownTimeout, LeaseWait's long poll and the backoffs
	// between failed calls. Default the system clock; tests pass a fake
	// one, shared with a server on the same fake time, to move leases
	// without sleeping. A call that panics, or an After that returns a nil
	// channel, is answered by the system clock (the first one logged).
	Clock Clock
}

// Clock tells a Worker the time and wakes it when a duration has passed
// (Config.Clock). Implementations are safe for concurrent use.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// After returns a channel that receives the time once d has passed
	// on this clock (at once when d <= 0).
	After(d time.Duration) <-chan time.Time
}

// realClock is the system clock.
type realClock struct{}

func (realClock) Now() time.Time                         { return time.Now() }
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// Worker consumes one queue. Create it with New; Run it once.
type Worker struct {
	c       *styx.Client
	cfg     Config
	log     *slog.Logger
	m       *workerMetrics
	handler Handler
	started atomic.Bool

	mu sync.Mutex
	// held is every item the worker holds a lease on and has not
	// acknowledged: prefetched, running, or waiting for its complete.
	held map[heldKey]*job
	// unstarted collects items taken off the job queue after shutdown began.
	unstarted []*job
	// renewWake tells the renewer that held changed.
	renewWake chan struct{}
	// undelivered counts acknowledgements (complete, retry, release) that
	// failed for reasons other than a lost lease.
	undelivered atomic.Int64
	// groups holds, by group, the groups that have an item in a slot
	// (waiting for a handler or running) and the items held behind it;
	// parked counts those items (guarded by mu). parkLimit is the most
	// parked items a lease may add to (Concurrency + Prefetch).
	groups    map[string]*groupRun
	parked    int
	parkLimit int
	// parkWake tells the lease loop that parked went down.
	parkWake chan struct{}
}

// groupRun is one group's items in the worker: the item in a slot (not
// listed) and those that wait behind it, in lease order (guarded by
// Worker.mu). The slot's handler goroutine runs them one after another.
type groupRun struct {
	waiting []*job
}

type heldKey struct {
	partition int32
	id        string
}

// job is one leased item inside the worker.
type job struct {
	it     *Item
	ctx    context.Context
	cancel context.CancelCauseFunc
	// renewAt is when the renewer next renews the lease (guarded by
	// Worker.mu).
	renewAt time.Time
	// handled is set once the handler returned (owned by the handler's
	// goroutine).
	handled bool
	// settled is set once the job's outcome was sent: completed, retried,
	// released, let go (lease lost) or left for the shutdown's release
	// (owned by the handler's goroutine).
	settled bool
	// run is the job's group in the worker; nil without a group. Set before
	// the job reaches a handler.
	run *groupRun
	// behind holds the items of the group that waited behind this one
	// when the group was detached from the worker, until they are
	// released (owned by the goroutine that runs the job).
	behind []*job
}

// New validates cfg and returns a worker for the queue cfg.Queue. It does
// not contact the server. Errors name the Config field at fault.
func New(c *styx.Client, cfg Config) (*Worker, error) {
	if c == nil {
		return nil, errors.New("styx worker: client is nil")
	}
	if cfg.Queue == "" {
		return nil, errors.New("styx worker: Queue is required")
	}
	if cfg.Handler == nil {
		return nil, errors.New("styx worker: Handler is required")
	}
	if cfg.Concurrency == 0 {
		cfg.Concurrency = 1
	}
	switch {
	case cfg.Concurrency < 0:
		return nil, fmt.Errorf("styx worker: Concurrency is %d, it must be at least 1", cfg.Concurrency)
	case cfg.Prefetch < 0:
		return nil, fmt.Errorf("styx worker: Prefetch is %d, it must not be negative", cfg.Prefetch)
	case cfg.Concurrency+cfg.Prefetch > MaxConcurrency:
		return nil, fmt.Errorf("styx worker: Concurrency + Prefetch is %d, the limit is %d", cfg.Concurrency+cfg.Prefetch, MaxConcurrency)
	case cfg.ShutdownTimeout < 0:
		return nil, fmt.Errorf("styx worker: ShutdownTimeout is %s, it must not be negative", cfg.ShutdownTimeout)
	case cfg.LeaseWait != 0 && (cfg.LeaseWait <= 10*time.Millisecond || cfg.LeaseWait > 15*time.Minute):
		return nil, fmt.Errorf("styx worker: LeaseWait is %s, it must be above 10ms and at most 15m", cfg.LeaseWait)
	case cfg.LeaseTimeout < 0:
		return nil, fmt.Errorf("styx worker: LeaseTimeout is %s, it must not be negative (0: the queue's)", cfg.LeaseTimeout)
	}
	if cfg.Clock == nil {
		cfg.Clock = realClock{}
	}
	if cfg.Backoff == nil {
		cfg.Backoff = DefaultBackoff
	}
	if cfg.ShutdownTimeout == 0 {
		cfg.ShutdownTimeout = DefaultShutdownTimeout
	}
	if cfg.LeaseWait == 0 {
		cfg.LeaseWait = DefaultLeaseWait
	}
	if cfg.PanicStackLines == 0 {
		cfg.PanicStackLines = DefaultPanicStackLines
	}
	if cfg.ClientID == "" {
		cfg.ClientID = defaultClientID()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	log := slog.New(safeLogHandler{cfg.Logger.Handler()}).With("queue", cfg.Queue)
	if _, system := cfg.Clock.(realClock); !system {
		cfg.Clock = &safeClock{c: cfg.Clock, log: log}
	}
	m, err := protect("registering the metrics", func() (*workerMetrics, error) { return newMetrics(cfg.Metrics, cfg.Queue) })
	if err != nil {
		return nil, fmt.Errorf("styx worker: Metrics: %w", err)
	}
	h := cfg.Handler
	for i := len(cfg.Middleware) - 1; i >= 0; i-- {
		what := fmt.Sprintf("Middleware[%d]", i)
		if h, err = protect(what, func() (Handler, error) { return cfg.Middleware[i](h), nil }); err != nil {
			return nil, err
		}
		if h == nil {
			return nil, fmt.Errorf("styx worker: %s returned a nil Handler", what)
		}
	}
	return &Worker{
		c: c, cfg: cfg, m: m, handler: h,
		log:       log,
		held:      map[heldKey]*job{},
		renewWake: make(chan struct{}, 1),
		groups:    map[string]*groupRun{},
		parkLimit: cfg.Concurrency + cfg.Prefetch,
		parkWake:  make(chan struct{}, 1),
	}, nil
}

func defaultClientID() string {
	host, _ := os.Hostname()
	var b [3]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

// Run consumes the queue until ctx is cancelled, then shuts down
// gracefully: it stops leasing, releases (attempt not counted) every leased
// item no handler started (then gives the lease in flight up to a second to
// answer, so that the released items it may take are released again rather
// than left leased to a request that is gone, and cancels it), waits up to
// ShutdownTimeout for running handlers
// (then cancels their contexts and waits for them to return), and
// acknowledges what they returned. It returns nil after a clean shutdown,
// with nothing left leased; an error if some acknowledgements could not be
// delivered (those items come back when their leases expire), or if Run was
// called before. Server errors while running (an unknown queue, a server
// that is down) are logged and retried with backoff, not returned.
func (w *Worker) Run(ctx context.Context) error {
	if !w.started.CompareAndSwap(false, true) {
		return errors.New("styx worker: Run called twice")
	}
	// Handlers outlive ctx by up to ShutdownTimeout.
	base, cancelHandlers := context.WithCancelCause(context.WithoutCancel(ctx))
	defer cancelHandlers(nil)
	held := w.cfg.Concurrency + w.cfg.Prefetch
	tokens := make(chan struct{}, held)
	jobs := make(chan *job, held)
	acks := make(chan *job, maxBatch)

	renewCtx, stopRenewing := context.WithCancel(context.Background())
	renewed := make(chan struct{})
	go func() { defer close(renewed); w.renewLoop(renewCtx) }()
	acked := make(chan struct{})
	go func() { defer close(acked); w.ackLoop(acks) }()
	var handlers sync.WaitGroup
	for range w.cfg.Concurrency {
		handlers.Go(func() { w.handleJobs(ctx, jobs, tokens, acks, &handlers) })
	}

	// The lease in flight when ctx ends is not cancelled at once: the
	// server would go on holding it until it noticed that the request was
	// gone, and could hand it the items released meanwhile, or answer it
	// with them just as it is cancelled: leased to no one until their lease
	// expired, an attempt counted. So it is cancelled after the unstarted
	// items are released, once it has answered or shutdownLeaseGrace has
	// passed; the items it brings are released too.
	leaseCtx, cancelLease := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelLease()
	leased := make(chan struct{})
	go func() { defer close(leased); w.leaseLoop(ctx, leaseCtx, base, tokens, jobs) }()
	<-ctx.Done()

	// Shutdown. Items no handler took go back at once, with the items of
	// their groups held behind them, and so do the items waiting behind a
	// running item of their group (its handler goroutine finds none left).
	if unstarted := w.takeUnstarted(jobs, false); len(unstarted) > 0 {
		w.release(unstarted)
		select {
		case <-leased:
		case <-w.cfg.Clock.After(shutdownLeaseGrace):
		}
	}
	cancelLease()
	<-leased
	close(jobs)
	w.release(w.takeUnstarted(jobs, true))
	finished := make(chan struct{})
	go func() { handlers.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-w.cfg.Clock.After(w.cfg.ShutdownTimeout):
		w.log.Warn("shutdown timeout: cancelling running handlers", "timeout", w.cfg.ShutdownTimeout)
		cancelHandlers(ErrShutdown)
		<-finished
	}
	close(acks)
	<-acked
	w.mu.Lock()
	late := w.unstarted
	w.unstarted = nil
	w.mu.Unlock()
	w.release(late)
	stopRenewing()
	<-renewed
	if n := w.undelivered.Load(); n > 0 {
		return fmt.Errorf("styx worker: %d acknowledgements could not be delivered; those items return to queue '%s' when their leases expire", n, w.cfg.Queue)
	}
	return nil
}

// takeUnstarted takes the jobs no handler took from jobs (until it is
// closed when closed, else those there now) with the items of their groups
// waiting behind them, and the items waiting behind a running item of
// their group.
func (w *Worker) takeUnstarted(jobs chan *job, closed bool) []*job {
	var out []*job
	for {
		var j *job
		if closed {
			var ok bool
			if j, ok = <-jobs; !ok {
				break
			}
		} else {
			select {
			case j = <-jobs:
			default:
			}
			if j == nil {
				break
			}
		}
		w.detach(j)
		out = append(append(out, j), j.behind...)
	}
	w.mu.Lock()
	for _, run := range w.groups {
		out = append(out, run.waiting...)
		w.parked -= len(run.waiting)
		run.waiting = nil
	}
	w.mu.Unlock()
	return out
}

// leaseLoop leases items for free slots until ctx is cancelled. A token in
// tokens stands for a slot the worker holds: an item without a group, or a
// group (its items held in the worker, see park). A lease asks for at most
// one item more than the parked items' room, so that items of groups held
// behind others never exceed parkLimit by more than one. The lease calls
// run under leaseCtx, which Run cancels at shutdown once it has released
// the unstarted items; no call starts once ctx is cancelled.
func (w *Worker) leaseLoop(ctx, leaseCtx, base context.Context, tokens chan struct{}, jobs chan<- *job) {
	wait := time.Duration(0)
	for {
		if ctx.Err() != nil {
			return
		}
		select {
		case tokens <- struct{}{}:
		case <-ctx.Done():
			return
		}
		room, ok := w.parkRoom(ctx)
		if !ok {
			return
		}
		n := 1
	more:
		for n < min(maxBatch, room+1) {
			select {
			case tokens <- struct{}{}:
				n++
			default:
				break more
			}
		}
		start := w.cfg.Clock.Now()
		res, err := protect("queue.lease", func() (*pb.QueueLeaseResponse, error) {
			return w.c.QueueLease(leaseCtx, &pb.QueueLeaseRequest{
				QueueName: w.cfg.Queue, BatchSize: int32(n), ClientId: w.cfg.ClientID, RequestTimeout: w.cfg.LeaseWait.String(),
			})
		})
		slots := 0
		if err == nil {
			js := make([]*job, len(res.Items))
			for i, li := range res.Items {
				js[i] = w.hold(base, res.Partition, li)
			}
			for _, j := range w.park(js) {
				slots++
				jobs <- j
			}
		}
		for range n - slots {
			<-tokens
		}
		switch {
		case err == nil || ctx.Err() != nil:
			wait = 0
			continue
		case styx.IsRetry(err) && w.cfg.Clock.Now().Sub(start) >= w.cfg.LeaseWait/2:
			// The long poll ended without items.
			wait = 0
			continue
		}
		// An error, or a 454 that came back at once (a queue that is
		// overloaded, a server shutting down): back off.
		wait = min(max(2*wait, 50*time.Millisecond), 5*time.Second)
		w.log.Warn("lease failed; retrying", "error", err, "retry_in", wait)
		select {
		case <-w.cfg.Clock.After(wait):
		case <-ctx.Done():
			return
		}
	}
}

// parkRoom waits until the parked items are at most parkLimit and returns
// how many more may be parked; false when ctx ended first.
func (w *Worker) parkRoom(ctx context.Context) (int, bool) {
	for {
		w.mu.Lock()
		room := w.parkLimit - w.parked
		w.mu.Unlock()
		if room >= 0 {
			return room, true
		}
		select {
		case <-w.parkWake:
		case <-ctx.Done():
			return 0, false
		}
	}
}

// park files the items of one lease answer with their groups, all under
// one lock, before any of them reaches a handler (else a handler could
// finish a group's first item before the items after it were filed, and
// run them as a group of their own, out of reach of its failure). It
// returns the items that need a slot: those without a group and the first
// of each group the worker does not run already. The others wait behind
// an item of their group (they take no slot: the group's handler goroutine
// runs them in their turn).
func (w *Worker) park(js []*job) (slots []*job) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, j := range js {
		g := j.it.Group
		if g == "" {
			slots = append(slots, j)
			continue
		}
		if run := w.groups[g]; run != nil {
			run.waiting = append(run.waiting, j)
			w.parked++
			j.run = run
			continue
		}
		j.run = &groupRun{}
		w.groups[g] = j.run
		slots = append(slots, j)
	}
	return slots
}

// nextInGroup returns the item to run after j, an item of a slot that its
// handler completed: the next item waiting in j's group, unless a shutdown
// began (then they go back with the other unstarted items); nil when none
// waits, and the group leaves the worker.
func (w *Worker) nextInGroup(runCtx context.Context, j *job) *job {
	if j.run == nil {
		return nil
	}
	if runCtx.Err() == nil {
		w.mu.Lock()
		if len(j.run.waiting) > 0 {
			next := j.run.waiting[0]
			j.run.waiting = j.run.waiting[1:]
			w.parked--
			w.mu.Unlock()
			w.wakeParked()
			return next
		}
		// Nothing waits: the group is done, in this critical section, so
		// that an item leased now starts it anew instead of parking
		// behind j and being released as if j had failed.
		if w.groups[j.it.Group] == j.run {
			delete(w.groups, j.it.Group)
		}
		w.mu.Unlock()
	}
	w.releaseBehind(runCtx, j)
	return nil
}

// releaseBehind detaches j's group and releases the items that waited
// behind j, which did not complete (attempt not counted; at shutdown, with
// the other unstarted items), so that they do not run before j's next
// attempt.
func (w *Worker) releaseBehind(runCtx context.Context, j *job) {
	w.detach(j)
	rest := j.behind
	j.behind = nil
	if len(rest) == 0 {
		return
	}
	if runCtx.Err() != nil {
		w.mu.Lock()
		w.unstarted = append(w.unstarted, rest...)
		w.mu.Unlock()
		return
	}
	w.log.Info("releasing the items held behind an item of their group that did not complete",
		"group", j.it.Group, "partition", j.it.Partition, "id", j.it.ID, "count", len(rest))
	w.release(rest)
}

// detach ends j's group in the worker (if j.run is still its run): the
// items that waited behind j move to j.behind, in lease order.
func (w *Worker) detach(j *job) {
	if j.run == nil {
		return
	}
	w.mu.Lock()
	rest := j.run.waiting
	j.run.waiting = nil
	w.parked -= len(rest)
	if w.groups[j.it.Group] == j.run {
		delete(w.groups, j.it.Group)
	}
	w.mu.Unlock()
	if len(rest) > 0 {
		j.behind = append(j.behind, rest...)
		w.wakeParked()
	}
}

func (w *Worker) wakeParked() {
	select {
	case w.parkWake <- struct{}{}:
	default:
	}
}

// hold registers a leased item with the renewer and returns its job.
func (w *Worker) hold(base context.Context, partition int32, li *pb.QueueLeaseItem) *job {
	now := w.cfg.Clock.Now()
	deadline := li.LeaseDeadline.AsTime()
	l := &lease{until: deadline, length: deadline.Sub(now)}
	it := &Item{
		Queue: w.cfg.Queue, Partition: partition, ID: li.Id, Attempts: li.Attempts, Group: li.Group,
		Kind: li.Kind, Reference: li.Reference, Encoding: li.Encoding, Payload: li.Bytes,
		LeaseDeadline: deadline, lease: l,
	}
	ctx, cancel := context.WithCancelCause(base)
	// Renew when half the lease has passed (at once if the lease is nearly
	// over already, or the clocks disagree).
	renewAt := deadline.Add(-l.length / 2)
	if l.length < 100*time.Millisecond {
		renewAt = now
	}
	j := &job{it: it, ctx: ctx, cancel: cancel, renewAt: renewAt}
	w.mu.Lock()
	w.held[heldKey{partition, li.Id}] = j
	w.mu.Unlock()
	w.m.inFlight.Inc()
	select {
	case w.renewWake <- struct{}{}:
	default:
	}
	return j
}

// forget drops an item the worker no longer holds.
func (w *Worker) forget(j *job) {
	w.mu.Lock()
	_, ok := w.held[heldKey{j.it.Partition, j.it.ID}]
	delete(w.held, heldKey{j.it.Partition, j.it.ID})
	w.mu.Unlock()
	if ok {
		w.m.inFlight.Dec()
	}
	j.cancel(nil)
}

// handleJobs runs each job of jobs (a slot) until jobs is closed, freeing
// the job's token after each: an item without a group, or the first item
// of a group and then, one after another, the items of the group held
// behind it. If user code ends the goroutine with runtime.Goexit (a handler
// calling t.FailNow), the item is retried with errGoexit (or let go, if its
// handler had returned), the items of its group held behind it are
// released, its token freed, and a new goroutine takes this one's place.
func (w *Worker) handleJobs(ctx context.Context, jobs <-chan *job, tokens chan struct{}, acks chan<- *job, handlers *sync.WaitGroup) {
	var current *job
	defer func() {
		if current == nil {
			return // jobs was closed
		}
		j := current
		w.log.Error("runtime.Goexit in the worker's handler goroutine; a new one takes its place",
			"partition", j.it.Partition, "id", j.it.ID, "attempts", j.it.Attempts, "handler_returned", j.handled)
		w.detach(j)
		switch {
		case j.settled:
			// Goexit after the item's outcome was sent (in a release's
			// http.RoundTripper).
		case j.handled:
			// Goexit after the handler (in a Backoff, Clock or Logger):
			// whether the item was acknowledged is unknown; if not, its
			// lease expires and it comes back.
			w.forget(j)
		default:
			w.finish(j, errGoexit, acks)
		}
		rest := j.behind
		j.behind = nil
		w.release(rest)
		<-tokens
		handlers.Go(func() { w.handleJobs(ctx, jobs, tokens, acks, handlers) })
	}()
	for j := range jobs {
		for j != nil {
			current = j
			j = w.runJob(ctx, j, acks)
		}
		current = nil
		<-tokens
	}
}

// runJob runs the handler on one item and acknowledges the result:
// completes go to the batching acknowledger (acks), retries are sent here.
// It returns the item of j's group to run next (nextInGroup) when j was
// completed. When j was not (its handler failed, its lease was lost, a
// shutdown), the items of its group waiting behind it leave the group
// before j's retry is sent, so that j, back in the queue and leased again
// at once, does not queue up behind them; then they are released.
func (w *Worker) runJob(runCtx context.Context, j *job, acks chan<- *job) *job {
	if runCtx.Err() != nil {
		// Shutdown began while the item waited: not started.
		w.detach(j)
		w.mu.Lock()
		w.unstarted = append(append(w.unstarted, j), j.behind...)
		j.behind = nil
		w.mu.Unlock()
		j.settled = true
		return nil
	}
	if errors.Is(context.Cause(j.ctx), ErrLeaseLost) {
		// Prefetched, and its lease was lost before a handler was free.
		w.detach(j)
		w.m.items.WithLabelValues("lost").Inc()
		w.forget(j)
		j.settled = true
		w.releaseBehind(runCtx, j)
		return nil
	}
	start := w.cfg.Clock.Now()
	err := w.call(j)
	j.handled = true
	w.m.duration.Observe(w.cfg.Clock.Now().Sub(start).Seconds())
	if err != nil || errors.Is(context.Cause(j.ctx), ErrLeaseLost) {
		w.detach(j)
	}
	completed := w.finish(j, err, acks)
	j.settled = true
	if completed {
		return w.nextInGroup(runCtx, j)
	}
	w.releaseBehind(runCtx, j)
	return nil
}

// finish acknowledges what j's handler returned: a complete goes to the
// batching acknowledger (acks), a retry or release is sent here. It
// reports whether j was completed.
func (w *Worker) finish(j *job, err error, acks chan<- *job) bool {
	cause := context.Cause(j.ctx)
	switch {
	case errors.Is(cause, ErrLeaseLost):
		handlerError := ""
		if err != nil {
			handlerError = errorText(err)
		}
		w.log.Warn("lease lost while the handler ran; the item was neither completed nor retried",
			"partition", j.it.Partition, "id", j.it.ID, "attempts", j.it.Attempts, "handler_error", handlerError)
		w.m.items.WithLabelValues("lost").Inc()
		w.forget(j)
	case err == nil:
		acks <- j
		return true
	case errors.Is(cause, ErrShutdown):
		w.release([]*job{j})
	default:
		w.retry(j, err)
	}
	return false
}

// call runs the handler, turning a panic into an error. (A runtime.Goexit
// goes on to handleJobs.)
func (w *Worker) call(j *job) (err error) {
	returned := false
	defer func() {
		r := recover()
		switch {
		case r != nil:
			w.m.panics.Inc()
			err = &panicError{text: panicText(r, w.cfg.PanicStackLines)}
		case !returned:
			// runtime.Goexit, which goes on past this function (to
			// handleJobs); or panic(nil) under GODEBUG=panicnil=1, which
			// returns this error.
			err = &panicError{text: "panic: nil"}
		}
	}()
	err = w.handler.Handle(j.ctx, j.it)
	returned = true
	return err
}

// panicError is a recovered handler panic.
type panicError struct{ text string }

func (e *panicError) Error() string { return e.text }

// panicText is "panic: <value>" and up to lines lines of the stack below
// the panic.
func panicText(r any, lines int) string {
	text := "panic: " + panicValue(r)
	if lines < 0 {
		return text
	}
	stack := strings.Split(strings.TrimSpace(string(debug.Stack())), "\n")
	// Skip the goroutine header and the frames of debug.Stack, the deferred
	// function and runtime.panic, down to the frame that panicked.
	for i, l := range stack {
		if strings.HasPrefix(l, "panic(") {
			stack = stack[min(i+2, len(stack)):]
			break
		}
	}
	if len(stack) > lines {
		stack = stack[:lines]
	}
	return text + "\n" + strings.Join(stack, "\n")
}

// retry sends the failed item back (with a backoff or RetryAfter's delay)
// or to the dead-letter queue (Dead), and logs what the server did.
func (w *Worker) retry(j *job, err error) {
	text := errorText(err)
	ri := &pb.QueueRetryItem{Id: j.it.ID, Error: text}
	dead, after := classify(err)
	switch {
	case dead:
		ri.Dead = true
	case after != nil:
		if *after > 0 {
			ri.RetryAt = timestamppb.New(w.cfg.Clock.Now().Add(*after))
		}
	default:
		if d := w.backoff(j.it.Attempts); d > 0 {
			ri.RetryAt = timestamppb.New(w.cfg.Clock.Now().Add(d))
		}
	}
	res, ok := w.send(j.it.Deadline(), "retry", []*job{j}, func(ctx context.Context, ids []string) (*pb.QueueRetryResponse, error) {
		return w.c.QueueRetry(ctx, &pb.QueueRetryRequest{QueueName: w.cfg.Queue, Partition: j.it.Partition, Items: []*pb.QueueRetryItem{ri}})
	})
	w.forget(j)
	if !ok {
		return
	}
	var o *pb.QueueRetryOutcome
	if len(res.GetOutcomes()) == 1 {
		o = res.Outcomes[0]
	}
	w.logOutcome(j, o, text)
}

// logOutcome logs and counts what became of a retried item whose handler
// failed with errText.
func (w *Worker) logOutcome(j *job, o *pb.QueueRetryOutcome, errText string) {
	attrs := []any{"partition", j.it.Partition, "id", j.it.ID, "attempts", j.it.Attempts, "error", errText}
	switch o.GetOutcome() {
	case "dead_lettered":
		w.m.items.WithLabelValues("dead").Inc()
		w.log.Warn("item dead-lettered", append(attrs, "reason", o.Reason, "dead_queue", o.DeadQueue)...)
	case "dropped":
		w.m.items.WithLabelValues("dead").Inc()
		w.log.Error("item dead and dropped: the queue has no dead_queue", append(attrs, "reason", o.Reason)...)
	case "released":
		w.m.items.WithLabelValues("released").Inc()
		w.log.Info("item released", attrs...)
	case "scheduled":
		w.m.items.WithLabelValues("retried").Inc()
		w.log.Info("item failed; retrying later", append(attrs, "retry_at", o.RetryAt.AsTime(), "new_id", o.NewId)...)
	case "requeued":
		w.m.items.WithLabelValues("retried").Inc()
		w.log.Info("item failed; requeued", append(attrs, "new_id", o.NewId)...)
	default:
		// A server without retry outcomes (Querator): say what was asked.
		w.m.items.WithLabelValues("retried").Inc()
		w.log.Info("item failed; retried", attrs...)
	}
}

// release gives items back unstarted: the attempt is not counted.
func (w *Worker) release(js []*job) {
	for p, group := range byPartition(js) {
		for len(group) > 0 {
			batch := group[:min(len(group), maxBatch)]
			group = group[len(batch):]
			_, ok := w.send(earliestDeadline(batch), "release", batch, func(ctx context.Context, ids []string) (*pb.QueueRetryResponse, error) {
				items := make([]*pb.QueueRetryItem, len(ids))
				for i, id := range ids {
					items[i] = &pb.QueueRetryItem{Id: id, Release: true}
				}
				return w.c.QueueRetry(ctx, &pb.QueueRetryRequest{QueueName: w.cfg.Queue, Partition: p, Items: items})
			})
			for _, j := range batch {
				w.forget(j)
				if ok {
					w.m.items.WithLabelValues("released").Inc()
				}
			}
			if ok {
				w.log.Debug("released unstarted items", "partition", p, "count", len(batch))
			}
		}
	}
}

// ackLoop completes finished items in batches: each call takes every
// complete that arrived while the previous one was on the wire (up to 1000
// per partition), so completes cost one request per batch under load and
// add no delay when idle.
func (w *Worker) ackLoop(acks <-chan *job) {
	for j := range acks {
		batch := []*job{j}
	gather:
		for len(batch) < maxBatch {
			select {
			case j, ok := <-acks:
				if !ok {
					break gather
				}
				batch = append(batch, j)
			default:
				break gather
			}
		}
		for p, group := range byPartition(batch) {
			_, ok := w.send(earliestDeadline(group), "complete", group, func(ctx context.Context, ids []string) (*pb.QueueRetryResponse, error) {
				return nil, w.c.QueueComplete(ctx, &pb.QueueCompleteRequest{QueueName: w.cfg.Queue, Partition: p, Ids: ids})
			})
			for _, j := range group {
				w.forget(j)
				if ok {
					w.m.items.WithLabelValues("completed").Inc()
				}
			}
		}
	}
}

// send delivers an acknowledgement of the items of js (one partition) with
// call, retrying transient failures until deadline. If the server refuses
// the batch because some lease is gone (400), each item is sent alone so
// the others still land. It reports whether every item was acknowledged.
func (w *Worker) send(deadline time.Time, what string, js []*job, call func(ctx context.Context, ids []string) (*pb.QueueRetryResponse, error)) (*pb.QueueRetryResponse, bool) {
	ids := make([]string, len(js))
	for i, j := range js {
		ids[i] = j.it.ID
	}
	wait := 50 * time.Millisecond
	for {
		ctx, cancel := context.WithTimeout(context.Background(), max(deadline.Sub(w.cfg.Clock.Now()), time.Second))
		res, err := protect(what, func() (*pb.QueueRetryResponse, error) { return call(ctx, ids) })
		cancel()
		switch {
		case err == nil:
			return res, true
		case styx.ErrorCode(err) == styx.CodeBadRequest && len(js) > 1:
			all := true
			for _, j := range js {
				_, ok := w.send(deadline, what, []*job{j}, call)
				all = all && ok
			}
			return nil, all
		case styx.ErrorCode(err) == styx.CodeBadRequest:
			w.log.Warn(what+" refused: the lease was lost (another consumer may have the item)",
				"partition", js[0].it.Partition, "id", js[0].it.ID, "error", err)
			w.m.items.WithLabelValues("lost").Inc()
			return nil, false
		case w.cfg.Clock.Now().Add(wait).After(deadline):
			w.log.Error(what+" failed; the items return to the queue when their leases expire",
				"count", len(js), "error", err)
			w.undelivered.Add(int64(len(js)))
			return nil, false
		}
		<-w.cfg.Clock.After(wait)
		wait = min(2*wait, time.Second)
	}
}

func byPartition(js []*job) map[int32][]*job {
	out := map[int32][]*job{}
	for _, j := range js {
		out[j.it.Partition] = append(out[j.it.Partition], j)
	}
	return out
}

func earliestDeadline(js []*job) time.Time {
	var t time.Time
	for _, j := range js {
		if d := j.it.Deadline(); t.IsZero() || d.Before(t) {
			t = d
		}
	}
	return t
}

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
// The completion of an item is sent in the background (see "Completes"
// below); the next item of its group starts when the handler returns, not
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
//
// # Completes
//
// A handler that returns nil leaves its item's complete to be sent in the
// background. By default (Config.CompleteWithLease) the worker's next
// lease carries it: when the handler returns it frees its slot, the lease
// loop, which waited for one, leases at once, and that lease completes the
// pending items of one partition first (queue.lease's complete_ids, up to
// 1,000), in the same step of the queue. A worker at batch 1 so makes one
// call per item, the lease that completes the item before, instead of a
// lease and a complete. Such a lease answers at once; when it finds no
// item ready, the next lease is a plain one that waits for items
// (LeaseWait).
//
// The ack loop sends the other completes with queue.complete, each call
// taking every complete that arrived while the previous one was on the
// wire: at once while no lease is due (the lease loop waits for items,
// backs off after an error, or the worker shuts down), and otherwise those
// that no lease took within 10ms, so that a complete waits no longer when
// the slots stay busy (a slot that runs the next item of a group frees
// nothing). A lease that carried completes and failed gives them to the ack
// loop, which sends them as it sends again a queue.complete whose call
// failed: after a 400 nothing was done (a lease does all or nothing, and
// one of its items was no longer leased, or its client_id still waited);
// after a 453, a 454 or a network error the outcome is unknown, and a
// complete the server did already is refused as not leased and counted as
// a lost lease (styx_worker_items_total{outcome="lost"}) with nothing lost.
// At shutdown a lease that carries completes is not cancelled (it answers
// at once), and the ack loop sends what is left before Run returns.
//
// A server that does not know complete_ids (Querator, a Styx server older
// than issue 52) ignores them and leaves the items leased. So the first
// lease that carries completes is checked: a queue.renew of one of its
// items must be refused (not leased any more); if it is renewed, or a lease
// that carried completes waited for items and answered 454 as a plain
// lease does, the worker logs a warning, completes them with queue.complete
// and carries no more completes on leases.
package worker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

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
	// CompleteWithLease says whether the worker completes handled items
	// with its next lease (queue.lease's complete_ids, up to 1,000 of one
	// partition) when that lease is due at once, rather than with a
	// queue.complete call: at batch 1, one call per item instead of two.
	// The ack loop still sends the completes no lease takes within 10ms,
	// and those of a lease that failed. SwitchDefault (the zero value) is
	// SwitchOn; SwitchOff sends every complete with queue.complete. On a
	// server that ignores complete_ids (Querator, Styx before issue 52)
	// the worker finds out at its first such lease and completes with
	// queue.complete instead. See "Completes" in the package comment.
	CompleteWithLease Switch
	// Clock is the time the worker reads and waits on: renewals (half a
	// lease after the server's lease deadline), Backoff and RetryAfter
	// times, ShutdownTimeout, LeaseWait's long poll and the backoffs
	// between failed calls. Default the system clock; tests pass a fake
	// one, shared with a server on the same fake time, to move leases
	// without sleeping. A call that panics, or an After that returns a nil
	// channel, is answered by the system clock (the first one logged).
	Clock Clock
}

// Switch is a Config setting that is on or off. Its zero value,
// SwitchDefault, is the setting's default, which the field's comment names.
type Switch uint8

// Values of a Switch.
const (
	// SwitchDefault is the setting's default.
	SwitchDefault Switch = iota
	// SwitchOn turns the setting on.
	SwitchOn
	// SwitchOff turns the setting off.
	SwitchOff
)

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
	// completeCheck says whether the server was seen to do a lease's
	// complete_ids: completeUnchecked, completeHonoured or completeIgnored
	// (owned by the lease loop; see settleCompletes).
	completeCheck int
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
	// leftAt is when the job's complete was left for the ack loop and the
	// lease loop, on the system clock (guarded by completes.mu).
	leftAt time.Time
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
	case cfg.CompleteWithLease > SwitchOff:
		return nil, fmt.Errorf("styx worker: CompleteWithLease is %d, it must be SwitchDefault, SwitchOn or SwitchOff", cfg.CompleteWithLease)
	}
	if cfg.CompleteWithLease == SwitchDefault {
		cfg.CompleteWithLease = SwitchOn
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
	acks := newCompletes()

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
	go func() { defer close(leased); w.leaseLoop(ctx, leaseCtx, base, tokens, jobs, acks) }()
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
	acks.close()
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
// the unstarted items (but for a lease that carries completes, which
// answers at once); no call starts once ctx is cancelled.
//
// With Config.CompleteWithLease a lease carries the completes pending in
// acks (one partition's, up to maxBatch) as its complete_ids, unless the
// previous lease that carried some found no items ready: such a lease does
// not wait for items, so the next one is a plain long poll (and the ack
// loop sends the completes meanwhile).
func (w *Worker) leaseLoop(ctx, leaseCtx, base context.Context, tokens chan struct{}, jobs chan<- *job, acks *completes) {
	defer acks.setLeasing(false)
	wait := time.Duration(0)
	plain := false // the next lease carries no completes: the last one that did found nothing ready
	for {
		if ctx.Err() != nil {
			return
		}
		// Waiting for a slot, the next lease is due as soon as a handler
		// returns: it takes the complete that handler leaves.
		acks.setLeasing(w.completeWithLease() && !plain)
		select {
		case tokens <- struct{}{}:
		case <-ctx.Done():
			return
		}
		room, ok := w.parkRoom(ctx, func() { acks.setLeasing(false) })
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
		var done []*job // the completes this lease carries
		if w.completeWithLease() && !plain {
			done = acks.take()
		}
		req := &pb.QueueLeaseRequest{QueueName: w.cfg.Queue, BatchSize: int32(n), ClientId: w.cfg.ClientID, RequestTimeout: w.cfg.LeaseWait.String()}
		callCtx, cancel := leaseCtx, context.CancelFunc(func() {})
		if len(done) > 0 {
			req.CompletePartition = done[0].it.Partition
			req.CompleteIds = make([]string, len(done))
			for i, j := range done {
				req.CompleteIds[i] = j.it.ID
			}
			// It answers at once, so a shutdown lets it finish (cancelled,
			// its completes' outcome would be unknown: done, but sent
			// again and refused); past their earliest lease deadline they
			// can no longer be done.
			callCtx, cancel = context.WithTimeout(context.WithoutCancel(leaseCtx), max(earliestDeadline(done).Sub(w.cfg.Clock.Now()), time.Second))
		} else {
			acks.setLeasing(false) // a plain lease may wait LeaseWait for items
		}
		start := w.cfg.Clock.Now()
		res, err := protect("queue.lease", func() (*pb.QueueLeaseResponse, error) {
			return w.c.QueueLease(callCtx, req)
		})
		cancel()
		if len(done) > 0 {
			w.settleCompletes(context.WithoutCancel(leaseCtx), done, acks, err, w.cfg.Clock.Now().Sub(start))
		}
		plain = len(done) > 0 && err == nil && len(res.Items) == 0
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
		case styx.IsRetry(err) && len(done) == 0 && w.cfg.Clock.Now().Sub(start) >= w.cfg.LeaseWait/2:
			// The long poll ended without items.
			wait = 0
			continue
		}
		// An error, or a 454 that came back at once (a queue that is
		// overloaded, a server shutting down): back off.
		acks.setLeasing(false)
		wait = min(max(2*wait, 50*time.Millisecond), 5*time.Second)
		w.log.Warn("lease failed; retrying", "error", err, "retry_in", wait)
		select {
		case <-w.cfg.Clock.After(wait):
		case <-ctx.Done():
			return
		}
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

// Package engine is Styx's one queue engine, the same on every storage
// backend (ADR 0014):
//
//   - Loop (loop.go): one goroutine per queue (per node on PostgreSQL) that
//     takes the requests arriving together as one iteration, with
//     back-pressure (454 when its channel is full), abandonable calls and a
//     drain at shutdown;
//   - Waiters and Serve (waiters.go): the waiting leases, served by the
//     partition rule (distribution.go);
//   - Engine: the Queue calls that run in the loop (ops.go) and the
//     iteration itself (iterate.go, one method per op), deciding by the
//     item rules of internal/queue (rules.go) over Tx (contract.go), the
//     decision-level storage contract a backend implements per iteration: internal/backend/embedded (memory, Pebble: an
//     in-memory index and one batch write) and internal/backend/postgres (one
//     PostgreSQL transaction).
//
// See docs/ARCHITECTURE.md.
package engine

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/styxq/styx/internal/apierr"
	"github.com/styxq/styx/internal/clock"
	"github.com/styxq/styx/internal/queue"
	"github.com/styxq/styx/internal/store"
)

const (
	// RequestQueueSize is the capacity of a loop's request channel. A
	// request that finds it full is answered 454 (retry) at once.
	RequestQueueSize = 2048
	// MaxRequestsPerIteration bounds how many requests one iteration takes,
	// and so how many share one storage write or transaction.
	MaxRequestsPerIteration = 512
)

// ErrShuttingDown answers requests that reach a stopped loop, and the
// leases still waiting when it stops (454).
var ErrShuttingDown = apierr.New(apierr.Retry, "server shutting down; retry on another node or after restart")

// ErrNoItems answers a waiting lease whose request timeout passed (454):
// the domain's queue.ErrNoItems, which the doors check for.
var ErrNoItems = queue.ErrNoItems

// Request is one call into a loop: an Op, or, for a lease, a LeaseWait
// (the request waits among the loop's Waiters instead of reaching the
// iteration). Its answer is an error; the value a call returns is
// written into its Op (or LeaseWait.Result) by the loop goroutine before
// the answer is sent, so the caller reads it after Call returns nil.
type Request struct {
	Ctx   context.Context
	Op    Op
	Lease *LeaseWait
	// Deadline is when a waiting lease's request timeout ends (Unix ns).
	Deadline int64
	// done receives the answer; nil for a request Offered without one (the
	// backend answers it through a channel of its own).
	done chan error
	// answered is set by the first answer (Claim): a request is answered
	// at most once, whichever goroutine (the loop, a backend's syncer, a
	// panic's recovery) gets there first.
	answered atomic.Bool
}

// LeaseWait is what a lease request waits for, and its result.
type LeaseWait struct {
	// ClientID names the consumer; one lease per client_id and Owner waits
	// at a time.
	ClientID string
	// Owner is the API key making the lease (queue.LeaseParams.Owner).
	Owner string
	// BatchSize is the most items the lease takes (>= 1).
	BatchSize int
	// Timeout is how long it waits for items.
	Timeout time.Duration
	// MaxBytes bounds the items' payload and attributes, in bytes
	// (queue.LeaseParams.MaxBytes; 0: no bound).
	MaxBytes int64
	// LeaseTimeout is how long the lease lasts (queue.LeaseParams.
	// LeaseTimeout; 0: the queue's lease_timeout).
	LeaseTimeout time.Duration
	// Result is the lease's items, set by the loop before it answers nil.
	Result queue.LeaseResult
	// Abandoned, when set, is called (on a goroutine of its own) with the
	// items the loop leased to this request after its caller went away
	// (ctx done) and before it learned so: nobody will ever see them, so
	// the caller gives them back (Engine.Lease releases them, no attempt
	// counted) instead of leaving them leased to nobody until their lease
	// deadline.
	Abandoned func(queue.LeaseResult)
	// WaitAfterComplete keeps a lease that completes first waiting after
	// its completes (queue.LeaseParams.WaitAfterComplete).
	WaitAfterComplete bool
	// completed is set once a lease's completes were done: at its request
	// timeout it is answered with no items and no error, once those
	// completes are durable (Loop.answerCompleted).
	completed bool
}

// Claim reports whether the caller is the first to answer r, and marks r
// answered. Every answer goes through it, so a request is answered at most
// once: after a panic's recovery failed a request, the success its syncer
// would still send is dropped (the client has its 453). A backend that
// answers a request through a channel of its own (not r's) claims it first.
// Any goroutine.
func (r *Request) Claim() bool { return r.answered.CompareAndSwap(false, true) }

// Answer answers r (nil: success, its result already in its Op) unless it
// was answered already. Any goroutine (the loop, a backend's syncer).
func (r *Request) Answer(err error) {
	if r.Claim() {
		r.done <- err
	}
}

// Backend runs a loop's iterations. Its methods are called by the loop
// goroutine only.
type Backend interface {
	// Open runs in the loop goroutine before its first iteration (a
	// backend loads its state there).
	Open()
	// Begin starts one iteration at now (Unix ns) over reqs, in arrival
	// order (none are leases: those joined the Waiters): it returns the
	// iteration's Tx, the requests the engine is to run (the backend may
	// answer some itself: the writes while its storage refuses them) and
	// whether the lifecycle is due; the engine's Iterate then runs them and
	// the waiting leases, and commits. A nil Tx means there is nothing to
	// run: the backend answered every request of reqs (a storage failure,
	// a deleted queue) or had nothing to do. poll says the loop woke by its
	// timer alone.
	Begin(now int64, reqs []*Request, poll bool) (tx Tx, run []*Request, lifecycle bool)
	// NextWake returns when the backend has work due next (Unix ns; 0 for
	// none). The loop also wakes for requests, Wake and waiter deadlines.
	NextWake(now int64) int64
	// Stopped runs once the loop has stopped taking requests and has run
	// those it took, or once it died (a panic outside an iteration's
	// recovery: the requests it took were failed, and a panic in Stopped
	// is then recovered and logged); every answer the backend still holds
	// must be sent, and every goroutine it started must have ended, when
	// it returns. The waiting leases are answered after it.
	Stopped()
	// Recover runs after an iteration over reqs panicked (the panic is
	// recovered, logged and counted by the loop): it answers err (453) to
	// every request of reqs not answered yet, through the channel its kind
	// uses, ends what the iteration left open (the transaction Begin
	// started) and rebuilds
	// the backend's state from storage, since the iteration may have
	// changed it half-way. A request whose write was already durable may
	// be failed too (the client retries; at-least-once), never the other
	// way round. A panic in Recover ends the loop (errLoopDied).
	Recover(reqs []*Request, err error)
}

// PanicHook, when set on a loop before Start, is told of every panic the
// loop recovers (queue name and the panic's value): the metric
// styx_queue_loop_panics_total.
type PanicHook func(queue string, v any)

// errLoopPanicked answers the requests of an iteration that panicked (453):
// nothing of them is acknowledged; the queue was reloaded from storage.
func errLoopPanicked(queue string, v any) error {
	return store.Unavailable("queue '"+queue+"'", fmt.Errorf("internal error (panic: %v); nothing was acknowledged, retry", v))
}

// errLoopDied answers the calls that reach, or wait on, a loop that ended
// without Stop (453): a panic outside an iteration, or in its recovery. The
// queue serves nothing until the server restarts.
func errLoopDied(queue string, v any) error {
	return store.Unavailable("queue '"+queue+"'", fmt.Errorf("queue loop ended (panic: %v); restart the server", v))
}

// Loop is a queue's request loop. Its methods may be called from any
// goroutine; Waiters is owned by the loop goroutine (and so by the
// Backend's methods).
type Loop struct {
	name  string
	clock clock.Clock
	b     Backend
	// engine runs the iterations the backend begins; nil for a loop made
	// without one (NewLoop: a backend that answers every request in
	// Begin).
	engine *Engine
	reqs   chan *Request
	wake   chan struct{}
	stop   chan struct{}
	done   chan struct{}
	// stopOnce closes stop; stopErr, set before, answers the calls and
	// waiting leases the stopped loop refuses (read after stop is closed).
	stopOnce sync.Once
	stopErr  error
	// exitErr, set by the loop goroutine before it closes done when it ends
	// without Stop, answers the calls that find it gone.
	exitErr error
	// ctx is the loop's context (Context), cancelled by the loop goroutine
	// as it exits, before it closes done.
	ctx    context.Context
	cancel context.CancelFunc
	// OnPanic, set before Start, is told of every recovered panic.
	OnPanic PanicHook
	// Log receives the panics (with their stacks); nil means slog.Default.
	Log *slog.Logger
	// Waiters are the leases waiting for items, oldest first.
	Waiters Waiters
	// Consumers records the queue's consumers (consumers.go): written by
	// the loop goroutine, read by any.
	Consumers Consumers
}

// NewLoop returns the loop of the queue name. Start runs it.
func NewLoop(name string, clk clock.Clock) *Loop {
	ctx, cancel := context.WithCancel(context.Background())
	return &Loop{
		ctx:     ctx,
		cancel:  cancel,
		name:    name,
		clock:   clk,
		reqs:    make(chan *Request, RequestQueueSize),
		wake:    make(chan struct{}, 1),
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
		Waiters: Waiters{queue: name},
	}
}

// Start runs the loop over b in a new goroutine.
func (l *Loop) Start(b Backend) {
	l.b = b
	go l.run()
}

// Context returns the loop's context: it is done once the loop has exited
// (after Stop's drain and Backend.Stopped, or when it died), never before.
// A backend runs its storage calls under it, or under a context derived
// from it with a deadline of its own (PostgreSQL: one transaction's
// statement timeout), so that nothing the loop starts outlives it. It
// bounds when a call may begin, not a commit under way: a backend must
// not let a cancellation lose a write it acknowledged (a write whose
// outcome is unknown is answered an error; the client retries).
func (l *Loop) Context() context.Context { return l.ctx }

// Name returns the queue's name.
func (l *Loop) Name() string { return l.name }

// Pending returns how many requests wait in the request channel.
func (l *Loop) Pending() int { return len(l.reqs) }

// Call sends op to the loop and waits for its answer. A full request
// channel is answered 454 at once, and so is a stopped loop. When
// abandonable, Call returns ctx's error when ctx is done even if the loop
// has not answered: only for leases and read-only calls, since nothing that
// writes may be abandoned half-applied.
func (l *Loop) Call(ctx context.Context, op Op, abandonable bool) error {
	return l.call(&Request{Ctx: ctx, Op: op, done: make(chan error, 1)}, abandonable)
}

// CallLease sends a lease request (it waits among the Waiters) and waits for
// its answer: nil with w.Result set, ErrNoItems, or ctx's error once the
// client went away.
func (l *Loop) CallLease(ctx context.Context, w *LeaseWait) error {
	return l.call(&Request{Ctx: ctx, Lease: w, done: make(chan error, 1)}, true)
}

// callLeaseAfter sends a lease that runs op first, in the iteration
// (Engine.Lease with completes): it reaches the iteration as a request,
// joins the Waiters there once op succeeded, and is answered in that
// iteration, with the items it got or none. It writes, so it is not
// abandonable, unless it waits after op (LeaseWait.WaitAfterComplete): its
// caller may then go away as a plain lease's does.
func (l *Loop) callLeaseAfter(ctx context.Context, w *LeaseWait, op Op) error {
	return l.call(&Request{Ctx: ctx, Op: op, Lease: w, done: make(chan error, 1)}, w.WaitAfterComplete)
}

func (l *Loop) call(r *Request, abandonable bool) error {
	select {
	case <-l.stop:
		return l.stopErr
	case <-l.done:
		return l.endErr()
	default:
	}
	select {
	case l.reqs <- r:
	default:
		return apierr.New(apierr.Retry, "queue overloaded; '%s' has %d requests waiting, retry", l.name, RequestQueueSize)
	}
	var ctxDone <-chan struct{}
	if abandonable {
		ctxDone = r.Ctx.Done()
	}
	select {
	case err := <-r.done:
		return err
	case <-l.done:
		// The loop answers every request it took before it exits; one that
		// raced with the exit was never taken.
		select {
		case err := <-r.done:
			return err
		default:
			return l.endErr()
		}
	case <-ctxDone:
		if r.Lease != nil && r.Lease.Abandoned != nil {
			// The loop may have served the lease just before it learned
			// the client went away: its answer is still to come (every
			// request taken is answered: served, expired, or failed).
			go func() {
				select {
				case err := <-r.done:
					if err == nil && len(r.Lease.Result.Items) > 0 {
						r.Lease.Abandoned(r.Lease.Result)
					}
				case <-l.done:
				}
			}()
		}
		return r.Ctx.Err()
	}
}

// Offer hands op to the loop without waiting for room or for an answer: the
// backend answers it through a channel of its own (Backend.Recover when
// the loop fails it). It reports false when the channel is full or the
// loop stopped.
func (l *Loop) Offer(op Op) bool {
	return l.offer(&Request{Ctx: context.Background(), Op: op})
}

func (l *Loop) offer(r *Request) bool {
	select {
	case <-l.stop:
		return false
	case <-l.done:
		return false
	default:
	}
	select {
	case l.reqs <- r:
		return true
	default:
		return false
	}
}

// Wake makes the loop run an iteration soon even without a request (a
// backend event: a move's answer, a notification from another node). It
// never blocks.
func (l *Loop) Wake() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// Shutdown stops the loop: requests already taken are run, waiting leases
// are answered 454 (ErrShuttingDown), and later calls are refused with it.
// It returns when the loop has exited.
func (l *Loop) Shutdown() { l.Stop(ErrShuttingDown) }

// Stop is Shutdown with err answering the waiting leases and later calls:
// the queue's NotFound when it was deleted (the calls that raced with the
// delete learn that, not that the server is going away). Only the first
// Stop or Shutdown of a loop sets the error; every one returns when the
// loop has exited.
func (l *Loop) Stop(err error) {
	l.stopOnce.Do(func() {
		l.stopErr = err
		close(l.stop)
	})
	<-l.done
}

// CloseAll is a queue manager's Close: under mu it sets *closed (no queue
// starts after it) and takes every queue's loop, then shuts them down
// together (each finishes the requests it took) and returns when every one
// has exited.
func CloseAll[K comparable, Q interface{ QueueLoop() *Loop }](mu sync.Locker, closed *bool, queues map[K]Q) {
	mu.Lock()
	*closed = true
	loops := make([]*Loop, 0, len(queues))
	for _, q := range queues {
		loops = append(loops, q.QueueLoop())
	}
	mu.Unlock()
	var wg sync.WaitGroup
	for _, l := range loops {
		wg.Go(l.Shutdown)
	}
	wg.Wait()
}

// Stopping is closed once Shutdown was called.
func (l *Loop) Stopping() <-chan struct{} { return l.stop }

// Done is closed once the loop has exited: after Stop, or when it ended by
// a panic (it then answers every call 453).
func (l *Loop) Done() <-chan struct{} { return l.done }

// endErr is the error a call that finds the loop ended is answered with:
// the Stop error, or, when the loop ended without Stop, exitErr. Read only
// after done is closed.
func (l *Loop) endErr() error {
	select {
	case <-l.stop:
		return l.stopErr
	default:
		return l.exitErr
	}
}

func (l *Loop) run() {
	defer close(l.done)
	defer l.cancel()
	defer func() {
		if v := recover(); v != nil {
			l.died(v)
		}
	}()
	l.b.Open()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	batch := make([]*Request, 0, MaxRequestsPerIteration)
	for {
		timer.Reset(l.sleep())
		poll := false
		select {
		case r := <-l.reqs:
			batch = l.gather(append(batch, r))
		case <-l.wake:
			batch = l.gather(batch)
		case <-timer.C:
			poll = true
		case <-l.stop:
			l.drain()
			return
		}
		l.iterate(batch, poll)
		clear(batch)
		batch = batch[:0]
	}
}

// gather adds the requests already waiting in the channel to batch, up to
// MaxRequestsPerIteration, without blocking.
func (l *Loop) gather(batch []*Request) []*Request {
	for len(batch) < MaxRequestsPerIteration {
		select {
		case r := <-l.reqs:
			batch = append(batch, r)
		default:
			return batch
		}
	}
	return batch
}

// iterate runs one iteration: lease requests join the waiters, the rest go
// to the backend, and the waiters that are done leave. A panic in the
// backend's iteration is recovered: the batch's requests not answered yet
// get 453 and the backend rebuilds its state (Backend.Recover).
func (l *Loop) iterate(batch []*Request, poll bool) {
	defer func() {
		if v := recover(); v != nil {
			l.report(v, "queue loop iteration panicked; its requests were failed and the queue is reloaded from storage")
			work := make([]*Request, 0, len(batch))
			for _, r := range batch {
				if r.Op != nil {
					work = append(work, r)
				}
			}
			l.b.Recover(work, errLoopPanicked(l.name, v))
		}
	}()
	now := l.clock.Now().UnixNano()
	work := batch[:0:0]
	for _, r := range batch {
		if r.Op != nil { // a request, or a lease that runs its op first
			work = append(work, r)
		} else if err := l.Waiters.add(r, now); err != nil {
			r.Answer(err)
		} else {
			l.Consumers.seen(r.Lease.ClientID, r.Lease.Owner, now)
		}
	}
	l.step(now, work, poll)
	l.Waiters.expire(now, l.answerCompleted)
}

// DurableAnswerer is a Backend whose writes become durable after the
// iteration that made them (the embedded backend's pipelined group commit,
// ADR 0012). AnswerDurable runs in the loop goroutine, between iterations:
// it answers r with success once every write made so far is durable, or
// with the error of a write or sync that failed. A backend without it is
// durable when its iteration ends (PostgreSQL commits before the loop goes
// on; memory keeps nothing).
type DurableAnswerer interface {
	AnswerDurable(r *Request)
}

// answerCompleted answers a lease whose completes were done and which waited
// out its request timeout (LeaseWait.WaitAfterComplete): no items, success,
// once those completes are durable.
func (l *Loop) answerCompleted(r *Request) {
	r.Lease.Result = queue.LeaseResult{}
	if d, ok := l.b.(DurableAnswerer); ok {
		d.AnswerDurable(r)
		return
	}
	r.Answer(nil)
}

// step runs one iteration: the backend begins it, the engine runs it.
func (l *Loop) step(now int64, reqs []*Request, poll bool) {
	tx, run, lifecycle := l.b.Begin(now, reqs, poll)
	if tx != nil && l.engine != nil {
		l.engine.iteration(tx, now, run, lifecycle)
	}
}

// sleep returns how long the loop may wait for requests.
func (l *Loop) sleep() time.Duration {
	now := l.clock.Now().UnixNano()
	next := l.b.NextWake(now)
	for _, w := range l.Waiters.list {
		next = Earliest(next, w.Deadline)
	}
	if next == 0 {
		return time.Hour
	}
	return max(time.Duration(next-now), time.Millisecond)
}

// report logs a recovered panic with its stack and tells OnPanic.
func (l *Loop) report(v any, msg string) {
	log := l.Log
	if log == nil {
		log = slog.Default()
	}
	log.Error(msg, "queue", l.name, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
	if l.OnPanic != nil {
		l.OnPanic(l.name, v)
	}
}

// died ends a loop that panicked outside an iteration's recovery (in Open,
// in Recover itself): every request taken or queued and every waiting lease
// is failed with errLoopDied, and so are the calls that come later (call
// sees done closed). Nothing is answered success: a request the loop took
// and did not answer gets the error. The backend is stopped as at a
// Shutdown (Backend.Stopped), so that what it started (the embedded
// backend's syncer goroutine) does not outlive the loop (issue 41).
func (l *Loop) died(v any) {
	l.report(v, "queue loop ended by a panic; the queue answers 453 until the server restarts")
	l.exitErr = errLoopDied(l.name, v)
	for _, r := range l.gather(nil) {
		l.failTaken(r)
	}
	l.stopBackend()
	for _, w := range l.Waiters.list {
		w.Answer(l.exitErr)
	}
	l.Waiters.list = nil
	l.Waiters.n.Store(0)
}

// stopBackend runs Backend.Stopped for a loop that died, recovering (and
// logging) a panic in it: the backend's state may be what made the loop
// die.
func (l *Loop) stopBackend() {
	defer func() {
		if v := recover(); v != nil {
			l.report(v, "queue loop's backend panicked while stopping after the loop died")
		}
	}()
	l.b.Stopped()
}

// failTaken answers r with exitErr: on its own channel, or, for a request
// offered without one (Offer: the backend's own kind), through the
// backend's recovery.
func (l *Loop) failTaken(r *Request) {
	if r.done != nil {
		r.Answer(l.exitErr)
		return
	}
	func() {
		defer func() { _ = recover() }()
		l.b.Recover([]*Request{r}, l.exitErr)
	}()
}

// drain runs the requests already queued (leases among them are answered
// 454: nothing serves them any more), lets the backend finish, and answers
// the waiting leases.
func (l *Loop) drain() {
	for {
		batch := l.gather(nil)
		if len(batch) == 0 {
			break
		}
		work := batch[:0]
		for _, r := range batch {
			if r.Lease != nil {
				r.Answer(l.stopErr) // nothing of it done
				continue
			}
			work = append(work, r)
		}
		l.step(l.clock.Now().UnixNano(), work, false)
	}
	l.b.Stopped()
	l.Waiters.Fail(l.stopErr)
}

// Earliest returns the earliest of the non-zero times (Unix ns), or 0.
func Earliest(ts ...int64) int64 {
	var e int64
	for _, t := range ts {
		if t != 0 && (e == 0 || t < e) {
			e = t
		}
	}
	return e
}

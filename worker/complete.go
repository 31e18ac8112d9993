package worker

import (
	"context"
	"slices"
	"sync"
	"time"

	styx "github.com/styxq/styx"
	pb "github.com/styxq/styx/styxpb"
)

// Completes on their way to the server: handlers leave them in a completes
// (add); the ack loop sends them with queue.complete, batched (ackLoop);
// with Config.CompleteWithLease the lease loop takes them first, as its next
// lease's complete_ids (leaseLoop, settleCompletes).

// completeWindow is how long the ack loop leaves completes to the lease loop
// while the lease loop's next lease is due (it waits for a free slot, or a
// lease that completes is on the wire: such a lease answers at once). A
// handler that returns frees its slot right after leaving its complete, so
// the next lease normally takes it within microseconds; the window bounds
// the wait when it does not (the slot runs the next item of a group, a
// lease takes longer). It is on the system clock whatever Config.Clock: it
// waits for the worker's own goroutines, not for anything the server times.
const completeWindow = 10 * time.Millisecond

// completes holds the completes the handlers left until the ack loop or the
// lease loop takes them. Safe for concurrent use.
type completes struct {
	mu sync.Mutex
	// room is signalled when pending or back shrink (add waits on it).
	room *sync.Cond
	// pending are the completes no one took yet, in the order the handlers
	// left them (each job's leftAt says when).
	pending []*job
	// back are the completes the lease loop gave back after a lease that
	// carried them failed: the ack loop's alone.
	back []*job
	// leasing is set by the lease loop while its next lease is due and
	// will carry pending completes; the ack loop then leaves them to it for
	// up to completeWindow.
	leasing bool
	// closed is set once no handler will add any more (shutdown): the ack
	// loop sends what is left, then ends.
	closed bool
	// wake tells the ack loop that something above changed.
	wake chan struct{}
}

func newCompletes() *completes {
	c := &completes{wake: make(chan struct{}, 1)}
	c.room = sync.NewCond(&c.mu)
	return c
}

func (c *completes) signal() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// add leaves j's complete, waiting while maxBatch completes wait already
// (back-pressure on the handlers, as a full channel was).
func (c *completes) add(j *job) {
	c.mu.Lock()
	for len(c.pending)+len(c.back) >= maxBatch && !c.closed {
		c.room.Wait()
	}
	j.leftAt = time.Now()
	c.pending = append(c.pending, j)
	c.mu.Unlock()
	c.signal()
}

// close says that no handler will add any more.
func (c *completes) close() {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.room.Broadcast()
	c.signal()
}

// setLeasing records whether the lease loop's next lease is due and will
// carry pending completes.
func (c *completes) setLeasing(v bool) {
	c.mu.Lock()
	changed := c.leasing != v
	c.leasing = v
	c.mu.Unlock()
	if changed {
		c.signal()
	}
}

// take removes and returns the pending completes of one partition, the
// oldest one's, up to maxBatch (nil when none is pending): the lease loop's
// next lease carries them.
func (c *completes) take() []*job {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.pending) == 0 {
		return nil
	}
	p := c.pending[0].it.Partition
	var out []*job
	c.pending = slices.DeleteFunc(c.pending, func(j *job) bool {
		if j.it.Partition != p || len(out) == maxBatch {
			return false
		}
		out = append(out, j)
		return true
	})
	c.room.Broadcast()
	return out
}

// giveBack hands completes that a lease carried, and that may not have been
// done, to the ack loop.
func (c *completes) giveBack(js []*job) {
	c.mu.Lock()
	c.back = append(c.back, js...)
	c.mu.Unlock()
	c.signal()
}

// next waits until the ack loop has completes to send and returns up to
// maxBatch of them: those given back, at once; the pending ones at once
// when the lease loop will not take them (leasing unset, or closed), else
// once the oldest has waited completeWindow. It returns nil once closed
// with nothing left. Only the ack loop calls it.
func (c *completes) next() []*job {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		var expired <-chan time.Time
		c.mu.Lock()
		from := &c.back
		if len(c.back) == 0 {
			from = &c.pending
		}
		wait := time.Duration(0)
		if from == &c.pending && c.leasing && !c.closed && len(c.pending) > 0 {
			wait = completeWindow - time.Since(c.pending[0].leftAt)
		}
		switch {
		case len(*from) > 0 && wait <= 0:
			n := min(len(*from), maxBatch)
			out := slices.Clone((*from)[:n])
			*from = slices.Delete(*from, 0, n)
			c.mu.Unlock()
			c.room.Broadcast()
			return out
		case len(*from) == 0 && c.closed:
			c.mu.Unlock()
			return nil
		case len(*from) > 0:
			if timer == nil {
				timer = time.NewTimer(wait)
			} else {
				timer.Reset(wait)
			}
			expired = timer.C
		}
		c.mu.Unlock()
		select {
		case <-c.wake:
		case <-expired:
		}
	}
}

// Whether the server does what complete_ids ask (Worker.completeCheck).
const (
	completeUnchecked = iota // no lease with complete_ids has succeeded yet
	completeHonoured         // the server completed a lease's complete_ids
	completeIgnored          // the server left them leased, or cannot tell: queue.complete only
)

// completeWithLease reports whether the next lease may carry completes
// (owned by the lease loop).
func (w *Worker) completeWithLease() bool {
	return w.cfg.CompleteWithLease == SwitchOn && w.completeCheck != completeIgnored
}

// settleCompletes ends the completes done that a lease carried, given what
// the lease returned (err). After a failure their outcome is unknown (a
// 453, a 454, the network) or nothing was done (a 400: one of them is not
// leased, since the lease does all or nothing, or the client_id was still
// waiting): either way the ack loop sends them, as a queue.complete whose
// call failed is sent again, and a complete refused because its lease
// ended counts as a lost lease.
//
// The first time a lease that carried completes succeeds, the worker checks
// that the server did them: a server that does not know complete_ids
// (Querator, a Styx server older than issue 52) answers such a lease as a
// plain one and leaves the items leased, which would lose those completes
// silently. A queue.renew of one of them tells: refused (400, not leased)
// it was completed; renewed, the server ignored complete_ids, so the ack
// loop completes them and the worker sends no more; so does a lease that
// carried completes and answered 454 after waiting (waited, at least half
// of LeaseWait) as only a plain lease does. Owned by the lease loop.
func (w *Worker) settleCompletes(ctx context.Context, done []*job, acks *completes, err error, waited time.Duration) {
	if styx.IsRetry(err) && waited >= w.cfg.LeaseWait/2 {
		// It waited for items, as only a plain lease does.
		w.completeCheck = completeIgnored
		w.log.Warn("the server does not complete items with a lease (queue.lease complete_ids); completing them with queue.complete instead",
			"check", "a lease with completes waited for items", "error", err)
	}
	if err != nil {
		w.log.Debug("a lease that carried completes failed; the ack loop sends them", "count", len(done), "error", err)
		acks.giveBack(done)
		return
	}
	if w.completeCheck == completeUnchecked {
		j := done[0]
		rctx, cancel := context.WithTimeout(ctx, max(j.it.Deadline().Sub(w.cfg.Clock.Now()), time.Second))
		_, rerr := protect("queue.renew", func() (*pb.QueueRenewResponse, error) {
			return w.c.QueueRenew(rctx, &pb.QueueRenewRequest{QueueName: w.cfg.Queue, Partition: j.it.Partition, Ids: []string{j.it.ID}, LeaseTimeout: w.leaseTimeout()})
		})
		cancel()
		switch code := styx.ErrorCode(rerr); {
		case code == styx.CodeBadRequest:
			w.completeCheck = completeHonoured
		case rerr == nil, code == styx.CodeNotFound, code == 501:
			w.completeCheck = completeIgnored
			w.log.Warn("the server does not complete items with a lease (queue.lease complete_ids); completing them with queue.complete instead",
				"check", "queue.renew of a completed item", "error", rerr)
			acks.giveBack(done)
			return
		default:
			// Cannot tell now: the ack loop sends them, and the next lease
			// that carries completes checks again.
			acks.giveBack(done)
			return
		}
	}
	for _, j := range done {
		w.forget(j)
		w.m.items.WithLabelValues("completed").Inc()
	}
}

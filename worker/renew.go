package worker

import (
	"context"
	"time"

	styx "github.com/styxq/styx"
	pb "github.com/styxq/styx/styxpb"
)

// renewLoop keeps the leases of held items alive: it renews each item when
// half of its lease has passed (queue.renew, one call per partition for the
// items due together) until ctx is cancelled.
func (w *Worker) renewLoop(ctx context.Context) {
	for {
		due, next := w.dueRenewals(w.cfg.Clock.Now())
		for p, js := range byPartition(due) {
			for len(js) > 0 {
				batch := js[:min(len(js), maxBatch)]
				js = js[len(batch):]
				w.renew(ctx, p, batch)
			}
		}
		if len(due) > 0 {
			continue
		}
		wait := time.Hour
		if !next.IsZero() {
			wait = max(next.Sub(w.cfg.Clock.Now()), time.Millisecond)
		}
		timer := w.cfg.Clock.After(wait)
		if !next.IsZero() && !w.cfg.Clock.Now().Before(next) {
			// The clock passed next while the timer was set (a Clock
			// moved by a test): the timer, set from the later now,
			// would fire after it.
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-w.renewWake:
		case <-timer:
		}
	}
}

// dueRenewals returns the held items due for renewal at now and the
// earliest renewal time of the others (zero: none).
func (w *Worker) dueRenewals(now time.Time) (due []*job, next time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, j := range w.held {
		if j.ctx.Err() != nil {
			continue
		}
		if !j.renewAt.After(now) {
			due = append(due, j)
		} else if next.IsZero() || j.renewAt.Before(next) {
			next = j.renewAt
		}
	}
	return due, next
}

// renew renews the leases of js (one partition). If the server refuses the
// batch (400: some lease is gone), each is renewed alone to find the lost
// ones; a lost lease cancels its handler's context with ErrLeaseLost. Other
// failures are retried shortly, until the lease's deadline passes.
func (w *Worker) renew(ctx context.Context, partition int32, js []*job) {
	ids := make([]string, len(js))
	for i, j := range js {
		ids[i] = j.it.ID
	}
	deadline := earliestDeadline(js)
	// The deadline is the server's time, read on the worker's clock.
	callCtx, cancel := context.WithTimeout(ctx, deadline.Sub(w.cfg.Clock.Now()))
	res, err := protect("queue.renew", func() (*pb.QueueRenewResponse, error) {
		return w.c.QueueRenew(callCtx, &pb.QueueRenewRequest{
			QueueName: w.cfg.Queue, Partition: partition, Ids: ids, LeaseTimeout: w.leaseTimeout(),
		})
	})
	cancel()
	now := w.cfg.Clock.Now()
	switch {
	case err == nil && len(res.Items) == len(js):
		w.m.renewals.Add(float64(len(js)))
		w.mu.Lock()
		for i, j := range js {
			until := res.Items[i].LeaseDeadline.AsTime()
			j.it.lease.extend(until)
			length := j.it.lease.length
			if w.cfg.LeaseTimeout > 0 {
				length = w.cfg.LeaseTimeout
			}
			j.renewAt = until.Add(-length / 2)
		}
		w.mu.Unlock()
	case styx.ErrorCode(err) == styx.CodeBadRequest && len(js) > 1:
		for _, j := range js {
			w.renew(ctx, partition, []*job{j})
		}
	case styx.ErrorCode(err) == styx.CodeBadRequest || !now.Before(deadline):
		if ctx.Err() != nil {
			return // shutting down: the acknowledgement decides
		}
		w.m.renewalFailures.Add(float64(len(js)))
		for _, j := range js {
			w.log.Warn("lease renewal failed; cancelling the handler", "partition", partition, "id", j.it.ID, "error", err)
			j.cancel(ErrLeaseLost)
		}
	default:
		if ctx.Err() != nil {
			return
		}
		w.m.renewalFailures.Add(float64(len(js)))
		retry := now.Add(max(10*time.Millisecond, min(100*time.Millisecond, deadline.Sub(now)/4)))
		w.log.Warn("lease renewal failed; retrying", "partition", partition, "count", len(js), "error", err)
		w.mu.Lock()
		for _, j := range js {
			j.renewAt = retry
		}
		w.mu.Unlock()
	}
}

// leaseTimeout is the lease_timeout renewals ask for ("": the queue's).
func (w *Worker) leaseTimeout() string {
	if w.cfg.LeaseTimeout == 0 {
		return ""
	}
	return w.cfg.LeaseTimeout.String()
}

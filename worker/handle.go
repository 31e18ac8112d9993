package worker

import (
	"context"
	"errors"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	styx "github.com/styxq/styx"
	pb "github.com/styxq/styx/styxpb"
)

// Running the handlers (handleJobs, runJob, call) and sending their
// outcomes: completes batched by ackLoop, retries and releases.

// handleJobs runs each job of jobs (a slot) until jobs is closed, freeing
// the job's token after each: an item without a group, or the first item
// of a group and then, one after another, the items of the group held
// behind it. If user code ends the goroutine with runtime.Goexit (a handler
// calling t.FailNow), the item is retried with errGoexit (or let go, if its
// handler had returned), the items of its group held behind it are
// released, its token freed, and a new goroutine takes this one's place.
func (w *Worker) handleJobs(ctx context.Context, jobs <-chan *job, tokens chan struct{}, acks *completes, handlers *sync.WaitGroup) {
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
func (w *Worker) runJob(runCtx context.Context, j *job, acks *completes) *job {
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
func (w *Worker) finish(j *job, err error, acks *completes) bool {
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
		acks.add(j)
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
// complete that arrived while the previous one was on the wire (up to 1000,
// one call per partition), so completes cost one request per batch under
// load and add no delay when idle. With Config.CompleteWithLease it leaves
// them to the lease loop while the next lease is due, for up to
// completeWindow (see completes.next); it sends at once the completes of a
// lease that failed.
func (w *Worker) ackLoop(acks *completes) {
	for {
		batch := acks.next()
		if batch == nil {
			return
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

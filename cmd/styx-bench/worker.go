package main

// The workloads of the worker library (package worker): the worker workload
// (a worker consuming a prefilled queue, to compare with the hand-written
// consumers of drain and cycle), and the cycle in River's shape
// (--worker-consumer: the clients produce while a worker consumes).

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/styxq/styx/worker"
)

// workerPoll is how often the worker workload reads the worker's count of
// completed items: the resolution of its measured time.
const workerPoll = 2 * time.Millisecond

// runWorker is the worker workload: one worker.Worker with Concurrency
// --clients (CompleteWithLease on with --complete-with-lease, else off)
// and a handler that returns nil consumes the queue through the first
// endpoint until --prefill items are completed or the window ends;
// then its context is cancelled and Run's graceful shutdown awaited. Its
// requests are the library's own and not recorded. Completions are read
// from the worker's styx_worker_items_total{outcome="completed"} (items
// whose complete the server acknowledged) into b.finished, and b.lastFinish
// moves to when each new completion was seen.
func (b *bench) runWorker(ctx context.Context) {
	reg := prometheus.NewRegistry()
	w, err := b.newWorker(b.cfg.Clients, reg)
	if err != nil {
		b.fail("worker", err)
		return
	}
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	ran := make(chan error, 1)
	go func() { ran <- w.Run(wctx) }()
	b.awaitCompletions(ctx, reg)
	stop()
	if err := <-ran; err != nil && ctx.Err() == nil {
		b.fail("worker", err)
	}
	if n := b.finished.Load(); n < int64(b.cfg.Prefill) && ctx.Err() == nil {
		_, _ = fmt.Fprintf(b.stderr, "styx-bench: worker: %d of %d items completed within --duration %s\n",
			n, b.cfg.Prefill, b.cfg.Duration)
	}
}

// newWorker returns the workloads' worker: concurrency handlers that
// return nil, its metrics in reg.
func (b *bench) newWorker(concurrency int, reg prometheus.Registerer) (*worker.Worker, error) {
	return worker.New(b.c, worker.Config{
		Queue:             b.queue,
		Handler:           worker.HandlerFunc(func(context.Context, *worker.Item) error { return nil }),
		Concurrency:       concurrency,
		LeaseWait:         b.cfg.LeaseWait,
		ClientID:          "styx-bench-" + b.queue + "-worker",
		Logger:            slog.New(slog.NewTextHandler(b.stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Metrics:           reg,
		CompleteWithLease: completeWithLease(b.cfg.CompleteWithLease),
	})
}

// startWorkerCycle starts the cycle workload with --worker-consumer, in
// River's shape (bench/peers' River cycle, whose clients insert while
// River's workers work): --clients producers, each waiting before a batch
// while that batch would take the items produced and not yet completed
// (all clients together) past the backlog limit; one worker.Worker of
// --worker-concurrency handlers, which stops at the window's end; and a
// poller of the worker's completed count (styx_worker_items_total, items
// whose complete the server acknowledged) every workerPoll, which counts
// the completions it sees inside the window.
func (b *bench) startWorkerCycle(ctx context.Context, wg *sync.WaitGroup) {
	per := b.cfg.Backlog
	if per == 0 {
		per = max(5*b.cfg.Batch, 250)
	}
	limit := int64(per * b.cfg.Clients)
	reg := prometheus.NewRegistry()
	w, err := b.newWorker(b.cfg.WorkerConcurrency, reg)
	if err != nil {
		b.fail("worker", err)
		return
	}
	var produced, completed atomic.Int64
	wctx, stop := context.WithDeadline(ctx, b.end)
	wg.Go(func() {
		defer stop()
		if err := w.Run(wctx); err != nil && ctx.Err() == nil {
			b.fail("worker", err)
		}
	})
	wg.Go(func() {
		r := b.newRecorder(0)
		b.pollCompleted(ctx, reg, func(n int64) bool {
			if d := n - completed.Swap(n); d > 0 && b.inWindow(time.Now()) {
				r.count(int(d))
			}
			return b.running(ctx)
		})
	})
	for i := range b.cfg.Clients {
		wg.Go(func() {
			r := b.newRecorder(i)
			items := batchOf(b.cfg.Batch, b.cfg.Payload)
			group := b.grouper(i)
			for b.running(ctx) {
				if produced.Load()+int64(len(items))-completed.Load() > limit {
					sleep(ctx, workerPoll)
					continue
				}
				group(items)
				if _, err := r.produce(ctx, items); err == nil {
					produced.Add(int64(len(items)))
				}
			}
		})
	}
}

// completeWithLease is the worker's Config.CompleteWithLease for
// --complete-with-lease: on (each lease completes the items handled since
// the previous one, issue 52), or off (queue.complete only, the worker
// before issue 52, so that runs without the flag compare with older ones).
func completeWithLease(on bool) worker.Switch {
	if on {
		return worker.SwitchOn
	}
	return worker.SwitchOff
}

// awaitCompletions polls the worker's completed count in g every
// workerPoll until it reaches --prefill or the window ends, then checks
// with queue.stats that the queue is empty.
func (b *bench) awaitCompletions(ctx context.Context, g prometheus.Gatherer) {
	b.pollCompleted(ctx, g, func(n int64) bool {
		if n > b.finished.Load() {
			b.finished.Store(n)
			b.noteFinish(time.Now())
		}
		return n < int64(b.cfg.Prefill) && b.running(ctx)
	})
	if b.finished.Load() < int64(b.cfg.Prefill) {
		return
	}
	sctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	switch left, err := b.queueTotal(sctx, b.queue); {
	case err != nil:
		b.fail("stats", err)
	case left > 0:
		_, _ = fmt.Fprintf(b.stderr, "styx-bench: worker: %d items completed, but %s still holds %d\n", b.cfg.Prefill, b.queue, left)
	}
}

// pollCompleted reads the worker's completed count in g (completedOf)
// every workerPoll and gives it to seen, until seen returns false, ctx
// ends, or the count cannot be read (counted as an error).
func (b *bench) pollCompleted(ctx context.Context, g prometheus.Gatherer, seen func(n int64) bool) {
	t := time.NewTicker(workerPoll)
	defer t.Stop()
	for {
		n, err := completedOf(g)
		if err != nil {
			b.fail("worker metrics", err)
			return
		}
		if !seen(n) {
			return
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		}
	}
}

// completedOf returns the value of styx_worker_items_total{outcome="completed"}
// in g (a registry holding one worker's metrics).
func completedOf(g prometheus.Gatherer) (int64, error) {
	mfs, err := g.Gather()
	if err != nil {
		return 0, err
	}
	for _, mf := range mfs {
		if mf.GetName() != "styx_worker_items_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "outcome" && l.GetValue() == "completed" {
					return int64(m.GetCounter().GetValue()), nil
				}
			}
		}
	}
	return 0, errors.New(`no styx_worker_items_total{outcome="completed"} among the worker's metrics`)
}

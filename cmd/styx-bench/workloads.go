package main

// The workloads and the run that drives them. A run creates its queue (and
// for `dead` a dead-letter queue), starts the workload's goroutines, opens
// the measured window after the warm-up, closes it after --duration, then
// deletes the queues (unless --keep) and returns a Report.
//
// Every goroutine records into its own recorder (histograms are not safe for
// concurrent use); the recorders are merged once the goroutines are done. A
// request is measured when it ends inside the window [start, end).

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/styxq/styx"
	pb "github.com/styxq/styx/styxpb"
)

const (
	// requestTimeout bounds every request, long-polling leases included.
	requestTimeout = 30 * time.Second
	// errorBackoff is how long a goroutine pauses after a failed request,
	// so that a dead server is not hammered in a tight loop.
	errorBackoff = 50 * time.Millisecond
	// maxPrintedErrors is how many errors are printed to stderr.
	maxPrintedErrors = 5
	// latencySenders is how many goroutines of the latency workload send
	// the open-loop produce requests (their concurrency limit).
	latencySenders = 64
	// prefillBatch is the produce batch size of the prefill of the drain
	// and worker workloads.
	prefillBatch = 1000
)

// bench is the shared state of one run.
type bench struct {
	cfg config
	// clients holds one client per endpoint; c is the first, which sets
	// up, inspects and deletes the queues.
	clients []*styx.Client
	c       *styx.Client
	// metrics reads the endpoints' /metrics (storageSyncs).
	metrics *http.Client
	stderr  io.Writer
	// queue is the queue under load; dlq its dead-letter queue (dead only).
	queue, dlq string
	// created lists the queues this run created, deleted at the end.
	created []string
	// start and end bound the measured window [start, end).
	start, end time.Time

	mu        sync.Mutex
	recorders []*recorder

	errors      atomic.Int64
	printedErrs atomic.Int64
	// lastFinish is the unix-nano time of the last item completed inside
	// the window (drain and worker measure up to it).
	lastFinish atomic.Int64
	// finished is the sum of the recorders' items so far, for --interval;
	// for the worker workload, which has no recorders, the items the worker
	// completed.
	finished atomic.Int64
	// left is how many items the produce workload may still produce under
	// --count.
	left atomic.Int64
	// groupDone is when each group of the fair workload finished, and
	// groupLeft how many of its items are not completed yet (under mu).
	groupDone map[string]time.Time
	groupLeft map[string]int
}

// recorder collects the measurements of one goroutine, which sends its
// requests through c.
type recorder struct {
	b          *bench
	c          *styx.Client
	hist       map[string]*hdrhistogram.Histogram
	e2e        *hdrhistogram.Histogram
	items      int64
	leaseEmpty int64
}

// newBench returns a run of cfg with a client for each of cfg.Endpoints,
// all sharing one HTTP transport.
func newBench(cfg config, stderr io.Writer) (*bench, error) {
	hc := &http.Client{Transport: &http.Transport{
		MaxIdleConns:        0, // no overall limit
		MaxIdleConnsPerHost: 4*cfg.Clients + latencySenders + 16,
		IdleConnTimeout:     90 * time.Second,
	}}
	b := &bench{cfg: cfg, stderr: stderr, queue: cfg.Queue, metrics: &http.Client{Transport: hc.Transport, Timeout: requestTimeout}}
	for _, e := range cfg.Endpoints {
		c, err := styx.NewClient(styx.ClientConfig{Endpoint: e, HTTPClient: hc, APIKey: cfg.APIKey})
		if err != nil {
			return nil, err
		}
		b.clients = append(b.clients, c)
	}
	if len(b.clients) == 0 {
		return nil, errors.New("no endpoint")
	}
	b.c = b.clients[0]
	b.left.Store(cfg.Count)
	if cfg.Workload == workloadDead || cfg.Workload == workloadSoak {
		b.dlq = cfg.Queue + "-dead"
	}
	return b, nil
}

// newRecorder returns a recorder registered with b for goroutine i, which
// uses endpoint i mod n.
func (b *bench) newRecorder(i int) *recorder {
	r := &recorder{b: b, c: b.clients[i%len(b.clients)], hist: map[string]*hdrhistogram.Histogram{}, e2e: newHistogram()}
	for _, k := range requestKinds {
		r.hist[k] = newHistogram()
	}
	b.mu.Lock()
	b.recorders = append(b.recorders, r)
	b.mu.Unlock()
	return r
}

// count adds n items finished inside the window.
func (r *recorder) count(n int) {
	r.items += int64(n)
	r.b.finished.Add(int64(n))
}

// inWindow reports whether t is inside the measured window.
func (b *bench) inWindow(t time.Time) bool { return !t.Before(b.start) && t.Before(b.end) }

// running reports whether goroutines should start another request.
func (b *bench) running(ctx context.Context) bool {
	return ctx.Err() == nil && time.Now().Before(b.end)
}

// fail counts err and prints it if it is one of the first few.
func (b *bench) fail(kind string, err error) {
	b.errors.Add(1)
	if b.printedErrs.Add(1) <= maxPrintedErrors {
		_, _ = fmt.Fprintf(b.stderr, "styx-bench: %s: %v\n", kind, err)
	}
}

// call runs fn as one request of kind. A success ending inside the window
// goes into the kind's histogram; a lease answered 454 counts as an empty
// lease; any other failure is an error (unless the run was interrupted).
// It returns whether the request ended inside the window, and fn's error.
func (r *recorder) call(ctx context.Context, kind string, fn func(context.Context) error) (bool, error) {
	t0 := time.Now()
	cctx, cancel := context.WithTimeout(ctx, requestTimeout)
	err := fn(cctx)
	cancel()
	t1 := time.Now()
	in := r.b.inWindow(t1)
	switch {
	case err == nil:
		if in {
			recordDuration(r.hist[kind], t1.Sub(t0))
		}
	case kind == kindLease && styx.IsRetry(err):
		if in {
			r.leaseEmpty++
		}
	case ctx.Err() != nil: // interrupted, not the server's fault
	default:
		r.b.fail(kind, err)
		sleep(ctx, errorBackoff)
	}
	return in, err
}

// produce sends items to the queue.
func (r *recorder) produce(ctx context.Context, items []*pb.QueueProduceItem) (bool, error) {
	return r.call(ctx, kindProduce, func(ctx context.Context) error {
		return r.c.QueueProduce(ctx, &pb.QueueProduceRequest{
			QueueName: r.b.queue, RequestTimeout: "10s", Items: items,
		})
	})
}

// lease asks for up to --batch items as clientID.
func (r *recorder) lease(ctx context.Context, clientID string) (*pb.QueueLeaseResponse, bool, error) {
	return r.leaseCompleting(ctx, clientID, nil, false)
}

// leaseCompleting asks for up to --batch items as clientID, completing the
// items of prev first (queue.lease's complete_ids) when prev has any, and
// then waiting for items if wait (wait_after_complete).
func (r *recorder) leaseCompleting(ctx context.Context, clientID string, prev *pb.QueueLeaseResponse, wait bool) (*pb.QueueLeaseResponse, bool, error) {
	req := &pb.QueueLeaseRequest{QueueName: r.b.queue, BatchSize: int32(r.b.cfg.Batch), ClientId: clientID,
		RequestTimeout: r.b.cfg.LeaseWait.String(), WaitAfterComplete: wait}
	if prev != nil {
		req.CompletePartition = prev.Partition
		for _, item := range prev.Items {
			req.CompleteIds = append(req.CompleteIds, item.Id)
		}
	}
	var resp *pb.QueueLeaseResponse
	in, err := r.call(ctx, kindLease, func(ctx context.Context) error {
		var err error
		resp, err = r.c.QueueLease(ctx, req)
		return err
	})
	return resp, in, err
}

// completedWith settles a lease that carried prev's completes (resp, in and
// err from leaseCompleting): it counts prev when the lease was answered
// inside the window and returns what the next lease completes: resp's
// items, prev again when the lease's outcome is unknown (an error other
// than 400: completed with the next lease), or nil (none leased, or 400:
// prev's leases ended and its items come back).
func (r *recorder) completedWith(prev, resp *pb.QueueLeaseResponse, in bool, err error) *pb.QueueLeaseResponse {
	if err != nil {
		if styx.ErrorCode(err) == http.StatusBadRequest {
			return nil
		}
		return prev
	}
	if in && prev != nil {
		r.count(len(prev.Items))
	}
	if len(resp.Items) == 0 {
		return nil
	}
	return resp
}

// complete completes the leased items of resp.
func (r *recorder) complete(ctx context.Context, resp *pb.QueueLeaseResponse) (bool, error) {
	ids := make([]string, len(resp.Items))
	for i, item := range resp.Items {
		ids[i] = item.Id
	}
	return r.call(ctx, kindComplete, func(ctx context.Context) error {
		return r.c.QueueComplete(ctx, &pb.QueueCompleteRequest{
			QueueName: r.b.queue, Partition: resp.Partition, RequestTimeout: "10s", Ids: ids,
		})
	})
}

// retry fails the leased items of resp with an error message (a counted
// attempt: with max_attempts 1 they are dead-lettered).
func (r *recorder) retry(ctx context.Context, resp *pb.QueueLeaseResponse) (bool, error) {
	items := make([]*pb.QueueRetryItem, len(resp.Items))
	for i, item := range resp.Items {
		items[i] = &pb.QueueRetryItem{Id: item.Id, Error: "styx-bench: induced failure"}
	}
	return r.call(ctx, kindRetry, func(ctx context.Context) error {
		_, err := r.c.QueueRetry(ctx, &pb.QueueRetryRequest{
			QueueName: r.b.queue, Partition: resp.Partition, Items: items,
		})
		return err
	})
}

// randomPayload returns n random bytes.
func randomPayload(n int) []byte {
	p := make([]byte, n)
	_, _ = rand.Read(p)
	return p
}

// batchOf returns n produce items, each with its own random payload of
// size bytes, so that storage cannot compress one item against another.
// Callers reuse the batch across requests.
func batchOf(n, size int) []*pb.QueueProduceItem {
	items := make([]*pb.QueueProduceItem, n)
	for i := range items {
		items[i] = &pb.QueueProduceItem{Bytes: randomPayload(size)}
	}
	return items
}

// grouper returns what gives client i's produced items their groups
// (--groups): one of the groups in turn, starting at a place of the
// client's own; a no-op without --groups.
func (b *bench) grouper(i int) func([]*pb.QueueProduceItem) {
	n := b.cfg.Groups
	if n <= 0 {
		return func([]*pb.QueueProduceItem) {}
	}
	names := make([]string, n)
	for k := range names {
		names[k] = fmt.Sprint("g", k)
	}
	next := i * 7919 % n
	return func(items []*pb.QueueProduceItem) {
		for _, item := range items {
			item.Group = names[next]
			next = (next + 1) % n
		}
	}
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// runProducer is produce client i: it produces batches, counting produced
// items, until the window ends or (--count) no items are left.
func (b *bench) runProducer(ctx context.Context, i int, count bool) {
	r := b.newRecorder(i)
	items := batchOf(b.cfg.Batch, b.cfg.Payload)
	group := b.grouper(i)
	for b.running(ctx) {
		group(items)
		n := b.claim(len(items))
		if n == 0 {
			return
		}
		in, err := r.produce(ctx, items[:n])
		switch {
		case err != nil:
			b.unclaim(n)
		case in && count:
			r.count(n)
		}
	}
}

// claim takes up to n of the items left under --count and returns how
// many it took (n when there is no --count).
func (b *bench) claim(n int) int {
	if b.cfg.Count == 0 {
		return n
	}
	for {
		left := b.left.Load()
		k := min(int64(n), left)
		if k <= 0 {
			return 0
		}
		if b.left.CompareAndSwap(left, left-k) {
			return int(k)
		}
	}
}

// unclaim gives back n claimed items that were not produced.
func (b *bench) unclaim(n int) {
	if b.cfg.Count > 0 {
		b.left.Add(int64(n))
	}
}

// runCycle is cycle client i: produce a batch, lease up to a batch, complete
// what was leased, counting completed items.
func (b *bench) runCycle(ctx context.Context, i int, clientID string) {
	if b.cfg.CompleteWithLease && b.cfg.LeaseAhead {
		b.runCycleLeaseAhead(ctx, i, clientID)
		return
	}
	r := b.newRecorder(i)
	items := batchOf(b.cfg.Batch, b.cfg.Payload)
	group := b.grouper(i)
	var prev *pb.QueueLeaseResponse // --complete-with-lease: leased, not completed yet
	for b.running(ctx) {
		group(items)
		if _, err := r.produce(ctx, items); err != nil {
			continue
		}
		if b.cfg.CompleteWithLease {
			resp, in, err := r.leaseCompleting(ctx, clientID, prev, false)
			prev = r.completedWith(prev, resp, in, err)
			continue
		}
		resp, _, err := r.lease(ctx, clientID)
		if err != nil || len(resp.Items) == 0 {
			continue
		}
		if in, err := r.complete(ctx, resp); err == nil && in {
			r.count(len(resp.Items))
		}
	}
	if prev != nil {
		_, _ = r.complete(context.WithoutCancel(ctx), prev)
	}
}

// runCycleLeaseAhead is cycle client i with --lease-ahead: its lease
// (completing the previous batch, then waiting) is sent first, then its
// produce; it goes on once both are answered, counting the previous batch
// when the lease that completed it was answered 200. The lease and the
// produce each have a recorder of their own (a recorder is one
// goroutine's).
func (b *bench) runCycleLeaseAhead(ctx context.Context, i int, clientID string) {
	r, lr := b.newRecorder(i), b.newRecorder(i)
	items := batchOf(b.cfg.Batch, b.cfg.Payload)
	group := b.grouper(i)
	type leased struct {
		resp *pb.QueueLeaseResponse
		in   bool
		err  error
	}
	got := make(chan leased, 1)
	var prev *pb.QueueLeaseResponse // leased, not completed yet
	for b.running(ctx) {
		go func(prev *pb.QueueLeaseResponse) {
			resp, in, err := lr.leaseCompleting(ctx, clientID, prev, true)
			got <- leased{resp, in, err}
		}(prev)
		group(items)
		_, _ = r.produce(ctx, items)
		l := <-got
		prev = r.completedWith(prev, l.resp, l.in, l.err)
	}
	if prev != nil {
		_, _ = r.complete(context.WithoutCancel(ctx), prev)
	}
}

// runDrainer is drain client i: lease and complete until the queue is
// empty (a lease answered 454) or the window ends.
func (b *bench) runDrainer(ctx context.Context, i int, clientID string) {
	r := b.newRecorder(i)
	for b.running(ctx) {
		resp, _, err := r.lease(ctx, clientID)
		if styx.IsRetry(err) {
			return
		}
		if err != nil || len(resp.Items) == 0 {
			continue
		}
		if in, err := r.complete(ctx, resp); err == nil && in {
			r.count(len(resp.Items))
			now := time.Now()
			b.noteFinish(now)
			if b.cfg.Workload == workloadFair {
				b.noteGroupsDone(resp, now)
			}
		}
	}
}

// noteFinish moves lastFinish forward to t.
func (b *bench) noteFinish(t time.Time) {
	n := t.UnixNano()
	for {
		old := b.lastFinish.Load()
		if n <= old || b.lastFinish.CompareAndSwap(old, n) {
			return
		}
	}
}

// runDeadConsumer is dead client i: lease and fail every item with an
// error, so that (max_attempts 1) it goes to the dead-letter queue.
func (b *bench) runDeadConsumer(ctx context.Context, i int, clientID string) {
	r := b.newRecorder(i)
	for b.running(ctx) {
		resp, _, err := r.lease(ctx, clientID)
		if err != nil || len(resp.Items) == 0 {
			continue
		}
		_, _ = r.retry(ctx, resp)
	}
}

// runLatencyConsumer is latency client i: lease, record each item's
// produce→lease latency from the send time at the start of its payload,
// then complete, counting completed items.
func (b *bench) runLatencyConsumer(ctx context.Context, i int, clientID string) {
	r := b.newRecorder(i)
	for b.running(ctx) {
		resp, _, err := r.lease(ctx, clientID)
		if err != nil || len(resp.Items) == 0 {
			continue
		}
		now := time.Now()
		if b.inWindow(now) {
			for _, item := range resp.Items {
				if len(item.Bytes) >= 8 {
					sent := int64(binary.LittleEndian.Uint64(item.Bytes))
					recordDuration(r.e2e, now.Sub(time.Unix(0, sent)))
				}
			}
		}
		if in, err := r.complete(ctx, resp); err == nil && in {
			r.count(len(resp.Items))
		}
	}
}

// runOpenLoopProducer produces --batch items every batch/rate seconds
// regardless of how fast the server answers, through latencySenders
// goroutines (sender j uses endpoint j mod n). Each item's payload starts with its scheduled send time (unix
// nanoseconds, little-endian), so a server or client that falls behind
// shows up in the produce→lease latency instead of slowing the schedule
// (no coordinated omission).
func (b *bench) runOpenLoopProducer(ctx context.Context) {
	interval := time.Duration(float64(time.Second) * float64(b.cfg.Batch) / float64(b.cfg.Rate))
	due := make(chan time.Time, 1024)
	var wg sync.WaitGroup
	for j := range latencySenders {
		wg.Go(func() {
			r := b.newRecorder(j)
			base := randomPayload(b.cfg.Payload)
			for at := range due {
				items := make([]*pb.QueueProduceItem, b.cfg.Batch)
				for i := range items {
					p := make([]byte, len(base))
					copy(p, base)
					binary.LittleEndian.PutUint64(p, uint64(at.UnixNano()))
					items[i] = &pb.QueueProduceItem{Bytes: p}
				}
				_, _ = r.produce(ctx, items)
			}
		})
	}
	next := time.Now()
	for b.running(ctx) {
		sleep(ctx, time.Until(next))
		select {
		case due <- next:
		case <-ctx.Done():
		}
		next = next.Add(interval)
	}
	close(due)
	wg.Wait()
}

// setup creates the queue (and the dead-letter queue of `dead` and
// `soak`). An
// existing queue named with --queue is reused and left in place.
func (b *bench) setup(ctx context.Context) error {
	create := func(info *pb.QueueInfo) error {
		if info.LeaseTimeout == "" {
			info.LeaseTimeout = "1m"
		}
		info.ExpireTimeout = "24h"
		err := b.c.QueuesCreate(ctx, info)
		switch {
		case err == nil:
			b.created = append(b.created, info.QueueName)
			return nil
		case styx.IsQueueExists(err) && b.cfg.QueueGiven:
			_, _ = fmt.Fprintf(b.stderr, "styx-bench: reusing existing queue %s\n", info.QueueName)
			return nil
		default:
			return fmt.Errorf("create queue %s: %w", info.QueueName, err)
		}
	}
	if b.dlq != "" {
		if err := create(&pb.QueueInfo{QueueName: b.dlq}); err != nil {
			return err
		}
	}
	info := &pb.QueueInfo{QueueName: b.queue, RequestedPartitions: int32(b.cfg.Partitions), Ordered: b.cfg.Ordered, Cluster: b.cfg.Cluster}
	if b.dlq != "" {
		info.DeadQueue, info.MaxAttempts = b.dlq, 1
	}
	if b.cfg.Workload == workloadSoak {
		info.MaxAttempts = soakMaxAttempts
		info.LeaseTimeout = soakLeaseTimeout
	}
	return create(info)
}

// cleanup deletes the queues setup created, newest first (a dead-letter
// queue cannot be deleted while its source queue exists).
func (b *bench) cleanup() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for i := len(b.created) - 1; i >= 0; i-- {
		q := b.created[i]
		if err := b.c.QueuesDelete(ctx, &pb.QueuesDeleteRequest{QueueName: q, Force: true}); err != nil {
			_, _ = fmt.Fprintf(b.stderr, "styx-bench: delete queue %s: %v\n", q, err)
		}
	}
}

// prefill produces --prefill items with --clients goroutines, unmeasured.
func (b *bench) prefill(ctx context.Context) error {
	var left atomic.Int64
	left.Store(int64(b.cfg.Prefill))
	var wg sync.WaitGroup
	var once sync.Once
	var firstErr error
	for i := range b.cfg.Clients {
		group := b.grouper(i)
		wg.Go(func() {
			for ctx.Err() == nil {
				n := min(int64(prefillBatch), left.Add(-prefillBatch)+prefillBatch)
				if n <= 0 {
					return
				}
				items := batchOf(int(n), b.cfg.Payload)
				group(items)
				err := b.c.QueueProduce(ctx, &pb.QueueProduceRequest{QueueName: b.queue, RequestTimeout: "10s", Items: items})
				if err != nil {
					once.Do(func() { firstErr = fmt.Errorf("prefill: %w", err) })
					return
				}
			}
		})
	}
	wg.Wait()
	if firstErr == nil {
		firstErr = ctx.Err()
	}
	return firstErr
}

// deadCount returns the number of items in the dead-letter queue.
func (b *bench) deadCount(ctx context.Context) (int64, error) {
	return b.queueTotal(ctx, b.dlq)
}

// queueTotal returns the number of items in queue: the sum of its
// partitions' totals from queue.stats.
func (b *bench) queueTotal(ctx context.Context, queue string) (int64, error) {
	st, err := b.c.QueueStats(ctx, &pb.QueueStatsRequest{QueueName: queue})
	if err != nil {
		return 0, fmt.Errorf("stats of %s: %w", queue, err)
	}
	var n int64
	for _, lq := range st.LogicalQueues {
		for _, p := range lq.Partitions {
			n += int64(p.Total)
		}
	}
	return n, nil
}

// startWorkers starts the workload's goroutines on wg. Client i uses
// endpoint i mod n; the dead workload numbers its producers first, then its
// consumers, so that both spread over the endpoints.
func (b *bench) startWorkers(ctx context.Context, wg *sync.WaitGroup) {
	id := func(i int) string { return fmt.Sprintf("styx-bench-%s-%d", b.queue, i) }
	switch b.cfg.Workload {
	case workloadProduce:
		for i := range b.cfg.Clients {
			wg.Go(func() { b.runProducer(ctx, i, true) })
		}
	case workloadCycle:
		if b.cfg.WorkerConsumer {
			b.startWorkerCycle(ctx, wg)
			return
		}
		for i := range b.cfg.Clients {
			wg.Go(func() { b.runCycle(ctx, i, id(i)) })
		}
	case workloadDrain, workloadFair:
		for i := range b.cfg.Clients {
			wg.Go(func() { b.runDrainer(ctx, i, id(i)) })
		}
	case workloadDead:
		producers := max(1, b.cfg.Clients/2)
		consumers := max(1, b.cfg.Clients-producers)
		for i := range producers {
			wg.Go(func() { b.runProducer(ctx, i, false) })
		}
		for i := range consumers {
			wg.Go(func() { b.runDeadConsumer(ctx, producers+i, id(i)) })
		}
	case workloadLatency:
		wg.Go(func() { b.runOpenLoopProducer(ctx) })
		for i := range b.cfg.Clients {
			wg.Go(func() { b.runLatencyConsumer(ctx, i, id(i)) })
		}
	case workloadWorker:
		wg.Go(func() { b.runWorker(ctx) })
	}
}

// runBench executes one run of cfg and returns its report.
func runBench(ctx context.Context, cfg config, stderr io.Writer) (rep Report, err error) {
	b, err := newBench(cfg, stderr)
	if err != nil {
		return Report{}, err
	}
	defer b.c.Close() // the clients share one transport: this closes them all
	if err := b.setup(ctx); err != nil {
		return Report{}, err
	}
	if !cfg.Keep {
		defer b.cleanup()
	}

	pids := serverPIDs("/proc", cfg, stderr)

	warmup := cfg.Warmup
	switch cfg.Workload {
	case workloadDrain, workloadWorker:
		_, _ = fmt.Fprintf(stderr, "styx-bench: prefilling %s with %d items\n", b.queue, cfg.Prefill)
		if err := b.prefill(ctx); err != nil {
			return Report{}, err
		}
		warmup = 0 // measured from the first lease (the worker's start)
	case workloadFair:
		_, _ = fmt.Fprintf(stderr, "styx-bench: prefilling %s with a hot group of %d items, then %d groups of %d\n", b.queue, cfg.Hot, fairSmall, fairSmallItems)
		if err := b.prefillFair(ctx); err != nil {
			return Report{}, err
		}
		warmup = 0
	}
	b.start = time.Now().Add(warmup)
	b.end = b.start.Add(cfg.Duration)

	var wg sync.WaitGroup
	b.startWorkers(ctx, &wg)
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	waitUntil := func(t time.Time) {
		select {
		case <-time.After(time.Until(t)):
		case <-done:
		case <-ctx.Done():
		}
	}

	// Samples at the window's edges: server usage, dead-letter count,
	// fsyncs of the server's log.
	var procStart, procEnd procSample
	var procErr error
	var deadStart, deadEnd int64
	var deadErr error
	var syncsStart, syncsEnd int64
	syncsKnown := true
	sampleAt := func(ps *procSample, dead, syncs *int64) {
		if len(pids) > 0 && procErr == nil {
			*ps, procErr = readProcs("/proc", pids)
		}
		if b.dlq != "" && deadErr == nil {
			sctx, cancel := context.WithTimeout(ctx, requestTimeout)
			*dead, deadErr = b.deadCount(sctx)
			cancel()
		}
		if syncsKnown {
			sctx, cancel := context.WithTimeout(ctx, requestTimeout)
			var err error
			*syncs, syncsKnown, err = b.storageSyncs(sctx)
			cancel()
			if err != nil && ctx.Err() == nil {
				_, _ = fmt.Fprintf(stderr, "styx-bench: fsyncs not measured: %v\n", err)
			}
		}
	}
	waitUntil(b.start)
	sampleAt(&procStart, &deadStart, &syncsStart)
	var intervals chan []Interval
	if cfg.Interval > 0 {
		intervals = make(chan []Interval, 1)
		go func() { intervals <- b.sampleIntervals(ctx, done) }()
	}
	waitUntil(b.end)
	measured := max(0, time.Since(b.start))
	sampleAt(&procEnd, &deadEnd, &syncsEnd)
	<-done
	var ivs []Interval
	if intervals != nil {
		ivs = <-intervals
	}
	if ctx.Err() != nil {
		return Report{}, context.Cause(ctx)
	}

	rep = b.report(measured)
	rep.Intervals = ivs
	switch cfg.Workload {
	case workloadDrain, workloadWorker, workloadFair:
		if cfg.Workload == workloadFair {
			rep.Fairness = b.fairness()
			rep.Prefill = cfg.Hot + fairSmall*fairSmallItems
		}
		if cfg.Workload == workloadWorker {
			rep.Items = b.finished.Load() // the worker has no recorders
		}
		if last := b.lastFinish.Load(); last > 0 {
			rep.Seconds = time.Unix(0, last).Sub(b.start).Seconds()
		}
		if cfg.Workload != workloadFair {
			rep.Prefill = cfg.Prefill
		}
		if rep.Seconds > 0 {
			rep.ItemsPerSec = float64(rep.Items) / rep.Seconds
		}
	case workloadDead:
		if deadErr != nil {
			return rep, deadErr
		}
		rep.Items = deadEnd - deadStart
		rep.ItemsPerSec = float64(rep.Items) / rep.Seconds
	case workloadLatency:
		rep.Rate = cfg.Rate
	}
	if syncsKnown {
		n := syncsEnd - syncsStart
		rep.Syncs = &n
		if n > 0 {
			rep.ItemsPerSync = float64(rep.Items) / float64(n)
		}
	}
	if len(pids) > 0 {
		if procErr != nil {
			_, _ = fmt.Fprintf(stderr, "styx-bench: server usage of %s: %v\n", pidList(pids), procErr)
		} else {
			cpu := float64(procEnd.CPUTicks-procStart.CPUTicks) / float64(clockTicks())
			rep.Server = &ServerUsage{
				PID: pids[0], CPUSeconds: cpu, CPUCores: cpu / measured.Seconds(),
				RSSBeforeKB: procStart.RSSKB, RSSAfterKB: procEnd.RSSKB, PeakRSSKB: procEnd.HWMKB,
			}
			if len(pids) > 1 {
				rep.Server.PIDs = pids
			}
		}
	}
	return rep, nil
}

// sampleIntervals measures the items finished in every --interval of the
// measured window, from b.start until b.end or until done closes (the last
// interval may then be shorter), and prints each on stderr as it ends. The
// dead workload counts arrivals in the dead-letter queue, the others the
// items the recorders count.
func (b *bench) sampleIntervals(ctx context.Context, done <-chan struct{}) []Interval {
	count := func() (int64, error) { return b.finished.Load(), nil }
	if b.dlq != "" {
		count = func() (int64, error) {
			sctx, cancel := context.WithTimeout(ctx, requestTimeout)
			defer cancel()
			return b.deadCount(sctx)
		}
	}
	prev, err := count()
	if err != nil {
		_, _ = fmt.Fprintf(b.stderr, "styx-bench: interval: %v\n", err)
		return nil
	}
	var out []Interval
	from := b.start
	for k := 1; from.Before(b.end); k++ {
		to := b.start.Add(time.Duration(k) * b.cfg.Interval)
		if to.After(b.end) {
			to = b.end
		}
		last := false
		select {
		case <-time.After(time.Until(to)):
		case <-done:
			last = true
		case <-ctx.Done():
			return out
		}
		now := time.Now()
		n, err := count()
		if err != nil {
			_, _ = fmt.Fprintf(b.stderr, "styx-bench: interval: %v\n", err)
			return out
		}
		iv := Interval{Start: from.Sub(b.start).Seconds(), Seconds: now.Sub(from).Seconds(), Items: n - prev}
		if iv.Seconds > 0 {
			iv.ItemsPerSec = float64(iv.Items) / iv.Seconds
		}
		out = append(out, iv)
		_, _ = fmt.Fprintf(b.stderr, "styx-bench: interval %d [%.1fs, %.1fs): %d items, %.1f items/s\n",
			k, iv.Start, iv.Start+iv.Seconds, iv.Items, iv.ItemsPerSec)
		if last {
			break
		}
		prev, from = n, now
	}
	return out
}

// report merges the recorders into a Report over a window of measured.
func (b *bench) report(measured time.Duration) Report {
	hist := map[string]*hdrhistogram.Histogram{}
	for _, k := range requestKinds {
		hist[k] = newHistogram()
	}
	e2e := newHistogram()
	rep := Report{
		Label: b.cfg.Label, Workload: b.cfg.Workload, Endpoint: b.cfg.Endpoint, Queue: b.queue,
		Clients: b.cfg.Clients, Batch: b.cfg.Batch, Payload: b.cfg.Payload, Partitions: b.cfg.Partitions,
		Seconds: measured.Seconds(), Requests: map[string]Latency{}, Errors: b.errors.Load(),
		Groups: b.cfg.Groups, Ordered: b.cfg.Ordered,
	}
	b.mu.Lock()
	for _, r := range b.recorders {
		for k, h := range r.hist {
			hist[k].Merge(h)
		}
		e2e.Merge(r.e2e)
		rep.Items += r.items
		rep.LeaseEmpty += r.leaseEmpty
	}
	b.mu.Unlock()
	for k, h := range hist {
		if h.TotalCount() > 0 {
			rep.Requests[k] = summarize(h)
		}
	}
	if b.cfg.Workload == workloadLatency {
		l := summarize(e2e)
		rep.EndToEnd = &l
	}
	if rep.Seconds > 0 {
		rep.ItemsPerSec = float64(rep.Items) / rep.Seconds
	}
	return rep
}

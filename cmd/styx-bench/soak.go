package main

// The soak workload (issue 23): a moderate mixed load for a long time, to
// see whether the server's memory, goroutines, open files or latency creep
// up. One producer sends about --rate items/s in batches of 1..--batch
// items; --clients consumers lease batches of 1..--batch items and give
// each item a fate: about soakRetryFraction of them fail with a counted
// attempt (queue.retry; the source queue has max_attempts
// soakMaxAttempts, so an item that fails that often is dead-lettered),
// about soakDeadFraction are dead-lettered at once (queue.retry with
// dead: true), and the rest are completed. Every --redrive-every a
// dead.redrive moves the whole dead-letter queue back to the source queue
// (max_redrive_count -1: items may go round forever).
//
// The run is split into --interval pieces. At the end of each, the
// sampler reads the server's RSS (VmRSS of /proc/PID/status), its open
// files (the entries of /proc/PID/fd) and its goroutines (go_goroutines of
// its Prometheus /metrics, or the total of a pprof goroutine profile),
// the depths of both queues (queue.stats), and takes the interval's bucket:
// the items moved and the p99 latencies of the requests that ended in it.
// Each row is printed on stderr as it comes, and the Markdown report and
// the CSV are rewritten after every interval, so that an interrupted soak
// leaves what it measured. The verdict compares the peaks of RSS and
// goroutines in the first --verdict-window intervals after the warm-up
// (--warmup-intervals) with their peaks in the last --verdict-window
// intervals (see judge).

import (
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/styxq/styx"
	pb "github.com/styxq/styx/styxpb"
)

const (
	// soakRetryFraction is the fraction of leased items the soak fails
	// with a counted attempt (requeued at once).
	soakRetryFraction = 0.10
	// soakDeadFraction is the fraction of leased items the soak
	// dead-letters at once (queue.retry with dead: true).
	soakDeadFraction = 0.02
	// soakMaxAttempts is the max_attempts of the soak's source queue.
	soakMaxAttempts = 3
	// soakDefaultRate is the soak's produce rate in items/s when --rate is
	// not given (--rate's own default, 1000, is the latency workload's).
	soakDefaultRate = 300
	// soakLeaseTimeout is the lease_timeout of the soak's source queue.
	soakLeaseTimeout = "30s"
	// soakGoroutineSlack is the smallest change in the server's goroutines
	// the verdict counts as growth, whatever --goroutine-tolerance says:
	// a few goroutines come and go with the connections and long-polls in
	// flight.
	soakGoroutineSlack = 5
	// redrivePoll is how often the soak polls a running redrive task.
	redrivePoll = 250 * time.Millisecond
	// redriveWait bounds how long the soak waits for one redrive task.
	redriveWait = 2 * time.Minute
)

// soakBucket is what the soak measured in one interval.
type soakBucket struct {
	// produce holds the latencies of produce requests, in microseconds.
	produce *hdrhistogram.Histogram
	// cycle holds lease+complete latencies: from the start of a lease to
	// the end of the complete of the items of it that were completed.
	cycle *hdrhistogram.Histogram
	// Items produced, completed, requeued by a counted retry,
	// dead-lettered (by retry, explicit or max_attempts) and moved back by
	// redrives; failed requests.
	produced, completed, retried, dead, redriven, errors int64
}

// soakBuckets sorts measurements into the interval in which they ended:
// bucket k holds [start+k*interval, start+(k+1)*interval). The sampler
// takes bucket k once interval k is over; a measurement that arrives for a
// bucket already taken is dropped and counted in late. Safe for concurrent
// use.
type soakBuckets struct {
	start    time.Time
	interval time.Duration

	mu    sync.Mutex
	open  map[int]*soakBucket // guarded by mu
	taken int                 // buckets below taken were taken; guarded by mu
	late  int64               // guarded by mu
}

// newSoakBuckets returns empty buckets of length interval from start.
func newSoakBuckets(start time.Time, interval time.Duration) *soakBuckets {
	return &soakBuckets{start: start, interval: interval, open: map[int]*soakBucket{}}
}

// index returns the bucket of a measurement that ended at t; times before
// start go into bucket 0.
func (s *soakBuckets) index(t time.Time) int {
	if t.Before(s.start) {
		return 0
	}
	return int(t.Sub(s.start) / s.interval)
}

// add applies fn to the bucket of time t, unless that bucket was taken.
func (s *soakBuckets) add(t time.Time, fn func(*soakBucket)) {
	k := s.index(t)
	s.mu.Lock()
	defer s.mu.Unlock()
	if k < s.taken {
		s.late++
		return
	}
	b := s.open[k]
	if b == nil {
		b = &soakBucket{produce: newHistogram(), cycle: newHistogram()}
		s.open[k] = b
	}
	fn(b)
}

// take returns bucket k (empty if nothing ended in it) and closes it and
// every bucket before it.
func (s *soakBuckets) take(k int) *soakBucket {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.open[k]
	if b == nil {
		b = &soakBucket{produce: newHistogram(), cycle: newHistogram()}
	}
	for i := range s.open {
		if i <= k {
			delete(s.open, i)
		}
	}
	s.taken = max(s.taken, k+1)
	return b
}

// lateCount returns how many measurements arrived after their bucket was
// taken.
func (s *soakBuckets) lateCount() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.late
}

// soakRow is one interval of the soak report. Unknown figures are -1.
type soakRow struct {
	// Interval numbers the interval from 1.
	Interval int
	// EndSeconds is the interval's end in seconds from the soak's start.
	EndSeconds float64
	// Seconds is the interval's length.
	Seconds float64
	// RSSKB is the server's resident set size (VmRSS) at the interval's
	// end, in KiB.
	RSSKB int64
	// Goroutines is the server's goroutine count at the interval's end.
	Goroutines int64
	// OpenFiles is the server's open file descriptors at the interval's
	// end.
	OpenFiles int64
	// Produced, Completed, Retried, Dead and Redriven count the items
	// produced, completed, requeued by a counted retry, dead-lettered and
	// redriven in the interval; Errors the failed requests.
	Produced, Completed, Retried, Dead, Redriven, Errors int64
	// Queued and DeadQueued are the depths of the source queue and of the
	// dead-letter queue at the interval's end.
	Queued, DeadQueued int64
	// ProduceP99 and CycleP99 are the p99 latencies of produce and
	// lease+complete in the interval, in milliseconds (0: none).
	ProduceP99, CycleP99 float64
}

// Moved returns the items moved in the interval: completed, requeued,
// dead-lettered and redriven.
func (r soakRow) Moved() int64 { return r.Completed + r.Retried + r.Dead + r.Redriven }

// flatness is how the soak judges whether the server's resources stayed
// flat. It compares peaks, not single samples, because the server's RSS is
// a sawtooth: Pebble's memtables (64 MiB each) fill and are flushed.
type flatness struct {
	// WarmupIntervals is how many intervals the warm-up lasts; their
	// samples are not judged.
	WarmupIntervals int
	// Window is how many samples the baseline (the first Window samples
	// after the warm-up) and the end (the last Window samples) each take
	// the peak of; fewer when the run has fewer than 2*Window samples
	// after the warm-up, at least 1.
	Window int
	// RSSTolerance is the largest relative change of the peak RSS, both
	// ways, counted as flat (0.2: ±20%).
	RSSTolerance float64
	// GoroutineTolerance is the largest relative change of the peak
	// goroutine count, both ways, counted as flat (0.1: ±10%); changes of
	// at most GoroutineSlack goroutines are flat too.
	GoroutineTolerance float64
	// GoroutineSlack is the absolute change of goroutines always counted
	// as flat.
	GoroutineSlack int64
}

// soakVerdict is the outcome of judge.
type soakVerdict struct {
	// Flat reports whether RSS and goroutines stayed within tolerance.
	Flat bool
	// Line explains the verdict in one line of text.
	Line string
}

// judge compares the peaks of RSS and goroutines in the baseline window
// (the first f.Window samples after the warm-up) with those in the end
// window (the last f.Window samples); see flatness. It is not flat when
// fewer than two samples follow the warm-up or a figure was not measured
// in a window.
func judge(rows []soakRow, f flatness) soakVerdict {
	after := len(rows) - f.WarmupIntervals
	win := min(max(f.Window, 1), after/2)
	if win < 1 {
		return soakVerdict{Line: fmt.Sprintf("Verdict: INCONCLUSIVE: %d interval(s) measured, the warm-up is %d; need at least two more",
			len(rows), f.WarmupIntervals)}
	}
	base, end := rows[f.WarmupIntervals:f.WarmupIntervals+win], rows[len(rows)-win:]
	peak := func(rs []soakRow, fig func(soakRow) int64) int64 {
		p := fig(rs[0])
		for _, r := range rs {
			if v := fig(r); v < 0 || p < 0 {
				p = -1 // not measured
			} else {
				p = max(p, v)
			}
		}
		return p
	}
	rss := func(r soakRow) int64 { return r.RSSKB }
	gor := func(r soakRow) int64 { return r.Goroutines }
	var parts []string
	flat := true
	if b, e := peak(base, rss), peak(end, rss); b <= 0 || e <= 0 {
		flat = false
		parts = append(parts, "RSS not measured")
	} else {
		change := float64(e-b) / float64(b)
		ok := change >= -f.RSSTolerance && change <= f.RSSTolerance
		flat = flat && ok
		parts = append(parts, fmt.Sprintf("RSS %s → %s (%+.1f%%, tolerance ±%.0f%%)%s",
			mib(b), mib(e), 100*change, 100*f.RSSTolerance, okText(ok)))
	}
	if b, e := peak(base, gor), peak(end, gor); b < 0 || e < 0 {
		flat = false
		parts = append(parts, "goroutines not measured")
	} else {
		diff := e - b
		allowed := max(f.GoroutineSlack, int64(f.GoroutineTolerance*float64(b)))
		ok := diff >= -allowed && diff <= allowed
		flat = flat && ok
		parts = append(parts, fmt.Sprintf("goroutines %d → %d (%+d, tolerance ±%.0f%% or ±%d)%s",
			b, e, diff, 100*f.GoroutineTolerance, f.GoroutineSlack, okText(ok)))
	}
	word := "FLAT"
	if !flat {
		word = "NOT FLAT"
	}
	return soakVerdict{Flat: flat, Line: fmt.Sprintf("Verdict: %s: peak of intervals %s (after the warm-up) → peak of intervals %s (the end): %s",
		word, intervalRange(base), intervalRange(end), strings.Join(parts, "; "))}
}

// intervalRange names the intervals of rs: "3" or "3-5".
func intervalRange(rs []soakRow) string {
	if len(rs) == 1 {
		return strconv.Itoa(rs[0].Interval)
	}
	return fmt.Sprintf("%d-%d", rs[0].Interval, rs[len(rs)-1].Interval)
}

// okText marks a figure out of tolerance.
func okText(ok bool) string {
	if ok {
		return ""
	}
	return " OUT OF TOLERANCE"
}

// parseGoroutines returns the goroutine count from a Prometheus text
// exposition (the go_goroutines gauge) or from a pprof goroutine profile
// in text form (/debug/pprof/goroutine?debug=1: "goroutine profile: total
// N").
func parseGoroutines(r io.Reader) (int64, error) {
	v, found, err := parseSample(r, "goroutine profile: total ", "go_goroutines ")
	switch {
	case err != nil:
		return 0, err
	case !found:
		return 0, errors.New("no go_goroutines sample and no goroutine profile total")
	}
	return int64(v), nil
}

// countFDs returns how many file descriptors process pid has open: the
// entries of procRoot/PID/fd.
func countFDs(procRoot string, pid int) (int64, error) {
	ents, err := os.ReadDir(filepath.Join(procRoot, strconv.Itoa(pid), "fd"))
	if err != nil {
		return 0, err
	}
	return int64(len(ents)), nil
}

// soak is the state of one soak run on top of the bench b.
type soak struct {
	b       *bench
	buckets *soakBuckets
	// metrics fetches --metrics-url.
	metrics *http.Client
	pids    []int
	// rows is owned by the sampler goroutine (runSoak reads it after the
	// sampler is done).
	rows []soakRow
}

// runSoak runs the soak workload of cfg, writing the rows to
// cfg.SoakReport and cfg.SoakCSV as they come, and returns the verdict.
func runSoak(ctx context.Context, cfg config, stderr io.Writer) (soakVerdict, error) {
	b, err := newBench(cfg, stderr)
	if err != nil {
		return soakVerdict{}, err
	}
	defer b.c.Close()
	if err := b.setup(ctx); err != nil {
		return soakVerdict{}, err
	}
	if !cfg.Keep {
		defer b.cleanup()
	}
	s := &soak{b: b, metrics: &http.Client{Timeout: 10 * time.Second}, pids: serverPIDs("/proc", cfg, stderr)}
	if len(s.pids) == 0 {
		_, _ = fmt.Fprintf(stderr, "styx-bench: soak: server process not found (use --server-pid): RSS and open files not measured\n")
	}
	b.start = time.Now()
	b.end = b.start.Add(cfg.Duration)
	s.buckets = newSoakBuckets(b.start, cfg.Interval)
	_, _ = fmt.Fprintf(stderr, "styx-bench: soak of %s for %s: %d items/s, batches of 1..%d, %d consumers, redrive every %s, a row every %s\n",
		b.queue, cfg.Duration, cfg.Rate, cfg.Batch, cfg.Clients, cfg.RedriveEvery, cfg.Interval)

	var wg sync.WaitGroup
	wg.Go(func() { s.runProducer(ctx) })
	for i := range cfg.Clients {
		wg.Go(func() { s.runConsumer(ctx, fmt.Sprintf("styx-bench-%s-%d", b.queue, i)) })
	}
	if cfg.RedriveEvery > 0 {
		wg.Go(func() { s.runRedriver(ctx) })
	}
	s.sample(ctx)
	wg.Wait()
	if n := s.buckets.lateCount(); n > 0 {
		_, _ = fmt.Fprintf(stderr, "styx-bench: soak: %d measurement(s) arrived after their interval was reported\n", n)
	}
	v := judge(s.rows, s.flatness())
	if err := s.writeFiles(v); err != nil {
		return v, err
	}
	if ctx.Err() != nil {
		return v, context.Cause(ctx)
	}
	return v, nil
}

// flatness returns the verdict's parameters from the command line.
func (s *soak) flatness() flatness {
	return flatness{
		WarmupIntervals: s.b.cfg.WarmupIntervals, Window: s.b.cfg.VerdictWindow, RSSTolerance: s.b.cfg.RSSTolerance,
		GoroutineTolerance: s.b.cfg.GoroutineTolerance, GoroutineSlack: soakGoroutineSlack,
	}
}

// failAt counts a failed request of kind that ended at t.
func (s *soak) failAt(kind string, t time.Time, err error) {
	s.b.fail(kind, err)
	s.buckets.add(t, func(k *soakBucket) { k.errors++ })
}

// runProducer produces batches of 1..--batch items, paced to --rate
// items/s on average; when it falls more than a second behind it does not
// try to catch up.
func (s *soak) runProducer(ctx context.Context) {
	b := s.b
	items := batchOf(b.cfg.Batch, b.cfg.Payload)
	next := time.Now()
	for b.running(ctx) {
		sleep(ctx, time.Until(next))
		n := 1 + rand.IntN(b.cfg.Batch)
		t0 := time.Now()
		cctx, cancel := context.WithTimeout(ctx, requestTimeout)
		err := b.c.QueueProduce(cctx, &pb.QueueProduceRequest{QueueName: b.queue, RequestTimeout: "10s", Items: items[:n]})
		cancel()
		t1 := time.Now()
		switch {
		case err == nil:
			s.buckets.add(t1, func(k *soakBucket) { recordDuration(k.produce, t1.Sub(t0)); k.produced += int64(n) })
		case ctx.Err() != nil:
			return
		default:
			s.failAt(kindProduce, t1, err)
		}
		next = next.Add(time.Duration(n) * time.Second / time.Duration(b.cfg.Rate))
		if behind := time.Since(next); behind > time.Second {
			next = time.Now()
		}
	}
}

// runConsumer leases batches of 1..--batch items as clientID, fails or
// dead-letters a random few of each (queue.retry) and completes the rest.
func (s *soak) runConsumer(ctx context.Context, clientID string) {
	b := s.b
	for b.running(ctx) {
		t0 := time.Now()
		cctx, cancel := context.WithTimeout(ctx, requestTimeout)
		resp, err := b.c.QueueLease(cctx, &pb.QueueLeaseRequest{
			QueueName: b.queue, BatchSize: int32(1 + rand.IntN(b.cfg.Batch)), ClientId: clientID,
			RequestTimeout: b.cfg.LeaseWait.String(),
		})
		cancel()
		switch {
		case err == nil:
		case styx.IsRetry(err) || ctx.Err() != nil: // nothing to lease, or the end
			continue
		default:
			s.failAt(kindLease, time.Now(), err)
			sleep(ctx, errorBackoff)
			continue
		}
		var done []string
		var failed []*pb.QueueRetryItem
		for _, item := range resp.Items {
			switch p := rand.Float64(); {
			case p < soakDeadFraction:
				failed = append(failed, &pb.QueueRetryItem{Id: item.Id, Dead: true, Error: "styx-bench soak: induced dead letter"})
			case p < soakDeadFraction+soakRetryFraction:
				failed = append(failed, &pb.QueueRetryItem{Id: item.Id, Error: "styx-bench soak: induced failure"})
			default:
				done = append(done, item.Id)
			}
		}
		if len(done) > 0 {
			cctx, cancel := context.WithTimeout(ctx, requestTimeout)
			err := b.c.QueueComplete(cctx, &pb.QueueCompleteRequest{QueueName: b.queue, Partition: resp.Partition, RequestTimeout: "10s", Ids: done})
			cancel()
			t1 := time.Now()
			switch {
			case err == nil:
				s.buckets.add(t1, func(k *soakBucket) { recordDuration(k.cycle, t1.Sub(t0)); k.completed += int64(len(done)) })
			case ctx.Err() == nil:
				s.failAt(kindComplete, t1, err)
			}
		}
		if len(failed) > 0 {
			cctx, cancel := context.WithTimeout(ctx, requestTimeout)
			out, err := b.c.QueueRetry(cctx, &pb.QueueRetryRequest{QueueName: b.queue, Partition: resp.Partition, Items: failed})
			cancel()
			t1 := time.Now()
			switch {
			case err == nil:
				var retried, dead int64
				for _, o := range out.GetOutcomes() {
					switch o.Outcome {
					case "dead_lettered", "dropped":
						dead++
					default:
						retried++
					}
				}
				s.buckets.add(t1, func(k *soakBucket) { k.retried += retried; k.dead += dead })
			case ctx.Err() == nil:
				s.failAt(kindRetry, t1, err)
			}
		}
	}
}

// runRedriver redrives the whole dead-letter queue back to the source
// queue every --redrive-every and waits for each task to finish.
func (s *soak) runRedriver(ctx context.Context) {
	b := s.b
	for next := b.start.Add(b.cfg.RedriveEvery); next.Before(b.end); next = next.Add(b.cfg.RedriveEvery) {
		sleep(ctx, time.Until(next))
		if ctx.Err() != nil {
			return
		}
		if err := s.redrive(ctx); err != nil && ctx.Err() == nil {
			s.failAt("redrive", time.Now(), err)
		}
	}
}

// redrive runs one dead.redrive of every dead item (no redrive limit) and
// counts the items it moved when it ends.
func (s *soak) redrive(ctx context.Context) error {
	b := s.b
	cctx, cancel := context.WithTimeout(ctx, redriveWait)
	defer cancel()
	task, err := b.c.DeadRedrive(cctx, &pb.DeadRedriveRequest{QueueName: b.dlq, All: true, MaxRedriveCount: -1})
	if err != nil {
		if styx.ErrorCode(err) == styx.CodeConflict {
			return nil // the previous one still runs
		}
		return err
	}
	for task.Status == "pending" || task.Status == "running" {
		sleep(cctx, redrivePoll)
		if task, err = b.c.RedrivesGet(cctx, &pb.RedriveTaskRequest{TaskId: task.TaskId}); err != nil {
			return err
		}
	}
	moved := task.Moved
	s.buckets.add(time.Now(), func(k *soakBucket) { k.redriven += moved })
	if task.Status == "failed" {
		return fmt.Errorf("redrive task %s failed: %s", task.TaskId, task.FailureReason)
	}
	return nil
}

// sample ends every interval with a row: the server's figures at its end,
// the queues' depths and the interval's bucket. It returns when the soak's
// window is over or ctx ends.
func (s *soak) sample(ctx context.Context) {
	b := s.b
	from := b.start
	for k := 0; from.Before(b.end); k++ {
		to := b.start.Add(time.Duration(k+1) * b.cfg.Interval)
		if to.After(b.end) {
			to = b.end
		}
		sleep(ctx, time.Until(to))
		if ctx.Err() != nil {
			return
		}
		row := s.measure(ctx)
		bk := s.buckets.take(k)
		row.Interval, row.EndSeconds, row.Seconds = k+1, to.Sub(b.start).Seconds(), to.Sub(from).Seconds()
		row.Produced, row.Completed, row.Retried, row.Dead, row.Redriven, row.Errors =
			bk.produced, bk.completed, bk.retried, bk.dead, bk.redriven, bk.errors
		row.ProduceP99 = summarize(bk.produce).P99
		row.CycleP99 = summarize(bk.cycle).P99
		s.rows = append(s.rows, row)
		_, _ = fmt.Fprintf(b.stderr, "styx-bench: soak interval %d [%.0fs]: RSS %s, %d goroutines, %d open files, %d items moved, p99 produce %.1f ms, lease+complete %.1f ms\n",
			row.Interval, row.EndSeconds, mib(row.RSSKB), row.Goroutines, row.OpenFiles, row.Moved(), row.ProduceP99, row.CycleP99)
		if err := s.writeFiles(soakVerdict{}); err != nil {
			_, _ = fmt.Fprintf(b.stderr, "styx-bench: soak: %v\n", err)
		}
		from = to
	}
}

// measure reads the server's RSS, open files and goroutines and the
// queues' depths; what cannot be read is -1 (and said on stderr).
func (s *soak) measure(ctx context.Context) soakRow {
	b := s.b
	row := soakRow{RSSKB: -1, OpenFiles: -1, Goroutines: -1, Queued: -1, DeadQueued: -1}
	warn := func(what string, err error) {
		_, _ = fmt.Fprintf(b.stderr, "styx-bench: soak: %s: %v\n", what, err)
	}
	if len(s.pids) > 0 {
		if ps, err := readProcs("/proc", s.pids); err != nil {
			warn("RSS", err)
		} else {
			row.RSSKB = ps.RSSKB
		}
		var fds int64
		for _, pid := range s.pids {
			n, err := countFDs("/proc", pid)
			if err != nil {
				warn("open files", err)
				fds = -1
				break
			}
			fds += n
		}
		row.OpenFiles = fds
	}
	if n, err := s.goroutines(ctx); err != nil {
		warn("goroutines", err)
	} else {
		row.Goroutines = n
	}
	cctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	var err error
	if row.Queued, err = b.queueTotal(cctx, b.queue); err != nil {
		warn("depth", err)
		row.Queued = -1
	}
	if row.DeadQueued, err = b.queueTotal(cctx, b.dlq); err != nil {
		warn("depth", err)
		row.DeadQueued = -1
	}
	return row
}

// goroutines fetches --metrics-url and returns the server's goroutines.
func (s *soak) goroutines(ctx context.Context) (n int64, err error) {
	err = fetchMetrics(ctx, s.metrics, s.b.cfg.MetricsURL, s.b.cfg.APIKey, func(r io.Reader) error {
		n, err = parseGoroutines(r)
		return err
	})
	return n, err
}

// writeFiles rewrites --soak-report and --soak-csv with the rows so far
// and v (none while v.Line is empty).
func (s *soak) writeFiles(v soakVerdict) error {
	write := func(path string, fn func(io.Writer) error) error {
		if path == "" {
			return nil
		}
		tmp := path + ".tmp"
		f, err := os.Create(tmp)
		if err != nil {
			return err
		}
		if err := fn(f); err != nil {
			_ = f.Close()
			return fmt.Errorf("write %s: %w", tmp, err)
		}
		if err := f.Close(); err != nil {
			return err
		}
		return os.Rename(tmp, path)
	}
	if err := write(s.b.cfg.SoakReport, func(w io.Writer) error { return writeSoakMarkdown(w, s.b.cfg, s.flatness(), s.rows, v) }); err != nil {
		return err
	}
	return write(s.b.cfg.SoakCSV, func(w io.Writer) error { return writeSoakCSV(w, s.rows) })
}

// soakColumns are the CSV header, one name per soakRow figure.
var soakColumns = []string{
	"interval", "end_s", "seconds", "rss_kb", "goroutines", "open_files", "moved", "produced", "completed",
	"retried", "dead", "redriven", "errors", "queued", "dead_queued", "produce_p99_ms", "lease_complete_p99_ms",
}

// writeSoakCSV writes rows as CSV with a header (soakColumns).
func writeSoakCSV(w io.Writer, rows []soakRow) error {
	cw := csv.NewWriter(w)
	_ = cw.Write(soakColumns)
	i := func(n int64) string { return strconv.FormatInt(n, 10) }
	f := func(x float64) string { return strconv.FormatFloat(x, 'f', 3, 64) }
	for _, r := range rows {
		_ = cw.Write([]string{
			strconv.Itoa(r.Interval), f(r.EndSeconds), f(r.Seconds), i(r.RSSKB), i(r.Goroutines), i(r.OpenFiles), i(r.Moved()),
			i(r.Produced), i(r.Completed), i(r.Retried), i(r.Dead), i(r.Redriven), i(r.Errors), i(r.Queued), i(r.DeadQueued),
			f(r.ProduceP99), f(r.CycleP99),
		})
	}
	cw.Flush()
	return cw.Error()
}

// writeSoakMarkdown writes the soak report: what ran, a table of rows and
// the verdict line v (or, while v.Line is empty, a note that the soak is
// still running).
func writeSoakMarkdown(w io.Writer, cfg config, f flatness, rows []soakRow, v soakVerdict) error {
	var sb strings.Builder
	sb.WriteString("# Styx soak\n\n")
	if cfg.Label != "" {
		sb.WriteString(cfg.Label + "\n\n")
	}
	fmt.Fprintf(&sb, "%s of a mixed load on one queue (1 partition) and its dead-letter queue: one producer at %d items/s in batches of 1..%d items "+
		"(%d-byte random payloads); %d consumers lease batches of 1..%d, fail %.0f%% of the items with a counted attempt (max_attempts %d), "+
		"dead-letter %.0f%% at once and complete the rest; ",
		cfg.Duration, cfg.Rate, cfg.Batch, cfg.Payload, cfg.Clients, cfg.Batch, 100*soakRetryFraction, soakMaxAttempts, 100*soakDeadFraction)
	if cfg.RedriveEvery > 0 {
		fmt.Fprintf(&sb, "every %s a dead.redrive moves the dead-letter queue back.\n\n", cfg.RedriveEvery)
	} else {
		sb.WriteString("no redrives.\n\n")
	}
	fmt.Fprintf(&sb, "A row every %s: RSS (VmRSS), goroutines (%s) and open files (/proc/PID/fd) of the server and the queue depths at the interval's end; "+
		"items and p99 latencies (ms) of the requests that ended in the interval. Moved = completed + retried + dead-lettered + redriven. "+
		"Lease+complete runs from the start of a lease (its long-poll wait included) to the end of the complete.\n\n",
		cfg.Interval, cfg.MetricsURL)
	sb.WriteString("| # | end | RSS | goroutines | open files | moved | produced | completed | retried | dead | redriven | errors | queued | in DLQ | produce p99 | lease+complete p99 |\n")
	sb.WriteString("|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	n := func(x int64) string {
		if x < 0 {
			return "?"
		}
		return strconv.FormatInt(x, 10)
	}
	for _, r := range rows {
		rss := "?"
		if r.RSSKB >= 0 {
			rss = mib(r.RSSKB)
		}
		fmt.Fprintf(&sb, "| %d | %s | %s | %s | %s | %d | %d | %d | %d | %d | %d | %d | %s | %s | %.1f | %.1f |\n",
			r.Interval, (time.Duration(r.EndSeconds) * time.Second).String(), rss, n(r.Goroutines), n(r.OpenFiles), r.Moved(),
			r.Produced, r.Completed, r.Retried, r.Dead, r.Redriven, r.Errors, n(r.Queued), n(r.DeadQueued), r.ProduceP99, r.CycleP99)
	}
	sb.WriteString("\n")
	if v.Line == "" {
		sb.WriteString("(running)\n")
	} else {
		fmt.Fprintf(&sb, "Warm-up: the first %d interval(s), not judged. Flat: the peaks of RSS and goroutines in the last %d interval(s) are within "+
			"±%.0f%% and ±%.0f%% (or ±%d goroutines) of their peaks in the first %d interval(s) after the warm-up (fewer intervals when the run is short); "+
			"a change either way fails. Peaks, because RSS is a sawtooth as Pebble's memtables fill and flush.\n\n%s\n",
			f.WarmupIntervals, f.Window, 100*f.RSSTolerance, 100*f.GoroutineTolerance, f.GoroutineSlack, f.Window, v.Line)
	}
	_, err := io.WriteString(w, sb.String())
	return err
}

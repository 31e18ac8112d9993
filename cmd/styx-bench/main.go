// Command styx-bench is a load generator for Styx and any other server of
// Querator's v1 protocol (DUH-RPC over HTTP, protobuf bodies). It creates a
// queue, drives it with --clients closed-loop goroutines (the latency
// workload adds an open-loop producer; the worker workload runs the worker
// library instead) for a warm-up and then a measured --duration, and
// reports items per second, per-request latency percentiles (HDR
// histograms), errors, the server's CPU time (also per 1,000 items) and RSS
// when its process can be read from /proc, and the fsyncs of the server's
// write-ahead log in the window, with the items each carried, when its
// /metrics has styx_storage_syncs_total (Styx on Pebble; 0 on memory and
// PostgreSQL).
//
// --endpoint may list several base URLs, comma-separated, to load several
// nodes sharing one database (--storage postgres): client i (and sender i
// of the latency workload) sends its requests to endpoint i mod n, while
// the queues are created, inspected and deleted through the first. Server
// CPU time and RSS are then summed over the local processes listening on
// the endpoints' ports (or over the --server-pid list).
//
// Workloads:
//
//	produce  every client produces batches of --batch items
//	cycle    every client produces a batch, leases up to a batch, completes it
//	drain    --prefill items are produced, then clients lease+complete until
//	         the queue is empty; measured from the first lease to the last
//	         completion (no warm-up)
//	dead     half the clients produce, half lease and fail every item, which
//	         goes to the dead-letter queue <queue>-dead (max_attempts 1);
//	         items/s counts arrivals in the dead-letter queue (queue.stats)
//	latency  an open-loop producer sends --rate items/s stamped with their
//	         send time; clients lease+complete and record produce→lease
//	         latency
//	worker   --prefill items are produced as for drain, then one
//	         worker.Worker (package worker; Concurrency --clients, a
//	         handler that returns nil) consumes the queue through the first
//	         endpoint; measured from its start until the server has
//	         acknowledged the completion of as many items as were prefilled
//	         (then its context is cancelled and its shutdown awaited). The
//	         worker sends its own requests, so request latencies and empty
//	         leases are not reported, and --batch does not apply (it leases
//	         as many items as it has free handlers)
//	soak     a moderate mixed load for --duration (default 30m there):
//	         one producer at --rate items/s (default 300 there) in batches
//	         of 1..--batch, --clients consumers that complete most items,
//	         fail some with a counted attempt and dead-letter a few into
//	         <queue>-dead, and a dead.redrive of it every --redrive-every;
//	         every --interval (default 1m there) a row of the server's RSS,
//	         goroutines, open files, items moved and p99 latencies, written
//	         to --soak-report (Markdown) and --soak-csv; it ends with a
//	         verdict on whether the peaks of RSS and goroutines stayed
//	         flat after the warm-up, and exits 1 when they did not (see
//	         soak.go)
//
//	fair     a hot group's backlog of --hot items is produced, then 100
//	         small groups of 10 items each; clients lease and complete until
//	         the queue is empty; the report gives when each group's last
//	         item completed (the hot group's, and the small groups' p50, p99
//	         and max), from the first lease: on a queue that is not ordered,
//	         groups are leased round-robin, so the small groups finish early.
//	         --fair-groups=false produces the same items without groups
//	         (the FIFO baseline: the small groups wait behind the hot one)
//
// --groups N gives every produced item one of N groups in turn, and
// --ordered creates the queue ordered (issue 37): e.g. cycle with --groups
// 1000 --ordered against cycle without, at the same batch.
//
// --worker-consumer makes cycle River's shape (bench/peers' River cycle):
// the clients only produce, each waiting while more than --backlog items per
// client are produced and not yet completed, and one worker.Worker of
// --worker-concurrency handlers (a handler that returns nil) consumes;
// items whose complete the server acknowledged inside the window count.
//
// --complete-with-lease makes cycle complete each batch with its next lease
// (queue.lease's complete_ids, issue 52): two calls per batch instead of
// three; it turns the worker workload's worker.Config.CompleteWithLease on
// (off without it, as the worker was before). --lease-ahead (with
// --complete-with-lease) keeps each cycle client's lease waiting while it
// produces, as a subscribed consumer waits for a broker's push: the lease,
// carrying the previous batch's completes and wait_after_complete, is sent
// before the produce, and the client goes on once both are answered.
//
// --count N makes the produce workload stop after exactly N items (for
// filling a queue to a known depth). --interval D also reports the items
// per second of every D of the measured window (printed on stderr as it
// goes and listed under "intervals" in the JSON report), to see whether a
// long run slows down.
//
// Examples:
//
//	styx-bench --workload cycle --clients 4 --batch 100 --duration 10s
//	styx-bench --workload cycle --batch 100 --duration 10m --interval 1m --json
//	styx-bench --workload produce --batch 1000 --count 1000000 --warmup 0 --duration 1h --queue q --keep
//	styx-bench --workload latency --rate 1000 --json
//	styx-bench --workload worker --clients 16 --prefill 20000
//	styx-bench --workload soak --batch 50 --duration 30m --server-pid 42 --soak-report soak.md
//	styx-bench --endpoint http://127.0.0.1:2319,http://127.0.0.1:2320 --workload cycle --batch 100
//	styx-bench --markdown results.jsonl   # JSON lines → markdown table
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"github.com/styxq/styx"
	"github.com/styxq/styx/worker"
)

// Workload names.
const (
	workloadProduce = "produce"
	workloadCycle   = "cycle"
	workloadDrain   = "drain"
	workloadDead    = "dead"
	workloadLatency = "latency"
	workloadWorker  = "worker"
	workloadSoak    = "soak"
	workloadFair    = "fair"
)

// config is the command line.
type config struct {
	Endpoint   string   // --endpoint as given
	APIKey     string   // --api-key: sent as "Authorization: Bearer <key>"
	Endpoints  []string // Endpoint split at commas; the first is used for setup
	Workload   string
	Clients    int
	Queue      string
	QueueGiven bool // --queue was set: an existing queue may be reused
	Partitions int
	Batch      int
	Payload    int
	Duration   time.Duration
	Warmup     time.Duration
	Rate       int
	Prefill    int
	Count      int64         // produce: stop after this many items (0: no limit)
	Interval   time.Duration // report items/s per interval (0: off)
	LeaseWait  time.Duration
	ServerPIDs []int // --server-pid (empty: look up the endpoints' listeners)
	JSON       bool
	Keep       bool
	Label      string
	Markdown   string
	Summary    string  // --summary FILE: sync on/off/memory side by side
	FsyncMS    float64 // --fsync-ms: t_fsync for --summary's limit
	Compare    string  // --compare FILE: old and new binaries side by side
	FsyncProbe string  // --fsync-probe DIR: measure t_fsync and exit
	// FsyncProbeFiles is --fsync-probe-files: how many files the probe
	// syncs side by side (default 1).
	FsyncProbeFiles int
	// FsyncProbeOverwrite is --fsync-probe-overwrite: the probe overwrites
	// a file written and synced whole first (a recycled log file).
	FsyncProbeOverwrite bool
	// ProfileSummary is --profile-summary FILE: summarize a server CPU
	// profile and exit; ProfileRun, --profile-run, the JSON report of the
	// run it was taken in (for the CPU per item).
	ProfileSummary, ProfileRun string
	// Groups gives produced items one of this many groups, in turn (0:
	// none); Ordered creates the queue ordered (issue 37, docs/groups.md).
	Groups  int
	Ordered bool
	// Cluster is the PostgreSQL cluster to create the queue on, on a
	// server over several (queues.create's cluster, ADR 0023); "" lets
	// the server choose.
	Cluster string
	// CompleteWithLease makes the cycle workload complete each batch with
	// its next lease (queue.lease's complete_ids: one call instead of two;
	// issue 52), and turns the worker workload's
	// worker.Config.CompleteWithLease on (off without it).
	CompleteWithLease bool
	// LeaseAhead (with CompleteWithLease) makes each cycle client send its
	// lease, which completes the previous batch and then waits
	// (wait_after_complete), before its produce, and go on once both are
	// answered: a produce then meets a waiting lease, and one write stores
	// and leases its items.
	LeaseAhead bool
	// WorkerConsumer makes the cycle workload River's shape (bench/peers'
	// River cycle): the clients only produce, each waiting while the items
	// produced and not yet completed would pass Backlog per client, and one
	// worker.Worker of WorkerConcurrency handlers (CompleteWithLease as
	// above) consumes; completed items are counted.
	WorkerConsumer    bool
	WorkerConcurrency int
	// Backlog is --backlog: items per client produced and not yet
	// completed before the client waits (0: 5 batches, at least 250, as
	// bench/peers' --river-backlog).
	Backlog int
	// Hot is the fair workload's backlog of its hot group; FairGroups says
	// whether its items carry their group (false: the FIFO baseline).
	Hot        int
	FairGroups bool

	// The soak workload's (soak.go).
	RedriveEvery       time.Duration // --redrive-every (0: no redrives)
	WarmupIntervals    int           // --warmup-intervals
	VerdictWindow      int           // --verdict-window
	RSSTolerance       float64       // --rss-tolerance, a fraction
	GoroutineTolerance float64       // --goroutine-tolerance, a fraction
	MetricsURL         string        // --metrics-url (default <endpoint>/metrics)
	SoakReport         string        // --soak-report FILE (Markdown; empty: none)
	SoakCSV            string        // --soak-csv FILE (empty: none)
}

// errUsage marks an invalid command line (exit status 2).
var errUsage = errors.New("usage")

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// run executes the command line args and returns the exit status: 0 on
// success, 1 when the run failed, 2 for an invalid command line.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg, err := parseFlags(args, stderr)
	if errors.Is(err, pflag.ErrHelp) {
		return 0
	}
	if err != nil {
		_, _ = fmt.Fprintf(stderr, "styx-bench: %v\n", err)
		return 2
	}
	if cfg.Summary != "" || cfg.Compare != "" || cfg.FsyncProbe != "" || cfg.ProfileSummary != "" {
		if err := runOffline(cfg, stdout); err != nil {
			_, _ = fmt.Fprintf(stderr, "styx-bench: %v\n", err)
			return 1
		}
		return 0
	}
	if cfg.Markdown != "" {
		if err := renderMarkdownFile(stdout, cfg.Markdown); err != nil {
			_, _ = fmt.Fprintf(stderr, "styx-bench: %v\n", err)
			return 1
		}
		return 0
	}
	if cfg.Workload == workloadSoak {
		v, err := runSoak(ctx, cfg, stderr)
		if v.Line != "" {
			_, _ = fmt.Fprintln(stdout, v.Line)
		}
		if err != nil {
			_, _ = fmt.Fprintf(stderr, "styx-bench: %v\n", err)
			return 1
		}
		if !v.Flat {
			return 1
		}
		return 0
	}
	rep, err := runBench(ctx, cfg, stderr)
	if err != nil {
		_, _ = fmt.Fprintf(stderr, "styx-bench: %v\n", err)
		return 1
	}
	if cfg.JSON {
		err = writeJSON(stdout, rep)
	} else {
		err = writeTable(stdout, rep)
	}
	if err != nil {
		_, _ = fmt.Fprintf(stderr, "styx-bench: %v\n", err)
		return 1
	}
	return 0
}

// parseFlags parses and validates the command line.
func parseFlags(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := pflag.NewFlagSet("styx-bench", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.Endpoint, "endpoint", styx.DefaultEndpoint, "server base URL, or a comma-separated list of them: client i uses URL i mod n, queue setup and deletion the first")
	fs.StringVar(&c.APIKey, "api-key", os.Getenv("STYX_API_KEY"), "API key for a server run with --auth: an admin key, since the run creates and deletes its queue (env STYX_API_KEY)")
	fs.StringVar(&c.Workload, "workload", workloadCycle, "produce, cycle, drain, dead, latency, worker, soak or fair")
	fs.IntVar(&c.Clients, "clients", 4, "closed-loop client goroutines, all on the one queue (worker: the worker's Concurrency)")
	fs.StringVar(&c.Queue, "queue", "", "queue name (default bench-<workload>-<random>; created and deleted by the run)")
	fs.IntVar(&c.Partitions, "partitions", 1, "partitions of the created queue")
	fs.IntVar(&c.Batch, "batch", 1, "items per produce request and lease batch size (1..1000)")
	fs.IntVar(&c.Payload, "payload", 1024, "payload bytes per item (random)")
	fs.DurationVar(&c.Duration, "duration", 10*time.Second, "measured time (drain, worker: at most)")
	fs.DurationVar(&c.Warmup, "warmup", 2*time.Second, "load before measuring (not used by drain and worker)")
	fs.IntVar(&c.Rate, "rate", 1000, "latency workload: open-loop produce rate in items/s")
	fs.IntVar(&c.Prefill, "prefill", 100000, "drain and worker workloads: items produced before measuring")
	fs.Int64Var(&c.Count, "count", 0, "produce workload: stop after producing exactly this many items, warm-up included (0: no limit; --duration still bounds the run)")
	fs.DurationVar(&c.Interval, "interval", 0, "also report items/s for every interval of this length of the measured window (stderr and JSON \"intervals\"; 0: off)")
	fs.DurationVar(&c.LeaseWait, "lease-wait", time.Second, "lease request_timeout (how long a lease long-polls)")
	fs.IntSliceVar(&c.ServerPIDs, "server-pid", nil, "server process id(s) for CPU/RSS, comma-separated; several are summed (default or 0: the local processes listening on the endpoints' ports, if readable)")
	fs.BoolVar(&c.JSON, "json", false, "print the report as one JSON object")
	fs.BoolVar(&c.Keep, "keep", false, "do not delete the queue(s) at the end")
	fs.StringVar(&c.Label, "label", "", "free text copied into the report (e.g. the backend)")
	fs.StringVar(&c.Markdown, "markdown", "", "only render the JSON-lines report file `FILE` as a markdown table and exit")
	fs.StringVar(&c.Summary, "summary", "", "only render the JSON-lines file `FILE` of runs labelled pebble, pebble-nosync and memory side by side, with the sync on/off ratios and the fsync limit, and exit")
	fs.Float64Var(&c.FsyncMS, "fsync-ms", 0, "t_fsync in milliseconds for --summary's limit (see --fsync-probe)")
	fs.StringVar(&c.ProfileSummary, "profile-summary", "", "only print the CPU profile `FILE` (pprof format) as Markdown under --label: its cumulative shares of the server's parts and its top 10 functions by own CPU, and exit")
	fs.StringVar(&c.ProfileRun, "profile-run", "", "with --profile-summary: the JSON report `FILE` of the run the profile was taken in, for the sampled CPU per item")
	fs.StringVar(&c.Compare, "compare", "", "only render the JSON-lines file `FILE` of runs labelled \"old MODE\" and \"new MODE\" as an A/B table, and exit")
	fs.StringVar(&c.FsyncProbe, "fsync-probe", "", "only measure t_fsync: 500 writes of 4 KiB, each followed by fdatasync, to a file in directory `DIR`; print JSON and exit")
	fs.BoolVar(&c.FsyncProbeOverwrite, "fsync-probe-overwrite", false, "with --fsync-probe: overwrite a file written and synced whole first, as Pebble overwrites a recycled log file, instead of appending")
	fs.IntVar(&c.FsyncProbeFiles, "fsync-probe-files", 1, "with --fsync-probe: sync this many files side by side, 500 writes each (does the disk complete several logs' fsyncs at once?)")
	fs.DurationVar(&c.RedriveEvery, "redrive-every", 2*time.Minute, "soak: redrive the dead-letter queue this often (0: never)")
	fs.IntVar(&c.WarmupIntervals, "warmup-intervals", 2, "soak: intervals of warm-up, not judged by the verdict")
	fs.IntVar(&c.VerdictWindow, "verdict-window", 3, "soak: the verdict compares the peaks of this many intervals right after the warm-up and at the end")
	fs.Float64Var(&c.RSSTolerance, "rss-tolerance", 0.20, "soak: largest relative change of the server's RSS after the warm-up that counts as flat (0.2: ±20%)")
	fs.Float64Var(&c.GoroutineTolerance, "goroutine-tolerance", 0.10, fmt.Sprintf("soak: largest relative change of the server's goroutines after the warm-up that counts as flat (a change of at most %d always does)", soakGoroutineSlack))
	fs.StringVar(&c.MetricsURL, "metrics-url", "", "soak: where to read the server's goroutines: Prometheus text with go_goroutines, or a pprof /debug/pprof/goroutine?debug=1 (default <endpoint>/metrics)")
	fs.StringVar(&c.SoakReport, "soak-report", "", "soak: write the Markdown report to `FILE`, rewritten after every interval")
	fs.IntVar(&c.Groups, "groups", 0, "give produced items one of N groups (g0..gN-1), in turn (0: no groups)")
	fs.StringVar(&c.Cluster, "cluster", "", "the PostgreSQL cluster to create the queue on, on a server over several (empty: the server chooses)")
	fs.BoolVar(&c.Ordered, "ordered", false, "create the queue ordered: a group's items are leased in order, one lease of a group at a time")
	fs.BoolVar(&c.CompleteWithLease, "complete-with-lease", false, "cycle and worker: complete each batch with the next lease (queue.lease complete_ids) instead of a queue.complete call")
	fs.BoolVar(&c.LeaseAhead, "lease-ahead", false, "cycle, with --complete-with-lease: send each lease (completing the previous batch, then waiting: wait_after_complete) before the produce, so that the produce meets a waiting lease")
	fs.BoolVar(&c.WorkerConsumer, "worker-consumer", false, "cycle: River's shape: the clients only produce (at most --backlog items each produced and not yet completed) while one worker.Worker of --worker-concurrency handlers consumes")
	fs.IntVar(&c.WorkerConcurrency, "worker-concurrency", 100, "cycle with --worker-consumer: the worker's Concurrency (1..1000)")
	fs.IntVar(&c.Backlog, "backlog", 0, "cycle with --worker-consumer: items per client produced and not yet completed before the client waits (0: 5 batches, at least 250)")
	fs.IntVar(&c.Hot, "hot", 20000, "fair workload: the hot group's backlog, produced before the 100 small groups' 10 items each")
	fs.BoolVar(&c.FairGroups, "fair-groups", true, "fair workload: the items carry their group (false: the same items without groups, the FIFO baseline)")
	fs.StringVar(&c.SoakCSV, "soak-csv", "", "soak: write the rows as CSV to `FILE`, rewritten after every interval")
	fs.Usage = func() {
		_, _ = fmt.Fprintf(stderr, "usage: styx-bench [flags]\n\nWorkloads: produce, cycle, drain, dead, latency, worker, soak (see `go doc ./cmd/styx-bench`).\n\n%s", fs.FlagUsages())
	}
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("%w: unexpected arguments %q", errUsage, fs.Args())
	}
	if c.Markdown != "" || c.Summary != "" || c.Compare != "" || c.FsyncProbe != "" || c.ProfileSummary != "" {
		return c, nil
	}
	if c.Workload == workloadSoak {
		if !fs.Changed("rate") {
			c.Rate = soakDefaultRate
		}
		if !fs.Changed("duration") {
			c.Duration = 30 * time.Minute
		}
		if !fs.Changed("interval") {
			c.Interval = time.Minute
		}
		c.Warmup = 0 // the warm-up is --warmup-intervals
	}
	c.QueueGiven = c.Queue != ""
	if !c.QueueGiven {
		c.Queue = fmt.Sprintf("bench-%s-%08x", c.Workload, rand.Uint32())
	}
	return c, validate(&c)
}

// validate checks c and applies the workload-specific adjustments.
func validate(c *config) error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{errUsage}, a...)...)
	}
	switch c.Workload {
	case workloadProduce, workloadCycle, workloadDrain, workloadDead, workloadLatency, workloadWorker, workloadSoak, workloadFair:
	default:
		return bad("--workload %q is not one of produce, cycle, drain, dead, latency, worker, soak", c.Workload)
	}
	endpoints, err := parseEndpoints(c.Endpoint)
	if err != nil {
		return bad("--endpoint %v", err)
	}
	c.Endpoints = endpoints
	c.ServerPIDs = slices.DeleteFunc(c.ServerPIDs, func(pid int) bool { return pid == 0 }) // 0: look up
	switch {
	case slices.ContainsFunc(c.ServerPIDs, func(pid int) bool { return pid < 0 }):
		return bad("--server-pid must not be negative")
	case c.Clients < 1:
		return bad("--clients must be at least 1")
	case c.Partitions < 1:
		return bad("--partitions must be at least 1")
	case c.Batch < 1 || c.Batch > 1000:
		return bad("--batch must be in 1..1000")
	case c.Payload < 0:
		return bad("--payload must not be negative")
	case c.Duration <= 0:
		return bad("--duration must be positive")
	case c.Warmup < 0:
		return bad("--warmup must not be negative")
	case c.LeaseWait <= 10*time.Millisecond || c.LeaseWait > 15*time.Minute:
		return bad("--lease-wait must be above 10ms and at most 15m")
	case c.Workload == workloadLatency && c.Rate < 1:
		return bad("--rate must be at least 1 item/s")
	case (c.Workload == workloadDrain || c.Workload == workloadWorker) && c.Prefill < 1:
		return bad("--prefill must be at least 1")
	case c.Workload == workloadWorker && c.Clients > worker.MaxConcurrency:
		return bad("--clients must be at most %d for the worker workload (its Concurrency)", worker.MaxConcurrency)
	case c.Workload == workloadWorker && c.Batch != 1:
		return bad("--batch does not apply to the worker workload (it leases as many items as it has free handlers)")
	case c.WorkerConsumer && c.Workload != workloadCycle:
		return bad("--worker-consumer applies only to the cycle workload")
	case c.WorkerConsumer && c.LeaseAhead:
		return bad("--worker-consumer and --lease-ahead do not go together (the clients lease nothing)")
	case c.WorkerConcurrency < 1 || c.WorkerConcurrency > worker.MaxConcurrency:
		return bad("--worker-concurrency must be in 1..%d", worker.MaxConcurrency)
	case c.Backlog < 0:
		return bad("--backlog must not be negative")
	case c.Count < 0:
		return bad("--count must not be negative")
	case c.Count > 0 && c.Workload != workloadProduce:
		return bad("--count applies only to the produce workload")
	case c.Interval < 0:
		return bad("--interval must not be negative")
	case c.Interval > 0 && c.Interval < 100*time.Millisecond:
		return bad("--interval must be at least 100ms")
	}
	if c.Workload == workloadSoak {
		if err := validateSoak(c); err != nil {
			return bad("%v", err)
		}
	}
	if c.Workload == workloadLatency && c.Payload < 8 {
		c.Payload = 8 // room for the send timestamp
	}
	return nil
}

// validateSoak checks the flags of the soak workload and fills in the
// default --metrics-url.
func validateSoak(c *config) error {
	switch {
	case len(c.Endpoints) != 1:
		return errors.New("the soak workload takes one --endpoint")
	case c.Rate < 1:
		return errors.New("--rate must be at least 1 item/s")
	case c.Interval <= 0:
		return errors.New("--interval must be positive for the soak workload")
	case c.RedriveEvery < 0:
		return errors.New("--redrive-every must not be negative")
	case c.WarmupIntervals < 0:
		return errors.New("--warmup-intervals must not be negative")
	case c.VerdictWindow < 1:
		return errors.New("--verdict-window must be at least 1")
	case c.Duration <= time.Duration(c.WarmupIntervals+1)*c.Interval:
		return fmt.Errorf("--duration %s leaves fewer than two --interval %s after the %d warm-up interval(s)", c.Duration, c.Interval, c.WarmupIntervals)
	case c.RSSTolerance <= 0 || c.GoroutineTolerance <= 0:
		return errors.New("--rss-tolerance and --goroutine-tolerance must be positive")
	}
	if c.MetricsURL == "" {
		c.MetricsURL = strings.TrimSuffix(c.Endpoints[0], "/") + "/metrics"
	}
	return nil
}

// parseEndpoints splits a comma-separated list of base URLs, trimming
// spaces around each; every URL must start with http:// or https://.
func parseEndpoints(list string) ([]string, error) {
	var out []string
	for e := range strings.SplitSeq(list, ",") {
		e = strings.TrimSpace(e)
		switch {
		case e == "":
			return nil, fmt.Errorf("%q has an empty URL", list)
		case !strings.HasPrefix(e, "http://") && !strings.HasPrefix(e, "https://"):
			return nil, fmt.Errorf("%q must start with http:// or https://", e)
		}
		out = append(out, e)
	}
	return out, nil
}

// runOffline runs the modes that load no server: --fsync-probe, --summary,
// --profile-summary and --compare.
func runOffline(cfg config, stdout io.Writer) error {
	switch {
	case cfg.ProfileSummary != "":
		s, err := summarizeProfile(cfg.ProfileSummary, 10)
		if err != nil {
			return err
		}
		var rate float64
		if cfg.ProfileRun != "" {
			reports, err := readReports(cfg.ProfileRun)
			if err != nil {
				return err
			}
			if len(reports) > 0 {
				rate = reports[0].ItemsPerSec
			}
		}
		return writeProfileSummary(stdout, cfg.Label, s, rate)
	case cfg.FsyncProbe != "":
		if cfg.FsyncProbeFiles < 1 {
			return fmt.Errorf("invalid --fsync-probe-files %d: must be at least 1", cfg.FsyncProbeFiles)
		}
		p, err := probeFsync(cfg.FsyncProbe, 500, cfg.FsyncProbeFiles, cfg.FsyncProbeOverwrite)
		if err != nil {
			return fmt.Errorf("fsync probe: %w", err)
		}
		return json.NewEncoder(stdout).Encode(p)
	case cfg.Summary != "":
		reports, err := readReports(cfg.Summary)
		if err != nil {
			return err
		}
		return writeSummary(stdout, reports, cfg.FsyncMS)
	default:
		reports, err := readReports(cfg.Compare)
		if err != nil {
			return err
		}
		return writeCompare(stdout, reports)
	}
}

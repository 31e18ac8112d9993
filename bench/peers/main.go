// Command peer-bench drives Styx's peers with the workloads of styx-bench,
// so that bench/peers.sh can run them side by side with Styx in one run:
// River on PostgreSQL, RabbitMQ quorum queues and NATS JetStream.
//
// It lives in a Go module of its own (bench/peers/go.mod), so that Styx's
// module never depends on River, amqp091-go or nats.go.
//
// Every run has --clients closed-loop clients, a --warmup and then a
// measured --duration; an operation counts when it ends inside the measured
// window [start, end). One JSON line (the keys of styx-bench --json that
// the table uses: label, workload, clients, batch, items, items_per_sec,
// errors) goes to stdout.
//
// Workloads, per system (docs/benchmarks.md, "The peers side by side"):
//
//	produce  every client sends batches of --batch items and waits for
//	         each batch to be acknowledged durably: River's Insert (batch 1)
//	         or InsertMany, RabbitMQ publisher confirms, JetStream publish
//	         acks; items/s counts acknowledged items
//	cycle    RabbitMQ and NATS: like styx-bench's cycle, every client sends
//	         a batch (acknowledged), receives as many messages (waiting at
//	         most 1 s) and acknowledges them (RabbitMQ: a manual multiple
//	         ack, which AMQP 0-9-1 never answers; JetStream: AckSync of
//	         every message, sent concurrently, all answers awaited); items/s
//	         counts acknowledged messages. River: the clients insert
//	         batches while River's own workers (a no-op worker) work them;
//	         a client waits before inserting while more than --river-backlog
//	         jobs per client are inserted and not yet completed; items/s
//	         counts completed jobs (River's job_completed events, which its
//	         completer sends once the completion is committed)
//
// Two more systems are the ceilings (ceilings.go): http-floor, a bare Go
// net/http server and clients sending Styx's requests with no queue behind
// them (its server run by --serve-http-floor), and sql, a leased queue's
// row work in bare SQL on PostgreSQL.
//
// Other modes: --ping waits until the system answers (for the bench script
// to wait for a server it started); --table FILE renders the JSON lines of
// styx-bench and peer-bench runs in FILE as the side-by-side tables;
// --serve-http-floor ADDR serves the http-floor system's endpoints until
// SIGTERM.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/pflag"
)

// opTimeout bounds the wait for the acknowledgements of one batch.
const opTimeout = 10 * time.Second

// config is the command line.
type config struct {
	System   string // river, rabbitmq or nats
	URL      string // the system's address: a PostgreSQL DSN, an amqp:// or nats:// URL
	Workload string // produce or cycle
	Clients  int
	Batch    int
	Payload  int // bytes per item
	Duration time.Duration
	Warmup   time.Duration
	Label    string
	Ping     time.Duration // --ping: wait up to this long for the system, then exit
	Table    string        // --table FILE: render FILE and exit
	Floor    string        // --serve-http-floor ADDR: serve the http-floor endpoints and exit when stopped
	Round    int

	// River's client configuration (cycle).
	RiverBacklog           int // jobs per client inserted and not yet completed (0: 5 batches, at least 250)
	RiverMaxWorkers        int
	RiverFetchCooldown     time.Duration
	RiverFetchPollInterval time.Duration
	RiverMaxConns          int
}

// result is one run's JSON line.
type result struct {
	Label       string  `json:"label"`
	System      string  `json:"system"`
	Workload    string  `json:"workload"`
	Round       int     `json:"round,omitempty"`
	Clients     int     `json:"clients"`
	Batch       int     `json:"batch"`
	Payload     int     `json:"payload_bytes"`
	Seconds     float64 `json:"seconds"`
	Items       int64   `json:"items"`
	ItemsPerSec float64 `json:"items_per_sec"`
	// Inserted is what River's clients inserted in the window (cycle).
	Inserted int64  `json:"inserted,omitempty"`
	Errors   int64  `json:"errors"`
	Config   string `json:"config,omitempty"`
}

// window is the shared state of one run: the measured window and the
// counters every client adds to.
type window struct {
	start, end time.Time
	items      atomic.Int64
	inserted   atomic.Int64
	errors     atomic.Int64
	printed    atomic.Int64
	stderr     io.Writer
}

// in reports whether t is inside the measured window.
func (w *window) in(t time.Time) bool { return !t.Before(w.start) && t.Before(w.end) }

// running reports whether clients should start another operation.
func (w *window) running(ctx context.Context) bool {
	return ctx.Err() == nil && time.Now().Before(w.end)
}

// done counts n items finished now, if now is inside the window.
func (w *window) done(n int) {
	if w.in(time.Now()) {
		w.items.Add(int64(n))
	}
}

// fail counts err (unless the run is over) and prints the first few, then
// pauses 50 ms so that a broken server is not hammered.
func (w *window) fail(ctx context.Context, what string, err error) {
	if ctx.Err() != nil || !time.Now().Before(w.end) {
		return
	}
	w.errors.Add(1)
	if w.printed.Add(1) <= 5 {
		_, _ = fmt.Fprintf(w.stderr, "peer-bench: %s: %v\n", what, err)
	}
	sleep(ctx, 50*time.Millisecond)
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

// payloads returns n random payloads of size bytes each (hex text, which
// River's JSON arguments keep as they are), so that no two items of a batch
// are alike.
func payloads(n, size int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		b := make([]byte, (size+1)/2)
		_, _ = rand.Read(b)
		out[i] = []byte(hex.EncodeToString(b)[:size])
	}
	return out
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// run executes the command line and returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var cfg config
	fs := pflag.NewFlagSet("peer-bench", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&cfg.System, "system", "", "river, rabbitmq, nats, or a ceiling: http-floor or sql")
	fs.StringVar(&cfg.URL, "url", "", "the system's address (PostgreSQL DSN, amqp:// or nats:// URL)")
	fs.StringVar(&cfg.Workload, "workload", "produce", "produce or cycle")
	fs.IntVar(&cfg.Clients, "clients", 4, "closed-loop clients")
	fs.IntVar(&cfg.Batch, "batch", 1, "items per batch")
	fs.IntVar(&cfg.Payload, "payload", 1024, "payload bytes per item")
	fs.DurationVar(&cfg.Duration, "duration", 10*time.Second, "measured time")
	fs.DurationVar(&cfg.Warmup, "warmup", 2*time.Second, "unmeasured warm-up")
	fs.StringVar(&cfg.Label, "label", "", "label of the JSON line (default: --system)")
	fs.IntVar(&cfg.Round, "round", 0, "round number, recorded in the JSON line")
	fs.DurationVar(&cfg.Ping, "ping", 0, "wait up to this long until the system answers, then exit")
	fs.StringVar(&cfg.Table, "table", "", "render the JSON lines in this file as the side-by-side tables and exit")
	fs.StringVar(&cfg.Floor, "serve-http-floor", "", "serve the http-floor system's endpoints on this host:port (answers of --payload bytes per item) until stopped")
	fs.IntVar(&cfg.RiverBacklog, "river-backlog", 0, "River cycle: jobs per client inserted and not yet completed before the client waits (0: 5 batches, at least 250)")
	fs.IntVar(&cfg.RiverMaxWorkers, "river-max-workers", 1000, "River cycle: MaxWorkers of the queue")
	fs.DurationVar(&cfg.RiverFetchCooldown, "river-fetch-cooldown", time.Millisecond, "River cycle: FetchCooldown")
	fs.DurationVar(&cfg.RiverFetchPollInterval, "river-fetch-poll-interval", 50*time.Millisecond, "River cycle: FetchPollInterval")
	fs.IntVar(&cfg.RiverMaxConns, "river-max-conns", 20, "River: connections of the pgx pool")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return 0
		}
		return 2
	}
	if cfg.Table != "" {
		if err := renderTables(stdout, cfg.Table); err != nil {
			_, _ = fmt.Fprintf(stderr, "peer-bench: %v\n", err)
			return 1
		}
		return 0
	}
	if cfg.Floor != "" {
		if err := serveHTTPFloor(ctx, cfg.Floor, cfg.Payload); err != nil {
			_, _ = fmt.Fprintf(stderr, "peer-bench: %v\n", err)
			return 1
		}
		return 0
	}
	if cfg.Label == "" {
		cfg.Label = cfg.System
	}
	if cfg.Clients < 1 || cfg.Batch < 1 || cfg.Payload < 1 || (cfg.Workload != "produce" && cfg.Workload != "cycle") {
		_, _ = fmt.Fprintln(stderr, "peer-bench: --clients, --batch and --payload must be positive, --workload produce or cycle")
		return 2
	}
	var sys system
	switch cfg.System {
	case "river":
		sys = &river{cfg: cfg}
	case "rabbitmq":
		sys = &rabbit{cfg: cfg}
	case "nats":
		sys = &natsJS{cfg: cfg}
	case "http-floor":
		sys = newHTTPFloor(cfg)
	case "sql":
		sys = &bareSQL{cfg: cfg}
	default:
		_, _ = fmt.Fprintf(stderr, "peer-bench: unknown --system %q (river, rabbitmq, nats, http-floor, sql)\n", cfg.System)
		return 2
	}
	if cfg.Ping > 0 {
		if err := ping(ctx, sys, cfg.Ping); err != nil {
			_, _ = fmt.Fprintf(stderr, "peer-bench: %s does not answer: %v\n", cfg.System, err)
			return 1
		}
		return 0
	}
	res, err := measure(ctx, cfg, sys, stderr)
	if err != nil {
		_, _ = fmt.Fprintf(stderr, "peer-bench: %s %s: %v\n", cfg.System, cfg.Workload, err)
		return 1
	}
	if err := json.NewEncoder(stdout).Encode(res); err != nil {
		return 1
	}
	return 0
}

// system is one peer.
type system interface {
	// ping connects once and returns an error if the system does not answer.
	ping(ctx context.Context) error
	// run sets up the system for the workload, runs it in w, tears it down
	// (its queue, stream or jobs) and returns a description of the
	// configuration used.
	run(ctx context.Context, w *window) (string, error)
}

// ping calls sys.ping every 250 ms until it succeeds or timeout passes.
func ping(ctx context.Context, sys system, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
		err := sys.ping(pctx)
		pcancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return err
		}
		sleep(ctx, 250*time.Millisecond)
	}
}

// measure runs one workload on sys and returns its result line.
func measure(ctx context.Context, cfg config, sys system, stderr io.Writer) (*result, error) {
	w := &window{stderr: stderr}
	w.start = time.Now().Add(cfg.Warmup)
	w.end = w.start.Add(cfg.Duration)
	desc, err := sys.run(ctx, w)
	if err != nil {
		return nil, err
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	s := cfg.Duration.Seconds()
	return &result{
		Label: cfg.Label, System: cfg.System, Workload: cfg.Workload, Round: cfg.Round,
		Clients: cfg.Clients, Batch: cfg.Batch, Payload: cfg.Payload, Seconds: s,
		Items: w.items.Load(), ItemsPerSec: float64(w.items.Load()) / s,
		Inserted: w.inserted.Load(), Errors: w.errors.Load(), Config: desc,
	}, nil
}

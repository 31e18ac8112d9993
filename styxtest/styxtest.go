// Package styxtest runs a real Styx server inside a Go test, so code that
// produces to or consumes from Styx (a worker.Handler, a producer) is tested
// against the real queue semantics — leases, attempts, dead-lettering —
// rather than a mock:
//
//	func TestCharge(t *testing.T) {
//		c := styxtest.NewServer(t) // memory storage, stopped at cleanup
//		// create queues, produce, run a worker, assert with c...
//	}
package styxtest

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	styx "github.com/styxq/styx"
	"github.com/styxq/styx/daemon"
	pb "github.com/styxq/styx/styxpb"
)

// Options configures Start. The zero value is an in-memory server.
type Options struct {
	// Storage is the backend: "memory" (default), "pebble" (in a
	// t.TempDir()) or "postgres" (PostgresURL required).
	Storage string
	// PostgresURL is the database of the postgres backend.
	PostgresURL string
	// Log receives the server's logs. Default: discarded.
	Log *slog.Logger
	// Clock is the server's time. Default the system clock; a test may
	// pass a fake one (shared with a worker's Config.Clock) to move lease
	// and schedule deadlines without sleeping. The server's own timers
	// stay real: work that a moved clock makes due runs at the next
	// request to the queue.
	Clock interface{ Now() time.Time }
	// APIKey is the key Server.Client sends (none when empty): with
	// Configure turning Auth on, the key of its AdminKeyFile, say.
	APIKey string
	// Configure, when set, changes the server's configuration after
	// Start has filled it from the fields above (Listen a free loopback
	// port, Storage, PostgresURL, DataDir a t.TempDir() for pebble, Log,
	// Clock) and before the server starts, for what they do not cover:
	// Auth with an AdminKeyFile and a SecretKeyFile (so that keys made
	// through keys.create sign SQS requests), a DataDir of the test's
	// own, request limits. Start fails the test if the result does not
	// pass daemon.Config.Validate.
	Configure func(cfg *daemon.Config)
}

// Server is a running in-process server.
type Server struct {
	// Client talks to the server; closed at cleanup.
	Client *styx.Client
	// Endpoint is the server's base URL ("http://127.0.0.1:port").
	Endpoint string
	d        *daemon.Daemon
	// closed is set by the first Close (or the test's cleanup); closeErr
	// is what that Close returned.
	closeOnce sync.Once
	closeErr  error
}

// NewServer starts a Styx server on memory storage on a free loopback port
// and returns a client for it. The server stops when the test ends. It
// fails the test (t.Fatal) if the server cannot start.
func NewServer(t testing.TB) *styx.Client {
	t.Helper()
	return Start(t, Options{}).Client
}

// Start starts a Styx server as opts says, on a free loopback port; it
// stops when the test ends. It fails the test if the server cannot start.
func Start(t testing.TB, opts Options) *Server {
	t.Helper()
	cfg := daemon.Config{
		Listen:          "127.0.0.1:0",
		Storage:         opts.Storage,
		PostgresURL:     opts.PostgresURL,
		ShutdownTimeout: 2 * time.Second,
		Log:             opts.Log,
	}
	if opts.Clock != nil {
		cfg.Clock = opts.Clock
	}
	if cfg.Storage == "" {
		cfg.Storage = daemon.StorageMemory
	}
	if cfg.Storage == daemon.StoragePebble {
		cfg.DataDir = t.TempDir()
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if opts.Configure != nil {
		opts.Configure(&cfg)
	}
	d, err := daemon.New(context.Background(), cfg)
	if err != nil {
		t.Fatalf("styxtest: start a %s server: %v", cfg.Storage, err)
	}
	c, err := styx.NewClient(styx.ClientConfig{Endpoint: d.Endpoint(), APIKey: opts.APIKey})
	if err != nil {
		_ = d.Close(context.Background())
		t.Fatalf("styxtest: client: %v", err)
	}
	s := &Server{Client: c, Endpoint: d.Endpoint(), d: d}
	t.Cleanup(func() {
		// A connection that another client of the test keeps open holds
		// the graceful shutdown until ShutdownTimeout; the server then
		// closes it, which is no failure of the test.
		if err := s.Close(); err != nil && !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("styxtest: stop the server: %v", err)
		}
	})
	return s
}

// Daemon returns the running server, for what its client does not reach:
// its listening address (Addr), its Prometheus metrics (Metrics).
func (s *Server) Daemon() *daemon.Daemon { return s.d }

// Close stops the server before the test ends: it closes s.Client, then
// shuts the server down gracefully (waiting up to the ShutdownTimeout of
// its configuration, 2 s unless Options.Configure set another) and returns
// the error of that (context.DeadlineExceeded when connections were still
// open at the timeout; the server is stopped either way). A test stops a
// server this way to start another on the same storage (the same
// Configure'd DataDir, the same PostgreSQL database). Later calls, and the
// test's cleanup, do nothing more and return the first call's error.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		s.Client.Close()
		s.closeErr = s.d.Close(context.Background())
	})
	return s.closeErr
}

// CreateQueue creates a queue with the given configuration (info.QueueName
// set), failing the test on error. A convenience for test setup. An ordered
// queue, whose item groups are leased in produce order (see Grouped), is
// info.Ordered true.
func CreateQueue(t testing.TB, c *styx.Client, info *pb.QueueInfo) {
	t.Helper()
	if err := c.QueuesCreate(context.Background(), info); err != nil {
		t.Fatalf("styxtest: create queue %q: %v", info.QueueName, err)
	}
}

// maxProduce is the most items one queue.produce takes.
const maxProduce = 1000

// Produce produces items to queue, in order, failing the test on error. It
// sends them in requests of up to 1000 items (the server's limit), one
// after another; any number may be given.
func Produce(t testing.TB, c *styx.Client, queue string, items ...*pb.QueueProduceItem) {
	t.Helper()
	for len(items) > 0 {
		batch := items[:min(len(items), maxProduce)]
		items = items[len(batch):]
		if err := c.QueueProduce(context.Background(), &pb.QueueProduceRequest{QueueName: queue, Items: batch}); err != nil {
			t.Fatalf("styxtest: produce %d items to %q: %v", len(batch), queue, err)
		}
	}
}

// Grouped returns one item per payload, in order, each in group group (1
// to 128 ASCII letters, digits or punctuation; see
// QueueProduceItem.group): what a producer sends for one customer or
// order. Produced to an ordered queue, a group's items are leased in that
// order, one lease at a time; a worker runs them one at a time. Mix groups
// with append:
//
//	styxtest.Produce(t, c, "orders", append(styxtest.Grouped("ada", "a1", "a2"), styxtest.Grouped("bob", "b1")...)...)
func Grouped(group string, payloads ...string) []*pb.QueueProduceItem {
	items := make([]*pb.QueueProduceItem, len(payloads))
	for i, p := range payloads {
		items[i] = &pb.QueueProduceItem{Bytes: []byte(p), Group: group}
	}
	return items
}

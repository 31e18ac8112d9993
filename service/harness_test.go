package service_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/timestamppb"

	styx "github.com/styxq/styx"
	"github.com/styxq/styx/daemon"
	"github.com/styxq/styx/internal/backend/embedded/pebble"
	"github.com/styxq/styx/internal/clock"
	"github.com/styxq/styx/internal/pgtest"
	"github.com/styxq/styx/internal/queue"
	"github.com/styxq/styx/internal/store"
	"github.com/styxq/styx/internal/store/faulty"
	pb "github.com/styxq/styx/styxpb"
)

// backend opens a store that survives server restarts within one test.
type backend struct {
	name string
	// open returns a store over the test's persistent state; reopen
	// after close sees everything written before. Nil for postgres.
	open func(t *testing.T) store.Store
	// url is the postgres backend's database (a schema of the test's
	// own); every server of the test, and every restart, uses it.
	url string
}

// postgres reports whether the backend is PostgreSQL.
func (b backend) postgres() bool { return b.url != "" }

// requireItemLog skips a test that injects faults into the item log of the
// embedded backends (store.Store writes), which the postgres backend does
// not have: there, a dead-letter move or a redrive step is one transaction.
func requireItemLog(t *testing.T, b backend) {
	t.Helper()
	if b.postgres() {
		t.Skip("fault injection works on the embedded backends' item log; postgres has none (one transaction per move)")
	}
}

// backends returns every storage backend the functional tests run on.
func backends(t *testing.T) []backend {
	return []backend{
		{name: "memory", open: func() func(t *testing.T) store.Store {
			s, err := pebble.OpenMemory() // one instance stands for the persistent state
			require.NoError(t, err)
			t.Cleanup(func() { _ = s.Close() })
			return func(t *testing.T) store.Store { return nopClose{s} }
		}()},
		{name: "pebble", open: func() func(t *testing.T) store.Store {
			dir := t.TempDir()
			return func(t *testing.T) store.Store {
				s, err := pebble.Open(pebble.Config{Dir: dir, Logger: testLogger()})
				require.NoError(t, err)
				return s
			}
		}()},
		{name: "postgres", url: postgresURL(t)},
	}
}

// postgresURL returns a schema of the test's own in the test database, or
// "" (with the skip logged once) when there is none: see pgtest.
func postgresURL(t *testing.T) string {
	if os.Getenv(pgtest.EnvURL) == "" && os.Getenv(pgtest.EnvRequire) == "" {
		return ""
	}
	return pgtest.URL(t)
}

var logSkip sync.Once

// nopClose keeps a memory store's contents across a server "restart".
type nopClose struct{ store.Store }

func (nopClose) Close() error { return nil }

// server is a running in-process server with a client.
type server struct {
	t      *testing.T
	b      backend
	d      *daemon.Daemon
	store  store.Store
	Faults *faulty.Store
	C      *styx.Client
	// Logs holds the server's WARN and ERROR lines (and INFO with
	// logInfo).
	Logs *logBuffer
	// configure, when set, changes the server's Config before each boot
	// (startAuth).
	configure func(cfg *daemon.Config)
	// clientCfg, when set, changes the client's config before each boot.
	clientCfg func(cc *styx.ClientConfig)
	// logInfo keeps INFO lines in Logs too (the audit lines).
	logInfo bool
	// Clock is the server's time when it runs on a fake clock
	// (startFake), nil on the real one.
	Clock *clock.Fake
}

func testLogger() *slog.Logger {
	if os.Getenv("STYX_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// logBuffer collects a server's log lines for assertions.
type logBuffer struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// start starts a server on b and stops it at the end of the test.
func start(t *testing.T, b backend) *server {
	return startWith(t, b, nil)
}

// startWith starts a server on b whose daemon Config configure adjusts
// (nil: none), and stops it at the end of the test.
func startWith(t *testing.T, b backend, configure func(*daemon.Config)) *server {
	s := &server{t: t, b: b, configure: configure}
	s.boot()
	t.Cleanup(func() { s.stop() })
	return s
}

// startFake starts a server on b whose time is a clock.Fake set to the
// current time, and stops it at the end of the test: time moves only by
// s.advance (and stays the fake's across s.restart). Lease and expire
// deadlines pass without a sleep; a request's own timeout (a waiting
// lease's) is still real time, since the engines wait on real timers.
func startFake(t *testing.T, b backend) *server {
	return startFakeWith(t, b, nil)
}

// startFakeWith is startFake with a daemon Config that configure adjusts
// (nil: none).
func startFakeWith(t *testing.T, b backend, configure func(*daemon.Config)) *server {
	clk := clock.NewFake(time.Now())
	s := startWith(t, b, func(c *daemon.Config) {
		c.Clock = clk
		if configure != nil {
			configure(c)
		}
	})
	s.Clock = clk
	return s
}

// now is the server's time: its fake clock's, or the real one.
func (s *server) now() time.Time {
	if s.Clock != nil {
		return s.Clock.Now()
	}
	return time.Now()
}

// advance moves the server's fake clock by d and ticks each queue, so that
// the lifecycle work d made due (expired leases, scheduled items, expire
// deadlines) runs. Moves to a dead-letter queue that the lifecycle starts
// are asynchronous on the embedded backends: wait for them with waitItems.
func (s *server) advance(d time.Duration, queues ...string) {
	s.t.Helper()
	require.NotNil(s.t, s.Clock, "advance needs a server on a fake clock (startFake)")
	s.Clock.Advance(d)
	for _, q := range queues {
		s.tick(q)
	}
}

// tick sends every partition of queue name a request that changes nothing (a
// storage.items.delete of an id that does not exist), so that the engine
// runs an iteration and with it the lifecycle work that a fake clock made
// due: the engines' timers are real, so moving a clock.Fake wakes nothing
// (see internal/queue/queuetest).
func (s *server) tick(name string) {
	s.t.Helper()
	info, err := s.C.QueuesInfo(ctx, &pb.QueuesInfoRequest{QueueName: name})
	require.NoError(s.t, err)
	for p := range info.RequestedPartitions {
		require.NoError(s.t, s.C.StorageItemsDelete(ctx, &pb.StorageItemsDeleteRequest{QueueName: name, Partition: p,
			Ids: []string{queue.FormatID(1 << 60)}}))
	}
}

func (s *server) boot() {
	cfg := daemon.Config{Listen: "127.0.0.1:0", ShutdownTimeout: 5 * time.Second}
	if s.b.postgres() {
		cfg.Storage, cfg.PostgresURL = daemon.StoragePostgres, s.b.url
	} else {
		s.store = s.b.open(s.t)
		s.Faults = faulty.New(s.store)
		cfg.Store = s.Faults
	}
	if s.Logs == nil {
		s.Logs = &logBuffer{}
	}
	level := slog.LevelWarn
	if s.logInfo {
		level = slog.LevelInfo
	}
	log := slog.New(slog.NewTextHandler(s.Logs, &slog.HandlerOptions{Level: level}))
	if os.Getenv("STYX_TEST_LOG") != "" {
		log = testLogger()
	}
	cfg.Log = log
	if s.configure != nil {
		s.configure(&cfg)
	}
	d, err := daemon.New(context.Background(), cfg)
	require.NoError(s.t, err)
	s.d = d
	cc := styx.ClientConfig{Endpoint: d.Endpoint()}
	if s.clientCfg != nil {
		s.clientCfg(&cc)
	}
	s.C, err = styx.NewClient(cc)
	require.NoError(s.t, err)
}

func (s *server) stop() {
	require.NoError(s.t, s.shutdown())
}

// shutdown stops the server gracefully and returns the errors of closing
// the daemon and its store; the server is stopped either way (stop, at the
// test's end, then does nothing more).
func (s *server) shutdown() error {
	if s.d == nil {
		return nil
	}
	// A connection the client dialed but never used holds a graceful
	// shutdown for 5s (net/http treats it as new, not idle).
	s.C.Close()
	d := s.d
	s.d = nil
	err := d.Close(context.Background())
	if s.store != nil {
		err = errors.Join(err, s.store.Close())
	}
	return err
}

// restart stops the server gracefully and starts it again on the same
// storage.
func (s *server) restart() {
	s.stop()
	s.boot()
}

// forEachBackend runs fn as a parallel subtest per backend.
func forEachBackend(t *testing.T, fn func(t *testing.T, b backend)) {
	t.Helper()
	for _, b := range backends(t) {
		if b.name == "postgres" && !b.postgres() {
			logSkip.Do(func() { t.Logf("postgres backend skipped: %s is not set (see internal/pgtest)", pgtest.EnvURL) })
			continue
		}
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			fn(t, b)
		})
	}
}

var ctx = context.Background()

func (s *server) createQueue(info *pb.QueueInfo) {
	s.t.Helper()
	require.NoError(s.t, s.C.QueuesCreate(ctx, info))
}

func (s *server) produce(queue string, payloads ...string) {
	s.t.Helper()
	req := &pb.QueueProduceRequest{QueueName: queue, RequestTimeout: "1m"}
	for _, p := range payloads {
		req.Items = append(req.Items, &pb.QueueProduceItem{Bytes: []byte(p), Kind: "test", Reference: "ref-" + p})
	}
	require.NoError(s.t, s.C.QueueProduce(ctx, req))
}

// lease leases up to n items, waiting up to 5s (of the server's time: on a
// fake clock, 30s of real time bound the call instead).
func (s *server) lease(queue string, n int32) *pb.QueueLeaseResponse {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	res, err := s.C.QueueLease(ctx, &pb.QueueLeaseRequest{QueueName: queue, BatchSize: n, ClientId: s.t.Name(), RequestTimeout: "5s"})
	require.NoError(s.t, err)
	return res
}

// leaseNone asserts that a short lease finds nothing: a request timeout of
// 50ms ends it with the retry code. On a fake clock, whose request timeouts
// never pass unless advanced, the client gives up after 50ms of real time,
// and leaseNone waits until the server has dropped the abandoned lease: one
// left waiting would take the next item that comes due.
func (s *server) leaseNone(queue string) {
	s.t.Helper()
	if s.Clock != nil {
		ctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		res, err := s.C.QueueLease(ctx, &pb.QueueLeaseRequest{QueueName: queue, BatchSize: 10, ClientId: s.t.Name(), RequestTimeout: "1m"})
		cancel()
		require.Error(s.t, err, "lease from queue %s got %v", queue, res)
		require.ErrorIs(s.t, err, context.DeadlineExceeded)
		waitStat(s.t, s, queue, func(st *pb.QueueLogicalStats) bool { return st.LeaseWaiting == 0 })
		return
	}
	_, err := s.C.QueueLease(ctx, &pb.QueueLeaseRequest{QueueName: queue, BatchSize: 10, ClientId: s.t.Name(), RequestTimeout: "50ms"})
	require.Error(s.t, err)
	require.Equal(s.t, styx.CodeRetry, styx.ErrorCode(err), err.Error())
}

// retry retries items and returns what became of each.
func (s *server) retry(queue string, partition int32, items ...*pb.QueueRetryItem) []*pb.QueueRetryOutcome {
	s.t.Helper()
	res, err := s.C.QueueRetry(ctx, &pb.QueueRetryRequest{QueueName: queue, Partition: partition, Items: items})
	require.NoError(s.t, err)
	return res.Outcomes
}

// retryErr is the error of a QueueRetry call.
func retryErr(_ *pb.QueueRetryResponse, err error) error { return err }

func (s *server) complete(queue string, partition int32, ids ...string) {
	s.t.Helper()
	require.NoError(s.t, s.C.QueueComplete(ctx, &pb.QueueCompleteRequest{QueueName: queue, Partition: partition, Ids: ids}))
}

// items lists the items of every partition of a queue that
// storage/items.list lists: every item but the scheduled ones.
func (s *server) items(queue string) []*pb.StorageItem {
	s.t.Helper()
	return s.list(queue, s.C.StorageItemsList)
}

// allItems lists every item of every partition of a queue, scheduled ones
// included (storage/items.list, then storage/scheduled.list).
func (s *server) allItems(queue string) []*pb.StorageItem {
	s.t.Helper()
	return append(s.items(queue), s.list(queue, s.C.StorageScheduledList)...)
}

// list pages through one of the storage lists on every partition of a
// queue.
func (s *server) list(queue string, call func(context.Context, *pb.StorageItemsListRequest) (*pb.StorageItemsListResponse, error)) []*pb.StorageItem {
	s.t.Helper()
	info, err := s.C.QueuesInfo(ctx, &pb.QueuesInfoRequest{QueueName: queue})
	require.NoError(s.t, err)
	var all []*pb.StorageItem
	for p := range info.RequestedPartitions {
		pivot := ""
		for {
			res, err := call(ctx, &pb.StorageItemsListRequest{QueueName: queue, Partition: p, Pivot: pivot, Limit: 1000})
			require.NoError(s.t, err)
			page := res.Items
			if pivot != "" && len(page) > 0 && page[0].Id == pivot {
				page = page[1:] // the pivot is inclusive: seen on the last page
			}
			all = append(all, page...)
			if len(res.Items) < 1000 {
				break
			}
			pivot = res.Items[len(res.Items)-1].Id
		}
	}
	return all
}

// eventually polls cond every 10ms until it holds or 10s pass.
func eventually(t *testing.T, cond func() bool, msg string, args ...any) {
	t.Helper()
	require.Eventually(t, cond, 10*time.Second, 10*time.Millisecond, append([]any{msg}, args...)...)
}

// waitItems polls until queue holds n items and returns them.
func (s *server) waitItems(queue string, n int) []*pb.StorageItem {
	s.t.Helper()
	var got []*pb.StorageItem
	eventually(s.t, func() bool { got = s.items(queue); return len(got) == n }, "queue %s should hold %d items", queue, n)
	return got
}

func at(t time.Time) *timestamppb.Timestamp { return timestamppb.New(t) }

// requireCode asserts err is a client error with code and a message
// containing each of parts.
func requireCode(t *testing.T, err error, code int, parts ...string) {
	t.Helper()
	require.Error(t, err)
	require.Equal(t, code, styx.ErrorCode(err), err.Error())
	for _, p := range parts {
		require.Contains(t, err.Error(), p)
	}
}

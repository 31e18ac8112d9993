package servertest

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	styx "github.com/styxq/styx"
	"github.com/styxq/styx/daemon"
	"github.com/styxq/styx/internal/clock"
	"github.com/styxq/styx/internal/queue"
	"github.com/styxq/styx/internal/store"
	"github.com/styxq/styx/internal/store/faulty"
	pb "github.com/styxq/styx/styxpb"
	"github.com/styxq/styx/styxtest"
)

// Server is a running in-process server (a styxtest.Server) on a Backend,
// with a Go client. A test may stop it and boot it again on the same
// storage (Restart), inject faults into its store (Faults, on the embedded
// backends) and move its time (StartFake). Its fields are the test
// goroutine's: set the ones marked so before Boot, read the others after.
type Server struct {
	// T is the test that owns the server; its helpers fail it.
	T *testing.T
	// B is the backend the server runs on.
	B Backend
	// D is the running daemon (nil while stopped): its Addr, Endpoint,
	// Metrics.
	D *daemon.Daemon
	// Endpoint is the running server's base URL ("http://127.0.0.1:port",
	// https with TLS).
	Endpoint string
	// Store is the embedded backends' store of the current boot (nil on
	// postgres); Faults wraps it, and is what the server writes through.
	Store  store.Store
	Faults *faulty.Store
	// C is the server's client: it sends the admin key of the Start*Auth
	// variants, and ClientConfig changes its config.
	C *styx.Client
	// Logs holds the server's WARN and ERROR lines (and INFO with
	// LogInfo), across restarts.
	Logs *LogBuffer
	// Configure, when set before Boot, changes the server's Config before
	// each boot.
	Configure func(cfg *daemon.Config)
	// ClientConfig, when set before Boot, changes C's config before each
	// boot.
	ClientConfig func(cc *styx.ClientConfig)
	// LogInfo, set before Boot, keeps INFO lines in Logs too (the audit
	// lines).
	LogInfo bool
	// Clock is the server's time when it runs on a fake clock
	// (StartFake), nil on the real one.
	Clock *clock.Fake

	srv *styxtest.Server
}

// TestLogger is a logger for a store or server outside a Server: debug
// lines on stderr with STYX_TEST_LOG set, else nothing.
func TestLogger() *slog.Logger {
	if os.Getenv("STYX_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// LogBuffer collects a server's log lines for assertions; safe for
// concurrent use.
type LogBuffer struct {
	mu  sync.Mutex
	buf strings.Builder
}

// Write appends p; it never fails.
func (b *LogBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns every line written so far.
func (b *LogBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Start starts a server on b and stops it at the end of the test.
func Start(t *testing.T, b Backend) *Server {
	return StartWith(t, b, nil)
}

// StartWith starts a server on b whose daemon Config configure adjusts
// (nil: none), and stops it at the end of the test.
func StartWith(t *testing.T, b Backend, configure func(*daemon.Config)) *Server {
	s := &Server{T: t, B: b, Configure: configure}
	s.Boot()
	t.Cleanup(s.Stop)
	return s
}

// StartFake starts a server on b whose time is a clock.Fake set to the
// current time, and stops it at the end of the test: time moves only by
// s.Advance (and stays the fake's across s.Restart). Lease and expire
// deadlines pass without a sleep; a request's own timeout (a waiting
// lease's) is still real time, since the engines wait on real timers.
func StartFake(t *testing.T, b Backend) *Server {
	return StartFakeWith(t, b, nil)
}

// StartFakeWith is StartFake with a daemon Config that configure adjusts
// (nil: none).
func StartFakeWith(t *testing.T, b Backend, configure func(*daemon.Config)) *Server {
	clk := clock.NewFake(time.Now())
	s := StartWith(t, b, func(c *daemon.Config) {
		c.Clock = clk
		if configure != nil {
			configure(c)
		}
	})
	s.Clock = clk
	return s
}

// StartAuth starts a server with auth on and a bootstrap admin key from a
// file, logging INFO lines too (the audit); s.C sends that key. It returns
// the key.
func StartAuth(t *testing.T, b Backend) (*Server, string) {
	t.Helper()
	admin := RandomHex(t, 32)
	file := filepath.Join(t.TempDir(), "admin.key")
	require.NoError(t, os.WriteFile(file, []byte(admin+"\n"), 0o600))
	s := &Server{T: t, B: b, LogInfo: true}
	s.Configure = func(cfg *daemon.Config) { cfg.Auth, cfg.AdminKeyFile = true, file }
	s.ClientConfig = func(cc *styx.ClientConfig) { cc.APIKey = admin }
	s.Boot()
	t.Cleanup(s.Stop)
	return s, admin
}

// StartAuthWith is StartAuth with changes to the server and client configs
// (serverCfg and client, both required), without the INFO lines.
func StartAuthWith(t *testing.T, b Backend, serverCfg func(*daemon.Config), client func(*styx.ClientConfig)) (*Server, string) {
	t.Helper()
	admin := RandomHex(t, 32)
	file := filepath.Join(t.TempDir(), "admin.key")
	require.NoError(t, os.WriteFile(file, []byte(admin), 0o600))
	s := &Server{T: t, B: b}
	s.Configure = func(cfg *daemon.Config) {
		cfg.Auth, cfg.AdminKeyFile = true, file
		serverCfg(cfg)
	}
	s.ClientConfig = func(cc *styx.ClientConfig) {
		cc.APIKey = admin
		client(cc)
	}
	s.Boot()
	t.Cleanup(s.Stop)
	return s, admin
}

// StartSQSAuth starts a server with --auth, an admin key file and a secret
// key file (keys created then carry a sealed secret for SigV4); s.C sends
// the bootstrap admin key, which it returns.
func StartSQSAuth(t *testing.T, b Backend) (*Server, string) {
	t.Helper()
	admin := RandomHex(t, 32)
	dir := t.TempDir()
	adminFile, secretFile := filepath.Join(dir, "admin.key"), filepath.Join(dir, "secret.key")
	require.NoError(t, os.WriteFile(adminFile, []byte(admin+"\n"), 0o600))
	require.NoError(t, os.WriteFile(secretFile, []byte(RandomHex(t, 32)+"\n"), 0o600))
	s := &Server{T: t, B: b}
	s.Configure = func(cfg *daemon.Config) { cfg.Auth, cfg.AdminKeyFile, cfg.SecretKeyFile = true, adminFile, secretFile }
	s.ClientConfig = func(cc *styx.ClientConfig) { cc.APIKey = admin }
	s.Boot()
	t.Cleanup(s.Stop)
	return s, admin
}

// RandomHex returns n random bytes in hex (2n digits): a key.
func RandomHex(t *testing.T, n int) string {
	b := make([]byte, n)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return hex.EncodeToString(b)
}

// Boot starts the server (a styxtest.Server, with a shutdown timeout of
// 5 s) on s.B: on the embedded backends through a new store from B.Open,
// wrapped in Faults; on postgres on B.URL. A new C talks to it. A test
// that builds a Server itself calls Boot, and registers Stop as a cleanup.
func (s *Server) Boot() {
	opts := s.B.Options()
	if !s.B.Postgres() {
		s.Store = s.B.Open(s.T)
		s.Faults = faulty.New(s.Store)
	}
	if s.Logs == nil {
		s.Logs = &LogBuffer{}
	}
	level := slog.LevelWarn
	if s.LogInfo {
		level = slog.LevelInfo
	}
	opts.Log = slog.New(slog.NewTextHandler(s.Logs, &slog.HandlerOptions{Level: level}))
	if os.Getenv("STYX_TEST_LOG") != "" {
		opts.Log = TestLogger()
	}
	opts.Configure = func(cfg *daemon.Config) {
		cfg.ShutdownTimeout = 5 * time.Second
		if s.Faults != nil {
			cfg.Store = s.Faults
		}
		if s.Configure != nil {
			s.Configure(cfg)
		}
	}
	s.srv = styxtest.Start(s.T, opts)
	s.D = s.srv.Daemon()
	s.Endpoint = s.D.Endpoint()
	cc := styx.ClientConfig{Endpoint: s.Endpoint}
	if s.ClientConfig != nil {
		s.ClientConfig(&cc)
	}
	var err error
	s.C, err = styx.NewClient(cc)
	require.NoError(s.T, err)
}

// Stop stops the server gracefully, failing the test on an error of
// closing the daemon or its store (see Shutdown).
func (s *Server) Stop() {
	require.NoError(s.T, s.Shutdown())
}

// Shutdown stops the server gracefully and returns the errors of closing
// the daemon and its store; the server is stopped either way (Stop, at the
// test's end, then does nothing more). It does nothing while D is nil.
func (s *Server) Shutdown() error {
	if s.D == nil {
		return nil
	}
	// A connection the client dialed but never used holds a graceful
	// shutdown for 5s (net/http treats it as new, not idle).
	s.C.Close()
	s.D = nil
	err := s.srv.Close()
	if s.Store != nil {
		err = errors.Join(err, s.Store.Close())
	}
	return err
}

// Restart stops the server gracefully and starts it again on the same
// storage.
func (s *Server) Restart() {
	s.Stop()
	s.Boot()
}

// Now is the server's time: its fake clock's, or the real one.
func (s *Server) Now() time.Time {
	if s.Clock != nil {
		return s.Clock.Now()
	}
	return time.Now()
}

// Advance moves the server's fake clock by d and ticks each queue, so that
// the lifecycle work d made due (expired leases, scheduled items, expire
// deadlines) runs. Moves to a dead-letter queue that the lifecycle starts
// are asynchronous on the embedded backends: wait for them with WaitItems.
func (s *Server) Advance(d time.Duration, queues ...string) {
	s.T.Helper()
	require.NotNil(s.T, s.Clock, "Advance needs a server on a fake clock (StartFake)")
	s.Clock.Advance(d)
	for _, q := range queues {
		s.Tick(q)
	}
}

// Tick sends every partition of queue name a request that changes nothing (a
// storage.items.delete of an id that does not exist), so that the engine
// runs an iteration and with it the lifecycle work that a fake clock made
// due: the engines' timers are real, so moving a clock.Fake wakes nothing
// (see internal/queue/queuetest).
func (s *Server) Tick(name string) {
	s.T.Helper()
	info, err := s.C.QueuesInfo(ctx, &pb.QueuesInfoRequest{QueueName: name})
	require.NoError(s.T, err)
	for p := range info.RequestedPartitions {
		require.NoError(s.T, s.C.StorageItemsDelete(ctx, &pb.StorageItemsDeleteRequest{QueueName: name, Partition: p,
			Ids: []string{queue.FormatID(1 << 60)}}))
	}
}

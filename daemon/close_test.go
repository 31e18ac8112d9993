package daemon_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	styx "github.com/styxq/styx"
	"github.com/styxq/styx/daemon"
	"github.com/styxq/styx/internal/backend/embedded/pebble"
	"github.com/styxq/styx/internal/store"
	pb "github.com/styxq/styx/styxpb"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// closeWithin calls d.Close in a goroutine and returns its error, failing
// the test when it has not returned within limit: a Close that hangs fails
// the test, instead of the test binary's timeout.
func closeWithin(t *testing.T, d *daemon.Daemon, limit time.Duration) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- d.Close(context.Background()) }()
	select {
	case err := <-done:
		return err
	case <-time.After(limit):
		t.Fatalf("Daemon.Close did not return within %s", limit)
		return nil
	}
}

// TestCloseTwice (issue 41, point 7): a second Close returns the first's
// result at once, and so do Closes made together; it used to wait for ever
// for the HTTP server's end, which the first had taken.
func TestCloseTwice(t *testing.T) {
	d, err := daemon.New(context.Background(), daemon.Config{Listen: "127.0.0.1:0", DataDir: t.TempDir(), Log: quiet})
	require.NoError(t, err)
	require.NoError(t, closeWithin(t, d, 10*time.Second))
	require.NoError(t, closeWithin(t, d, time.Second), "a second Close")

	d, err = daemon.New(context.Background(), daemon.Config{Listen: "127.0.0.1:0", Storage: daemon.StorageMemory, Log: quiet})
	require.NoError(t, err)
	results := make(chan error, 3)
	for range 3 {
		go func() { results <- d.Close(context.Background()) }()
	}
	for range 3 {
		select {
		case err := <-results:
			require.NoError(t, err)
		case <-time.After(10 * time.Second):
			t.Fatal("concurrent Closes did not all return within 10s")
		}
	}
}

// stuckStore is a store whose writes block until release is closed: a
// disk that stopped answering.
type stuckStore struct {
	store.Store
	entered chan struct{}
	release chan struct{}
}

func (s *stuckStore) Write(ctx context.Context, b *store.Batch) error {
	select {
	case s.entered <- struct{}{}:
	default:
	}
	<-s.release
	return s.Store.Write(ctx, b)
}

// TestCloseBoundedWhenStorageIsStuck (issue 41, point 7): with a queue
// stuck in a storage write, Close still returns, within twice
// ShutdownTimeout, naming what did not finish; a second Close returns the
// same result at once. It used to wait for ever for the queue's loop.
func TestCloseBoundedWhenStorageIsStuck(t *testing.T) {
	mem, err := pebble.OpenMemory()
	require.NoError(t, err)
	s := &stuckStore{Store: mem, entered: make(chan struct{}, 1), release: make(chan struct{})}
	released := false
	release := func() {
		if !released {
			released = true
			close(s.release)
		}
	}
	defer func() {
		release()
		require.Eventually(t, func() bool { return mem.Close() == nil }, 10*time.Second, 10*time.Millisecond)
	}()
	const timeout = 300 * time.Millisecond
	d, err := daemon.New(context.Background(), daemon.Config{Listen: "127.0.0.1:0", Store: s, ShutdownTimeout: timeout, Log: quiet})
	require.NoError(t, err)
	c, err := styx.NewClient(styx.ClientConfig{Endpoint: d.Endpoint()})
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.QueuesCreate(context.Background(), &pb.QueueInfo{QueueName: "q"}))
	produced := make(chan error, 1)
	go func() {
		produced <- c.QueueProduce(context.Background(), &pb.QueueProduceRequest{QueueName: "q", RequestTimeout: "1m",
			Items: []*pb.QueueProduceItem{{Bytes: []byte("a")}}})
	}()
	select {
	case <-s.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the produce never reached the store")
	}

	start := time.Now()
	err = closeWithin(t, d, 10*time.Second)
	require.Less(t, time.Since(start), 2*timeout+time.Second, "Close is bounded by twice ShutdownTimeout")
	require.ErrorContains(t, err, "stopping the queues did not finish within 300ms")
	again := time.Now()
	require.Equal(t, err, closeWithin(t, d, time.Second), "a second Close returns the first's result")
	require.Less(t, time.Since(again), 100*time.Millisecond, "at once")

	release()
	select {
	case err := <-produced:
		require.Error(t, err, "the connection of the stuck produce was closed")
	case <-time.After(10 * time.Second):
		t.Fatal("the stuck produce never returned")
	}
}

// TestBusyPortLeavesNoDataDir (issue 41, point 8): a server whose port (or
// debug port) is taken fails before it opens storage, so it creates no
// data directory; it used to create one and then fail.
func TestBusyPortLeavesNoDataDir(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer busy.Close()
	for _, c := range []struct {
		name string
		cfg  daemon.Config
		want string
	}{
		{"Listen", daemon.Config{Listen: busy.Addr().String()}, "listen on " + busy.Addr().String()},
		{"DebugListen", daemon.Config{Listen: "127.0.0.1:0", DebugListen: busy.Addr().String()}, "debug listen on " + busy.Addr().String()},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "styx-data")
			c.cfg.DataDir, c.cfg.Log = dir, quiet
			_, err := daemon.New(context.Background(), c.cfg)
			require.ErrorContains(t, err, c.want)
			_, err = os.Stat(dir)
			require.ErrorIs(t, err, os.ErrNotExist, "the failed start left %s behind", dir)
		})
	}
	// A start that fails after binding closes the port again.
	dir := t.TempDir()
	d, err := daemon.New(context.Background(), daemon.Config{Listen: "127.0.0.1:0", DataDir: dir, Log: quiet})
	require.NoError(t, err)
	defer func() { require.NoError(t, d.Close(context.Background())) }()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	_, err = daemon.New(context.Background(), daemon.Config{Listen: addr, DataDir: dir, Log: quiet})
	require.ErrorContains(t, err, "is in use by another")
	l, err = net.Listen("tcp", addr)
	require.NoError(t, err, "the failed start released its port")
	require.NoError(t, l.Close())
}

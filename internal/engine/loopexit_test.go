package engine

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/clock"
	"github.com/styxq/styx/internal/store"
)

// workerBackend is panicky with a goroutine of its own, as the embedded
// backend's syncer: started by Open, ended by Stopped.
type workerBackend struct {
	panicky
	stop, exited chan struct{}
}

func newWorkerBackend(recoverPanics bool) *workerBackend {
	return &workerBackend{panicky: panicky{recoverPanics: recoverPanics}, stop: make(chan struct{}), exited: make(chan struct{})}
}

func (b *workerBackend) Open() {
	go func() {
		defer close(b.exited)
		<-b.stop
	}()
}

func (b *workerBackend) Stopped() { close(b.stop) }

// quiet is a logger for loops that panic on purpose.
var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// requireClosed fails unless c is closed within 5s.
func requireClosed(t *testing.T, c <-chan struct{}, msg string) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(5 * time.Second):
		t.Fatal(msg)
	}
}

// TestLoopDiedStopsItsBackend (issue 41): a loop that dies of a panic (its
// recovery panicked too) stops its backend as a Shutdown does, so the
// goroutine the backend started ends; it used to leak, blocked for ever.
func TestLoopDiedStopsItsBackend(t *testing.T) {
	b := newWorkerBackend(true)
	l := NewLoop("dead", clock.Real{})
	l.Log = quiet
	l.Start(b)
	defer l.Shutdown()
	_, err := call(l, "boom")
	require.ErrorIs(t, err, store.ErrUnavailable)
	requireClosed(t, l.done, "the loop did not exit")
	requireClosed(t, b.exited, "the backend's goroutine outlived the loop that died")
	requireClosed(t, l.Context().Done(), "the loop's context is not done once it died")
}

// TestLoopDiedBackendPanicsInStopped: a backend whose Stopped panics after
// the loop died does not take the process down; calls still get 453.
func TestLoopDiedBackendPanicsInStopped(t *testing.T) {
	b := newWorkerBackend(true)
	close(b.stop) // Stopped will panic: close of a closed channel
	l := NewLoop("dead", clock.Real{})
	l.Log = quiet
	var panics int
	l.OnPanic = func(string, any) { panics++ }
	l.Start(b)
	_, err := call(l, "boom")
	require.ErrorIs(t, err, store.ErrUnavailable)
	requireClosed(t, l.done, "the loop did not exit")
	require.Equal(t, 3, panics, "the iteration's panic, its recovery's and Stopped's")
	_, err = call(l, "later")
	require.ErrorIs(t, err, store.ErrUnavailable)
}

// TestLoopContextEndsWithTheLoop: the loop's context is live while the loop
// runs (through its drain) and done once it has exited.
func TestLoopContextEndsWithTheLoop(t *testing.T) {
	b := newWorkerBackend(false)
	l := NewLoop("q", clock.Real{})
	l.Start(b)
	v, err := call(l, "a")
	require.NoError(t, err)
	require.Equal(t, "a", v)
	require.NoError(t, l.Context().Err(), "live while the loop runs")
	l.Shutdown()
	require.Error(t, l.Context().Err(), "done once the loop has exited")
	requireClosed(t, b.exited, "Stopped ran at the shutdown")
}

package engine

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/apierr"
	"github.com/styxq/styx/internal/clock"
	"github.com/styxq/styx/internal/store"
)

// heldBackend answers every request, but its first iteration waits for
// release: it holds the loop the way a slow storage write would.
type heldBackend struct {
	entered chan struct{} // closed when the first iteration starts
	release chan struct{}
	first   bool
}

func (b *heldBackend) Open()                {}
func (b *heldBackend) Stopped()             {}
func (b *heldBackend) NextWake(int64) int64 { return 0 }
func (b *heldBackend) Recover(reqs []*Request, err error) {
	for _, r := range reqs {
		r.Answer(nil, err)
	}
}
func (b *heldBackend) Iterate(_ int64, reqs []*Request, _ bool) {
	if !b.first {
		b.first = true
		close(b.entered)
		<-b.release
	}
	for _, r := range reqs {
		r.Answer("done", nil)
	}
}

// TestLoopOverloaded: a call that finds the queue's request channel full is
// answered 454 at once, naming the queue, and loses nothing: the requests
// already in the channel are all run once the loop goes on (wire contract:
// an overloaded queue answers 454, retry).
func TestLoopOverloaded(t *testing.T) {
	b := &heldBackend{entered: make(chan struct{}), release: make(chan struct{})}
	l := NewLoop("busy", clock.Real{})
	l.Start(b)
	defer l.Shutdown()

	held := make(chan Result, 1)
	require.True(t, l.Offer("held", held))
	<-b.entered // the loop is inside its first iteration, which holds it

	answers := make(chan Result, RequestQueueSize)
	for range RequestQueueSize {
		require.True(t, l.Offer("queued", answers))
	}
	require.Equal(t, RequestQueueSize, l.Pending())

	_, err := l.Call(context.Background(), "one too many", false)
	e, ok := apierr.As(err)
	require.True(t, ok, "%v", err)
	require.Equal(t, apierr.Retry, e.Code)
	require.Contains(t, e.Message, "queue overloaded; 'busy'")
	require.False(t, l.Offer("one too many", answers))

	close(b.release)
	require.Equal(t, "done", (<-held).V)
	for range RequestQueueSize {
		res := <-answers
		require.NoError(t, res.Err)
		require.Equal(t, "done", res.V)
	}
	v, err := l.Call(context.Background(), "after", false)
	require.NoError(t, err)
	require.Equal(t, "done", v)
}

// panicky answers every request with its op, but panics on an iteration
// holding the op "boom" after answering the requests before it; with
// recoverPanics false its Recover panics too (a loop that cannot go on).
type panicky struct {
	mu            sync.Mutex
	recovered     int
	recoverPanics bool
}

func (b *panicky) Open()                {}
func (b *panicky) Stopped()             {}
func (b *panicky) NextWake(int64) int64 { return 0 }
func (b *panicky) Iterate(_ int64, reqs []*Request, _ bool) {
	for _, r := range reqs {
		if r.Op == "boom" {
			panic("injected")
		}
		r.Answer(r.Op, nil)
	}
}
func (b *panicky) Recover(reqs []*Request, err error) {
	b.mu.Lock()
	b.recovered++
	b.mu.Unlock()
	if b.recoverPanics {
		panic("injected again")
	}
	for _, r := range reqs {
		r.Answer(nil, err)
	}
}

// TestLoopPanicFailsItsBatch: a panic inside an iteration never answers
// success for the requests it did not run (the defect of issue 23: callers
// got a nil error, so 200, for work never written). The requests of the
// batch that were answered keep their answer, the others get 453 naming the
// panic, the backend recovers, the hook counts it, and the loop serves on.
func TestLoopPanicFailsItsBatch(t *testing.T) {
	b := &panicky{}
	l := NewLoop("p", clock.Real{})
	var panics []string
	l.OnPanic = func(q string, v any) { panics = append(panics, q) }
	l.Start(b)
	defer l.Shutdown()

	before, boom, after := make(chan Result, 1), make(chan Result, 1), make(chan Result, 1)
	// Offered together, so that they are likely one batch; each is checked
	// on its own either way.
	require.True(t, l.Offer("before", before))
	require.True(t, l.Offer("boom", boom))
	require.True(t, l.Offer("after", after))
	res := <-before
	require.NoError(t, res.Err)
	require.Equal(t, "before", res.V)
	for _, ch := range []chan Result{boom, after} {
		res := <-ch
		if res.Err == nil {
			require.Equal(t, "after", res.V, "only a request that ran may succeed")
			continue
		}
		require.ErrorIs(t, res.Err, store.ErrUnavailable)
		require.Contains(t, res.Err.Error(), "panic: injected")
	}
	v, err := l.Call(context.Background(), "later", false)
	require.NoError(t, err)
	require.Equal(t, "later", v)
	b.mu.Lock()
	require.Equal(t, 1, b.recovered)
	b.mu.Unlock()
	require.Equal(t, []string{"p"}, panics)
}

// TestLoopDiedAnswersErrors: when the loop cannot go on (its recovery
// panicked too), the call that was waiting and every later call get 453;
// none gets a nil error.
func TestLoopDiedAnswersErrors(t *testing.T) {
	b := &panicky{recoverPanics: true}
	l := NewLoop("dead", clock.Real{})
	l.Start(b)
	defer l.Shutdown()
	_, err := l.Call(context.Background(), "boom", false)
	require.ErrorIs(t, err, store.ErrUnavailable)
	require.Contains(t, err.Error(), "queue loop ended")
	_, err = l.Call(context.Background(), "later", false)
	require.ErrorIs(t, err, store.ErrUnavailable)
	require.False(t, l.Offer("offered", make(chan Result, 1)))
	_, err = l.CallLease(context.Background(), "lease", LeaseWait{ClientID: "c", BatchSize: 1})
	require.True(t, errors.Is(err, store.ErrUnavailable), "%v", err)
}

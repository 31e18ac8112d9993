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

// heldBackend answers every request itself (Begin runs no Tx), but its
// first iteration waits for release: it holds the loop the way a slow storage write would.
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
		r.Answer(err)
	}
}
func (b *heldBackend) Begin(_ int64, reqs []*Request, _ bool) (Tx, []*Request, bool) {
	if !b.first {
		b.first = true
		close(b.entered)
		<-b.release
	}
	for _, r := range reqs {
		r.Op.(*testOp).out = "done"
		r.Answer(nil)
	}
	return nil, nil, false
}

// testOp is a request of the loop tests: name is what it asks, out what the
// backend answered.
type testOp struct {
	HousekeepingOp
	name, out string
}

// Run implements Housekeeping (unused: the test backends answer it themselves).
func (*testOp) Run(int64, *Request) (bool, error) { return false, nil }

// offered is a request handed to the loop with its own answer channel.
type offered struct {
	op   *testOp
	done chan error
}

// offer hands a request named name to l, its answer to a channel of its
// own (or to done when given); false when the channel is full.
func offer(l *Loop, name string, done chan error) (offered, bool) {
	if done == nil {
		done = make(chan error, 1)
	}
	o := offered{op: &testOp{name: name}, done: done}
	return o, l.offer(&Request{Ctx: context.Background(), Op: o.op, done: done})
}

// call is Loop.Call with a testOp named name; it returns the backend's out.
func call(l *Loop, name string) (string, error) {
	op := &testOp{name: name}
	err := l.Call(context.Background(), op, false)
	return op.out, err
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

	held, ok := offer(l, "held", nil)
	require.True(t, ok)
	<-b.entered // the loop is inside its first iteration, which holds it

	answers := make(chan error, RequestQueueSize)
	queued := make([]offered, RequestQueueSize)
	for i := range queued {
		queued[i], ok = offer(l, "queued", answers)
		require.True(t, ok)
	}
	require.Equal(t, RequestQueueSize, l.Pending())

	_, err := call(l, "one too many")
	e, ok := apierr.As(err)
	require.True(t, ok, "%v", err)
	require.Equal(t, apierr.Retry, e.Code)
	require.Contains(t, e.Message, "queue overloaded; 'busy'")
	_, ok = offer(l, "one too many", answers)
	require.False(t, ok)

	close(b.release)
	require.NoError(t, <-held.done)
	require.Equal(t, "done", held.op.out)
	for range RequestQueueSize {
		require.NoError(t, <-answers)
	}
	for _, o := range queued {
		require.Equal(t, "done", o.op.out)
	}
	v, err := call(l, "after")
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
func (b *panicky) Begin(_ int64, reqs []*Request, _ bool) (Tx, []*Request, bool) {
	for _, r := range reqs {
		op := r.Op.(*testOp)
		if op.name == "boom" {
			panic("injected")
		}
		op.out = op.name
		r.Answer(nil)
	}
	return nil, nil, false
}
func (b *panicky) Recover(reqs []*Request, err error) {
	b.mu.Lock()
	b.recovered++
	b.mu.Unlock()
	if b.recoverPanics {
		panic("injected again")
	}
	for _, r := range reqs {
		r.Answer(err)
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

	// Offered together, so that they are likely one batch; each is checked
	// on its own either way.
	before, ok1 := offer(l, "before", nil)
	boom, ok2 := offer(l, "boom", nil)
	after, ok3 := offer(l, "after", nil)
	require.True(t, ok1 && ok2 && ok3)
	require.NoError(t, <-before.done)
	require.Equal(t, "before", before.op.out)
	for _, o := range []offered{boom, after} {
		err := <-o.done
		if err == nil {
			require.Equal(t, "after", o.op.out, "only a request that ran may succeed")
			continue
		}
		require.ErrorIs(t, err, store.ErrUnavailable)
		require.Contains(t, err.Error(), "panic: injected")
	}
	v, err := call(l, "later")
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
	_, err := call(l, "boom")
	require.ErrorIs(t, err, store.ErrUnavailable)
	require.Contains(t, err.Error(), "queue loop ended")
	_, err = call(l, "later")
	require.ErrorIs(t, err, store.ErrUnavailable)
	require.False(t, l.Offer(&testOp{name: "offered"}))
	err = l.CallLease(context.Background(), &LeaseWait{ClientID: "c", BatchSize: 1})
	require.True(t, errors.Is(err, store.ErrUnavailable), "%v", err)
}

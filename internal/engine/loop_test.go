package engine

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/apierr"
	"github.com/styxq/styx/internal/clock"
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

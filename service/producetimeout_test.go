package service

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/apierr"
	"github.com/styxq/styx/internal/clock"
	"github.com/styxq/styx/internal/queue"
	pb "github.com/styxq/styx/styxpb"
)

// stuckQueues serves one queue whose Produce waits until release is
// closed, as a produce does on a stalled storage write.
type stuckQueues struct {
	queue.Queues
	q *stuckQueue
}

func (s stuckQueues) Get(string) (queue.Queue, error) { return s.q, nil }

type stuckQueue struct {
	queue.Queue
	release chan struct{}
	done    chan struct{}
}

func (q *stuckQueue) Produce(context.Context, []queue.ProduceItem) error {
	<-q.release
	close(q.done)
	return nil
}

// TestProduceRequestTimeout: a produce's request_timeout bounds how long it
// waits for its queue (issue 50: it was parsed and unused), never below
// MinProduceWait: past it, 453 "request timeout; …" naming the timeout, the
// outcome unknown, while the produce the queue took finishes on its own;
// one answered in time is answered as the queue answers it.
func TestProduceRequestTimeout(t *testing.T) {
	q := &stuckQueue{release: make(chan struct{}), done: make(chan struct{})}
	s := New(stuckQueues{q: q}, nil, clock.Real{})
	req := &pb.QueueProduceRequest{QueueName: "orders", RequestTimeout: "1500ms", Items: []*pb.QueueProduceItem{{Utf8: "x"}}}

	answer := make(chan error, 1)
	go func() { answer <- s.QueueProduce(context.Background(), req) }()
	var err error
	select {
	case err = <-answer:
	case <-time.After(10 * time.Second):
		t.Fatal("the produce waited past its request_timeout of 1.5s")
	}
	e, ok := apierr.As(err)
	require.True(t, ok, "%v", err)
	require.Equal(t, apierr.Unavailable, e.Code)
	require.Equal(t, "request timeout; the produce was not done within 1.5s (its request_timeout, at least 1s): its items may or may not "+
		"be stored (a retry with the same deduplication_id values stores them once)", e.Message)
	select {
	case <-q.done:
		t.Fatal("the produce was answered before its queue finished it")
	default:
	}
	close(q.release)
	<-q.done // the queue's produce finishes, unhurried

	// A shorter request_timeout waits MinProduceWait.
	q = &stuckQueue{release: make(chan struct{}), done: make(chan struct{})}
	s = New(stuckQueues{q: q}, nil, clock.Real{})
	req.RequestTimeout = "10ms"
	start := time.Now()
	err = s.QueueProduce(context.Background(), req)
	require.GreaterOrEqual(t, time.Since(start), MinProduceWait)
	require.ErrorContains(t, err, "request timeout; the produce was not done within 1s (its request_timeout, at least 1s):")
	close(q.release)
	<-q.done

	// In time: the queue's answer.
	q = &stuckQueue{release: make(chan struct{}), done: make(chan struct{})}
	close(q.release)
	s = New(stuckQueues{q: q}, nil, clock.Real{})
	req.RequestTimeout = "1m"
	require.NoError(t, s.QueueProduce(context.Background(), req))

	// Validated as before, with Querator's messages.
	req.RequestTimeout = "16m"
	require.EqualError(t, s.QueueProduce(context.Background(), req),
		"request timeout is invalid; maximum timeout is '15m' but '16m0s' was requested")
}

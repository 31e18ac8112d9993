package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"os/signal"
	"syscall"
	"testing"
	"time"

	styx "github.com/styxq/styx"
	pb "github.com/styxq/styx/styxpb"
	"github.com/styxq/styx/styxtest"
	"github.com/styxq/styx/worker"
)

// A worker consuming a queue until SIGINT or SIGTERM, then shutting down
// gracefully: running handlers finish, unstarted items are released.
func Example() {
	c, err := styx.NewClient(styx.ClientConfig{Endpoint: "http://127.0.0.1:2319"})
	if err != nil {
		log.Fatal(err)
	}
	w, err := worker.New(c, worker.Config{
		Queue:       "emails",
		Concurrency: 8,
		Handler: worker.HandlerFunc(func(ctx context.Context, it *worker.Item) error {
			return send(ctx, it.Payload) // nil: completed; an error: retried with backoff
		}),
	})
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := w.Run(ctx); err != nil {
		log.Fatal(err)
	}
}

func send(context.Context, []byte) error { return nil }

// A handler that dead-letters what can never succeed and retries the rest:
// a malformed payload goes to the dead-letter queue at once with the parse
// error; a rate-limited call comes back when the remote says; any other
// error is retried after the backoff until max_attempts, then dead-lettered
// with its attempt history.
func ExampleDead() {
	type order struct {
		ID     int64 `json:"order_id"`
		Amount int64 `json:"amount_cents"`
	}
	var errRateLimited = errors.New("rate limited")
	charge := func(context.Context, order) (retryIn time.Duration, err error) { return 0, nil }

	handler := worker.HandlerFunc(func(ctx context.Context, it *worker.Item) error {
		var o order
		if err := json.Unmarshal(it.Payload, &o); err != nil {
			return worker.Dead(fmt.Errorf("parse order: %w", err))
		}
		retryIn, err := charge(ctx, o)
		if errors.Is(err, errRateLimited) {
			return worker.RetryAfter(retryIn, err)
		}
		return err
	})
	_ = handler
}

// Testing a handler against a real server with styxtest: produce, run the
// worker, and assert on what the queue and its dead-letter queue hold.
func ExampleDead_test() {
	testHandler := func(t *testing.T) {
		c := styxtest.NewServer(t)
		styxtest.CreateQueue(t, c, &pb.QueueInfo{QueueName: "orders-dead"})
		styxtest.CreateQueue(t, c, &pb.QueueInfo{QueueName: "orders", DeadQueue: "orders-dead", MaxAttempts: 3})
		err := c.QueueProduce(context.Background(), &pb.QueueProduceRequest{QueueName: "orders",
			Items: []*pb.QueueProduceItem{{Bytes: []byte(`{not json`)}}})
		if err != nil {
			t.Fatal(err)
		}
		w, err := worker.New(c, worker.Config{Queue: "orders", Handler: worker.HandlerFunc(
			func(ctx context.Context, it *worker.Item) error {
				var v map[string]any
				if err := json.Unmarshal(it.Payload, &v); err != nil {
					return worker.Dead(err)
				}
				return nil
			})})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() { _ = w.Run(ctx) }()
		for {
			dead, err := c.DeadList(ctx, &pb.DeadListRequest{QueueName: "orders-dead"})
			if err != nil {
				t.Fatal(err)
			}
			if len(dead.Items) == 1 {
				if dead.Items[0].DeadReason != "explicit" {
					t.Errorf("dead reason %q", dead.Items[0].DeadReason)
				}
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	_ = testHandler // in a _test.go file: func TestHandler(t *testing.T) { ... }
}

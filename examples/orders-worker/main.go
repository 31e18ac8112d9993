// Command orders-worker is a runnable example of the worker library: it
// consumes the queue "orders" (creating it, with the dead-letter queue
// "orders-dead" and max_attempts 3, if it does not exist), parses each item
// as a JSON order and "charges" it.
//
//   - A malformed order can never succeed: it is dead-lettered at once with
//     the parse error (worker.Dead).
//   - A charge that fails transiently (the fake payment gateway times out on
//     the first attempt of orders whose card is "flaky") is retried after
//     the worker's backoff; an order whose card is "declined" fails every
//     attempt and is dead-lettered after the third, with its history.
//
// Run a server (go run ./cmd/styx server), then:
//
//	go run ./examples/orders-worker
//	styx produce orders '{"order_id":1,"amount_cents":1250,"card":"visa"}'
//
// It stops gracefully on Ctrl-C. STYX_ENDPOINT overrides the server address.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	styx "github.com/styxq/styx"
	pb "github.com/styxq/styx/styxpb"
	"github.com/styxq/styx/worker"
)

// order is the payload of an item of "orders".
type order struct {
	ID     int64  `json:"order_id"`
	Amount int64  `json:"amount_cents"`
	Card   string `json:"card"`
}

// charge is a fake payment gateway.
func charge(ctx context.Context, o order, attempt int32) error {
	switch {
	case o.Card == "flaky" && attempt == 1:
		return errors.New("payment gateway: timeout after 2s")
	case o.Card == "declined":
		return fmt.Errorf("payment gateway: card declined for order %d", o.ID)
	}
	return nil
}

func handle(ctx context.Context, it *worker.Item) error {
	var o order
	if err := json.Unmarshal(it.Payload, &o); err != nil {
		return worker.Dead(fmt.Errorf("parse order: %w", err))
	}
	if o.ID == 0 || o.Amount <= 0 {
		return worker.Dead(fmt.Errorf("invalid order: order_id and a positive amount_cents are required: %s", it.Payload))
	}
	if err := charge(ctx, o, it.Attempts); err != nil {
		return err
	}
	fmt.Printf("charged order %d: %d.%02d (attempt %d)\n", o.ID, o.Amount/100, o.Amount%100, it.Attempts)
	return nil
}

func main() {
	endpoint := os.Getenv("STYX_ENDPOINT")
	if endpoint == "" {
		endpoint = styx.DefaultEndpoint
	}
	// STYX_API_KEY (a key with scope consume for a server run with
	// --auth), STYX_CA_FILE (for an https:// endpoint), and STYX_CERT_FILE
	// with STYX_KEY_FILE (a client certificate for a server run with
	// --tls-client-ca) are optional, as they are for the styx CLI.
	c, err := styx.NewClient(styx.ClientConfig{Endpoint: endpoint, APIKey: os.Getenv("STYX_API_KEY"), CAFile: os.Getenv("STYX_CA_FILE"),
		CertFile: os.Getenv("STYX_CERT_FILE"), KeyFile: os.Getenv("STYX_KEY_FILE")})
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := ensureQueues(ctx, c); err != nil {
		log.Fatal(err)
	}
	w, err := worker.New(c, worker.Config{
		Queue:       "orders",
		Handler:     worker.HandlerFunc(handle),
		Concurrency: 4,
		// Short backoffs so the example shows the retry at once; the default
		// starts at 0.5–1s and doubles per attempt.
		Backoff: func(attempts int32) time.Duration { return time.Duration(attempts) * 200 * time.Millisecond },
		Logger:  slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})),
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("consuming orders; Ctrl-C to stop")
	if err := w.Run(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("stopped")
}

// ensureQueues creates orders-dead and orders unless they exist.
func ensureQueues(ctx context.Context, c *styx.Client) error {
	for _, q := range []*pb.QueueInfo{
		{QueueName: "orders-dead"},
		{QueueName: "orders", DeadQueue: "orders-dead", MaxAttempts: 3},
	} {
		if _, err := c.QueuesInfo(ctx, &pb.QueuesInfoRequest{QueueName: q.QueueName}); err == nil {
			continue
		}
		if err := c.QueuesCreate(ctx, q); err != nil && !styx.IsQueueExists(err) {
			return fmt.Errorf("create queue %s: %w", q.QueueName, err)
		}
	}
	return nil
}

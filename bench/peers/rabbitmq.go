package main

// RabbitMQ quorum queues through github.com/rabbitmq/amqp091-go: publisher
// confirms and manual acks.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// rabbit is the RabbitMQ peer; cfg.URL is an amqp:// URL.
type rabbit struct {
	cfg config
}

func (r *rabbit) ping(context.Context) error {
	conn, err := amqp.Dial(r.cfg.URL)
	if err != nil {
		return err
	}
	return conn.Close()
}

func (r *rabbit) run(ctx context.Context, w *window) (string, error) {
	conn, err := amqp.Dial(r.cfg.URL)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return "", err
	}
	queue := fmt.Sprintf("styx-bench-%s-%d-%d", r.cfg.Workload, r.cfg.Batch, time.Now().UnixNano())
	if _, err := ch.QueueDeclare(queue, true, false, false, false, amqp.Table{"x-queue-type": "quorum"}); err != nil {
		return "", fmt.Errorf("declare %s: %w", queue, err)
	}
	defer func() { _, _ = ch.QueueDelete(queue, false, false, false) }()

	var wg sync.WaitGroup
	errs := make(chan error, r.cfg.Clients)
	for i := 0; i < r.cfg.Clients; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := r.client(ctx, w, queue); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return "", err
	}
	desc := "quorum queue, persistent messages, publisher confirms"
	if r.cfg.Workload == "cycle" {
		desc += fmt.Sprintf("; consumer with prefetch %d, manual multiple ack", r.cfg.Batch)
	}
	return desc, nil
}

// client is one closed-loop client with a connection of its own: a channel
// in confirm mode to publish on and, for cycle, a consuming channel with a
// prefetch of one batch.
func (r *rabbit) client(ctx context.Context, w *window, queue string) error {
	conn, err := amqp.Dial(r.cfg.URL)
	if err != nil {
		return err
	}
	defer conn.Close()
	pub, err := conn.Channel()
	if err != nil {
		return err
	}
	if err := pub.Confirm(false); err != nil {
		return err
	}
	var deliveries <-chan amqp.Delivery
	if r.cfg.Workload == "cycle" {
		cons, err := conn.Channel()
		if err != nil {
			return err
		}
		if err := cons.Qos(r.cfg.Batch, 0, false); err != nil {
			return err
		}
		if deliveries, err = cons.Consume(queue, "", false, false, false, false, nil); err != nil {
			return err
		}
	}
	bodies := payloads(r.cfg.Batch, r.cfg.Payload)
	confirms := make([]*amqp.DeferredConfirmation, len(bodies))
	for w.running(ctx) {
		if err := r.publish(ctx, pub, queue, bodies, confirms); err != nil {
			w.fail(ctx, "publish", err)
			if pub.IsClosed() {
				return err
			}
			continue
		}
		if r.cfg.Workload == "produce" {
			w.done(len(bodies))
			continue
		}
		// Receive as many as were published, waiting at most 1 s, and ack
		// them with one multiple ack of the last.
		var last *amqp.Delivery
		n := 0
		timeout := time.NewTimer(time.Second)
	receive:
		for n < len(bodies) {
			select {
			case d, ok := <-deliveries:
				if !ok {
					timeout.Stop()
					return errors.New("deliveries closed")
				}
				last = &d
				n++
			case <-timeout.C:
				break receive
			case <-ctx.Done():
				break receive
			}
		}
		timeout.Stop()
		if n == 0 {
			continue
		}
		if err := last.Ack(true); err != nil {
			w.fail(ctx, "ack", err)
			continue
		}
		w.done(n)
	}
	return nil
}

// publish sends bodies to queue as persistent messages and waits until the
// server has confirmed every one.
func (r *rabbit) publish(ctx context.Context, ch *amqp.Channel, queue string, bodies [][]byte, confirms []*amqp.DeferredConfirmation) error {
	for i, b := range bodies {
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", queue, false, false, amqp.Publishing{
			DeliveryMode: amqp.Persistent, ContentType: "application/octet-stream", Body: b,
		})
		if err != nil {
			return err
		}
		confirms[i] = dc
	}
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	for _, dc := range confirms[:len(bodies)] {
		ok, err := dc.WaitContext(ctx)
		if err != nil {
			return err
		}
		if !ok {
			return errors.New("publish nacked")
		}
	}
	return nil
}

package main

// NATS JetStream through github.com/nats-io/nats.go/jetstream: a file-backed
// work-queue stream, publish acks, a durable pull consumer with explicit
// acks, each ack confirmed (AckSync).

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// natsJS is the NATS JetStream peer; cfg.URL is a nats:// URL.
type natsJS struct {
	cfg config
}

func (n *natsJS) ping(ctx context.Context) error {
	nc, err := nats.Connect(n.cfg.URL, nats.Timeout(2*time.Second))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	_, err = js.AccountInfo(ctx)
	return err
}

func (n *natsJS) run(ctx context.Context, w *window) (string, error) {
	nc, err := nats.Connect(n.cfg.URL)
	if err != nil {
		return "", err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return "", err
	}
	name := fmt.Sprintf("STYXBENCH_%s_%d_%d", n.cfg.Workload, n.cfg.Batch, time.Now().UnixNano())
	subject := "styxbench." + name
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: name, Subjects: []string{subject}, Storage: jetstream.FileStorage,
		Retention: jetstream.WorkQueuePolicy, Replicas: 1,
	}); err != nil {
		return "", fmt.Errorf("create stream: %w", err)
	}
	defer func() { _ = js.DeleteStream(context.WithoutCancel(ctx), name) }()
	if n.cfg.Workload == "cycle" {
		if _, err := js.CreateOrUpdateConsumer(ctx, name, jetstream.ConsumerConfig{
			Durable: "workers", AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second, MaxAckPending: -1,
		}); err != nil {
			return "", fmt.Errorf("create consumer: %w", err)
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, n.cfg.Clients)
	for i := 0; i < n.cfg.Clients; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := n.client(ctx, w, name, subject); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return "", err
	}
	desc := "file storage, work-queue retention, 1 replica, PublishAsync and every publish ack awaited"
	if n.cfg.Workload == "cycle" {
		desc += fmt.Sprintf("; pull consumer (Messages, PullMaxMessages %d), explicit acks, each AckSync", n.cfg.Batch)
	}
	return desc, nil
}

// client is one closed-loop client with a connection of its own.
func (n *natsJS) client(ctx context.Context, w *window, stream, subject string) error {
	nc, err := nats.Connect(n.cfg.URL)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	var it jetstream.MessagesContext
	if n.cfg.Workload == "cycle" {
		cons, err := js.Consumer(ctx, stream, "workers")
		if err != nil {
			return err
		}
		if it, err = cons.Messages(jetstream.PullMaxMessages(n.cfg.Batch)); err != nil {
			return err
		}
		defer it.Stop()
	}
	bodies := payloads(n.cfg.Batch, n.cfg.Payload)
	futures := make([]jetstream.PubAckFuture, len(bodies))
	msgs := make([]jetstream.Msg, 0, len(bodies))
	for w.running(ctx) {
		if err := publishAll(ctx, js, subject, bodies, futures); err != nil {
			w.fail(ctx, "publish", err)
			continue
		}
		if n.cfg.Workload == "produce" {
			w.done(len(bodies))
			continue
		}
		// Receive as many as were published, waiting at most 1 s.
		msgs = msgs[:0]
		deadline := time.Now().Add(time.Second)
		for len(msgs) < len(bodies) && ctx.Err() == nil {
			left := time.Until(deadline)
			if left <= 0 {
				break
			}
			m, err := it.Next(jetstream.NextMaxWait(left))
			if err != nil {
				if !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, context.DeadlineExceeded) {
					w.fail(ctx, "next", err)
				}
				break
			}
			msgs = append(msgs, m)
		}
		if len(msgs) == 0 {
			continue
		}
		// Ack every message and wait for every confirmation.
		var acked sync.WaitGroup
		var failed error
		var mu sync.Mutex
		actx, cancel := context.WithTimeout(ctx, opTimeout)
		for _, m := range msgs {
			acked.Add(1)
			go func() {
				defer acked.Done()
				if err := m.DoubleAck(actx); err != nil {
					mu.Lock()
					failed = err
					mu.Unlock()
				}
			}()
		}
		acked.Wait()
		cancel()
		if failed != nil {
			w.fail(ctx, "ack", failed)
			continue
		}
		w.done(len(msgs))
	}
	return nil
}

// publishAll publishes bodies to subject asynchronously and waits for every
// publish ack.
func publishAll(ctx context.Context, js jetstream.JetStream, subject string, bodies [][]byte, futures []jetstream.PubAckFuture) error {
	for i, b := range bodies {
		f, err := js.PublishAsync(subject, b)
		if err != nil {
			return err
		}
		futures[i] = f
	}
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	for _, f := range futures[:len(bodies)] {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/styxq/styx"
	pb "github.com/styxq/styx/styxpb"
)

// Produce batching: a request carries at most maxBatch items (the server's
// limit) and is sent early once its payloads reach maxBatchBytes, well under
// the server's 64 MiB request limit.
const (
	maxBatch      = 1000
	maxBatchBytes = 8 << 20
)

func (a *app) produceCmd() *cobra.Command {
	var (
		kind, reference, encoding string
		enqueueAt                 string
		file                      string
		group                     string
	)
	cmd := &cobra.Command{
		Use:   "produce QUEUE [PAYLOAD...]",
		Short: "Add items to a queue: one per PAYLOAD argument and one per line of --file",
		Long: `Add items to a queue. Each PAYLOAD argument is one item, and so is each
non-empty line of --file ('-' reads stdin); arguments come first. Items are
sent in batches of at most 1000 per request; each batch is acknowledged once
durable. If a batch fails, the batches before it stay produced.`,
		Args: minArgs(1, "a QUEUE and PAYLOADs"),
		RunE: func(cmd *cobra.Command, args []string) error {
			queue, payloads := args[0], args[1:]
			if len(payloads) == 0 && file == "" {
				return errors.New("nothing to produce: give PAYLOAD arguments or --file")
			}
			tmpl := &pb.QueueProduceItem{Kind: kind, Reference: reference, Encoding: encoding, Group: group}
			if enqueueAt != "" {
				at, err := time.Parse(time.RFC3339, enqueueAt)
				if err != nil {
					return fmt.Errorf("--enqueue-at: %q is not an RFC 3339 time such as 2026-01-02T15:04:05Z", enqueueAt)
				}
				tmpl.EnqueueAt = timestamppb.New(at)
			}
			return a.withClient(cmd, func(c *styx.Client) error {
				p := &producer{ctx: cmd.Context(), client: c, queue: queue, tmpl: tmpl}
				for _, s := range payloads {
					if err := p.add([]byte(s)); err != nil {
						return err
					}
				}
				if file != "" {
					if err := a.produceFile(cmd, p, file); err != nil {
						return err
					}
				}
				if err := p.flush(); err != nil {
					return err
				}
				return a.done("produced %s to %s", plural(p.sent, "item"), queue)
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&kind, "kind", "", "kind of every item, for consumers to dispatch on")
	f.StringVar(&reference, "reference", "", "reference of every item, free text such as a request id")
	f.StringVar(&encoding, "encoding", "", "encoding of every payload, such as application/json")
	f.StringVar(&enqueueAt, "enqueue-at", "", "schedule the items for this RFC 3339 time instead of now")
	f.StringVar(&file, "file", "", "read payloads from this file, one per line ('-' is stdin; empty lines are skipped)")
	f.StringVar(&group, "group", "", "group of every item (on an ordered queue, a group's items are leased in order; see docs/groups.md)")
	return cmd
}

// produceFile adds one item per non-empty line of the file at path, or of
// stdin for "-".
func (a *app) produceFile(cmd *cobra.Command, p *producer, path string) error {
	var r io.Reader = cmd.InOrStdin()
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer func() { _ = f.Close() }()
		r = f
	}
	br := bufio.NewReader(r)
	for {
		line, err := br.ReadBytes('\n')
		line = bytes.TrimSuffix(bytes.TrimSuffix(line, []byte("\n")), []byte("\r"))
		if len(line) > 0 {
			if aerr := p.add(line); aerr != nil {
				return aerr
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read %s: %w", path, err)
		}
	}
}

// producer sends items in batches.
type producer struct {
	ctx    context.Context
	client *styx.Client
	queue  string
	// tmpl holds the fields every item shares.
	tmpl *pb.QueueProduceItem

	batch []*pb.QueueProduceItem
	bytes int
	// sent counts the items acknowledged so far.
	sent int
}

// add queues one item, sending the batch when it is full.
func (p *producer) add(payload []byte) error {
	if len(p.batch) == maxBatch || (len(p.batch) > 0 && p.bytes+len(payload) > maxBatchBytes) {
		if err := p.flush(); err != nil {
			return err
		}
	}
	it := &pb.QueueProduceItem{
		Kind: p.tmpl.Kind, Reference: p.tmpl.Reference, Encoding: p.tmpl.Encoding, EnqueueAt: p.tmpl.EnqueueAt, Group: p.tmpl.Group,
		Bytes: bytes.Clone(payload),
	}
	p.batch = append(p.batch, it)
	p.bytes += len(payload)
	return nil
}

// flush sends the batch, if any.
func (p *producer) flush() error {
	if len(p.batch) == 0 {
		return nil
	}
	if err := p.client.QueueProduce(p.ctx, &pb.QueueProduceRequest{QueueName: p.queue, Items: p.batch}); err != nil {
		if p.sent > 0 {
			return fmt.Errorf("after %s were produced: %w", plural(p.sent, "item"), err)
		}
		return err
	}
	p.sent += len(p.batch)
	p.batch, p.bytes = nil, 0
	return nil
}

package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/styxq/styx"
	pb "github.com/styxq/styx/styxpb"
)

// movePoll is how often styx queues move reads the move's progress.
const movePoll = 500 * time.Millisecond

func (a *app) queuesMoveCmd() *cobra.Command {
	var cluster string
	cmd := &cobra.Command{
		Use:   "move NAME --cluster CLUSTER",
		Short: "Move a queue with everything in it to another PostgreSQL cluster",
		Long: `Move a queue, with its items, dead items, histories and deduplication ids, to
another PostgreSQL cluster of a server run over several (queues.move; ADR
0023). The queue answers 453 queue_moving while its items are copied (clients
retry; nothing is lost or doubled, and a lease taken before keeps its id and
deadline), then serves from its new cluster on every node. The progress
(items copied of the total, read from queues.info every half second) goes to
stderr. If the command is stopped, or the node that moves the queue dies, the
move goes on, or is finished by another node; running the command again waits
for it. Needs the admin scope.`,
		Args: exactArgs(1, "a queue NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if cluster == "" {
				return fmt.Errorf("--cluster is required: the cluster to move queue %s to", args[0])
			}
			return a.withClient(cmd, func(c *styx.Client) error {
				return a.moveQueue(cmd.Context(), c, args[0], cluster)
			})
		},
	}
	cmd.Flags().StringVar(&cluster, "cluster", "", "the PostgreSQL cluster to move the queue to (required)")
	return cmd
}

// moveQueue calls queues.move and, while it runs, shows the move's
// progress from queues.info.
func (a *app) moveQueue(ctx context.Context, c *styx.Client, name, cluster string) error {
	type result struct {
		res *pb.QueuesMoveResponse
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := c.QueuesMove(ctx, &pb.QueuesMoveRequest{QueueName: name, Cluster: cluster})
		done <- result{res, err}
	}()
	t := time.NewTicker(movePoll)
	defer t.Stop()
	last := ""
	for {
		select {
		case r := <-done:
			if r.err != nil {
				return r.err
			}
			if a.json {
				return writeJSON(a.stdout, r.res)
			}
			if r.res.ItemsMoved == 0 && r.res.FromCluster == r.res.ToCluster {
				return a.done("queue %s is on cluster %s already", name, r.res.ToCluster)
			}
			return a.done("moved queue %s from cluster %s to %s: %d items", name, r.res.FromCluster, r.res.ToCluster, r.res.ItemsMoved)
		case <-t.C:
			info, err := c.QueuesInfo(ctx, &pb.QueuesInfoRequest{QueueName: name})
			if err != nil || info.Move == nil {
				continue // the info is progress only: the move's answer decides
			}
			line := fmt.Sprintf("move: queue %s to cluster %s: %d of %d items copied", name, info.Move.Cluster,
				info.Move.ItemsCopied, info.Move.ItemsTotal)
			if line != last {
				last = line
				_, _ = fmt.Fprintln(a.stderr, line)
			}
		}
	}
}

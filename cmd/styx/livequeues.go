package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/styxq/styx"
	pb "github.com/styxq/styx/styxpb"
)

// Acting on a live queue (issue 49): styx queues pause, resume and clear.

func (a *app) queuesPauseCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "pause NAME",
		Short: "Pause a queue's consumption: leases wait and get nothing; produces go on",
		Long: `Pause a queue's consumption (queues.pause). While it is paused, its leases
(styx lease, workers, SQS ReceiveMessage) wait and get nothing: a long poll
waits until its request timeout and then answers as for an empty queue.
Produces go on, and so do the completes, retries and renewals of the leases
already held, lease expiry and dead-letter moves. The pause is stored with the
queue: it survives restarts, and every PostgreSQL node honours it within a
second. styx queues resume NAME ends it. Needs the admin scope.`,
		Args: exactArgs(1, "a queue NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withClient(cmd, func(c *styx.Client) error {
				info, err := c.QueuesPause(cmd.Context(), &pb.QueuesPauseRequest{QueueName: args[0]})
				if err != nil {
					return err
				}
				if a.json {
					return writeJSON(a.stdout, info)
				}
				return a.done("paused queue %s since %s: leases wait and get nothing until styx queues resume %s",
					info.QueueName, formatTime(info.PausedAt), info.QueueName)
			})
		},
	}
}

func (a *app) queuesResumeCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "resume NAME",
		Short: "Resume a paused queue's consumption",
		Long: `Resume a queue paused by styx queues pause (queues.resume): its waiting leases
are served at once. Resuming a running queue changes nothing. Needs the admin
scope.`,
		Args: exactArgs(1, "a queue NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withClient(cmd, func(c *styx.Client) error {
				info, err := c.QueuesResume(cmd.Context(), &pb.QueuesPauseRequest{QueueName: args[0]})
				if err != nil {
					return err
				}
				if a.json {
					return writeJSON(a.stdout, info)
				}
				return a.done("resumed queue %s: leases get its items again", info.QueueName)
			})
		},
	}
}

func (a *app) queuesClearCmd() *cobra.Command {
	var ready, scheduled, all, dryRun, yes bool
	cmd := &cobra.Command{
		Use:   "clear NAME (--ready | --scheduled | --all) [--dry-run]",
		Short: "Remove a queue's ready, scheduled or all items (queue.clear)",
		Long: `Remove items from a queue (queue.clear): --ready its ready items (not the
leased or scheduled ones), --scheduled its scheduled items, --all every item,
leased ones included (their consumers' completes then fail). --ready and
--scheduled may go together.

--dry-run removes nothing: it says how many items the clear would remove now,
by state ("would remove N items (R ready, S scheduled, L leased)"), and needs
only the read scope. Without --dry-run or --yes, the command first shows the
same count and asks "Remove N items ... from queue NAME? [y/N]" on stdin; any
answer but y or yes aborts (exit status 1). The clear itself needs the admin
scope.`,
		Args: exactArgs(1, "a queue NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !ready && !scheduled && !all {
				return fmt.Errorf("%s: say what to clear: --ready, --scheduled or --all; usage: %s", cmd.CommandPath(), cmd.UseLine())
			}
			req := &pb.QueueClearRequest{QueueName: args[0], Queue: ready || all, Scheduled: scheduled || all, Destructive: all}
			return a.withClient(cmd, func(c *styx.Client) error {
				if dryRun || !yes {
					n, err := c.QueueClearDryRun(cmd.Context(), req)
					if err != nil {
						return err
					}
					if dryRun {
						if a.json {
							return writeJSON(a.stdout, n)
						}
						return a.done("would remove %s from queue %s; nothing removed (dry run)", clearCounts(n), req.QueueName)
					}
					ok, err := confirm(cmd.InOrStdin(), a.stderr, fmt.Sprintf("Remove %s from queue %s? [y/N] ", clearCounts(n), req.QueueName))
					if err != nil {
						return err
					}
					if !ok {
						return errors.New("aborted: nothing removed")
					}
				}
				if err := c.QueueClear(cmd.Context(), req); err != nil {
					return err
				}
				return a.done("cleared queue %s (%s)", req.QueueName, clearWhat(req))
			})
		},
	}
	cmd.Flags().BoolVar(&ready, "ready", false, "remove the ready items (not leased, not scheduled)")
	cmd.Flags().BoolVar(&scheduled, "scheduled", false, "remove the scheduled items")
	cmd.Flags().BoolVar(&all, "all", false, "remove every item, leased ones included")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "remove nothing: say how many items the clear would remove")
	cmd.Flags().BoolVar(&yes, "yes", false, "do not show the count and ask for confirmation")
	return cmd
}

// clearCounts words a clear's dry run: "N items (R ready, S scheduled, L
// leased)", the states it would not touch left out.
func clearCounts(n *pb.QueueClearDryRunResponse) string {
	var parts []string
	for _, c := range []struct {
		n    int64
		word string
	}{{n.Ready, "ready"}, {n.Scheduled, "scheduled"}, {n.Leased, "leased"}} {
		if c.n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", c.n, c.word))
		}
	}
	s := plural(int(n.Total), "item")
	if len(parts) > 0 {
		s += " (" + strings.Join(parts, ", ") + ")"
	}
	return s
}

// clearWhat names what a clear request removes.
func clearWhat(req *pb.QueueClearRequest) string {
	switch {
	case req.Destructive:
		return "every item"
	case req.Queue && req.Scheduled:
		return "ready and scheduled items"
	case req.Queue:
		return "ready items"
	}
	return "scheduled items"
}

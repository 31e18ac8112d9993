package main

import (
	"strings"

	"github.com/spf13/cobra"

	"github.com/styxq/styx"
	pb "github.com/styxq/styx/styxpb"
)

// activityCmd is `styx activity [QUEUE]`: the activity log (issue 49).
func (a *app) activityCmd() *cobra.Command {
	var (
		pivot string
		limit int32
	)
	cmd := &cobra.Command{
		Use:   "activity [QUEUE]",
		Short: "Show who changed a queue or its items, and when: deletes, redrives, edits, pauses, newest first",
		Long: `Show the activity log, newest first: the audited calls that changed
QUEUE or its items (a dead-letter queue's deletes, redrives and edits; a
queue's creation, changes, pauses, clears and deletion…), each with when it
was answered, the API key that made it (- without --auth), the call, and
what it did (deleted 6; task r-…, matched 40). Without QUEUE, every queue
the API key covers. The server keeps the records in its store (on
PostgreSQL, every node's) for 30 days, at most the newest 10,000; a
deleted queue's records stay. Needs the read scope. When more records may
follow, the --pivot to continue from is printed on stderr. --json prints
one record per line.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := &pb.ActivityListRequest{Pivot: pivot, Limit: limit}
			if len(args) == 1 {
				req.QueueName = args[0]
			}
			return a.withClient(cmd, func(c *styx.Client) error {
				res, err := c.ActivityList(cmd.Context(), req)
				if err != nil {
					return err
				}
				if a.json {
					for _, r := range res.Records {
						if err := writeJSON(a.stdout, r); err != nil {
							return err
						}
					}
				} else {
					t := newTable(a.stdout, "TIME", "KEY", "CALL", "QUEUE", "WHAT")
					for _, r := range res.Records {
						call := r.Op
						if r.Action != "" {
							call += " (SQS " + r.Action + ")"
						}
						t.row(r.At.AsTime().UTC().Format("2006-01-02T15:04:05Z"), orDash(r.KeyName), call, orDash(r.QueueName),
							orDash(activityDetails(r.Details)))
					}
					if err := t.flush(); err != nil {
						return err
					}
				}
				if res.NextPivot != "" {
					_, _ = a.stderr.Write([]byte("more records may follow: --pivot " + res.NextPivot + "\n"))
				}
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&pivot, "pivot", "", "continue after this record (the pivot a previous page printed)")
	cmd.Flags().Int32Var(&limit, "limit", 0, "most records to show, 1 to 1000 (default 100)")
	return a.addClientFlags(cmd)
}

// activityDetails is what an activity record's call did, on one line
// ("deleted 6, task r-1, matched 40").
func activityDetails(ds []*pb.ActivityDetail) string {
	parts := make([]string, 0, len(ds))
	for _, d := range ds {
		if d.Name == "dry_run" && d.Value == "false" {
			continue // every stored redrive ran
		}
		parts = append(parts, d.Name+" "+d.Value)
	}
	return strings.Join(parts, ", ")
}

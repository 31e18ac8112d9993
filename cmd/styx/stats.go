package main

import (
	"fmt"
	"maps"
	"slices"

	"github.com/spf13/cobra"

	"github.com/styxq/styx"
	pb "github.com/styxq/styx/styxpb"
)

func (a *app) statsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "stats QUEUE",
		Short: "Show a queue's per-partition totals",
		Long: `Show a queue's per-partition totals: items stored (TOTAL, which includes
leased and scheduled items), leased, scheduled, failures, and the average
age of all and of leased items. Below the table: consumers waiting for a
lease and items in flight; the consumers (client ids) that leased in the
last 5 minutes or hold leases, with their API key, the leases they hold,
the items they were given and when they last asked; for a dead-letter
queue, the dead items it holds by dead reason and by source queue, and a
warning when some of them expire within a day (the end of their retention,
the queue's expire timeout counted from when each died).`,
		Args: exactArgs(1, "a QUEUE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withClient(cmd, func(c *styx.Client) error {
				res, err := c.QueueStats(cmd.Context(), &pb.QueueStatsRequest{QueueName: args[0]})
				if err != nil {
					return err
				}
				if a.json {
					return writeJSON(a.stdout, res)
				}
				// The queue's cluster, on a server over several PostgreSQL
				// clusters (ADR 0023); nothing otherwise.
				if info, err := c.QueuesInfo(cmd.Context(), &pb.QueuesInfoRequest{QueueName: args[0]}); err == nil && info.Cluster != "" {
					_, _ = fmt.Fprintf(a.stdout, "cluster: %s\n\n", info.Cluster)
				}
				t := newTable(a.stdout, "PARTITION", "TOTAL", "LEASED", "SCHEDULED", "FAILURES", "AVG-AGE", "AVG-LEASED-AGE")
				var leaseWaiting, inFlight int32
				for _, lq := range res.LogicalQueues {
					leaseWaiting += lq.LeaseWaiting
					inFlight += lq.InFlight
					for _, p := range lq.Partitions {
						t.row(fmt.Sprint(p.Partition), fmt.Sprint(p.Total), fmt.Sprint(p.TotalLeased), fmt.Sprint(p.Scheduled),
							fmt.Sprint(p.Failures), durationText(p.AverageAge), durationText(p.AverageLeasedAge))
					}
				}
				if err := t.flush(); err != nil {
					return err
				}
				if _, err = fmt.Fprintf(a.stdout, "\nlease waiting: %d  in flight: %d\n", leaseWaiting, inFlight); err != nil {
					return err
				}
				if len(res.Consumers) > 0 {
					_, _ = fmt.Fprintln(a.stdout)
					t := newTable(a.stdout, "CONSUMER", "KEY", "LEASES-HELD", "LEASED", "LAST-SEEN")
					for _, c := range res.Consumers {
						t.row(c.ClientId, orDash(c.KeyName), fmt.Sprint(c.Held), fmt.Sprint(c.Leased), a.when(c.LastSeenAt))
					}
					if err := t.flush(); err != nil {
						return err
					}
				}
				if res.HeldGroupsTotal > 0 {
					_, _ = fmt.Fprintf(a.stdout, "\n%s waiting for a dead item (group_dead_policy hold); redrive or delete it to release the group:\n",
						plural(int(res.HeldGroupsTotal), "group"))
					t := newTable(a.stdout, "HELD-GROUP", "PARTITION", "DEAD-ITEM", "SINCE")
					for _, g := range res.HeldGroups {
						t.row(g.Group, fmt.Sprint(g.Partition), g.DeadKey, a.when(g.HeldAt))
					}
					if err := t.flush(); err != nil {
						return err
					}
				}
				for _, g := range []struct {
					title string
					m     map[string]int64
				}{{"REASON", res.DeadByReason}, {"SOURCE-QUEUE", res.DeadBySource}} {
					if len(g.m) == 0 {
						continue
					}
					keys := slices.Sorted(maps.Keys(g.m))
					_, _ = fmt.Fprintln(a.stdout)
					t := newTable(a.stdout, "DEAD-ITEMS", g.title)
					for _, k := range keys {
						t.row(fmt.Sprint(g.m[k]), k)
					}
					if err := t.flush(); err != nil {
						return err
					}
				}
				if line := expiringLine(res.QueueName, res.ExpiringWithinDay); line != "" {
					_, _ = fmt.Fprint(a.stdout, "\n"+line)
				}
				return nil
			})
		},
	}
	return a.addClientFlags(cmd)
}

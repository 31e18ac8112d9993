package main

import (
	"fmt"
	"math"
	"time"

	"github.com/spf13/cobra"

	"github.com/styxq/styx"
	"github.com/styxq/styx/internal/queue"
	pb "github.com/styxq/styx/styxpb"
)

// lastErrorWidth is how many characters of an item's last error the items
// table shows.
const lastErrorWidth = 60

func (a *app) itemsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "items",
		Short: "Inspect the items stored in a queue",
	}
	cmd.AddCommand(a.itemsListCmd())
	return a.addClientFlags(cmd)
}

func (a *app) itemsListCmd() *cobra.Command {
	var (
		partition int32
		pivot     string
		limit     int32
		scheduled bool
	)
	cmd := &cobra.Command{
		Use:   "list QUEUE",
		Short: "List a partition's items, with their dead-letter metadata",
		Long: `List a partition's items in id order, after --pivot (partition 0 unless
--partition; a queue of several partitions says so on standard error): the items
in the queue (ready or leased; with --scheduled, the scheduled ones instead, as
Querator's storage lists split them). Shows each item's id,
state (leased, scheduled or ready), attempts and age and, for items in a
dead-letter queue, where they came from (source queue), why (dead reason),
when they died, their last error and how often they were redriven.
--json prints the full stored items, one per line.`,
		Args: exactArgs(1, "a QUEUE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			// --pivot is exclusive; the server's pivot is inclusive (as in
			// Querator), so ask from the id after it.
			from := ""
			if pivot != "" {
				id, err := queue.ParseID("--pivot", pivot)
				if err != nil {
					return err
				}
				if id == math.MaxUint64 {
					return nil // no id follows
				}
				from = queue.FormatID(id + 1)
			}
			return a.withClient(cmd, func(c *styx.Client) error {
				req := &pb.StorageItemsListRequest{QueueName: args[0], Partition: partition, Pivot: from, Limit: limit}
				list := c.StorageItemsList
				if scheduled {
					list = c.StorageScheduledList
				}
				res, err := list(cmd.Context(), req)
				if err != nil {
					return err
				}
				if a.json {
					for _, it := range res.Items {
						if err := writeJSON(a.stdout, it); err != nil {
							return err
						}
					}
					return nil
				}
				if err := a.printItems(res.Items); err != nil {
					return err
				}
				// Say which partition this is when there are others.
				if !cmd.Flags().Changed("partition") {
					if info, err := c.QueuesInfo(cmd.Context(), &pb.QueuesInfoRequest{QueueName: args[0]}); err == nil && info.RequestedPartitions > 1 {
						_, _ = fmt.Fprintf(a.stderr, "partition %d of %d (0..%d): --partition N lists another\n", partition, info.RequestedPartitions, info.RequestedPartitions-1)
					}
				}
				// A full page (the server's default limit is 1000) may have a next one.
				if n := len(res.Items); n > 0 && (limit > 0 && n == int(limit) || limit == 0 && n == 1000) {
					_, _ = fmt.Fprintf(a.stderr, "more items may follow: --pivot %s\n", res.Items[n-1].Id)
				}
				return nil
			})
		},
	}
	f := cmd.Flags()
	f.Int32Var(&partition, "partition", 0, "partition to list")
	f.StringVar(&pivot, "pivot", "", "list the items after this id (exclusive)")
	f.Int32Var(&limit, "limit", 0, "most items to list (at most 65536); 0 means the server's default (1000)")
	f.BoolVar(&scheduled, "scheduled", false, "list only scheduled items (waiting for their enqueue or retry time)")
	return cmd
}

// printItems writes items as a table; the dead-letter columns appear when
// any item has dead-letter metadata.
func (a *app) printItems(items []*pb.StorageItem) error {
	dead := false
	for _, it := range items {
		if it.SourceQueue != "" || it.DeadReason != "" {
			dead = true
		}
	}
	header := []string{"ID", "STATE", "ATTEMPTS", "AGE"}
	if dead {
		header = append(header, "SOURCE-QUEUE", "DEAD-REASON", "DEAD-AT", "LAST-ERROR", "REDRIVES")
	} else {
		header = append(header, "LAST-ERROR")
	}
	now := a.now()
	t := newTable(a.stdout, header...)
	for _, it := range items {
		row := []string{it.Id, itemState(now, it), fmt.Sprint(it.Attempts), relative(now, it.CreatedAt)}
		lastError := orDash(truncate(oneLine(it.LastError), lastErrorWidth))
		if dead {
			row = append(row, orDash(it.SourceQueue), orDash(it.DeadReason), relative(now, it.DeadAt), lastError, fmt.Sprint(it.RedriveCount))
		} else {
			row = append(row, lastError)
		}
		t.row(row...)
	}
	return t.flush()
}

// itemState returns "leased", "scheduled" (its enqueue time is still to
// come) or "ready".
func itemState(now time.Time, it *pb.StorageItem) string {
	switch {
	case it.IsLeased:
		return "leased"
	case it.EnqueueAt != nil && it.EnqueueAt.AsTime().After(now):
		return "scheduled"
	default:
		return "ready"
	}
}

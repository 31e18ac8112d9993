package main

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/styxq/styx"
	pb "github.com/styxq/styx/styxpb"
)

func (a *app) queuesCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "queues",
		Short: "Create, update, inspect, list, pause, clear and delete queues",
	}
	cmd.AddCommand(a.queuesCreateCmd(), a.queuesUpdateCmd(), a.queuesInfoCmd(), a.queuesListCmd(), a.queuesDeleteCmd(), a.queuesHistoryCmd(),
		a.queuesPauseCmd(), a.queuesResumeCmd(), a.queuesClearCmd(), a.queuesMoveCmd())
	return a.addClientFlags(cmd)
}

// queueFlags are the settable fields of a queue's configuration.
type queueFlags struct {
	leaseTimeout  time.Duration
	expireTimeout time.Duration
	maxAttempts   int32
	partitions    int32
	deadQueue     string
	reference     string
	// groupDeadPolicy is an ordered queue's group_dead_policy.
	groupDeadPolicy string
}

// queueFlagNames lists the flags of queueFlags, for messages.
const queueFlagNames = "--lease-timeout, --expire-timeout, --max-attempts, --partitions, --dead-queue, --reference, --group-dead-policy"

// add defines the flags on fs: with create's defaults, or, for an update
// (create false), with none shown, since a flag not given keeps the queue's
// setting.
func (q *queueFlags) add(fs *pflag.FlagSet, create bool) {
	lease, expire, partitions, unset := time.Minute, 336*time.Hour, int32(1), ""
	if !create {
		lease, expire, partitions, unset = 0, 0, 0, " (kept when not given)"
	}
	fs.DurationVar(&q.leaseTimeout, "lease-timeout", lease, "how long a lease lasts before the item is handed out again"+unset)
	fs.DurationVar(&q.expireTimeout, "expire-timeout", expire, "how long an item may wait in the queue before it expires"+unset)
	fs.Int32Var(&q.maxAttempts, "max-attempts", 0, "attempts before an item is dead-lettered; 0 is unlimited"+unset)
	fs.Int32Var(&q.partitions, "partitions", partitions, "number of partitions (can grow, not shrink)"+unset)
	fs.StringVar(&q.deadQueue, "dead-queue", "", "queue that receives dead items (must exist)"+unset)
	fs.StringVar(&q.reference, "reference", "", "free text kept with the queue"+unset)
	fs.StringVar(&q.groupDeadPolicy, "group-dead-policy", "", "an ordered queue's dead items: 'continue' (the group goes on; the default) or 'hold' (the group waits until its dead item is redriven or deleted)"+unset)
}

// info returns a QueueInfo for queue name with only the flags set in fs,
// and the update_mask naming exactly those fields (empty if none was set).
// A flag given with a zero value (--max-attempts 0, --dead-queue "") is in
// the mask: queues.update then sets the field to zero.
func (q *queueFlags) info(name string, fs *pflag.FlagSet) (*pb.QueueInfo, []string) {
	info := &pb.QueueInfo{QueueName: name}
	var mask []string
	if fs.Changed("lease-timeout") {
		info.LeaseTimeout, mask = q.leaseTimeout.String(), append(mask, "lease_timeout")
	}
	if fs.Changed("expire-timeout") {
		info.ExpireTimeout, mask = q.expireTimeout.String(), append(mask, "expire_timeout")
	}
	if fs.Changed("max-attempts") {
		info.MaxAttempts, mask = q.maxAttempts, append(mask, "max_attempts")
	}
	if fs.Changed("partitions") {
		info.RequestedPartitions, mask = q.partitions, append(mask, "requested_partitions")
	}
	if fs.Changed("dead-queue") {
		info.DeadQueue, mask = q.deadQueue, append(mask, "dead_queue")
	}
	if fs.Changed("reference") {
		info.Reference, mask = q.reference, append(mask, "reference")
	}
	if fs.Changed("group-dead-policy") {
		info.GroupDeadPolicy, mask = q.groupDeadPolicy, append(mask, "group_dead_policy")
	}
	return info, mask
}

// queueChanges describes how a queue's settings went from before to after,
// one "name old → new" per changed setting (nil when none changed).
func queueChanges(before, after *pb.QueueInfo) []string {
	var out []string
	for _, f := range []struct{ name, old, new string }{
		{"lease_timeout", before.LeaseTimeout, after.LeaseTimeout},
		{"expire_timeout", before.ExpireTimeout, after.ExpireTimeout},
		{"max_attempts", maxAttempts(before.MaxAttempts), maxAttempts(after.MaxAttempts)},
		{"partitions", fmt.Sprint(before.RequestedPartitions), fmt.Sprint(after.RequestedPartitions)},
		{"dead_queue", orNone(before.DeadQueue), orNone(after.DeadQueue)},
		{"reference", orNone(before.Reference), orNone(after.Reference)},
		{"group_dead_policy", orDefault(before.GroupDeadPolicy, "continue"), orDefault(after.GroupDeadPolicy, "continue")},
	} {
		if f.old != f.new {
			out = append(out, fmt.Sprintf("%s %s → %s", f.name, f.old, f.new))
		}
	}
	return out
}

// orDefault returns s, or def when empty.
func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// orNone returns s, or "(none)" when empty.
func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

func (a *app) queuesCreateCmd() *cobra.Command {
	var (
		q         queueFlags
		namespace string
		ordered   bool
		cluster   string
	)
	cmd := &cobra.Command{
		Use:   "create NAME",
		Short: "Create a queue; flags not given take the server's defaults",
		Args:  exactArgs(1, "a queue NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withClient(cmd, func(c *styx.Client) error {
				info, _ := q.info(args[0], cmd.Flags())
				info.Namespace, info.Ordered, info.Cluster = namespace, ordered, cluster
				if err := c.QueuesCreate(cmd.Context(), info); err != nil {
					return err
				}
				return a.done("created queue %s", args[0])
			})
		},
	}
	q.add(cmd.Flags(), true)
	cmd.Flags().StringVar(&namespace, "namespace", "", "namespace of the queue (fixed once created); the server's default is _system")
	cmd.Flags().BoolVar(&ordered, "ordered", false, "order the items of each group (produce --group): leased in produce order, one lease of a group at a time (fixed once created; see docs/groups.md)")
	cmd.Flags().StringVar(&cluster, "cluster", "", "the PostgreSQL cluster to place the queue on, on a server run over several (postgres_clusters); "+
		"empty: the server chooses (the dead queue's cluster, else by weight)")
	return cmd
}

func (a *app) queuesUpdateCmd() *cobra.Command {
	var q queueFlags
	cmd := &cobra.Command{
		Use:   "update NAME",
		Short: "Change the given settings of a queue; the others are kept",
		Long: `Change the settings given as flags; the others are kept. A flag given
with a zero value sets it: --dead-queue '' removes the dead-letter queue,
--max-attempts 0 makes attempts unlimited, --reference '' clears the
reference (the request's update_mask lists exactly the flags given).

Prints each setting that changed ("max_attempts 3 → unlimited"), or that
nothing changed when every given value was already the queue's. --json
prints the queue's configuration after the update.`,
		Args: exactArgs(1, "a queue NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			info, mask := q.info(args[0], cmd.Flags())
			if len(mask) == 0 {
				return errors.New("nothing to update: give at least one of " + queueFlagNames)
			}
			info.UpdateMask = mask
			return a.withClient(cmd, func(c *styx.Client) error {
				before, err := c.QueuesInfo(cmd.Context(), &pb.QueuesInfoRequest{QueueName: args[0]})
				if err != nil {
					return err
				}
				if err := c.QueuesUpdate(cmd.Context(), info); err != nil {
					return err
				}
				after, err := c.QueuesInfo(cmd.Context(), &pb.QueuesInfoRequest{QueueName: args[0]})
				if err != nil {
					return fmt.Errorf("updated queue %s, but reading it back failed: %w", args[0], err)
				}
				if a.json {
					return writeJSON(a.stdout, after)
				}
				changes := queueChanges(before, after)
				if len(changes) == 0 {
					return a.done("queue %s unchanged: it already had those settings", args[0])
				}
				return a.done("updated queue %s: %s", args[0], strings.Join(changes, ", "))
			})
		},
	}
	q.add(cmd.Flags(), false)
	return cmd
}

func (a *app) queuesInfoCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "info NAME",
		Short: "Show a queue's configuration",
		Args:  exactArgs(1, "a queue NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withClient(cmd, func(c *styx.Client) error {
				info, err := c.QueuesInfo(cmd.Context(), &pb.QueuesInfoRequest{QueueName: args[0]})
				if err != nil {
					return err
				}
				if a.json {
					return writeJSON(a.stdout, info)
				}
				now := a.now()
				t := newTable(a.stdout)
				t.row("name", info.QueueName)
				t.row("namespace", info.Namespace)
				t.row("dead queue", orDash(info.DeadQueue))
				t.row("lease timeout", info.LeaseTimeout)
				t.row("expire timeout", info.ExpireTimeout)
				t.row("max attempts", maxAttempts(info.MaxAttempts))
				t.row("partitions", fmt.Sprint(info.RequestedPartitions))
				t.row("reference", orDash(info.Reference))
				if info.Cluster != "" {
					t.row("cluster", info.Cluster)
				}
				t.row("created", formatTime(info.CreatedAt)+" ("+relative(now, info.CreatedAt)+")")
				t.row("updated", formatTime(info.UpdatedAt)+" ("+relative(now, info.UpdatedAt)+")")
				t.row("state", queueState(now, info))
				return t.flush()
			})
		},
	}
}

// queueState words whether a queue's consumption runs or is paused (issue
// 49): "running", or "paused since <time> (<ago>)".
func queueState(now time.Time, info *pb.QueueInfo) string {
	if !info.Paused {
		return "running"
	}
	return "paused since " + formatTime(info.PausedAt) + " (" + relative(now, info.PausedAt) + "): leases get nothing until styx queues resume"
}

func maxAttempts(n int32) string {
	if n == 0 {
		return "unlimited"
	}
	return fmt.Sprint(n)
}

func (a *app) queuesHistoryCmd() *cobra.Command {
	var all bool
	cmd := &cobra.Command{
		Use:   "history [NAME]",
		Short: "Show a queue's last hour, a minute a row: produced, completed, dead-lettered, depth",
		Long: `Show a queue's activity over the last hour: per minute, the items
produced (a redrive's arrivals included), completed and dead-lettered, and
the queue's depth at the minute's last sample (- when none was taken).
Without NAME, the sum over every queue. The server keeps the minutes in its
store for 24 hours, so the hour survives restarts, and on PostgreSQL every
server answers the same history. A dead-letter queue's arrivals by error
group, counted as the items died, are in the --json reply (dead_by_group,
with group_patterns). Minutes with nothing to show are left out unless
--all. --json prints the server's reply.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := &pb.QueuesHistoryRequest{}
			if len(args) == 1 {
				req.QueueName = args[0]
			}
			return a.withClient(cmd, func(c *styx.Client) error {
				h, err := c.QueuesHistory(cmd.Context(), req)
				if err != nil {
					return err
				}
				if a.json {
					return writeJSON(a.stdout, h)
				}
				t := newTable(a.stdout, "MINUTE", "PRODUCED", "COMPLETED", "DEAD-LETTERED", "DEPTH")
				for _, p := range h.Points {
					if !all && p.Produced == 0 && p.Completed == 0 && p.DeadLettered == 0 && p.Depth <= 0 {
						continue
					}
					depth := "-"
					if p.Depth >= 0 {
						depth = fmt.Sprint(p.Depth)
					}
					t.row(p.At.AsTime().UTC().Format("2006-01-02T15:04Z"), fmt.Sprint(p.Produced), fmt.Sprint(p.Completed), fmt.Sprint(p.DeadLettered), depth)
				}
				return t.flush()
			})
		},
	}
	cmd.Flags().BoolVar(&all, "all", false, "show every minute of the hour, empty ones too")
	return cmd
}

func (a *app) queuesListCmd() *cobra.Command {
	var (
		pivot     string
		limit     int32
		namespace string
	)
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the queues of one namespace by name",
		Args:  exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.withClient(cmd, func(c *styx.Client) error {
				res, err := c.QueuesList(cmd.Context(), &pb.QueuesListRequest{Pivot: pivot, Limit: limit, Namespace: namespace})
				if err != nil {
					return err
				}
				if a.json {
					for _, q := range res.Items {
						if err := writeJSON(a.stdout, q); err != nil {
							return err
						}
					}
					return nil
				}
				now := a.now()
				// CLUSTER only from a server over several PostgreSQL
				// clusters (ADR 0023): it names one for every queue.
				clustered := slices.ContainsFunc(res.Items, func(q *pb.QueueInfo) bool { return q.Cluster != "" })
				cols := []string{"NAME", "NAMESPACE", "PARTITIONS", "LEASE-TIMEOUT", "EXPIRE-TIMEOUT", "MAX-ATTEMPTS", "DEAD-QUEUE", "CREATED", "STATE"}
				if clustered {
					cols = append(cols, "CLUSTER")
				}
				t := newTable(a.stdout, cols...)
				for _, q := range res.Items {
					state := "running"
					if q.Paused {
						state = "paused"
					}
					row := []string{q.QueueName, q.Namespace, fmt.Sprint(q.RequestedPartitions), q.LeaseTimeout, q.ExpireTimeout,
						maxAttempts(q.MaxAttempts), orDash(q.DeadQueue), relative(now, q.CreatedAt), state}
					if clustered {
						row = append(row, q.Cluster)
					}
					t.row(row...)
				}
				return t.flush()
			})
		},
	}
	cmd.Flags().StringVar(&pivot, "pivot", "", "first queue name to list (inclusive)")
	cmd.Flags().Int32Var(&limit, "limit", 0, "most queues to list (at most 65536); 0 means the server's default (1000)")
	cmd.Flags().StringVar(&namespace, "namespace", "", "namespace to list; the server's default is _system")
	return cmd
}

func (a *app) queuesDeleteCmd() *cobra.Command {
	var yes bool
	cmd := &cobra.Command{
		Use:   "delete NAME",
		Short: "Delete a queue and all its items",
		Long: `Delete a queue with every item it holds, leased and dead ones included.
A queue that is another queue's dead-letter queue cannot be deleted; remove
it from that queue first (styx queues update SOURCE --dead-queue '').

Unless --yes, the command first shows what will be lost and asks
"Delete queue NAME and its N items (L leased, D dead)? [y/N]" on stdin; any
answer but y or yes aborts (exit status 1).

The queue's dead items in its dead-letter queue are not deleted with it: the
command says how many stay there ("its N dead items stay in dead-letter
queue DLQ"). The dead-letter queue can still be worked (styx dead list DLQ
--source NAME, styx dead redrive, styx dead delete) while it holds them,
even once no queue names it as dead_queue.`,
		Args: exactArgs(1, "a queue NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			return a.withClient(cmd, func(c *styx.Client) error {
				if !yes {
					st, err := c.QueueStats(cmd.Context(), &pb.QueueStatsRequest{QueueName: name})
					if err != nil {
						return err
					}
					var total, leased, dead int64
					for _, lq := range st.LogicalQueues {
						for _, p := range lq.Partitions {
							total += int64(p.Total)
							leased += int64(p.TotalLeased)
						}
					}
					for _, n := range st.DeadByReason {
						dead += n
					}
					prompt := fmt.Sprintf("Delete queue %s and its %s (%d leased, %d dead)? [y/N] ", name, plural(int(total), "item"), leased, dead)
					if total == 0 {
						prompt = fmt.Sprintf("Delete queue %s (it holds no items)? [y/N] ", name)
					}
					ok, err := confirm(cmd.InOrStdin(), a.stderr, prompt)
					if err != nil {
						return err
					}
					if !ok {
						return errors.New("aborted: nothing deleted")
					}
				}
				// Its dead items in its dead-letter queue stay: read which
				// queue that is before the delete, count them after.
				var dlq string
				if info, err := c.QueuesInfo(cmd.Context(), &pb.QueuesInfoRequest{QueueName: name}); err == nil {
					dlq = info.DeadQueue
				}
				if err := c.QueuesDelete(cmd.Context(), &pb.QueuesDeleteRequest{QueueName: name}); err != nil {
					return err
				}
				if dlq != "" {
					st, err := c.QueueStats(cmd.Context(), &pb.QueueStatsRequest{QueueName: dlq})
					if n := st.GetDeadBySource()[name]; err == nil && n > 0 {
						verb := "stay"
						if n == 1 {
							verb = "stays"
						}
						return a.done("deleted queue %s; its %s %s in dead-letter queue %s (styx dead list %s --source %s)",
							name, plural(int(n), "dead item"), verb, dlq, dlq, name)
					}
				}
				return a.done("deleted queue %s", name)
			})
		},
	}
	cmd.Flags().BoolVar(&yes, "yes", false, "do not show what will be lost and ask for confirmation")
	return cmd
}

// done reports a successful command that has no reply to print: a line on
// stdout, or nothing with --json (the exit status says it).
func (a *app) done(format string, args ...any) error {
	if a.json {
		return nil
	}
	_, err := fmt.Fprintf(a.stdout, format+"\n", args...)
	return err
}

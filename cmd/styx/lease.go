package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/styxq/styx"
	pb "github.com/styxq/styx/styxpb"
)

// leaseGrace is how much longer than its request timeout the CLI waits for
// a lease's reply before giving up.
const leaseGrace = 10 * time.Second

// leaseNoteAfter is how long a lease waits for its reply before it says on
// a terminal's stderr that it is waiting (a lease that finds an item at
// once says nothing).
const leaseNoteAfter = 500 * time.Millisecond

func (a *app) leaseCmd() *cobra.Command {
	var (
		batch    int32
		clientID string
		timeout  time.Duration
	)
	cmd := &cobra.Command{
		Use:   "lease QUEUE",
		Short: "Lease items from a queue, waiting up to --timeout for some",
		Long: `Lease up to --batch items from one partition of a queue, waiting up to
--timeout for any. Prints each item's partition, id, attempts, lease
deadline, kind, reference and payload (printable UTF-8 as text, otherwise
"base64:" and its base64). Complete or retry the items with their partition
and id before the lease deadline, or they are handed out again.

With no item before --timeout it prints "no items" on stderr and exits 0.
When stderr is a terminal and nothing has come after half a second, it
says on stderr that it is waiting, and for how long.
Any other 454 (retry) answer, such as "server shutting down" or an
overloaded queue, is an error: printed on stderr with exit status 75
(EX_TEMPFAIL: try again later), so a consumer loop does not mistake a
server going away for a drained queue; so is a 453 (storage unavailable).`,
		Args: exactArgs(1, "a QUEUE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withClient(cmd, func(c *styx.Client) error {
				if clientID == "" {
					clientID = defaultClientID()
				}
				ctx, cancel := context.WithTimeout(cmd.Context(), timeout+leaseGrace)
				defer cancel()
				stopNote := a.waitingNote(leaseNoteAfter, "waiting up to %s for an item in %s (--timeout); Ctrl-C stops",
					timeout, args[0])
				res, err := c.QueueLease(ctx, &pb.QueueLeaseRequest{
					QueueName: args[0], BatchSize: batch, ClientId: clientID, RequestTimeout: timeout.String(),
				})
				stopNote()
				// A lease that found no item before its request timeout
				// (reason request_timeout) is no failure; other 454s
				// (a server shutting down, an overloaded queue) are.
				if styx.IsNoItems(err) {
					_, _ = fmt.Fprintln(a.stderr, "no items")
					return nil
				}
				if err != nil {
					return err
				}
				if a.json {
					return writeJSON(a.stdout, res)
				}
				// A GROUP column when an item has a group (issue 37).
				grouped := slices.ContainsFunc(res.Items, func(it *pb.QueueLeaseItem) bool { return it.Group != "" })
				header := []string{"PARTITION", "ID", "ATTEMPTS", "LEASE-DEADLINE", "KIND", "REFERENCE"}
				if grouped {
					header = append(header, "GROUP")
				}
				t := newTable(a.stdout, append(header, "PAYLOAD")...)
				for _, it := range res.Items {
					cells := []string{fmt.Sprint(res.Partition), it.Id, fmt.Sprint(it.Attempts), formatTime(it.LeaseDeadline),
						orDash(it.Kind), orDash(it.Reference)}
					if grouped {
						cells = append(cells, orDash(it.Group))
					}
					t.row(append(cells, payloadText(it.Bytes))...)
				}
				return t.flush()
			})
		},
	}
	f := cmd.Flags()
	f.Int32Var(&batch, "batch", 1, "most items to lease (1..1000)")
	f.StringVar(&clientID, "client-id", "", "id of this consumer, shown in the server's logs (default hostname-pid)")
	f.DurationVar(&timeout, "timeout", 10*time.Second, "how long to wait for items (up to 15m)")
	return cmd
}

// waitingNote prints the line format, args on stderr after wait unless the
// returned stop is called first, when stderr is a terminal (a script's
// stderr gets no such line). After stop returns, the line is either
// printed whole or never.
func (a *app) waitingNote(wait time.Duration, format string, args ...any) (stop func()) {
	if !a.terminal(a.stderr) {
		return func() {}
	}
	var (
		mu      sync.Mutex
		stopped bool
	)
	t := time.AfterFunc(wait, func() {
		mu.Lock()
		defer mu.Unlock()
		if !stopped {
			_, _ = fmt.Fprintf(a.stderr, format+"\n", args...)
		}
	})
	return func() {
		t.Stop()
		mu.Lock()
		stopped = true
		mu.Unlock()
	}
}

// defaultClientID returns "<hostname>-<pid>".
func defaultClientID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "styx"
	}
	return fmt.Sprintf("%s-%d", host, os.Getpid())
}

func (a *app) completeCmd() *cobra.Command {
	var partition int32
	cmd := &cobra.Command{
		Use:   "complete QUEUE ID...",
		Short: "Complete leased items: they are done and deleted",
		Long: `Complete leased items of one partition: they are done and deleted. Ids
are sent in batches of at most 1000; each batch succeeds or fails whole.`,
		Args: minArgs(2, "a QUEUE and one or more item IDs"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withClient(cmd, func(c *styx.Client) error {
				queue, ids := args[0], args[1:]
				n, err := inBatches(ids, func(batch []string) error {
					return c.QueueComplete(cmd.Context(), &pb.QueueCompleteRequest{QueueName: queue, Partition: partition, Ids: batch})
				})
				if err != nil {
					return err
				}
				return a.done("completed %s in %s", plural(n, "item"), queue)
			})
		},
	}
	cmd.Flags().Int32Var(&partition, "partition", 0, "partition the items were leased from")
	return cmd
}

func (a *app) retryCmd() *cobra.Command {
	var (
		partition     int32
		errText       string
		dead, release bool
		retryAt       string
		retryIn       time.Duration
	)
	cmd := &cobra.Command{
		Use:   "retry QUEUE ID...",
		Short: "End leases without completing: requeue, schedule, release or dead-letter items",
		Long: `End the leases of items of one partition without completing them. By
default each item goes back to the queue at once and the attempt counts
(the queue's max attempts may then dead-letter it). --retry-at or
--retry-in schedules it for later instead; --release returns it without
counting the attempt; --dead moves it to the queue's dead-letter queue now.
--error records why the attempt failed (shown as the item's last error).

Prints what the server did, one line per kind: retried (requeued at the
tail), released, scheduled, dead-lettered (to the dead-letter queue), or
dropped (dead, and the queue has no dead-letter queue). A plain retry may
dead-letter an item that reached the queue's max attempts, or whose expire
deadline has passed; the line then gives the reason. --json prints each
item's outcome.`,
		Args: minArgs(2, "a QUEUE and one or more item IDs"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if dead && release {
				return errors.New("--dead and --release cannot be combined: --dead moves the items to the dead-letter queue, " +
					"--release puts them back without counting the attempt")
			}
			var at *timestamppb.Timestamp
			switch {
			case cmd.Flags().Changed("retry-at"):
				t, err := time.Parse(time.RFC3339, retryAt)
				if err != nil {
					return fmt.Errorf("--retry-at: %q is not an RFC 3339 time such as 2026-01-02T15:04:05Z", retryAt)
				}
				at = timestamppb.New(t)
			case cmd.Flags().Changed("retry-in"):
				if retryIn < 0 {
					return fmt.Errorf("--retry-in: %s is negative", retryIn)
				}
				at = timestamppb.New(a.now().Add(retryIn))
			}
			return a.withClient(cmd, func(c *styx.Client) error {
				queue, ids := args[0], args[1:]
				var outcomes []*pb.QueueRetryOutcome
				n, err := inBatches(ids, func(batch []string) error {
					items := make([]*pb.QueueRetryItem, len(batch))
					for i, id := range batch {
						items[i] = &pb.QueueRetryItem{Id: id, RetryAt: at, Dead: dead, Release: release, Error: errText}
					}
					res, err := c.QueueRetry(cmd.Context(), &pb.QueueRetryRequest{QueueName: queue, Partition: partition, Items: items})
					if err == nil {
						outcomes = append(outcomes, res.Outcomes...)
					}
					return err
				})
				if err != nil {
					return err
				}
				if a.json {
					for _, o := range outcomes {
						if err := writeJSON(a.stdout, o); err != nil {
							return err
						}
					}
					return nil
				}
				if len(outcomes) != n {
					// A server without outcomes (Querator): say what was asked.
					what, when := "retried", ""
					switch {
					case dead:
						what = "dead-lettered"
					case release:
						what = "released"
					case at != nil:
						what, when = "scheduled", " for "+formatTime(at)
					}
					return a.done("%s %s in %s%s", what, plural(n, "item"), queue, when)
				}
				for _, line := range retrySummary(queue, outcomes) {
					if err := a.done("%s", line); err != nil {
						return err
					}
				}
				return nil
			})
		},
	}
	f := cmd.Flags()
	f.Int32Var(&partition, "partition", 0, "partition the items were leased from")
	f.StringVar(&errText, "error", "", "why the attempt failed, up to 4096 bytes; kept as the item's last error")
	f.BoolVar(&dead, "dead", false, "move the items to the queue's dead-letter queue now")
	f.BoolVar(&release, "release", false, "put the items back without counting the attempt")
	f.StringVar(&retryAt, "retry-at", "", "retry at this RFC 3339 time instead of now")
	f.DurationVar(&retryIn, "retry-in", 0, "retry after this duration instead of now")
	cmd.MarkFlagsMutuallyExclusive("retry-at", "retry-in")
	return cmd
}

// retrySummary describes retry outcomes, one line per outcome kind in a
// fixed order: "retried 2 items in q", "dead-lettered 1 item in q to q-dead",
// "dropped 1 item in q: the queue has no dead_queue". Dead items give their
// reasons unless every one is explicit (--dead).
func retrySummary(queue string, outcomes []*pb.QueueRetryOutcome) []string {
	byKind := map[string][]*pb.QueueRetryOutcome{}
	for _, o := range outcomes {
		byKind[o.Outcome] = append(byKind[o.Outcome], o)
	}
	var lines []string
	for _, kind := range []string{"requeued", "released", "scheduled", "dead_lettered", "dropped"} {
		group := byKind[kind]
		delete(byKind, kind)
		if len(group) == 0 {
			continue
		}
		n := plural(len(group), "item")
		switch kind {
		case "requeued":
			lines = append(lines, fmt.Sprintf("retried %s in %s", n, queue))
		case "released":
			lines = append(lines, fmt.Sprintf("released %s in %s", n, queue))
		case "scheduled":
			lines = append(lines, fmt.Sprintf("scheduled %s in %s for %s", n, queue, formatTime(group[0].RetryAt)))
		case "dead_lettered":
			lines = append(lines, fmt.Sprintf("dead-lettered %s in %s to %s%s", n, queue, group[0].DeadQueue, deadReasons(group)))
		case "dropped":
			lines = append(lines, fmt.Sprintf("dropped %s in %s: the queue has no dead_queue%s", n, queue, deadReasons(group)))
		}
	}
	// Kinds this CLI does not know (a newer server).
	for _, kind := range slices.Sorted(maps.Keys(byKind)) {
		lines = append(lines, fmt.Sprintf("%s %s in %s", kind, plural(len(byKind[kind]), "item"), queue))
	}
	return lines
}

// deadReasons returns " (reason max_attempts, expired)" for dead items
// whose reasons are not all explicit, else "".
func deadReasons(group []*pb.QueueRetryOutcome) string {
	var reasons []string
	for _, o := range group {
		if !slices.Contains(reasons, o.Reason) {
			reasons = append(reasons, o.Reason)
		}
	}
	if len(reasons) == 1 && reasons[0] == "explicit" {
		return ""
	}
	slices.Sort(reasons)
	return " (reason " + strings.Join(reasons, ", ") + ")"
}

func (a *app) renewCmd() *cobra.Command {
	var (
		partition    int32
		leaseTimeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "renew QUEUE ID...",
		Short: "Extend the leases of items still being worked on",
		Long: `Extend the live leases of items of one partition: each lease deadline
becomes now + --lease-timeout (the queue's lease timeout when not given).
Prints each item's new lease deadline. Ids are sent in batches of at most
1000; each batch succeeds or fails whole, and fails if any of its items is
not leased or its lease has already expired (the error names them).`,
		Args: minArgs(2, "a QUEUE and one or more item IDs"),
		RunE: func(cmd *cobra.Command, args []string) error {
			timeout := ""
			if cmd.Flags().Changed("lease-timeout") {
				timeout = leaseTimeout.String()
			}
			return a.withClient(cmd, func(c *styx.Client) error {
				queue, ids := args[0], args[1:]
				var items []*pb.QueueRenewItem
				_, err := inBatches(ids, func(batch []string) error {
					res, err := c.QueueRenew(cmd.Context(), &pb.QueueRenewRequest{QueueName: queue, Partition: partition, Ids: batch, LeaseTimeout: timeout})
					if err == nil {
						items = append(items, res.Items...)
					}
					return err
				})
				if err != nil {
					return err
				}
				if a.json {
					for _, it := range items {
						if err := writeJSON(a.stdout, it); err != nil {
							return err
						}
					}
					return nil
				}
				t := newTable(a.stdout, "ID", "LEASE-DEADLINE")
				for _, it := range items {
					t.row(it.Id, formatTime(it.LeaseDeadline))
				}
				return t.flush()
			})
		},
	}
	f := cmd.Flags()
	f.Int32Var(&partition, "partition", 0, "partition the items were leased from")
	f.DurationVar(&leaseTimeout, "lease-timeout", 0, "how long the leases last from now, above 0 and at most 8760h (default the queue's lease timeout)")
	return cmd
}

// inBatches calls send with ids in slices of at most maxBatch and returns
// how many ids it sent successfully.
func inBatches(ids []string, send func([]string) error) (int, error) {
	sent := 0
	for len(ids) > 0 {
		n := min(len(ids), maxBatch)
		if err := send(ids[:n]); err != nil {
			if sent > 0 {
				return sent, fmt.Errorf("after %s succeeded: %w", plural(sent, "item"), err)
			}
			return 0, err
		}
		sent += n
		ids = ids[n:]
	}
	return sent, nil
}

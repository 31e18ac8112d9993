package main

import (
	"bufio"
	"cmp"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/styxq/styx"
	"github.com/styxq/styx/internal/queue"
	"github.com/styxq/styx/internal/redrive"
	pb "github.com/styxq/styx/styxpb"
)

func (a *app) deadCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "dead",
		Short: "Inspect, delete and redrive the items of a dead-letter queue",
		Long: `Work with the items of a dead-letter queue: list them (or count them by
reason, source queue or error), show one in full, delete them, or redrive
them back to the queues they died in. groups counts them by the shape of
their last error (its fingerprint), from counts the server keeps.

list, delete and redrive select items with the same filter flags; every
given flag must match: ` + deadFilterFlagNames + `.`,
	}
	cmd.AddCommand(a.deadListCmd(), a.deadGroupsCmd(), a.deadShowCmd(), a.deadEditCmd(), a.deadDeleteCmd(), a.deadRedriveCmd())
	return a.addClientFlags(cmd)
}

// deadGroupings are the values of dead list --group-by.
var deadGroupings = []string{"reason", "source", "error", "fingerprint"}

func (a *app) deadListCmd() *cobra.Command {
	var (
		ff      deadFilterFlags
		pivot   string
		limit   int32
		all     bool
		groupBy string
	)
	cmd := &cobra.Command{
		Use:   "list QUEUE",
		Short: "List dead items, oldest first, or count them by reason, source or error",
		Long: `List a queue's dead items that match the filter flags, oldest first: id,
source queue, dead reason, attempts, age (since the item died) and last
error. One page of --limit items is printed; when more may follow, a hint
with the --pivot to continue from is printed on stderr. --all follows the
pages to the end. When dead items of the queue expire within a day (its
retention ends), a warning says how many on stderr.

--group-by reason|source|error reads every matching item and prints how
many there are per dead reason, source queue, last error (its first 60
characters) or fingerprint of the last error, largest group first (dead
groups answers the fingerprint grouping from counts, without reading
items).

--json prints the full stored items, one per line; with --group-by, one
{"count": N, "<group>": "..."} object per group.`,
		Args: exactArgs(1, "a QUEUE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if groupBy != "" && !slices.Contains(deadGroupings, groupBy) {
				return fmt.Errorf("--group-by: %q is not one of %s", groupBy, strings.Join(deadGroupings, ", "))
			}
			filter, err := ff.filter(a.now())
			if err != nil {
				return err
			}
			return a.withClient(cmd, func(c *styx.Client) error {
				// Tables show no payloads: do not fetch them.
				req := &pb.DeadListRequest{QueueName: args[0], Filter: filter, Pivot: pivot, Limit: limit, WithoutPayload: !a.json}
				if (all || groupBy != "") && !cmd.Flags().Changed("limit") {
					req.Limit = deadPageSize
				}
				switch {
				case groupBy != "":
					return a.deadGroups(cmd.Context(), c, req, groupBy)
				case all:
					return a.deadListAll(cmd.Context(), c, req)
				}
				res, err := c.DeadList(cmd.Context(), req)
				if err != nil {
					return err
				}
				if a.json {
					for _, it := range res.Items {
						if err := writeJSON(a.stdout, it); err != nil {
							return err
						}
					}
				} else {
					t := a.deadTable()
					for _, it := range res.Items {
						t.row(a.deadRow(it)...)
					}
					if err := t.flush(); err != nil {
						return err
					}
				}
				if res.NextPivot != "" {
					_, _ = fmt.Fprintf(a.stderr, "more items may follow: --pivot %s (or --all)\n", res.NextPivot)
				}
				if !a.json {
					warnExpiring(cmd.Context(), c, a.stderr, args[0])
				}
				return nil
			})
		},
	}
	f := cmd.Flags()
	ff.add(f)
	f.StringVar(&pivot, "pivot", "", "list the items after this id (exclusive), as printed by the previous page")
	f.Int32Var(&limit, "limit", 100, "items per page (1..1000); --all and --group-by read pages of 1000 unless given")
	f.BoolVar(&all, "all", false, "follow the pages to the last matching item")
	f.StringVar(&groupBy, "group-by", "", "count the matching items per "+strings.Join(deadGroupings, ", ")+" instead of listing them")
	return cmd
}

// deadTable starts the table of dead items.
func (a *app) deadTable() *table {
	return newTable(a.stdout, "ID", "SOURCE", "REFERENCE", "REASON", "ATTEMPTS", "AGE", "LAST-ERROR")
}

// deadRow returns the cells of a dead item's row of deadTable.
func (a *app) deadRow(it *pb.StorageItem) []string {
	return []string{itemID(it), orDash(it.SourceQueue), orDash(truncate(oneLine(it.Reference), 32)), orDash(it.DeadReason), fmt.Sprint(it.Attempts),
		relative(a.now(), it.DeadAt), orDash(truncate(oneLine(it.LastError), lastErrorWidth))}
}

// deadListAll prints every matching item from req.Pivot on: JSON lines as
// the pages come, or one table at the end.
func (a *app) deadListAll(ctx context.Context, c *styx.Client, req *pb.DeadListRequest) error {
	if a.json {
		return eachDeadPage(ctx, c, req, func(items []*pb.StorageItem) error {
			for _, it := range items {
				if err := writeJSON(a.stdout, it); err != nil {
					return err
				}
			}
			return nil
		})
	}
	t := a.deadTable()
	err := eachDeadPage(ctx, c, req, func(items []*pb.StorageItem) error {
		for _, it := range items {
			t.row(a.deadRow(it)...)
		}
		return nil
	})
	// Print what was read even when a later page failed.
	return errors.Join(t.flush(), err)
}

// deadGroupKey returns the group of it for --group-by by.
func deadGroupKey(it *pb.StorageItem, by string) string {
	switch by {
	case "reason":
		return it.DeadReason
	case "source":
		return it.SourceQueue
	case "fingerprint":
		return it.Fingerprint
	default:
		return truncate(oneLine(it.LastError), lastErrorWidth)
	}
}

// deadGroups counts every matching item per group and prints the counts,
// largest first.
func (a *app) deadGroups(ctx context.Context, c *styx.Client, req *pb.DeadListRequest, by string) error {
	counts := map[string]int{}
	total := 0
	req.WithoutPayload = true
	err := eachDeadPage(ctx, c, req, func(items []*pb.StorageItem) error {
		for _, it := range items {
			counts[deadGroupKey(it, by)]++
		}
		total += len(items)
		return nil
	})
	if err != nil {
		return err
	}
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(x, y string) int {
		return cmp.Or(cmp.Compare(counts[y], counts[x]), cmp.Compare(x, y))
	})
	if a.json {
		for _, k := range keys {
			b, err := json.Marshal(map[string]any{"count": counts[k], by: k})
			if err != nil {
				return err
			}
			if _, err := fmt.Fprintf(a.stdout, "%s\n", b); err != nil {
				return err
			}
		}
		return nil
	}
	t := newTable(a.stdout, "COUNT", strings.ToUpper(by))
	for _, k := range keys {
		t.row(fmt.Sprint(counts[k]), orDash(k))
	}
	if err := t.flush(); err != nil {
		return err
	}
	_, _ = fmt.Fprintf(a.stderr, "%s in %s\n", plural(total, "item"), plural(len(keys), "group"))
	return nil
}

func (a *app) deadGroupsCmd() *cobra.Command {
	var (
		source, reason, fp string
		limit              int32
	)
	cmd := &cobra.Command{
		Use:   "groups QUEUE",
		Short: "Count a dead-letter queue's items by the shape of their last error",
		Long: `Print the error groups of a dead-letter queue, largest first: its dead items
by dead reason, source queue and fingerprint of their last error. The
fingerprint is the error text with its variable parts (numbers, ids, quoted
values, addresses, durations, times) replaced by placeholders such as <n>
and <id>, hashed: "order 1234 not found" and "order 98 not found" are one
group. The PATTERN column shows that shape.

Act on a group with the filter flags of list, delete and redrive:
--fingerprint FP --source SOURCE --reason REASON.

The server answers from counts it keeps, without reading the items.
--json prints one group per line, with a sample error and item id and the
dead_at of the group's first and last item.`,
		Args: exactArgs(1, "a QUEUE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if reason != "" && !slices.Contains(deadReasonNames, reason) {
				return fmt.Errorf("--reason: %q is not one of %s", reason, strings.Join(deadReasonNames, ", "))
			}
			return a.withClient(cmd, func(c *styx.Client) error {
				req := &pb.DeadGroupsRequest{QueueName: args[0], Limit: limit}
				if source != "" || reason != "" || fp != "" {
					req.Filter = &pb.DeadFilter{SourceQueue: source, Reason: reason, Fingerprint: fp}
				}
				res, err := c.DeadGroups(cmd.Context(), req)
				if err != nil {
					return err
				}
				if a.json {
					for _, g := range res.Groups {
						if err := writeJSON(a.stdout, g); err != nil {
							return err
						}
					}
					return nil
				}
				t := newTable(a.stdout, "COUNT", "REASON", "SOURCE", "FINGERPRINT", "LAST-DEAD", "PATTERN")
				for _, g := range res.Groups {
					t.row(fmt.Sprint(g.Count), g.Reason, g.SourceQueue, g.Fingerprint, relative(a.now(), g.LastDeadAt),
						orDash(truncate(oneLine(g.Pattern), 2*lastErrorWidth)))
				}
				if err := t.flush(); err != nil {
					return err
				}
				more := ""
				if int64(len(res.Groups)) < res.TotalGroups {
					more = fmt.Sprintf(" (%d shown; --limit for more)", len(res.Groups))
				}
				_, _ = fmt.Fprintf(a.stderr, "%s in %s%s\n", plural(int(res.TotalItems), "item"), plural(int(res.TotalGroups), "group"), more)
				return nil
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&source, "source", "", "only groups of this source queue")
	f.StringVar(&reason, "reason", "", "only groups of this dead reason: "+strings.Join(deadReasonNames, ", "))
	f.StringVar(&fp, "fingerprint", "", "only the group(s) of this fingerprint")
	f.Int32Var(&limit, "limit", 100, "the most groups to print (1..1000)")
	return cmd
}

func (a *app) deadShowCmd() *cobra.Command {
	var b64 bool
	cmd := &cobra.Command{
		Use:   "show QUEUE ID",
		Short: "Show a dead item in full: metadata, attempt history and payload",
		Long: `Show one item of a queue in full: its dead-letter metadata (source queue
and id, reason, when it died, attempts, redrive count), creation and expiry,
kind, reference, encoding and last error; then its recorded attempt errors,
oldest first; then its payload: as text if it is printable UTF-8, otherwise
as a hex dump (--base64 prints it as base64 instead).
--json prints the stored item.`,
		Args: exactArgs(2, "a QUEUE and an item ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			name, id := args[0], args[1]
			return a.withClient(cmd, func(c *styx.Client) error {
				it, err := findItem(cmd.Context(), c, name, id)
				if err != nil {
					return err
				}
				if a.json {
					return writeJSON(a.stdout, it)
				}
				return a.printDeadItem(it, b64)
			})
		},
	}
	cmd.Flags().BoolVar(&b64, "base64", false, "print the payload as standard base64")
	return cmd
}

func (a *app) deadEditCmd() *cobra.Command {
	var payload, file, kind, reference string
	cmd := &cobra.Command{
		Use:   "edit QUEUE ID (--payload TEXT | --payload-file FILE)",
		Short: "Replace a dead item's payload (and kind or reference), to redrive it fixed",
		Long: `Replace the payload of a dead item, whole: with --payload TEXT, or with the
contents of --payload-file FILE ("-" reads standard input). --kind and
--reference change those too when given ("" clears them). The item keeps
its id, error group and history; the server adds an entry to its history
with the old payload's size and SHA-256 and the key that edited it (the old
payload is not kept). A leased item cannot be edited. Needs the dead scope.
--json prints the item as stored.`,
		Args: exactArgs(2, "a QUEUE and an item ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := &pb.DeadEditRequest{QueueName: args[0], Id: args[1]}
			f := cmd.Flags()
			switch {
			case f.Changed("payload") == f.Changed("payload-file"):
				return errors.New("give the new payload with either --payload or --payload-file")
			case f.Changed("payload"):
				req.Payload = []byte(payload)
			case file == "-":
				b, err := io.ReadAll(cmd.InOrStdin())
				if err != nil {
					return fmt.Errorf("read the payload from standard input: %w", err)
				}
				req.Payload = b
			default:
				b, err := os.ReadFile(file)
				if err != nil {
					return fmt.Errorf("--payload-file: %w", err)
				}
				req.Payload = b
			}
			if f.Changed("kind") {
				req.Kind = &kind
			}
			if f.Changed("reference") {
				req.Reference = &reference
			}
			return a.withClient(cmd, func(c *styx.Client) error {
				it, err := c.DeadEdit(cmd.Context(), req)
				if err != nil {
					return err
				}
				if a.json {
					return writeJSON(a.stdout, it)
				}
				_, err = fmt.Fprintf(a.stdout, "edited %s of %s: payload now %s\n", it.Id, args[0], plural(len(it.Payload), "byte"))
				return err
			})
		},
	}
	cmd.Flags().StringVar(&payload, "payload", "", "the new payload")
	cmd.Flags().StringVar(&file, "payload-file", "", `read the new payload from this file ("-": standard input)`)
	cmd.Flags().StringVar(&kind, "kind", "", "the new kind")
	cmd.Flags().StringVar(&reference, "reference", "", "the new reference")
	return cmd
}

// itemID is the id by which to name it: its first id, which stays for its
// whole life in the queue (ADR 0031), or its id from a server that does not
// send one.
func itemID(it *pb.StorageItem) string {
	if it.FirstId != "" {
		return it.FirstId
	}
	return it.Id
}

// findItem returns item id (its current or first id) of queue name, or a
// not-found *styx.Error.
func findItem(ctx context.Context, c *styx.Client, name, id string) (*pb.StorageItem, error) {
	n, err := queue.ParseID("ID", id)
	if err != nil {
		return nil, fmt.Errorf("%q is not an item id (such as one printed by 'styx dead list')", id)
	}
	// Items are listed in id order after the (exclusive) pivot: start just
	// before the item rather than scanning the queue from its oldest.
	req := &pb.DeadListRequest{QueueName: name, Filter: &pb.DeadFilter{Ids: []string{id}}, Limit: 1}
	if n > 0 {
		req.Pivot = queue.FormatID(n - 1)
	}
	for {
		res, err := c.DeadList(ctx, req)
		if err != nil {
			return nil, err
		}
		if len(res.Items) > 0 {
			return res.Items[0], nil
		}
		if res.NextPivot == "" {
			break
		}
		if next, err := queue.ParseID("next_pivot", res.NextPivot); err != nil || next >= n {
			break // past the item
		}
		req.Pivot = res.NextPivot
	}
	return nil, &styx.Error{Code: styx.CodeNotFound, Message: fmt.Sprintf("no item '%s' in queue '%s'", id, name)}
}

// when formats ts as RFC 3339 and relative to now: "2026-01-02T15:04:05Z
// (3m12s ago)", or "-".
func (a *app) when(ts *timestamppb.Timestamp) string {
	if ts == nil {
		return "-"
	}
	return formatTime(ts) + " (" + relative(a.now(), ts) + ")"
}

// printDeadItem writes every field of it, its attempt history and its
// payload.
func (a *app) printDeadItem(it *pb.StorageItem, b64 bool) error {
	t := newTable(a.stdout)
	t.row("id", itemID(it))
	if it.Id != itemID(it) {
		t.row("current id", it.Id+" (changes when a lease of it ends; its id does not)")
	}
	t.row("source queue", orDash(it.SourceQueue))
	t.row("source id", orDash(it.SourceId))
	t.row("reason", orDash(it.DeadReason))
	t.row("dead at", a.when(it.DeadAt))
	t.row("attempts", fmt.Sprint(it.Attempts))
	t.row("redrive count", fmt.Sprint(it.RedriveCount))
	t.row("created", a.when(it.CreatedAt))
	t.row("expire deadline", a.when(it.ExpireDeadline))
	t.row("kind", orDash(it.Kind))
	t.row("reference", orDash(it.Reference))
	t.row("encoding", orDash(it.Encoding))
	t.row("last error", orDash(it.LastError))
	t.row("dlq attempts", fmt.Sprint(it.DeadLetterAttempts))
	if err := t.flush(); err != nil {
		return err
	}

	w := a.stdout
	if len(it.Errors) == 0 {
		_, _ = fmt.Fprintln(w, "\nno attempt history")
	} else {
		_, _ = fmt.Fprintf(w, "\nattempt history (%s recorded, oldest first):\n", plural(len(it.Errors), "error"))
		history := slices.Clone(it.Errors)
		slices.SortStableFunc(history, func(x, y *pb.AttemptError) int {
			return cmp.Or(x.At.AsTime().Compare(y.At.AsTime()), cmp.Compare(x.Attempt, y.Attempt))
		})
		t := newTable(w, "ATTEMPT", "TIME", "ERROR")
		for _, e := range history {
			attempt := fmt.Sprint(e.Attempt)
			if e.Kind == "edit" { // a payload edit, no attempt
				attempt = "edit"
			}
			t.row(attempt, formatTime(e.At), orDash(e.Error))
		}
		if err := t.flush(); err != nil {
			return err
		}
	}
	// The DLQ attempts (leases in the dead-letter queue that ended without
	// a complete) are shown apart: they never change the dead record above.
	if len(it.DeadLetterErrors) > 0 {
		_, _ = fmt.Fprintf(w, "\ndlq attempts (%d in all, %d recorded, oldest first; the dead record above stays as it was):\n",
			it.DeadLetterAttempts, len(it.DeadLetterErrors))
		t := newTable(w, "DLQ-ATTEMPT", "TIME", "ERROR")
		for _, e := range it.DeadLetterErrors {
			t.row(fmt.Sprint(e.Attempt), formatTime(e.At), cmp.Or(e.Error, "no error recorded"))
		}
		if err := t.flush(); err != nil {
			return err
		}
	}
	if len(it.Attributes) > 0 {
		_, _ = fmt.Fprintln(w, "\nattributes:")
		t := newTable(w, "SET", "NAME", "TYPE", "VALUE")
		for _, a := range it.Attributes {
			t.row(a.Group, a.Name, orDash(a.DataType), a.Value)
		}
		if err := t.flush(); err != nil {
			return err
		}
	}
	return writePayload(w, it.Payload, b64)
}

// writePayload writes a titled payload: as text if printable UTF-8 (with
// newlines and tabs), as base64 if b64, else as a hex dump.
func writePayload(w io.Writer, p []byte, b64 bool) error {
	var body, form string
	switch {
	case len(p) == 0:
		_, err := fmt.Fprintln(w, "\npayload: empty")
		return err
	case b64:
		body, form = base64.StdEncoding.EncodeToString(p)+"\n", "base64"
	case isText(p):
		body, form = string(p), "text"
		if !strings.HasSuffix(body, "\n") {
			body += "\n"
		}
	default:
		body, form = hex.Dump(p), "hex dump"
	}
	_, err := fmt.Fprintf(w, "\npayload (%s, %s):\n%s", plural(len(p), "byte"), form, body)
	return err
}

// isText reports whether b is UTF-8 made of printable characters, spaces,
// newlines and tabs.
func isText(b []byte) bool {
	return utf8.Valid(b) && !strings.ContainsFunc(string(b), func(r rune) bool {
		return !unicode.IsPrint(r) && r != '\n' && r != '\t' && r != '\r'
	})
}

func (a *app) deadDeleteCmd() *cobra.Command {
	var (
		ff       deadFilterFlags
		all, yes bool
	)
	cmd := &cobra.Command{
		Use:   "delete QUEUE",
		Short: "Delete the dead items that match the filter flags",
		Long: `Delete the dead items of a dead-letter queue that match the filter flags
for good. Without a filter flag every dead item matches, which --all must
confirm (the request then carries all: true). Leased items (a consumer of
the dead-letter queue holds them) are never deleted, and a queue that is no
queue's dead-letter queue is refused.

Unless --yes, the matching items are counted first and the command asks
"Delete N items from QUEUE? [y/N]" on stdin; any answer but y or yes
aborts (exit status 1). Items that die after the count are not deleted.`,
		Args: exactArgs(1, "a QUEUE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			filter, err := ff.filter(a.now())
			if err != nil {
				return err
			}
			if filter == nil && !all {
				return fmt.Errorf("refusing to delete every item of %s without --all (or select items with %s)", name, deadFilterFlagNames)
			}
			return a.withClient(cmd, func(c *styx.Client) error {
				if !yes {
					n, last, err := countDead(cmd.Context(), c, name, filter)
					if err != nil {
						return err
					}
					if n == 0 {
						if a.json {
							return writeJSON(a.stdout, &pb.DeadDeleteResponse{})
						}
						return a.done("no items of %s match: nothing deleted", name)
					}
					ok, err := confirm(cmd.InOrStdin(), a.stderr, fmt.Sprintf("Delete %s from %s? [y/N] ", plural(n, "item"), name))
					if err != nil {
						return err
					}
					if !ok {
						return errors.New("aborted: nothing deleted")
					}
					filter = pinDeadBefore(filter, last)
				}
				// An empty filter reaches the server only with --all (checked
				// above): all confirms it there too.
				res, err := c.DeadDelete(cmd.Context(), &pb.DeadDeleteRequest{QueueName: name, Filter: filter, All: filter == nil})
				if err != nil {
					return err
				}
				if a.json {
					return writeJSON(a.stdout, res)
				}
				return a.done("deleted %s from %s", plural(int(res.Deleted), "item"), name)
			})
		},
	}
	f := cmd.Flags()
	ff.add(f)
	f.BoolVar(&all, "all", false, "allow deleting every item of the queue (no filter flag)")
	f.BoolVar(&yes, "yes", false, "do not count and ask for confirmation")
	return cmd
}

// countDead counts the items of queue name that match filter and are not
// leased (dead.delete skips leased items), and returns the latest dead_at
// among them (nil if none has one).
func countDead(ctx context.Context, c *styx.Client, name string, filter *pb.DeadFilter) (int, *timestamppb.Timestamp, error) {
	n := 0
	var last *timestamppb.Timestamp
	err := eachDeadPage(ctx, c, &pb.DeadListRequest{QueueName: name, Filter: filter, Limit: deadPageSize, WithoutPayload: true},
		func(items []*pb.StorageItem) error {
			for _, it := range items {
				if it.IsLeased {
					continue // never deleted: not counted
				}
				n++
				if it.DeadAt != nil && (last == nil || it.DeadAt.AsTime().After(last.AsTime())) {
					last = it.DeadAt
				}
			}
			return nil
		})
	return n, last, err
}

// pinDeadBefore returns filter narrowed to items that died no later than
// last (the latest dead_at counted), so that items dying after a count was
// confirmed are not deleted with it. A nil last leaves filter unchanged.
func pinDeadBefore(filter *pb.DeadFilter, last *timestamppb.Timestamp) *pb.DeadFilter {
	if last == nil {
		return filter
	}
	before := last.AsTime().Add(time.Nanosecond)
	if filter == nil {
		filter = &pb.DeadFilter{}
	}
	if filter.DeadBefore == nil || before.Before(filter.DeadBefore.AsTime()) {
		filter.DeadBefore = timestamppb.New(before)
	}
	return filter
}

// confirm writes prompt to w and reports whether the line read from r is
// y or yes (in any case).
func confirm(r io.Reader, w io.Writer, prompt string) (bool, error) {
	_, _ = fmt.Fprint(w, prompt)
	line, err := bufio.NewReader(r).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return false, fmt.Errorf("read answer: %w", err)
	}
	if errors.Is(err, io.EOF) && line == "" {
		_, _ = fmt.Fprintln(w)
	}
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return true, nil
	}
	return false, nil
}

func (a *app) deadRedriveCmd() *cobra.Command {
	var (
		ff                  deadFilterFlags
		to                  string
		rate                = rateFlag{n: styx.DefaultRedriveRate, given: fmt.Sprint(styx.DefaultRedriveRate)}
		dryRun, detach, all bool
		maxRedriveCount     int32
		canary              int32
		canaryTimeout       time.Duration
	)
	cmd := &cobra.Command{
		Use:   "redrive QUEUE",
		Short: "Move dead items back to their source queue (or --to a queue)",
		Long: `Start a redrive task on the server: it moves the items of a dead-letter
queue that match the filter flags, oldest first, back to the queue each
died in, or all to --to. Without a filter flag every dead item matches,
which --all must confirm (not needed with --dry-run). Redriven items start
over with no attempts and keep their attempt history, plus an entry saying
when, by which task and from which dead-letter queue they were redriven.
Items already redriven --max-redrive-count times are skipped, and so are
leased items and items whose source queue no longer exists. Items another
unfinished redrive task (running or paused) has not reached yet are left to
it, skipped here, and the command says to which task; a redrive naming its
items by --id takes them even so.

--dry-run only counts the matching items: by destination queue, how many
would move and how many would stay (skipped), and why, as a redrive started
now would (items left to another task included).

--rate caps the moves at that many items a second: 100 by default, so that
a consumer that was failing sees its traffic come back gradually; --rate 0
moves as fast as the server can (no limit). The server's rate is whole items
a second: a decimal such as 2.5 is rounded (a note on stderr says so), and a
rate between 0 and 1 is refused.

--canary N moves the first N items, then waits for their outcome (up to
--canary-timeout, 5m by default): every one completed, the task goes on;
one retried or dead again, or no outcome in time, the task pauses ('styx
redrives resume' goes on, 'styx redrives cancel' stops). The canary is
stored with the task: it survives a server restart.

The command follows the task until it ends: a progress bar on stderr when
it is a terminal (otherwise a progress line every 5 seconds), then a
summary by destination queue. Ctrl-C asks the server to cancel the task and
waits for it to stop; a second Ctrl-C stops waiting. --detach returns once
the task has started (follow it with 'styx redrives show TASK_ID').
Exits 1 if the task failed.`,
		Args: exactArgs(1, "a QUEUE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			filter, err := ff.filter(a.now())
			if err != nil {
				return err
			}
			if filter == nil && !all && !dryRun {
				return fmt.Errorf("refusing to redrive every item of %s without --all (or select items with %s)", name, deadFilterFlagNames)
			}
			if rate.rounded() {
				_, _ = fmt.Fprintf(a.stderr, "--rate %s rounded to %s a second: the server moves whole items a second\n",
					rate.given, plural(int(rate.n), "item"))
			}
			return a.withClient(cmd, func(c *styx.Client) error {
				task, err := c.DeadRedrive(cmd.Context(), &pb.DeadRedriveRequest{
					QueueName: name, Filter: filter, Destination: to, RateLimit: rate.n,
					DryRun: dryRun, MaxRedriveCount: maxRedriveCount, All: filter == nil,
					Canary: canary, CanaryTimeout: canaryTimeoutText(canaryTimeout),
				})
				if err != nil {
					return err
				}
				switch {
				case dryRun:
					if a.json {
						return writeJSON(a.stdout, task)
					}
					return a.printDryRun(cmd.Context(), c, task)
				case detach:
					if a.json {
						return writeJSON(a.stdout, task)
					}
					if note := a.leftNote(cmd.Context(), c, task); note != "" {
						_, _ = fmt.Fprintln(a.stderr, note)
					}
					return a.done("started redrive task %s on %s: %s matched; follow it with 'styx redrives show %s'",
						task.TaskId, name, plural(int(task.Matched), "item"), task.TaskId)
				}
				return a.followRedrive(cmd.Context(), c, task)
			})
		},
	}
	f := cmd.Flags()
	ff.add(f)
	f.StringVar(&to, "to", "", "move every item to this queue instead of its source queue")
	f.Var(&rate, "rate", "most items moved per second, 1 or more (a decimal is rounded to whole items); 0 is no limit")
	f.Int32Var(&canary, "canary", 0, "move this many items first and wait for their outcome: go on if all complete, pause if one fails again")
	f.DurationVar(&canaryTimeout, "canary-timeout", 0, "how long the canary waits for its items' outcome (1s to 24h); 0 is the server's default (5m)")
	f.BoolVar(&dryRun, "dry-run", false, "only count the items that would be redriven")
	f.Int32Var(&maxRedriveCount, "max-redrive-count", 0,
		"skip items already redriven this many times; 0 is the server's default (10), -1 is no limit")
	f.BoolVar(&detach, "detach", false, "return once the task has started instead of following it")
	f.BoolVar(&all, "all", false, "allow redriving every item of the queue (no filter flag)")
	return cmd
}

// skipNotes says each skip reason of a dry run (RedriveTask.skip_reasons)
// in words.
var skipNotes = map[string]string{
	"source_gone": "queue does not exist: items stay",
	"not_covered": "the API key may not reach this queue",
	"loop_cap":    "redriven max-redrive-count times",
	"leased":      "leased from the dead-letter queue",
	"other_task":  "held by another redrive task",
}

// printDryRun prints what the server's dry run says a redrive would do:
// how many of the matched items it would move and skip, by destination
// queue, with the reasons of the skips (RedriveTask.by_destination).
func (a *app) printDryRun(ctx context.Context, c *styx.Client, task *pb.RedriveTask) error {
	if task.Matched == 0 {
		_, err := fmt.Fprintf(a.stdout, "would redrive 0 items from %s\n", task.QueueName)
		return err
	}
	by := task.ByDestination
	queues := slices.Collect(maps.Keys(by))
	total := func(q string) int64 { return by[q].WouldMove + by[q].WouldSkip }
	slices.SortFunc(queues, func(x, y string) int { return cmp.Or(cmp.Compare(total(y), total(x)), cmp.Compare(x, y)) })
	if _, err := fmt.Fprintf(a.stdout, "would redrive %d of %s from %s (%d skipped)\n\n",
		task.WouldMove, plural(int(task.Matched), "matched item"), task.QueueName, task.WouldSkip); err != nil {
		return err
	}
	t := newTable(a.stdout, "QUEUE", "WOULD-MOVE", "WOULD-SKIP", "NOTE")
	for _, q := range queues {
		var notes []string
		for _, r := range slices.Sorted(maps.Keys(by[q].SkipReasons)) {
			notes = append(notes, fmt.Sprintf("%d %s", by[q].SkipReasons[r], cmp.Or(skipNotes[r], r)))
		}
		t.row(orDash(q), fmt.Sprint(by[q].WouldMove), fmt.Sprint(by[q].WouldSkip), orDash(strings.Join(notes, "; ")))
	}
	if err := t.flush(); err != nil {
		return err
	}
	if note := a.leftNote(ctx, c, task); note != "" {
		_, err := fmt.Fprintf(a.stdout, "\n%s\n", note)
		return err
	}
	return nil
}

// rateFlag is --rate: items a second, as the server takes it (a whole
// number, RedriveTask.rate_limit), given as a number that may have a
// fraction: 0 is no limit, a fraction of 1 or more is rounded to the
// nearest whole number, and a rate between 0 and 1, which the server
// cannot run, is refused.
type rateFlag struct {
	// n is the rate sent; given is the flag's text.
	n     int32
	given string
}

func (r *rateFlag) String() string { return fmt.Sprint(r.n) }
func (r *rateFlag) Type() string   { return "items/s" }

func (r *rateFlag) Set(s string) error {
	v, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	switch {
	case err != nil || math.IsNaN(v) || math.IsInf(v, 0):
		return fmt.Errorf("%q is not a number of items a second", s)
	case v < 0:
		return fmt.Errorf("%s is below 0: give items a second, or 0 for no limit", s)
	case v > 0 && v < 1:
		return fmt.Errorf("%s is less than 1 item a second, which the server cannot run: it moves whole items a second (1 to %d), or 0 for no limit",
			s, maxRate)
	case math.Round(v) > maxRate:
		return fmt.Errorf("%s is above the server's limit of %d items a second", s, maxRate)
	}
	r.n, r.given = int32(math.Round(v)), s
	return nil
}

// rounded reports whether the rate given had a fraction, rounded away.
func (r *rateFlag) rounded() bool {
	v, err := strconv.ParseFloat(strings.TrimSpace(r.given), 64)
	return err == nil && v != float64(r.n)
}

// maxRate is the highest redrive rate the server takes (items a second).
const maxRate = redrive.MaxRateLimit

package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/styxq/styx"
	pb "github.com/styxq/styx/styxpb"
)

// deadReasonNames are the dead reasons --reason accepts.
var deadReasonNames = []string{"max_attempts", "expired", "explicit"}

// deadFilterFlags are the flags that select dead items (a DeadFilter),
// shared by dead list, delete and redrive.
type deadFilterFlags struct {
	ids           []string
	source        string
	reason        string
	kind          string
	errorContains string
	since, until  string
	fingerprint   string
	reference     string
	payload       string
}

// deadFilterFlagNames lists the flags of deadFilterFlags, for messages.
const deadFilterFlagNames = "--reason, --source, --kind, --error, --since, --until, --id, --fingerprint, --reference, --payload-contains"

func (d *deadFilterFlags) add(fs *pflag.FlagSet) {
	fs.StringVar(&d.reason, "reason", "", "only items that died for this reason: "+strings.Join(deadReasonNames, ", "))
	fs.StringVar(&d.source, "source", "", "only items that died in this source queue")
	fs.StringVar(&d.kind, "kind", "", "only items of this kind")
	fs.StringVar(&d.errorContains, "error", "", "only items whose last error contains this text")
	fs.StringVar(&d.since, "since", "", "only items that died in the last DURATION (such as 2h or 3d), or at or after an RFC 3339 time")
	fs.StringVar(&d.until, "until", "", "only items that died before an RFC 3339 time, or more than DURATION ago")
	fs.StringVar(&d.fingerprint, "fingerprint", "", "only items whose last error has this fingerprint (an error group, as dead groups prints)")
	fs.StringVar(&d.reference, "reference", "", "only the items of this reference (exact; the business id a producer gave)")
	fs.StringVar(&d.payload, "payload-contains", "", "only items whose payload contains this text (case matters)")
	fs.StringSliceVar(&d.ids, "id", nil, "only these item ids (repeat the flag or separate with commas; at most 1000)")
}

// filter returns the DeadFilter the flags select, with --since and --until
// taken relative to now; nil if no flag was given (every item matches).
func (d *deadFilterFlags) filter(now time.Time) (*pb.DeadFilter, error) {
	if d.reason != "" && !slices.Contains(deadReasonNames, d.reason) {
		return nil, fmt.Errorf("--reason: %q is not one of %s", d.reason, strings.Join(deadReasonNames, ", "))
	}
	f := &pb.DeadFilter{
		Ids: d.ids, SourceQueue: d.source, Reason: d.reason, Kind: d.kind, ErrorContains: d.errorContains,
		Fingerprint: d.fingerprint, Reference: d.reference, PayloadContains: d.payload,
	}
	for _, t := range []struct {
		flag, value string
		dst         **timestamppb.Timestamp
	}{{"--since", d.since, &f.DeadAfter}, {"--until", d.until, &f.DeadBefore}} {
		if t.value == "" {
			continue
		}
		at, err := parseWhen(t.flag, t.value, now)
		if err != nil {
			return nil, err
		}
		*t.dst = timestamppb.New(at)
	}
	if f.DeadAfter != nil && f.DeadBefore != nil && !f.DeadAfter.AsTime().Before(f.DeadBefore.AsTime()) {
		return nil, fmt.Errorf("--since (%s) must be before --until (%s)", formatTime(f.DeadAfter), formatTime(f.DeadBefore))
	}
	if len(f.Ids) == 0 && f.SourceQueue == "" && f.Reason == "" && f.Kind == "" && f.ErrorContains == "" && f.Fingerprint == "" &&
		f.Reference == "" && f.PayloadContains == "" && f.DeadAfter == nil && f.DeadBefore == nil {
		return nil, nil
	}
	return f, nil
}

// parseDays parses a Go duration that may start with a count of days, as
// the UI's filters take them: "3d", "1d12h", "90m".
func parseDays(s string) (time.Duration, error) {
	days, rest, ok := strings.Cut(s, "d")
	if !ok {
		return time.ParseDuration(s)
	}
	n, err := strconv.ParseUint(days, 10, 16)
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration", s)
	}
	d := time.Duration(n) * 24 * time.Hour
	if rest != "" {
		r, err := time.ParseDuration(rest)
		if err != nil {
			return 0, err
		}
		d += r
	}
	return d, nil
}

// parseWhen parses an RFC 3339 time, or a duration (days allowed: 3d,
// 1d12h) meaning that long before now.
func parseWhen(flag, s string, now time.Time) (time.Time, error) {
	if d, err := parseDays(s); err == nil {
		if d < 0 {
			return time.Time{}, fmt.Errorf("%s: %s is negative", flag, s)
		}
		return now.Add(-d), nil
	}
	at, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%s: %q is neither a duration such as 90m or 3d nor an RFC 3339 time such as 2026-01-02T15:04:05Z", flag, s)
	}
	return at, nil
}

// describeFilter formats f as the flags that select it, or "every item".
func describeFilter(f *pb.DeadFilter) string {
	var parts []string
	add := func(flag, v string) {
		if v != "" {
			parts = append(parts, fmt.Sprintf("%s %q", flag, v))
		}
	}
	add("--reason", f.GetReason())
	add("--source", f.GetSourceQueue())
	add("--kind", f.GetKind())
	add("--error", f.GetErrorContains())
	add("--fingerprint", f.GetFingerprint())
	add("--reference", f.GetReference())
	add("--payload-contains", f.GetPayloadContains())
	if f.GetDeadAfter() != nil {
		add("--since", formatTime(f.DeadAfter))
	}
	if f.GetDeadBefore() != nil {
		add("--until", formatTime(f.DeadBefore))
	}
	if ids := f.GetIds(); len(ids) > 0 {
		parts = append(parts, "--id "+strings.Join(ids, ","))
	}
	if len(parts) == 0 {
		return "every item"
	}
	return strings.Join(parts, " ")
}

// deadPageSize is the page size for commands that read every matching dead
// item (the server's largest).
const deadPageSize = 1000

// eachDeadPage calls fn with each page of req.QueueName's items that match
// req.Filter, from req.Pivot to the end, following next_pivot. A page may be
// empty while more follow. It changes req.Pivot.
func eachDeadPage(ctx context.Context, c *styx.Client, req *pb.DeadListRequest, fn func([]*pb.StorageItem) error) error {
	for {
		res, err := c.DeadList(ctx, req)
		if err != nil {
			return err
		}
		if err := fn(res.Items); err != nil {
			return err
		}
		if res.NextPivot == "" {
			return nil
		}
		req.Pivot = res.NextPivot
	}
}

package main

import (
	"fmt"
	"strings"
	"time"

	pb "github.com/styxq/styx/styxpb"
)

// outcomesText says what became of a task's moved items (issue 49), the
// buckets that are not 0 ("2 completed, 1 retried, 1 dead again, 2
// pending"); "-" for a task without outcomes (a dry run, or one started
// before they were counted).
func outcomesText(o *pb.RedriveOutcomes) string {
	if o == nil {
		return "-"
	}
	var parts []string
	for _, b := range []struct {
		n    int64
		word string
	}{{o.Completed, "completed"}, {o.Retried, "retried"}, {o.DeadAgain, "dead again"}, {o.Pending, "pending"}} {
		if b.n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", b.n, b.word))
		}
	}
	if len(parts) == 0 {
		return "none yet"
	}
	return strings.Join(parts, ", ")
}

// canaryText says where a task's canary is; "" without one.
func (a *app) canaryText(t *pb.RedriveTask) string {
	if t.Canary <= 0 {
		return ""
	}
	head := fmt.Sprintf("%s, wait %s: ", plural(int(t.Canary), "item"), trimDuration(t.CanaryTimeout))
	switch t.CanaryStatus {
	case "waiting":
		return head + fmt.Sprintf("waiting for the outcome of %s, until %s", plural(int(t.CanaryMoved), "item"), a.when(t.CanaryDeadline))
	case "passed":
		return head + "passed (every canary item completed)"
	case "failed":
		return head + "failed (a canary item was retried or died again): the task paused; resume it to go on, or cancel it"
	case "timed_out":
		return head + "timed out (not every canary item completed in time): the task paused; resume it to go on, or cancel it"
	}
	return head + "moving its items"
}

// printOutcomes adds a task's outcomes and canary to a show table.
func (a *app) printOutcomes(tw *table, t *pb.RedriveTask) {
	if t.Outcomes != nil {
		o := outcomesText(t.Outcomes)
		if t.OutcomesUntil != nil {
			o += "; counted until " + a.when(t.OutcomesUntil)
		}
		tw.row("outcomes", o)
	}
	if c := a.canaryText(t); c != "" {
		tw.row("canary", c)
	}
}

// canaryTimeoutText is --canary-timeout as the wire takes it ("" for the
// server's default).
func canaryTimeoutText(d time.Duration) string {
	if d == 0 {
		return ""
	}
	return d.String()
}

// trimDuration is a Go duration's text without its zero tail ("2m0s" is
// "2m", "1h0m0s" "1h"); other text as it is.
func trimDuration(s string) string {
	if _, err := time.ParseDuration(s); err != nil {
		return s
	}
	for _, tail := range []string{"0s", "0m"} {
		if t, ok := strings.CutSuffix(s, tail); ok && t != "" && !strings.HasSuffix(t, ".") {
			s = t
		}
	}
	return s
}

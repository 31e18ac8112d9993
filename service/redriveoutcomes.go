package service

import (
	"github.com/styxq/styx/internal/redrive"
	pb "github.com/styxq/styx/styxpb"
)

// toOutcomes sets the wire fields of task t's outcomes and canary (issue
// 49) on out.
func toOutcomes(out *pb.RedriveTask, t *redrive.Task) {
	if o := t.Outcomes; o != nil {
		out.Outcomes = &pb.RedriveOutcomes{Completed: o.Completed, Retried: o.Retried, DeadAgain: o.DeadAgain, Pending: o.Pending}
		if !t.FinishedAt.IsZero() {
			out.OutcomesUntil = ts(t.FinishedAt.Add(redrive.OutcomeWindow))
		}
	}
	if t.Canary > 0 {
		out.Canary, out.CanaryTimeout = t.Canary, t.CanaryTimeout.String()
		out.CanaryStatus, out.CanaryMoved = t.CanaryStatus, t.CanaryMoved
		if t.CanaryStatus == redrive.CanaryWaiting {
			out.CanaryDeadline = ts(t.CanaryAt.Add(t.CanaryTimeout))
		}
	}
}

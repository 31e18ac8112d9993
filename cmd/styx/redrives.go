package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/styxq/styx"
	pb "github.com/styxq/styx/styxpb"
)

// Following a redrive task: how often its progress is read, and how often
// a progress line is printed when stderr is not a terminal.
const (
	redrivePoll      = 200 * time.Millisecond
	redriveLineEvery = 5 * time.Second
	// rateWindow is the span of recent progress the rate is measured over.
	rateWindow = 5 * time.Second
	// barWidth is the width of the progress bar between its brackets.
	barWidth = 20
)

// Redrive task statuses (RedriveTask.status).
const (
	statusRunning    = "running"
	statusCancelling = "cancelling"
	statusFailed     = "failed"
	statusPausing    = "pausing"
	statusPaused     = "paused"
)

// taskFinished reports whether a task has ended (completed, cancelled or
// failed): not running, cancelling, pausing or paused.
func taskFinished(t *pb.RedriveTask) bool {
	switch t.Status {
	case statusRunning, statusCancelling, statusPausing, statusPaused:
		return false
	}
	return true
}

func (a *app) redrivesCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "redrives",
		Short: "List, show, pause, resume, re-rate and cancel redrive tasks (see 'styx dead redrive')",
	}
	cmd.AddCommand(a.redrivesListCmd(), a.redrivesShowCmd(), a.redrivesCancelCmd(),
		a.redrivesPauseCmd(), a.redrivesResumeCmd(), a.redrivesUpdateCmd())
	return a.addClientFlags(cmd)
}

func (a *app) redrivesListCmd() *cobra.Command {
	var name string
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List redrive tasks, newest first",
		Long: `List the redrive tasks the server knows, newest first: running ones and the
last 100 finished ones per dead-letter queue. OUTCOMES says what became of
the items each task moved (completed, retried, dead again, pending), counted
while it runs and for 24 hours after it ends. --queue lists only the tasks
of one dead-letter queue. --json prints one task per line.`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.withClient(cmd, func(c *styx.Client) error {
				res, err := c.RedrivesList(cmd.Context(), &pb.RedrivesListRequest{QueueName: name})
				if err != nil {
					return err
				}
				if a.json {
					for _, t := range res.Tasks {
						if err := writeJSON(a.stdout, t); err != nil {
							return err
						}
					}
					return nil
				}
				tw := newTable(a.stdout, "TASK", "QUEUE", "STATUS", "MATCHED", "MOVED", "FAILED", "SKIPPED", "DESTINATION", "STARTED", "DURATION", "OUTCOMES", "KEY")
				for _, t := range res.Tasks {
					tw.row(t.TaskId, t.QueueName, t.Status, fmt.Sprint(t.Matched), fmt.Sprint(t.Moved), fmt.Sprint(t.Failed),
						fmt.Sprint(t.Skipped), destination(t), relative(a.now(), t.StartedAt), a.taskDuration(t), outcomesText(t.Outcomes), orDash(t.KeyName))
				}
				return tw.flush()
			})
		},
	}
	cmd.Flags().StringVar(&name, "queue", "", "only the tasks of this dead-letter queue")
	return cmd
}

func (a *app) redrivesShowCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "show TASK_ID",
		Short: "Show a redrive task: its request, progress and results by queue",
		Long: `Show a redrive task: its request, progress, results by queue, and what became
of the items it moved (outcomes: completed, retried once or more, dead again,
pending), counted while it runs and for 24 hours after it ends, and its
canary, if it has one (--canary of 'styx dead redrive').`,
		Args: exactArgs(1, "a TASK_ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withClient(cmd, func(c *styx.Client) error {
				t, err := c.RedrivesGet(cmd.Context(), &pb.RedriveTaskRequest{TaskId: args[0]})
				if err != nil {
					return err
				}
				if a.json {
					return writeJSON(a.stdout, t)
				}
				return a.printTask(t, true)
			})
		},
	}
}

func (a *app) redrivesCancelCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "cancel TASK_ID",
		Short: "Cancel a running or paused redrive task",
		Long: `Cancel a redrive task. A running one stops after its current batch: its
status becomes cancelling, then cancelled. A paused one is cancelled at
once. The items it moved stay moved; the others stay in the dead-letter
queue. A finished task is left as it is.`,
		Args: exactArgs(1, "a TASK_ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withClient(cmd, func(c *styx.Client) error {
				// The status before the cancel tells a paused task the
				// cancel ended from one that had ended already.
				before, err := c.RedrivesGet(cmd.Context(), &pb.RedriveTaskRequest{TaskId: args[0]})
				if err != nil {
					return err
				}
				t, err := c.RedrivesCancel(cmd.Context(), &pb.RedriveTaskRequest{TaskId: args[0]})
				if err != nil {
					return err
				}
				if a.json {
					return writeJSON(a.stdout, t)
				}
				switch {
				case taskFinished(before):
					return a.done("redrive task %s already ended: %s", t.TaskId, t.Status)
				case taskFinished(t):
					return a.done("%s %s redrive task %s on %s after %s of %d moved", t.Status, before.Status, t.TaskId, t.QueueName,
						plural(int(t.Moved), "item"), t.Matched)
				}
				return a.done("cancelling redrive task %s on %s after %s of %d moved", t.TaskId, t.QueueName,
					plural(int(t.Moved), "item"), t.Matched)
			})
		},
	}
}

func (a *app) redrivesPauseCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "pause TASK_ID",
		Short: "Pause a running redrive task after its current batch",
		Long: `Pause a running redrive task: it stops after its current batch (status
pausing, then paused) and moves nothing until 'styx redrives resume'. The
pause is stored: the task stays paused across server restarts and, with
several servers on PostgreSQL, when its server fails. A paused task can be
re-rated ('styx redrives update') or cancelled. A paused task is left as it
is; an ended one is refused.`,
		Args: exactArgs(1, "a TASK_ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withClient(cmd, func(c *styx.Client) error {
				t, err := c.RedrivesPause(cmd.Context(), &pb.RedriveTaskRequest{TaskId: args[0]})
				if err != nil {
					return err
				}
				if a.json {
					return writeJSON(a.stdout, t)
				}
				return a.done("%s redrive task %s on %s after %s of %d moved; 'styx redrives resume %s' goes on",
					t.Status, t.TaskId, t.QueueName, plural(int(t.Moved), "item"), t.Matched, t.TaskId)
			})
		},
	}
}

func (a *app) redrivesResumeCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "resume TASK_ID",
		Short: "Resume a paused redrive task where it stopped",
		Long: `Resume a paused redrive task: it goes on from where it stopped, at its
rate limit (change it first with 'styx redrives update' if needed). A
running task is left as it is; an ended one is refused.`,
		Args: exactArgs(1, "a TASK_ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withClient(cmd, func(c *styx.Client) error {
				t, err := c.RedrivesResume(cmd.Context(), &pb.RedriveTaskRequest{TaskId: args[0]})
				if err != nil {
					return err
				}
				if a.json {
					return writeJSON(a.stdout, t)
				}
				return a.done("%s redrive task %s on %s: %s of %d moved so far, %s", t.Status, t.TaskId, t.QueueName,
					plural(int(t.Moved), "item"), t.Matched, rateText(t.RateLimit))
			})
		},
	}
}

func (a *app) redrivesUpdateCmd() *cobra.Command {
	var rate rateFlag
	cmd := &cobra.Command{
		Use:   "update TASK_ID --rate N",
		Short: "Change the rate limit of a running or paused redrive task",
		Long: `Change the rate limit of a running or paused redrive task: --rate items a
second (a decimal is rounded to whole items; 0 is no limit). A running task
moves at the new rate from its next batch. An ended task is refused.`,
		Args: exactArgs(1, "a TASK_ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !cmd.Flags().Changed("rate") {
				return fmt.Errorf("give the new rate with --rate N (items a second; 0 for no limit)")
			}
			if rate.rounded() {
				_, _ = fmt.Fprintf(a.stderr, "--rate %s rounded to %s a second: the server moves whole items a second\n",
					rate.given, plural(int(rate.n), "item"))
			}
			return a.withClient(cmd, func(c *styx.Client) error {
				t, err := c.RedrivesUpdate(cmd.Context(), &pb.RedrivesUpdateRequest{TaskId: args[0], RateLimit: rate.n})
				if err != nil {
					return err
				}
				if a.json {
					return writeJSON(a.stdout, t)
				}
				return a.done("%s redrive task %s on %s: now %s", t.Status, t.TaskId, t.QueueName, rateText(t.RateLimit))
			})
		},
	}
	cmd.Flags().Var(&rate, "rate", "most items moved per second, 1 or more (a decimal is rounded to whole items); 0 is no limit")
	return cmd
}

// rateText says a task's rate limit in words.
func rateText(rate int32) string {
	if rate <= 0 {
		return "no rate limit"
	}
	return plural(int(rate), "item") + " a second"
}

// destination returns a task's destination, or "(source)" when each item
// goes back to its source queue.
func destination(t *pb.RedriveTask) string {
	if t.Destination == "" {
		return "(source)"
	}
	return t.Destination
}

// taskDuration returns how long a task ran, or has run so far.
func (a *app) taskDuration(t *pb.RedriveTask) string {
	if t.StartedAt == nil {
		return "-"
	}
	end := a.now()
	if t.FinishedAt != nil {
		end = t.FinishedAt.AsTime()
	}
	return durationText(max(end.Sub(t.StartedAt.AsTime()), 0).String())
}

// taskRunningTime returns how long a task has run, its pauses left out
// (RedriveTask.paused_ms, and the current pause since paused_at).
func (a *app) taskRunningTime(t *pb.RedriveTask) string {
	if t.StartedAt == nil {
		return "-"
	}
	end := a.now()
	if t.FinishedAt != nil {
		end = t.FinishedAt.AsTime()
	}
	if t.PausedAt != nil && t.PausedAt.AsTime().Before(end) {
		end = t.PausedAt.AsTime()
	}
	ran := end.Sub(t.StartedAt.AsTime()) - time.Duration(t.PausedMs)*time.Millisecond
	return durationText(max(ran, 0).String())
}

// printTask writes a task's status, counts and duration, then its results
// by queue and its failure reason. full adds the request (queue,
// destination, filter, rate, redrive limit), the outcomes and canary, and
// the start and end times.
func (a *app) printTask(t *pb.RedriveTask, full bool) error {
	tw := newTable(a.stdout)
	tw.row("task", t.TaskId)
	if full {
		tw.row("queue", t.QueueName)
		tw.row("destination", destination(t))
		tw.row("filter", describeFilter(t.Filter))
		if t.ErrorPattern != "" {
			tw.row("error pattern", t.ErrorPattern)
		}
		rate := "unlimited"
		if t.RateLimit > 0 {
			rate = plural(int(t.RateLimit), "item") + "/s"
		}
		tw.row("rate limit", rate)
		redrives := "unlimited"
		if t.MaxRedriveCount >= 0 {
			redrives = fmt.Sprint(t.MaxRedriveCount)
		}
		tw.row("max redrive count", redrives)
		tw.row("dry run", fmt.Sprint(t.DryRun))
		tw.row("started by key", orDash(t.KeyName))
	}
	tw.row("status", t.Status)
	tw.row("matched", fmt.Sprint(t.Matched))
	tw.row("moved", fmt.Sprint(t.Moved))
	tw.row("failed", fmt.Sprint(t.Failed))
	tw.row("skipped", fmt.Sprint(t.Skipped))
	if full {
		// Not in the summary a redrive ends with: its items have just moved.
		a.printOutcomes(tw, t)
		tw.row("progress", fmt.Sprintf("%.0f%%", taskPercent(t)))
		tw.row("started", a.when(t.StartedAt))
		tw.row("finished", a.when(t.FinishedAt))
	}
	tw.row("duration", a.taskDuration(t))
	if t.PausedAt != nil || t.PausedMs > 0 {
		tw.row("running time", a.taskRunningTime(t)+" (pauses left out)")
	}
	if t.PausedAt != nil {
		tw.row("paused since", a.when(t.PausedAt))
	}
	if len(t.LeftTo) > 0 {
		var left []string
		for _, id := range slices.Sorted(maps.Keys(t.LeftTo)) {
			left = append(left, fmt.Sprintf("%d to %s", t.LeftTo[id], id))
		}
		tw.row("left to other tasks", strings.Join(left, ", "))
	}
	if t.FailureReason != "" {
		tw.row("failure reason", t.FailureReason)
	}
	if t.Warning != "" {
		tw.row("warning", t.Warning)
	}
	if err := tw.flush(); err != nil {
		return err
	}
	if len(t.ByQueue) == 0 {
		return nil
	}
	queues := make([]string, 0, len(t.ByQueue))
	for q := range t.ByQueue {
		queues = append(queues, q)
	}
	slices.Sort(queues)
	_, _ = fmt.Fprintln(a.stdout)
	tw = newTable(a.stdout, "QUEUE", "MOVED", "FAILED", "SKIPPED")
	for _, q := range queues {
		n := t.ByQueue[q]
		tw.row(orDash(q), fmt.Sprint(n.GetMoved()), fmt.Sprint(n.GetFailed()), fmt.Sprint(n.GetSkipped()))
	}
	return tw.flush()
}

// taskProcessed is how many of a task's items have been dealt with.
func taskProcessed(t *pb.RedriveTask) int64 { return t.Moved + t.Failed + t.Skipped }

// taskPercent is a task's progress, 0 to 100. A task handles the items
// present when it started, so processed items only outnumber the matched
// ones when items matched meanwhile (they were counted before the task's
// snapshot).
func taskPercent(t *pb.RedriveTask) float64 {
	switch {
	case t.Matched > 0:
		return min(100, 100*float64(taskProcessed(t))/float64(t.Matched))
	case taskFinished(t):
		return 100
	default:
		return 0
	}
}

// followRedrive polls a running task until it ends, showing its progress
// on stderr, then prints its summary. The first interrupt (Ctrl-C) asks
// the server to cancel the task and keeps following it; a second one
// ends the process. Returns an error if the task failed.
func (a *app) followRedrive(ctx context.Context, c *styx.Client, task *pb.RedriveTask) error {
	interrupts := make(chan os.Signal, 1)
	signal.Notify(interrupts, os.Interrupt)
	defer signal.Stop(interrupts)

	tty := a.terminal(a.stderr)
	to := "their source queues"
	switch {
	case task.Destination != "":
		to = task.Destination
	case task.Matched == 1:
		to = "its source queue"
	}
	_, _ = fmt.Fprintf(a.stderr, "redriving %s from %s to %s (task %s); Ctrl-C cancels\n",
		plural(int(task.Matched), "item"), task.QueueName, to, task.TaskId)
	if note := a.leftNote(ctx, c, task); note != "" {
		_, _ = fmt.Fprintln(a.stderr, note)
	}
	p := &progress{}
	p.add(a.now(), task)
	lastLine := a.now()
	drawn := false
	tick := time.NewTicker(redrivePoll)
	defer tick.Stop()
	for !taskFinished(task) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-interrupts:
			// Back to the default: a second Ctrl-C ends the process.
			signal.Stop(interrupts)
			interrupts = nil
			if drawn {
				_, _ = fmt.Fprintln(a.stderr)
				drawn = false
			}
			_, _ = fmt.Fprintf(a.stderr, "cancelling task %s; waiting for it to stop (Ctrl-C again to stop waiting)\n", task.TaskId)
			t, err := c.RedrivesCancel(ctx, &pb.RedriveTaskRequest{TaskId: task.TaskId})
			if err != nil {
				return fmt.Errorf("cancel redrive task %s: %w", task.TaskId, err)
			}
			task = t
			continue
		case <-tick.C:
		}
		t, err := c.RedrivesGet(ctx, &pb.RedriveTaskRequest{TaskId: task.TaskId})
		if err != nil {
			return fmt.Errorf("follow redrive task %s (it goes on; see 'styx redrives show %s'): %w", task.TaskId, task.TaskId, err)
		}
		task = t
		now := a.now()
		p.add(now, task)
		switch {
		case tty:
			_, _ = fmt.Fprintf(a.stderr, "\r%s\x1b[K", p.line(task, true))
			drawn = true
		case now.Sub(lastLine) >= redriveLineEvery && !taskFinished(task):
			_, _ = fmt.Fprintf(a.stderr, "redrive %s: %s\n", task.TaskId, p.line(task, false))
			lastLine = now
		}
	}
	if drawn {
		_, _ = fmt.Fprintln(a.stderr)
	}
	if a.json {
		if err := writeJSON(a.stdout, task); err != nil {
			return err
		}
	} else if err := a.printTask(task, false); err != nil {
		return err
	}
	if task.Status == statusFailed {
		return fmt.Errorf("redrive task %s failed: %s", task.TaskId, orDash(task.FailureReason))
	}
	return nil
}

// isTerminal reports whether w is a terminal (a character device).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// progress keeps a task's recent progress to measure its rate.
type progress struct{ samples []progressSample }

type progressSample struct {
	at               time.Time
	moved, processed int64
}

// add records t's counts at time at, keeping rateWindow of history.
func (p *progress) add(at time.Time, t *pb.RedriveTask) {
	p.samples = append(p.samples, progressSample{at: at, moved: t.Moved, processed: taskProcessed(t)})
	for len(p.samples) > 2 && at.Sub(p.samples[1].at) >= rateWindow {
		p.samples = p.samples[1:]
	}
}

// rates returns the items moved and processed per second over the window.
func (p *progress) rates() (moved, processed float64) {
	if len(p.samples) < 2 {
		return 0, 0
	}
	first, last := p.samples[0], p.samples[len(p.samples)-1]
	secs := last.at.Sub(first.at).Seconds()
	if secs <= 0 {
		return 0, 0
	}
	return float64(last.moved-first.moved) / secs, float64(last.processed-first.processed) / secs
}

// line formats t's progress: "[====>     ] 45123/119762  38%  4012/s  ETA
// 18s", without the bar unless bar.
func (p *progress) line(t *pb.RedriveTask, bar bool) string {
	pct := taskPercent(t)
	moved, processed := p.rates()
	s := fmt.Sprintf("%d/%d  %3.0f%%  %.0f/s", taskProcessed(t), t.Matched, pct, moved)
	switch left := t.Matched - taskProcessed(t); {
	case taskFinished(t) || t.Status == statusCancelling || t.Status == statusPausing || t.Status == statusPaused:
		// A paused task has no ETA: it moves nothing until resumed.
		s += "  " + t.Status
	case left <= 0:
		s += "  ETA 0s"
	case processed > 0:
		s += "  ETA " + shortDuration(time.Duration(float64(left)/processed*float64(time.Second)))
	default:
		s += "  ETA -"
	}
	if t.Failed > 0 || t.Skipped > 0 {
		s += fmt.Sprintf("  (failed %d, skipped %d)", t.Failed, t.Skipped)
	}
	if bar {
		s = progressBar(pct) + " " + s
	}
	return s
}

// progressBar draws pct (0..100) as "[=======>            ]".
func progressBar(pct float64) string {
	filled := int(pct / 100 * barWidth)
	if filled >= barWidth {
		return "[" + strings.Repeat("=", barWidth) + "]"
	}
	filled = max(filled, 0)
	return "[" + strings.Repeat("=", filled) + ">" + strings.Repeat(" ", barWidth-filled-1) + "]"
}

// leftNote says which tasks a task (or a dry run) left matched items to
// (RedriveTask.left_to), with their status now, and how to move them, or ""
// when it left none: "left 4 of the matched items to other redrive tasks,
// which held them when this one started: 4 to rd-1 (paused); a paused task
// moves them once resumed ('styx redrives resume'); name items by id
// (--id) to move them now".
func (a *app) leftNote(ctx context.Context, c *styx.Client, t *pb.RedriveTask) string {
	if len(t.LeftTo) == 0 {
		return ""
	}
	var parts []string
	paused := false
	for _, id := range slices.Sorted(maps.Keys(t.LeftTo)) {
		status := "status unknown"
		if o, err := c.RedrivesGet(ctx, &pb.RedriveTaskRequest{TaskId: id}); err == nil {
			status = o.Status
			paused = paused || o.Status == statusPaused || o.Status == statusPausing
		}
		parts = append(parts, fmt.Sprintf("%d to %s (%s)", t.LeftTo[id], id, status))
	}
	head := "left %d of the matched items to other redrive tasks, which held them when this one started"
	if t.DryRun {
		head = "would leave %d of the matched items to other redrive tasks, which hold them"
	}
	how := "each moves them itself"
	if paused {
		how = "a paused task moves them once resumed ('styx redrives resume')"
	}
	return fmt.Sprintf(head+": %s; %s; name items by id (--id) to move them now",
		sum(t.LeftTo), strings.Join(parts, ", "), how)
}

// sum adds the values of m.
func sum(m map[string]int64) int64 {
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}

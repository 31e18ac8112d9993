package sqs

import (
	"context"
	"encoding/base64"
	"errors"
	"maps"
	"math"
	"net/http"
	"slices"
	"strings"

	"github.com/styxq/styx/internal/auth"
	"github.com/styxq/styx/internal/queue"
	"github.com/styxq/styx/internal/redrive"
)

// sourceQueues returns the names of the queues whose dead-letter queue is
// name, in name order (queue.SourceQueues).
func (h *Handler) sourceQueues(ctx context.Context, name string) ([]string, error) {
	all, err := h.cfg.Queues.List(ctx, queue.ListQueuesParams{})
	if err != nil {
		return nil, err
	}
	return queue.SourceQueues(all, name), nil
}

type listDeadLetterSourceQueuesInput struct {
	QueueURL   string `json:"QueueUrl"`
	MaxResults *int   `json:"MaxResults"`
	NextToken  string `json:"NextToken"`
}

type listDeadLetterSourceQueuesOutput struct {
	QueueUrls []string `json:"queueUrls"`
	NextToken string   `json:"NextToken,omitempty"`
}

func (h *Handler) listDeadLetterSourceQueues(ctx context.Context, r *request) (any, error) {
	var in listDeadLetterSourceQueuesInput
	if err := r.decode(&in); err != nil {
		return nil, err
	}
	_, info, err := h.lookup(ctx, in.QueueURL)
	if err != nil {
		return nil, err
	}
	limit := maxListQueues
	if in.MaxResults != nil {
		if *in.MaxResults < 1 || *in.MaxResults > maxListQueues {
			return nil, invalidParameter("Value %d for parameter MaxResults is invalid. Reason: it must be between 1 and %d.", *in.MaxResults, maxListQueues)
		}
		limit = *in.MaxResults
	}
	names, err := h.sourceQueues(ctx, info.Name)
	if err != nil {
		return nil, err
	}
	if in.NextToken != "" {
		last, err := base64.RawURLEncoding.DecodeString(in.NextToken)
		if err != nil {
			return nil, invalidParameter("Invalid NextToken value '%s'.", in.NextToken)
		}
		for len(names) > 0 && names[0] <= string(last) {
			names = names[1:]
		}
	}
	names = slices.DeleteFunc(names, func(n string) bool { return !auth.Allowed(ctx, n) })
	out := listDeadLetterSourceQueuesOutput{QueueUrls: []string{}}
	for i, n := range names {
		if i == limit {
			if in.MaxResults != nil {
				out.NextToken = base64.RawURLEncoding.EncodeToString([]byte(names[i-1]))
			}
			break
		}
		out.QueueUrls = append(out.QueueUrls, h.queueURL(r.http, n))
	}
	return out, nil
}

type startMessageMoveTaskInput struct {
	SourceArn                    string `json:"SourceArn"`
	DestinationArn               string `json:"DestinationArn"`
	MaxNumberOfMessagesPerSecond *int   `json:"MaxNumberOfMessagesPerSecond"`
}

type taskHandleOutput struct {
	TaskHandle string `json:"TaskHandle"`
}

// taskHandle is an SQS TaskHandle: the Styx redrive task's id, which
// `styx redrives` and the UI show too.
func taskHandle(id string) string {
	return base64.RawURLEncoding.EncodeToString([]byte("styx-redrive:" + id))
}

func taskID(handle string) (string, bool) {
	b, err := base64.RawURLEncoding.DecodeString(handle)
	if err != nil {
		return "", false
	}
	id, ok := strings.CutPrefix(string(b), "styx-redrive:")
	return id, ok && id != ""
}

func (h *Handler) movesEnabled() error {
	if h.cfg.Redrives == nil {
		return &Error{Type: "UnsupportedOperation", Query: "AWS.SimpleQueueService.UnsupportedOperation", Status: http.StatusBadRequest,
			Message: "message move tasks are not available on this server"}
	}
	return nil
}

// startMessageMoveTask starts a Styx redrive task of every dead item of a
// dead-letter queue: back to each item's source queue, or to
// DestinationArn; MaxNumberOfMessagesPerSecond is the task's rate. The
// redrive runner checks the request as it checks /v1's dead.redrive
// (redrive.Runner.Start: the dead-letter rule, the destination, the rate
// limit redrive.MaxRateLimit); this maps its errors onto SQS's answers. A
// move task is for every item of the queue, and SQS runs one active task
// per source queue: one that would overlap an unfinished task is refused
// (redrive.StartParams.RefuseOverlap, naming that task and its status)
// rather than started beside it.
func (h *Handler) startMessageMoveTask(ctx context.Context, r *request) (any, error) {
	if err := h.movesEnabled(); err != nil {
		return nil, err
	}
	var in startMessageMoveTaskInput
	if err := r.decode(&in); err != nil {
		return nil, err
	}
	if in.SourceArn == "" {
		return nil, missingParameter("SourceArn")
	}
	src, err := h.nameFromARN("SourceArn", in.SourceArn)
	if err != nil {
		return nil, err
	}
	var dest string
	if in.DestinationArn != "" {
		if dest, err = h.nameFromARN("DestinationArn", in.DestinationArn); err != nil {
			return nil, err
		}
	}
	rate := 0
	if in.MaxNumberOfMessagesPerSecond != nil {
		// SQS has no unthrottled value: a rate given is at least 1. Start
		// checks the upper limit.
		if rate = *in.MaxNumberOfMessagesPerSecond; rate < 1 {
			return nil, moveRateError(rate)
		}
	}
	if err := h.allow(ctx, src, dest); err != nil {
		return nil, err
	}
	t, err := h.cfg.Redrives.Start(ctx, redrive.StartParams{Queue: src, Destination: dest, RateLimit: int32(min(rate, math.MaxInt32)),
		MaxRedriveCount: -1, KeyName: auth.KeyName(ctx), KeyQueues: auth.KeyQueues(ctx), RefuseOverlap: true})
	switch {
	case errors.Is(err, queue.ErrQueueNotFound):
		return nil, &Error{Type: "ResourceNotFoundException", Status: http.StatusNotFound, Message: "The resource that you specified for the SourceArn parameter doesn't exist."}
	case errors.Is(err, queue.ErrNotDeadLetterQueue):
		return nil, invalidParameter("Source queue must be configured as a Dead Letter Queue.")
	case errors.Is(err, redrive.ErrDestinationIsQueue):
		return nil, invalidParameter("The DestinationArn must not be the SourceArn.")
	case errors.Is(err, redrive.ErrDestinationNotFound):
		return nil, &Error{Type: "ResourceNotFoundException", Status: http.StatusNotFound, Message: "The resource that you specified for the DestinationArn parameter doesn't exist."}
	case errors.Is(err, redrive.ErrRateLimit):
		return nil, moveRateError(rate)
	case err != nil:
		return nil, err
	}
	return taskHandleOutput{TaskHandle: taskHandle(t.ID)}, nil
}

// moveRateError is SQS's answer to a MaxNumberOfMessagesPerSecond out of
// range, with Styx's limit (redrive.MaxRateLimit).
func moveRateError(rate int) error {
	return invalidParameter("Value %d for parameter MaxNumberOfMessagesPerSecond is invalid. Reason: must be between 1 and %d.", rate, redrive.MaxRateLimit)
}

type listMessageMoveTasksInput struct {
	SourceArn  string `json:"SourceArn"`
	MaxResults *int   `json:"MaxResults"`
}

type moveTaskResult struct {
	TaskHandle                        string `json:"TaskHandle,omitempty"`
	Status                            string `json:"Status"`
	SourceArn                         string `json:"SourceArn"`
	DestinationArn                    string `json:"DestinationArn,omitempty"`
	MaxNumberOfMessagesPerSecond      *int32 `json:"MaxNumberOfMessagesPerSecond,omitempty"`
	ApproximateNumberOfMessagesMoved  int64  `json:"ApproximateNumberOfMessagesMoved"`
	ApproximateNumberOfMessagesToMove int64  `json:"ApproximateNumberOfMessagesToMove"`
	FailureReason                     string `json:"FailureReason,omitempty"`
	StartedTimestamp                  int64  `json:"StartedTimestamp"`
}

type listMessageMoveTasksOutput struct {
	Results []moveTaskResult `json:"Results"`
}

// moveStatus maps a redrive task's status onto SQS's.
var moveStatus = map[string]string{
	redrive.StatusRunning: "RUNNING", redrive.StatusCompleted: "COMPLETED", redrive.StatusCancelling: "CANCELLING",
	redrive.StatusCancelled: "CANCELLED", redrive.StatusFailed: "FAILED",
	// SQS has no paused task: a paused redrive (redrives.pause) is still
	// active, and CancelMessageMoveTask cancels it.
	redrive.StatusPausing: "RUNNING", redrive.StatusPaused: "RUNNING",
}

func (h *Handler) listMessageMoveTasks(ctx context.Context, r *request) (any, error) {
	if err := h.movesEnabled(); err != nil {
		return nil, err
	}
	var in listMessageMoveTasksInput
	if err := r.decode(&in); err != nil {
		return nil, err
	}
	if in.SourceArn == "" {
		return nil, missingParameter("SourceArn")
	}
	src, err := h.nameFromARN("SourceArn", in.SourceArn)
	if err != nil {
		return nil, err
	}
	limit := 1
	if in.MaxResults != nil {
		if *in.MaxResults < 1 || *in.MaxResults > 10 {
			return nil, invalidParameter("Value %d for parameter MaxResults is invalid. Reason: must be between 1 and 10.", *in.MaxResults)
		}
		limit = *in.MaxResults
	}
	if _, _, err := h.lookupName(ctx, src); err != nil {
		return nil, &Error{Type: "ResourceNotFoundException", Status: http.StatusNotFound, Message: "The resource that you specified for the SourceArn parameter doesn't exist."}
	}
	tasks, err := h.cfg.Redrives.List(ctx, src)
	if err != nil {
		return nil, err
	}
	out := listMessageMoveTasksOutput{Results: []moveTaskResult{}}
	for _, t := range tasks {
		if len(out.Results) == limit {
			break
		}
		if t.DryRun {
			continue
		}
		res := moveTaskResult{Status: moveStatus[t.Status], SourceArn: h.arn(t.Queue), ApproximateNumberOfMessagesMoved: t.Moved,
			ApproximateNumberOfMessagesToMove: t.Matched,
			FailureReason:                     auth.ShownText(ctx, t.FailureReason, append(slices.Collect(maps.Keys(t.ByQueue)), t.Destination)...), StartedTimestamp: t.StartedAt.UnixMilli()}
		if t.Status == redrive.StatusRunning {
			res.TaskHandle = taskHandle(t.ID)
		}
		if t.Destination != "" {
			res.DestinationArn = h.arn(auth.ShownQueue(ctx, t.Destination))
		}
		if t.RateLimit > 0 {
			rate := t.RateLimit
			res.MaxNumberOfMessagesPerSecond = &rate
		}
		out.Results = append(out.Results, res)
	}
	return out, nil
}

type cancelMessageMoveTaskInput struct {
	TaskHandle string `json:"TaskHandle"`
}

type cancelMessageMoveTaskOutput struct {
	ApproximateNumberOfMessagesMoved int64 `json:"ApproximateNumberOfMessagesMoved"`
}

func (h *Handler) cancelMessageMoveTask(ctx context.Context, r *request) (any, error) {
	if err := h.movesEnabled(); err != nil {
		return nil, err
	}
	var in cancelMessageMoveTaskInput
	if err := r.decode(&in); err != nil {
		return nil, err
	}
	if in.TaskHandle == "" {
		return nil, missingParameter("TaskHandle")
	}
	id, ok := taskID(in.TaskHandle)
	if !ok {
		return nil, invalidParameter("Value %s for parameter TaskHandle is invalid.", in.TaskHandle)
	}
	t, err := h.cfg.Redrives.Get(ctx, id)
	if err != nil {
		return nil, &Error{Type: "ResourceNotFoundException", Status: http.StatusNotFound, Message: "The task handle does not name a message move task."}
	}
	// The task's dead-letter queue, known once the task is found, by the
	// same rule (CancelMessageMoveTask follows /v1/redrives.cancel).
	if err := h.allow(ctx, t.Queue); err != nil {
		return nil, err
	}
	if moveStatus[t.Status] != "RUNNING" {
		return nil, &Error{Type: "ResourceNotFoundException", Status: http.StatusNotFound,
			Message: "Only active tasks can be cancelled; this one is " + moveStatus[t.Status] + "."}
	}
	t, err = h.cfg.Redrives.Cancel(ctx, id)
	if err != nil {
		return nil, err
	}
	return cancelMessageMoveTaskOutput{ApproximateNumberOfMessagesMoved: t.Moved}, nil
}

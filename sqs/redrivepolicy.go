package sqs

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"

	"github.com/styxq/styx/internal/auth"
	"github.com/styxq/styx/internal/queue"
)

// applyRedrivePolicy sets info's dead queue and max_attempts from an SQS
// RedrivePolicy ({"deadLetterTargetArn":…,"maxReceiveCount":…}); an empty
// policy (or "{}") removes both. maxReceiveCount is 1 to queue.MaxAttempts
// (queue.CheckMaxAttempts; AWS documents 1 to 1,000; 0, /v1's "unlimited",
// has no meaning in SQS). The dead-letter rules of the queue layer decide
// the rest when the queue is stored, for both doors (internal/queue,
// ValidateCreate and ValidateUpdate; policyError words their refusals as
// SQS does): the target exists, is not the queue, has no dead queue of its
// own, and its RedriveAllowPolicy accepts the queue.
//
// One rule is the SQS API's only: a FIFO queue's dead-letter queue must be a
// FIFO queue, and a standard queue's a standard queue. /v1 lets an ordered
// queue send its dead items to a queue that is not (group_dead_policy hold
// is made for one, ADR 0026), so the rule cannot be the queue layer's; the
// SQS API refuses to make such a pair, as SQS does, and shows one that /v1
// made as it is (docs/wire-contract.md, "Queue-definition rules").
func (h *Handler) applyRedrivePolicy(ctx context.Context, info *queue.QueueInfo, v string) error {
	if strings.TrimSpace(v) == "" || strings.TrimSpace(v) == "{}" {
		info.DeadQueue, info.MaxAttempts = "", 0
		return nil
	}
	var p struct {
		DeadLetterTargetArn string          `json:"deadLetterTargetArn"`
		MaxReceiveCount     json.RawMessage `json:"maxReceiveCount"`
	}
	if err := json.Unmarshal([]byte(v), &p); err != nil {
		return invalidAttributeValue("Invalid value for the parameter RedrivePolicy. Reason: Redrive policy is not a valid JSON map: %v.", err)
	}
	if p.DeadLetterTargetArn == "" || len(p.MaxReceiveCount) == 0 {
		return invalidAttributeValue("Value %s for parameter RedrivePolicy is invalid. Reason: Redrive policy does not contain mandatory attribute: %s.",
			v, map[bool]string{true: "deadLetterTargetArn", false: "maxReceiveCount"}[p.DeadLetterTargetArn == ""])
	}
	n, err := strconv.ParseInt(strings.Trim(string(p.MaxReceiveCount), `"`), 10, 64)
	if err != nil || n < 1 || queue.CheckMaxAttempts(n) != nil {
		return invalidAttributeValue("Value %s for parameter RedrivePolicy is invalid. Reason: Invalid value for maxReceiveCount: %s, valid values are from 1 to %d both inclusive.",
			v, string(p.MaxReceiveCount), queue.MaxAttempts)
	}
	dlq, err := h.nameFromARN("RedrivePolicy", p.DeadLetterTargetArn)
	if err != nil {
		return err
	}
	if err := h.allow(ctx, dlq); err != nil {
		return err
	}
	dinfo, err := h.cfg.Queues.Info(ctx, dlq)
	if err != nil && !errors.Is(err, queue.ErrQueueNotFound) {
		return err
	}
	if err == nil && isFIFO(dinfo) != isFIFO(*info) {
		// SQS's words: a FIFO queue's dead-letter queue is a FIFO queue,
		// a standard queue's a standard queue (the SQS API's rule only).
		return invalidParameter("Value %s for parameter RedrivePolicy is invalid. Reason: Dead-letter queue must be same type of queue as the source..", v)
	}
	info.DeadQueue, info.MaxAttempts = dlq, int32(n)
	return nil
}

// policyError maps the queue layer's refusals of a queue's definition onto
// SQS's answers: a RedrivePolicy's target that does not exist
// (queue.ErrDeadQueueNotFound), or whose RedriveAllowPolicy leaves the
// queue out, and a RedriveAllowPolicy that leaves out a queue that sends
// its dead items there (queue.ErrRedriveAllowPolicy; the queues the key
// does not cover are not named); any other error is returned as
// auth.HideQueues shows it to the request's key (a refusal of the
// dead-letter rules names only the queues it covers). attrs are the
// request's attributes.
func policyError(ctx context.Context, err error, attrs map[string]string) error {
	if errors.Is(err, queue.ErrDeadQueueNotFound) {
		return invalidAttributeValue("Value %s for parameter RedrivePolicy is invalid. Reason: Dead letter target does not exist.", attrs["RedrivePolicy"])
	}
	var ra *queue.RedriveAllowError
	if errors.As(err, &ra) {
		if ra.Source != "" {
			return invalidAttributeValue("Value %s for parameter RedrivePolicy is invalid. Reason: the RedriveAllowPolicy of the dead-letter queue %s does not allow %s.",
				attrs["RedrivePolicy"], ra.DeadQueue, ra.Source)
		}
		what := "a queue the key does not cover"
		if i := slices.IndexFunc(ra.Sources, func(src string) bool { return auth.Allowed(ctx, src) }); i >= 0 {
			what = "queue " + ra.Sources[i]
		}
		return invalidAttributeValue("Invalid value for the parameter RedriveAllowPolicy. Reason: %s names this queue in its RedrivePolicy; "+
			"remove it there first, or allow it.", what)
	}
	return auth.HideQueues(ctx, err)
}

// redriveAllowPolicy is SQS's RedriveAllowPolicy.
type redriveAllowPolicy struct {
	RedrivePermission string   `json:"redrivePermission"`
	SourceQueueArns   []string `json:"sourceQueueArns"`
}

// checkRedriveAllowPolicy validates a RedriveAllowPolicy's format as SQS
// does (the SQS API's rule: /v1 cannot set one). What the policy then
// allows is the queue layer's rule (queue.AcceptsDeadItems).
func checkRedriveAllowPolicy(h *Handler, v string) error {
	if strings.TrimSpace(v) == "" {
		return nil
	}
	var p redriveAllowPolicy
	if err := json.Unmarshal([]byte(v), &p); err != nil {
		return invalidAttributeValue("Invalid value for the parameter RedriveAllowPolicy. Reason: not a valid JSON map: %v.", err)
	}
	switch p.RedrivePermission {
	case "allowAll", "denyAll":
		if len(p.SourceQueueArns) > 0 {
			return invalidAttributeValue("Invalid value for the parameter RedriveAllowPolicy. Reason: sourceQueueArns is only valid with redrivePermission byQueue.")
		}
	case "byQueue":
		if len(p.SourceQueueArns) < 1 || len(p.SourceQueueArns) > 10 {
			return invalidAttributeValue("Invalid value for the parameter RedriveAllowPolicy. Reason: byQueue needs 1 to 10 sourceQueueArns.")
		}
		for _, a := range p.SourceQueueArns {
			if _, err := h.nameFromARN("RedriveAllowPolicy", a); err != nil {
				return err
			}
		}
	default:
		return invalidAttributeValue("Invalid value for the parameter RedriveAllowPolicy. Reason: redrivePermission must be allowAll, denyAll or byQueue, not '%s'.", p.RedrivePermission)
	}
	return nil
}

// shownRedriveAllowPolicy returns a dead-letter queue's RedriveAllowPolicy
// as GetQueueAttributes shows it to the request's key: the sourceQueueArns
// of queues it does not cover are one ARN of auth.HiddenQueue (how many
// they are is not shown either). The policy is returned as stored when it
// names none, or when it cannot be read.
func shownRedriveAllowPolicy(ctx context.Context, h *Handler, policy string) string {
	if !auth.Hides(ctx) {
		return policy
	}
	var p redriveAllowPolicy
	if json.Unmarshal([]byte(policy), &p) != nil {
		return policy
	}
	hidden, shown := h.arn(auth.HiddenQueue), make([]string, 0, len(p.SourceQueueArns))
	for _, a := range p.SourceQueueArns {
		if name := a[strings.LastIndexByte(a, ':')+1:]; auth.ShownQueue(ctx, name) != name {
			a = hidden
		}
		if a != hidden || !slices.Contains(shown, hidden) {
			shown = append(shown, a)
		}
	}
	if slices.Equal(shown, p.SourceQueueArns) {
		return policy
	}
	p.SourceQueueArns = shown
	b, _ := json.Marshal(p)
	return string(b)
}

package sqs

import (
	"context"
	"encoding/json"
	"github.com/styxq/styx/internal/queue"
	"slices"
	"strconv"
	"strings"
)

// maxReceiveCountLimit is the largest maxReceiveCount SQS accepts.
const maxReceiveCountLimit = 1000

// applyRedrivePolicy sets info's dead queue and max_attempts from an SQS
// RedrivePolicy ({"deadLetterTargetArn":…,"maxReceiveCount":…}); an empty
// policy (or "{}") removes both. The dead-letter queue's RedriveAllowPolicy
// must allow info's queue.
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
	n, err := strconv.Atoi(strings.Trim(string(p.MaxReceiveCount), `"`))
	if err != nil || n < 1 || n > maxReceiveCountLimit {
		return invalidAttributeValue("Value %s for parameter RedrivePolicy is invalid. Reason: Invalid value for maxReceiveCount: %s, valid values are from 1 to %d both inclusive.",
			v, string(p.MaxReceiveCount), maxReceiveCountLimit)
	}
	dlq, err := h.nameFromARN("RedrivePolicy", p.DeadLetterTargetArn)
	if err != nil {
		return err
	}
	if err := h.allow(ctx, dlq); err != nil {
		return err
	}
	dinfo, err := h.cfg.Queues.Info(ctx, dlq)
	if err != nil {
		return invalidAttributeValue("Value %s for parameter RedrivePolicy is invalid. Reason: Dead letter target does not exist.", v)
	}
	if !allowsSource(h, readQueueAttrs(dinfo).RedriveAllowPolicy, info.Name) {
		return invalidAttributeValue("Value %s for parameter RedrivePolicy is invalid. Reason: the RedriveAllowPolicy of the dead-letter queue %s does not allow %s.",
			v, dlq, info.Name)
	}
	info.DeadQueue, info.MaxAttempts = dlq, int32(n)
	return nil
}

// redriveAllowPolicy is SQS's RedriveAllowPolicy.
type redriveAllowPolicy struct {
	RedrivePermission string   `json:"redrivePermission"`
	SourceQueueArns   []string `json:"sourceQueueArns"`
}

// checkRedriveAllowPolicy validates a RedriveAllowPolicy as SQS does.
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

// allowsSource reports whether a dead-letter queue's RedriveAllowPolicy
// lets source send its dead items there ("" allows all, as SQS).
func allowsSource(h *Handler, policy, source string) bool {
	if policy == "" {
		return true
	}
	var p redriveAllowPolicy
	if json.Unmarshal([]byte(policy), &p) != nil {
		return true
	}
	switch p.RedrivePermission {
	case "denyAll":
		return false
	case "byQueue":
		return slices.Contains(p.SourceQueueArns, h.arn(source))
	}
	return true
}

package queue

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"

	"github.com/styxq/styx/internal/apierr"
)

// The redrive allow policy: which queues may send their dead items to a
// queue, a rule of the queue definitions that binds every door (issue 50).
// A queue gets one through the SQS API only (SQS's RedriveAllowPolicy,
// kept in the queue's Attributes, ADR 0016), but once it has one, a /v1
// queues.create or queues.update that names the queue as a dead_queue is
// refused by it as SQS's SetQueueAttributes is: ValidateCreate and
// ValidateUpdate apply it, in the same step as the other dead-letter rules
// (checkDeadQueue), so no door can go round it. The policy's format (its
// JSON, 1 to 10 ARNs) is the SQS API's to check when it is set.

// ErrRedriveAllowPolicy: a dead-letter queue's redrive allow policy leaves
// out a queue that names it as its dead_queue (checkDeadQueue), or a
// queue's new policy leaves out a queue that already sends its dead items
// there (ValidateUpdate). The refusal's detail is a *RedriveAllowError.
var ErrRedriveAllowPolicy = errors.New("redrive allow policy refuses the source queue")

// RedriveAllowError is the detail of a refusal by a redrive allow policy:
// errors.As finds it in the chain of the apierr.Invalid (400) that carries
// it, and errors.Is finds ErrRedriveAllowPolicy through it. A refusal of a
// new policy (Sources set) also holds an *OtherQueuesError, so that an
// answer names only the sources the request's key covers
// (auth.HideQueues).
type RedriveAllowError struct {
	// DeadQueue is the queue whose policy refuses.
	DeadQueue string
	// Source is the queue refused when it names DeadQueue as its
	// dead_queue; empty for a refusal of DeadQueue's new policy.
	Source string
	// Sources are the queues a new policy of DeadQueue leaves out while
	// they send their dead items there, in bytewise order; none otherwise.
	Sources []string
	// other names Sources in the message (a refusal of a new policy).
	other *OtherQueuesError
}

// Error returns the message naming every queue of e.
func (e *RedriveAllowError) Error() string {
	if e.other != nil {
		return e.other.Error()
	}
	return "invalid dead_queue; queue '" + e.DeadQueue + "' does not accept dead items from '" + e.Source +
		"': its redrive allow policy (SQS's RedriveAllowPolicy) leaves it out"
}

// Unwrap returns ErrRedriveAllowPolicy and, for a refusal of a new policy,
// the *OtherQueuesError naming the queues it leaves out.
func (e *RedriveAllowError) Unwrap() []error {
	if e.other != nil {
		return []error{ErrRedriveAllowPolicy, e.other}
	}
	return []error{ErrRedriveAllowPolicy}
}

// AcceptsDeadItems reports whether the queue dlq accepts, by its redrive
// allow policy, the dead items of the queue named source: always without a
// policy (or one that does not parse: the SQS API checks the policy it
// stores), never with redrivePermission denyAll, and with byQueue when
// one of its sourceQueueArns names source (by the ARN's last part, the
// queue name: a server has one region and account).
func AcceptsDeadItems(dlq QueueInfo, source string) bool {
	if dlq.Attributes == "" || !strings.Contains(dlq.Attributes, "RedriveAllowPolicy") {
		return true
	}
	var attrs struct {
		SQS struct {
			RedriveAllowPolicy string `json:"RedriveAllowPolicy"`
		} `json:"sqs"`
	}
	if json.Unmarshal([]byte(dlq.Attributes), &attrs) != nil || attrs.SQS.RedriveAllowPolicy == "" {
		return true
	}
	var p struct {
		RedrivePermission string   `json:"redrivePermission"`
		SourceQueueArns   []string `json:"sourceQueueArns"`
	}
	if json.Unmarshal([]byte(attrs.SQS.RedriveAllowPolicy), &p) != nil {
		return true
	}
	switch p.RedrivePermission {
	case "denyAll":
		return false
	case "byQueue":
		return slices.ContainsFunc(p.SourceQueueArns, func(arn string) bool {
			return arn[strings.LastIndexByte(arn, ':')+1:] == source
		})
	}
	return true
}

// checkRedriveAllow refuses source naming dlq as its dead_queue when dlq's
// policy leaves it out (AcceptsDeadItems): apierr.Invalid naming the field,
// with a *RedriveAllowError.
func checkRedriveAllow(dlq QueueInfo, source string) error {
	if AcceptsDeadItems(dlq, source) {
		return nil
	}
	e := &RedriveAllowError{DeadQueue: dlq.Name, Source: source}
	return apierr.Wrap(e, apierr.Invalid, "%s", e.Error())
}

// checkRedriveAllowSources refuses a new definition info of a queue whose
// policy leaves out queues of all that send their dead items to it:
// apierr.Invalid with a *RedriveAllowError naming them (an
// OtherQueuesError). Unchanged attributes pass without a look.
func checkRedriveAllowSources(all map[string]QueueInfo, old, info QueueInfo) error {
	if info.Attributes == old.Attributes {
		return nil
	}
	var left []string
	for _, src := range referrers(all, info.Name) {
		if !AcceptsDeadItems(info, src) {
			left = append(left, src)
		}
	}
	if len(left) == 0 {
		return nil
	}
	e := &RedriveAllowError{DeadQueue: info.Name, Sources: left}
	e.other = &OtherQueuesError{Queues: left,
		before: "invalid attributes; the redrive allow policy (SQS's RedriveAllowPolicy) of '" + info.Name + "' leaves out ",
		after:  ", which send their dead items to it: allow them, or remove their dead_queue first"}
	return apierr.Wrap(e, apierr.Invalid, "%s", e.Error())
}

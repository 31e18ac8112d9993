package sqs

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/styxq/styx/internal/auth"
	"github.com/styxq/styx/internal/queue"
	"github.com/styxq/styx/internal/text"
)

// Queue attribute limits and defaults, as SQS has them.
const (
	DefaultVisibilityTimeout      = 30 * time.Second
	MaxVisibilityTimeout          = 12 * time.Hour
	DefaultMessageRetentionPeriod = 4 * 24 * time.Hour
	MinMessageRetentionPeriod     = time.Minute
	MaxMessageRetentionPeriod     = 14 * 24 * time.Hour
	MaxDelay                      = 15 * time.Minute
	MaxWaitTime                   = 20 * time.Second
	// DefaultMaximumMessageSize and MaxMaximumMessageSize are 1 MiB: AWS
	// raised both from 256 KiB in 2025.
	DefaultMaximumMessageSize = 1048576
	MinMaximumMessageSize     = 1024
	MaxMaximumMessageSize     = 1048576
	// MaxQueueNameLength is the longest SQS queue name.
	MaxQueueNameLength = 80
	// MaxPolicyBytes is the largest Policy attribute, in bytes: SQS's
	// quota for a queue policy (8,192 bytes; "Amazon SQS policy quotas" in
	// the SQS Developer Guide).
	MaxPolicyBytes = 8192
	// MaxTags is the most tags of a queue; a tag key has 1 to MaxTagKeyLength
	// bytes and a value at most MaxTagValueLength.
	MaxTags           = 50
	MaxTagKeyLength   = 128
	MaxTagValueLength = 256
)

// queueAttrs are the SQS queue attributes Styx has no field for, kept in
// queue.QueueInfo.Attributes as {"sqs":{…}} (ADR 0016). Zero values mean
// the SQS default.
type queueAttrs struct {
	DelaySeconds                  int               `json:"DelaySeconds,omitempty"`
	ReceiveMessageWaitTimeSeconds int               `json:"ReceiveMessageWaitTimeSeconds,omitempty"`
	MaximumMessageSize            int               `json:"MaximumMessageSize,omitempty"`
	RedriveAllowPolicy            string            `json:"RedriveAllowPolicy,omitempty"`
	Policy                        string            `json:"Policy,omitempty"`
	SqsManagedSseEnabled          string            `json:"SqsManagedSseEnabled,omitempty"`
	Tags                          map[string]string `json:"Tags,omitempty"`
	// The attributes of a FIFO queue (fifo.go); "" means the default.
	ContentBasedDeduplication bool   `json:"ContentBasedDeduplication,omitempty"`
	DeduplicationScope        string `json:"DeduplicationScope,omitempty"`
	FifoThroughputLimit       string `json:"FifoThroughputLimit,omitempty"`
}

func (a queueAttrs) maxMessageSize() int {
	if a.MaximumMessageSize == 0 {
		return DefaultMaximumMessageSize
	}
	return a.MaximumMessageSize
}

// readQueueAttrs reads the SQS part of a queue's opaque attributes; a queue
// made through /v1 has none (every SQS default).
func readQueueAttrs(info queue.QueueInfo) queueAttrs {
	var all struct {
		SQS queueAttrs `json:"sqs"`
	}
	if info.Attributes != "" {
		_ = json.Unmarshal([]byte(info.Attributes), &all)
	}
	return all.SQS
}

// writeQueueAttrs stores a in info's opaque attributes, keeping the keys of
// other APIs.
func writeQueueAttrs(info *queue.QueueInfo, a queueAttrs) {
	all := map[string]json.RawMessage{}
	if info.Attributes != "" {
		_ = json.Unmarshal([]byte(info.Attributes), &all)
	}
	b, _ := json.Marshal(a)
	all["sqs"] = b
	out, _ := json.Marshal(all)
	info.Attributes = string(out)
}

// intAttr parses an integer queue attribute within lo..hi.
func intAttr(name, v string, lo, hi int) (int, error) {
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n < lo || n > hi {
		return 0, invalidAttributeValue("Invalid value for the parameter %s: '%s'; it must be an integer from %d to %d.", name, v, lo, hi)
	}
	return n, nil
}

// applyAttributes sets the SQS attributes in into info (and its opaque
// SQS attributes). info.Ordered says whether the queue is a FIFO queue,
// which alone takes the FIFO attributes; FifoQueue is CreateQueue's
// (checkQueueName), and creating says whether this is it.
func (h *Handler) applyAttributes(ctx context.Context, info *queue.QueueInfo, in map[string]string, creating bool) error {
	a := readQueueAttrs(*info)
	for _, name := range slices.Sorted(maps.Keys(in)) {
		v := in[name]
		switch name {
		case "VisibilityTimeout":
			n, err := intAttr(name, v, 0, int(MaxVisibilityTimeout/time.Second))
			if err != nil {
				return err
			}
			if n == 0 {
				return invalidAttributeValue("Invalid value for the parameter VisibilityTimeout: 0 is not supported by Styx (a lease lasts at least 1 second); " +
					"use ChangeMessageVisibility with 0 to make a received message visible at once.")
			}
			info.LeaseTimeout = time.Duration(n) * time.Second
		case "MessageRetentionPeriod":
			n, err := intAttr(name, v, int(MinMessageRetentionPeriod/time.Second), int(MaxMessageRetentionPeriod/time.Second))
			if err != nil {
				return err
			}
			info.ExpireTimeout = time.Duration(n) * time.Second
		case "DelaySeconds":
			n, err := intAttr(name, v, 0, int(MaxDelay/time.Second))
			if err != nil {
				return err
			}
			a.DelaySeconds = n
		case "ReceiveMessageWaitTimeSeconds":
			n, err := intAttr(name, v, 0, int(MaxWaitTime/time.Second))
			if err != nil {
				return err
			}
			a.ReceiveMessageWaitTimeSeconds = n
		case "MaximumMessageSize":
			n, err := intAttr(name, v, MinMaximumMessageSize, MaxMaximumMessageSize)
			if err != nil {
				return err
			}
			a.MaximumMessageSize = n
		case "RedrivePolicy":
			if err := h.applyRedrivePolicy(ctx, info, v); err != nil {
				return err
			}
		case "RedriveAllowPolicy":
			if err := checkRedriveAllowPolicy(h, v); err != nil {
				return err
			}
			// Both sides (a queue that already sends its dead items here
			// must stay allowed) are the queue layer's rule when the
			// definition is stored (queue.ErrRedriveAllowPolicy,
			// policyError).
			a.RedriveAllowPolicy = v
		case "Policy":
			if err := checkPolicy(v); err != nil {
				return err
			}
			a.Policy = v
		case "SqsManagedSseEnabled":
			if v != "true" && v != "false" {
				return invalidAttributeValue("Invalid value for the parameter SqsManagedSseEnabled: '%s'; it must be true or false.", v)
			}
			a.SqsManagedSseEnabled = v
		case "FifoQueue":
			// The queue's type: given at creation (checkQueueName), never
			// changed; SQS knows no such attribute otherwise.
			if !creating {
				return unknownAttribute(name)
			}
		case "ContentBasedDeduplication", "DeduplicationScope", "FifoThroughputLimit":
			if !isFIFO(*info) {
				return unknownAttribute(name)
			}
			if err := applyFIFOAttribute(&a, name, v); err != nil {
				return err
			}
		case "KmsMasterKeyId", "KmsDataKeyReusePeriodSeconds":
			return invalidAttributeName("Styx does not support the attribute %s: it has no KMS encryption (use disk encryption and TLS).", name)
		default:
			return invalidAttributeName("Unknown Attribute %s.", text.Escape(name))
		}
	}
	if isFIFO(*info) {
		if err := checkFIFOAttributes(a); err != nil {
			return err
		}
	}
	writeQueueAttrs(info, a)
	return nil
}

type createQueueInput struct {
	QueueName  string            `json:"QueueName"`
	Attributes map[string]string `json:"Attributes"`
	Tags       map[string]string `json:"tags"`
}

type queueURLOutput struct {
	QueueURL string `json:"QueueUrl"`
}

func (h *Handler) createQueue(ctx context.Context, r *request) (any, error) {
	var in createQueueInput
	if err := r.decode(&in); err != nil {
		return nil, err
	}
	fifo, err := checkQueueName(in.QueueName, in.Attributes)
	if err != nil {
		return nil, err
	}
	if err := checkTags(in.QueueName, in.Tags); err != nil {
		return nil, err
	}
	if err := h.allow(ctx, in.QueueName); err != nil {
		return nil, err
	}
	now := h.now().UTC()
	// A FIFO queue is an ordered queue (fifo.go).
	info := queue.QueueInfo{Name: in.QueueName, Namespace: queue.DefaultNamespace, LeaseTimeout: DefaultVisibilityTimeout,
		ExpireTimeout: DefaultMessageRetentionPeriod, Partitions: 1, CreatedAt: now, UpdatedAt: now, Ordered: fifo}
	if err := h.applyAttributes(ctx, &info, in.Attributes, true); err != nil {
		return nil, err
	}
	if len(in.Tags) > 0 {
		a := readQueueAttrs(info)
		a.Tags = in.Tags
		writeQueueAttrs(&info, a)
	}
	out := queueURLOutput{QueueURL: h.queueURL(r.http, in.QueueName)}
	err = h.cfg.Queues.Create(ctx, info)
	if err == nil {
		return out, nil
	}
	// SQS answers an existing queue's URL when the attributes asked for
	// match its own, and QueueAlreadyExists when they differ.
	old, ierr := h.cfg.Queues.Info(ctx, in.QueueName)
	if ierr != nil {
		return nil, policyError(ctx, err, in.Attributes)
	}
	if differs := h.differingAttribute(ctx, old, in.Attributes); differs != "" {
		return nil, &Error{Type: "QueueNameExists", Query: "QueueAlreadyExists", Status: http.StatusBadRequest,
			Message: fmt.Sprintf("A queue already exists with the same name and a different value for attribute %s", differs)}
	}
	return out, nil
}

// differingAttribute names an attribute of want whose value differs from
// the queue's, or "".
func (h *Handler) differingAttribute(ctx context.Context, info queue.QueueInfo, want map[string]string) string {
	have, err := h.attributes(ctx, info, nil)
	if err != nil {
		return ""
	}
	for _, name := range slices.Sorted(maps.Keys(want)) {
		v := want[name]
		cur, ok := have[name]
		if !ok {
			cur = defaultAttribute(name)
		}
		if strings.TrimSpace(v) != cur && !(name == "RedrivePolicy" && sameRedrivePolicy(v, cur)) {
			return name
		}
	}
	return ""
}

func defaultAttribute(name string) string {
	switch name {
	case "FifoQueue", "SqsManagedSseEnabled":
		return "false"
	}
	return ""
}

// sameRedrivePolicy reports whether two RedrivePolicy values say the same:
// maxReceiveCount may be a number or a string ("5" and 5 are equal, as SQS
// takes both), and an empty policy is "{}".
func sameRedrivePolicy(a, b string) bool {
	norm := func(s string) (string, string, bool) {
		if strings.TrimSpace(s) == "" {
			return "", "", true
		}
		var p struct {
			DeadLetterTargetArn string          `json:"deadLetterTargetArn"`
			MaxReceiveCount     json.RawMessage `json:"maxReceiveCount"`
		}
		if json.Unmarshal([]byte(s), &p) != nil {
			return "", "", false
		}
		return p.DeadLetterTargetArn, strings.Trim(string(p.MaxReceiveCount), `"`), true
	}
	arnA, nA, okA := norm(a)
	arnB, nB, okB := norm(b)
	return okA && okB && arnA == arnB && nA == nB
}

type getQueueURLInput struct {
	QueueName              string `json:"QueueName"`
	QueueOwnerAWSAccountID string `json:"QueueOwnerAWSAccountId"`
}

func (h *Handler) getQueueURL(ctx context.Context, r *request) (any, error) {
	var in getQueueURLInput
	if err := r.decode(&in); err != nil {
		return nil, err
	}
	if in.QueueName == "" {
		return nil, missingParameter("QueueName")
	}
	if err := h.allow(ctx, in.QueueName); err != nil {
		return nil, err
	}
	if _, err := h.cfg.Queues.Get(in.QueueName); err != nil {
		return nil, errNoQueue
	}
	return queueURLOutput{QueueURL: h.queueURL(r.http, in.QueueName)}, nil
}

type listQueuesInput struct {
	QueueNamePrefix string `json:"QueueNamePrefix"`
	MaxResults      *int   `json:"MaxResults"`
	NextToken       string `json:"NextToken"`
}

type listQueuesOutput struct {
	QueueUrls []string `json:"QueueUrls,omitempty"`
	NextToken string   `json:"NextToken,omitempty"`
}

// maxListQueues is the most queues ListQueues answers in one page.
const maxListQueues = 1000

func (h *Handler) listQueues(ctx context.Context, r *request) (any, error) {
	var in listQueuesInput
	if err := r.decode(&in); err != nil {
		return nil, err
	}
	limit := maxListQueues
	if in.MaxResults != nil {
		if *in.MaxResults < 1 || *in.MaxResults > maxListQueues {
			return nil, invalidParameter("Value %d for parameter MaxResults is invalid. Reason: it must be between 1 and %d.", *in.MaxResults, maxListQueues)
		}
		limit = *in.MaxResults
	} else if in.NextToken != "" {
		return nil, invalidParameter("NextToken is only valid with MaxResults.")
	}
	if err := h.allow(ctx); err != nil {
		return nil, err
	}
	pivot := in.QueueNamePrefix
	if in.NextToken != "" {
		last, err := base64.RawURLEncoding.DecodeString(in.NextToken)
		if err != nil || !strings.HasPrefix(string(last), in.QueueNamePrefix) {
			return nil, invalidParameter("Invalid NextToken value '%s'.", in.NextToken)
		}
		pivot = string(last)
	}
	// Every namespace (SQS has none), only the queues the key covers, as
	// queues.list; one more than a page tells whether another follows, and
	// one more again for the last queue of the previous page (a pivot is
	// inclusive).
	infos, err := auth.ListCovered(ctx, h.cfg.Queues, queue.ListQueuesParams{Pivot: pivot, Limit: limit + 2})
	if err != nil {
		return nil, err
	}
	if in.NextToken != "" && len(infos) > 0 && infos[0].Name == pivot {
		infos = infos[1:]
	}
	var out listQueuesOutput
	for i, info := range infos {
		if !strings.HasPrefix(info.Name, in.QueueNamePrefix) {
			break
		}
		if i == limit {
			if in.MaxResults != nil {
				out.NextToken = base64.RawURLEncoding.EncodeToString([]byte(infos[i-1].Name))
			}
			break
		}
		out.QueueUrls = append(out.QueueUrls, h.queueURL(r.http, info.Name))
	}
	return out, nil
}

type queueURLInput struct {
	QueueURL string `json:"QueueUrl"`
}

func (h *Handler) deleteQueue(ctx context.Context, r *request) (any, error) {
	var in queueURLInput
	if err := r.decode(&in); err != nil {
		return nil, err
	}
	name, err := h.existing(ctx, in.QueueURL)
	if err != nil {
		return nil, err
	}
	return nil, auth.HideQueues(ctx, h.cfg.Queues.Delete(ctx, name))
}

func (h *Handler) purgeQueue(ctx context.Context, r *request) (any, error) {
	var in queueURLInput
	if err := r.decode(&in); err != nil {
		return nil, err
	}
	q, _, err := h.lookup(ctx, in.QueueURL)
	if err != nil {
		return nil, err
	}
	// SQS deletes every message, in flight or not.
	return nil, q.Clear(ctx, queue.ClearParams{Queue: true, Scheduled: true, Destructive: true})
}

type getQueueAttributesInput struct {
	QueueURL       string   `json:"QueueUrl"`
	AttributeNames []string `json:"AttributeNames"`
}

type attributesOutput struct {
	Attributes map[string]string `json:"Attributes,omitempty"`
}

// queueAttributeNames are the attributes GetQueueAttributes knows, for
// "All".
var queueAttributeNames = []string{
	"ApproximateNumberOfMessages", "ApproximateNumberOfMessagesDelayed", "ApproximateNumberOfMessagesNotVisible",
	"CreatedTimestamp", "DelaySeconds", "LastModifiedTimestamp", "MaximumMessageSize", "MessageRetentionPeriod",
	"Policy", "QueueArn", "ReceiveMessageWaitTimeSeconds", "RedriveAllowPolicy", "RedrivePolicy", "SqsManagedSseEnabled",
	"VisibilityTimeout",
}

func (h *Handler) getQueueAttributes(ctx context.Context, r *request) (any, error) {
	var in getQueueAttributesInput
	if err := r.decode(&in); err != nil {
		return nil, err
	}
	q, info, err := h.lookup(ctx, in.QueueURL)
	if err != nil {
		return nil, err
	}
	names := in.AttributeNames
	// Every name is checked, also after All (which selects every one).
	for _, n := range in.AttributeNames {
		if n != "All" && !slices.Contains(queueAttributeNames, n) && !slices.Contains([]string{"FifoQueue", "ContentBasedDeduplication",
			"KmsMasterKeyId", "KmsDataKeyReusePeriodSeconds", "DeduplicationScope", "FifoThroughputLimit"}, n) {
			return nil, invalidAttributeName("Unknown Attribute %s.", text.Escape(n))
		}
	}
	if slices.Contains(names, "All") {
		names = queueAttributeNames
		if isFIFO(info) {
			names = slices.Concat(names, fifoAttributeNames)
		}
	}
	if len(names) == 0 {
		return attributesOutput{}, nil
	}
	all, err := h.attributes(ctx, info, q)
	if err != nil {
		return nil, err
	}
	out := attributesOutput{Attributes: map[string]string{}}
	for _, n := range names {
		if v, ok := all[n]; ok {
			out.Attributes[n] = v
		}
	}
	return out, nil
}

// attributes returns every attribute of a queue; the Approximate* counts
// only when q is not nil (they read the queue's stats).
func (h *Handler) attributes(ctx context.Context, info queue.QueueInfo, q queue.Queue) (map[string]string, error) {
	a := readQueueAttrs(info)
	itoa := strconv.Itoa
	out := map[string]string{
		"QueueArn":                      h.arn(info.Name),
		"VisibilityTimeout":             itoa(int(info.LeaseTimeout / time.Second)),
		"MessageRetentionPeriod":        itoa(int(info.ExpireTimeout / time.Second)),
		"DelaySeconds":                  itoa(a.DelaySeconds),
		"ReceiveMessageWaitTimeSeconds": itoa(a.ReceiveMessageWaitTimeSeconds),
		"MaximumMessageSize":            itoa(a.maxMessageSize()),
		"CreatedTimestamp":              strconv.FormatInt(info.CreatedAt.Unix(), 10),
		"LastModifiedTimestamp":         strconv.FormatInt(info.UpdatedAt.Unix(), 10),
		"SqsManagedSseEnabled":          "false",
	}
	if a.SqsManagedSseEnabled != "" {
		out["SqsManagedSseEnabled"] = a.SqsManagedSseEnabled
	}
	if a.Policy != "" {
		out["Policy"] = a.Policy
	}
	if a.RedriveAllowPolicy != "" {
		out["RedriveAllowPolicy"] = shownRedriveAllowPolicy(ctx, h, a.RedriveAllowPolicy)
	}
	if isFIFO(info) {
		out["FifoQueue"] = "true"
		out["ContentBasedDeduplication"] = strconv.FormatBool(a.ContentBasedDeduplication)
		out["DeduplicationScope"] = a.deduplicationScope()
		out["FifoThroughputLimit"] = a.fifoThroughputLimit()
	}
	if info.DeadQueue != "" {
		// A dead-letter queue the key does not cover: the ARN of
		// auth.HiddenQueue, as /v1 shows dead_queue.
		b, _ := json.Marshal(struct {
			DeadLetterTargetArn string `json:"deadLetterTargetArn"`
			MaxReceiveCount     int32  `json:"maxReceiveCount"`
		}{h.arn(auth.ShownQueue(ctx, info.DeadQueue)), info.MaxAttempts})
		out["RedrivePolicy"] = string(b)
	}
	if q != nil {
		st, err := q.Stats(ctx)
		if err != nil {
			return nil, err
		}
		var ready, leased, scheduled int
		for _, p := range st.Partitions {
			ready += p.Total - p.Leased - p.Scheduled - p.Dying
			leased += p.Leased
			scheduled += p.Scheduled
		}
		out["ApproximateNumberOfMessages"] = itoa(ready)
		out["ApproximateNumberOfMessagesNotVisible"] = itoa(leased)
		out["ApproximateNumberOfMessagesDelayed"] = itoa(scheduled)
	}
	return out, nil
}

type setQueueAttributesInput struct {
	QueueURL   string            `json:"QueueUrl"`
	Attributes map[string]string `json:"Attributes"`
}

func (h *Handler) setQueueAttributes(ctx context.Context, r *request) (any, error) {
	var in setQueueAttributesInput
	if err := r.decode(&in); err != nil {
		return nil, err
	}
	name, err := h.existing(ctx, in.QueueURL)
	if err != nil {
		return nil, err
	}
	if len(in.Attributes) == 0 {
		return nil, missingParameter("Attributes")
	}
	now := h.now().UTC()
	return nil, policyError(ctx, h.cfg.Queues.Update(ctx, name, func(info *queue.QueueInfo) error {
		if err := h.applyAttributes(ctx, info, in.Attributes, false); err != nil {
			return err
		}
		info.UpdatedAt = now
		return nil
	}), in.Attributes)
}

// checkPolicy applies SQS's limit to a Policy attribute (MaxPolicyBytes)
// and refuses hidden characters (internal/text) other than the tabs and
// line breaks of a formatted JSON document: GetQueueAttributes shows it
// as it was set. Styx stores the policy and does not enforce it.
func checkPolicy(v string) error {
	if len(v) > MaxPolicyBytes {
		return invalidAttributeValue("Invalid value for the parameter Policy. Reason: the policy is %d bytes; the limit is %d bytes.", len(v), MaxPolicyBytes)
	}
	if err := text.Check(v, '\t', '\n', '\r'); err != nil {
		return invalidAttributeValue("Invalid value for the parameter Policy. Reason: it holds %v; %s.", err, text.Rule)
	}
	return nil
}

// checkTags applies SQS's tag limits (at most MaxTags; keys 1 to
// MaxTagKeyLength bytes, values at most MaxTagValueLength) and refuses
// hidden characters (internal/text: control, bidi and zero-width
// characters) in keys and values, which operators see in ListQueueTags.
// queueName is the queue's name, which SQS's answer to too many tags names.
// Keys are checked in order, so the answer is the same for the same tags.
func checkTags(queueName string, tags map[string]string) error {
	if len(tags) > MaxTags {
		return invalidParameter("Too many tags added for queue %s.", queueName)
	}
	for _, k := range slices.Sorted(maps.Keys(tags)) {
		v := tags[k]
		if err := checkTagKey(k); err != nil {
			return err
		}
		if len(v) > MaxTagValueLength {
			return invalidParameter("Tag values may only be up to %d characters in length; the value of tag '%s' has %d.", MaxTagValueLength, text.Escape(k), len(v))
		}
		if err := text.Check(k); err != nil {
			return invalidParameter("Tag key '%s' holds %v; %s.", text.Escape(k), err, text.Rule)
		}
		if err := text.Check(v); err != nil {
			return invalidParameter("The value of tag '%s' holds %v; %s.", text.Escape(k), err, text.Rule)
		}
	}
	return nil
}

// checkTagKey applies SQS's length rule to a tag key, in SQS's words.
func checkTagKey(k string) error {
	if k == "" || len(k) > MaxTagKeyLength {
		return invalidParameter("Tag keys must be between 1 and %d characters in length.", MaxTagKeyLength)
	}
	return nil
}

package sqs

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/styxq/styx/internal/auth"
	"github.com/styxq/styx/internal/queue"
	"github.com/styxq/styx/internal/text"
)

// Batch limits, as SQS has them.
const (
	// MaxBatchEntries is the most entries of a batch action, and the most
	// messages one ReceiveMessage returns.
	MaxBatchEntries = 10
	// maxBatchIDLength bounds a batch entry's Id.
	maxBatchIDLength = 80
	// shortPoll is how long a ReceiveMessage with WaitTimeSeconds 0 lets
	// the queue's loop look for items: one iteration's worth.
	shortPoll = 20 * time.Millisecond
)

// messageInput is SendMessage's input and a SendMessageBatch entry.
type messageInput struct {
	ID                      string                    `json:"Id"`
	MessageBody             *string                   `json:"MessageBody"`
	DelaySeconds            *int                      `json:"DelaySeconds"`
	MessageAttributes       map[string]AttributeValue `json:"MessageAttributes"`
	MessageSystemAttributes map[string]AttributeValue `json:"MessageSystemAttributes"`
	MessageDeduplicationID  string                    `json:"MessageDeduplicationId"`
	MessageGroupID          string                    `json:"MessageGroupId"`
}

type sendMessageInput struct {
	QueueURL string `json:"QueueUrl"`
	messageInput
}

// sendResult is SendMessage's output and a SendMessageBatch success entry.
type sendResult struct {
	ID                           string `json:"Id,omitempty"`
	MessageID                    string `json:"MessageId"`
	MD5OfMessageBody             string `json:"MD5OfMessageBody"`
	MD5OfMessageAttributes       string `json:"MD5OfMessageAttributes,omitempty"`
	MD5OfMessageSystemAttributes string `json:"MD5OfMessageSystemAttributes,omitempty"`
	// SequenceNumber is a FIFO queue's (envelope.Seq), in decimal.
	SequenceNumber string `json:"SequenceNumber,omitempty"`
}

// prepare validates one message against its queue and returns the item to
// produce and the answer for it. On a FIFO queue a message needs a
// MessageGroupId (the item's group) and a MessageDeduplicationId unless the
// queue has ContentBasedDeduplication, and takes no DelaySeconds of its own
// (the queue's applies); its MessageId and SequenceNumber are those of the
// first send of its deduplication id within the queue's window
// (fifo.Store.Send, shared by every node on PostgreSQL). On a standard queue a MessageGroupId is the item's group
// (SQS's fair queues) and a MessageDeduplicationId is refused.
func (h *Handler) prepare(ctx context.Context, info queue.QueueInfo, in *messageInput, now time.Time) (queue.ProduceItem, sendResult, error) {
	if in.MessageBody == nil {
		return queue.ProduceItem{}, sendResult{}, missingParameter("MessageBody")
	}
	body := *in.MessageBody
	if body == "" {
		return queue.ProduceItem{}, sendResult{}, invalidParameter("The request must contain a non-empty message body.")
	}
	fifo := isFIFO(info)
	switch {
	case fifo && in.MessageGroupID == "":
		return queue.ProduceItem{}, sendResult{}, missingParameter("MessageGroupId")
	case !fifo && in.MessageDeduplicationID != "":
		return queue.ProduceItem{}, sendResult{}, notForQueueType("MessageDeduplicationId", in.MessageDeduplicationID)
	case fifo && in.DelaySeconds != nil && *in.DelaySeconds != 0:
		// SQS takes 0, and refuses any other delay of a FIFO message.
		return queue.ProduceItem{}, sendResult{}, notForQueueType("DelaySeconds", strconv.Itoa(*in.DelaySeconds))
	}
	if in.MessageGroupID != "" {
		if err := checkFIFOID("MessageGroupId", in.MessageGroupID); err != nil {
			return queue.ProduceItem{}, sendResult{}, err
		}
	}
	if in.MessageDeduplicationID != "" {
		if err := checkFIFOID("MessageDeduplicationId", in.MessageDeduplicationID); err != nil {
			return queue.ProduceItem{}, sendResult{}, err
		}
	}
	if err := checkText(body); err != nil {
		return queue.ProduceItem{}, sendResult{}, &Error{Type: "InvalidMessageContents", Status: http.StatusBadRequest,
			Message: fmt.Sprintf("Invalid characters found in the message body: %v. Allowed: #x9 | #xA | #xD | #x20 to #xD7FF | #xE000 to #xFFFD | #x10000 to #x10FFFF.", err)}
	}
	size, err := checkAttributes("MessageAttributes", in.MessageAttributes, false)
	if err != nil {
		return queue.ProduceItem{}, sendResult{}, err
	}
	if _, err := checkAttributes("MessageSystemAttributes", in.MessageSystemAttributes, true); err != nil {
		return queue.ProduceItem{}, sendResult{}, err
	}
	a := readQueueAttrs(info)
	if limit := a.maxMessageSize(); len(body)+size > limit {
		// SQS's words, naming the queue's MaximumMessageSize.
		return queue.ProduceItem{}, sendResult{}, invalidParameter("One or more parameters are invalid. Reason: Message must be shorter than %d bytes.", limit)
	}
	delay := a.DelaySeconds
	if in.DelaySeconds != nil && !fifo { // a FIFO message has the queue's delay
		delay = *in.DelaySeconds
		if delay < 0 || delay > int(MaxDelay/time.Second) {
			return queue.ProduceItem{}, sendResult{}, invalidParameter("Value %d for parameter DelaySeconds is invalid. Reason: must be between 0 and %d, if provided.",
				delay, int(MaxDelay/time.Second))
		}
	}
	env := envelope{V: 1, Sent: now.UnixMilli(), Sender: auth.KeyName(ctx), Attrs: in.MessageAttributes, Sys: in.MessageSystemAttributes}
	item := queue.ProduceItem{Payload: []byte(body), Group: in.MessageGroupID}
	id := newUUID()
	if fifo {
		shown, key, err := deduplication(a, in.MessageGroupID, in.MessageDeduplicationID, body)
		if err != nil {
			return queue.ProduceItem{}, sendResult{}, err
		}
		env.Dedup, item.DeduplicationID = shown, key
		sent, err := h.state.Send(ctx, info.ID, key, id, now, info.Window())
		if err != nil {
			return queue.ProduceItem{}, sendResult{}, err
		}
		id, env.Seq = sent.MessageID, sent.Seq
	}
	env.ID = uuidString(id)
	item.Reference, item.Attributes = env.ID, env.encode()
	if delay > 0 {
		item.EnqueueAt = now.Add(time.Duration(delay) * time.Second)
	}
	out := sendResult{MessageID: env.ID, MD5OfMessageBody: md5Hex([]byte(body)),
		MD5OfMessageAttributes: md5OfAttributes(in.MessageAttributes), MD5OfMessageSystemAttributes: md5OfAttributes(in.MessageSystemAttributes)}
	if env.Seq != 0 {
		out.SequenceNumber = strconv.FormatUint(env.Seq, 10)
	}
	return item, out, nil
}

func (h *Handler) sendMessage(ctx context.Context, r *request) (any, error) {
	var in sendMessageInput
	if err := r.decode(&in); err != nil {
		return nil, err
	}
	q, info, err := h.lookup(ctx, in.QueueURL)
	if err != nil {
		return nil, err
	}
	item, out, err := h.prepare(ctx, info, &in.messageInput, h.now())
	if err != nil {
		return nil, err
	}
	if err := q.Produce(ctx, []queue.ProduceItem{item}); err != nil {
		return nil, err
	}
	return out, nil
}

type sendMessageBatchInput struct {
	QueueURL string         `json:"QueueUrl"`
	Entries  []messageInput `json:"Entries"`
}

// batchFailure is a failed entry of a batch action.
type batchFailure struct {
	ID          string `json:"Id"`
	SenderFault bool   `json:"SenderFault"`
	Code        string `json:"Code"`
	Message     string `json:"Message,omitempty"`
}

func failure(id string, err error) batchFailure {
	e, _ := toError(err)
	return batchFailure{ID: id, SenderFault: e.Status < 500, Code: e.queryCode(), Message: e.Message}
}

type sendMessageBatchOutput struct {
	Successful []sendResult   `json:"Successful"`
	Failed     []batchFailure `json:"Failed"`
}

// checkBatchIDs applies SQS's rules to a batch's entry ids; entry names the
// action's entry type (SendMessageBatchRequestEntry…), as SQS's answer to
// an empty batch does.
func checkBatchIDs(entry string, ids []string) error {
	switch {
	case len(ids) == 0:
		return batchError("EmptyBatchRequest", "There should be at least one %s in the request.", entry)
	case len(ids) > MaxBatchEntries:
		return batchError("TooManyEntriesInBatchRequest", "Maximum number of entries per request are %d. You have sent %d.", MaxBatchEntries, len(ids))
	}
	seen := map[string]bool{}
	for _, id := range ids {
		if id == "" || len(id) > maxBatchIDLength || strings.IndexFunc(id, func(c rune) bool {
			return !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-')
		}) >= 0 {
			// AWS's words, which do not name the id.
			return batchError("InvalidBatchEntryId", "A batch entry id can only contain alphanumeric characters, hyphens and underscores. It can be at most %d letters long.",
				maxBatchIDLength)
		}
		if seen[id] {
			return batchError("BatchEntryIdsNotDistinct", "Id %s repeated.", id)
		}
		seen[id] = true
	}
	return nil
}

// checkFIFOBatch fails a FIFO SendMessageBatch as a whole, as AWS does,
// when an entry has no MessageGroupId, or no MessageDeduplicationId on a
// queue without ContentBasedDeduplication: InvalidParameterValue for both
// (LocalStack's AWS-validated snapshots; a SendMessage without
// MessageGroupId is MissingParameter). Other invalid entries fail alone.
func checkFIFOBatch(a queueAttrs, entries []messageInput) error {
	for _, e := range entries {
		switch {
		case e.MessageGroupID == "":
			return invalidParameter("The request must contain the parameter MessageGroupId.")
		case e.MessageDeduplicationID == "" && !a.ContentBasedDeduplication:
			return errNoDeduplicationID
		}
	}
	return nil
}

func (h *Handler) sendMessageBatch(ctx context.Context, r *request) (any, error) {
	var in sendMessageBatchInput
	if err := r.decode(&in); err != nil {
		return nil, err
	}
	q, info, err := h.lookup(ctx, in.QueueURL)
	if err != nil {
		return nil, err
	}
	ids := make([]string, len(in.Entries))
	for i, e := range in.Entries {
		ids[i] = e.ID
	}
	if err := checkBatchIDs("SendMessageBatchRequestEntry", ids); err != nil {
		return nil, err
	}
	if isFIFO(info) {
		if err := checkFIFOBatch(readQueueAttrs(info), in.Entries); err != nil {
			return nil, err
		}
	}
	out := sendMessageBatchOutput{Successful: []sendResult{}, Failed: []batchFailure{}}
	var items []queue.ProduceItem
	var results []sendResult
	now := h.now()
	total := 0
	for i := range in.Entries {
		e := &in.Entries[i]
		item, res, err := h.prepare(ctx, info, e, now)
		if err != nil {
			out.Failed = append(out.Failed, failure(e.ID, err))
			continue
		}
		total += len(item.Payload)
		res.ID = e.ID
		items, results = append(items, item), append(results, res)
	}
	if limit := readQueueAttrs(info).maxMessageSize(); total > limit {
		return nil, batchError("BatchRequestTooLong", "Batch requests cannot be longer than %d bytes. You have sent %d bytes.", limit, total)
	}
	if len(items) > 0 {
		if err := q.Produce(ctx, items); err != nil {
			return nil, err
		}
	}
	out.Successful = append(out.Successful, results...)
	return out, nil
}

type receiveMessageInput struct {
	QueueURL                    string   `json:"QueueUrl"`
	AttributeNames              []string `json:"AttributeNames"`
	MessageSystemAttributeNames []string `json:"MessageSystemAttributeNames"`
	MessageAttributeNames       []string `json:"MessageAttributeNames"`
	MaxNumberOfMessages         *int     `json:"MaxNumberOfMessages"`
	VisibilityTimeout           *int     `json:"VisibilityTimeout"`
	WaitTimeSeconds             *int     `json:"WaitTimeSeconds"`
	ReceiveRequestAttemptID     string   `json:"ReceiveRequestAttemptId"`
}

type message struct {
	MessageID              string                    `json:"MessageId"`
	ReceiptHandle          string                    `json:"ReceiptHandle"`
	MD5OfBody              string                    `json:"MD5OfBody"`
	Body                   string                    `json:"Body"`
	Attributes             map[string]string         `json:"Attributes,omitempty"`
	MD5OfMessageAttributes string                    `json:"MD5OfMessageAttributes,omitempty"`
	MessageAttributes      map[string]AttributeValue `json:"MessageAttributes,omitempty"`
}

type receiveMessageOutput struct {
	Messages []message `json:"Messages,omitempty"`
}

// writeJSON writes o as marshalJSON encodes it, one message at a time: an
// answer of ten 1 MiB messages holds one message's encoding at a time
// rather than the whole answer's, twice over as the encoder's buffers grow
// (issue 48, TestReceiveAnswersBounded). The encoding of a message (strings
// and maps of them) cannot fail; an error is the client connection's.
func (o receiveMessageOutput) writeJSON(w io.Writer) error {
	if len(o.Messages) == 0 {
		_, err := io.WriteString(w, "{}")
		return err
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	b.WriteString(`{"Messages":[`)
	for i, m := range o.Messages {
		if i > 0 {
			b.WriteByte(',')
		}
		if err := enc.Encode(m); err != nil {
			return err
		}
		b.Truncate(b.Len() - 1) // Encode's newline
		if i == len(o.Messages)-1 {
			b.WriteString("]}")
		}
		if _, err := w.Write(b.Bytes()); err != nil {
			return err
		}
		b.Reset()
	}
	return nil
}

// writeXML writes o as toXML encodes ReceiveMessage's answer (the query
// protocol), one message at a time and through a 64 KiB buffer: toXML holds
// the whole answer three times over (its JSON, the tree decoded from it,
// and the XML, where each '<' of a body takes four bytes); writeXML holds
// one message's JSON and tree.
func (o receiveMessageOutput) writeXML(w io.Writer, requestID string) error {
	const action = "ReceiveMessage"
	b := bufio.NewWriterSize(w, 64<<10)
	xmlHead(b, action)
	if len(o.Messages) > 0 {
		fmt.Fprintf(b, "<%sResult>", action)
	}
	for _, m := range o.Messages {
		tree, err := jsonTree(receiveMessageOutput{Messages: []message{m}})
		if err != nil {
			return err
		}
		writeMembers(b, tree, "")
	}
	if len(o.Messages) > 0 {
		fmt.Fprintf(b, "</%sResult>", action)
	}
	xmlTail(b, action, requestID)
	return b.Flush()
}

// systemAttributeNames are the message system attributes ReceiveMessage
// can return (MessageGroupId for a message that has one; the last two for
// a message sent to a FIFO queue).
var systemAttributeNames = []string{"ApproximateFirstReceiveTimestamp", "ApproximateReceiveCount", "AWSTraceHeader",
	"DeadLetterQueueSourceArn", "SenderId", "SentTimestamp", "MessageGroupId", "MessageDeduplicationId", "SequenceNumber"}

func (h *Handler) receiveMessage(ctx context.Context, r *request) (any, error) {
	var in receiveMessageInput
	if err := r.decode(&in); err != nil {
		return nil, err
	}
	q, info, err := h.lookup(ctx, in.QueueURL)
	if err != nil {
		return nil, err
	}
	n := 1
	if in.MaxNumberOfMessages != nil {
		n = *in.MaxNumberOfMessages
		if n < 1 || n > MaxBatchEntries {
			return nil, invalidParameter("Value %d for parameter MaxNumberOfMessages is invalid. Reason: Must be between 1 and %d, if provided.", n, MaxBatchEntries)
		}
	}
	wait := time.Duration(readQueueAttrs(info).ReceiveMessageWaitTimeSeconds) * time.Second
	if in.WaitTimeSeconds != nil {
		if *in.WaitTimeSeconds < 0 || *in.WaitTimeSeconds > int(MaxWaitTime/time.Second) {
			return nil, invalidParameter("Value %d for parameter WaitTimeSeconds is invalid. Reason: Must be >= 0 and <= %d, if provided.", *in.WaitTimeSeconds, int(MaxWaitTime/time.Second))
		}
		wait = time.Duration(*in.WaitTimeSeconds) * time.Second
	}
	if in.VisibilityTimeout != nil && (*in.VisibilityTimeout < 0 || *in.VisibilityTimeout > int(MaxVisibilityTimeout/time.Second)) {
		return nil, invalidParameter("Value %d for parameter VisibilityTimeout is invalid. Reason: Must be >= 0 and <= %d, if provided.", *in.VisibilityTimeout, int(MaxVisibilityTimeout/time.Second))
	}
	sysNames := append(slices.Clone(in.AttributeNames), in.MessageSystemAttributeNames...)
	for _, s := range sysNames {
		if s != "All" && !slices.Contains(systemAttributeNames, s) {
			return nil, invalidAttributeName("Unknown Attribute %s.", text.Escape(s))
		}
	}
	if wait == 0 {
		wait = shortPoll
	}
	// The visibility timeout the receive sets: the queue's, or the call's.
	visibility := info.LeaseTimeout
	if in.VisibilityTimeout != nil {
		visibility = time.Duration(*in.VisibilityTimeout) * time.Second
	}
	render := func(partition int32, items []queue.LeasedItem, at time.Time) receiveMessageOutput {
		out := receiveMessageOutput{Messages: make([]message, len(items))}
		for i, it := range items {
			out.Messages[i] = h.toMessage(ctx, info, partition, it, at, sysNames, in.MessageAttributeNames)
		}
		return out
	}
	// SQS reads ReceiveRequestAttemptId on FIFO queues alone.
	if in.ReceiveRequestAttemptID == "" || !isFIFO(info) {
		partition, items, _, err := h.receive(ctx, q, info, n, wait, visibility)
		if err != nil {
			return nil, err
		}
		return render(partition, items, h.now()), nil
	}
	if err := checkFIFOID("ReceiveRequestAttemptId", in.ReceiveRequestAttemptID); err != nil {
		return nil, err
	}
	return h.receiveAttempt(ctx, q, info, in.ReceiveRequestAttemptID, n, wait, visibility, render)
}

// expiryGrace is how close to the end of a receive's visibility timeout
// its end counts as the timeout's (a retried receive is then a new one, not
// refused): the queue's loop, on PostgreSQL another node's with its own
// clock, ends an expired receive at its deadline or a little after.
const expiryGrace = time.Second

// receive leases up to n items of q (waiting up to wait for one) for
// visibility (queue.LeaseParams.LeaseTimeout: one call to the queue's
// loop), or, when visibility is 0, leases them and makes them visible at
// once by a retry. It returns the partition, the items (none when none
// came) and the end of their visibility timeout (zero when they are
// visible).
//
// The lease is bounded by bytes: the items' payloads and attributes take at
// most ten times the queue's MaximumMessageSize (the first item whatever its
// size; queue.LeaseParams.MaxBytes). An item larger than MaximumMessageSize
// (produced through /v1, or sent before the attribute was lowered) is not
// answered: refuseOversize ends its receive.
func (h *Handler) receive(ctx context.Context, q queue.Queue, info queue.QueueInfo, n int, wait, visibility time.Duration) (int32, []queue.LeasedItem, time.Time, error) {
	limit := readQueueAttrs(info).maxMessageSize()
	res, err := q.Lease(ctx, queue.LeaseParams{BatchSize: n, ClientID: "sqs-" + randomHex(8), Owner: auth.KeyName(ctx), Timeout: wait,
		MaxBytes: int64(MaxBatchEntries) * int64(limit), LeaseTimeout: visibility})
	if errors.Is(err, queue.ErrNoItems) {
		return 0, nil, time.Time{}, nil
	}
	if err != nil {
		if cause := context.Cause(ctx); cause == auth.ErrKeyRevoked {
			// The pipeline ended the receive: its key was deleted.
			return 0, nil, time.Time{}, cause
		}
		return 0, nil, time.Time{}, err
	}
	if res.Items, err = h.refuseOversize(ctx, q, info, res.Partition, res.Items, limit); err != nil {
		return 0, nil, time.Time{}, err
	}
	if len(res.Items) == 0 {
		return res.Partition, nil, time.Time{}, nil
	}
	if visibility == 0 {
		if err := h.makeVisible(ctx, q, res.Partition, res.Items); err != nil {
			return 0, nil, time.Time{}, err
		}
		return res.Partition, res.Items, time.Time{}, nil
	}
	return res.Partition, res.Items, res.Items[0].LeaseDeadline, nil
}

// refuseOversize returns the items of a receive that SQS can answer, those
// whose body and message attributes take at most limit bytes (the queue's
// MaximumMessageSize), and ends the others' receives by a retry that
// counts the attempt, records why in their attempt history, and schedules
// them for the queue's visibility timeout: an SQS consumer cannot take
// them, as it could not process them, so they follow the queue's rules for
// a message that keeps failing (its maxReceiveCount moves them to the
// dead-letter queue; MessageRetentionPeriod expires them); meanwhile /v1
// consumers can lease them. Logged at WARN at most once a minute per queue
// (oversizeLog).
func (h *Handler) refuseOversize(ctx context.Context, q queue.Queue, info queue.QueueInfo, partition int32, items []queue.LeasedItem,
	limit int) ([]queue.LeasedItem, error) {
	var refused []queue.RetryItem
	kept := items[:0:0]
	for _, it := range items {
		size := sqsSize(it, limit)
		if size <= limit {
			kept = append(kept, it)
			continue
		}
		refused = append(refused, queue.RetryItem{ID: it.ID, RetryAt: h.now().Add(info.LeaseTimeout),
			Error: fmt.Sprintf("SQS ReceiveMessage refused the item: its %d bytes exceed the queue's MaximumMessageSize (%d bytes)", size, limit)})
	}
	if len(refused) == 0 {
		return items, nil
	}
	if _, err := q.Retry(ctx, partition, refused); err != nil {
		return nil, err
	}
	if h.oversizeLog.due(info.ID, h.now()) {
		h.cfg.Log.Warn("sqs: ReceiveMessage refused items larger than the queue's MaximumMessageSize; they are retried after the visibility timeout",
			"queue", info.Name, "items", len(refused), "maximum_message_size", limit)
	}
	return kept, nil
}

// sqsSize returns the size SQS gives the message of it: its body and its
// message attributes; more than limit as soon as its payload is.
func sqsSize(it queue.LeasedItem, limit int) int {
	n := len(it.Payload)
	if n > limit {
		return n
	}
	if env, ok := decodeEnvelope(it.Attributes); ok {
		if size, err := checkAttributes("MessageAttributes", env.Attrs, false); err == nil {
			n += size
		}
	}
	return n
}

// logEvery is at most once per interval per key: the WARN of refused
// oversize messages (refuseOversize). Any goroutine; last holds each key's
// last time (Unix ns, *atomic.Int64).
type logEvery struct {
	interval time.Duration
	last     sync.Map
}

// due reports whether a line for key may be written at now, and if so
// records now.
func (l *logEvery) due(key uint64, now time.Time) bool {
	v, _ := l.last.LoadOrStore(key, new(atomic.Int64))
	last := v.(*atomic.Int64)
	prev := last.Load()
	if prev != 0 && now.UnixNano()-prev < int64(l.interval) {
		return false
	}
	return last.CompareAndSwap(prev, now.UnixNano())
}

// makeVisible ends the receives of leased items at once (a receive with
// VisibilityTimeout 0): a retry, which counts the receive, as SQS does;
// but a dead item's receive in a dead-letter queue (one with a source
// queue) is released, as a look at it is no DLQ attempt (issue 49: it was
// recorded as one, "no error recorded").
func (h *Handler) makeVisible(ctx context.Context, q queue.Queue, partition int32, items []queue.LeasedItem) error {
	retry := make([]queue.RetryItem, len(items))
	for i, it := range items {
		retry[i] = queue.RetryItem{ID: it.ID, Release: it.SourceQueue != ""}
	}
	_, err := q.Retry(ctx, partition, retry)
	return err
}

// toMessage is the SQS message of a leased item.
func (h *Handler) toMessage(ctx context.Context, info queue.QueueInfo, partition int32, it queue.LeasedItem, now time.Time, sysNames, attrNames []string) message {
	// The body's digest is the payload's when the payload is valid UTF-8
	// (no copy of it for the digest); else the repaired body's.
	body, digest := string(it.Payload), it.Payload
	if !utf8.ValidString(body) {
		body = strings.ToValidUTF8(body, "\uFFFD")
		digest = []byte(body)
	}
	env, ok := decodeEnvelope(it.Attributes)
	if !ok {
		env = envelope{ID: derivedMessageID(info.ID, it.ID), Sent: 0}
	}
	m := message{
		MessageID:     env.ID,
		ReceiptHandle: encodeHandle(info.ID, partition, it),
		MD5OfBody:     md5Hex(digest),
		Body:          body,
	}
	if len(sysNames) > 0 {
		all := slices.Contains(sysNames, "All")
		want := func(n string) bool { return all || slices.Contains(sysNames, n) }
		m.Attributes = map[string]string{}
		if want("SenderId") {
			sender := env.Sender
			if sender == "" {
				sender = h.cfg.AccountID
			}
			m.Attributes["SenderId"] = sender
		}
		if want("SentTimestamp") && env.Sent > 0 {
			m.Attributes["SentTimestamp"] = strconv.FormatInt(env.Sent, 10)
		}
		if want("ApproximateReceiveCount") {
			m.Attributes["ApproximateReceiveCount"] = strconv.Itoa(int(it.Attempts))
		}
		if want("ApproximateFirstReceiveTimestamp") {
			// The item's first lease (zero only for an item whose store
			// did not record it yet: this receive's time).
			first := it.FirstLeasedAt
			if first.IsZero() {
				first = now
			}
			m.Attributes["ApproximateFirstReceiveTimestamp"] = strconv.FormatInt(first.UnixMilli(), 10)
		}
		// Left out when the request's key does not cover the source queue:
		// no answer names a queue the key cannot see.
		if want("DeadLetterQueueSourceArn") && it.SourceQueue != "" && auth.Allowed(ctx, it.SourceQueue) {
			m.Attributes["DeadLetterQueueSourceArn"] = h.arn(it.SourceQueue)
		}
		if want("AWSTraceHeader") {
			if t, ok := env.Sys["AWSTraceHeader"]; ok {
				m.Attributes["AWSTraceHeader"] = derefString(t.StringValue)
			}
		}
		if want("MessageGroupId") && it.Group != "" {
			m.Attributes["MessageGroupId"] = it.Group
		}
		if want("MessageDeduplicationId") && env.Dedup != "" {
			m.Attributes["MessageDeduplicationId"] = env.Dedup
			if it.SourceQueue != "" && isFIFO(info) {
				// A dead item of a FIFO dead-letter queue: its original
				// MessageId, as AWS replaces the deduplication id of a
				// message moved into a FIFO DLQ.
				m.Attributes["MessageDeduplicationId"] = env.ID
			}
		}
		if want("SequenceNumber") && env.Seq != 0 {
			m.Attributes["SequenceNumber"] = strconv.FormatUint(env.Seq, 10)
		}
		if len(m.Attributes) == 0 {
			m.Attributes = nil
		}
	}
	if sel := selectAttributes(env.Attrs, attrNames); len(sel) > 0 {
		m.MessageAttributes = sel
		m.MD5OfMessageAttributes = md5OfAttributes(sel)
	}
	return m
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// encodeHandle makes the receipt handle of one receive: the queue's id (a
// handle of another queue, or of a deleted queue re-created under the
// same name, is invalid) and the lease identity, the item's partition and
// its id for this lease (every lease of an item has a new id; ADR 0016),
// with the item's first id and attempts, which find the item once the
// lease has ended (queue.Receipt): "2:<queue id>:<partition>:<id>:<first
// id>:<attempts>". Handles of format 1 (without the last two, made before)
// are still read.
func encodeHandle(queueID uint64, partition int32, it queue.LeasedItem) string {
	return base64.RawURLEncoding.EncodeToString(fmt.Appendf(nil, "2:%d:%d:%d:%d:%d", queueID, partition, it.ID, it.FirstID, it.Attempts))
}

// handle is a decoded receipt handle.
type handle struct {
	queueID   uint64
	partition int32
	// receipt names the receive; FirstID and Attempts are 0 in a handle
	// of format 1 (it then deletes only under its lease).
	receipt queue.Receipt
}

// decodeHandle reads a receipt handle of info's queue, or answers
// ReceiptHandleIsInvalid.
func decodeHandle(info queue.QueueInfo, s string) (handle, error) {
	if s == "" {
		return handle{}, missingParameter("ReceiptHandle")
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return handle{}, errReceiptHandleInvalid
	}
	parts := strings.Split(string(b), ":")
	if !(len(parts) == 4 && parts[0] == "1" || len(parts) == 6 && parts[0] == "2") {
		return handle{}, errReceiptHandleInvalid
	}
	qid, err1 := strconv.ParseUint(parts[1], 10, 64)
	p, err2 := strconv.ParseInt(parts[2], 10, 32)
	id, err3 := strconv.ParseUint(parts[3], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || qid != info.ID || p < 0 || int32(p) >= info.Partitions {
		return handle{}, errReceiptHandleInvalid
	}
	hd := handle{queueID: qid, partition: int32(p), receipt: queue.Receipt{ID: id}}
	if len(parts) == 6 {
		first, err1 := strconv.ParseUint(parts[4], 10, 64)
		attempts, err2 := strconv.ParseInt(parts[5], 10, 32)
		if err1 != nil || err2 != nil {
			return handle{}, errReceiptHandleInvalid
		}
		hd.receipt.FirstID, hd.receipt.Attempts = first, int32(attempts)
	}
	return hd, nil
}

// isStale reports whether err is the queue's answer to an id that is not
// leased (queue.ErrNotLeased: the receive the handle names has ended) or
// that a batch names twice (queue.ErrDuplicateID: the second is stale once
// the first is done).
func isStale(err error) bool {
	return errors.Is(err, queue.ErrNotLeased) || errors.Is(err, queue.ErrDuplicateID)
}

type receiptInput struct {
	QueueURL          string `json:"QueueUrl"`
	ReceiptHandle     string `json:"ReceiptHandle"`
	VisibilityTimeout *int   `json:"VisibilityTimeout"`
}

// deleteMessage deletes the message of the receive a handle names, as SQS
// does: while the receive lasts, and after it ended (its visibility timeout
// passed, or a visibility change to 0 made it visible) as long as nobody
// has received the message since (queue.Queue.DeleteReceived, one step of
// the queue's loop). A handle of an older receive succeeds and deletes
// nothing, as SQS documents.
func (h *Handler) deleteMessage(ctx context.Context, r *request) (any, error) {
	var in receiptInput
	if err := r.decode(&in); err != nil {
		return nil, err
	}
	q, info, err := h.lookup(ctx, in.QueueURL)
	if err != nil {
		return nil, err
	}
	hd, err := decodeHandle(info, in.ReceiptHandle)
	if err != nil {
		return nil, err
	}
	h.touchAttempts(ctx, info, hd.partition, hd.receipt.ID)
	if _, err := q.DeleteReceived(ctx, hd.partition, []queue.Receipt{hd.receipt}); err != nil {
		return nil, err
	}
	return nil, nil
}

type batchEntry struct {
	ID                string `json:"Id"`
	ReceiptHandle     string `json:"ReceiptHandle"`
	VisibilityTimeout *int   `json:"VisibilityTimeout"`
}

type batchInput struct {
	QueueURL string       `json:"QueueUrl"`
	Entries  []batchEntry `json:"Entries"`
}

type batchSuccess struct {
	ID string `json:"Id"`
}

type batchOutput struct {
	Successful []batchSuccess `json:"Successful"`
	Failed     []batchFailure `json:"Failed"`
}

// openBatch decodes a DeleteMessageBatch or ChangeMessageVisibilityBatch
// request, looks its queue up and checks its entries' ids; entry is the
// action's entry type.
func (h *Handler) openBatch(ctx context.Context, r *request, entry string) (batchInput, queue.Queue, queue.QueueInfo, error) {
	var in batchInput
	if err := r.decode(&in); err != nil {
		return in, nil, queue.QueueInfo{}, err
	}
	q, info, err := h.lookup(ctx, in.QueueURL)
	if err != nil {
		return in, nil, queue.QueueInfo{}, err
	}
	ids := make([]string, len(in.Entries))
	for i, e := range in.Entries {
		ids[i] = e.ID
	}
	return in, q, info, checkBatchIDs(entry, ids)
}

// deleteMessageBatch deletes each entry's message as DeleteMessage does:
// one DeleteReceived per partition.
func (h *Handler) deleteMessageBatch(ctx context.Context, r *request) (any, error) {
	in, q, info, err := h.openBatch(ctx, r, "DeleteMessageBatchRequestEntry")
	if err != nil {
		return nil, err
	}
	out := batchOutput{Successful: []batchSuccess{}, Failed: []batchFailure{}}
	byPart := map[int32][]int{}
	handles := make([]handle, len(in.Entries))
	for i, e := range in.Entries {
		hd, err := decodeHandle(info, e.ReceiptHandle)
		if err == errReceiptHandleInvalid {
			// A batch entry's answer quotes the handle (moto's wording, and
			// the AWS Developer Guide's troubleshooting page).
			err = &Error{Type: errReceiptHandleInvalid.Type, Status: errReceiptHandleInvalid.Status,
				Message: fmt.Sprintf(`The input receipt handle "%s" is not a valid receipt handle.`, text.Escape(e.ReceiptHandle))}
		}
		if err != nil {
			out.Failed = append(out.Failed, failure(e.ID, err))
			continue
		}
		handles[i] = hd
		byPart[hd.partition] = append(byPart[hd.partition], i)
		h.touchAttempts(ctx, info, hd.partition, hd.receipt.ID)
	}
	for _, p := range slices.Sorted(maps.Keys(byPart)) {
		entries := byPart[p]
		receipts := make([]queue.Receipt, len(entries))
		for j, i := range entries {
			receipts[j] = handles[i].receipt
		}
		if _, err := q.DeleteReceived(ctx, p, receipts); err != nil {
			return nil, err
		}
		for _, i := range entries {
			out.Successful = append(out.Successful, batchSuccess{ID: in.Entries[i].ID})
		}
	}
	return out, nil
}

// changeVisibility sets a receive's visibility timeout: a renew (the
// message stays invisible for timeout from now) or, with 0, a retry that
// makes it visible at once, counting the receive.
func (h *Handler) changeVisibility(ctx context.Context, q queue.Queue, info queue.QueueInfo, rh string, timeout *int) error {
	hd, err := decodeHandle(info, rh)
	if err != nil {
		return err
	}
	if timeout == nil {
		return missingParameter("VisibilityTimeout")
	}
	if *timeout < 0 || *timeout > int(MaxVisibilityTimeout/time.Second) {
		return invalidParameter("Value %d for parameter VisibilityTimeout is invalid. Reason: Must be >= 0 and <= %d.", *timeout, int(MaxVisibilityTimeout/time.Second))
	}
	h.touchAttempts(ctx, info, hd.partition, hd.receipt.ID)
	if *timeout == 0 {
		_, err = q.Retry(ctx, hd.partition, []queue.RetryItem{{ID: hd.receipt.ID}})
	} else {
		_, err = q.Renew(ctx, hd.partition, []uint64{hd.receipt.ID}, time.Duration(*timeout)*time.Second)
	}
	if isStale(err) {
		// The receive has ended: SQS answers that the message is not in
		// flight (also when another receive holds it now: Styx does not
		// look for it).
		return messageNotInflight
	}
	return err
}

func (h *Handler) changeMessageVisibility(ctx context.Context, r *request) (any, error) {
	var in receiptInput
	if err := r.decode(&in); err != nil {
		return nil, err
	}
	q, info, err := h.lookup(ctx, in.QueueURL)
	if err != nil {
		return nil, err
	}
	return nil, h.changeVisibility(ctx, q, info, in.ReceiptHandle, in.VisibilityTimeout)
}

func (h *Handler) changeMessageVisibilityBatch(ctx context.Context, r *request) (any, error) {
	in, q, info, err := h.openBatch(ctx, r, "ChangeMessageVisibilityBatchRequestEntry")
	if err != nil {
		return nil, err
	}
	out := batchOutput{Successful: []batchSuccess{}, Failed: []batchFailure{}}
	for _, e := range in.Entries {
		if err := h.changeVisibility(ctx, q, info, e.ReceiptHandle, e.VisibilityTimeout); err != nil {
			if _, internal := toError(err); internal || isUnavailable(err) {
				return nil, err
			}
			out.Failed = append(out.Failed, failure(e.ID, err))
			continue
		}
		out.Successful = append(out.Successful, batchSuccess{ID: e.ID})
	}
	return out, nil
}

// isUnavailable reports a failure of the server, not of the entry.
func isUnavailable(err error) bool {
	e, _ := toError(err)
	return e.Status >= 500
}

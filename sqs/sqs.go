// Package sqs serves the Amazon SQS API over Styx's queues, on the same port
// and the same queues as /v1: the AWS JSON 1.0 protocol (POST / with
// "X-Amz-Target: AmazonSQS.<Action>" and an application/x-amz-json-1.0
// body) and the older query protocol (form-encoded requests, XML replies;
// query.go), over the same handlers. Every SQS action maps onto the queue
// layer (queue.Queues): a receive is a lease, a delete a complete, a
// visibility change a renew; a message's MessageId, SentTimestamp and
// attributes live in the item's opaque attributes blob, which every move
// carries (ADR 0016; docs/sqs.md has the whole mapping).
//
// Errors are answered as SQS answers them: a JSON body
// {"__type":"com.amazonaws.sqs#<Name>","message":…}, the HTTP status SQS
// uses, and the x-amzn-query-error header ("<legacy code>;Sender") from
// which the SDKs take their error codes. A client mistake is a 400 (404 for
// an invalid receipt handle, as SQS) and never a 500.
package sqs

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/styxq/styx/internal/fifo"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/styxq/styx/internal/audit"
	"github.com/styxq/styx/internal/clock"
	"github.com/styxq/styx/internal/queue"
	"github.com/styxq/styx/internal/redrive"
)

// Defaults of Config.
const (
	// DefaultRegion is the region named in queue ARNs.
	DefaultRegion = "us-east-1"
	// DefaultAccountID is the account id in queue URLs and ARNs; the SQS
	// emulators use the same one.
	DefaultAccountID = "000000000000"
)

// TargetPrefix starts the X-Amz-Target header of every SQS JSON request.
const TargetPrefix = "AmazonSQS."

// Config configures a Handler.
type Config struct {
	// Queues are the server's queues (the same ones /v1 serves).
	Queues queue.Queues
	// Redrives runs message move tasks (StartMessageMoveTask); nil leaves
	// the move-task actions answering UnsupportedOperation.
	Redrives *redrive.Runner
	// Clock is the time source; nil means clock.Real.
	Clock clock.Clock
	Log   *slog.Logger
	// Region names the region in queue ARNs. Empty: DefaultRegion.
	Region string
	// AccountID is the account id in queue URLs and ARNs. Empty:
	// DefaultAccountID.
	AccountID string
	// MaxRequestBytes bounds a request body, in bytes (the transport's
	// limit); 0 means 64 MiB.
	MaxRequestBytes int64
	// FIFO keeps the FIFO queues' send answers, SequenceNumbers and receive
	// attempts (internal/fifo): the PostgreSQL store, so that every node
	// answers the same; nil means a fifo.Memory of this Handler's (one
	// node: the memory and Pebble backends).
	FIFO fifo.Store
}

// MaxBodyBytes is the largest SQS request body the door reads: 6 MiB and
// 64 KiB. The largest request SQS accepts carries 1 MiB of messages (one
// message, or a batch's total: MaxMaximumMessageSize) and attributes; its
// JSON encoding writes a character in at most 6 bytes (\u00XX) and its
// form encoding in 3 (%XX), and the rest (action, queue URL, entry ids and
// parameters) fits in 64 KiB. A larger body is refused (400) before it is
// read or charged to the in-flight budget (issue 48).
const MaxBodyBytes = 6<<20 + 64<<10

// Handler is the SQS door: it translates SQS requests onto Styx's queues
// and answers as SQS does. Authentication (AWS SigV4 with a Styx key, with
// --auth), the Host, Origin and cross-site checks, admission and audit are
// the transport pipeline's, before Parse and Serve. Its methods may be
// called concurrently. Its only state is what SQS answers that the queues
// do not keep: the FIFO sends' MessageIds and SequenceNumbers and the
// receive attempts, in its fifo.Store (Config.FIFO).
type Handler struct {
	cfg     Config
	actions map[string]action
	// state keeps what FIFO queues answer that their items do not hold
	// (cfg.FIFO, or a fifo.Memory of the Handler's own).
	state fifo.Store
	// oversizeLog limits the WARN of refused oversize messages to one a
	// minute per queue (refuseOversize).
	oversizeLog logEvery
}

// action runs one SQS action on a decoded request body and returns the
// reply to encode as JSON (nil: "{}").
type action func(ctx context.Context, r *request) (any, error)

// request is one SQS call being served.
type request struct {
	http *http.Request
	body []byte
}

// New returns a Handler.
func New(cfg Config) *Handler {
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.Region == "" {
		cfg.Region = DefaultRegion
	}
	if cfg.AccountID == "" {
		cfg.AccountID = DefaultAccountID
	}
	if cfg.MaxRequestBytes == 0 {
		cfg.MaxRequestBytes = 64 << 20
	}
	if cfg.FIFO == nil {
		cfg.FIFO = fifo.NewMemory()
	}
	h := &Handler{cfg: cfg, state: cfg.FIFO, oversizeLog: logEvery{interval: time.Minute}}
	h.actions = map[string]action{
		"CreateQueue":                  h.createQueue,
		"GetQueueUrl":                  h.getQueueURL,
		"ListQueues":                   h.listQueues,
		"DeleteQueue":                  h.deleteQueue,
		"GetQueueAttributes":           h.getQueueAttributes,
		"SetQueueAttributes":           h.setQueueAttributes,
		"PurgeQueue":                   h.purgeQueue,
		"SendMessage":                  h.sendMessage,
		"SendMessageBatch":             h.sendMessageBatch,
		"ReceiveMessage":               h.receiveMessage,
		"DeleteMessage":                h.deleteMessage,
		"DeleteMessageBatch":           h.deleteMessageBatch,
		"ChangeMessageVisibility":      h.changeMessageVisibility,
		"ChangeMessageVisibilityBatch": h.changeMessageVisibilityBatch,
		"ListDeadLetterSourceQueues":   h.listDeadLetterSourceQueues,
		"StartMessageMoveTask":         h.startMessageMoveTask,
		"ListMessageMoveTasks":         h.listMessageMoveTasks,
		"CancelMessageMoveTask":        h.cancelMessageMoveTask,
		"TagQueue":                     h.tagQueue,
		"UntagQueue":                   h.untagQueue,
		"ListQueueTags":                h.listQueueTags,
		"AddPermission":                notSupported("AddPermission", "Styx has no SQS permission policies; use Styx API keys with scopes and queue patterns (--auth)"),
		"RemovePermission":             notSupported("RemovePermission", "Styx has no SQS permission policies; use Styx API keys with scopes and queue patterns (--auth)"),
	}
	return h
}

// Actions returns the names of the actions the handler serves, sorted.
func (h *Handler) Actions() []string { return slices.Sorted(maps.Keys(h.actions)) }

// Known reports whether the handler serves action.
func (h *Handler) Known(action string) bool { _, ok := h.actions[action]; return ok }

// Is reports whether r is an SQS request: a POST with an X-Amz-Target
// header naming the AmazonSQS service (the JSON protocol), or a
// query-protocol request (a form POST, or a GET with an Action parameter,
// outside /v1/, /health, /metrics and /ui).
func Is(r *http.Request) bool {
	return r.Method == http.MethodPost && strings.HasPrefix(r.Header.Get("X-Amz-Target"), TargetPrefix) || isQuery(r)
}

// Path reports whether p is a path the SQS API is served at: / and the
// path of a queue URL, /<account id>/<queue name> (the query protocol posts
// to a queue's URL).
func Path(p string) bool {
	if p == "/" {
		return true
	}
	return strings.Count(p, "/") == 2 && !strings.HasSuffix(p, "/") && !strings.HasPrefix(p, "//")
}

// Region is the region the handler's ARNs name, and that an SQS request's
// SigV4 credential scope must name.
func (h *Handler) Region() string { return h.cfg.Region }

// Call is one SQS request, parsed (Parse) but not yet served.
type Call struct {
	// Action is the SQS action ("SendMessage").
	Action string
	// Op is the /v1 call whose scope and queue rules the action follows
	// (internal/auth; "/v1/queue.produce"), and under which it is audited.
	Op string
	// query: the request is in the query protocol (form in, XML out).
	query bool
	// in is the action's input as JSON.
	in []byte
}

// Parse reads the action and input of an SQS request whose body (the
// pipeline read it, within its limits) is body, in the JSON or the query
// protocol. An unknown action, or a form that does not parse, is an *Error;
// the returned Call is set whenever the action was read, for the audit and
// refusal logs.
func (h *Handler) Parse(r *http.Request, body []byte) (*Call, error) {
	c := &Call{query: !strings.HasPrefix(r.Header.Get("X-Amz-Target"), TargetPrefix)}
	c.Action = strings.TrimPrefix(r.Header.Get("X-Amz-Target"), TargetPrefix)
	var form url.Values
	if c.query {
		form = r.URL.Query()
		if r.Method == http.MethodPost {
			posted, err := url.ParseQuery(string(body))
			if err != nil {
				return nil, invalidParameter("the request body is not a valid form: %v", err)
			}
			for k, v := range posted {
				form[k] = v
			}
		}
		c.Action = form.Get("Action")
	}
	if _, ok := h.actions[c.Action]; !ok {
		return nil, &Error{Type: "InvalidAction", Status: http.StatusBadRequest,
			Message: fmt.Sprintf("The action %s is not valid for this endpoint.", clip(c.Action))}
	}
	c.Op = actionPaths[c.Action]
	if c.Op == "" {
		c.Op = "/v1/queues.create" // an action without a mapping needs admin
	}
	c.in = body
	if c.query {
		// A query request sent to a queue URL names its queue by the path.
		if form.Get("QueueUrl") == "" && strings.Count(strings.Trim(r.URL.Path, "/"), "/") == 1 {
			form.Set("QueueUrl", h.queueURL(r, r.URL.Path[strings.LastIndexByte(r.URL.Path, '/')+1:]))
		}
		in, err := formToJSON(c.Action, form)
		if err != nil {
			return c, err
		}
		c.in = in
	}
	return c, nil
}

// Serve serves a parsed call: the pipeline has authenticated it (the
// principal, if any, is in r's context) and checked its action's scope.
func (h *Handler) Serve(w http.ResponseWriter, r *http.Request, c *Call) {
	requestID := newMessageID()
	w.Header().Set("x-amzn-RequestId", requestID)
	ctx := context.WithValue(r.Context(), accessKey{}, c.Access())
	out, err := h.actions[c.Action](ctx, &request{http: r, body: c.in})
	if err != nil {
		h.failCall(w, r, c.query, requestID, err)
		return
	}
	if out == nil {
		out = struct{}{}
	}
	if st, ok := out.(answerStreamer); ok {
		if c.query {
			w.Header().Set("Content-Type", "text/xml")
			err = st.writeXML(w, requestID)
		} else {
			w.Header().Set("Content-Type", "application/x-amz-json-1.0")
			err = st.writeJSON(w)
		}
		if err != nil {
			h.cfg.Log.Debug("sqs: answer not written whole", "action", c.Action, "error", err)
		}
		return
	}
	var b []byte
	if c.query {
		b, err = toXML(c.Action, out, requestID)
		w.Header().Set("Content-Type", "text/xml")
	} else {
		b, err = marshalJSON(out)
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	}
	if err != nil {
		h.failCall(w, r, c.query, requestID, err)
		return
	}
	_, _ = w.Write(b)
}

// answerStreamer is an answer that writes its encoding, JSON (as
// marshalJSON's) or XML (as toXML's), to the client a part at a time, so
// that a large answer is never held whole: receiveMessageOutput.
type answerStreamer interface {
	writeJSON(w io.Writer) error
	writeXML(w io.Writer, requestID string) error
}

// marshalJSON encodes v as json.Marshal does but without its HTML
// escaping: <, > and & stay one byte each, not six (\u003c), as SQS writes
// them (issue 48).
func marshalJSON(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// Fail answers err for a request that did not reach Serve (refused by the
// pipeline, or a bad body), in the request's protocol.
func (h *Handler) Fail(w http.ResponseWriter, r *http.Request, err error) {
	requestID := newMessageID()
	w.Header().Set("x-amzn-RequestId", requestID)
	h.failCall(w, r, !strings.HasPrefix(r.Header.Get("X-Amz-Target"), TargetPrefix), requestID, err)
}

// failCall answers err as SQS does, in the JSON or the query protocol, and
// records a refusal's reason for the pipeline's refusal log.
func (h *Handler) failCall(w http.ResponseWriter, r *http.Request, query bool, requestID string, err error) {
	e, internal := toError(err)
	if internal {
		h.cfg.Log.Error("sqs: internal error", "target", r.Header.Get("X-Amz-Target"), "error", err)
	}
	if e.Status == http.StatusUnauthorized || e.Status == http.StatusForbidden {
		audit.From(r.Context()).Refused(e.Type + ": " + e.Message)
	}
	if query {
		failXML(w, e, requestID)
		return
	}
	writeJSONError(w, e)
}

// decode unmarshals the request body into v: an empty body is {}.
func (r *request) decode(v any) error {
	if len(strings.TrimSpace(string(r.body))) == 0 {
		return nil
	}
	if err := json.Unmarshal(r.body, v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return &Error{Type: "SerializationException", Status: http.StatusBadRequest,
				Message: fmt.Sprintf("the field %s must be a %s, not a JSON %s", te.Field, te.Type, te.Value)}
		}
		return &Error{Type: "SerializationException", Status: http.StatusBadRequest,
			Message: "the request body is not valid JSON: " + err.Error()}
	}
	return nil
}

// queueURL is the URL of queue name as a client of r reaches it:
// <scheme>://<host>/<account id>/<name>.
func (h *Handler) queueURL(r *http.Request, name string) string {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host + "/" + h.cfg.AccountID + "/" + url.PathEscape(name)
}

// arn is the ARN of queue name.
func (h *Handler) arn(name string) string {
	return "arn:aws:sqs:" + h.cfg.Region + ":" + h.cfg.AccountID + ":" + name
}

// nameFromARN returns the queue name of an SQS queue ARN of this server.
func (h *Handler) nameFromARN(field, arn string) (string, error) {
	parts := strings.Split(arn, ":")
	if len(parts) != 6 || parts[0] != "arn" || parts[2] != "sqs" || parts[5] == "" {
		return "", invalidParameter("Value %s for parameter %s is invalid. Reason: it is not an SQS queue ARN (arn:aws:sqs:<region>:<account id>:<queue name>).", arn, field)
	}
	return parts[5], nil
}

// queueName returns the queue name a QueueUrl names: its last path segment
// (any host and account id are accepted, as the SQS emulators do, so a URL
// built for another endpoint still works).
func queueName(queueURL string) (string, error) {
	if queueURL == "" {
		return "", missingParameter("QueueUrl")
	}
	u, err := url.Parse(queueURL)
	if err != nil {
		return "", invalidAddress(queueURL)
	}
	p := strings.TrimSuffix(u.EscapedPath(), "/")
	i := strings.LastIndexByte(p, '/')
	name, err := url.PathUnescape(p[i+1:])
	if err != nil {
		return "", invalidAddress(queueURL)
	}
	if name == "" {
		// A URL without a queue path (the endpoint's): SQS answers that
		// the queue does not exist.
		return "", errNoQueue
	}
	return name, nil
}

// lookup returns the queue a QueueUrl names and its definition, or
// QueueDoesNotExist.
func (h *Handler) lookup(ctx context.Context, queueURL string) (queue.Queue, queue.QueueInfo, error) {
	name, err := queueName(queueURL)
	if err != nil {
		return nil, queue.QueueInfo{}, err
	}
	return h.lookupName(ctx, name)
}

// existing returns the name a QueueUrl names once the request may act on
// that queue and it exists (QueueDoesNotExist otherwise), without reading
// its definition.
func (h *Handler) existing(ctx context.Context, queueURL string) (string, error) {
	name, err := queueName(queueURL)
	if err != nil {
		return "", err
	}
	_, err = h.get(ctx, name)
	return name, err
}

// get returns the named queue once the request may act on it, or
// QueueDoesNotExist.
func (h *Handler) get(ctx context.Context, name string) (queue.Queue, error) {
	if err := h.allow(ctx, name); err != nil {
		return nil, err
	}
	q, err := h.cfg.Queues.Get(name)
	if err != nil {
		return nil, errNoQueue
	}
	return q, nil
}

// lookupName returns the named queue and its definition once the request
// may act on it, or QueueDoesNotExist.
func (h *Handler) lookupName(ctx context.Context, name string) (queue.Queue, queue.QueueInfo, error) {
	q, err := h.get(ctx, name)
	if err != nil {
		return nil, queue.QueueInfo{}, err
	}
	info, err := h.cfg.Queues.Info(ctx, name)
	if err != nil {
		return nil, queue.QueueInfo{}, err
	}
	return q, info, nil
}

func (h *Handler) now() time.Time { return h.cfg.Clock.Now() }

func notSupported(action, why string) action {
	return func(context.Context, *request) (any, error) {
		return nil, &Error{Type: "UnsupportedOperation", Query: "AWS.SimpleQueueService.UnsupportedOperation", Status: http.StatusBadRequest,
			Message: action + " is not supported by Styx: " + why + "."}
	}
}

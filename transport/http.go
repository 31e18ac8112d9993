// Package transport is the server's one HTTP request pipeline
// (pipeline.go: routing by path, Host/Origin and cross-site checks,
// authentication, admission against the in-flight byte budget, audit and
// the refusal log, for every door) and the /v1 door: DUH-RPC framing
// (docs/wire-contract.md), POST /v1/<resource>.<verb> with JSON or protobuf
// bodies, errors as duh.v1.Reply with the HTTP status equal to the code
// and the reason in details (errors.go: the class internal/errclass gives
// an error, written as a reply), plus the probes (/health, /readyz, /livez)
// and GET /metrics.
package transport

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"mime"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	duh "github.com/duh-rpc/duh-go"
	v1 "github.com/duh-rpc/duh-go/proto/v1"
	"golang.org/x/time/rate"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/styxq/styx/internal/activity"
	"github.com/styxq/styx/internal/apierr"
	"github.com/styxq/styx/internal/audit"
	"github.com/styxq/styx/internal/auth"
	"github.com/styxq/styx/internal/backup"
	"github.com/styxq/styx/internal/errclass"
	"github.com/styxq/styx/metrics"
	"github.com/styxq/styx/service"
	"github.com/styxq/styx/sqs"
	pb "github.com/styxq/styx/styxpb"
)

// DefaultMaxRequestBytes bounds a request body: 1000 items of up to 5 MB
// each would be 5 GB, so large batches of large items must be split.
const DefaultMaxRequestBytes = 64 << 20

// DefaultBodyReadTimeout bounds how long a request's body may take to
// arrive, from the moment its headers have been read.
const DefaultBodyReadTimeout = 30 * time.Second

// Config configures the HTTP handler.
type Config struct {
	Service *service.Service
	Metrics *metrics.Metrics
	Log     *slog.Logger
	// Activity, when set, stores the record of every successful audited
	// call (internal/activity), whichever door it came through, before its
	// answer leaves; Service should read the same log
	// (service.Service.WithActivity). Nil stores none.
	Activity *activity.Log
	// MaxRequestBytes bounds request bodies, in bytes; a larger body is
	// answered 400 (by its Content-Length before it is read). 0 means
	// DefaultMaxRequestBytes (64 MiB).
	MaxRequestBytes int64
	// MaxInflightBytes is the server-wide in-flight request byte budget,
	// in bytes, shared by every door: each request is charged three times
	// its body (its Content-Length, or as a chunked body arrives) until it is
	// answered, and one the budget cannot hold now is answered 503 with
	// Retry-After before more of its body is read. Must be at least RequestCost
	// times MaxRequestBytes. 0 means DefaultMaxInflightBytes (256 MiB).
	MaxInflightBytes int64
	// MaxInflightBytesPerKey is the most of MaxInflightBytes one holder
	// may hold at once: an API key (with Auth), or a client address
	// (without). 0 means DefaultMaxInflightBytesPerKey: a quarter of the
	// budget, and at least RequestCost times MaxRequestBytes.
	MaxInflightBytesPerKey int64
	// PreAuthBodyReadTimeout bounds how long the body of a request whose
	// signature can be verified only over its body (SQS's SigV4 without a
	// signed X-Amz-Content-Sha256) may take to arrive. 0 means
	// DefaultPreAuthBodyReadTimeout (10s); BodyReadTimeout when shorter.
	PreAuthBodyReadTimeout time.Duration
	// BodyReadTimeout bounds how long a /v1 request's body may take to
	// arrive once its headers are read; a body still incomplete then is
	// answered 408 and its connection closed. It covers only the body: a
	// long-poll lease still waits its full request_timeout for its answer.
	// 0 means DefaultBodyReadTimeout (30s).
	BodyReadTimeout time.Duration
	// Keys, with Auth, authenticates requests; with Keys and Auth, the
	// /v1/keys.* calls are routed to Service, which must serve the same
	// keys (service.Service.WithKeys). Nil leaves the keys calls out (501).
	Keys *auth.Keys
	// Auth makes every /v1 call and /metrics require an API key
	// ("Authorization: Bearer <key>"), and every SQS call an AWS SigV4
	// signature made with one, holding the call's scope for the call's
	// queues (internal/auth); the probes and the web UI's static assets
	// under /ui/ stay open. Requires Keys.
	Auth bool
	// UI, when set, serves the web UI under /ui/ (static assets) without
	// a key, whatever Auth says: the UI asks the user for a key and sends
	// it on its own /v1 calls as "Authorization: Bearer <key>", which are
	// checked as any other client's. Nil: /ui/ is 501 like any unknown path.
	UI http.Handler
	// AllowedHosts are the names (host, without port) a server without
	// Auth answers besides the loopback ones (localhost, 127.0.0.1, ::1):
	// a request whose Host header names another host is refused 403, a
	// defence against DNS rebinding (issue 24), and so is a browser's call
	// whose Origin is neither the server's own origin nor on one of these
	// hosts (checkHost). Ignored with Auth (a rebinding page holds no key).
	// Empty: loopback names only.
	AllowedHosts []string
	// Health, when set, says why the server cannot take writes ("" when it
	// can): GET /health and /readyz then answer 503
	// {"status":"degraded: <why>"}, GET /livez 200 with the same status
	// (serveHealth). Nil: always "ok".
	Health func() string
	// Degraded, when set, says what part of the storage cannot take
	// writes while the rest can ("" when all can): with Health "", GET
	// /health answers 200 {"status":"degraded: <why>"} (several
	// PostgreSQL clusters, one down: only its queues answer 453; ADR
	// 0023). Nil: never.
	Degraded func() string
	// Clusters, when set, gives each PostgreSQL cluster's state by name
	// ("" when it takes writes, else why not): /health lists them under
	// "clusters" ("ok" or the reason). Nil: no "clusters" in the answer.
	Clusters func() map[string]string
	// SQS, when set, serves the Amazon SQS API at / and at queue-URL paths
	// (sqs.Path): a POST carrying "X-Amz-Target: AmazonSQS.<Action>" (the
	// JSON protocol), or a form POST or a GET with an Action parameter (the
	// query protocol; sqs.Is), goes to it through the same pipeline as /v1
	// (the pipeline verifies its SigV4 signatures with Keys). Requests are
	// counted under the path "/sqs/<Action>". Nil: such requests are
	// answered as any other path.
	SQS *sqs.Handler
	// Backup, when set, is the embedded store /v1/storage/backup streams
	// an online backup of (internal/backup; issue 47). Nil (PostgreSQL):
	// the call is answered 501, naming pg_basebackup and pg_dump.
	Backup backup.Source
}

// Handler is the server's http.Handler.
type Handler struct {
	cfg    Config
	routes map[string]http.HandlerFunc
	// watchMu guards watching: the cancel functions of the waiting leases
	// of each key name (watchKey), ended when the key is deleted here.
	watchMu  sync.Mutex
	watching map[string]map[*context.CancelCauseFunc]struct{}
	// refusals rate-limits the log lines of refused requests (logRefused);
	// refusalsDropped counts those left out.
	refusals        *rate.Limiter
	refusalsDropped atomic.Int64
	// budget is the in-flight request byte budget (MaxInflightBytes).
	budget *budget
}

// Inflight returns the bytes of the in-flight budget charged now (request
// bodies and answers being written) and how many holders (keys, or client
// addresses) hold them: the gauges styx_http_inflight_bytes and
// styx_http_inflight_holders.
func (h *Handler) Inflight() (bytes int64, holders int) { return h.budget.inUse() }

// errKeyRevoked ends the waiting requests of a key deleted while they wait
// (401).
var errKeyRevoked = auth.ErrKeyRevoked

// keyRecheck is how often a waiting lease checks that its key still
// exists: a key deleted on another server (PostgreSQL) ends it within this.
const keyRecheck = time.Second

// watchKey returns ctx ended with errKeyRevoked when the key named name is
// deleted: at once by a keys.delete on this server (revoke), or within
// keyRecheck when check answers apierr.Unauthorized (the request's
// credentials no longer authenticate: deleted on another server). stop
// ends the watch. The SQS API's long polls use it too (sqs.KeyWatcher).
func (h *Handler) watchKey(ctx context.Context, name string, check func(context.Context) error) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	h.watchMu.Lock()
	if h.watching == nil {
		h.watching = map[string]map[*context.CancelCauseFunc]struct{}{}
	}
	if h.watching[name] == nil {
		h.watching[name] = map[*context.CancelCauseFunc]struct{}{}
	}
	h.watching[name][&cancel] = struct{}{}
	h.watchMu.Unlock()
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(keyRecheck)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				if err := check(ctx); err != nil {
					if e, ok := apierr.As(err); ok && e.Code == apierr.Unauthorized {
						cancel(errKeyRevoked)
						return
					}
				}
			}
		}
	}()
	return ctx, func() {
		close(done)
		h.watchMu.Lock()
		delete(h.watching[name], &cancel)
		if len(h.watching[name]) == 0 {
			delete(h.watching, name)
		}
		h.watchMu.Unlock()
		cancel(nil)
	}
}

// revoke ends the waiting leases of the key named name (errKeyRevoked).
func (h *Handler) revoke(name string) {
	h.watchMu.Lock()
	defer h.watchMu.Unlock()
	for c := range h.watching[name] {
		(*c)(errKeyRevoked)
	}
}

// NewHandler returns the HTTP handler of the API.
func NewHandler(cfg Config) *Handler {
	if cfg.MaxRequestBytes == 0 {
		cfg.MaxRequestBytes = DefaultMaxRequestBytes
	}
	if cfg.BodyReadTimeout == 0 {
		cfg.BodyReadTimeout = DefaultBodyReadTimeout
	}
	if cfg.MaxInflightBytes == 0 {
		cfg.MaxInflightBytes = DefaultMaxInflightBytes
	}
	if cfg.MaxInflightBytesPerKey == 0 {
		cfg.MaxInflightBytesPerKey = DefaultMaxInflightBytesPerKey(cfg.MaxInflightBytes, cfg.MaxRequestBytes)
	}
	if cfg.PreAuthBodyReadTimeout == 0 {
		cfg.PreAuthBodyReadTimeout = DefaultPreAuthBodyReadTimeout
	}
	h := &Handler{refusals: rate.NewLimiter(rate.Every(time.Second), 10), cfg: cfg,
		budget: newBudget(cfg.MaxInflightBytes, min(cfg.MaxInflightBytesPerKey, cfg.MaxInflightBytes),
			min(RequestCost*min(cfg.MaxRequestBytes, sqs.MaxBodyBytes), cfg.MaxInflightBytes))}
	s := cfg.Service
	h.routes = map[string]http.HandlerFunc{
		"/v1/queue.produce":          noReply(h, func() *pb.QueueProduceRequest { return &pb.QueueProduceRequest{} }, s.QueueProduce, func() proto.Message { return &pb.QueueProduceResponse{Code: duh.CodeOK, CodeText: okText} }),
		"/v1/queue.lease":            rpc(h, func() *pb.QueueLeaseRequest { return &pb.QueueLeaseRequest{} }, s.QueueLease),
		"/v1/queue.complete":         noReply(h, func() *pb.QueueCompleteRequest { return &pb.QueueCompleteRequest{} }, s.QueueComplete, func() proto.Message { return &pb.QueueCompleteResponse{Code: duh.CodeOK, CodeText: okText} }),
		"/v1/queue.retry":            rpc(h, func() *pb.QueueRetryRequest { return &pb.QueueRetryRequest{} }, s.QueueRetry),
		"/v1/queue.renew":            rpc(h, func() *pb.QueueRenewRequest { return &pb.QueueRenewRequest{} }, s.QueueRenew),
		"/v1/queue.stats":            rpc(h, func() *pb.QueueStatsRequest { return &pb.QueueStatsRequest{} }, s.QueueStats),
		"/v1/queues.history":         rpc(h, func() *pb.QueuesHistoryRequest { return &pb.QueuesHistoryRequest{} }, s.QueuesHistory),
		"/v1/activity.list":          rpc(h, func() *pb.ActivityListRequest { return &pb.ActivityListRequest{} }, s.ActivityList),
		"/v1/queue.clear":            noReply(h, func() *pb.QueueClearRequest { return &pb.QueueClearRequest{} }, s.QueueClear, okReply),
		"/v1/queue.clear_dry_run":    rpc(h, func() *pb.QueueClearRequest { return &pb.QueueClearRequest{} }, s.QueueClearDryRun),
		"/v1/queues.pause":           rpc(h, func() *pb.QueuesPauseRequest { return &pb.QueuesPauseRequest{} }, s.QueuesPause),
		"/v1/queues.resume":          rpc(h, func() *pb.QueuesPauseRequest { return &pb.QueuesPauseRequest{} }, s.QueuesResume),
		"/v1/queue.reload":           noReply(h, func() *pb.QueueReloadRequest { return &pb.QueueReloadRequest{} }, s.QueueReload, func() proto.Message { return &pb.QueueReloadResponse{Code: duh.CodeOK, CodeText: okText} }),
		"/v1/queues.create":          noReply(h, func() *pb.QueueInfo { return &pb.QueueInfo{} }, s.QueuesCreate, okReply),
		"/v1/queues.update":          noReply(h, func() *pb.QueueInfo { return &pb.QueueInfo{} }, s.QueuesUpdate, okReply),
		"/v1/queues.list":            rpc(h, func() *pb.QueuesListRequest { return &pb.QueuesListRequest{} }, s.QueuesList),
		"/v1/queues.info":            rpc(h, func() *pb.QueuesInfoRequest { return &pb.QueuesInfoRequest{} }, s.QueuesInfo),
		"/v1/queues.move":            rpc(h, func() *pb.QueuesMoveRequest { return &pb.QueuesMoveRequest{} }, s.QueuesMove),
		"/v1/queues.delete":          noReply(h, func() *pb.QueuesDeleteRequest { return &pb.QueuesDeleteRequest{} }, s.QueuesDelete, okReply),
		"/v1/storage/items.list":     rpc(h, func() *pb.StorageItemsListRequest { return &pb.StorageItemsListRequest{} }, s.StorageItemsList),
		"/v1/storage/scheduled.list": rpc(h, func() *pb.StorageItemsListRequest { return &pb.StorageItemsListRequest{} }, s.StorageScheduledList),
		"/v1/storage/items.import":   rpc(h, func() *pb.StorageItemsImportRequest { return &pb.StorageItemsImportRequest{} }, s.StorageItemsImport),
		"/v1/dead.list":              rpc(h, func() *pb.DeadListRequest { return &pb.DeadListRequest{} }, s.DeadList),
		"/v1/dead.groups":            rpc(h, func() *pb.DeadGroupsRequest { return &pb.DeadGroupsRequest{} }, s.DeadGroups),
		"/v1/dead.delete":            rpc(h, func() *pb.DeadDeleteRequest { return &pb.DeadDeleteRequest{} }, s.DeadDelete),
		"/v1/dead.edit":              rpc(h, func() *pb.DeadEditRequest { return &pb.DeadEditRequest{} }, s.DeadEdit),
		"/v1/dead.redrive":           rpc(h, func() *pb.DeadRedriveRequest { return &pb.DeadRedriveRequest{} }, s.DeadRedrive),
		"/v1/redrives.list":          rpc(h, func() *pb.RedrivesListRequest { return &pb.RedrivesListRequest{} }, s.RedrivesList),
		"/v1/redrives.get":           rpc(h, func() *pb.RedriveTaskRequest { return &pb.RedriveTaskRequest{} }, s.RedrivesGet),
		"/v1/redrives.cancel":        rpc(h, func() *pb.RedriveTaskRequest { return &pb.RedriveTaskRequest{} }, s.RedrivesCancel),
		"/v1/redrives.pause":         rpc(h, func() *pb.RedriveTaskRequest { return &pb.RedriveTaskRequest{} }, s.RedrivesPause),
		"/v1/redrives.resume":        rpc(h, func() *pb.RedriveTaskRequest { return &pb.RedriveTaskRequest{} }, s.RedrivesResume),
		"/v1/redrives.update":        rpc(h, func() *pb.RedrivesUpdateRequest { return &pb.RedrivesUpdateRequest{} }, s.RedrivesUpdate),
		"/v1/storage/items.delete":   noReply(h, func() *pb.StorageItemsDeleteRequest { return &pb.StorageItemsDeleteRequest{} }, s.StorageItemsDelete, okReply),
	}
	switch {
	case cfg.Keys != nil && cfg.Auth:
		h.routes["/v1/keys.create"] = rpc(h, func() *pb.KeysCreateRequest { return &pb.KeysCreateRequest{} }, s.KeysCreate)
		h.routes["/v1/keys.list"] = rpc(h, func() *pb.KeysListRequest { return &pb.KeysListRequest{} }, s.KeysList)
		h.routes["/v1/keys.delete"] = noReply(h, func() *pb.KeysDeleteRequest { return &pb.KeysDeleteRequest{} },
			func(ctx context.Context, req *pb.KeysDeleteRequest) error {
				if err := s.KeysDelete(ctx, req); err != nil {
					return err
				}
				// The deleted key's waiting leases on this server end now,
				// before the delete is answered: nothing produced after it
				// reaches them (issue 24).
				h.revoke(req.Name)
				return nil
			}, okReply)
	case cfg.Keys != nil:
		// Issue 24: a key minted while auth is off would be a valid key
		// (an admin one, say) the day auth is turned on, minted by anyone
		// who could reach the port. So keys.* need --auth.
		for _, path := range []string{"/v1/keys.create", "/v1/keys.list", "/v1/keys.delete"} {
			h.routes[path] = func(w http.ResponseWriter, r *http.Request) { h.fail(w, r, errKeysNeedAuth) }
		}
	}
	h.routes[PathBackup] = h.serveBackup
	if cfg.Metrics != nil {
		cfg.Metrics.InitPaths(slices.Sorted(maps.Keys(h.routes)))
		if cfg.SQS != nil {
			for _, a := range cfg.SQS.Actions() {
				cfg.Metrics.InitPaths([]string{"/sqs/" + a})
			}
		}
	}
	return h
}

var okText = duh.CodeText(duh.CodeOK)

// allowedHost reports whether hostport (a Host header, or an origin's
// host) names a loopback host or one of AllowedHosts.
func (h *Handler) allowedHost(hostport string) bool {
	host := hostOnly(hostport)
	if strings.EqualFold(host, "localhost") {
		return true
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return true
	}
	for _, a := range h.cfg.AllowedHosts {
		if strings.EqualFold(a, host) {
			return true
		}
	}
	return false
}

// hostOnly returns the host of a host[:port], without brackets.
func hostOnly(hostport string) string {
	if host, _, err := net.SplitHostPort(hostport); err == nil {
		return host
	}
	return strings.TrimSuffix(strings.TrimPrefix(hostport, "["), "]")
}

// errKeysNeedAuth answers keys.* on a server started without --auth (400).
var errKeysNeedAuth = apierr.Invalidf("api keys need auth; this server was started without --auth, so a key made here " +
	"would be valid once auth is turned on: start the server with --auth (and --admin-key-file for the first admin key) to manage keys")

// okReply is the body of a call that answers nothing but success.
func okReply() proto.Message {
	return &v1.Reply{Code: duh.CodeOK, CodeText: okText}
}

// rpc adapts a service call that answers a message.
func rpc[Req proto.Message, Resp proto.Message](h *Handler, newReq func() Req, call func(context.Context, Req) (Resp, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		req := newReq()
		if err := h.decode(w, r, req); err != nil {
			h.fail(w, r, err)
			return
		}
		ctx := r.Context()
		// The access rule (internal/auth), on the queues the request names.
		if err := auth.Authorize(ctx, auth.Access{Op: r.URL.Path, Queues: queuesOf(req)}); err != nil {
			h.fail(w, r, err)
			return
		}
		resp, err := call(ctx, req)
		if err != nil {
			if context.Cause(ctx) == errKeyRevoked {
				err = errKeyRevoked
			}
			h.fail(w, r, err)
			return
		}
		auditAttrs(audit.From(ctx), req, resp)
		h.reply(w, r, duh.CodeOK, resp)
	}
}

// noReply adapts a service call that answers only success; answer makes
// the success body.
func noReply[Req proto.Message](h *Handler, newReq func() Req, call func(context.Context, Req) error, answer func() proto.Message) http.HandlerFunc {
	return rpc(h, newReq, func(ctx context.Context, req Req) (proto.Message, error) {
		if err := call(ctx, req); err != nil {
			return nil, err
		}
		return answer(), nil
	})
}

// decode reads the body into m by its content type, then lifts the body
// read deadline ServeHTTP set. Returns apierr errors: 455 for an unknown
// content type or a body that does not decode (unknown JSON fields
// included), 400 for a body over the size limit or a list over its limit
// (checked before decoding: checkListsProto, checkListsJSON), 408 for a
// body that did not arrive within BodyReadTimeout; the admission errors of
// the body's reader (budget.admit: 503 over the in-flight budget, 400 over
// MaxRequestBytes) as they are.
func (h *Handler) decode(w http.ResponseWriter, r *http.Request, m proto.Message) error {
	ct := contentType(r.Header.Get("Content-Type"))
	if ct != duh.ContentTypeJSON && ct != duh.ContentTypeProtoBuf {
		return apierr.New(apierr.BadContent, "invalid Content-Type; '%s', only %s and %s are supported",
			quote(r.Header.Get("Content-Type")), duh.ContentTypeJSON, duh.ContentTypeProtoBuf)
	}
	// The body is read into a pooled buffer that grows as bytes arrive
	// (readBody): protobuf decoding copies what it keeps (bytes fields
	// included), so the buffer is reused once m is decoded.
	// The pipeline admitted the body (budget.admit): its reader refuses
	// more than MaxRequestBytes.
	buf, err := readBody(r.Body, r.ContentLength)
	defer putBuffer(buf)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return apierr.New(apierr.RequestTimeout, "request timeout; the body did not arrive within the body read timeout of %s "+
			"(%d of %s bytes received)", h.cfg.BodyReadTimeout, buf.Len(), contentLength(r))
	}
	if e, ok := apierr.As(err); ok {
		return e // refused by admission: too large, or over the in-flight budget
	}
	if err != nil {
		return apierr.New(apierr.BadContent, "invalid request body; %v", err)
	}
	// Not fatal: a deadline left in place can only cancel this request
	// later (499), which failing it now would not improve.
	if err := http.NewResponseController(w).SetReadDeadline(time.Time{}); err != nil && !errors.Is(err, http.ErrNotSupported) {
		h.cfg.Log.Warn("lift the body read deadline", "path", r.URL.Path, "error", err)
	}
	body := buf.Bytes()
	if ct == duh.ContentTypeJSON {
		if err := checkListsJSON(body, m.ProtoReflect().Descriptor()); err != nil {
			return err
		}
		err = protojson.Unmarshal(body, m)
	} else {
		if err := checkListsProto(body, m.ProtoReflect().Descriptor()); err != nil {
			return err
		}
		err = proto.Unmarshal(body, m)
	}
	if err != nil {
		return apierr.New(apierr.BadContent, "invalid request body; %s", strings.ReplaceAll(err.Error(), "\u00a0", " "))
	}
	settleDecoded(r, m)
	return nil
}

// settleDecoded lowers the budget charge of r's body, once decoded into m,
// to what m holds until the call is answered (its copy, and the store's
// batch of it: twice its encoded size): a long poll's or a padded body's
// charge falls to a few bytes. Bodies under minSettle keep theirs.
func settleDecoded(r *http.Request, m proto.Message) {
	a, ok := r.Body.(*admittedBody)
	if !ok || a.read < minSettle {
		return
	}
	a.settle((RequestCost - 1) * int64(proto.Size(m)))
}

// minSettle is the smallest body whose charge is settled once decoded.
const minSettle = 64 << 10

// contentLength is the request's Content-Length for a message, "unknown"
// when it sent none.
func contentLength(r *http.Request) string {
	if r.ContentLength < 0 {
		return "unknown"
	}
	return strconv.FormatInt(r.ContentLength, 10)
}

// reply writes m in the encoding the client asked for by Accept, or, when
// Accept is absent, in the request's own content type (Querator's client
// sends protobuf without Accept and parses JSON strictly).
func (h *Handler) reply(w http.ResponseWriter, r *http.Request, code int, m proto.Message) {
	accept := contentType(r.Header.Get("Accept"))
	switch accept {
	case "", "*/*", "application/*":
		accept = contentType(r.Header.Get("Content-Type"))
		if accept != duh.ContentTypeProtoBuf {
			accept = duh.ContentTypeJSON
		}
	}
	var b []byte
	var err error
	switch accept {
	case duh.ContentTypeJSON:
		b, err = protojson.Marshal(m)
	case duh.ContentTypeProtoBuf:
		// Marshalled into a pooled buffer: w.Write copies it.
		buf := getBuffer(proto.Size(m))
		defer putBuffer(buf)
		b, err = proto.MarshalOptions{}.MarshalAppend(buf.AvailableBuffer(), m)
	default:
		accept, code = duh.ContentTypeJSON, int(apierr.BadContent)
		b, err = protojson.Marshal(errorReply(errclass.Of(apierr.New(apierr.BadContent, "invalid Accept; '%s', only %s and %s are supported",
			quote(r.Header.Get("Accept")), duh.ContentTypeJSON, duh.ContentTypeProtoBuf))))
	}
	if err != nil {
		h.cfg.Log.Error("encode reply", "path", r.URL.Path, "error", err)
		code, accept = http.StatusInternalServerError, duh.ContentTypeJSON
		b = []byte(internalReplyJSON)
	}
	w.Header().Set("Content-Type", accept)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	_, _ = w.Write(b)
}

// queuesOf returns the queues a request names: its queue, the dead-letter
// queue or redrive destination it would send items to, and the source
// queue its dead filter selects by (dead.list, dead.groups, dead.delete,
// dead.redrive: the counts would tell whether a queue the key does not
// cover sends dead items there; internal/auth/hidden.go).
func queuesOf(req proto.Message) []string {
	var out []string
	if m, ok := req.(interface{ GetQueueName() string }); ok {
		out = append(out, m.GetQueueName())
	}
	if m, ok := req.(interface{ GetDeadQueue() string }); ok {
		out = append(out, m.GetDeadQueue())
	}
	if m, ok := req.(interface{ GetDestination() string }); ok {
		out = append(out, m.GetDestination())
	}
	if m, ok := req.(interface{ GetFilter() *pb.DeadFilter }); ok {
		out = append(out, m.GetFilter().GetSourceQueue())
	}
	if m, ok := req.(*pb.StorageItemsImportRequest); ok {
		// A dead item names its source queue, where a redrive sends it: a
		// key may not name a queue it does not cover (issue 24).
		for _, it := range m.Items {
			out = append(out, it.GetSourceQueue())
		}
	}
	return out
}

// auditAttrs records in rec what a successful call did: its queue, and
// what the reply says it did; the pipeline decides whether it is logged
// (audit.Audited).
func auditAttrs(rec *audit.Record, req, resp proto.Message) {
	if rec == nil || !audit.Audited(rec.Op) {
		return
	}
	if q := queuesOf(req); len(q) > 0 && q[0] != "" {
		rec.SetQueue(q[0])
	}
	if m, ok := req.(*pb.StorageItemsImportRequest); ok {
		rec.Add("items", len(m.Items))
	}
	switch m := resp.(type) {
	case *pb.DeadDeleteResponse:
		rec.Add("deleted", m.Deleted)
	case *pb.QueuesMoveResponse:
		rec.Add("from_cluster", m.FromCluster, "to_cluster", m.ToCluster, "items", m.ItemsMoved, "epoch", m.Epoch)
	case *pb.StorageItem:
		rec.Add("item", m.Id, "payload_bytes", len(m.Payload))
	case *pb.RedriveTask:
		// redrives.* name the task only: its dead-letter queue is the
		// task's.
		rec.SetQueue(m.QueueName)
		rec.Add("task", m.TaskId, "matched", m.Matched)
		if m.Destination != "" {
			rec.Add("destination", m.Destination)
		}
		rec.Add("dry_run", m.DryRun)
		rec.DryRun = m.DryRun
	}
}

func contentType(h string) string {
	if h == "" {
		return ""
	}
	mt, _, err := mime.ParseMediaType(h)
	if err != nil {
		return strings.ToLower(strings.TrimSpace(duh.TrimSuffix(h, ";,")))
	}
	return mt
}

func quote(s string) string {
	if len(s) > 64 {
		s = s[:64] + "…"
	}
	return strings.ToValidUTF8(s, "?")
}

// statusWriter records the status code for metrics, and counts the
// answer's bytes against its holder's share of the in-flight budget while
// they are written (an answer to a slow reader holds its buffer until the
// client takes it). They are counted whatever the limits say, as they are
// held already: while big answers are being written, new bodies are
// refused rather than the server's memory growing.
type statusWriter struct {
	http.ResponseWriter
	code int
	// budget and holder: whom the answer's bytes are charged to (the
	// request's key once authenticated, else its client's address). Owned
	// by the request's goroutine.
	budget *budget
	holder string
	// beforeAnswer, when set, is called once with the answer's status
	// code before its first byte is written (the pipeline stores the
	// call's activity record there: pipeline.go, recordActivity). Owned by
	// the request's goroutine.
	beforeAnswer func(code int)
}

// answer calls beforeAnswer once, with code.
func (s *statusWriter) answer(code int) {
	if f := s.beforeAnswer; f != nil {
		s.beforeAnswer = nil
		f(code)
	}
}

// Write writes p, charged to the budget while it is written when it is
// at least minChargedWrite bytes.
func (s *statusWriter) Write(p []byte) (int, error) {
	s.answer(s.code)
	if s.budget == nil || len(p) < minChargedWrite {
		return s.ResponseWriter.Write(p)
	}
	n := int64(len(p))
	_ = s.budget.charge(s.holder, n, false, true)
	defer s.budget.uncharge(s.holder, n, false)
	return s.ResponseWriter.Write(p)
}

func (s *statusWriter) WriteHeader(code int) {
	s.code = code
	s.answer(code)
	s.ResponseWriter.WriteHeader(code)
}

// Unwrap returns the wrapped writer, for http.ResponseController.
func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

package transport

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	duh "github.com/duh-rpc/duh-go"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/styxq/styx/internal/apierr"
	"github.com/styxq/styx/internal/audit"
	"github.com/styxq/styx/internal/auth"
	"github.com/styxq/styx/sqs"
)

// door is the front door a request is routed to, by its path alone.
type door int

const (
	doorUnknown door = iota
	doorHealth
	doorMetrics
	doorV1
	doorSQS
	doorUI
	doorHome // GET / from a browser: redirected to the UI
)

// route picks a request's door by its path first (never by a header alone:
// an SQS header on /health is not SQS): /health, /metrics, /v1/…, /ui…,
// and the SQS API at / and at queue-URL paths (/<account id>/<queue>) when
// the request is an SQS one (sqs.Is).
func (h *Handler) route(r *http.Request) door {
	p := r.URL.Path
	switch {
	case p == "/health" || p == "/livez" || p == "/readyz":
		return doorHealth
	case p == "/metrics":
		return doorMetrics
	case strings.HasPrefix(p, "/v1/"):
		return doorV1
	case h.cfg.UI != nil && auth.Public(p):
		return doorUI
	case h.cfg.SQS != nil && sqs.Path(p) && sqs.Is(r):
		return doorSQS
	case p == "/" && (r.Method == http.MethodGet || r.Method == http.MethodHead):
		return doorHome
	}
	return doorUnknown
}

// ServeHTTP is the one request pipeline of every route. In order, each in
// one place: route by path; the Host and Origin checks and the cross-site
// refusal of a server without auth (checkHost, checkCrossSite);
// authentication, bearer key or SigV4, before the body is read; admission
// of the body against the in-flight byte budget; the door (/v1, SQS, the
// UI's assets, /health, /metrics); the activity record of a successful
// audited call, before its answer leaves (recordActivity); then the audit
// log, the refusal log and the request metrics.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	d := h.route(r)
	sw := &statusWriter{ResponseWriter: w, code: http.StatusOK, budget: h.budget, holder: clientAddress(r)}
	ctx, rec := audit.With(r.Context(), d.String())
	r = r.WithContext(ctx)
	sw.beforeAnswer = func(code int) { h.recordActivity(ctx, rec, code) }
	fail := func(err error) { h.failAt(d, sw, r, err) }
	// The body must arrive within BodyReadTimeout; a door lifts the
	// deadline once it has (net/http's background read would otherwise
	// cancel a long poll's context when it passes). A request answered
	// before its body is read keeps the deadline, which bounds net/http's
	// discarding of the unread body too.
	_ = http.NewResponseController(sw).SetReadDeadline(start.Add(h.cfg.BodyReadTimeout))
	defer func() {
		sw.answer(sw.code) // a call answered with no byte
		h.finish(r, rec, sw.code)
		if path, counted := h.metricPath(d, r, rec); counted {
			h.cfg.Metrics.Requests.WithLabelValues(path, strconv.Itoa(sw.code)).Inc()
			h.cfg.Metrics.RequestSeconds.WithLabelValues(path).Observe(time.Since(start).Seconds())
		}
	}()
	if !h.cfg.Auth {
		if err := h.checkHost(r, d); err != nil {
			fail(err)
			return
		}
		if err := checkCrossSite(r, d); err != nil {
			fail(err)
			return
		}
	}
	switch d {
	case doorHealth:
		h.serveHealth(sw, r)
	case doorMetrics:
		if r.Method != http.MethodGet {
			fail(apierr.Invalidf("invalid method; %s %s, only GET is allowed", r.Method, r.URL.Path))
			return
		}
		if _, err := h.authenticate(r, "/metrics"); err != nil {
			fail(err)
			return
		}
		promhttp.HandlerFor(h.cfg.Metrics.Registry, promhttp.HandlerOpts{}).ServeHTTP(sw, r)
	case doorUI:
		h.cfg.UI.ServeHTTP(sw, r)
	case doorHome:
		h.serveHome(sw, r)
	case doorV1:
		h.serveV1(sw, r, rec, fail)
	case doorSQS:
		h.serveSQS(sw, r, rec, fail)
	default:
		fail(&apierr.Error{Code: duh.CodeNotImplemented, Message: fmt.Sprintf("no such method; %s", quote(r.URL.Path))})
	}
}

// metricPath is the path a request is counted under in the request
// metrics: a /v1 call's path, "/sqs/<Action>" ("/sqs/unknown" for an
// unknown action); the rest (probes, metrics, the UI, unknown paths) are
// not counted.
func (h *Handler) metricPath(d door, r *http.Request, rec *audit.Record) (string, bool) {
	switch d {
	case doorV1:
		_, known := h.routes[r.URL.Path]
		return r.URL.Path, known
	case doorSQS:
		if h.cfg.SQS.Known(rec.Action) {
			return "/sqs/" + rec.Action, true
		}
		return "/sqs/unknown", true
	}
	return "", false
}

func (d door) String() string {
	switch d {
	case doorV1:
		return "v1"
	case doorSQS:
		return "sqs"
	case doorHealth:
		return "health"
	case doorMetrics:
		return "metrics"
	case doorUI, doorHome:
		return "ui"
	}
	return "unknown"
}

// serveV1 serves a /v1 call: the key and its scope for the path before the
// body is read, the body admitted, then the call (rpc: decode, the queues'
// scope, the service).
func (h *Handler) serveV1(w *statusWriter, r *http.Request, rec *audit.Record, fail func(error)) {
	rec.Op = r.URL.Path
	route, found := h.routes[r.URL.Path]
	if !found {
		fail(&apierr.Error{Code: duh.CodeNotImplemented, Message: fmt.Sprintf("no such method; %s", quote(r.URL.Path))})
		return
	}
	if r.Method != http.MethodPost {
		fail(apierr.Invalidf("invalid method; %s %s, only POST is allowed", r.Method, r.URL.Path))
		return
	}
	p, err := h.authenticate(r, r.URL.Path)
	if err != nil {
		fail(err)
		return
	}
	if p != nil {
		w.holder = keyHolder(p)
	}
	body, err := h.budget.admit(r, w.holder, false, h.cfg.MaxRequestBytes)
	if err != nil {
		fail(err)
		return
	}
	defer body.release()
	ctx := r.Context()
	if p != nil {
		authorization := r.Header.Get("Authorization")
		var stop func()
		ctx, stop = h.admitted(ctx, rec, p, r.URL.Path, func(ctx context.Context) error {
			_, err := h.cfg.Keys.Authenticate(ctx, authorization)
			return err
		})
		defer stop()
	}
	route(w, r.WithContext(ctx))
}

// admitted returns ctx carrying the authenticated principal p of a call of
// op, recorded for the audit log, and, for a long poll (queue.lease and
// SQS's ReceiveMessage), watched so that it ends when its key is deleted
// (watchKey; check re-authenticates the request's credentials). stop ends
// the watch.
func (h *Handler) admitted(ctx context.Context, rec *audit.Record, p *auth.Principal, op string,
	check func(context.Context) error) (_ context.Context, stop func()) {
	rec.Key = p.Name
	ctx = auth.WithPrincipal(ctx, p)
	if op != "/v1/queue.lease" {
		return ctx, func() {}
	}
	return h.watchKey(ctx, p.Name, check)
}

// serveSQS serves an SQS call: with auth, the SigV4 header checked and its
// key found before the body is read; the body admitted and read; the
// signature verified over it; the action's scope; then the SQS door.
func (h *Handler) serveSQS(w *statusWriter, r *http.Request, rec *audit.Record, fail func(error)) {
	sw := w
	var sig *auth.SigV4
	var p *auth.Principal // the key, once its signature is verified
	if h.cfg.Auth {
		var err error
		sig, err = h.cfg.Keys.ParseSigV4(r.Context(), r, auth.SigV4Params{Region: h.cfg.SQS.Region(), Service: "sqs", Now: time.Now()})
		if err != nil {
			fail(err)
			return
		}
		var signed bool
		if p, signed, err = sig.VerifyHeaders(); err != nil {
			fail(err)
			return
		} else if signed {
			sw.holder = keyHolder(p)
		}
	}
	// A body whose signature can be checked only over it is charged to
	// its client's address, within the small share of a request not yet
	// authenticated, and must arrive sooner.
	pre := sig != nil && p == nil
	if pre {
		sw.holder = preAuthHolder(sw.holder)
		_ = http.NewResponseController(sw).SetReadDeadline(time.Now().Add(min(h.cfg.PreAuthBodyReadTimeout, h.cfg.BodyReadTimeout)))
	}
	admitted, err := h.budget.admit(r, sw.holder, pre, min(h.cfg.MaxRequestBytes, sqs.MaxBodyBytes))
	if err != nil {
		fail(err)
		return
	}
	defer admitted.release()
	body, err := h.readBody(w, r)
	if err != nil {
		fail(err)
		return
	}
	call, err := h.cfg.SQS.Parse(r, body)
	if call != nil {
		rec.Action, rec.Op = call.Action, call.Op
	}
	if err != nil {
		fail(err)
		return
	}
	ctx := r.Context()
	if sig != nil {
		p, err := sig.Verify(body)
		if err != nil {
			fail(err)
			return
		}
		sw.holder = keyHolder(p)
		if err := admitted.authenticated(sw.holder); err != nil {
			fail(err)
			return
		}
		if err := p.Authorize(call.Access()); err != nil {
			fail(err)
			return
		}
		keyID := sig.KeyID()
		var stop func()
		ctx, stop = h.admitted(ctx, rec, p, call.Op, func(ctx context.Context) error {
			_, _, err := h.cfg.Keys.SigV4Secret(ctx, keyID)
			return err
		})
		defer stop()
	}
	if call.Action == "ReceiveMessage" {
		// A long poll holds its body (a few bytes of parameters), not
		// what its Content-Length said, while it waits.
		admitted.settle(int64(len(body)))
	}
	h.cfg.SQS.Serve(w, r.WithContext(ctx), call)
}

// keyHolder is the holder of the budget charges of the requests of key p.
func keyHolder(p *auth.Principal) string { return "key " + p.Name }

// readBody reads an admitted body whole (the SQS door's bodies are small
// JSON or forms) and lifts the body-read deadline.
func (h *Handler) readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	body, err := io.ReadAll(r.Body)
	if isOverBudget(err) {
		return nil, err
	}
	if e, ok := apierr.As(err); ok {
		return nil, e
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return nil, apierr.New(apierr.RequestTimeout, "request timeout; the body did not arrive within the body read timeout of %s", h.cfg.BodyReadTimeout)
	}
	if err != nil {
		return nil, apierr.New(apierr.BadContent, "invalid request body; %v", err)
	}
	_ = http.NewResponseController(w).SetReadDeadline(time.Time{})
	return body, nil
}

// failAt answers err in the wire format of the door d (SQS errors for the
// SQS API, DUH-RPC replies for the rest), recording a refusal's reason.
func (h *Handler) failAt(d door, w http.ResponseWriter, r *http.Request, err error) {
	if d == doorSQS {
		if isOverBudget(err) {
			w.Header().Set("Retry-After", "1")
		}
		h.cfg.SQS.Fail(w, r, err)
		return
	}
	h.fail(w, r, err)
}

// finish writes the audit line of a successful audited call and the
// refusal line of a call refused 401 or 403, whichever door it came
// through.
func (h *Handler) finish(r *http.Request, rec *audit.Record, code int) {
	switch {
	case code == http.StatusUnauthorized || code == http.StatusForbidden:
		h.logRefused(r, rec, code)
	case code < 300 && audit.Audited(rec.Op):
		attrs := []any{"path", rec.Op, "key", rec.Key}
		if rec.Queue != "" {
			attrs = append(attrs, "queue", rec.Queue)
		}
		attrs = append(attrs, rec.Attrs...)
		attrs = append(attrs, "door", rec.Door)
		if rec.Action != "" {
			attrs = append(attrs, "action", rec.Action)
		}
		h.cfg.Log.Info("audit: "+strings.TrimPrefix(rec.Op, "/v1/"), attrs...)
	}
}

// recordActivity stores the activity record of a successful audited call
// (internal/activity), once the door has done the call and before its
// answer (code) leaves, so that a client reading the log after its answer
// finds the call. A record that cannot be stored is logged and counted by
// the log itself; the call is answered as the door answered it.
func (h *Handler) recordActivity(ctx context.Context, rec *audit.Record, code int) {
	if h.cfg.Activity != nil && code < 300 && audit.Audited(rec.Op) && !rec.DryRun {
		h.cfg.Activity.Write(ctx, rec)
	}
}

// logRefused logs a request refused 401 or 403 at WARN, with the key's id
// (never its secret) and the client's address: at most 10 lines at once and
// one a second after, the lines left out counted in the next (anyone can
// send refused requests).
func (h *Handler) logRefused(r *http.Request, rec *audit.Record, code int) {
	if !h.refusals.Allow() {
		h.refusalsDropped.Add(1)
		return
	}
	attrs := []any{"path", r.URL.Path, "code", code, "remote", r.RemoteAddr, "reason", rec.Reason, "door", rec.Door}
	if rec.Action != "" {
		attrs = append(attrs, "action", rec.Action)
	}
	if token, err := auth.ParseAuthorization(r.Header.Get("Authorization")); err == nil {
		if id, ok := auth.KeyID(token); ok {
			attrs = append(attrs, "key_id", id)
		}
	} else if auth.IsSigV4(r) {
		_, rest, _ := strings.Cut(r.Header.Get("Authorization"), "Credential=")
		id, _, _ := strings.Cut(rest, "/")
		attrs = append(attrs, "key_id", quote(id))
	}
	if n := h.refusalsDropped.Swap(0); n > 0 {
		attrs = append(attrs, "suppressed", n)
	}
	h.cfg.Log.Warn("request refused", attrs...)
}

// serveHome answers GET /: a browser is redirected to the console (when
// served); any other client gets a short JSON pointer to what is served
// here, rather than an unknown method's 501 (issue 39).
func (h *Handler) serveHome(w http.ResponseWriter, r *http.Request) {
	if h.cfg.UI != nil && strings.Contains(r.Header.Get("Accept"), "text/html") {
		http.Redirect(w, r, "/ui/", http.StatusFound)
		return
	}
	home := map[string]string{"service": "styx", "api": "POST /v1/<resource>.<verb> (docs/wire-contract.md)",
		"health": "GET /health, /readyz, /livez", "metrics": "GET /metrics"}
	if h.cfg.UI != nil {
		home["console"] = "/ui/"
	}
	if h.cfg.SQS != nil {
		home["sqs"] = "the Amazon SQS API (JSON and query protocols) at /"
	}
	b, _ := json.Marshal(home)
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(append(b, '\n'))
}

// serveHealth answers the probes, by status code and with the reason in
// the body: GET /health and GET /readyz answer 200 {"status":"ok"} when the
// server takes writes, and 503 {"status":"degraded: <why>"} when it refuses
// them (storage read-only or full, PostgreSQL unreachable or read-only):
// what a load balancer or a readiness probe should act on. GET /livez
// answers 200 while the process serves requests, degraded or not (reads
// are still served; a restart would not help), with the same status text.
// On several PostgreSQL clusters (Config.Degraded, Config.Clusters; ADR
// 0023), one cluster down is 200 {"status":"degraded: cluster 'X': …"}
// and the answer lists every cluster's state under "clusters".
func (h *Handler) serveHealth(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		h.fail(w, r, apierr.Invalidf("invalid method; %s %s, only GET is allowed", r.Method, r.URL.Path))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	status, code := "ok", http.StatusOK
	if h.cfg.Health != nil {
		if why := h.cfg.Health(); why != "" {
			status = "degraded: " + why
			if r.URL.Path != "/livez" {
				code = http.StatusServiceUnavailable
			}
		}
	}
	if h.cfg.Degraded != nil && code == http.StatusOK && status == "ok" {
		if why := h.cfg.Degraded(); why != "" {
			status = "degraded: " + why // some storage serves: 200
		}
	}
	answer := map[string]any{"status": status}
	if h.cfg.Clusters != nil {
		states := map[string]string{}
		for name, why := range h.cfg.Clusters() {
			if why == "" {
				why = "ok"
			}
			states[name] = why
		}
		answer["clusters"] = states
	}
	b, _ := json.Marshal(answer)
	w.WriteHeader(code)
	_, _ = w.Write(append(b, '\n'))
}

// checkHost refuses a request of a server without auth whose Host is
// neither a loopback name nor one of AllowedHosts (DNS rebinding: a web
// page the operator visits could otherwise drive the server through a name
// that resolves to 127.0.0.1), or whose Origin, when sent, is not the
// server's own origin (scheme, host and port) or an allowed host's. "null"
// is a foreign origin. GET /health is the one exception to the Host rule
// (a probe names the server by its address, and the answer holds nothing),
// not to the Origin rule (and so are /livez and /readyz).
func (h *Handler) checkHost(r *http.Request, d door) error {
	if d != doorHealth && !h.allowedHost(r.Host) {
		return apierr.New(apierr.Forbidden, "forbidden; Host '%s' is not a loopback name and the server runs without --auth "+
			"(a defence against DNS rebinding): call it as localhost or 127.0.0.1, or allow the name with --allowed-host %s",
			quote(r.Host), quote(hostOnly(r.Host)))
	}
	origin := r.Header.Get("Origin")
	if origin == "" {
		return nil
	}
	if !h.sameOrigin(r, origin) {
		return apierr.New(apierr.Forbidden, "forbidden; a page from '%s' may not call this server, which runs without --auth "+
			"(only its own origin, %s, may): allow its host with --allowed-host, or start the server with --auth",
			quote(origin), ownOrigin(r))
	}
	return nil
}

// sameOrigin reports whether origin is r's own origin (scheme, host and
// port), or an origin on one of AllowedHosts.
func (h *Handler) sameOrigin(r *http.Request, origin string) bool {
	if origin == "null" {
		return false
	}
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" || u.Path != "" || u.User != nil {
		return false
	}
	if strings.EqualFold(origin, ownOrigin(r)) || strings.EqualFold(u.Scheme+"://"+withPort(u.Host, u.Scheme), ownOrigin(r)) {
		return true
	}
	host := hostOnly(u.Host)
	for _, a := range h.cfg.AllowedHosts {
		if strings.EqualFold(a, host) {
			return true
		}
	}
	return false
}

// ownOrigin is the origin a browser sends for a page served by this server
// under r's Host: scheme://host[:port], the port left out when it is the
// scheme's default.
func ownOrigin(r *http.Request) string {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + withPort(r.Host, scheme)
}

// withPort drops a scheme's default port from host[:port], as browsers do
// in Origin.
func withPort(hostport, scheme string) string {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return hostport
	}
	if scheme == "http" && port == "80" || scheme == "https" && port == "443" {
		if strings.Contains(host, ":") {
			return "[" + host + "]"
		}
		return host
	}
	return hostport
}

// checkCrossSite refuses, on a server without auth, a call that a browser
// could send from another site without asking (a CORS "simple request":
// no preflight, so no chance to refuse it before it acts): a browser that
// says so (Sec-Fetch-Site other than same-origin or none), and, on the
// SQS door, a query-protocol call (a GET or a form POST) that carries no
// Authorization header, which a page cannot add. /v1 calls need a JSON or
// protobuf body, which a browser sends only after a preflight this server
// never grants. GET /health, /metrics and the UI's assets read nothing a
// page could use (the Host check covers rebinding).
func checkCrossSite(r *http.Request, d door) error {
	if d == doorHealth || d == doorUI || d == doorHome || d == doorMetrics {
		return nil
	}
	how := "call it from a program (AWS SDKs sign every request, which a web page cannot), or start the server with --auth"
	switch site := r.Header.Get("Sec-Fetch-Site"); site {
	case "", "same-origin", "none":
	default:
		return apierr.New(apierr.Forbidden, "forbidden; a browser call from another site (Sec-Fetch-Site: %s) to a server without --auth: %s",
			quote(site), how)
	}
	if d == doorSQS && r.Header.Get("Authorization") == "" && !strings.HasPrefix(r.Header.Get("X-Amz-Target"), sqs.TargetPrefix) {
		return apierr.New(apierr.Forbidden, "forbidden; an unsigned SQS query-protocol call (a GET or a form POST, which any web page can send "+
			"to a server without --auth): sign it (AWS SigV4; any credentials do without --auth), %s", how)
	}
	return nil
}

// authenticate returns the principal of a bearer-key request, nil when
// auth is off, or an apierr (401 without a valid key, 403 when the key
// lacks the scope of op).
func (h *Handler) authenticate(r *http.Request, op string) (*auth.Principal, error) {
	if !h.cfg.Auth {
		return nil, nil
	}
	p, err := h.cfg.Keys.Authenticate(r.Context(), r.Header.Get("Authorization"))
	if err != nil {
		return nil, err
	}
	if err := p.Authorize(auth.Access{Op: op}); err != nil {
		return nil, err
	}
	return p, nil
}

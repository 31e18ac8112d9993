package sqs

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/styxq/styx/internal/auth"
)

// maxSignatureSkew is how far a request's X-Amz-Date may be from the
// server's clock, either way, as AWS allows.
const maxSignatureSkew = 15 * time.Minute

// actionPaths maps each action onto the /v1 call whose scope and queue
// rules it follows with --auth (internal/auth): sending is produce;
// receiving, deleting and visibility changes are consume; reading a queue
// is read; administering one is admin; move tasks are dead.
var actionPaths = map[string]string{
	"SendMessage":                  "/v1/queue.produce",
	"SendMessageBatch":             "/v1/queue.produce",
	"ReceiveMessage":               "/v1/queue.lease",
	"DeleteMessage":                "/v1/queue.complete",
	"DeleteMessageBatch":           "/v1/queue.complete",
	"ChangeMessageVisibility":      "/v1/queue.renew",
	"ChangeMessageVisibilityBatch": "/v1/queue.renew",
	"GetQueueUrl":                  "/v1/queues.info",
	"GetQueueAttributes":           "/v1/queues.info",
	"ListQueues":                   "/v1/queues.list",
	"ListDeadLetterSourceQueues":   "/v1/queues.info",
	"ListQueueTags":                "/v1/queues.info",
	"CreateQueue":                  "/v1/queues.create",
	"DeleteQueue":                  "/v1/queues.delete",
	"SetQueueAttributes":           "/v1/queues.update",
	"TagQueue":                     "/v1/queues.update",
	"UntagQueue":                   "/v1/queues.update",
	"PurgeQueue":                   "/v1/queue.clear",
	"StartMessageMoveTask":         "/v1/dead.redrive",
	"ListMessageMoveTasks":         "/v1/redrives.list",
	"CancelMessageMoveTask":        "/v1/redrives.cancel",
}

type pathKey struct{}

// keyIDKey holds the access key id of an authenticated request.
type keyIDKey struct{}

// accessKeyID is the access key id of r's SigV4 Authorization header.
func accessKeyID(r *http.Request) string {
	_, rest, _ := strings.Cut(r.Header.Get("Authorization"), "Credential=")
	id, _, _ := strings.Cut(rest, "/")
	return id
}

// allow checks the request's key (none without --auth) against the scope
// of the action's /v1 call and the queues named, before anything is looked
// up (so the answer never tells whether a queue exists).
func (h *Handler) allow(ctx context.Context, queues ...string) error {
	p := auth.FromContext(ctx)
	if p == nil {
		return nil
	}
	path, _ := ctx.Value(pathKey{}).(string)
	if path == "" {
		path = "/v1/queues.create" // an action without a mapping needs admin
	}
	return p.Check(path, queues...)
}

// covers reports whether the request's key covers queue (always without
// --auth): listings show only the queues a key covers, as queues.list.
func covers(ctx context.Context, queue string) bool {
	p := auth.FromContext(ctx)
	return p == nil || p.Covers(queue)
}

func authError(typ, format string, args ...any) *Error {
	e := invalidParameter(format, args...)
	e.Type, e.Status = typ, http.StatusForbidden
	return e
}

// authenticate verifies the request's AWS Signature Version 4 (the
// Authorization header form) with the secret of the Styx key its access
// key id names, and returns the key's principal.
func (h *Handler) authenticate(ctx context.Context, r *http.Request, body []byte) (*auth.Principal, error) {
	header := r.Header.Get("Authorization")
	if header == "" {
		if r.URL.Query().Get("X-Amz-Signature") != "" {
			return nil, authError("InvalidSecurity", "presigned (query string) signatures are not supported; sign the Authorization header")
		}
		return nil, authError("MissingAuthenticationToken", "Request is missing Authentication Token: this Styx server runs with --auth; sign requests (AWS SigV4) with a Styx key: access key id = the key's id, secret = the whole key")
	}
	alg, rest, _ := strings.Cut(header, " ")
	if alg != "AWS4-HMAC-SHA256" {
		return nil, authError("IncompleteSignature", "the Authorization header must use AWS4-HMAC-SHA256, not '%s'", clip(alg))
	}
	fields := map[string]string{}
	for _, f := range strings.Split(rest, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(f), "=")
		fields[k] = v
	}
	cred := strings.Split(fields["Credential"], "/")
	signed, sig := fields["SignedHeaders"], fields["Signature"]
	if len(cred) != 5 || cred[4] != "aws4_request" || signed == "" || sig == "" {
		return nil, authError("IncompleteSignature", "the Authorization header needs Credential=<key id>/<date>/<region>/<service>/aws4_request, SignedHeaders and Signature")
	}
	keyID, date, region, service := cred[0], cred[1], cred[2], cred[3]
	amzDate := r.Header.Get("X-Amz-Date")
	at, err := time.Parse("20060102T150405Z", amzDate)
	if err != nil || !strings.HasPrefix(amzDate, date) {
		return nil, authError("IncompleteSignature", "the X-Amz-Date header must hold the signing time (yyyymmddThhmmssZ) of the credential's date")
	}
	if d := h.now().Sub(at); d > maxSignatureSkew || d < -maxSignatureSkew {
		return nil, authError("RequestExpired", "Signature expired: %s is more than %s from the server's time", amzDate, maxSignatureSkew)
	}
	names := strings.Split(signed, ";")
	if !slices.Contains(names, "host") || !slices.IsSorted(names) {
		return nil, authError("IncompleteSignature", "SignedHeaders must be sorted and include host")
	}
	payload := sha256.Sum256(body)
	payloadHash := hex.EncodeToString(payload[:])
	if claimed := r.Header.Get("X-Amz-Content-Sha256"); claimed != "" && claimed != payloadHash {
		return nil, authError("SignatureDoesNotMatch", "X-Amz-Content-Sha256 does not match the request body")
	}
	secret, p, err := h.cfg.Keys.SigV4Secret(ctx, keyID)
	if err != nil {
		if e, internal := toError(err); !internal && e.Status < 500 {
			return nil, authError("InvalidClientTokenId", "The security token included in the request is invalid: %s", e.Message)
		}
		return nil, err
	}
	var canonHeaders strings.Builder
	for _, n := range names {
		v := strings.Join(r.Header.Values(n), ",")
		switch n {
		case "host":
			v = r.Host
		case "content-length":
			if v == "" {
				v = strconv.FormatInt(r.ContentLength, 10)
			}
		}
		canonHeaders.WriteString(n + ":" + strings.Join(strings.Fields(v), " ") + "\n")
	}
	key := signingKey(secret, date, region, service)
	scope := date + "/" + region + "/" + service + "/aws4_request"
	uri := r.URL.EscapedPath()
	if uri == "" {
		uri = "/"
	}
	// AWS signs the path escaped once more for every service but S3; a
	// path without '%' is the same either way.
	for _, path := range []string{escapePath(uri), uri} {
		canon := strings.Join([]string{r.Method, path, canonicalQuery(r.URL.Query()), canonHeaders.String(), signed, payloadHash}, "\n")
		ch := sha256.Sum256([]byte(canon))
		toSign := "AWS4-HMAC-SHA256\n" + amzDate + "\n" + scope + "\n" + hex.EncodeToString(ch[:])
		want := hex.EncodeToString(hmacSHA256(key, toSign))
		if hmac.Equal([]byte(want), []byte(sig)) {
			return p, nil
		}
	}
	return nil, authError("SignatureDoesNotMatch", "The request signature we calculated does not match the signature you provided. Check your AWS Secret Access Key (the whole Styx key) and signing method.")
}

func hmacSHA256(key []byte, s string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(s))
	return m.Sum(nil)
}

func signingKey(secret, date, region, service string) []byte {
	k := hmacSHA256([]byte("AWS4"+secret), date)
	k = hmacSHA256(k, region)
	k = hmacSHA256(k, service)
	return hmacSHA256(k, "aws4_request")
}

// awsEscape is AWS's URI encoding: every byte but the unreserved ones
// (A-Z a-z 0-9 - . _ ~) as %XX, uppercase; '/' kept when path.
func awsEscape(s string, path bool) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~' || path && c == '/' {
			b.WriteByte(c)
		} else {
			b.WriteString("%" + strings.ToUpper(hex.EncodeToString([]byte{c})))
		}
	}
	return b.String()
}

func escapePath(p string) string { return awsEscape(p, true) }

func canonicalQuery(q url.Values) string {
	var parts []string
	for k, vs := range q {
		for _, v := range vs {
			parts = append(parts, awsEscape(k, false)+"="+awsEscape(v, false))
		}
	}
	slices.Sort(parts)
	return strings.Join(parts, "&")
}

// clip shortens s for an error message.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

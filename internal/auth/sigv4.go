package auth

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/styxq/styx/internal/apierr"
)

// MaxSignatureSkew is how far a SigV4 request's X-Amz-Date may be from the
// server's clock, either way: AWS's 15 minutes.
const MaxSignatureSkew = 15 * time.Minute

// SigV4Error is a refused AWS Signature Version 4. Code is the error code
// AWS answers for it (MissingAuthenticationToken, IncompleteSignature,
// InvalidClientTokenId, SignatureDoesNotMatch, RequestExpired,
// InvalidSecurity); the SQS API answers it as such (403), /v1 would as
// apierr.Unauthorized (Unwrap).
type SigV4Error struct {
	Code    string
	Message string
}

func (e *SigV4Error) Error() string { return e.Code + ": " + e.Message }

// Unwrap classifies the error as apierr.Unauthorized for anything that
// reads codes, not AWS error names (the refusal log, metrics).
func (e *SigV4Error) Unwrap() error {
	return apierr.New(apierr.Unauthorized, "unauthorized; %s", e.Message)
}

func sigErr(code, format string, args ...any) *SigV4Error {
	return &SigV4Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// IsSigV4 reports whether r carries an AWS Signature Version 4, in its
// Authorization header or presigned in its query string.
func IsSigV4(r *http.Request) bool {
	return strings.HasPrefix(r.Header.Get("Authorization"), "AWS4-HMAC-SHA256") || r.URL.Query().Has("X-Amz-Signature")
}

// SigV4 is a request whose AWS Signature Version 4 header has been checked
// and whose key is known, before its body is read (ParseSigV4); Verify then
// checks the signature over the body. A SigV4 is used by one goroutine.
type SigV4 struct {
	r         *http.Request
	principal *Principal
	keyID     string
	secret    string
	date      string // yyyymmdd, the credential's date
	amzDate   string
	scope     string
	signed    string
	names     []string
	signature string
}

// SigV4Params say what a signature must be bound to.
type SigV4Params struct {
	// Region and Service must be the credential scope's region and service
	// ("us-east-1", "sqs"): a signature made for another region or service
	// is refused, as AWS refuses it.
	Region, Service string
	// Now is the server's time, for the MaxSignatureSkew check.
	Now time.Time
}

// ParseSigV4 checks r's SigV4 Authorization header as AWS does, without its
// body: the algorithm (AWS4-HMAC-SHA256), the credential scope (its date,
// p.Region, p.Service, aws4_request), X-Amz-Date within MaxSignatureSkew,
// SignedHeaders sorted and naming host, x-amz-date and every x-amz-* header
// the request carries (so that x-amz-target, the action, cannot be swapped
// under a signature), and that the access key id names a key with a SigV4
// secret (SigV4Secret). Presigned query-string signatures are refused
// (InvalidSecurity). Returns a *SigV4Error for a refused signature, a
// store failure as is.
func (k *Keys) ParseSigV4(ctx context.Context, r *http.Request, p SigV4Params) (*SigV4, error) {
	header := r.Header.Get("Authorization")
	if header == "" {
		if r.URL.Query().Has("X-Amz-Signature") {
			return nil, sigErr("InvalidSecurity", "presigned (query string) signatures are not supported; sign the Authorization header")
		}
		return nil, sigErr("MissingAuthenticationToken", "Request is missing Authentication Token: this Styx server runs with --auth; "+
			"sign requests (AWS SigV4) with a Styx key: access key id = the key's id, secret = the whole key")
	}
	alg, rest, _ := strings.Cut(header, " ")
	if alg != "AWS4-HMAC-SHA256" {
		return nil, sigErr("IncompleteSignature", "the Authorization header must use AWS4-HMAC-SHA256, not '%s'", clip(alg))
	}
	fields := map[string]string{}
	for _, f := range strings.Split(rest, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(f), "=")
		fields[k] = v
	}
	cred := strings.Split(fields["Credential"], "/")
	s := &SigV4{r: r, signed: fields["SignedHeaders"], signature: fields["Signature"]}
	if len(cred) != 5 || cred[4] != "aws4_request" || s.signed == "" || s.signature == "" {
		return nil, sigErr("IncompleteSignature", "the Authorization header needs Credential=<key id>/<date>/<region>/<service>/aws4_request, SignedHeaders and Signature")
	}
	s.keyID, s.date = cred[0], cred[1]
	if cred[3] != p.Service {
		return nil, sigErr("SignatureDoesNotMatch", "Credential should be scoped to correct service: '%s', not '%s'", p.Service, clip(cred[3]))
	}
	if cred[2] != p.Region {
		return nil, sigErr("SignatureDoesNotMatch", "Credential should be scoped to a valid region: this server's region is '%s', not '%s' "+
			"(configure the SDK's region, or start the server with --sqs-region)", p.Region, clip(cred[2]))
	}
	s.scope = strings.Join(cred[1:], "/")
	s.amzDate = r.Header.Get("X-Amz-Date")
	at, err := time.Parse("20060102T150405Z", s.amzDate)
	if err != nil || !strings.HasPrefix(s.amzDate, s.date) {
		return nil, sigErr("IncompleteSignature", "the X-Amz-Date header must hold the signing time (yyyymmddThhmmssZ) of the credential's date")
	}
	if d := p.Now.Sub(at); d > MaxSignatureSkew || d < -MaxSignatureSkew {
		return nil, sigErr("RequestExpired", "Signature expired: %s is more than %s from the server's time", s.amzDate, MaxSignatureSkew)
	}
	s.names = strings.Split(s.signed, ";")
	if !slices.IsSorted(s.names) {
		return nil, sigErr("IncompleteSignature", "SignedHeaders must be sorted")
	}
	for _, need := range []string{"host", "x-amz-date"} {
		if !slices.Contains(s.names, need) {
			return nil, sigErr("IncompleteSignature", "SignedHeaders must include %s", need)
		}
	}
	for name := range r.Header {
		if n := strings.ToLower(name); strings.HasPrefix(n, "x-amz-") && !slices.Contains(s.names, n) {
			return nil, sigErr("IncompleteSignature", "SignedHeaders must include every x-amz-* header the request carries: %s is not signed", clip(n))
		}
	}
	s.secret, s.principal, err = k.SigV4Secret(ctx, s.keyID)
	if err != nil {
		if e, ok := apierr.As(err); ok && e.Code == apierr.Unauthorized {
			return nil, sigErr("InvalidClientTokenId", "The security token included in the request is invalid: %s", e.Message)
		}
		return nil, err
	}
	return s, nil
}

// KeyID is the access key id the signature names (a Styx key's id, or
// BootstrapName).
func (s *SigV4) KeyID() string { return s.keyID }

// Verify checks the signature over the request and its body and returns
// the key's principal, or a *SigV4Error (SignatureDoesNotMatch).
func (s *SigV4) Verify(body []byte) (*Principal, error) {
	sum := sha256.Sum256(body)
	payloadHash := hex.EncodeToString(sum[:])
	if claimed := s.r.Header.Get("X-Amz-Content-Sha256"); claimed != "" && claimed != payloadHash {
		return nil, sigErr("SignatureDoesNotMatch", "X-Amz-Content-Sha256 does not match the request body")
	}
	return s.verify(payloadHash)
}

// VerifyHeaders checks the signature before the body is read, when the
// request signs the hash of its body (a signed X-Amz-Content-Sha256 header
// of 64 hex digits, as AWS's SigV4 allows for every service): ok is false
// when it does not (only Verify, over the body, can check it then). With
// ok, a nil error means the signature is the key's; Verify must still
// check the body against the signed hash once it has arrived. Issue 48:
// a forged request is then refused before its body costs anything.
func (s *SigV4) VerifyHeaders() (p *Principal, ok bool, err error) {
	claimed := s.r.Header.Get("X-Amz-Content-Sha256")
	if len(claimed) != sha256.Size*2 || !slices.Contains(s.names, "x-amz-content-sha256") {
		return nil, false, nil
	}
	if _, err := hex.DecodeString(claimed); err != nil {
		return nil, false, nil
	}
	p, err = s.verify(strings.ToLower(claimed))
	return p, true, err
}

// verify checks the signature over the request with payloadHash as its
// body's hash.
func (s *SigV4) verify(payloadHash string) (*Principal, error) {
	r := s.r
	var canonHeaders strings.Builder
	for _, n := range s.names {
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
	parts := strings.Split(s.scope, "/")
	key := signingKey(s.secret, parts[0], parts[1], parts[2])
	uri := r.URL.EscapedPath()
	if uri == "" {
		uri = "/"
	}
	// AWS signs the path escaped once more for every service but S3; a
	// path without '%' is the same either way.
	for _, path := range []string{awsEscape(uri, true), uri} {
		canon := strings.Join([]string{r.Method, path, canonicalQuery(r.URL.Query()), canonHeaders.String(), s.signed, payloadHash}, "\n")
		ch := sha256.Sum256([]byte(canon))
		toSign := "AWS4-HMAC-SHA256\n" + s.amzDate + "\n" + s.scope + "\n" + hex.EncodeToString(ch[:])
		want := hex.EncodeToString(hmacSHA256(key, toSign))
		if hmac.Equal([]byte(want), []byte(s.signature)) {
			return s.principal, nil
		}
	}
	return nil, sigErr("SignatureDoesNotMatch", "The request signature we calculated does not match the signature you provided. "+
		"Check your AWS Secret Access Key (the whole Styx key) and signing method.")
}

// IsSigV4Error reports whether err is a refused signature.
func IsSigV4Error(err error) (*SigV4Error, bool) {
	var e *SigV4Error
	ok := errors.As(err, &e)
	return e, ok
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

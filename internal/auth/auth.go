// Package auth is Styx's access control: API keys (generation, hashing,
// storage through store.KeyStore), the parsing of the Authorization header,
// scopes, queue-name patterns, and the one access rule every door calls
// (Authorize, access.go) before it looks anything up (docs/security.md).
//
// A key string is "styx_<id>_<secret>": id is 16 hex digits (64 random bits,
// public, the lookup index), secret 64 hex digits (256 random bits). The
// server stores the key's name, id, scopes, queue patterns and the SHA-256
// hash of the whole key string, never the secret, and compares hashes in
// constant time. Clients send the key as "Authorization: Bearer <key>", as
// Querator's Go client does with ClientConfig.APIKey.
//
// Keys are read from the store on every request (no cache), so a key
// created or deleted on one node of a PostgreSQL cluster takes effect on
// every node at once.
package auth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"

	"github.com/styxq/styx/internal/apierr"
)

// Scope is a permission a key holds. Admin includes every other scope.
type Scope string

// The scopes, and the calls each one allows (see ScopeOf).
const (
	// Produce: queue.produce.
	Produce Scope = "produce"
	// Consume: queue.lease, queue.complete, queue.retry, queue.renew.
	Consume Scope = "consume"
	// Dead: dead.list, dead.delete, dead.edit, dead.redrive, dead.groups,
	// redrives.list, redrives.get, redrives.cancel, redrives.pause,
	// redrives.resume, redrives.update.
	Dead Scope = "dead"
	// Read: queue.stats, queues.info, queues.list, queues.history,
	// activity.list (the records of the queues the key covers),
	// storage/items.list,
	// storage/scheduled.list, queue.clear_dry_run (it counts, as
	// queue.stats does), and /metrics (with no queue patterns).
	Read Scope = "read"
	// Admin: every call, including queue administration (queues.create,
	// queues.update, queues.pause, queues.resume, queues.delete,
	// queues.move,
	// queue.clear, queue.reload,
	// storage/items.import, storage/items.delete) and, on a key without
	// queue patterns, keys.* and storage/backup.
	Admin Scope = "admin"
)

// Scopes lists every scope, in the order docs and errors name them.
var Scopes = []Scope{Produce, Consume, Dead, Read, Admin}

// calls maps each /v1 path onto the scope it needs.
var calls = map[string]Scope{
	"/v1/queue.produce":          Produce,
	"/v1/queue.lease":            Consume,
	"/v1/queue.complete":         Consume,
	"/v1/queue.retry":            Consume,
	"/v1/queue.renew":            Consume,
	"/v1/dead.list":              Dead,
	"/v1/dead.delete":            Dead,
	"/v1/dead.edit":              Dead,
	"/v1/dead.redrive":           Dead,
	"/v1/dead.groups":            Dead,
	"/v1/redrives.list":          Dead,
	"/v1/redrives.get":           Dead,
	"/v1/redrives.cancel":        Dead,
	"/v1/redrives.pause":         Dead,
	"/v1/redrives.resume":        Dead,
	"/v1/redrives.update":        Dead,
	"/v1/queue.stats":            Read,
	"/v1/queues.history":         Read,
	"/v1/activity.list":          Read,
	"/v1/queues.info":            Read,
	"/v1/queues.list":            Read,
	"/v1/storage/items.list":     Read,
	"/v1/storage/scheduled.list": Read,
	"/v1/queue.clear_dry_run":    Read,
	"/v1/queues.create":          Admin,
	"/v1/queues.update":          Admin,
	"/v1/queues.pause":           Admin,
	"/v1/queues.resume":          Admin,
	"/v1/queues.delete":          Admin,
	"/v1/queues.move":            Admin,
	"/v1/queue.clear":            Admin,
	"/v1/queue.reload":           Admin,
	"/v1/storage/items.import":   Admin,
	"/v1/storage/items.delete":   Admin,
	"/v1/storage/backup":         Admin,
	"/v1/keys.create":            Admin,
	"/v1/keys.list":              Admin,
	"/v1/keys.delete":            Admin,
	PathMetrics:                  Read,
}

// PathMetrics is the Prometheus endpoint; it needs Read on a key without
// queue patterns (its series name every queue).
const PathMetrics = "/metrics"

// ScopeOf returns the scope the call at path needs. ok is false for a path
// that is not an API call (transport answers it 501 before asking).
func ScopeOf(path string) (s Scope, ok bool) {
	s, ok = calls[path]
	return s, ok
}

// wholeServer lists the calls whose subject is the whole server rather than
// named queues: a key with queue patterns may not make them.
var wholeServer = map[string]bool{
	"/v1/keys.create": true, "/v1/keys.list": true, "/v1/keys.delete": true, PathMetrics: true,
	"/v1/storage/backup": true, // a backup holds every queue
}

// Public reports whether path is served without a key: /health, and the
// web UI's static assets under /ui/ (the UI's own /v1 calls carry the key
// the user enters, as "Authorization: Bearer <key>").
func Public(path string) bool {
	return path == "/health" || path == "/ui" || strings.HasPrefix(path, "/ui/")
}

// Key-string layout: prefix, id, '_', secret.
const (
	keyPrefix    = "styx_"
	idHexLen     = 16 // 64 bits
	secretHexLen = 64 // 256 bits
	// KeyLen is the length of a key string made by Generate.
	KeyLen = len(keyPrefix) + idHexLen + 1 + secretHexLen
)

// Generate returns a new key string, its id and the hash to store. The
// secret comes from crypto/rand: 256 bits.
func Generate() (key, id string, hash []byte, err error) {
	var b [idHexLen/2 + secretHexLen/2]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", "", nil, fmt.Errorf("auth: generate key: %w", err)
	}
	id = hex.EncodeToString(b[:idHexLen/2])
	key = keyPrefix + id + "_" + hex.EncodeToString(b[idHexLen/2:])
	return key, id, Hash(key), nil
}

// Hash returns the SHA-256 hash of a key string: what the store keeps. A
// fast hash is enough (no bcrypt or argon2): keys carry 256 random bits, so
// a stolen hash cannot be reversed by guessing (docs/security.md).
func Hash(key string) []byte {
	h := sha256.Sum256([]byte(key))
	return h[:]
}

// Equal compares two hashes in constant time.
func Equal(a, b []byte) bool { return subtle.ConstantTimeCompare(a, b) == 1 }

// KeyID returns the id part of a key string made by Generate; ok is false
// when token does not have that layout.
func KeyID(token string) (id string, ok bool) {
	if len(token) != KeyLen || !strings.HasPrefix(token, keyPrefix) || token[len(keyPrefix)+idHexLen] != '_' {
		return "", false
	}
	id = token[len(keyPrefix) : len(keyPrefix)+idHexLen]
	if !isHex(id) || !isHex(token[len(keyPrefix)+idHexLen+1:]) {
		return "", false
	}
	return id, true
}

func isHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// MaxHeaderBytes bounds the Authorization header ParseAuthorization
// accepts.
const MaxHeaderBytes = 1024

// ParseAuthorization returns the token of an "Authorization: Bearer
// <token>" header value (RFC 6750 section 2.1: the scheme is
// case-insensitive, the token is b64token characters: letters, digits and
// -._~+/ with trailing '='). Errors, all apierr.Unauthorized, say what is
// wrong without echoing the value (it may be someone's secret).
func ParseAuthorization(header string) (string, error) {
	if header == "" {
		return "", apierr.New(apierr.Unauthorized, "unauthorized; no API key, send the header 'Authorization: Bearer <key>'")
	}
	if len(header) > MaxHeaderBytes {
		return "", malformed("longer than %d bytes", MaxHeaderBytes)
	}
	scheme, token, _ := strings.Cut(header, " ")
	if !strings.EqualFold(scheme, "Bearer") {
		return "", malformed("the scheme must be Bearer")
	}
	token = strings.TrimLeft(token, " ")
	if token == "" {
		return "", malformed("no key after Bearer")
	}
	end := strings.TrimRight(token, "=")
	if end == "" {
		return "", malformed("the key has characters a bearer token may not hold")
	}
	for i := 0; i < len(end); i++ {
		c := end[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("-._~+/", c) >= 0) {
			return "", malformed("the key has characters a bearer token may not hold")
		}
	}
	return token, nil
}

func malformed(format string, args ...any) error {
	return apierr.New(apierr.Unauthorized, "unauthorized; malformed Authorization header: "+format+"; send 'Authorization: Bearer <key>'", args...)
}

// Principal is the authenticated caller: a key's name and permissions.
// Values are read-only once made.
type Principal struct {
	// Name is the key's name, recorded by audit logs and redrive tasks.
	Name string
	// Scopes are the key's scopes.
	Scopes []Scope
	// Queues are the key's queue-name patterns; empty means every queue.
	Queues []string
}

// Has reports whether p holds scope s (Admin holds every scope).
func (p *Principal) Has(s Scope) bool {
	return slices.Contains(p.Scopes, s) || slices.Contains(p.Scopes, Admin)
}

// Covers reports whether queue matches one of p's patterns (always, with
// none).
func (p *Principal) Covers(queue string) bool {
	if len(p.Queues) == 0 {
		return true
	}
	for _, pat := range p.Queues {
		if Match(pat, queue) {
			return true
		}
	}
	return false
}

// Match reports whether name matches pattern, in which '*' matches any run
// of characters (none included) and every other character itself.
func Match(pattern, name string) bool {
	// Iterative glob with one backtrack point: linear in practice, never
	// exponential.
	p, n := 0, 0
	star, mark := -1, 0
	for n < len(name) {
		switch {
		case p < len(pattern) && pattern[p] == '*':
			star, mark = p, n
			p++
		case p < len(pattern) && pattern[p] == name[n]:
			p++
			n++
		case star >= 0:
			p = star + 1
			mark++
			n = mark
		default:
			return false
		}
	}
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}
	return p == len(pattern)
}

func clip(s string) string {
	if len(s) > 64 {
		s = s[:64] + "…"
	}
	return strings.ToValidUTF8(s, "?")
}

type ctxKey struct{}

// WithPrincipal returns ctx carrying p.
func WithPrincipal(ctx context.Context, p *Principal) context.Context {
	return context.WithValue(ctx, ctxKey{}, p)
}

// FromContext returns the principal of the request, or nil when the server
// runs without --auth.
func FromContext(ctx context.Context) *Principal {
	p, _ := ctx.Value(ctxKey{}).(*Principal)
	return p
}

// KeyName returns the name of the request's key, or "" without --auth:
// what audit records hold.
func KeyName(ctx context.Context) string {
	if p := FromContext(ctx); p != nil {
		return p.Name
	}
	return ""
}

// Allowed reports whether the request's key covers queue (true without
// --auth). Calls that list many queues (queues.list, redrives.list) use it
// to leave out what the key does not cover.
func Allowed(ctx context.Context, queue string) bool {
	p := FromContext(ctx)
	return p == nil || p.Covers(queue)
}

// ErrKeyRevoked ends the waiting requests (long-poll leases and receives)
// of a key deleted while they wait (401), on every door.
var ErrKeyRevoked = apierr.New(apierr.Unauthorized, "unauthorized; the api key was deleted while the request waited")

package auth

import (
	"context"
	"crypto/cipher"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"unicode"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/styxq/styx/internal/apierr"
	"github.com/styxq/styx/internal/clock"
	"github.com/styxq/styx/internal/queue"
	"github.com/styxq/styx/internal/store"
	pb "github.com/styxq/styx/styxpb"
)

// BootstrapName is the name of the admin key read from --admin-key-file.
// No stored key may take it.
const BootstrapName = "bootstrap-admin"

// MinBootstrapKeyBytes is the shortest admin key file content accepted: 32
// characters (e.g. `openssl rand -hex 32` gives 64).
const MinBootstrapKeyBytes = 32

// Limits of keys.create.
const (
	MaxNameBytes    = 128
	MaxPatterns     = 64
	MaxPatternBytes = 512
)

// Config configures Keys.
type Config struct {
	// Store keeps the keys. Required.
	Store store.KeyStore
	// BootstrapKey, when not empty, is an admin key (all scopes, every
	// queue) that is not stored: the content of --admin-key-file. Only its
	// hash is kept in memory.
	BootstrapKey string
	// Clock stamps created_at. Defaults to the system clock.
	Clock clock.Clock
	// Log receives the audit lines of key changes. Defaults to
	// slog.Default().
	Log *slog.Logger
	// SecretKey, when set (SecretKeyBytes long: the content of
	// --secret-key-file), seals each new key string in its record so that
	// the SQS API can verify SigV4 signatures made with it (SigV4Secret;
	// ADR 0016). Nil: keys are stored hashed only and cannot sign SigV4.
	SecretKey []byte
}

// Keys authenticates requests and serves /v1/keys.*. Its methods may be
// called concurrently; it holds no mutable state (every lookup reads the
// store).
type Keys struct {
	store     store.KeyStore
	bootstrap []byte // hash of Config.BootstrapKey; nil for none
	// bootstrapKey is Config.BootstrapKey, the SigV4 secret of the
	// bootstrap admin key (read from its file anyway).
	bootstrapKey string
	sealer       cipher.AEAD // nil without Config.SecretKey
	clock        clock.Clock
	log          *slog.Logger
}

// New returns Keys over cfg.Store.
func New(cfg Config) (*Keys, error) {
	if cfg.Store == nil {
		return nil, errors.New("auth: no key store")
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	k := &Keys{store: cfg.Store, clock: cfg.Clock, log: cfg.Log}
	if cfg.BootstrapKey != "" {
		if err := CheckBootstrapKey(cfg.BootstrapKey); err != nil {
			return nil, err
		}
		k.bootstrap = Hash(cfg.BootstrapKey)
		k.bootstrapKey = cfg.BootstrapKey
	}
	if cfg.SecretKey != nil {
		s, err := newSealer(cfg.SecretKey)
		if err != nil {
			return nil, err
		}
		k.sealer = s
	}
	return k, nil
}

// CheckBootstrapKey returns an error when key cannot serve as the bootstrap
// admin key: shorter than MinBootstrapKeyBytes, or with characters a bearer
// token may not hold.
func CheckBootstrapKey(key string) error {
	if len(key) < MinBootstrapKeyBytes {
		return fmt.Errorf("admin key file: the key is %d characters, at least %d are required (e.g. openssl rand -hex 32)", len(key), MinBootstrapKeyBytes)
	}
	if _, err := ParseAuthorization("Bearer " + key); err != nil {
		return errors.New("admin key file: the key may hold only letters, digits and -._~+/ (then '=' at the end)")
	}
	return nil
}

// Authenticate returns the principal of an Authorization header value.
// Returns apierr.Unauthorized for a missing or malformed header and for a
// key that is unknown (never created, or deleted); a store failure is
// returned as is (453 for a database that is down).
func (k *Keys) Authenticate(ctx context.Context, header string) (*Principal, error) {
	token, err := ParseAuthorization(header)
	if err != nil {
		return nil, err
	}
	h := Hash(token)
	if k.bootstrap != nil && Equal(h, k.bootstrap) {
		return &Principal{Name: BootstrapName, Scopes: []Scope{Admin}}, nil
	}
	id, ok := KeyID(token)
	if !ok {
		return nil, unknownKey()
	}
	rec, err := k.store.GetKey(ctx, id)
	if errors.Is(err, store.ErrKeyNotFound) {
		return nil, unknownKey()
	}
	if err != nil {
		return nil, err
	}
	if !Equal(h, rec.Hash) {
		return nil, unknownKey()
	}
	p := &Principal{Name: rec.Name, Queues: rec.Queues}
	for _, s := range rec.Scopes {
		p.Scopes = append(p.Scopes, Scope(s))
	}
	return p, nil
}

func unknownKey() error {
	return apierr.New(apierr.Unauthorized, "unauthorized; unknown API key (never created, or deleted)")
}

// KeysCreate creates a key and returns its secret (shown only here).
// Returns 400 naming the field for a bad name, scope or pattern, 409 for a
// name in use.
func (k *Keys) KeysCreate(ctx context.Context, req *pb.KeysCreateRequest) (*pb.KeysCreateResponse, error) {
	if err := checkKeyName(req.Name); err != nil {
		return nil, err
	}
	if len(req.Scopes) == 0 {
		return nil, apierr.Invalidf("invalid scopes; at least one of %s is required", scopeList())
	}
	for i, s := range req.Scopes {
		if !slices.Contains(Scopes, Scope(s)) {
			return nil, apierr.Invalidf("invalid scopes[%d]; '%s' is not one of %s", i, clip(s), scopeList())
		}
		if slices.Contains(req.Scopes[:i], s) {
			return nil, apierr.Invalidf("invalid scopes[%d]; '%s' is given twice", i, s)
		}
	}
	if len(req.Queues) > MaxPatterns {
		return nil, apierr.Invalidf("invalid queues; %d patterns, the limit is %d", len(req.Queues), MaxPatterns)
	}
	for i, q := range req.Queues {
		if err := checkPattern(i, q); err != nil {
			return nil, err
		}
	}
	key, id, hash, err := Generate()
	if err != nil {
		return nil, err
	}
	rec := store.KeyRecord{
		Name: req.Name, ID: id, Hash: hash, Scopes: slices.Clone(req.Scopes), Queues: slices.Clone(req.Queues),
		CreatedAt: k.clock.Now().UTC(), CreatedBy: KeyName(ctx),
	}
	if k.sealer != nil {
		if rec.Sealed, err = seal(k.sealer, id, key); err != nil {
			return nil, err
		}
	}
	if err := k.store.CreateKey(ctx, rec); errors.Is(err, store.ErrKeyExists) {
		return nil, apierr.New(apierr.Conflict, "key already exists; a key named '%s' exists", req.Name)
	} else if err != nil {
		return nil, err
	}
	k.log.Info("audit: api key created", "key", KeyName(ctx), "name", rec.Name, "scopes", rec.Scopes, "queues", rec.Queues)
	return &pb.KeysCreateResponse{Key: key, Name: rec.Name, Scopes: rec.Scopes, Queues: rec.Queues, CreatedAt: timestamppb.New(rec.CreatedAt)}, nil
}

// KeysList lists every key without its secret, by name.
func (k *Keys) KeysList(ctx context.Context, _ *pb.KeysListRequest) (*pb.KeysListResponse, error) {
	recs, err := k.store.ListKeys(ctx)
	if err != nil {
		return nil, err
	}
	out := &pb.KeysListResponse{}
	for _, r := range recs {
		out.Keys = append(out.Keys, &pb.ApiKey{Name: r.Name, Scopes: r.Scopes, Queues: r.Queues,
			CreatedAt: timestamppb.New(r.CreatedAt), CreatedBy: r.CreatedBy})
	}
	return out, nil
}

// KeysDelete deletes a key; requests with it are refused (401) from the
// moment this returns, on every node. Returns 404 for an unknown name.
func (k *Keys) KeysDelete(ctx context.Context, req *pb.KeysDeleteRequest) error {
	if err := checkKeyName(req.Name); err != nil {
		return err
	}
	if err := k.store.DeleteKey(ctx, req.Name); errors.Is(err, store.ErrKeyNotFound) {
		return apierr.New(apierr.NotFound, "key does not exist; no key named '%s'", req.Name)
	} else if err != nil {
		return err
	}
	k.log.Info("audit: api key deleted", "key", KeyName(ctx), "name", req.Name)
	return nil
}

func scopeList() string {
	names := make([]string, len(Scopes))
	for i, s := range Scopes {
		names[i] = string(s)
	}
	return strings.Join(names, ", ")
}

// checkKeyName checks a key name: 1..MaxNameBytes of [A-Za-z0-9._-], not
// BootstrapName.
func checkKeyName(name string) error {
	if name == "" || len(name) > MaxNameBytes {
		return apierr.Invalidf("invalid name; '%s' must be 1..%d characters", clip(name), MaxNameBytes)
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return apierr.Invalidf("invalid name; '%s' may hold only letters, digits, '.', '_' and '-'", clip(name))
		}
	}
	if name == BootstrapName {
		return apierr.Invalidf("invalid name; '%s' is reserved for the --admin-key-file key", name)
	}
	return nil
}

// checkPattern checks queues[i]: 1..MaxPatternBytes characters without
// whitespace or '~' (as queue names, plus '*').
func checkPattern(i int, p string) error {
	if p == "" || len(p) > MaxPatternBytes {
		return apierr.Invalidf("invalid queues[%d]; '%s' must be 1..%d characters", i, clip(p), MaxPatternBytes)
	}
	if pos, r, ok := queue.HiddenRune(p); ok {
		return apierr.Invalidf("invalid queues[%d]; %q holds %U at character %d; patterns may not hold control, bidi or zero-width characters", i, clip(p), r, pos)
	}
	if strings.ContainsFunc(p, func(r rune) bool { return unicode.IsSpace(r) || r == '~' }) {
		return apierr.Invalidf("invalid queues[%d]; '%s' may not hold whitespace or '~'", i, clip(p))
	}
	return nil
}

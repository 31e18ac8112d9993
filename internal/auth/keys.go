package auth

import (
	"context"
	"crypto/cipher"
	"errors"
	"fmt"
	"log/slog"
	"slices"

	"github.com/styxq/styx/internal/apierr"
	"github.com/styxq/styx/internal/clock"
	"github.com/styxq/styx/internal/store"
)

// BootstrapName is the name of the admin key read from --admin-key-file.
// No stored key may take it.
const BootstrapName = "bootstrap-admin"

// MinBootstrapKeyBytes is the shortest admin key file content accepted: 32
// characters (e.g. `openssl rand -hex 32` gives 64).
const MinBootstrapKeyBytes = 32

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

// Keys authenticates requests (Authenticate, SigV4Secret) and keeps the
// stored keys (Create, List, Delete: the domain of the keys.* calls, whose
// handlers are in package service). Its methods may be called concurrently; it holds no mutable state (every lookup reads the
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

// Create stores a new key named name with scopes and queue patterns,
// created by the request's key (KeyName(ctx)) at the clock's now, and
// returns its key string (in clear only here: the store keeps its hash and,
// with Config.SecretKey, its sealed form) and its record. It checks none of
// its inputs: the keys.create handler (service.KeysCreate) validates the
// request first. Returns store.ErrKeyExists for a name in use; a store
// failure as is. The change is logged as an audit line.
func (k *Keys) Create(ctx context.Context, name string, scopes, queues []string) (string, store.KeyRecord, error) {
	key, id, hash, err := Generate()
	if err != nil {
		return "", store.KeyRecord{}, err
	}
	rec := store.KeyRecord{
		Name: name, ID: id, Hash: hash, Scopes: slices.Clone(scopes), Queues: slices.Clone(queues),
		CreatedAt: k.clock.Now().UTC(), CreatedBy: KeyName(ctx),
	}
	if k.sealer != nil {
		if rec.Sealed, err = seal(k.sealer, id, key); err != nil {
			return "", store.KeyRecord{}, err
		}
	}
	if err := k.store.CreateKey(ctx, rec); err != nil {
		return "", store.KeyRecord{}, err
	}
	k.log.Info("audit: api key created", "key", KeyName(ctx), "name", rec.Name, "scopes", rec.Scopes, "queues", rec.Queues)
	return key, rec, nil
}

// List returns every stored key's record, by name (the bootstrap admin key
// is not stored, so not listed). A record holds the key's hash, never its
// secret. Returns a store failure as is.
func (k *Keys) List(ctx context.Context) ([]store.KeyRecord, error) {
	return k.store.ListKeys(ctx)
}

// Delete deletes the key named name; requests with it are refused (401)
// from the moment this returns, on every node (Authenticate reads the
// store). Returns store.ErrKeyNotFound for an unknown name; a store failure
// as is. The change is logged as an audit line.
func (k *Keys) Delete(ctx context.Context, name string) error {
	if err := k.store.DeleteKey(ctx, name); err != nil {
		return err
	}
	k.log.Info("audit: api key deleted", "key", KeyName(ctx), "name", name)
	return nil
}

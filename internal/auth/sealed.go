package auth

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/styxq/styx/internal/apierr"
	"github.com/styxq/styx/internal/store"
)

// SecretKeyBytes is the size of the secret key that seals API keys for
// SigV4: 32 bytes (AES-256), written in a file as 64 hex digits.
const SecretKeyBytes = 32

// ReadSecretKeyFile reads a secret key file: 64 hex digits (32 bytes),
// surrounding whitespace ignored (e.g. `openssl rand -hex 32`).
func ReadSecretKeyFile(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("secret key file: %w", err)
	}
	key, err := hex.DecodeString(strings.TrimSpace(string(b)))
	if err != nil || len(key) != SecretKeyBytes {
		return nil, fmt.Errorf("secret key file %s: it must hold %d hex digits (%d random bytes; e.g. openssl rand -hex 32)", path, 2*SecretKeyBytes, SecretKeyBytes)
	}
	return key, nil
}

// newSealer returns the AEAD that seals key strings under secret.
func newSealer(secret []byte) (cipher.AEAD, error) {
	if len(secret) != SecretKeyBytes {
		return nil, fmt.Errorf("auth: the secret key must be %d bytes, not %d", SecretKeyBytes, len(secret))
	}
	block, err := aes.NewCipher(secret)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

// seal encrypts a key string, bound to its id: nonce || ciphertext.
func seal(aead cipher.AEAD, id, key string) ([]byte, error) {
	nonce := make([]byte, aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	return aead.Seal(nonce, nonce, []byte(key), []byte(id)), nil
}

func unseal(aead cipher.AEAD, id string, sealed []byte) (string, error) {
	n := aead.NonceSize()
	if len(sealed) < n {
		return "", errors.New("sealed key too short")
	}
	key, err := aead.Open(nil, sealed[:n], sealed[n:], []byte(id))
	if err != nil {
		return "", err
	}
	return string(key), nil
}

// SigV4Secret returns the secret of the key whose access key id is id, for
// verifying an AWS Signature Version 4 (the SQS API), with its principal:
// the key string itself (for a stored key, unsealed from its record with
// the server's secret key; for the bootstrap admin key, whose access key id
// is BootstrapName, the key file's content). Returns apierr.Unauthorized
// for an unknown key, and for a key without a sealed secret (created while
// the server had no secret key file: create a new key); a store failure as
// is.
func (k *Keys) SigV4Secret(ctx context.Context, id string) (string, *Principal, error) {
	if id == BootstrapName && k.bootstrapKey != "" {
		return k.bootstrapKey, &Principal{Name: BootstrapName, Scopes: []Scope{Admin}}, nil
	}
	rec, err := k.store.GetKey(ctx, id)
	if errors.Is(err, store.ErrKeyNotFound) {
		return "", nil, unknownKey()
	}
	if err != nil {
		return "", nil, err
	}
	if len(rec.Sealed) == 0 || k.sealer == nil {
		return "", nil, apierr.New(apierr.Unauthorized, "unauthorized; key '%s' has no SigV4 secret: it was created while the server had no "+
			"--secret-key-file; create a new key on a server started with one", rec.Name)
	}
	secret, err := unseal(k.sealer, rec.ID, rec.Sealed)
	if err != nil || !Equal(Hash(secret), rec.Hash) {
		return "", nil, apierr.New(apierr.Unauthorized, "unauthorized; key '%s' was sealed under another --secret-key-file", rec.Name)
	}
	p := &Principal{Name: rec.Name, Queues: rec.Queues}
	for _, s := range rec.Scopes {
		p.Scopes = append(p.Scopes, Scope(s))
	}
	return secret, p, nil
}

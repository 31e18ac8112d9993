package auth_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/apierr"
	"github.com/styxq/styx/internal/auth"
)

// TestSigV4Secret: a key created with a secret key gives its key string
// back for SigV4; one created without, or read under another secret key,
// is refused (401); the bootstrap admin key signs as "bootstrap-admin".
func TestSigV4Secret(t *testing.T) {
	st := memStore(t)
	secret := bytes.Repeat([]byte{7}, auth.SecretKeyBytes)
	admin := "admin-key-of-at-least-32-characters"
	k, err := auth.New(auth.Config{Store: st, SecretKey: secret, BootstrapKey: admin})
	require.NoError(t, err)
	key, rec, err := k.Create(t.Context(), "sealed", []string{"produce"}, []string{"a*"})
	require.NoError(t, err)
	require.NotEmpty(t, rec.Sealed)
	id, _ := auth.KeyID(key)
	require.Equal(t, id, rec.ID)
	got, p, err := k.SigV4Secret(t.Context(), id)
	require.NoError(t, err)
	require.Equal(t, key, got)
	require.Equal(t, "sealed", p.Name)
	require.Equal(t, []string{"a*"}, p.Queues)

	got, p, err = k.SigV4Secret(t.Context(), auth.BootstrapName)
	require.NoError(t, err)
	require.Equal(t, admin, got)
	require.True(t, p.Has(auth.Admin))

	plain, err := auth.New(auth.Config{Store: st})
	require.NoError(t, err)
	key2, rec2, err := plain.Create(t.Context(), "hashed-only", []string{"read"}, nil)
	require.NoError(t, err)
	require.Empty(t, rec2.Sealed)
	id2, _ := auth.KeyID(key2)
	_, _, err = k.SigV4Secret(t.Context(), id2)
	requireUnauthorized(t, err, "has no SigV4 secret")

	other, err := auth.New(auth.Config{Store: st, SecretKey: bytes.Repeat([]byte{8}, auth.SecretKeyBytes)})
	require.NoError(t, err)
	_, _, err = other.SigV4Secret(t.Context(), id)
	requireUnauthorized(t, err, "another --secret-key-file")
	_, _, err = k.SigV4Secret(t.Context(), "0000000000000000")
	requireUnauthorized(t, err, "unknown API key")
	_, err = auth.New(auth.Config{Store: st, SecretKey: []byte("short")})
	require.Error(t, err)
}

func requireUnauthorized(t *testing.T, err error, part string) {
	t.Helper()
	ae, ok := apierr.As(err)
	require.True(t, ok, "%v", err)
	require.Equal(t, apierr.Unauthorized, ae.Code)
	require.Contains(t, ae.Message, part)
}

func TestReadSecretKeyFile(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	require.NoError(t, os.WriteFile(good, []byte(" "+string(bytes.Repeat([]byte("ab"), 32))+"\n"), 0o600))
	key, err := auth.ReadSecretKeyFile(good)
	require.NoError(t, err)
	require.Len(t, key, auth.SecretKeyBytes)
	bad := filepath.Join(dir, "bad")
	require.NoError(t, os.WriteFile(bad, []byte("abcd"), 0o600))
	_, err = auth.ReadSecretKeyFile(bad)
	require.ErrorContains(t, err, "64 hex digits")
}

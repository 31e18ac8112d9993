package auth_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/apierr"
	"github.com/styxq/styx/internal/auth"
	"github.com/styxq/styx/internal/backend/embedded/pebble"
	"github.com/styxq/styx/internal/store"
)

func TestMatch(t *testing.T) {
	for _, tc := range []struct {
		pattern, name string
		want          bool
	}{
		{"orders", "orders", true},
		{"orders", "orders-eu", false},
		{"orders*", "orders", true},
		{"orders*", "orders-eu", true},
		{"orders*", "xorders", false},
		{"*-dead", "orders-dead", true},
		{"*-dead", "orders-dead-x", false},
		{"a*b*c", "aXbYc", true},
		{"a*b*c", "abcbc", true},
		{"a*b*c", "acb", false},
		{"*", "", true},
		{"*", "anything", true},
		{"", "", true},
		{"", "a", false},
		{"**", "ab", true},
		{"a/b*", "a/b/c", true}, // '/' is an ordinary character
		{"?", "a", false},       // only '*' is special
		{"?", "?", true},
		{strings.Repeat("*a", 20) + "b", strings.Repeat("a", 60), false}, // no blow-up
	} {
		assert.Equal(t, tc.want, auth.Match(tc.pattern, tc.name), "%q ~ %q", tc.pattern, tc.name)
	}
}

func TestGenerate(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		key, id, hash, err := auth.Generate()
		require.NoError(t, err)
		require.Len(t, key, auth.KeyLen)
		require.False(t, seen[key])
		seen[key] = true
		got, ok := auth.KeyID(key)
		require.True(t, ok)
		require.Equal(t, id, got)
		require.Equal(t, auth.Hash(key), hash)
		require.True(t, auth.Equal(hash, auth.Hash(key)))
		require.False(t, auth.Equal(hash, auth.Hash(key+"x")))
		require.NotContains(t, string(hash), key[len(key)-64:])
	}
	for _, bad := range []string{"", "styx_", "styx_0123456789abcdef_" + strings.Repeat("0", 63), "styx_0123456789abcdeF_" + strings.Repeat("0", 64),
		"styx-0123456789abcdef_" + strings.Repeat("0", 64), "styx_0123456789abcdef-" + strings.Repeat("0", 64)} {
		_, ok := auth.KeyID(bad)
		assert.False(t, ok, bad)
	}
}

func TestParseAuthorization(t *testing.T) {
	for _, tc := range []struct{ header, token, err string }{
		{"Bearer abc", "abc", ""},
		{"bearer abc", "abc", ""},
		{"BEARER  abc==", "abc==", ""},
		{"Bearer a-b.c_d~e+f/g=", "a-b.c_d~e+f/g=", ""},
		{"", "", "no API key"},
		{"Bearer", "", "no key after Bearer"},
		{"Bearer ", "", "no key after Bearer"},
		{"Basic abc", "", "the scheme must be Bearer"},
		{"Bearerabc", "", "the scheme must be Bearer"},
		{"Bearer a b", "", "characters a bearer token may not hold"},
		{"Bearer a=b", "", "characters a bearer token may not hold"},
		{"Bearer ===", "", "characters a bearer token may not hold"},
		{"Bearer é", "", "characters a bearer token may not hold"},
		{"Bearer " + strings.Repeat("a", auth.MaxHeaderBytes), "", "longer than 1024 bytes"},
	} {
		got, err := auth.ParseAuthorization(tc.header)
		if tc.err == "" {
			require.NoError(t, err, tc.header)
			require.Equal(t, tc.token, got)
			continue
		}
		e, ok := apierr.As(err)
		require.True(t, ok, "%q: %v", tc.header, err)
		require.Equal(t, apierr.Unauthorized, e.Code)
		require.Contains(t, e.Message, tc.err, tc.header)
	}
}

// FuzzParseAuthorization checks that any header value either yields a
// token made only of bearer-token characters, which the header ends with,
// or a 401 that never echoes the value. `go test` runs the seeds; `go test
// -fuzz FuzzParseAuthorization ./internal/auth` explores.
func FuzzParseAuthorization(f *testing.F) {
	for _, s := range []string{"", "Bearer", "Bearer ", "Bearer abc", "bearer  x==", "Basic dXNlcjpwYXNz", "Bearer a b",
		"Bearer styx_0123456789abcdef_" + strings.Repeat("0", 64), "Bearer \x00", "Bearer é", "Bearer ===", "Bearer a=b",
		strings.Repeat("B", 2000), "Bearer\tabc", " Bearer abc"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, header string) {
		token, err := auth.ParseAuthorization(header)
		if err != nil {
			e, ok := apierr.As(err)
			if !ok || e.Code != apierr.Unauthorized {
				t.Fatalf("%q: not a 401: %v", header, err)
			}
			if len(header) > 8 && strings.Contains(e.Message, header) {
				t.Fatalf("%q: the message echoes the header", header)
			}
			return
		}
		if token == "" || !strings.HasSuffix(header, token) || len(header) > auth.MaxHeaderBytes {
			t.Fatalf("%q: token %q", header, token)
		}
		if !strings.EqualFold(header[:6], "Bearer") {
			t.Fatalf("%q: accepted without the Bearer scheme", header)
		}
		for _, c := range strings.TrimRight(token, "=") {
			if !strings.ContainsRune("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~+/", c) {
				t.Fatalf("%q: token %q holds %q", header, token, c)
			}
		}
		// A parsed token never authenticates unless it is a key.
		k, err := auth.New(auth.Config{Store: memStore(t)})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := k.Authenticate(context.Background(), header); err == nil {
			t.Fatalf("%q authenticated with no keys", header)
		}
	})
}

func TestAuthorize(t *testing.T) {
	p := &auth.Principal{Name: "w", Scopes: []auth.Scope{auth.Produce, auth.Read}, Queues: []string{"orders*"}}
	on := func(op string, queues ...string) auth.Access { return auth.Access{Op: op, Queues: queues} }
	require.NoError(t, p.Authorize(on("/v1/queue.produce", "orders-eu")))
	require.NoError(t, p.Authorize(on("/v1/queue.stats", "orders")))
	require.NoError(t, p.Authorize(on("/v1/queue.produce", "")), "an empty name is the service's 400")
	err := p.Authorize(on("/v1/queue.lease", "orders"))
	require.EqualError(t, err, "forbidden; key 'w' lacks scope 'consume', which /v1/queue.lease needs")
	err = p.Authorize(on("/v1/queue.produce", "billing"))
	require.EqualError(t, err, "forbidden; key 'w' has scope 'produce' only for queues 'orders*', not for 'billing', which /v1/queue.produce needs")
	require.Error(t, p.Authorize(on(auth.PathMetrics)), "metrics cover every queue")
	require.NoError(t, (&auth.Principal{Name: "r", Scopes: []auth.Scope{auth.Read}}).Authorize(on(auth.PathMetrics)))
	admin := &auth.Principal{Name: "a", Scopes: []auth.Scope{auth.Admin}}
	for _, s := range auth.Scopes {
		require.True(t, admin.Has(s))
	}
	require.NoError(t, admin.Authorize(on("/v1/keys.create")))
	require.True(t, auth.Public("/health"))
	require.True(t, auth.Public("/ui/app.js"))
	require.False(t, auth.Public("/v1/queues.list"))
	require.False(t, auth.Public("/uix"))
}

func TestBootstrapKey(t *testing.T) {
	_, err := auth.New(auth.Config{Store: memStore(t), BootstrapKey: "short"})
	require.ErrorContains(t, err, "at least 32 are required")
	_, err = auth.New(auth.Config{Store: memStore(t), BootstrapKey: strings.Repeat("a", 31) + " b"})
	require.ErrorContains(t, err, "may hold only")
	boot := strings.Repeat("k", 40)
	k, err := auth.New(auth.Config{Store: memStore(t), BootstrapKey: boot})
	require.NoError(t, err)
	p, err := k.Authenticate(context.Background(), "Bearer "+boot)
	require.NoError(t, err)
	require.Equal(t, auth.BootstrapName, p.Name)
	_, err = k.Authenticate(context.Background(), "Bearer "+boot+"k")
	require.Error(t, err)
	ctx := auth.WithPrincipal(context.Background(), p)
	key, _, err := k.Create(ctx, "a", []string{"read"}, nil)
	require.NoError(t, err)
	list, err := k.List(ctx)
	require.NoError(t, err)
	require.Equal(t, auth.BootstrapName, list[0].CreatedBy)
	p2, err := k.Authenticate(context.Background(), "Bearer "+key)
	require.NoError(t, err)
	require.Equal(t, "a", p2.Name)
}

// TestKeysStore: Create, List and Delete keep the keys and report the
// store's sentinels, which the keys.* handlers answer 409 and 404.
func TestKeysStore(t *testing.T) {
	ctx := context.Background()
	k, err := auth.New(auth.Config{Store: memStore(t)})
	require.NoError(t, err)
	key, rec, err := k.Create(ctx, "b", []string{"produce", "read"}, []string{"orders*"})
	require.NoError(t, err)
	require.Equal(t, "b", rec.Name)
	require.Equal(t, auth.Hash(key), rec.Hash)
	_, _, err = k.Create(ctx, "b", []string{"read"}, nil)
	require.ErrorIs(t, err, store.ErrKeyExists)
	list, err := k.List(ctx)
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.Equal(t, []string{"orders*"}, list[0].Queues)
	p, err := k.Authenticate(ctx, "Bearer "+key)
	require.NoError(t, err)
	require.True(t, p.Has(auth.Produce))
	require.NoError(t, k.Delete(ctx, "b"))
	require.ErrorIs(t, k.Delete(ctx, "b"), store.ErrKeyNotFound)
	_, err = k.Authenticate(ctx, "Bearer "+key)
	ae, ok := apierr.As(err)
	require.True(t, ok, "%v", err)
	require.Equal(t, apierr.Unauthorized, ae.Code)
}

// memStore returns an empty store in memory, closed when the test ends.
func memStore(t *testing.T) *pebble.Store {
	s, err := pebble.OpenMemory()
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

package main

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/styxq/styx"
	"github.com/styxq/styx/daemon"
	pb "github.com/styxq/styx/styxpb"
)

func unmarshalKeysCreate(b []byte, m *pb.KeysCreateResponse) error { return protojson.Unmarshal(b, m) }

func TestServerSettingsAuth(t *testing.T) {
	path := writeConfig(t, "auth: true\nadmin_key_file: /etc/styx/admin.key\ntls_cert: /c.pem\ntls_key: /k.pem\n")
	s, err := loadWith(t, []string{"--config", path, "--tls-client-ca", "/ca.pem"}, map[string]string{"STYX_INSECURE": "true"})
	require.NoError(t, err)
	cfg := s.daemonConfig(slog.Default())
	require.True(t, cfg.Auth)
	require.True(t, cfg.Insecure)
	require.Equal(t, "/etc/styx/admin.key", cfg.AdminKeyFile)
	require.Equal(t, "/c.pem", cfg.TLSCertFile)
	require.Equal(t, "/k.pem", cfg.TLSKeyFile)
	require.Equal(t, "/ca.pem", cfg.TLSClientCAFile)

	_, err = loadWith(t, nil, map[string]string{"STYX_AUTH": "yes"})
	require.ErrorContains(t, err, `STYX_AUTH: "yes" is not true or false`)

	// The safe default, as `styx server` reports it (nothing listens).
	var out, errOut strings.Builder
	code := run(t.Context(), []string{"server", "--listen", "0.0.0.0:2319", "--storage", "memory"}, &out, &errOut)
	require.Equal(t, 1, code)
	require.Contains(t, errOut.String(), "styx: start server: listen: 0.0.0.0:2319 is not a loopback address and auth is off")
	require.Contains(t, errOut.String(), "turn on --auth (env STYX_AUTH, YAML auth) or, to accept that, pass --insecure")
}

// startAuthDaemon runs an in-memory server with --auth and an admin key
// file, optionally with TLS (tlsFiles: certificate, key, and optionally
// the client CA of --tls-client-ca), and returns it with the admin key.
func startAuthDaemon(t *testing.T, tlsFiles ...string) (*daemon.Daemon, string) {
	t.Helper()
	admin := strings.Repeat("ab", 20)
	file := filepath.Join(t.TempDir(), "admin.key")
	require.NoError(t, os.WriteFile(file, []byte(admin+"\n"), 0o600))
	cfg := daemon.Config{
		Listen: "127.0.0.1:0", Storage: daemon.StorageMemory, Auth: true, AdminKeyFile: file,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	if len(tlsFiles) >= 2 {
		cfg.TLSCertFile, cfg.TLSKeyFile = tlsFiles[0], tlsFiles[1]
	}
	if len(tlsFiles) == 3 {
		cfg.TLSClientCAFile = tlsFiles[2]
	}
	d, err := daemon.New(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, d.Close(context.Background())) })
	return d, admin
}

func TestKeysCommands(t *testing.T) {
	d, admin := startAuthDaemon(t)
	c := cli{t: t, endpoint: d.Endpoint()}

	_, _, err := c.run("queues", "list")
	require.Error(t, err)
	require.Contains(t, errorLine(err), "no API key, send the header 'Authorization: Bearer <key>' (code 401 unauthorized)")

	out := c.ok("keys", "create", "orders-worker", "--scope", "produce,consume", "--queue", "orders*", "--api-key", admin)
	m := regexp.MustCompile(`(?m)^key\s+(styx_\S+)$`).FindStringSubmatch(out)
	require.Len(t, m, 2, out)
	worker := m[1]
	require.Regexp(t, `(?m)^scopes\s+produce,consume$`, out)
	require.Regexp(t, `(?m)^queues\s+orders\*$`, out)

	c.ok("keys", "create", "ops", "--scope", "admin", "--api-key", admin)
	out = c.ok("keys", "list", "--api-key", admin)
	require.Regexp(t, `(?m)^NAME\s+SCOPES\s+QUEUES\s+CREATED\s+CREATED BY$`, out)
	require.Regexp(t, `(?m)^ops\s+admin\s+\*\s+.+\s+bootstrap-admin$`, out)
	require.Regexp(t, `(?m)^orders-worker\s+produce,consume\s+orders\*\s+.+\s+bootstrap-admin$`, out)
	require.NotContains(t, out, worker[len(worker)-64:])

	// The key from the environment, as a worker would have it.
	env := map[string]string{envAPIKey: admin}
	c.ok("queues", "create", "orders-eu", "--api-key", admin)
	var stdout, stderr strings.Builder
	app := &app{stdout: &stdout, stderr: &stderr, lookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok }, now: time.Now}
	r := app.rootCmd()
	r.SetArgs([]string{"queues", "list", "--endpoint", d.Endpoint()})
	require.NoError(t, r.ExecuteContext(t.Context()), stderr.String())
	require.Contains(t, stdout.String(), "orders-eu")

	_, _, err = c.run("produce", "billing", "x", "--api-key", worker)
	require.Error(t, err)
	require.Contains(t, errorLine(err), "forbidden; key 'orders-worker' has scope 'produce' only for queues 'orders*', not for 'billing', which /v1/queue.produce needs (code 403 forbidden)")

	// A redrive records the key that started it; redrives list and show
	// name it.
	cl, err := styx.NewClient(styx.ClientConfig{Endpoint: d.Endpoint(), APIKey: admin})
	require.NoError(t, err)
	defer cl.Close()
	require.NoError(t, cl.QueuesCreate(t.Context(), &pb.QueueInfo{QueueName: "orders-dlq"}))
	require.NoError(t, cl.QueuesCreate(t.Context(), &pb.QueueInfo{QueueName: "orders", DeadQueue: "orders-dlq", LeaseTimeout: "1m", ExpireTimeout: "1h"}))
	res := c.ok("keys", "create", "oncall", "--scope", "dead", "--api-key", admin, "--json")
	oncall := jsonLines(t, res, unmarshalKeysCreate)[0].Key
	out = c.ok("dead", "redrive", "orders-dlq", "--all", "--api-key", oncall)
	id := regexp.MustCompile(`rd-[a-z0-9]+`).FindString(out)
	require.NotEmpty(t, id, out)
	require.Regexp(t, `(?m)^`+id+`\s+orders-dlq\s+.*\s+oncall$`, c.ok("redrives", "list", "--api-key", oncall))
	require.Regexp(t, `(?m)^started by key\s+oncall$`, c.ok("redrives", "show", id, "--api-key", oncall))

	out = c.ok("keys", "delete", "orders-worker", "--api-key", admin)
	require.Equal(t, "deleted key orders-worker\n", out)
	_, _, err = c.run("produce", "orders-eu", "x", "--api-key", worker)
	require.Error(t, err)
	require.Contains(t, errorLine(err), "(code 401 unauthorized)")
}

// TestCAFile talks to an HTTPS server whose certificate a CA made here
// signed: refused without --ca-file, accepted with it or STYX_CA_FILE.
func TestCAFile(t *testing.T) {
	pki := newCLIPKI(t)
	d, admin := startAuthDaemon(t, pki.serverCert, pki.serverKey)
	require.True(t, strings.HasPrefix(d.Endpoint(), "https://"))
	c := cli{t: t, endpoint: d.Endpoint()}

	_, _, err := c.run("queues", "list", "--api-key", admin)
	require.Error(t, err)
	require.Contains(t, err.Error(), "certificate signed by unknown authority")
	c.ok("queues", "create", "secure", "--api-key", admin, "--ca-file", pki.caFile)
	require.Contains(t, c.ok("queues", "list", "--api-key", admin, "--ca-file", pki.caFile), "secure")
	out, errOut, err := runEnv(t, map[string]string{envAPIKey: admin, envCAFile: pki.caFile}, "queues", "list", "--endpoint", d.Endpoint())
	require.NoError(t, err, errOut)
	require.Contains(t, out, "secure")
}

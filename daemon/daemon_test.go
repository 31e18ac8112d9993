package daemon_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/daemon"
	"github.com/styxq/styx/internal/store"
)

func TestConfigValidate(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  daemon.Config
		want string
	}{
		{"Listen", daemon.Config{Listen: "nohostport"}, "listen"},
		{"Storage", daemon.Config{Storage: "floppy"}, "storage"},
		{"MaxRequestBytes", daemon.Config{MaxRequestBytes: 10}, "max_request_bytes: 10 is out of range 1048576 (1 MiB) to 1073741824 (1 GiB)"},
		{"MaxRequestBytesHuge", daemon.Config{MaxRequestBytes: 2 << 30}, "max_request_bytes: 2147483648 is out of range"},
		{"BodyReadTimeoutNegative", daemon.Config{BodyReadTimeout: -time.Second}, "body_read_timeout: -1s is out of range 1ms to 1h"},
		{"BodyReadTimeoutHuge", daemon.Config{BodyReadTimeout: 2 * time.Hour}, "body_read_timeout: 2h0m0s is out of range 1ms to 1h"},
		{"MaxConnections", daemon.Config{MaxConnections: -1}, "max_connections: -1 is out of range 1 to 1000000"},
		{"SyncConsumeOnMemory", daemon.Config{Storage: "memory", ConsumeBeforeSync: true}, `sync_consume: false applies to storage "pebble" only`},
		{"SyncConsumeOnPostgres", daemon.Config{Storage: "postgres", PostgresURL: "postgres://x", ConsumeBeforeSync: true}, "sync_consume"},
		{"AdminKeyWithoutAuth", daemon.Config{AdminKeyFile: "k"}, "admin_key_file: set, but auth is off; add --auth"},
		{"TLSCertWithoutKey", daemon.Config{TLSCertFile: "c"}, "tls_cert, tls_key: set both or neither"},
		{"ClientCAWithoutTLS", daemon.Config{TLSClientCAFile: "ca"}, "tls_client_ca: client certificates need TLS"},
		{"ClustersOnPebble", daemon.Config{PostgresClusters: map[string]string{"east": "postgres://e"}}, `postgres_clusters: set, but storage is "pebble"`},
		{"ClustersWithoutMain", daemon.Config{Storage: "postgres", Store: nopStore{}, PostgresClusters: map[string]string{"east": "postgres://e"}},
			"postgres_url: required with postgres_clusters"},
		{"ClusterNamedMain", pgClusters(map[string]string{"main": "postgres://m2"}, nil), `postgres_clusters: "main" is the cluster of postgres_url`},
		{"ClusterBadName", pgClusters(map[string]string{"East!": "postgres://e"}, nil), `cluster name "East!" is invalid`},
		{"ClusterNoURL", pgClusters(map[string]string{"east": ""}, nil), `cluster "east" has no URL`},
		{"WeightNoCluster", pgClusters(map[string]string{"east": "postgres://e"}, map[string]int{"west": 2}), `postgres_cluster_weights: "west" is not a cluster`},
		{"WeightNegative", pgClusters(map[string]string{"east": "postgres://e"}, map[string]int{"east": -1}), `weight -1`},
		{"WeightsWithoutClusters", daemon.Config{Storage: "postgres", PostgresURL: "postgres://m", PostgresClusterWeights: map[string]int{"main": 1}},
			"postgres_cluster_weights: set, but there are no postgres_clusters"},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.cfg.SetDefaults()
			err := c.cfg.Validate()
			require.Error(t, err)
			require.Contains(t, err.Error(), c.want)
		})
	}
	var ok daemon.Config
	ok.SetDefaults()
	require.NoError(t, ok.Validate())
	require.Equal(t, "127.0.0.1:2319", ok.Listen)
	require.Equal(t, "pebble", ok.Storage)
	require.Equal(t, "./styx-data", ok.DataDir)
	require.Equal(t, int64(64<<20), ok.MaxRequestBytes)
	require.Equal(t, 30*time.Second, ok.BodyReadTimeout)
	require.Equal(t, 4096, ok.MaxConnections)
}

func TestDataDirInUse(t *testing.T) {
	dir := t.TempDir()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	d, err := daemon.New(context.Background(), daemon.Config{Listen: "127.0.0.1:0", DataDir: dir, Log: log})
	require.NoError(t, err)
	defer func() { require.NoError(t, d.Close(context.Background())) }()
	_, err = daemon.New(context.Background(), daemon.Config{Listen: "127.0.0.1:0", DataDir: dir, Log: log})
	require.Error(t, err)
	require.Contains(t, err.Error(), "is in use by another")
}

// TestDataDirMadePrivate (issue 36): the server makes a data directory that
// other users may read 0700 when it is its own to tighten (here: empty),
// and refuses to start on one that holds something else, naming the
// directory, its mode and the chmod to run.
func TestDataDirMadePrivate(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	dir := filepath.Join(t.TempDir(), "data")
	require.NoError(t, os.Mkdir(dir, 0o700))
	require.NoError(t, os.Chmod(dir, 0o755))
	d, err := daemon.New(context.Background(), daemon.Config{Listen: "127.0.0.1:0", DataDir: dir, Log: log})
	require.NoError(t, err)
	require.NoError(t, d.Close(context.Background()))
	st, err := os.Stat(dir)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o700), st.Mode().Perm())

	other := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(other, "notes.txt"), []byte("x"), 0o600))
	require.NoError(t, os.Chmod(other, 0o750))
	_, err = daemon.New(context.Background(), daemon.Config{Listen: "127.0.0.1:0", DataDir: other, Log: log})
	require.ErrorContains(t, err, "the data directory "+other+" is mode 0750")
	require.ErrorContains(t, err, "run `chmod 700 "+other+"`")
}

// TestNonLoopbackNeedsAuth checks the safe default: a non-loopback listen
// address without auth is refused before anything listens, naming --auth
// and --insecure; loopback addresses and --auth or --insecure pass, and the
// unsafe combinations warn.
func TestNonLoopbackNeedsAuth(t *testing.T) {
	for _, listen := range []string{"0.0.0.0:2319", ":2319", "[::]:2319", "10.1.2.3:2319", "styx.example.com:2319"} {
		cfg := daemon.Config{Listen: listen, Storage: daemon.StorageMemory}
		cfg.SetDefaults()
		err := cfg.Validate()
		require.Error(t, err, listen)
		require.Contains(t, err.Error(), "is not a loopback address and auth is off")
		require.Contains(t, err.Error(), "--auth")
		require.Contains(t, err.Error(), "--insecure")
		_, err = daemon.New(context.Background(), cfg)
		require.ErrorContains(t, err, "--insecure", "daemon.New refuses it too")

		auth := cfg
		auth.Auth = true
		require.NoError(t, auth.Validate())
		require.Len(t, auth.Warnings(), 1)
		require.Contains(t, auth.Warnings()[0], "TLS is off on a non-loopback address")
		auth.TLSCertFile, auth.TLSKeyFile = "c", "k"
		require.Empty(t, auth.Warnings())

		insecure := cfg
		insecure.Insecure = true
		require.NoError(t, insecure.Validate())
		require.Contains(t, insecure.Warnings()[0], "--insecure")
	}
	for _, listen := range []string{"127.0.0.1:0", "127.9.9.9:2319", "[::1]:2319", "localhost:2319", "LOCALHOST:1"} {
		cfg := daemon.Config{Listen: listen}
		cfg.SetDefaults()
		require.NoError(t, cfg.Validate(), listen)
		require.Empty(t, cfg.Warnings(), listen)
	}
}

// pgClusters is a postgres Config with the other clusters and weights
// given (ADR 0023).
func pgClusters(others map[string]string, weights map[string]int) daemon.Config {
	return daemon.Config{Storage: "postgres", PostgresURL: "postgres://m", PostgresClusters: others, PostgresClusterWeights: weights}
}

// nopStore stands for a Config.Store: Validate only looks at whether it is
// set.
type nopStore struct{ store.Store }

package main

import (
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/daemon"
)

// loadWith parses args as `styx server` flags and resolves the settings
// with env as the environment.
func loadWith(t *testing.T, args []string, env map[string]string) (serverSettings, error) {
	t.Helper()
	fs := pflag.NewFlagSet("server", pflag.ContinueOnError)
	addServerFlags(fs)
	require.NoError(t, fs.Parse(args))
	return loadServerSettings(fs, func(k string) (string, bool) {
		v, ok := env[k]
		return v, ok
	})
}

func writeConfig(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "styx.yaml")
	require.NoError(t, os.WriteFile(path, []byte(text), 0o600))
	return path
}

func TestServerSettingsDefaults(t *testing.T) {
	s, err := loadWith(t, nil, nil)
	require.NoError(t, err)
	require.Equal(t, defaultServerSettings(), s)
	require.Equal(t, "127.0.0.1:2319", s.Listen)
	require.Equal(t, "./styx-data", s.DataDir)
	require.Equal(t, "pebble", s.Storage)
	require.True(t, s.Sync)
	require.Equal(t, slog.LevelInfo, s.LogLevel)
	require.Equal(t, "text", s.LogFormat)

	cfg := s.daemonConfig(slog.Default())
	require.False(t, cfg.NoSync)
	cfg.SetDefaults()
	require.NoError(t, cfg.Validate())
}

func TestServerSettingsPrecedence(t *testing.T) {
	// listen is set everywhere, log_level in file and env, data_dir and
	// sync in the file only, log_format nowhere.
	path := writeConfig(t, `
listen: 127.0.0.1:1001
log_level: debug
data_dir: /from/file
sync: false
storage: memory
`)
	env := map[string]string{
		"STYX_LISTEN":    "127.0.0.1:1002",
		"STYX_LOG_LEVEL": "warn",
		"STYX_STORAGE":   "", // empty counts as unset
	}
	s, err := loadWith(t, []string{"--config", path, "--listen", "127.0.0.1:1003"}, env)
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1:1003", s.Listen, "flag beats env and file")
	require.Equal(t, slog.LevelWarn, s.LogLevel, "env beats file")
	require.Equal(t, "/from/file", s.DataDir, "file beats default")
	require.False(t, s.Sync, "file beats default")
	require.Equal(t, "memory", s.Storage, "an empty env var does not override the file")
	require.Equal(t, "text", s.LogFormat, "default when set nowhere")
	require.True(t, s.daemonConfig(nil).NoSync)

	t.Run("flag beats env for a bool", func(t *testing.T) {
		s, err := loadWith(t, []string{"--sync=true"}, map[string]string{"STYX_SYNC": "false"})
		require.NoError(t, err)
		require.True(t, s.Sync)
	})
	t.Run("config file from STYX_CONFIG", func(t *testing.T) {
		s, err := loadWith(t, nil, map[string]string{"STYX_CONFIG": path})
		require.NoError(t, err)
		require.Equal(t, "127.0.0.1:1001", s.Listen)
	})
	t.Run("--config beats STYX_CONFIG", func(t *testing.T) {
		other := writeConfig(t, "shutdown_timeout: 5s\n")
		s, err := loadWith(t, []string{"--config", other}, map[string]string{"STYX_CONFIG": path})
		require.NoError(t, err)
		require.Equal(t, "127.0.0.1:2319", s.Listen)
		require.Equal(t, 5*time.Second, s.ShutdownTimeout)
	})
}

func TestServerSettingsErrors(t *testing.T) {
	t.Run("unknown YAML key", func(t *testing.T) {
		path := writeConfig(t, "listen: 127.0.0.1:1\nlisten_addr: 0.0.0.0:2319\n")
		_, err := loadWith(t, []string{"--config", path}, nil)
		require.ErrorContains(t, err, `line 2: unknown key "listen_addr"`)
	})
	t.Run("wrong YAML type", func(t *testing.T) {
		path := writeConfig(t, "sync: maybe\n")
		_, err := loadWith(t, []string{"--config", path}, nil)
		require.ErrorContains(t, err, "maybe")
	})
	t.Run("bad value in the file names the key", func(t *testing.T) {
		path := writeConfig(t, "log_level: loud\n")
		_, err := loadWith(t, []string{"--config", path}, nil)
		require.ErrorContains(t, err, `log_level: "loud" is not one of debug, info, warn, error`)
	})
	t.Run("bad env value names the variable", func(t *testing.T) {
		_, err := loadWith(t, nil, map[string]string{"STYX_SYNC": "sometimes"})
		require.ErrorContains(t, err, `STYX_SYNC: "sometimes" is not true or false`)
	})
	t.Run("bad flag value names the flag", func(t *testing.T) {
		_, err := loadWith(t, []string{"--storage", "disk"}, nil)
		require.ErrorContains(t, err, `--storage: "disk" is not one of pebble, memory, postgres`)
	})
	t.Run("missing file", func(t *testing.T) {
		_, err := loadWith(t, []string{"--config", filepath.Join(t.TempDir(), "nope.yaml")}, nil)
		require.Error(t, err)
	})
	t.Run("empty file sets nothing", func(t *testing.T) {
		s, err := loadWith(t, []string{"--config", writeConfig(t, "")}, nil)
		require.NoError(t, err)
		require.Equal(t, defaultServerSettings(), s)
	})
}

func TestEveryFileKeyIsASetting(t *testing.T) {
	table := map[string]bool{}
	for _, st := range serverSettingTable() {
		table[st.key] = true
	}
	for _, k := range fileKeys() {
		require.True(t, table[k], "yaml key %q has no setting", k)
	}
	require.Len(t, table, len(fileKeys()))
}

func TestServerSettingsPostgres(t *testing.T) {
	// From the environment, then the file; --storage postgres without a
	// URL is refused by the daemon's validation, naming the setting.
	s, err := loadWith(t, nil, map[string]string{"STYX_STORAGE": "postgres", "STYX_POSTGRES_URL": "postgres://env/db"})
	require.NoError(t, err)
	require.Equal(t, "postgres", s.Storage)
	cfg := s.daemonConfig(slog.Default())
	require.Equal(t, "postgres://env/db", cfg.PostgresURL)

	path := writeConfig(t, "storage: postgres\npostgres_url: postgres://file/db\n")
	s, err = loadWith(t, []string{"--config", path}, nil)
	require.NoError(t, err)
	require.Equal(t, "postgres://file/db", s.PostgresURL)

	s, err = loadWith(t, []string{"--storage", "postgres"}, nil)
	require.NoError(t, err)
	cfg = s.daemonConfig(slog.Default())
	cfg.SetDefaults()
	require.ErrorContains(t, cfg.Validate(), "postgres_url: required with storage postgres")
}

// TestServerSettingsClusters: the other PostgreSQL clusters and their
// weights (ADR 0023) from a repeated flag (a URL with a comma: several
// hosts), the environment and the YAML file's maps; a cluster given twice
// and a malformed entry are refused naming the setting.
func TestServerSettingsClusters(t *testing.T) {
	s, err := loadWith(t, []string{"--postgres-cluster", "east=postgres://h1:5432,h2:5432/db", "--postgres-cluster", "west=postgres://w/db",
		"--postgres-cluster-weight", "main=0"}, nil)
	require.NoError(t, err)
	require.Equal(t, map[string]string{"east": "postgres://h1:5432,h2:5432/db", "west": "postgres://w/db"}, s.PostgresClusters)
	require.Equal(t, map[string]int{"main": 0}, s.PostgresClusterWeights)
	cfg := s.daemonConfig(slog.Default())
	require.Equal(t, s.PostgresClusters, cfg.PostgresClusters)

	s, err = loadWith(t, nil, map[string]string{"STYX_POSTGRES_CLUSTERS": "east=postgres://e/db;west=postgres://w/db",
		"STYX_POSTGRES_CLUSTER_WEIGHTS": "east=3;west=7"})
	require.NoError(t, err)
	require.Equal(t, map[string]string{"east": "postgres://e/db", "west": "postgres://w/db"}, s.PostgresClusters)
	require.Equal(t, map[string]int{"east": 3, "west": 7}, s.PostgresClusterWeights)

	path := writeConfig(t, "storage: postgres\npostgres_clusters:\n  east: postgres://e/db\npostgres_cluster_weights:\n  east: 2\n")
	s, err = loadWith(t, []string{"--config", path}, nil)
	require.NoError(t, err)
	require.Equal(t, map[string]string{"east": "postgres://e/db"}, s.PostgresClusters)
	require.Equal(t, map[string]int{"east": 2}, s.PostgresClusterWeights)

	_, err = loadWith(t, []string{"--postgres-cluster", "east=postgres://a", "--postgres-cluster", "east=postgres://b"}, nil)
	require.ErrorContains(t, err, `--postgres-cluster: cluster "east" is given twice`)
	_, err = loadWith(t, []string{"--postgres-cluster", "postgres://a"}, nil)
	require.ErrorContains(t, err, "is not NAME=URL")
	_, err = loadWith(t, []string{"--postgres-cluster-weight", "east=x"}, nil)
	require.ErrorContains(t, err, `weight "x"`)
}

// TestServerSettingsSyncCompleteAndLease: --sync-complete and --sync-lease
// are off by default (ADR 0033, ADR 0034) and each is set by its flag, its
// environment variable or its config key, and refuses a value that is not a
// boolean.
func TestServerSettingsSyncCompleteAndLease(t *testing.T) {
	for _, set := range []struct {
		flag, env, key string
		get            func(daemon.Config) bool
	}{
		{"--sync-complete", "STYX_SYNC_COMPLETE", "sync_complete", func(c daemon.Config) bool { return c.SyncCompletes }},
		{"--sync-lease", "STYX_SYNC_LEASE", "sync_lease", func(c daemon.Config) bool { return c.SyncLeases }},
	} {
		t.Run(set.key, func(t *testing.T) {
			s, err := loadWith(t, nil, nil)
			require.NoError(t, err)
			require.False(t, set.get(s.daemonConfig(nil)), "answered before their fsync by default")
			for _, tc := range []struct {
				args []string
				env  map[string]string
			}{
				{args: []string{set.flag}},
				{env: map[string]string{set.env: "true"}},
				{args: []string{"--config", writeConfig(t, set.key+": true\n")}},
			} {
				s, err := loadWith(t, tc.args, tc.env)
				require.NoError(t, err)
				require.True(t, set.get(s.daemonConfig(nil)), "%v %v", tc.args, tc.env)
			}
			_, err = loadWith(t, nil, map[string]string{set.env: "maybe"})
			require.ErrorContains(t, err, `"maybe" is not true or false`)
		})
	}
}

func TestServerSettingsSyncConsume(t *testing.T) {
	s, err := loadWith(t, nil, nil)
	require.NoError(t, err)
	require.True(t, s.SyncConsume)
	require.False(t, s.daemonConfig(nil).ConsumeBeforeSync, "off by default")

	s, err = loadWith(t, []string{"--sync-consume=false"}, nil)
	require.NoError(t, err)
	require.True(t, s.daemonConfig(nil).ConsumeBeforeSync)

	s, err = loadWith(t, nil, map[string]string{"STYX_SYNC_CONSUME": "false"})
	require.NoError(t, err)
	require.True(t, s.daemonConfig(nil).ConsumeBeforeSync)

	s, err = loadWith(t, []string{"--config", writeConfig(t, "sync_consume: false\n")}, nil)
	require.NoError(t, err)
	require.True(t, s.daemonConfig(nil).ConsumeBeforeSync)

	// With sync off nothing waits for an fsync: the setting is moot.
	s, err = loadWith(t, []string{"--sync=false", "--sync-consume=false"}, nil)
	require.NoError(t, err)
	require.False(t, s.daemonConfig(nil).ConsumeBeforeSync)

	_, err = loadWith(t, nil, map[string]string{"STYX_SYNC_CONSUME": "maybe"})
	require.ErrorContains(t, err, `STYX_SYNC_CONSUME: "maybe" is not true or false`)
}

// TestServerSettingsLimits: the resource limits are set by flag, env and
// YAML, reach daemon.Config, and a bad value names its setting.
func TestServerSettingsLimits(t *testing.T) {
	s, err := loadWith(t, nil, nil)
	require.NoError(t, err)
	cfg := s.daemonConfig(nil)
	require.Equal(t, int64(64<<20), cfg.MaxRequestBytes)
	require.Equal(t, 30*time.Second, cfg.BodyReadTimeout)
	require.Equal(t, 4096, cfg.MaxConnections)

	path := writeConfig(t, "max_request_bytes: 2097152\nbody_read_timeout: 5s\nmax_connections: 100\n")
	s, err = loadWith(t, []string{"--config", path}, nil)
	require.NoError(t, err)
	cfg = s.daemonConfig(nil)
	require.Equal(t, int64(2<<20), cfg.MaxRequestBytes)
	require.Equal(t, 5*time.Second, cfg.BodyReadTimeout)
	require.Equal(t, 100, cfg.MaxConnections)

	s, err = loadWith(t, []string{"--config", path, "--max-request-bytes", "3145728", "--body-read-timeout", "7s", "--max-connections", "7"},
		map[string]string{"STYX_MAX_CONNECTIONS": "8"})
	require.NoError(t, err)
	cfg = s.daemonConfig(nil)
	require.Equal(t, int64(3<<20), cfg.MaxRequestBytes)
	require.Equal(t, 7*time.Second, cfg.BodyReadTimeout)
	require.Equal(t, 7, cfg.MaxConnections)

	s, err = loadWith(t, nil, map[string]string{"STYX_MAX_CONNECTIONS": "8", "STYX_BODY_READ_TIMEOUT": "1m"})
	require.NoError(t, err)
	require.Equal(t, 8, s.MaxConnections)
	require.Equal(t, time.Minute, s.BodyReadTimeout)

	_, err = loadWith(t, []string{"--max-connections", "0"}, nil)
	require.ErrorContains(t, err, `--max-connections: "0" is not a positive number`)

	// The free-space watermark (ADR 0015): flag, env, YAML; -1 disables.
	require.Equal(t, int64(0), cfg.MinFreeBytes)
	s, err = loadWith(t, []string{"--config", writeConfig(t, "min_free_bytes: 1048576\n")}, nil)
	require.NoError(t, err)
	require.Equal(t, int64(1<<20), s.daemonConfig(nil).MinFreeBytes)
	s, err = loadWith(t, []string{"--min-free-bytes", "-1"}, map[string]string{"STYX_MIN_FREE_BYTES": "5"})
	require.NoError(t, err)
	require.Equal(t, int64(-1), s.daemonConfig(nil).MinFreeBytes)
	_, err = loadWith(t, []string{"--min-free-bytes", "-2"}, nil)
	require.ErrorContains(t, err, `--min-free-bytes: "-2" is not a number of bytes`)
	_, err = loadWith(t, nil, map[string]string{"STYX_BODY_READ_TIMEOUT": "soon"})
	require.ErrorContains(t, err, `STYX_BODY_READ_TIMEOUT: "soon" is not a positive duration`)
	_, err = loadWith(t, []string{"--config", writeConfig(t, "max_request_bytes: -1\n")}, nil)
	require.ErrorContains(t, err, `max_request_bytes: "-1" is not a positive number of bytes`)
}

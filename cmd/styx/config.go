package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"gopkg.in/yaml.v3"

	"github.com/styxq/styx/daemon"
	"github.com/styxq/styx/transport"
)

// envConfig names the environment variable that sets --config.
const envConfig = "STYX_CONFIG"

// serverSettings are the resolved settings of `styx server`, before they
// are translated into a daemon.Config.
type serverSettings struct {
	// Listen is the TCP host:port to serve on. Defaults to 127.0.0.1:2319.
	Listen string
	// DataDir is the Pebble data directory. Defaults to ./styx-data.
	DataDir string
	// Storage is "pebble" (default), "memory" or "postgres".
	Storage string
	// PostgresURL is the database of the postgres backend.
	PostgresURL string
	// PostgresClusters are the other PostgreSQL clusters by name, and
	// PostgresClusterWeights their shares of new queues
	// (daemon.Config.PostgresClusters, ADR 0023).
	PostgresClusters       map[string]string
	PostgresClusterWeights map[string]int
	// Sync fsyncs every write before acknowledging it. Defaults to true.
	Sync bool
	// SyncConsume makes lease, retry and renew wait for their fsync too
	// (with Sync). Defaults to true; false is ADR 0013's mode, which answers
	// completes once written too, whatever SyncComplete says.
	SyncConsume bool
	// SyncComplete makes complete (and SQS's DeleteMessage) wait for its
	// fsync too (with Sync, on Pebble). Defaults to false (ADR 0033).
	SyncComplete bool
	// SyncLease makes a lease wait for its fsync too (with Sync, on
	// Pebble). Defaults to false (ADR 0034).
	SyncLease bool
	// LogLevel is debug, info (default), warn or error.
	LogLevel slog.Level
	// LogFormat is text (default) or json.
	LogFormat string
	// ShutdownTimeout bounds how long a shutdown waits for in-flight
	// requests. Defaults to 30s.
	ShutdownTimeout time.Duration
	// MaxRequestBytes bounds a request body, in bytes. Defaults to 64 MiB.
	MaxRequestBytes int64
	// MaxInflightBytes is the server-wide in-flight request byte budget
	// (daemon.Config.MaxInflightBytes). 0 (the default) is 256 MiB or three
	// times MaxRequestBytes, whichever is larger.
	MaxInflightBytes int64
	// MaxInflightBytesPerKey is the most of it one key may hold
	// (daemon.Config.MaxInflightBytesPerKey); 0 (the default) is a quarter
	// of the budget, and at least three times MaxRequestBytes.
	MaxInflightBytesPerKey int64
	// BodyReadTimeout bounds how long a request body may take to arrive.
	// Defaults to 30s.
	BodyReadTimeout time.Duration
	// MaxConnections bounds the API listener's open connections. Defaults
	// to 4096.
	MaxConnections int
	// MaxConnectionsPerAddress bounds one client address's connections
	// (daemon.Config.MaxConnectionsPerAddress); 0 (the default) is a quarter
	// of MaxConnections.
	MaxConnectionsPerAddress int
	// MaxDeduplicationIDs bounds the deduplication ids a queue holds on the
	// memory and Pebble backends (daemon.Config.MaxDeduplicationIDs); 0
	// (the default) is 100,000, -1 no limit.
	MaxDeduplicationIDs int
	// MinFreeBytes is the Pebble store's free-space watermark in bytes
	// (daemon.Config.MinFreeBytes); 0 is the default, -1 disables it.
	MinFreeBytes int64
	// DebugListen, when set, serves Go's pprof profiles on this host:port.
	DebugListen string
	// Auth requires an API key on every /v1 call and /metrics.
	Auth bool
	// Insecure allows a non-loopback Listen without Auth.
	Insecure bool
	// DebugAllowRemote allows a non-loopback DebugListen.
	DebugAllowRemote bool
	// AllowedHosts are the host names a server without auth answers
	// besides the loopback ones (daemon.Config.AllowedHosts).
	AllowedHosts []string
	// AdminKeyFile names the bootstrap admin key's file.
	AdminKeyFile string
	// SecretKeyFile names the file that seals API keys for SigV4, and
	// SQSRegion and SQSAccountID name the SQS API's region and account id
	// (daemon.Config).
	SecretKeyFile, SQSRegion, SQSAccountID string
	// TLSCert, TLSKey and TLSClientCA are PEM files (daemon.Config).
	TLSCert, TLSKey, TLSClientCA string
}

// defaultServerSettings returns the settings used when neither a flag, an
// environment variable nor the config file sets them.
func defaultServerSettings() serverSettings {
	return serverSettings{
		Listen:          "127.0.0.1:2319",
		DataDir:         "./styx-data",
		Storage:         daemon.StoragePebble,
		Sync:            true,
		SyncConsume:     true,
		LogLevel:        slog.LevelInfo,
		LogFormat:       "text",
		ShutdownTimeout: 30 * time.Second,
		MaxRequestBytes: transport.DefaultMaxRequestBytes,
		BodyReadTimeout: transport.DefaultBodyReadTimeout,
		MaxConnections:  daemon.DefaultMaxConnections,
	}
}

// daemonConfig translates s into the server's Config, logging to log.
func (s serverSettings) daemonConfig(log *slog.Logger) daemon.Config {
	return daemon.Config{
		Listen:      s.Listen,
		Storage:     s.Storage,
		PostgresURL: s.PostgresURL,
		// Several PostgreSQL clusters (ADR 0023).
		PostgresClusters:       s.PostgresClusters,
		PostgresClusterWeights: s.PostgresClusterWeights,
		DataDir:                s.DataDir,
		NoSync:                 !s.Sync,
		// Only meaningful with sync on: with it off nothing waits.
		ConsumeBeforeSync:        s.Sync && !s.SyncConsume,
		SyncCompletes:            s.SyncComplete,
		SyncLeases:               s.SyncLease,
		ShutdownTimeout:          s.ShutdownTimeout,
		MaxRequestBytes:          s.MaxRequestBytes,
		MaxInflightBytes:         s.MaxInflightBytes,
		MaxInflightBytesPerKey:   s.MaxInflightBytesPerKey,
		MaxConnectionsPerAddress: s.MaxConnectionsPerAddress,
		MaxDeduplicationIDs:      s.MaxDeduplicationIDs,
		BodyReadTimeout:          s.BodyReadTimeout,
		MaxConnections:           s.MaxConnections,
		MinFreeBytes:             s.MinFreeBytes,
		DebugListen:              s.DebugListen,
		Auth:                     s.Auth,
		Insecure:                 s.Insecure,
		DebugAllowRemote:         s.DebugAllowRemote,
		AllowedHosts:             s.AllowedHosts,
		AdminKeyFile:             s.AdminKeyFile,
		SecretKeyFile:            s.SecretKeyFile,
		SQSRegion:                s.SQSRegion,
		SQSAccountID:             s.SQSAccountID,
		TLSCertFile:              s.TLSCert,
		TLSKeyFile:               s.TLSKey,
		TLSClientCAFile:          s.TLSClientCA,
		Log:                      log,
	}
}

// newLogger returns a logger writing s.LogFormat at s.LogLevel to w.
func (s serverSettings) newLogger(w io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{Level: s.LogLevel}
	if s.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// fileConfig is the YAML config file of `styx server`. It is kept apart
// from daemon.Config: the file is a user-facing format with its own key
// names, the Config is the server's runtime input. A nil field is unset.
type fileConfig struct {
	Listen                   *string           `yaml:"listen"`
	DataDir                  *string           `yaml:"data_dir"`
	Storage                  *string           `yaml:"storage"`
	PostgresURL              *string           `yaml:"postgres_url"`
	PostgresClusters         map[string]string `yaml:"postgres_clusters"`
	PostgresClusterWeights   map[string]int    `yaml:"postgres_cluster_weights"`
	Sync                     *bool             `yaml:"sync"`
	SyncConsume              *bool             `yaml:"sync_consume"`
	SyncComplete             *bool             `yaml:"sync_complete"`
	SyncLease                *bool             `yaml:"sync_lease"`
	LogLevel                 *string           `yaml:"log_level"`
	LogFormat                *string           `yaml:"log_format"`
	ShutdownTimeout          *time.Duration    `yaml:"shutdown_timeout"`
	MaxRequestBytes          *int64            `yaml:"max_request_bytes"`
	MaxInflightBytes         *int64            `yaml:"max_inflight_bytes"`
	MaxInflightBytesPerKey   *int64            `yaml:"max_inflight_bytes_per_key"`
	MaxConnectionsPerAddress *int              `yaml:"max_connections_per_address"`
	MaxDeduplicationIDs      *int              `yaml:"max_deduplication_ids"`
	BodyReadTimeout          *time.Duration    `yaml:"body_read_timeout"`
	MaxConnections           *int              `yaml:"max_connections"`
	MinFreeBytes             *int64            `yaml:"min_free_bytes"`
	DebugListen              *string           `yaml:"debug_listen"`
	Auth                     *bool             `yaml:"auth"`
	Insecure                 *bool             `yaml:"insecure"`
	DebugAllowRemote         *bool             `yaml:"debug_allow_remote"`
	AdminKeyFile             *string           `yaml:"admin_key_file"`
	SecretKeyFile            *string           `yaml:"secret_key_file"`
	SQSRegion                *string           `yaml:"sqs_region"`
	SQSAccountID             *string           `yaml:"sqs_account_id"`
	TLSCert                  *string           `yaml:"tls_cert"`
	TLSKey                   *string           `yaml:"tls_key"`
	TLSClientCA              *string           `yaml:"tls_client_ca"`
	AllowedHost              *string           `yaml:"allowed_host"`
}

// values returns the set fields of fc by YAML key, formatted as a flag or
// environment variable would give them.
func (fc *fileConfig) values() map[string]string {
	out := map[string]string{}
	put := func(key string, v *string) {
		if v != nil {
			out[key] = *v
		}
	}
	put("listen", fc.Listen)
	put("data_dir", fc.DataDir)
	put("storage", fc.Storage)
	put("postgres_url", fc.PostgresURL)
	if fc.PostgresClusters != nil {
		out["postgres_clusters"] = joinPairs(fc.PostgresClusters)
	}
	if fc.PostgresClusterWeights != nil {
		w := map[string]string{}
		for k, v := range fc.PostgresClusterWeights {
			w[k] = strconv.Itoa(v)
		}
		out["postgres_cluster_weights"] = joinPairs(w)
	}
	put("log_level", fc.LogLevel)
	put("log_format", fc.LogFormat)
	put("debug_listen", fc.DebugListen)
	put("admin_key_file", fc.AdminKeyFile)
	put("secret_key_file", fc.SecretKeyFile)
	put("sqs_region", fc.SQSRegion)
	put("sqs_account_id", fc.SQSAccountID)
	put("tls_cert", fc.TLSCert)
	put("tls_key", fc.TLSKey)
	put("tls_client_ca", fc.TLSClientCA)
	put("allowed_host", fc.AllowedHost)
	for key, b := range map[string]*bool{"sync": fc.Sync, "sync_consume": fc.SyncConsume, "sync_complete": fc.SyncComplete, "sync_lease": fc.SyncLease, "auth": fc.Auth, "insecure": fc.Insecure, "debug_allow_remote": fc.DebugAllowRemote} {
		if b != nil {
			out[key] = strconv.FormatBool(*b)
		}
	}
	if fc.ShutdownTimeout != nil {
		out["shutdown_timeout"] = fc.ShutdownTimeout.String()
	}
	if fc.BodyReadTimeout != nil {
		out["body_read_timeout"] = fc.BodyReadTimeout.String()
	}
	if fc.MaxRequestBytes != nil {
		out["max_request_bytes"] = strconv.FormatInt(*fc.MaxRequestBytes, 10)
	}
	if fc.MaxInflightBytes != nil {
		out["max_inflight_bytes"] = strconv.FormatInt(*fc.MaxInflightBytes, 10)
	}
	if fc.MaxConnections != nil {
		out["max_connections"] = strconv.Itoa(*fc.MaxConnections)
	}
	if fc.MaxInflightBytesPerKey != nil {
		out["max_inflight_bytes_per_key"] = strconv.FormatInt(*fc.MaxInflightBytesPerKey, 10)
	}
	if fc.MaxConnectionsPerAddress != nil {
		out["max_connections_per_address"] = strconv.Itoa(*fc.MaxConnectionsPerAddress)
	}
	if fc.MaxDeduplicationIDs != nil {
		out["max_deduplication_ids"] = strconv.Itoa(*fc.MaxDeduplicationIDs)
	}
	if fc.MinFreeBytes != nil {
		out["min_free_bytes"] = strconv.FormatInt(*fc.MinFreeBytes, 10)
	}
	return out
}

// fileKeys returns the YAML keys of fileConfig.
func fileKeys() []string {
	t := reflect.TypeFor[fileConfig]()
	keys := make([]string, 0, t.NumField())
	for f := range t.Fields() {
		keys = append(keys, strings.Split(f.Tag.Get("yaml"), ",")[0])
	}
	return keys
}

// readFileConfig reads the YAML file at path. A key fileConfig does not
// know is an error naming the key and its line.
func readFileConfig(path string) (*fileConfig, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	var doc yaml.Node
	if err := yaml.NewDecoder(bytes.NewReader(b)).Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) { // an empty file sets nothing
			return &fileConfig{}, nil
		}
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	if root.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("config %s: line %d: want a mapping of keys to values", path, root.Line)
	}
	known := fileKeys()
	for i := 0; i < len(root.Content); i += 2 {
		k := root.Content[i]
		if !slices.Contains(known, k.Value) {
			return nil, fmt.Errorf("config %s: line %d: unknown key %q (known keys: %s)", path, k.Line, k.Value, strings.Join(known, ", "))
		}
	}
	var fc fileConfig
	if err := root.Decode(&fc); err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	return &fc, nil
}

// serverSetting is one setting of `styx server` and the three places it can
// come from.
type serverSetting struct {
	key  string // YAML key, e.g. "data_dir"
	flag string // flag name, e.g. "data-dir"
	env  string // environment variable, e.g. "STYX_DATA_DIR"
	// set parses v (as a flag, an environment variable or formatted file
	// value) into s.
	set func(s *serverSettings, v string) error
}

// serverSettingTable lists every setting, in the order they are applied.
func serverSettingTable() []serverSetting {
	return []serverSetting{
		{"listen", "listen", "STYX_LISTEN", func(s *serverSettings, v string) error {
			if v == "" {
				return errors.New("an address host:port is required")
			}
			s.Listen = v
			return nil
		}},
		{"data_dir", "data-dir", "STYX_DATA_DIR", func(s *serverSettings, v string) error {
			if v == "" {
				return errors.New("a directory is required")
			}
			s.DataDir = v
			return nil
		}},
		{"storage", "storage", "STYX_STORAGE", func(s *serverSettings, v string) error {
			if v != daemon.StoragePebble && v != daemon.StorageMemory && v != daemon.StoragePostgres {
				return fmt.Errorf("%q is not one of %s, %s, %s", v, daemon.StoragePebble, daemon.StorageMemory, daemon.StoragePostgres)
			}
			s.Storage = v
			return nil
		}},
		{"postgres_url", "postgres-url", "STYX_POSTGRES_URL", func(s *serverSettings, v string) error {
			s.PostgresURL = v
			return nil
		}},
		{"postgres_clusters", "postgres-cluster", "STYX_POSTGRES_CLUSTERS", func(s *serverSettings, v string) error {
			m, err := splitPairs(v, "NAME=URL")
			if err != nil {
				return err
			}
			s.PostgresClusters = m
			return nil
		}},
		{"postgres_cluster_weights", "postgres-cluster-weight", "STYX_POSTGRES_CLUSTER_WEIGHTS", func(s *serverSettings, v string) error {
			m, err := splitPairs(v, "NAME=WEIGHT")
			if err != nil {
				return err
			}
			s.PostgresClusterWeights = map[string]int{}
			for name, w := range m {
				n, err := strconv.Atoi(w)
				if err != nil || n < 0 {
					return fmt.Errorf("cluster %q: weight %q is not a number 0 or more", name, w)
				}
				s.PostgresClusterWeights[name] = n
			}
			return nil
		}},
		{"sync", "sync", "STYX_SYNC", boolSetting(func(s *serverSettings) *bool { return &s.Sync })},
		{"sync_consume", "sync-consume", "STYX_SYNC_CONSUME", boolSetting(func(s *serverSettings) *bool { return &s.SyncConsume })},
		{"sync_complete", "sync-complete", "STYX_SYNC_COMPLETE", boolSetting(func(s *serverSettings) *bool { return &s.SyncComplete })},
		{"sync_lease", "sync-lease", "STYX_SYNC_LEASE", boolSetting(func(s *serverSettings) *bool { return &s.SyncLease })},
		{"log_level", "log-level", "STYX_LOG_LEVEL", func(s *serverSettings, v string) error {
			levels := map[string]slog.Level{"debug": slog.LevelDebug, "info": slog.LevelInfo, "warn": slog.LevelWarn, "error": slog.LevelError}
			l, ok := levels[strings.ToLower(v)]
			if !ok {
				return fmt.Errorf("%q is not one of debug, info, warn, error", v)
			}
			s.LogLevel = l
			return nil
		}},
		{"log_format", "log-format", "STYX_LOG_FORMAT", func(s *serverSettings, v string) error {
			if v != "text" && v != "json" {
				return fmt.Errorf("%q is not one of text, json", v)
			}
			s.LogFormat = v
			return nil
		}},
		{"shutdown_timeout", "shutdown-timeout", "STYX_SHUTDOWN_TIMEOUT", func(s *serverSettings, v string) error {
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				return fmt.Errorf("%q is not a positive duration such as 30s", v)
			}
			s.ShutdownTimeout = d
			return nil
		}},
		{"max_request_bytes", "max-request-bytes", "STYX_MAX_REQUEST_BYTES", func(s *serverSettings, v string) error {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n <= 0 {
				return fmt.Errorf("%q is not a positive number of bytes such as 67108864", v)
			}
			s.MaxRequestBytes = n
			return nil
		}},
		{"max_inflight_bytes", "max-inflight-bytes", "STYX_MAX_INFLIGHT_BYTES", func(s *serverSettings, v string) error {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 {
				return fmt.Errorf("%q is not a number of bytes such as 268435456 (0: the default)", v)
			}
			s.MaxInflightBytes = n
			return nil
		}},
		{"max_inflight_bytes_per_key", "max-inflight-bytes-per-key", "STYX_MAX_INFLIGHT_BYTES_PER_KEY", func(s *serverSettings, v string) error {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 {
				return fmt.Errorf("%q is not a number of bytes such as 201326592 (0: the default)", v)
			}
			s.MaxInflightBytesPerKey = n
			return nil
		}},
		{"body_read_timeout", "body-read-timeout", "STYX_BODY_READ_TIMEOUT", func(s *serverSettings, v string) error {
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				return fmt.Errorf("%q is not a positive duration such as 30s", v)
			}
			s.BodyReadTimeout = d
			return nil
		}},
		{"max_connections", "max-connections", "STYX_MAX_CONNECTIONS", func(s *serverSettings, v string) error {
			n, err := strconv.Atoi(v)
			if err != nil || n <= 0 {
				return fmt.Errorf("%q is not a positive number such as 4096", v)
			}
			s.MaxConnections = n
			return nil
		}},
		{"max_connections_per_address", "max-connections-per-address", "STYX_MAX_CONNECTIONS_PER_ADDRESS", func(s *serverSettings, v string) error {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				return fmt.Errorf("%q is not a number such as 1024 (0: the default)", v)
			}
			s.MaxConnectionsPerAddress = n
			return nil
		}},
		{"max_deduplication_ids", "max-deduplication-ids", "STYX_MAX_DEDUPLICATION_IDS", func(s *serverSettings, v string) error {
			n, err := strconv.Atoi(v)
			if err != nil || n < -1 {
				return fmt.Errorf("%q is not a number of ids such as 100000 (0: the default, -1: no limit)", v)
			}
			s.MaxDeduplicationIDs = n
			return nil
		}},
		{"min_free_bytes", "min-free-bytes", "STYX_MIN_FREE_BYTES", func(s *serverSettings, v string) error {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < -1 {
				return fmt.Errorf("%q is not a number of bytes such as 134217728, 0 for the default or -1 to disable", v)
			}
			s.MinFreeBytes = n
			return nil
		}},
		{"debug_listen", "debug-listen", "STYX_DEBUG_LISTEN", func(s *serverSettings, v string) error {
			s.DebugListen = v
			return nil
		}},
		{"auth", "auth", "STYX_AUTH", boolSetting(func(s *serverSettings) *bool { return &s.Auth })},
		{"insecure", "insecure", "STYX_INSECURE", boolSetting(func(s *serverSettings) *bool { return &s.Insecure })},
		{"allowed_host", "allowed-host", "STYX_ALLOWED_HOST", func(s *serverSettings, v string) error {
			s.AllowedHosts = nil
			for h := range strings.SplitSeq(v, ",") {
				if h = strings.TrimSpace(h); h != "" {
					s.AllowedHosts = append(s.AllowedHosts, h)
				}
			}
			return nil
		}},
		{"debug_allow_remote", "debug-allow-remote", "STYX_DEBUG_ALLOW_REMOTE", boolSetting(func(s *serverSettings) *bool { return &s.DebugAllowRemote })},
		{"admin_key_file", "admin-key-file", "STYX_ADMIN_KEY_FILE", func(s *serverSettings, v string) error {
			s.AdminKeyFile = v
			return nil
		}},
		{"secret_key_file", "secret-key-file", "STYX_SECRET_KEY_FILE", func(s *serverSettings, v string) error {
			s.SecretKeyFile = v
			return nil
		}},
		{"sqs_region", "sqs-region", "STYX_SQS_REGION", func(s *serverSettings, v string) error {
			s.SQSRegion = v
			return nil
		}},
		{"sqs_account_id", "sqs-account-id", "STYX_SQS_ACCOUNT_ID", func(s *serverSettings, v string) error {
			s.SQSAccountID = v
			return nil
		}},
		{"tls_cert", "tls-cert", "STYX_TLS_CERT", func(s *serverSettings, v string) error {
			s.TLSCert = v
			return nil
		}},
		{"tls_key", "tls-key", "STYX_TLS_KEY", func(s *serverSettings, v string) error {
			s.TLSKey = v
			return nil
		}},
		{"tls_client_ca", "tls-client-ca", "STYX_TLS_CLIENT_CA", func(s *serverSettings, v string) error {
			s.TLSClientCA = v
			return nil
		}},
	}
}

// boolSetting parses "true" or "false" into the field field returns.
func boolSetting(field func(*serverSettings) *bool) func(s *serverSettings, v string) error {
	return func(s *serverSettings, v string) error {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("%q is not true or false", v)
		}
		*field(s) = b
		return nil
	}
}

// addServerFlags defines the flags of `styx server` on fs.
func addServerFlags(fs *pflag.FlagSet) {
	d := defaultServerSettings()
	fs.String("config", "", "YAML config file (env "+envConfig+"); its keys are the flag names with '_' for '-'")
	fs.String("listen", d.Listen, "TCP host:port to serve on; port 0 picks a free port (env STYX_LISTEN)")
	fs.String("data-dir", d.DataDir, "Pebble data directory (env STYX_DATA_DIR)")
	fs.String("storage", d.Storage, "storage backend: pebble (durable, one node), memory (lost at exit) "+
		"or postgres (durable, several nodes may share the database; needs --postgres-url) (env STYX_STORAGE)")
	fs.String("postgres-url", "", "PostgreSQL connection URL for --storage postgres, "+
		"e.g. postgres://styx@db:5432/styx?sslmode=require (env STYX_POSTGRES_URL)")
	fs.StringArray("postgres-cluster", nil, "another PostgreSQL cluster NAME=URL for --storage postgres, repeatable (--postgres-url is "+
		"the cluster named main, which holds the catalog); each queue lives on one cluster (docs/storage/postgres.md, "+
		"\"Several clusters\") (env STYX_POSTGRES_CLUSTERS, NAME=URL;NAME=URL)")
	fs.StringArray("postgres-cluster-weight", nil, "NAME=N, repeatable: cluster NAME's share of the queues created without a cluster "+
		"(default 1; 0 takes none unless named) (env STYX_POSTGRES_CLUSTER_WEIGHTS, NAME=N;NAME=N)")
	fs.Bool("sync", d.Sync, "fsync every write before acknowledging it; turning it off (--sync=false) is faster, "+
		"but acknowledged writes may be lost on power failure (env STYX_SYNC)")
	fs.Bool("sync-consume", d.SyncConsume, "with --sync, also fsync lease, retry and renew before answering them; "+
		"--sync-consume=false answers them and completes once written (produce and dead-letter moves still wait): faster, but a crash may "+
		"deliver a completed item again or not count a lease's attempt (docs/adr/0013) (env STYX_SYNC_CONSUME)")
	fs.Bool("sync-complete", d.SyncComplete, "with --sync, also fsync complete (and SQS's DeleteMessage) before answering it; "+
		"by default a complete is answered once written and the next fsync covers it: a crash in between can only deliver "+
		"a completed item again (docs/adr/0033); PostgreSQL commits a complete before answering it either way (env STYX_SYNC_COMPLETE)")
	fs.Bool("sync-lease", d.SyncLease, "with --sync, also fsync every lease before answering it; by default a lease of items "+
		"produced within the last 2 s, with a lease timeout of at most 1 minute, is answered once written, and after a crash "+
		"the recent items are held for 1 minute so that no lease is given twice (docs/adr/0034) (env STYX_SYNC_LEASE)")
	fs.String("log-level", "info", "log level: debug, info, warn or error (env STYX_LOG_LEVEL)")
	fs.String("log-format", d.LogFormat, "log format: text or json (env STYX_LOG_FORMAT)")
	fs.Duration("shutdown-timeout", d.ShutdownTimeout, "how long a shutdown waits for in-flight requests, and each of its other steps; a shutdown ends within twice this (env STYX_SHUTDOWN_TIMEOUT)")
	fs.Int64("max-request-bytes", d.MaxRequestBytes, "largest request body, in bytes (1 MiB to 1 GiB); "+
		"a larger one is answered 400 (env STYX_MAX_REQUEST_BYTES)")
	fs.Int64("max-inflight-bytes", d.MaxInflightBytes, "the server-wide budget of request bodies in flight, in bytes (at least three times "+
		"--max-request-bytes): each request holds three times its body until answered; one that does not fit now is answered 503 "+
		"with Retry-After before its body is read; 0 is 256 MiB or three times --max-request-bytes, whichever is larger "+
		"(docs/security.md) (env STYX_MAX_INFLIGHT_BYTES)")
	fs.Int64("max-inflight-bytes-per-key", d.MaxInflightBytesPerKey, "the most of --max-inflight-bytes one API key (one client address "+
		"without --auth) may hold at once, bodies and answers together; over it that key is answered 503 while others are served; "+
		"0 is a quarter of the budget, and at least three times --max-request-bytes (docs/security.md) (env STYX_MAX_INFLIGHT_BYTES_PER_KEY)")
	fs.Duration("body-read-timeout", d.BodyReadTimeout, "how long a request body may take to arrive once its headers are read (1ms to 1h); "+
		"a slower one is answered 408 and its connection closed; long-poll leases still wait their request_timeout (env STYX_BODY_READ_TIMEOUT)")
	fs.Int("max-connections", d.MaxConnections, "most open connections to the API, idle keep-alive ones included (1 to 1000000); "+
		"at the limit the connection idle the longest is closed to make room, and when none is idle a new one is answered 503 "+
		"(env STYX_MAX_CONNECTIONS)")
	fs.Int("max-connections-per-address", d.MaxConnectionsPerAddress, "most open connections from one client address, its idle ones "+
		"closed first to make room; 0 is a quarter of --max-connections; raise it behind a proxy (env STYX_MAX_CONNECTIONS_PER_ADDRESS)")
	fs.Int("max-deduplication-ids", d.MaxDeduplicationIDs, "most deduplication ids one queue holds within their window on the memory "+
		"and Pebble backends (which keep them in memory); a produce of a new id past it is answered 454 and stores nothing; 0 is "+
		"100000, -1 no limit; PostgreSQL keeps them in its table and ignores it (env STYX_MAX_DEDUPLICATION_IDS)")
	fs.Int64("min-free-bytes", 0, "free-space watermark of the data directory, in bytes: below it produces, imports and redrives "+
		"are refused (453 'disk full') so the store can always flush and restart, and a server started below it starts read-only; "+
		"0 is twice the memtable size (128 MiB) but at most a quarter of the disk, -1 disables it; Pebble only (env STYX_MIN_FREE_BYTES)")
	fs.String("debug-listen", "", "host:port to serve Go's pprof profiles on (/debug/pprof/), without a key; must be loopback "+
		"unless --debug-allow-remote; empty is off (env STYX_DEBUG_LISTEN)")
	fs.String("allowed-host", "", "comma-separated host names a server without --auth answers besides localhost, 127.0.0.1 "+
		"and ::1 (a request naming another Host, or a browser call from another origin, is refused 403: a defence against "+
		"DNS rebinding); needed with --insecure to reach the server by another name (env STYX_ALLOWED_HOST)")
	fs.Bool("debug-allow-remote", false, "allow a non-loopback --debug-listen: anyone who reaches it can read profiles "+
		"(env STYX_DEBUG_ALLOW_REMOTE)")
	fs.Bool("auth", false, "require an API key (Authorization: Bearer <key>) on every /v1 call and /metrics; /health stays open. "+
		"Required to listen on a non-loopback address unless --insecure (env STYX_AUTH)")
	fs.Bool("insecure", false, "allow a non-loopback --listen without --auth: anyone who reaches the port can do anything (env STYX_INSECURE)")
	fs.String("admin-key-file", "", "file whose content (32+ characters, e.g. from 'openssl rand -hex 32') is a bootstrap admin key; "+
		"rotate by changing the file and restarting; needs --auth (env STYX_ADMIN_KEY_FILE)")
	fs.String("secret-key-file", "", "file of 64 hex digits (e.g. from 'openssl rand -hex 32'; mode 600) under which API keys created "+
		"from then on are sealed, so the Amazon SQS API can verify their SigV4 signatures; every PostgreSQL node needs the same file "+
		"(env STYX_SECRET_KEY_FILE)")
	fs.String("sqs-region", "", "region named in the Amazon SQS API's queue ARNs; empty is us-east-1 (env STYX_SQS_REGION)")
	fs.String("sqs-account-id", "", "account id in the Amazon SQS API's queue URLs and ARNs; empty is 000000000000 (env STYX_SQS_ACCOUNT_ID)")
	fs.String("tls-cert", "", "PEM certificate (chain) to serve HTTPS with; needs --tls-key (env STYX_TLS_CERT)")
	fs.String("tls-key", "", "PEM private key of --tls-cert (env STYX_TLS_KEY)")
	fs.String("tls-client-ca", "", "PEM CA certificates that client certificates must chain to; "+
		"set, clients without one are refused in the TLS handshake (env STYX_TLS_CLIENT_CA)")
}

// loadServerSettings resolves the server settings from the flags parsed
// into fs (defined by addServerFlags), the environment (read with
// lookupEnv; an empty variable counts as unset) and the config file named
// by --config or STYX_CONFIG. A flag wins over an environment variable,
// which wins over the file, which wins over the default. Errors name the
// setting and where its value came from.
func loadServerSettings(fs *pflag.FlagSet, lookupEnv func(string) (string, bool)) (serverSettings, error) {
	s := defaultServerSettings()
	table := serverSettingTable()

	path, _ := fs.GetString("config")
	if !fs.Changed("config") {
		path, _ = lookupEnv(envConfig)
	}
	if path != "" {
		fc, err := readFileConfig(path)
		if err != nil {
			return s, err
		}
		vals := fc.values()
		for _, st := range table {
			if v, ok := vals[st.key]; ok {
				if err := st.set(&s, v); err != nil {
					return s, fmt.Errorf("config %s: %s: %w", path, st.key, err)
				}
			}
		}
	}
	for _, st := range table {
		if v, ok := lookupEnv(st.env); ok && v != "" {
			if err := st.set(&s, v); err != nil {
				return s, fmt.Errorf("%s: %w", st.env, err)
			}
		}
	}
	for _, st := range table {
		if fs.Changed(st.flag) {
			v := fs.Lookup(st.flag).Value.String()
			if arr, err := fs.GetStringArray(st.flag); err == nil {
				v = strings.Join(arr, pairSep) // a repeatable flag
			}
			if err := st.set(&s, v); err != nil {
				return s, fmt.Errorf("--%s: %w", st.flag, err)
			}
		}
	}
	return s, nil
}

// pairSep separates the NAME=VALUE pairs of a setting's text form (the
// environment variable; a repeatable flag's values are joined with it): a
// URL may hold commas (several hosts, ADR 0021), not semicolons.
const pairSep = ";"

// splitPairs parses "NAME=VALUE;NAME=VALUE" (what, e.g. "NAME=URL", names
// the form in errors), refusing an entry without '=' and a name given
// twice.
func splitPairs(v, what string) (map[string]string, error) {
	out := map[string]string{}
	for entry := range strings.SplitSeq(v, pairSep) {
		if entry = strings.TrimSpace(entry); entry == "" {
			continue
		}
		name, val, ok := strings.Cut(entry, "=")
		if !ok || name == "" {
			return nil, fmt.Errorf("%q is not %s", entry, what)
		}
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("cluster %q is given twice", name)
		}
		out[name] = val
	}
	return out, nil
}

// joinPairs is splitPairs' inverse, in name order.
func joinPairs(m map[string]string) string {
	names := make([]string, 0, len(m))
	for name := range m {
		names = append(names, name)
	}
	slices.Sort(names)
	parts := make([]string, len(names))
	for i, name := range names {
		parts[i] = name + "=" + m[name]
	}
	return strings.Join(parts, pairSep)
}

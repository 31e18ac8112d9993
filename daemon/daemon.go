// Package daemon wires a Styx server together: storage, the queue manager,
// the service and the HTTP listener. cmd/styx parses flags, environment and
// the YAML file into a Config; tests build a Config directly.
package daemon

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"

	"github.com/styxq/styx/internal/activity"
	"github.com/styxq/styx/internal/auth"
	"github.com/styxq/styx/internal/backend/clusters"
	"github.com/styxq/styx/internal/backend/embedded"
	"github.com/styxq/styx/internal/backend/embedded/pebble"
	"github.com/styxq/styx/internal/backend/postgres"
	"github.com/styxq/styx/internal/backup"
	"github.com/styxq/styx/internal/clock"
	"github.com/styxq/styx/internal/fifo"
	"github.com/styxq/styx/internal/history"
	"github.com/styxq/styx/internal/queue"
	"github.com/styxq/styx/internal/redrive"
	"github.com/styxq/styx/internal/store"
	"github.com/styxq/styx/metrics"
	"github.com/styxq/styx/service"
	"github.com/styxq/styx/sqs"
	"github.com/styxq/styx/transport"
	"github.com/styxq/styx/web"
)

// Storage backends.
const (
	StoragePebble   = "pebble"
	StorageMemory   = "memory"
	StoragePostgres = "postgres"
)

// DefaultMaxConnections is Config.MaxConnections' default.
const DefaultMaxConnections = 4096

// Config configures a Daemon. Call SetDefaults, then Validate.
type Config struct {
	// Listen is the TCP address to serve on. Defaults to "127.0.0.1:2319";
	// port 0 picks a free port (see Daemon.Addr).
	Listen string
	// Storage is the backend: "pebble" (default; durable, in DataDir),
	// "memory" (lost at exit; for tests) or "postgres" (PostgresURL; several
	// nodes may share the database, see docs/storage/postgres.md).
	Storage string
	// PostgresURL is the database of the postgres backend, as a URL or a
	// key=value DSN (pgx syntax). Required with Storage "postgres".
	PostgresURL string
	// PostgresClusters are the PostgreSQL clusters besides PostgresURL's
	// (named "main", the catalog), by name (ADR 0023,
	// internal/backend/clusters): each queue lives on one of them. Names
	// are 1 to 63 of [a-z0-9_-], starting with a letter; "main" is
	// PostgresURL's. Empty (the default): one cluster, served exactly as
	// without this field. Storage "postgres" only.
	PostgresClusters map[string]string
	// PostgresClusterWeights are the clusters' shares of the queues created
	// without a cluster (clusters.Cluster.Weight), by name; a cluster not
	// named has weight 1. Needs PostgresClusters.
	PostgresClusterWeights map[string]int
	// PostgresMaxConns bounds the postgres connection pool; 0 means pgx's
	// default (max(4, number of CPUs)).
	PostgresMaxConns int32
	// DataDir is the Pebble data directory. Defaults to "./styx-data".
	DataDir string
	// NoSync turns off the fsync of each write: acknowledged writes may be
	// lost on power failure. Defaults to false (every produce, lease,
	// complete and retry is acknowledged only once fsynced).
	NoSync bool
	// ConsumeBeforeSync answers lease, complete, retry and renew once
	// written, before their fsync; produce and dead-letter moves still wait
	// for it (ADR 0013: a crash may then deliver a completed item again or
	// not count a lease's attempt). Pebble with sync on only; defaults to
	// false.
	ConsumeBeforeSync bool
	// SyncCompletes makes complete (and SQS's DeleteMessage) wait for its
	// fsync before it is answered, as produce does. Defaults to false: on
	// Pebble with sync on, a complete is answered once written and the
	// next fsync covers it; a crash before then can only deliver a
	// completed item again, never lose or duplicate anything else (ADR
	// 0033). PostgreSQL commits a complete before answering it either way.
	SyncCompletes bool
	// SyncLeases makes every lease wait for its fsync before it is
	// answered. Defaults to false: on Pebble with sync on, a lease of items
	// produced within the last 2 s, with a lease timeout of at most a
	// minute, is answered once written, and after a crash the recent items
	// are held for a minute, leased to nobody, so that no item is leased
	// to two consumers at once (ADR 0034). PostgreSQL commits a lease
	// before answering it either way.
	SyncLeases bool
	// MaxRequestBytes bounds request bodies, in bytes: a larger body is
	// answered 400. Defaults to 64 MiB (transport.DefaultMaxRequestBytes);
	// Validate allows 1 MiB to 1 GiB.
	MaxRequestBytes int64
	// MaxInflightBytes is the server-wide in-flight request byte budget,
	// in bytes, shared by /v1 and SQS (transport.Config.MaxInflightBytes):
	// each request holds three times its body until it is answered; one that
	// does not fit now is answered 503 with Retry-After. Defaults to 256 MiB
	// (transport.DefaultMaxInflightBytes); Validate allows three times
	// MaxRequestBytes (transport.RequestCost) to 64 GiB.
	MaxInflightBytes int64
	// MaxInflightBytesPerKey is the most of MaxInflightBytes one API key
	// may hold at once (one client address, without Auth), its requests'
	// bodies and answers together (transport.Config.MaxInflightBytesPerKey):
	// a key over it is answered 503 while others are served. Defaults to a
	// quarter of MaxInflightBytes, and at least three times MaxRequestBytes
	// (transport.DefaultMaxInflightBytesPerKey); Validate allows three times
	// MaxRequestBytes to MaxInflightBytes.
	MaxInflightBytesPerKey int64
	// MinFreeBytes is the Pebble store's free-space watermark, in bytes
	// (pebble.Config.MinFreeBytes, ADR 0015): below it, produces, imports
	// and redrives into a queue are refused (453) so a flush and a restart
	// always have room, and a server started below it opens its store
	// read-only (reads served, writes refused until there is room). 0 means
	// the default, twice the memtable size (128 MiB) but at most a quarter of
	// the filesystem; -1 disables it. Pebble storage only.
	MinFreeBytes int64
	// BodyReadTimeout bounds how long a request's body may take to arrive
	// once its headers are read (which ReadHeaderTimeout, 10s, bounds); a
	// body still incomplete is answered 408 and its connection closed. It
	// does not bound the answer: a long-poll lease still waits its
	// request_timeout. Defaults to 30s (transport.DefaultBodyReadTimeout);
	// Validate allows 1ms to 1h.
	BodyReadTimeout time.Duration
	// MaxConnections bounds the API listener's open connections (idle
	// keep-alive ones included). At the bound, the connection idle the
	// longest is closed to make room for a new one; when none is idle, the
	// new one is answered 503 and closed (transport.ConnLimiter). Defaults
	// to 4096 (DefaultMaxConnections); Validate allows 1 to 1,000,000.
	MaxConnections int
	// MaxConnectionsPerAddress bounds the connections of one client
	// address the same way (its own idle ones make room first). Defaults to
	// a quarter of MaxConnections (transport.DefaultMaxConnectionsPerAddress);
	// raise it behind a proxy, through which every client shares one
	// address. Validate allows 1 to MaxConnections.
	MaxConnectionsPerAddress int
	// MaxDeduplicationIDs bounds the deduplication ids a queue holds within
	// their window on the memory and Pebble backends, which keep them in
	// memory (embedded.Config.MaxDeduplicationIDs): a produce that would
	// hold more is refused (454) and stores nothing. 0 means the default,
	// 100,000 (embedded.DefaultMaxDeduplicationIDs); -1 disables the limit.
	// PostgreSQL keeps its ids in its table, not in memory, and ignores it.
	MaxDeduplicationIDs int
	// ShutdownTimeout bounds how long Close waits for in-flight requests,
	// redrive tasks and the queues to finish, and, separately, for the
	// storage to close (flush): Close returns within twice ShutdownTimeout
	// whatever state the storage is in. Defaults to 30s.
	ShutdownTimeout time.Duration
	// Auth makes every /v1 call and /metrics require an API key
	// (internal/auth, docs/security.md); /health stays open. Defaults to
	// false, which Validate accepts only on a loopback Listen address or
	// with Insecure.
	Auth bool
	// Insecure allows a non-loopback Listen address without Auth: anyone
	// who reaches the port can do anything. Defaults to false.
	Insecure bool
	// AdminKeyFile names a file whose content (surrounding whitespace
	// trimmed; at least 32 characters) is a bootstrap admin key, named
	// "bootstrap-admin", that is never stored. Rotate it by changing the
	// file and restarting. Requires Auth. Empty: none.
	AdminKeyFile string
	// TLSCertFile and TLSKeyFile are PEM files of the server's certificate
	// (chain) and private key; with both set the server speaks HTTPS only.
	// Empty: plain HTTP.
	TLSCertFile string
	TLSKeyFile  string
	// TLSClientCAFile is a PEM file of the CA certificates client
	// certificates must chain to; set, a TLS handshake without a valid
	// client certificate fails. Requires TLSCertFile. Empty: no client
	// certificates asked for.
	TLSClientCAFile string
	// UI serves the web UI under /ui/, open without a key even with Auth
	// (transport.Config.UI); the UI asks for a key and sends it on its own
	// /v1 calls. Nil (the default) is the built-in UI, web.Handler().
	UI http.Handler
	// DebugListen, when set, is a TCP address serving Go's pprof profiles
	// at /debug/pprof/, without authentication. Validate refuses an address
	// that is not loopback unless DebugAllowRemote. Empty (the default) is
	// off.
	DebugListen string
	// AllowedHosts are the host names (without port) a server without Auth
	// answers besides localhost, 127.0.0.1 and ::1
	// (transport.Config.AllowedHosts: a defence against DNS rebinding;
	// issue 24). With Insecure, list the names clients use to reach the
	// server. Empty: loopback names only.
	AllowedHosts []string
	// DebugAllowRemote accepts a DebugListen address that is not loopback:
	// anyone who reaches it can read profiles (and the process's command
	// line, with secrets redacted). Defaults to false (issue 24).
	DebugAllowRemote bool
	// Log receives structured logs. Defaults to slog.Default().
	Log *slog.Logger
	// Clock tells time. Defaults to the system clock.
	Clock clock.Clock
	// Store, when set, is used instead of opening Storage; the Daemon does
	// not close it. Tests use it to share a store across restarts and to
	// inject faults.
	Store store.Store
	// SQSRegion and SQSAccountID are the region and account id of the
	// Amazon SQS API's queue ARNs and URLs (package sqs). Empty:
	// sqs.DefaultRegion ("us-east-1") and sqs.DefaultAccountID
	// ("000000000000").
	SQSRegion    string
	SQSAccountID string
	// SecretKeyFile names a file of 64 hex digits (32 random bytes; mode
	// 600) under which each API key created from then on is sealed in its
	// record, so that the SQS API can verify AWS SigV4 signatures made with
	// it (ADR 0016). Every node of a PostgreSQL cluster needs the same file.
	// Empty: keys are stored hashed only, and only the bootstrap admin key
	// can sign SQS requests.
	SecretKeyFile string
	// DisableSQS turns the Amazon SQS API off: requests with an
	// "X-Amz-Target: AmazonSQS.*" header are then answered as any unknown
	// call. Defaults to false (served on the API's port).
	DisableSQS bool
}

// SetDefaults fills the zero fields.
func (c *Config) SetDefaults() {
	if c.Listen == "" {
		c.Listen = "127.0.0.1:2319"
	}
	if c.Storage == "" {
		c.Storage = StoragePebble
	}
	if c.DataDir == "" {
		c.DataDir = "./styx-data"
	}
	if c.MaxRequestBytes == 0 {
		c.MaxRequestBytes = transport.DefaultMaxRequestBytes
	}
	if c.MaxInflightBytes == 0 {
		c.MaxInflightBytes = max(transport.DefaultMaxInflightBytes, transport.RequestCost*c.MaxRequestBytes)
	}
	if c.BodyReadTimeout == 0 {
		c.BodyReadTimeout = transport.DefaultBodyReadTimeout
	}
	if c.MaxConnections == 0 {
		c.MaxConnections = DefaultMaxConnections
	}
	if c.MaxConnectionsPerAddress == 0 {
		c.MaxConnectionsPerAddress = transport.DefaultMaxConnectionsPerAddress(c.MaxConnections)
	}
	if c.MaxInflightBytesPerKey == 0 {
		c.MaxInflightBytesPerKey = min(c.MaxInflightBytes, transport.DefaultMaxInflightBytesPerKey(c.MaxInflightBytes, c.MaxRequestBytes))
	}
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = 30 * time.Second
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
	if c.Clock == nil {
		c.Clock = clock.Real{}
	}
}

// Validate reports the first invalid field, naming it and its allowed values.
func (c *Config) Validate() error {
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		return fmt.Errorf("listen: %q is not host:port: %w", c.Listen, err)
	}
	switch c.Storage {
	case StoragePebble, StorageMemory:
	case StoragePostgres:
		if c.PostgresURL == "" && c.Store == nil {
			return errors.New("postgres_url: required with storage postgres")
		}
	default:
		return fmt.Errorf("storage: %q is not one of %q, %q, %q", c.Storage, StoragePebble, StorageMemory, StoragePostgres)
	}
	if err := c.validateClusters(); err != nil {
		return err
	}
	if c.MaxRequestBytes < 1<<20 || c.MaxRequestBytes > 1<<30 {
		return fmt.Errorf("max_request_bytes: %d is out of range 1048576 (1 MiB) to 1073741824 (1 GiB)", c.MaxRequestBytes)
	}
	if c.MaxInflightBytes < transport.RequestCost*c.MaxRequestBytes || c.MaxInflightBytes > 64<<30 {
		return fmt.Errorf("max_inflight_bytes: %d is out of range %d (%d times max_request_bytes) to 68719476736 (64 GiB)",
			c.MaxInflightBytes, transport.RequestCost*c.MaxRequestBytes, transport.RequestCost)
	}
	if c.BodyReadTimeout < time.Millisecond || c.BodyReadTimeout > time.Hour {
		return fmt.Errorf("body_read_timeout: %s is out of range 1ms to 1h", c.BodyReadTimeout)
	}
	if c.MaxInflightBytesPerKey < transport.RequestCost*c.MaxRequestBytes || c.MaxInflightBytesPerKey > c.MaxInflightBytes {
		return fmt.Errorf("max_inflight_bytes_per_key: %d is out of range %d (%d times max_request_bytes) to %d (max_inflight_bytes)",
			c.MaxInflightBytesPerKey, transport.RequestCost*c.MaxRequestBytes, transport.RequestCost, c.MaxInflightBytes)
	}
	if c.MaxConnections < 1 || c.MaxConnections > 1_000_000 {
		return fmt.Errorf("max_connections: %d is out of range 1 to 1000000", c.MaxConnections)
	}
	if c.MaxConnectionsPerAddress < 1 || c.MaxConnectionsPerAddress > c.MaxConnections {
		return fmt.Errorf("max_connections_per_address: %d is out of range 1 to %d (max_connections)", c.MaxConnectionsPerAddress, c.MaxConnections)
	}
	if c.MaxDeduplicationIDs < -1 {
		return fmt.Errorf("max_deduplication_ids: %d; want a number of ids, 0 for the default (100000) or -1 for no limit", c.MaxDeduplicationIDs)
	}
	if c.ShutdownTimeout < 0 {
		return fmt.Errorf("shutdown_timeout: %s is negative", c.ShutdownTimeout)
	}
	if c.DebugListen != "" && !c.DebugAllowRemote && !loopback(c.DebugListen) {
		return fmt.Errorf("debug_listen: %s is not a loopback address: anyone who reaches it could read the server's "+
			"profiles without a key; use 127.0.0.1:PORT, or pass --debug-allow-remote to accept that", c.DebugListen)
	}
	if c.MinFreeBytes < -1 {
		return fmt.Errorf("min_free_bytes: %d; want a number of bytes, 0 for the default (twice the memtable size, at most a quarter of the disk) or -1 to disable", c.MinFreeBytes)
	}
	if !c.Auth && !c.Insecure && !c.Loopback() {
		return fmt.Errorf("listen: %s is not a loopback address and auth is off: anyone who reaches the port could "+
			"read every payload and delete every queue; turn on --auth (env STYX_AUTH, YAML auth) or, to accept that, pass --insecure", c.Listen)
	}
	if c.ConsumeBeforeSync && c.Store == nil && c.Storage != StoragePebble {
		return fmt.Errorf("sync_consume: false applies to storage %q only; storage %q answers every request once "+
			"its write is durable", StoragePebble, c.Storage)
	}
	if c.AdminKeyFile != "" && !c.Auth {
		return errors.New("admin_key_file: set, but auth is off; add --auth")
	}
	if (c.TLSCertFile == "") != (c.TLSKeyFile == "") {
		return errors.New("tls_cert, tls_key: set both or neither")
	}
	if c.TLSClientCAFile != "" && c.TLSCertFile == "" {
		return errors.New("tls_client_ca: client certificates need TLS; set tls_cert and tls_key")
	}
	return nil
}

// Loopback reports whether Listen's host is a loopback address (127.0.0.0/8,
// ::1 or "localhost"). An empty host, 0.0.0.0, :: and any other name are
// not: they may be reached from other machines.
func (c *Config) Loopback() bool { return loopback(c.Listen) }

// loopback reports whether the host:port addr names a loopback host.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Warnings returns what is unsafe about a valid configuration, each said
// loudly at start-up (WARN): auth without TLS on a non-loopback address
// (keys and payloads cross the network in clear text), and --insecure.
func (c *Config) Warnings() []string {
	var out []string
	if c.Loopback() {
		return nil
	}
	if c.Auth && !c.TLS() {
		out = append(out, "INSECURE: auth is on but TLS is off on a non-loopback address: API keys and payloads cross "+
			"the network in clear text and can be read or replayed by anyone on the path; set --tls-cert and --tls-key")
	}
	if !c.Auth {
		out = append(out, "INSECURE: --insecure: serving a non-loopback address without auth; anyone who reaches it can "+
			"read every payload, delete every queue and redrive any dead-letter queue")
	}
	return out
}

// TLS reports whether the server speaks HTTPS.
func (c *Config) TLS() bool { return c.TLSCertFile != "" }

// tlsConfig loads the certificate, key and client CAs.
func (c *Config) tlsConfig() (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(c.TLSCertFile, c.TLSKeyFile)
	if err != nil {
		return nil, fmt.Errorf("tls_cert, tls_key: %w", err)
	}
	tc := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if c.TLSClientCAFile != "" {
		pem, err := os.ReadFile(c.TLSClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("tls_client_ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("tls_client_ca: %s holds no PEM certificate", c.TLSClientCAFile)
		}
		tc.ClientCAs, tc.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return tc, nil
}

// keys opens the API keys over ks, with the bootstrap admin key read from
// AdminKeyFile.
func (c *Config) keys(ks store.KeyStore) (*auth.Keys, error) {
	var bootstrap string
	if c.AdminKeyFile != "" {
		st, err := os.Stat(c.AdminKeyFile)
		if err != nil {
			return nil, fmt.Errorf("admin_key_file: %w", err)
		}
		// Issue 24: a key file others may write lets them choose the admin
		// key; one others may read gives it away.
		if mode := st.Mode().Perm(); mode&0o022 != 0 {
			return nil, fmt.Errorf("admin_key_file %s: mode %#o lets other users write it, so they could choose the admin key; "+
				"chmod 600 it", c.AdminKeyFile, mode)
		} else if mode&0o044 != 0 {
			c.Log.Warn("admin key file is readable by other users; chmod 600 it", "file", c.AdminKeyFile, "mode", fmt.Sprintf("%#o", mode))
		}
		b, err := os.ReadFile(c.AdminKeyFile)
		if err != nil {
			return nil, fmt.Errorf("admin_key_file: %w", err)
		}
		bootstrap = strings.TrimSpace(string(b))
		if err := auth.CheckBootstrapKey(bootstrap); err != nil {
			return nil, fmt.Errorf("admin_key_file %s: %w", c.AdminKeyFile, err)
		}
	}
	var secret []byte
	if c.SecretKeyFile != "" {
		st, err := os.Stat(c.SecretKeyFile)
		if err != nil {
			return nil, fmt.Errorf("secret_key_file: %w", err)
		}
		if mode := st.Mode().Perm(); mode&0o077 != 0 {
			return nil, fmt.Errorf("secret_key_file %s: mode %#o lets other users read or write it, and it unseals every API key; chmod 600 it",
				c.SecretKeyFile, mode)
		}
		if secret, err = auth.ReadSecretKeyFile(c.SecretKeyFile); err != nil {
			return nil, err
		}
	}
	return auth.New(auth.Config{Store: ks, BootstrapKey: bootstrap, Clock: c.Clock, Log: c.Log, SecretKey: secret})
}

// redactedCmdline is pprof's cmdline page with secrets left out: the value of
// any flag naming a URL, password, key or token (--postgres-url=... and
// --postgres-url ...) and any password in a URL's user info (issue 24: it
// showed a PostgreSQL password passed as a flag).
func redactedCmdline(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = io.WriteString(w, strings.Join(RedactArgs(os.Args), "\x00"))
}

// secretFlag matches the flags whose values are secrets.
var secretFlag = regexp.MustCompile(`(?i)^--?[a-z0-9-]*(url|dsn|password|secret|token|key)$`)

// urlPassword matches the password of a URL's user info.
var urlPassword = regexp.MustCompile(`(://[^:/@\s]*:)[^@/\s]*@`)

// RedactArgs returns args with the values of secret flags replaced by
// "REDACTED" and passwords in URLs by "REDACTED". Prefer STYX_POSTGRES_URL
// or the YAML file to a --postgres-url flag: the command line is visible to
// every user of the host (ps) as well.
func RedactArgs(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		name, _, hasValue := strings.Cut(a, "=")
		switch {
		case secretFlag.MatchString(name) && hasValue:
			out[i] = name + "=REDACTED"
		case i > 0 && secretFlag.MatchString(args[i-1]) && !strings.Contains(args[i-1], "="):
			out[i] = "REDACTED"
		default:
			out[i] = urlPassword.ReplaceAllString(a, "${1}REDACTED@")
		}
	}
	return out
}

// serverLog is the HTTP server's error log: its lines go to the server's
// log at WARN, and those of failed TLS handshakes, which anyone who reaches
// the port can cause, at most 5 at once and one a second after, the lines
// left out counted in the next (issue 24).
type serverLog struct {
	log       *slog.Logger
	handshake *rate.Limiter
	dropped   atomic.Int64
}

func newServerLog(l *slog.Logger) *serverLog {
	return &serverLog{log: l, handshake: rate.NewLimiter(rate.Every(time.Second), 5)}
}

// Write logs one line of net/http's error log.
func (s *serverLog) Write(p []byte) (int, error) {
	line := strings.TrimSpace(string(p))
	var attrs []any
	if strings.Contains(line, "TLS handshake error") {
		if !s.handshake.Allow() {
			s.dropped.Add(1)
			return len(p), nil
		}
		if n := s.dropped.Swap(0); n > 0 {
			attrs = append(attrs, "suppressed", n)
		}
	}
	s.log.Warn(line, attrs...)
	return len(p), nil
}

// Daemon is a running server.
type Daemon struct {
	cfg       Config
	store     store.Store
	ownsStore bool
	// releaseDir gives up the claim on the Pebble data directory
	// (claimDataDir) once the store is closed; nil for another store.
	releaseDir func()
	manager    queue.Queues
	redrives   *redrive.Runner
	server     *http.Server
	listener   net.Listener
	served     chan error
	debug      *http.Server
	// debugListener is DebugListen's listener, bound by New before it
	// opens storage (nil without DebugListen).
	debugListener net.Listener
	// closeOnce lets the first Close shut the daemon down; closed is closed
	// once it has, closeErr (written before) its result.
	closeOnce sync.Once
	closed    chan struct{}
	closeErr  error
	// Metrics are the server's collectors.
	Metrics *metrics.Metrics

	// stopHistory ends the queue history's sampler (internal/history).
	stopHistory func()
}

// New binds cfg.Listen (and cfg.DebugListen), then opens storage, starts
// every queue and serves HTTP. It sets defaults and validates cfg itself.
// The ports are bound first so that a busy one fails the start before
// storage is opened, which would create the data directory (issue 41); a
// failure after closes them again.
func New(ctx context.Context, cfg Config) (*Daemon, error) {
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	d := &Daemon{cfg: cfg, store: cfg.Store, served: make(chan error, 1), closed: make(chan struct{}), Metrics: metrics.New()}
	if err := d.bind(); err != nil {
		return nil, err
	}
	if _, err := d.start(ctx); err != nil {
		d.unbind()
		return nil, err
	}
	return d, nil
}

// bind listens on cfg.Listen and cfg.DebugListen.
func (d *Daemon) bind() error {
	l, err := net.Listen("tcp", d.cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", d.cfg.Listen, err)
	}
	d.listener = l
	if d.cfg.DebugListen != "" {
		if d.debugListener, err = net.Listen("tcp", d.cfg.DebugListen); err != nil {
			_ = l.Close()
			return fmt.Errorf("debug listen on %s: %w", d.cfg.DebugListen, err)
		}
	}
	return nil
}

// unbind closes the listeners of a start that failed.
func (d *Daemon) unbind() {
	_ = d.listener.Close()
	if d.debugListener != nil {
		_ = d.debugListener.Close()
	}
}

// start opens storage, starts every queue and serves on the bound
// listeners.
func (d *Daemon) start(ctx context.Context) (*Daemon, error) {
	cfg := d.cfg
	if cfg.Storage == StoragePostgres && cfg.Store == nil {
		return d.startPostgres(ctx)
	}
	if d.store == nil {
		switch cfg.Storage {
		case StorageMemory:
			s, err := pebble.OpenMemory()
			if err != nil {
				return nil, fmt.Errorf("open storage: %w", err)
			}
			d.store = s
		default:
			// pebble.Open checks the data directory (issue 36): one that
			// other users may access is tightened to 0700 when it is this
			// user's store or empty, and refused otherwise, naming the
			// chmod to run; its files are created 0600 whatever the umask.
			// A directory another server of this process holds is
			// refused here (Pebble's lock file says so only by its text);
			// one another process holds, by the lock's EAGAIN.
			release, ok := claimDataDir(cfg.DataDir)
			if !ok {
				return nil, fmt.Errorf("open storage: data directory %s is in use by another server in this process", cfg.DataDir)
			}
			s, err := pebble.Open(pebble.Config{Dir: cfg.DataDir, NoSync: cfg.NoSync, Logger: cfg.Log,
				MinFreeBytes: cfg.MinFreeBytes, OnFault: d.Metrics.CountStorageFault, OnSync: d.Metrics.ObserveStorageSync})
			if err != nil {
				release()
				if errors.Is(err, syscall.EAGAIN) {
					return nil, fmt.Errorf("open storage: data directory %s is in use by another server: %w", cfg.DataDir, err)
				}
				return nil, fmt.Errorf("open storage: %w", err)
			}
			d.store, d.releaseDir = s, release
		}
		d.ownsStore = true
	}
	m, err := embedded.NewManager(ctx, embedded.Config{Store: d.store, Clock: cfg.Clock, Log: cfg.Log, Metrics: d.Metrics,
		ConsumeBeforeSync: cfg.ConsumeBeforeSync, SyncCompletes: cfg.SyncCompletes, SyncLeases: cfg.SyncLeases, MaxDeduplicationIDs: cfg.MaxDeduplicationIDs})
	if err != nil {
		d.closeStore()
		return nil, err
	}
	return d.serve(ctx, m, d.store, d.store, d.store, d.store)
}

// startPostgres starts a node on the postgres backend: the postgres manager
// owns the connection pool and is the redrive runner's task store. With
// several clusters, the router of internal/backend/clusters does.
func (d *Daemon) startPostgres(ctx context.Context) (*Daemon, error) {
	if len(d.cfg.PostgresClusters) > 0 {
		return d.startClusters(ctx)
	}
	m, err := postgres.Open(ctx, postgres.Config{URL: d.cfg.PostgresURL, MaxConns: d.cfg.PostgresMaxConns,
		Clock: d.cfg.Clock, Log: d.cfg.Log, Metrics: d.Metrics})
	if err != nil {
		return nil, fmt.Errorf("open storage: %w", err)
	}
	return d.serve(ctx, m, m.Store(), m.Store(), m.Store(), m.Store())
}

// backend is a backend's queue manager as serve needs it: the queues, and
// the sampler of the queue gauges (metrics.RegisterQueueSampler), which
// stays out of queue.Queues so that the domain imports no metrics.
// Implemented by embedded.Manager, postgres.Manager and clusters.Router.
type backend interface {
	queue.Queues
	// Sample returns every queue's state for the queue gauges.
	Sample() []metrics.QueueSample
}

// serve starts the redrive runner and the HTTP server over m.
func (d *Daemon) serve(ctx context.Context, m backend, tasks store.TaskStore, ks store.KeyStore, hs store.HistoryStore,
	as store.ActivityStore) (*Daemon, error) {
	cfg := d.cfg
	d.manager = m
	d.Metrics.RegisterQueueSampler(m.Sample)
	guard, _ := d.store.(store.Guard)
	d.Metrics.RegisterStorageHealth(func() (readOnly, lowSpace bool) {
		if guard == nil {
			return false, false
		}
		return guard.WriteFault() != nil, guard.InsertFault() != nil
	})
	keys, err := cfg.keys(ks)
	if err != nil {
		m.Close()
		d.closeStore()
		return nil, err
	}
	var tlsCfg *tls.Config
	if cfg.TLS() {
		if tlsCfg, err = cfg.tlsConfig(); err != nil {
			m.Close()
			d.closeStore()
			return nil, err
		}
	}
	// The queue history counts the produces and completes of both APIs and
	// the redrives' arrivals, and keeps its minutes in the store (ADR 0025).
	hist := d.startHistory(m, hs)
	counted := history.Counting(m, hist)
	d.redrives, err = redrive.New(ctx, redrive.Config{Queues: counted, Store: tasks, Clock: cfg.Clock, Log: cfg.Log, Metrics: d.Metrics})
	if err != nil {
		d.stopHistory()
		m.Close()
		d.closeStore()
		return nil, err
	}
	ui := cfg.UI
	if ui == nil {
		ui = web.Handler()
	}
	var sqsHandler *sqs.Handler
	if !cfg.DisableSQS {
		// A shared store (PostgreSQL) keeps the FIFO answers of every node;
		// the embedded backends' SQS door keeps its own (one node).
		fs, _ := hs.(fifo.Store)
		sqsHandler = sqs.New(sqs.Config{Queues: counted, Redrives: d.redrives, Clock: cfg.Clock, Log: cfg.Log, Region: cfg.SQSRegion,
			AccountID: cfg.SQSAccountID, MaxRequestBytes: cfg.MaxRequestBytes, FIFO: fs})
	}
	// The activity log (issue 49): the records of the audited calls, in
	// the store, written by the pipeline, read by activity.list.
	acts := activity.New(activity.Config{Store: as, Clock: cfg.Clock, Log: cfg.Log, WriteErrors: d.Metrics.RegisterActivity()})
	// Several PostgreSQL clusters: /health names each one's state, and one
	// down is 200 "degraded" (ADR 0023).
	var degraded func() string
	var clusterStates func() map[string]string
	if r, ok := m.(*clusters.Router); ok {
		degraded, clusterStates = r.Degraded, r.State
		d.Metrics.RegisterClusters(r.State)
	}
	// Online backups of the embedded store (issue 47); none on PostgreSQL.
	snapshots, _ := backup.SourceOf(d.store)
	h := transport.NewHandler(transport.Config{
		SQS: sqsHandler, Activity: acts,
		Service: service.New(counted, d.redrives, cfg.Clock).WithMaxLeaseBytes(cfg.MaxRequestBytes).WithHistory(hist).WithKeys(keys).WithAttributes(sqs.DescribeAttributes).WithActivity(acts), Metrics: d.Metrics, Log: cfg.Log, MaxRequestBytes: cfg.MaxRequestBytes,
		MaxInflightBytes: cfg.MaxInflightBytes, MaxInflightBytesPerKey: cfg.MaxInflightBytesPerKey,
		BodyReadTimeout: cfg.BodyReadTimeout, Keys: keys, Auth: cfg.Auth, UI: ui, AllowedHosts: cfg.AllowedHosts,
		Backup: snapshots,
		Health: func() string {
			if guard != nil {
				return guard.Health()
			}
			if h, ok := m.(interface{ Health() string }); ok {
				return h.Health() // postgres: can the database take writes?
			}
			return ""
		},
		Degraded: degraded,
		Clusters: clusterStates,
	})
	// The limits count TCP connections, TLS handshakes in progress
	// included; idle ones make room for new ones (transport.ConnLimiter).
	var refused prometheus.Counter
	conns := transport.NewConnLimiter(cfg.MaxConnections, cfg.MaxConnectionsPerAddress, tlsCfg == nil, func() { refused.Inc() })
	refused = d.Metrics.RegisterAdmission(h.Inflight, conns.Open)
	d.listener = conns.Listen(d.listener)
	if tlsCfg != nil {
		d.listener = tls.NewListener(d.listener, tlsCfg)
	}
	d.server = &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute, ConnState: conns.ConnState,
		ErrorLog: log.New(newServerLog(cfg.Log), "", 0)}
	go func() { d.served <- d.server.Serve(d.listener) }()
	if d.debugListener != nil {
		d.serveDebug(d.debugListener)
	}
	for _, w := range cfg.Warnings() {
		cfg.Log.Warn(w, "listen", cfg.Listen)
	}
	attrs := []any{"listen", d.listener.Addr().String(), "storage", cfg.Storage, "auth", cfg.Auth, "tls", cfg.TLS()}
	if cfg.Store == nil && cfg.Storage == StoragePebble {
		attrs = append(attrs, "data_dir", cfg.DataDir, "sync", !cfg.NoSync)
		if cfg.ConsumeBeforeSync && !cfg.NoSync {
			attrs = append(attrs, "sync_consume", false)
		}
		if cfg.SyncCompletes && !cfg.NoSync {
			attrs = append(attrs, "sync_complete", true)
		}
		if cfg.SyncLeases && !cfg.NoSync {
			attrs = append(attrs, "sync_lease", true)
		}
	}
	// The UI's address, for a person reading the log (a wildcard listen
	// address is served on every interface; the loopback name reaches it
	// from the host itself).
	attrs = append(attrs, "ui", d.uiURL())
	cfg.Log.Info("styx serving", attrs...)
	return d, nil
}

// startHistory starts the queue history of m (internal/history: the UI's
// charts and queues.history), kept in hs and sampled until Close
// (d.stopHistory, which writes the minutes not yet written).
func (d *Daemon) startHistory(m queue.Queues, hs store.HistoryStore) *history.Recorder {
	h := history.New(m, d.cfg.Clock, d.Metrics).WithStore(hs, d.cfg.Log)
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.Run(ctx)
	}()
	d.stopHistory = func() { stop(); <-done }
	return h
}

// uiURL is the address of the web UI: the endpoint with /ui/, a wildcard
// host (0.0.0.0, ::) given as localhost.
func (d *Daemon) uiURL() string {
	host, port, err := net.SplitHostPort(d.Addr())
	if err != nil {
		return d.Endpoint() + "/ui/"
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		host = "localhost"
	}
	scheme := "http"
	if d.cfg.TLS() {
		scheme = "https"
	}
	return scheme + "://" + net.JoinHostPort(host, port) + "/ui/"
}

// Addr returns the address the server listens on.
func (d *Daemon) Addr() string { return d.listener.Addr().String() }

// Endpoint returns the server's base URL, for a client: https:// when it
// serves TLS.
func (d *Daemon) Endpoint() string {
	if d.cfg.TLS() {
		return "https://" + d.Addr()
	}
	return "http://" + d.Addr()
}

// Close shuts down gracefully: it stops accepting connections, stops the
// redrive tasks and the queue history, lets the logical queues finish the
// requests they took (waiting leases are answered 454), waits for in-flight
// HTTP requests, all of it within ShutdownTimeout (and ctx), then closes
// storage (which flushes it) within ShutdownTimeout again. A step that does
// not finish in time (a queue stuck in a storage call, a store that cannot
// close after a fault) is left running and named in the error: Close
// returns within twice ShutdownTimeout whatever state the storage is in.
//
// Close may be called more than once and from several goroutines: the
// first shuts the daemon down, and every later call returns its result
// (at once when it has returned; a call made meanwhile waits for it, or for
// its own ctx).
func (d *Daemon) Close(ctx context.Context) error {
	first := false
	d.closeOnce.Do(func() { first = true })
	if !first {
		select {
		case <-d.closed:
			return d.closeErr
		case <-ctx.Done():
			return fmt.Errorf("close: waiting for the shutdown under way: %w", ctx.Err())
		}
	}
	d.closeErr = d.shutdown(ctx)
	close(d.closed)
	return d.closeErr
}

// shutdown is the first Close.
func (d *Daemon) shutdown(parent context.Context) error {
	timeout := d.cfg.ShutdownTimeout
	ctx, cancel := context.WithTimeout(parent, timeout)
	defer cancel()
	if d.debug != nil {
		_ = d.debug.Close()
	}
	shut := make(chan error, 1)
	go func() { shut <- d.server.Shutdown(ctx) }()
	// Redrive tasks stop first (they resume at the next start); then the
	// logical queues finish what they took.
	errs := []error{d.within(ctx, timeout, "stopping the redrive tasks", noError(d.redrives.Close))}
	if d.stopHistory != nil {
		errs = append(errs, d.within(ctx, timeout, "stopping the queue history", noError(d.stopHistory)))
	}
	errs = append(errs, d.within(ctx, timeout, "stopping the queues", noError(d.manager.Close)))
	// Shutdown returns by ctx's end at the latest.
	if err := <-shut; err != nil {
		_ = d.server.Close()
		errs = append(errs, fmt.Errorf("close: in-flight requests did not finish within %s: %w", timeout, err))
	}
	// Serve returns as soon as Shutdown or Close has closed the listener.
	select {
	case err := <-d.served:
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			errs = append(errs, err)
		}
	case <-time.After(time.Second):
		errs = append(errs, errors.New("close: the HTTP server did not stop serving within 1s"))
	}
	// The store closes even when the steps above ran out of time (its
	// calls still in progress then fail), within a budget of its own.
	storeCtx, cancelStore := context.WithTimeout(parent, timeout)
	defer cancelStore()
	errs = append(errs, d.within(storeCtx, timeout, "closing the storage", d.closeStore))
	return errors.Join(errs...)
}

// within runs step and waits for it until ctx ends (timeout is ctx's
// budget, for the message): a step still running then goes on in the
// background, and the error says so.
func (d *Daemon) within(ctx context.Context, timeout time.Duration, what string, step func() error) error {
	done := make(chan error, 1)
	go func() { done <- step() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		err := fmt.Errorf("close: %s did not finish within %s (%w); left running", what, timeout, ctx.Err())
		d.cfg.Log.Error("shutdown: "+what+" did not finish in time; going on without it", "timeout", timeout.String(), "error", ctx.Err())
		return err
	}
}

// noError adapts a step that reports nothing to within.
func noError(step func()) func() error {
	return func() error { step(); return nil }
}

func (d *Daemon) closeStore() error {
	if !d.ownsStore {
		return nil
	}
	err := d.store.Close()
	if d.releaseDir != nil {
		d.releaseDir()
		d.releaseDir = nil
	}
	return err
}

// dataDirs are the Pebble data directories the servers of this process
// hold, by absolute path.
var dataDirs sync.Map

// claimDataDir claims dir for one server of this process and returns the
// function that releases it; false when another server of the process
// holds it.
func claimDataDir(dir string) (release func(), ok bool) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		abs = filepath.Clean(dir)
	}
	if _, held := dataDirs.LoadOrStore(abs, struct{}{}); held {
		return nil, false
	}
	var once sync.Once
	return func() { once.Do(func() { dataDirs.Delete(abs) }) }, true
}

// serveDebug serves pprof on l.
func (d *Daemon) serveDebug(l net.Listener) {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", redactedCmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	d.debug = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = d.debug.Serve(l) }()
	d.cfg.Log.Info("pprof serving", "debug_listen", l.Addr().String())
}

// Package pgtest gives tests a PostgreSQL schema of their own in the test
// database named by STYX_TEST_POSTGRES_URL (`make pg-start` starts one and
// prints it; .ci/run always does). Without it, tests that need PostgreSQL
// are skipped with a message saying so, unless STYX_TEST_REQUIRE_POSTGRES is
// set (as in CI), which makes them fail instead.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Environment variables.
const (
	EnvURL     = "STYX_TEST_POSTGRES_URL"
	EnvRequire = "STYX_TEST_REQUIRE_POSTGRES"
	// EnvServer names the env file scripts/pgtest.sh writes beside a
	// cluster (pg_ctl path, data directory, user, options).
	EnvServer = "STYX_TEST_POSTGRES_ENV"
)

// BaseURL returns the test database's URL, or skips the test (fails it
// when EnvRequire is set) when there is none.
func BaseURL(t testing.TB) string {
	t.Helper()
	u := os.Getenv(EnvURL)
	if u == "" {
		if os.Getenv(EnvRequire) != "" {
			t.Fatalf("%s is not set but %s is: CI must provide PostgreSQL (scripts/pgtest.sh)", EnvURL, EnvRequire)
		}
		t.Skipf("PostgreSQL tests skipped: %s is not set (run `make pg-start` and export what it prints)", EnvURL)
	}
	return u
}

// URL creates a new schema in the test database, drops it when the test
// ends, and returns a URL whose connections use it (search_path), so tests
// running in parallel never see each other's queues.
func URL(t testing.TB) string {
	t.Helper()
	return SchemaURL(t, BaseURL(t))
}

// EmptyURL is URL with a new, empty schema, never one from the pool (see
// Prepare), for tests that build a schema of an earlier version and migrate
// it.
func EmptyURL(t testing.TB) string {
	t.Helper()
	return newSchemaURL(t, BaseURL(t))
}

// SchemaURL is URL on the database at base: a schema of the pool (see
// Prepare) when Prepare is set and base is the shared test database, else a
// new one, dropped at the end of the test.
func SchemaURL(t testing.TB, base string) string {
	t.Helper()
	if Prepare != nil && base == os.Getenv(EnvURL) {
		return pooledURL(t, base)
	}
	return newSchemaURL(t, base)
}

// newSchemaURL creates a schema on base, drops it at the end of the test
// and returns base with it as search_path.
func newSchemaURL(t testing.TB, base string) string {
	t.Helper()
	schema := schemaName("styx_test_")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := withAdmin(ctx, base, func(db adminDB) error {
		if _, err := db.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
			return fmt.Errorf("create schema: %w", err)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() { dropSchema(t, base, schema) })
	return WithSearchPath(base, schema)
}

// schemaName returns prefix and 12 random hex digits.
func schemaName(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// WithSearchPath returns the URL or key=value DSN base with search_path set
// to schema.
func WithSearchPath(base, schema string) string {
	if strings.HasPrefix(base, "postgres://") || strings.HasPrefix(base, "postgresql://") {
		u, err := url.Parse(base)
		if err == nil {
			q := u.Query()
			q.Set("search_path", schema)
			u.RawQuery = q.Encode()
			return u.String()
		}
	}
	return base + " search_path=" + schema
}

// scriptPath returns the path of scripts/pgtest.sh: in the module's root,
// the first directory holding go.mod above the test's working directory
// (go test runs a test binary in its package's directory). The source
// file's own path is no guide: `make test` builds with -trimpath.
func scriptPath(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Join(dir, "scripts", "pgtest.sh")
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("pgtest: no go.mod above the working directory: cannot find scripts/pgtest.sh")
		}
		dir = parent
	}
}

// Server is a PostgreSQL cluster of a test's own, started by
// scripts/pgtest.sh, for tests that stop and start the database.
type Server struct {
	// URL is the cluster's test database.
	URL string
	env map[string]string
	// frozen lists the processes the last Freeze stopped (for States).
	frozen []int
}

// StartServer starts a new cluster in a temporary directory and stops it
// when the test ends. It skips or fails like BaseURL when PostgreSQL tests
// are not enabled.
func StartServer(t testing.TB) *Server {
	t.Helper()
	BaseURL(t)
	script := scriptPath(t)
	dir, err := os.MkdirTemp("", "styx-pgtest-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if out, err := exec.Command(script, "stop", dir).CombinedOutput(); err != nil {
			t.Logf("pgtest: stop: %v: %s", err, out)
		}
		_ = os.RemoveAll(dir)
	})
	out, err := exec.Command(script, "start", dir).Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("pgtest: %s start: %v: %s%s", script, err, out, stderr)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	s := &Server{URL: lines[len(lines)-1], env: map[string]string{}}
	envText, err := os.ReadFile(filepath.Join(dir, "env"))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(envText), "\n") {
		if k, v, ok := strings.Cut(l, "="); ok {
			s.env[k] = strings.Trim(v, `"`)
		}
	}
	return s
}

// Stop stops the server (fast shutdown: sessions are disconnected).
func (s *Server) Stop(t testing.TB) {
	t.Helper()
	s.pgctl(t, "-D", s.env["PGTEST_DATA"], "-m", "fast", "-w", "stop")
}

// Crash stops the server in immediate mode (pg_ctl -m immediate): every
// process quits at once, sessions are cut without a shutdown checkpoint,
// and the next Start runs crash recovery, as after a power loss of the
// database's host.
func (s *Server) Crash(t testing.TB) {
	t.Helper()
	s.pgctl(t, "-D", s.env["PGTEST_DATA"], "-m", "immediate", "-w", "stop")
}

// TerminateBackends ends every other session on the test database with
// pg_terminate_backend, as an administrator or a connection pooler's
// failover would, and returns how many it ended.
func (s *Server) TerminateBackends(t testing.TB) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.URL)
	if err != nil {
		t.Fatalf("pgtest: terminate backends: connect: %v", err)
	}
	defer conn.Close(context.Background())
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE datname = current_database() AND pid <> pg_backend_pid()) AS ended`).Scan(&n); err != nil {
		t.Fatalf("pgtest: terminate backends: %v", err)
	}
	return n
}

// Start starts the stopped server again.
func (s *Server) Start(t testing.TB) {
	t.Helper()
	s.pgctl(t, "-D", s.env["PGTEST_DATA"], "-w", "-o", s.env["PGTEST_OPTS"], "-l", s.env["PGTEST_LOG"], "start")
}

func (s *Server) pgctl(t testing.TB, args ...string) {
	t.Helper()
	cmd := exec.Command(s.env["PGTEST_PGCTL"], args...)
	if u := s.env["PGTEST_USER"]; u != "" {
		cmd = exec.Command("runuser", append([]string{"-u", u, "--", s.env["PGTEST_PGCTL"]}, args...)...)
	}
	cmd.Dir = "/"
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("pgtest: pg_ctl %v: %v: %s", args, err, out)
	}
}

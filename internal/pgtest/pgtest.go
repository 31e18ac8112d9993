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
	"net/url"
	"os"
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

// SchemaURL is URL on the database at base.
func SchemaURL(t testing.TB, base string) string {
	t.Helper()
	var b [6]byte
	_, _ = rand.Read(b[:])
	schema := "styx_test_" + hex.EncodeToString(b[:])
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("pgtest: connect: %v", err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatalf("pgtest: create schema: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, base)
		if err != nil {
			t.Logf("pgtest: drop schema %s: %v", schema, err)
			return
		}
		defer conn.Close(context.Background())
		if _, err := conn.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			t.Logf("pgtest: drop schema %s: %v", schema, err)
		}
	})
	return WithSearchPath(base, schema)
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

// Package servertest is the whole-server test harness of Styx's own tests
// (service, sqs, worker): the loop over the storage backends
// (ForEachBackend: memory, Pebble and PostgreSQL), a server on one of them
// that a test can restart on the same storage and inject store faults into
// (Server, started with Start and its variants, on top of the public
// styxtest package), and the HTTP client helpers those tests share (create,
// produce, lease, list, poll, error assertions, an AWS SDK SQS client).
//
// PostgreSQL is in the loop when STYX_TEST_POSTGRES_URL is set (each test
// gets a schema of its own, see internal/pgtest); without it the
// PostgreSQL subtests are left out with the skip logged once, unless
// STYX_TEST_REQUIRE_POSTGRES is set, which fails the test instead.
package servertest

import (
	"context"
	"os"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/daemon"
	"github.com/styxq/styx/internal/backend/embedded/pebble"
	"github.com/styxq/styx/internal/backend/postgres"
	"github.com/styxq/styx/internal/pgtest"
	"github.com/styxq/styx/internal/store"
	"github.com/styxq/styx/styxtest"
)

var ctx = context.Background()

// The tests' PostgreSQL schemas come migrated from pgtest's pool
// (pgtest.Prepare).
func init() { pgtest.Prepare = postgres.Migrate }

// Backend is one storage backend of a test, with its persistent state:
// every server of the test started on it (and every restart) sees what the
// ones before wrote.
type Backend struct {
	// Name is the daemon's storage name: daemon.StorageMemory,
	// daemon.StoragePebble or daemon.StoragePostgres.
	Name string
	// Open returns a store over the test's persistent state; opening it
	// again after Close sees everything written before. Nil for postgres.
	Open func(t *testing.T) store.Store
	// URL is the postgres backend's database (a schema of the test's
	// own); every server of the test, and every restart, uses it. Empty
	// for the embedded backends, and for postgres when the test database
	// is not configured.
	URL string
}

// Postgres reports whether the backend is PostgreSQL.
func (b Backend) Postgres() bool { return b.URL != "" }

// Options returns the styxtest options that start a server of the
// backend's kind on storage the daemon opens itself: a fresh in-memory
// store, a Pebble store in a t.TempDir(), or b.URL. Servers started from
// them do not share the embedded backends' state (use Start for that).
func (b Backend) Options() styxtest.Options {
	return styxtest.Options{Storage: b.Name, PostgresURL: b.URL}
}

// RequireItemLog skips a test that injects faults into the item log of the
// embedded backends (store.Store writes), which the postgres backend does
// not have: there, a dead-letter move or a redrive step is one transaction.
func RequireItemLog(t *testing.T, b Backend) {
	t.Helper()
	if b.Postgres() {
		t.Skip("fault injection works on the embedded backends' item log; postgres has none (one transaction per move)")
	}
}

// Backends returns every storage backend the functional tests run on:
// memory (one in-memory store that stands for the persistent state, closed
// when t ends), pebble (a directory of t's own) and postgres
// (URL empty when the test database is not configured: see PostgresURL).
func Backends(t *testing.T) []Backend {
	bs := embeddedBackends(t)
	return append(bs, Backend{Name: daemon.StoragePostgres, URL: PostgresURL(t)})
}

// embeddedBackends is Backends without postgres.
func embeddedBackends(t *testing.T) []Backend {
	return []Backend{
		{Name: daemon.StorageMemory, Open: func() func(t *testing.T) store.Store {
			// One instance stands for the persistent state, opened at the
			// first Open (a test that starts its servers from Options
			// opens none) and closed when the test ends.
			var s store.Store
			return func(ot *testing.T) store.Store {
				if s == nil {
					var err error
					s, err = pebble.OpenMemory()
					require.NoError(ot, err)
					t.Cleanup(func() { _ = s.Close() })
				}
				return NopClose{s}
			}
		}()},
		{Name: daemon.StoragePebble, Open: func() func(t *testing.T) store.Store {
			dir := t.TempDir()
			return func(t *testing.T) store.Store {
				s, err := pebble.Open(pebble.Config{Dir: dir, Logger: TestLogger()})
				require.NoError(t, err)
				return s
			}
		}()},
	}
}

// PostgresURL returns a schema of the test's own in the test database, or
// "" when PostgreSQL tests are not enabled (neither STYX_TEST_POSTGRES_URL
// nor STYX_TEST_REQUIRE_POSTGRES is set). With only the latter set it fails
// the test: see pgtest.
func PostgresURL(t *testing.T) string {
	if !postgresEnabled() {
		return ""
	}
	return pgtest.URL(t)
}

// postgresEnabled reports whether the PostgreSQL tests run (or fail for
// want of a database): STYX_TEST_POSTGRES_URL or STYX_TEST_REQUIRE_POSTGRES
// is set.
func postgresEnabled() bool {
	return os.Getenv(pgtest.EnvURL) != "" || os.Getenv(pgtest.EnvRequire) != ""
}

var logSkip sync.Once

// ForEachBackend runs fn as a parallel subtest per backend of Backends,
// named after it. The postgres subtest takes its schema once it runs, not
// before it waits for its turn, so that a schema serves one running test at
// a time and goes back to pgtest's pool as soon as it ends. The postgres
// subtest is left out, with the skip logged once per test binary, when the
// test database is not configured.
func ForEachBackend(t *testing.T, fn func(t *testing.T, b Backend)) {
	t.Helper()
	for _, b := range embeddedBackends(t) {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			fn(t, b)
		})
	}
	if !postgresEnabled() {
		logSkip.Do(func() { t.Logf("postgres backend skipped: %s is not set (see internal/pgtest)", pgtest.EnvURL) })
		return
	}
	t.Run(daemon.StoragePostgres, func(t *testing.T) {
		t.Parallel()
		fn(t, Backend{Name: daemon.StoragePostgres, URL: PostgresURL(t)})
	})
}

// NopClose keeps a memory store's contents across a server "restart": its
// Close does nothing (the store is closed when the test ends).
type NopClose struct{ store.Store }

// Close does nothing and returns nil.
func (NopClose) Close() error { return nil }

package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Prepare, when set, makes a new schema ready for a test (the PostgreSQL
// backend's migrations: internal/servertest and the backend's own tests
// set it to postgres.Migrate). With it, SchemaURL on the shared test
// database (EnvURL) hands out schemas from a pool of this test process
// instead of creating one per test: creating and migrating a schema costs
// PostgreSQL about 0.1 CPU-second, more than most tests it serves (issue
// 50). A schema returns to the pool at the end of its test only once it is
// as Prepare left it:
//   - every session that used it is ended (their connections carry the
//     schema as application_name);
//   - its definitions (tables, columns, indexes, constraints, functions,
//     triggers, sequences, privileges) are unchanged, compared by digest
//     with those Prepare made; a test that changed them (a fault trigger, a
//     dropped index, a replayed migration) has its schema dropped instead;
//   - every row is deleted, and the rows Prepare wrote and the sequences'
//     positions are restored.
//
// Anything that fails on the way back drops the schema. Set it before the
// first SchemaURL (an init function); nil (the default) gives every test a
// new empty schema, dropped at its end.
var Prepare func(ctx context.Context, url string) error

// pooled is a prepared schema and what it held when Prepare returned.
type pooled struct {
	name string
	// digest is defsDigest when Prepare returned.
	digest string
	// rows are the tables' rows then, as json_agg of each table (tables
	// without rows left out).
	rows map[string]string
	// seqs are the sequences' positions then.
	seqs map[string]seqPos
}

// pool holds the free prepared schemas of the shared test database (the
// only base SchemaURL pools on), the most recently freed last.
var pool struct {
	mu    sync.Mutex
	free  []*pooled
	swept bool
}

// adminDB is what the pool's own statements run on: a connection, or the
// process's admin pool (admin).
type adminDB interface {
	querier
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Begin(ctx context.Context) (pgx.Tx, error)
}

// admin is the pool of sessions on the shared test database (EnvURL) for
// the statements of SchemaURL, EmptyURL and their cleanups (creating,
// resetting and dropping schemas), which would otherwise open a session
// each: a new PostgreSQL session costs its backend 10-50 ms of CPU (a
// fork, caches loaded, an exit), more than those statements, and a suite
// ends thousands (issue 50). Its sessions carry no schema: they are not
// the tests' sessions that reset ends.
var admin struct {
	mu   sync.Mutex
	pool *pgxpool.Pool
}

// withAdmin runs f on the admin pool when base is the shared test
// database (EnvURL), else on a connection of its own, closed after f: a
// test's own cluster stops while the process goes on.
func withAdmin(ctx context.Context, base string, f func(db adminDB) error) error {
	if base != os.Getenv(EnvURL) {
		conn, err := pgx.Connect(ctx, base)
		if err != nil {
			return fmt.Errorf("connect: %w", err)
		}
		defer conn.Close(context.Background())
		return f(conn)
	}
	admin.mu.Lock()
	if admin.pool == nil {
		cfg, err := pgxpool.ParseConfig(base)
		if err == nil {
			cfg.MaxConns = 4
			admin.pool, err = pgxpool.NewWithConfig(context.Background(), cfg)
		}
		if err != nil {
			admin.mu.Unlock()
			return fmt.Errorf("connect: %w", err)
		}
	}
	db := admin.pool
	admin.mu.Unlock()
	return f(db)
}

// schemaPrefix names the schemas of this test process; the pid lets a
// later process drop those of processes that ended (sweep).
func schemaPrefix() string { return "styx_test_p" + strconv.Itoa(os.Getpid()) + "_" }

// pooledURL returns the URL of a prepared schema of the pool on base (a
// new one when none is free) and gives it back at the end of the test.
func pooledURL(t testing.TB, base string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool.mu.Lock()
	var p *pooled
	if n := len(pool.free); n > 0 {
		p, pool.free = pool.free[n-1], pool.free[:n-1]
	}
	sweep := !pool.swept
	pool.swept = true
	pool.mu.Unlock()
	if sweep {
		sweepEnded(ctx, base)
	}
	if p == nil {
		var err error
		if p, err = newPooled(ctx, base); err != nil {
			t.Fatalf("pgtest: %v", err)
		}
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := p.reset(ctx, base); err != nil {
			t.Logf("pgtest: schema %s not reused (dropped): %v", p.name, err)
			dropSchema(t, base, p.name)
			return
		}
		pool.mu.Lock()
		pool.free = append(pool.free, p)
		pool.mu.Unlock()
	})
	return p.url(base)
}

// url is base with the schema as search_path and application_name.
func (p *pooled) url(base string) string {
	u := WithSearchPath(base, p.name)
	if strings.HasPrefix(u, "postgres://") || strings.HasPrefix(u, "postgresql://") {
		if pu, err := url.Parse(u); err == nil {
			q := pu.Query()
			q.Set("application_name", p.name)
			pu.RawQuery = q.Encode()
			return pu.String()
		}
	}
	return u + " application_name=" + p.name
}

// newPooled creates a schema, prepares it and records what it holds.
func newPooled(ctx context.Context, base string) (p *pooled, err error) {
	p = &pooled{name: schemaName(schemaPrefix())}
	err = withAdmin(ctx, base, func(db adminDB) error {
		if _, err := db.Exec(ctx, "CREATE SCHEMA "+p.name); err != nil {
			return fmt.Errorf("create schema: %w", err)
		}
		if err := p.record(ctx, db, base); err != nil {
			_, _ = db.Exec(ctx, "DROP SCHEMA "+p.name+" CASCADE")
			return err
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return p, nil
}

// record prepares the new schema and records what it then holds.
func (p *pooled) record(ctx context.Context, db adminDB, base string) error {
	if err := Prepare(ctx, p.url(base)); err != nil {
		return fmt.Errorf("prepare schema %s: %w", p.name, err)
	}
	var err error
	if p.digest, err = defsDigest(ctx, db, p.name); err != nil {
		return err
	}
	tables, err := tablesOf(ctx, db, p.name)
	if err != nil {
		return err
	}
	p.rows = map[string]string{}
	for _, tbl := range tables {
		var rows *string
		if err := db.QueryRow(ctx, `SELECT json_agg(t)::text FROM `+qualified(p.name, tbl)+` AS t`).Scan(&rows); err != nil {
			return fmt.Errorf("read %s: %w", tbl, err)
		}
		if rows != nil {
			p.rows[tbl] = *rows
		}
	}
	p.seqs, err = sequencesOf(ctx, db, p.name)
	return err
}

// reset brings the schema back to what Prepare left, or fails (the caller
// drops it).
func (p *pooled) reset(ctx context.Context, base string) error {
	return withAdmin(ctx, base, func(db adminDB) error { return p.resetOn(ctx, db) })
}

// resetOn is reset on db.
func (p *pooled) resetOn(ctx context.Context, db adminDB) error {
	// End the test's sessions first: one left open could take the next
	// test's items, and its locks would hold up the deletes.
	if _, err := db.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE application_name = $1 AND pid <> pg_backend_pid()`, p.name); err != nil {
		return fmt.Errorf("end sessions: %w", err)
	}
	return pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = '10s'`); err != nil {
			return err
		}
		digest, err := defsDigest(ctx, tx, p.name)
		if err != nil {
			return err
		}
		if digest != p.digest {
			return errors.New("the test changed its definitions")
		}
		tables, err := tablesOf(ctx, tx, p.name)
		if err != nil {
			return err
		}
		// DELETE, not TRUNCATE: a TRUNCATE of every table gives each table
		// and index a new file, which costs PostgreSQL about as much as
		// the migrations; the few rows a test leaves cost nothing to
		// delete. With triggers off (replica), the counts triggers do
		// not fire and the foreign keys do not check.
		stmts := []string{`SET LOCAL session_replication_role = replica`}
		for _, tbl := range tables {
			stmts = append(stmts, `DELETE FROM `+qualified(p.name, tbl))
		}
		stmts = append(stmts, `SET LOCAL session_replication_role = DEFAULT`)
		if _, err := tx.Exec(ctx, strings.Join(stmts, "; ")); err != nil {
			return fmt.Errorf("delete the rows: %w", err)
		}
		for tbl, rows := range p.rows {
			q := qualified(p.name, tbl)
			if _, err := tx.Exec(ctx, `INSERT INTO `+q+` OVERRIDING SYSTEM VALUE SELECT * FROM json_populate_recordset(NULL::`+q+`, $1::json)`, rows); err != nil {
				return fmt.Errorf("restore %s: %w", tbl, err)
			}
		}
		for seq, pos := range p.seqs {
			// setval, not ALTER SEQUENCE: it changes no definition.
			if _, err := tx.Exec(ctx, `SELECT setval($1::regclass, $2, $3)`, qualified(p.name, seq), pos.value, pos.called); err != nil {
				return fmt.Errorf("restore sequence %s: %w", seq, err)
			}
		}
		return nil
	})
}

// querier is a connection or a transaction.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// defsDigest digests the catalog rows of the definitions in schema (the
// schema, its relations with their columns, defaults and indexes, its
// constraints, functions, triggers, sequences and types) by their ids and
// row versions (xmin): any definition created, changed or dropped changes
// it, and the rows that a test writes, vacuums or analyzes do not.
func defsDigest(ctx context.Context, q querier, schema string) (string, error) {
	var digest *string
	err := q.QueryRow(ctx, `WITH ns AS (SELECT oid, xmin FROM pg_namespace WHERE nspname = $1),
		rel AS (SELECT c.oid, c.xmin FROM pg_class c JOIN ns ON c.relnamespace = ns.oid)
	SELECT md5(string_agg(d, ',' ORDER BY d)) FROM (
		SELECT 'n' || oid || ':' || xmin FROM ns
		UNION ALL SELECT 'c' || oid || ':' || xmin FROM rel
		UNION ALL SELECT 'a' || a.attrelid || '.' || a.attnum || ':' || a.xmin FROM pg_attribute a JOIN rel ON a.attrelid = rel.oid
		UNION ALL SELECT 'd' || ad.oid || ':' || ad.xmin FROM pg_attrdef ad JOIN rel ON ad.adrelid = rel.oid
		UNION ALL SELECT 'i' || i.indexrelid || ':' || i.xmin FROM pg_index i JOIN rel ON i.indrelid = rel.oid
		UNION ALL SELECT 't' || g.oid || ':' || g.xmin FROM pg_trigger g JOIN rel ON g.tgrelid = rel.oid
		UNION ALL SELECT 's' || sq.seqrelid || ':' || sq.xmin FROM pg_sequence sq JOIN rel ON sq.seqrelid = rel.oid
		UNION ALL SELECT 'k' || k.oid || ':' || k.xmin FROM pg_constraint k JOIN ns ON k.connamespace = ns.oid
		UNION ALL SELECT 'f' || p.oid || ':' || p.xmin FROM pg_proc p JOIN ns ON p.pronamespace = ns.oid
		UNION ALL SELECT 'y' || y.oid || ':' || y.xmin FROM pg_type y JOIN ns ON y.typnamespace = ns.oid
	) AS defs(d)`, schema).Scan(&digest)
	if err != nil {
		return "", fmt.Errorf("digest the definitions: %w", err)
	}
	if digest == nil {
		return "", fmt.Errorf("schema %s is gone", schema)
	}
	return *digest, nil
}

// tablesOf lists the tables of schema.
func tablesOf(ctx context.Context, q querier, schema string) ([]string, error) {
	rows, err := q.Query(ctx, `SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relkind IN ('r', 'p') ORDER BY c.relname`, schema)
	if err != nil {
		return nil, fmt.Errorf("list tables: %w", err)
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("list tables: %w", err)
	}
	return tables, nil
}

// sequencesOf returns the arguments of the setval that puts each
// sequence of schema back where it is: its last value, called, or, for one
// never used, its start, not called.
func sequencesOf(ctx context.Context, q querier, schema string) (map[string]seqPos, error) {
	rows, err := q.Query(ctx, `SELECT sequencename, coalesce(last_value, start_value), last_value IS NOT NULL
		FROM pg_sequences WHERE schemaname = $1`, schema)
	if err != nil {
		return nil, fmt.Errorf("list sequences: %w", err)
	}
	defer rows.Close()
	seqs := map[string]seqPos{}
	for rows.Next() {
		var name string
		var pos seqPos
		if err := rows.Scan(&name, &pos.value, &pos.called); err != nil {
			return nil, fmt.Errorf("list sequences: %w", err)
		}
		seqs[name] = pos
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list sequences: %w", err)
	}
	return seqs, nil
}

// seqPos is a sequence's position, as setval takes it.
type seqPos struct {
	value  int64
	called bool
}

// qualified quotes schema.name.
func qualified(schema, name string) string {
	return pgx.Identifier{schema, name}.Sanitize()
}

// sweepEnded drops the pooled schemas of test processes that ended (their
// pid no longer runs): a process leaves its pool behind when it exits.
func sweepEnded(ctx context.Context, base string) {
	_ = withAdmin(ctx, base, func(db adminDB) error {
		rows, err := db.Query(ctx, `SELECT nspname FROM pg_namespace WHERE nspname LIKE 'styx\_test\_p%'`)
		if err != nil {
			return err // the test's own statements report it
		}
		names, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		for _, name := range names {
			pidText, _, ok := strings.Cut(strings.TrimPrefix(name, "styx_test_p"), "_")
			pid, err := strconv.Atoi(pidText)
			if !ok || err != nil || pid == os.Getpid() || !errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
				continue
			}
			_, _ = db.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{name}.Sanitize()+" CASCADE")
		}
		return nil
	})
}

// dropSchema drops schema on base, logging a failure.
func dropSchema(t testing.TB, base, schema string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := withAdmin(ctx, base, func(db adminDB) error {
		_, err := db.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE")
		return err
	})
	if err != nil {
		t.Logf("pgtest: drop schema %s: %v", schema, err)
	}
}

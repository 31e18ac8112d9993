package pgtest

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// StandbyName is the application_name (cluster_name) of the standby
// StartStandby makes, the name synchronous_standby_names lists.
const StandbyName = "styx_standby"

// StartStandby makes a streaming standby of s (pg_basebackup -R, through a
// replication slot), starts it on a free 127.0.0.1 port, waits until it
// streams, and stops it when the test ends. With sync, s then requires it
// for every commit (synchronous_standby_names = StandbyName, with
// synchronous_commit = on, the default): a commit is acknowledged only once
// the standby has flushed it.
func (s *Server) StartStandby(t testing.TB, sync bool) *Server {
	t.Helper()
	dir, err := os.MkdirTemp("", "styx-pgstandby-")
	if err != nil {
		t.Fatal(err)
	}
	script := scriptPath(t)
	t.Cleanup(func() {
		if out, err := exec.Command(script, "stop", dir).CombinedOutput(); err != nil {
			t.Logf("pgtest: stop standby: %v: %s", err, out)
		}
		_ = os.RemoveAll(dir)
	})
	if name := s.env["PGTEST_USER"]; name != "" {
		u, err := user.Lookup(name)
		if err != nil {
			t.Fatal(err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		if err := os.Chown(dir, uid, -1); err != nil {
			t.Fatal(err)
		}
	}
	primary, err := url.Parse(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Dir(s.env["PGTEST_PGCTL"])
	data := filepath.Join(dir, "data")
	s.run(t, filepath.Join(bin, "pg_basebackup"), "-h", primary.Hostname(), "-p", primary.Port(), "-U", "styx",
		"-D", data, "-R", "-X", "stream", "-c", "fast", "-C", "-S", StandbyName)

	st := &Server{env: map[string]string{
		"PGTEST_PGCTL": s.env["PGTEST_PGCTL"], "PGTEST_DATA": data, "PGTEST_USER": s.env["PGTEST_USER"],
		"PGTEST_LOG": filepath.Join(dir, "log"),
	}}
	var started bool
	for try := 0; try < 5 && !started; try++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		_ = ln.Close()
		st.env["PGTEST_OPTS"] = fmt.Sprintf("-c listen_addresses=127.0.0.1 -p %d -k %s -c fsync=on -c max_connections=200 -c shared_buffers=32MB -c cluster_name=%s",
			port, dir, StandbyName)
		var env strings.Builder
		for _, k := range []string{"PGTEST_PGCTL", "PGTEST_DATA", "PGTEST_USER", "PGTEST_OPTS", "PGTEST_LOG"} {
			fmt.Fprintf(&env, "%s=%q\n", k, st.env[k])
		}
		if err := os.WriteFile(filepath.Join(dir, "env"), []byte(env.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := st.pgctlErr(t, "-D", data, "-w", "-t", "60", "-o", st.env["PGTEST_OPTS"], "-l", st.env["PGTEST_LOG"], "start"); err == nil {
			started = true
			u := *primary
			u.Host = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
			st.URL = u.String()
		}
	}
	if !started {
		log, _ := os.ReadFile(st.env["PGTEST_LOG"])
		t.Fatalf("pgtest: the standby did not start: %s", log)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.URL)
	if err != nil {
		t.Fatalf("pgtest: connect to the primary: %v", err)
	}
	defer conn.Close(context.Background())
	for {
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_replication WHERE application_name = $1 AND state = 'streaming'`,
			StandbyName).Scan(&n); err != nil {
			t.Fatalf("pgtest: wait for the standby: %v", err)
		}
		if n == 1 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if sync {
		for _, q := range []string{`ALTER SYSTEM SET synchronous_standby_names = '` + StandbyName + `'`, `SELECT pg_reload_conf()`} {
			if _, err := conn.Exec(ctx, q); err != nil {
				t.Fatalf("pgtest: %s: %v", q, err)
			}
		}
		for {
			var state string
			if err := conn.QueryRow(ctx, `SELECT sync_state FROM pg_stat_replication WHERE application_name = $1`, StandbyName).Scan(&state); err != nil {
				t.Fatalf("pgtest: wait for the synchronous standby: %v", err)
			}
			if state == "sync" {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return st
}

// Kill sends SIGKILL to the server's postmaster, as when its host or the
// process dies: its sessions end as their backends notice, and nothing is
// shut down cleanly.
func (s *Server) Kill(t testing.TB) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(s.env["PGTEST_DATA"], "postmaster.pid"))
	if err != nil {
		t.Fatalf("pgtest: kill: %v", err)
	}
	pid, err := strconv.Atoi(strings.SplitN(string(b), "\n", 2)[0])
	if err != nil {
		t.Fatalf("pgtest: kill: postmaster.pid: %v", err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("pgtest: kill %d: %v", pid, err)
	}
}

// Promote makes a standby the primary (pg_ctl promote) and returns once
// it accepts writes.
func (s *Server) Promote(t testing.TB) {
	t.Helper()
	s.pgctl(t, "-D", s.env["PGTEST_DATA"], "-w", "-t", "60", "promote")
}

// HostPort returns the server's host:port.
func (s *Server) HostPort() string {
	u, err := url.Parse(s.URL)
	if err != nil {
		return ""
	}
	return u.Host
}

// pgctlErr is pgctl returning its error.
func (s *Server) pgctlErr(t testing.TB, args ...string) ([]byte, error) {
	t.Helper()
	return s.runErr(s.env["PGTEST_PGCTL"], args...)
}

// run runs a PostgreSQL program as the server's user, failing the test on
// an error.
func (s *Server) run(t testing.TB, prog string, args ...string) {
	t.Helper()
	if out, err := s.runErr(prog, args...); err != nil {
		t.Fatalf("pgtest: %s %v: %v: %s", filepath.Base(prog), args, err, out)
	}
}

func (s *Server) runErr(prog string, args ...string) ([]byte, error) {
	cmd := exec.Command(prog, args...)
	if u := s.env["PGTEST_USER"]; u != "" {
		cmd = exec.Command("runuser", append([]string{"-u", u, "--", prog}, args...)...)
	}
	cmd.Dir = "/"
	return cmd.CombinedOutput()
}

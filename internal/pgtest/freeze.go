package pgtest

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// Freeze stops the server's postmaster and then every process it started
// (backends, WAL writer, checkpointer, WAL senders) with SIGSTOP, as when
// its host hangs: connections stay open, connects are accepted by the
// kernel, and nothing answers. It returns thaw, which sends SIGCONT to the
// same processes; thaw also runs when the test ends, before the server is
// stopped, and may be called more than once. Never freeze a server that
// other tests share: use one of StartServer's.
func (s *Server) Freeze(t testing.TB) (thaw func()) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(s.env["PGTEST_DATA"], "postmaster.pid"))
	if err != nil {
		t.Fatalf("pgtest: freeze: %v", err)
	}
	postmaster, err := strconv.Atoi(strings.SplitN(string(b), "\n", 2)[0])
	if err != nil {
		t.Fatalf("pgtest: freeze: postmaster.pid: %v", err)
	}
	// The postmaster first, so that it starts no process after the list
	// of its children is read.
	pids := []int{postmaster}
	if err := syscall.Kill(postmaster, syscall.SIGSTOP); err != nil {
		t.Fatalf("pgtest: freeze: SIGSTOP %d: %v", postmaster, err)
	}
	var once sync.Once
	thaw = func() {
		once.Do(func() {
			for _, pid := range pids {
				_ = syscall.Kill(pid, syscall.SIGCONT)
			}
		})
	}
	t.Cleanup(thaw)
	children, err := childrenOf(postmaster)
	if err != nil {
		thaw()
		t.Fatalf("pgtest: freeze: %v", err)
	}
	for _, pid := range children {
		if err := syscall.Kill(pid, syscall.SIGSTOP); err == nil {
			pids = append(pids, pid)
		}
	}
	s.frozen = pids
	return thaw
}

// States describes the processes the last Freeze stopped, for a failing
// test's message: each one's pid, state (T: stopped) and command line, from
// /proc.
func (s *Server) States() string {
	var b strings.Builder
	for _, pid := range s.frozen {
		state := "gone"
		if stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat")); err == nil {
			if i := strings.LastIndexByte(string(stat), ')'); i >= 0 {
				if f := strings.Fields(string(stat[i+1:])); len(f) > 0 {
					state = f[0]
				}
			}
		}
		cmd, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
		fmt.Fprintf(&b, "%d %s %s; ", pid, state, strings.TrimSpace(strings.ReplaceAll(string(cmd), "\x00", " ")))
	}
	return b.String()
}

// childrenOf lists the processes whose parent is ppid, from /proc.
func childrenOf(ppid int) ([]int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue // ended meanwhile
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		i := strings.LastIndexByte(string(stat), ')')
		if i < 0 {
			continue
		}
		fields := strings.Fields(string(stat[i+1:]))
		if len(fields) >= 2 && fields[1] == strconv.Itoa(ppid) {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

package pgtest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
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
	// of its children is read. SIGSTOP takes effect when the process next
	// runs, not when kill returns: until the postmaster is seen stopped, it
	// may still finish forking a backend, which a list read before would
	// miss and leave running (a pool's new connection answered by it while
	// the test believes the server frozen).
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
	if err := waitStopped(postmaster); err != nil {
		thaw()
		t.Fatalf("pgtest: freeze: %v", err)
	}
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
	for _, pid := range pids[1:] {
		if err := waitStopped(pid); err != nil && !errors.Is(err, os.ErrNotExist) {
			thaw()
			t.Fatalf("pgtest: freeze: %v", err)
		}
	}
	s.frozen = pids
	return thaw
}

// waitStopped polls /proc until process pid is stopped (state T), or has
// ended (Z: a zombie its stopped parent cannot reap; X), for up to 10
// seconds. It returns an error wrapping os.ErrNotExist when the process
// is gone.
func waitStopped(pid int) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		state, err := stateOf(pid)
		if err != nil {
			return fmt.Errorf("process %d: %w", pid, err)
		}
		switch state {
		case "T", "Z", "X":
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("process %d not stopped after SIGSTOP (state %s)", pid, state)
		}
		time.Sleep(time.Millisecond)
	}
}

// stateOf returns the state of process pid from /proc/PID/stat ("T":
// stopped); the error wraps os.ErrNotExist when there is no such process.
func stateOf(pid int) (string, error) {
	f, err := statFields(strconv.Itoa(pid))
	if err != nil {
		return "", err
	}
	return f[0], nil
}

// statFields returns the fields of /proc/PID/stat after the command's
// name: state, ppid, … The error wraps os.ErrNotExist when there is no
// such process.
func statFields(pid string) ([]string, error) {
	stat, err := os.ReadFile(filepath.Join("/proc", pid, "stat"))
	if err != nil {
		return nil, err
	}
	// pid (comm) state ppid ...: comm may hold spaces and parentheses.
	if i := strings.LastIndexByte(string(stat), ')'); i >= 0 {
		if f := strings.Fields(string(stat[i+1:])); len(f) >= 2 {
			return f, nil
		}
	}
	return nil, fmt.Errorf("/proc/%s/stat: no state and ppid in %q", pid, stat)
}

// States describes the processes the last Freeze stopped, for a failing
// test's message: each one's pid, state (T: stopped) and command line, from
// /proc.
func (s *Server) States() string {
	var b strings.Builder
	for _, pid := range s.frozen {
		state, err := stateOf(pid)
		if err != nil {
			state = "gone"
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
		fields, err := statFields(e.Name())
		if err != nil {
			continue // ended meanwhile
		}
		if fields[1] == strconv.Itoa(ppid) {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

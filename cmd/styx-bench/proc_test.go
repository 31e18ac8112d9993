package main

import (
	"bufio"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestParseStat(t *testing.T) {
	// A real line, with a command name containing a space and a ')'.
	line := "4242 (styx (srv) x) S 1 4242 4242 0 -1 4194560 12345 0 3 0 1534 287 0 0 20 0 12 0 987654 2345678848 12000 18446744073709551615 1 1 0 0 0 0 0 0 2143420159 0 0 0 17 1 0 0 0 0 0\n"
	utime, stime, err := parseStat(line)
	if err != nil {
		t.Fatal(err)
	}
	if utime != 1534 || stime != 287 {
		t.Errorf("utime %d stime %d, want 1534 287", utime, stime)
	}
	for _, bad := range []string{"", "1 (x S 1 2", "1 (x) S 1 2 3", "1 (x) S 1 1 1 0 -1 0 0 0 0 0 u s 0 0"} {
		if _, _, err := parseStat(bad); err == nil {
			t.Errorf("parseStat(%q): want an error", bad)
		}
	}
}

func TestParseStatus(t *testing.T) {
	status := "Name:\tstyx\nState:\tS (sleeping)\nVmPeak:\t 2300000 kB\nVmHWM:\t   81234 kB\nVmRSS:\t   40960 kB\nThreads:\t12\n"
	rss, hwm, err := parseStatus(status)
	if err != nil || rss != 40960 || hwm != 81234 {
		t.Errorf("got rss %d hwm %d err %v, want 40960 81234 nil", rss, hwm, err)
	}
	if _, _, err := parseStatus("Name:\tkthreadd\n"); err == nil {
		t.Error("a status without VmRSS (kernel thread) should be an error")
	}
}

func TestListeningInodes(t *testing.T) {
	table := `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:0907 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 111 1 0 100 0 0 10 0
   1: 0100007F:0907 0100007F:D431 01 00000000:00000000 00:00000000 00000000     0        0 222 1 0 20 4 30 10 -1
   2: 00000000:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 333 1 0 100 0 0 10 0
`
	got := listeningInodes(bufio.NewScanner(strings.NewReader(table)), 2311) // 0x0907
	if !slices.Equal(got, []string{"111"}) {
		t.Errorf("got %v, want [111] (the established connection is not a listener)", got)
	}
}

func TestReadProcSelf(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc")
	}
	s, err := readProc("/proc", os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if s.RSSKB <= 0 {
		t.Errorf("RSS %d kB, want positive", s.RSSKB)
	}
	if ct := clockTicks(); ct == 0 {
		t.Error("clock ticks per second is 0")
	}
}

func TestFindListenerPIDRejectsRemoteHosts(t *testing.T) {
	if _, err := findListenerPID("/proc", "http://192.0.2.1:2319"); err == nil {
		t.Error("a remote endpoint should not be looked up locally")
	}
}

func TestReadProcsSums(t *testing.T) {
	root := t.TempDir()
	for pid, fig := range map[string][3]string{"10": {"100", "20", "1000"}, "11": {"5", "7", "300"}} {
		dir := filepath.Join(root, pid)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		stat := pid + " (styx) S 1 1 1 0 -1 0 0 0 0 0 " + fig[0] + " " + fig[1] + " 0 0 20 0 1 0 1 1 1\n"
		status := "Name:\tstyx\nVmHWM:\t" + fig[2] + "0 kB\nVmRSS:\t" + fig[2] + " kB\n"
		if err := os.WriteFile(filepath.Join(dir, "stat"), []byte(stat), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "status"), []byte(status), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := readProcs(root, []int{10, 11})
	if err != nil {
		t.Fatal(err)
	}
	if want := (procSample{CPUTicks: 132, RSSKB: 1300, HWMKB: 13000}); got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
	if _, err := readProcs(root, []int{10, 12}); err == nil {
		t.Error("a missing process should be an error, not left out of the sum")
	}
}

func TestServerPIDs(t *testing.T) {
	cfg := config{Endpoints: []string{"http://127.0.0.1:1", "http://127.0.0.1:2"}, ServerPIDs: []int{7, 8, 7}}
	if got := serverPIDs("/proc", cfg, io.Discard); !slices.Equal(got, []int{7, 8}) {
		t.Errorf("explicit pids: got %v, want [7 8]", got)
	}
	cfg = config{Endpoints: []string{"http://127.0.0.1:1", "http://192.0.2.1:2"}}
	if got := serverPIDs(t.TempDir(), cfg, io.Discard); got != nil {
		t.Errorf("unresolvable endpoints: got %v, want none", got)
	}
}

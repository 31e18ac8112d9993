package main

// Server resource usage, read from Linux /proc: the CPU time (utime+stime of
// /proc/PID/stat) and resident set size (VmRSS of /proc/PID/status) of the
// server process, sampled when the measured window opens and when it closes.
// When no --server-pid is given, the process listening on the endpoint's TCP
// port is looked up through /proc/net/tcp{,6} and /proc/*/fd, which works
// for a local server owned by the same user (or when running as root). With
// several endpoints (or --server-pid values) the figures of the processes
// are summed.

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// procSample is one reading of a process's resource usage.
type procSample struct {
	// CPUTicks is utime+stime in clock ticks (see clockTicks).
	CPUTicks uint64
	// RSSKB is the resident set size in KiB (VmRSS).
	RSSKB int64
	// HWMKB is the peak resident set size in KiB (VmHWM).
	HWMKB int64
}

// readProc samples the process pid from the /proc file system rooted at
// procRoot (normally "/proc").
func readProc(procRoot string, pid int) (procSample, error) {
	dir := filepath.Join(procRoot, strconv.Itoa(pid))
	stat, err := os.ReadFile(filepath.Join(dir, "stat"))
	if err != nil {
		return procSample{}, err
	}
	utime, stime, err := parseStat(string(stat))
	if err != nil {
		return procSample{}, fmt.Errorf("%s/stat: %w", dir, err)
	}
	status, err := os.ReadFile(filepath.Join(dir, "status"))
	if err != nil {
		return procSample{}, err
	}
	rss, hwm, err := parseStatus(string(status))
	if err != nil {
		return procSample{}, fmt.Errorf("%s/status: %w", dir, err)
	}
	return procSample{CPUTicks: utime + stime, RSSKB: rss, HWMKB: hwm}, nil
}

// readProcs samples the processes pids and returns the sums of their
// figures (VmHWM too: an upper bound of their peak together).
func readProcs(procRoot string, pids []int) (procSample, error) {
	var sum procSample
	for _, pid := range pids {
		s, err := readProc(procRoot, pid)
		if err != nil {
			return procSample{}, err
		}
		sum.CPUTicks += s.CPUTicks
		sum.RSSKB += s.RSSKB
		sum.HWMKB += s.HWMKB
	}
	return sum, nil
}

// serverPIDs returns the server processes a run of cfg measures, without
// duplicates: --server-pid, or else the local processes listening on the
// ports of cfg.Endpoints. Finding them is best effort: when the listener
// of any endpoint is not found it returns none rather than a partial sum
// (and with several endpoints says so on stderr).
func serverPIDs(procRoot string, cfg config, stderr io.Writer) []int {
	var pids []int
	add := func(pid int) {
		if !slices.Contains(pids, pid) {
			pids = append(pids, pid)
		}
	}
	if len(cfg.ServerPIDs) > 0 {
		for _, pid := range cfg.ServerPIDs {
			add(pid)
		}
		return pids
	}
	for _, e := range cfg.Endpoints {
		pid, err := findListenerPID(procRoot, e)
		if err != nil {
			if len(cfg.Endpoints) > 1 {
				_, _ = fmt.Fprintf(stderr, "styx-bench: server usage not measured: %s: %v\n", e, err)
			}
			return nil
		}
		add(pid)
	}
	return pids
}

// pidList formats pids for messages: "pid 42" or "pids 42, 43".
func pidList(pids []int) string {
	if len(pids) == 1 {
		return fmt.Sprintf("pid %d", pids[0])
	}
	s := make([]string, len(pids))
	for i, pid := range pids {
		s[i] = strconv.Itoa(pid)
	}
	return "pids " + strings.Join(s, ", ")
}

// parseStat returns the utime and stime fields (14 and 15, in clock ticks)
// of a /proc/PID/stat line. The command name (field 2) is in parentheses
// and may itself contain spaces and parentheses, so fields are counted from
// the last ')'.
func parseStat(line string) (utime, stime uint64, err error) {
	end := strings.LastIndexByte(line, ')')
	if end < 0 {
		return 0, 0, errors.New("no ')' closing the command name")
	}
	// After ")": field 3 (state) is rest[0], so field n is rest[n-3].
	rest := strings.Fields(line[end+1:])
	if len(rest) < 13 {
		return 0, 0, fmt.Errorf("%d fields after the command name, want at least 13", len(rest))
	}
	if utime, err = strconv.ParseUint(rest[14-3], 10, 64); err != nil {
		return 0, 0, fmt.Errorf("utime: %w", err)
	}
	if stime, err = strconv.ParseUint(rest[15-3], 10, 64); err != nil {
		return 0, 0, fmt.Errorf("stime: %w", err)
	}
	return utime, stime, nil
}

// parseStatus returns VmRSS and VmHWM in KiB from the text of
// /proc/PID/status. VmHWM is optional (0 when absent); VmRSS is required.
func parseStatus(text string) (rssKB, hwmKB int64, err error) {
	foundRSS := false
	for line := range strings.Lines(text) {
		key, val, ok := strings.Cut(line, ":")
		if !ok || (key != "VmRSS" && key != "VmHWM") {
			continue
		}
		f := strings.Fields(val) // "12345 kB"
		if len(f) == 0 {
			return 0, 0, fmt.Errorf("%s: no value", key)
		}
		n, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("%s: %w", key, err)
		}
		if key == "VmRSS" {
			rssKB, foundRSS = n, true
		} else {
			hwmKB = n
		}
	}
	if !foundRSS {
		return 0, 0, errors.New("no VmRSS line")
	}
	return rssKB, hwmKB, nil
}

// clockTicks returns the kernel's clock ticks per second (sysconf
// _SC_CLK_TCK), read from the AT_CLKTCK entry of /proc/self/auxv; it falls
// back to 100, the value on practically every Linux system.
func clockTicks() uint64 {
	const atClkTck = 17
	b, err := os.ReadFile("/proc/self/auxv")
	if err != nil {
		return 100
	}
	for i := 0; i+16 <= len(b); i += 16 { // 64-bit little-endian (key, value) pairs
		key := binary.LittleEndian.Uint64(b[i:])
		val := binary.LittleEndian.Uint64(b[i+8:])
		if key == atClkTck && val > 0 {
			return val
		}
		if key == 0 {
			break
		}
	}
	return 100
}

// findListenerPID returns the id of the local process listening on the TCP
// port of endpoint, or an error when the endpoint is not on this host or no
// readable process owns the listening socket.
func findListenerPID(procRoot, endpoint string) (int, error) {
	u, err := url.Parse(endpoint)
	if err != nil {
		return 0, err
	}
	host, portText := u.Hostname(), u.Port()
	if portText == "" {
		portText = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	port, err := strconv.Atoi(portText)
	if err != nil {
		return 0, fmt.Errorf("endpoint port %q: %w", portText, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !(ip.IsLoopback() || ip.IsUnspecified())) {
		return 0, fmt.Errorf("endpoint host %q is not local", host)
	}
	inodes := map[string]bool{}
	for _, name := range []string{"net/tcp", "net/tcp6"} {
		f, err := os.Open(filepath.Join(procRoot, name))
		if err != nil {
			continue
		}
		for _, inode := range listeningInodes(bufio.NewScanner(f), port) {
			inodes[inode] = true
		}
		_ = f.Close()
	}
	if len(inodes) == 0 {
		return 0, fmt.Errorf("no socket listening on port %d", port)
	}
	procs, _ := os.ReadDir(procRoot)
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		fdDir := filepath.Join(procRoot, p.Name(), "fd")
		fds, err := os.ReadDir(fdDir)
		if err != nil {
			continue // not ours to read, or gone
		}
		for _, fd := range fds {
			link, err := os.Readlink(filepath.Join(fdDir, fd.Name()))
			if err == nil && strings.HasPrefix(link, "socket:[") && inodes[strings.TrimSuffix(link[len("socket:["):], "]")] {
				return pid, nil
			}
		}
	}
	return 0, fmt.Errorf("no readable process owns the socket listening on port %d", port)
}

// listeningInodes returns the socket inodes of the rows of a /proc/net/tcp
// (or tcp6) table that are in state LISTEN (0A) on port.
func listeningInodes(sc *bufio.Scanner, port int) []string {
	var out []string
	for sc.Scan() {
		// sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode
		f := strings.Fields(sc.Text())
		if len(f) < 10 || f[3] != "0A" {
			continue
		}
		_, hexPort, ok := strings.Cut(f[1], ":")
		if !ok {
			continue
		}
		if p, err := strconv.ParseUint(hexPort, 16, 16); err == nil && int(p) == port {
			out = append(out, f[9])
		}
	}
	return out
}

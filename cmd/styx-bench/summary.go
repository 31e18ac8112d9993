package main

// Side-by-side summaries of several runs (JSON lines written with --json
// --label), used by bench/run.sh (--summary: sync on, sync off and memory
// with the ratios of issue 13) and bench/ab.sh (--compare: an old and a new
// binary, interleaved), and the fsync probe (--fsync-probe) that measures
// t_fsync for the limit.

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Labels bench/run.sh gives its backends; --summary puts them side by side.
const (
	labelSyncOn  = "pebble"
	labelSyncOff = "pebble-nosync"
	labelMemory  = "memory"
)

// fsyncProbe is the outcome of --fsync-probe.
type fsyncProbe struct {
	Dir string `json:"dir"`
	// Files is how many files were synced side by side, one goroutine
	// each (--fsync-probe-files); Writes counts the synced writes of all.
	Files int `json:"files"`
	// Overwrite: each file was written whole and synced first, then
	// overwritten in place, as Pebble overwrites a recycled log file (no
	// size change to sync); else each write appends.
	Overwrite bool    `json:"overwrite"`
	Writes    int     `json:"writes"`
	Bytes     int     `json:"bytes"`
	MeanMS    float64 `json:"mean_ms"`
	P50MS     float64 `json:"p50_ms"`
	// SyncsPerSec is Writes over the probe's wall time: with Files above 1,
	// whether the disk completes fsyncs of several logs at once (issue 52's
	// "several logs synced in parallel").
	SyncsPerSec float64 `json:"syncs_per_sec"`
}

// probeFsync measures t_fsync: the time of n synced small writes (4 KiB
// written at the end of a file in dir, then fdatasync), as a write-ahead
// log does, in each of files files side by side; with overwrite, into a
// file written and synced whole first (syncWrites).
func probeFsync(dir string, n, files int, overwrite bool) (fsyncProbe, error) {
	ds := make([]time.Duration, n*files)
	errs := make([]error, files)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range files {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = syncWrites(dir, ds[i*n:(i+1)*n], overwrite)
		}()
	}
	wg.Wait()
	wall := time.Since(start)
	if err := errors.Join(errs...); err != nil {
		return fsyncProbe{}, err
	}
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	slices.Sort(ds)
	abs, _ := filepath.Abs(dir)
	return fsyncProbe{Dir: abs, Files: files, Overwrite: overwrite, Writes: len(ds), Bytes: 4096,
		MeanMS: ms(sum / time.Duration(len(ds))), P50MS: ms(ds[len(ds)/2]),
		SyncsPerSec: float64(len(ds)) / wall.Seconds()}, nil
}

// syncWrites writes 4 KiB at the end of a new file in dir and fdatasyncs
// it, len(ds) times, each time in ds; the file is removed after. With
// overwrite the file is first written to its final size and synced, and
// the timed writes overwrite it from its start.
func syncWrites(dir string, ds []time.Duration, overwrite bool) error {
	f, err := os.CreateTemp(dir, "fsync-probe-*")
	if err != nil {
		return err
	}
	defer func() {
		_ = f.Close()
		_ = os.Remove(f.Name())
	}()
	buf := make([]byte, 4096)
	if overwrite {
		if _, err := f.Write(make([]byte, len(buf)*len(ds))); err != nil {
			return err
		}
		if err := f.Sync(); err != nil {
			return err
		}
	}
	for i := range ds {
		t0 := time.Now()
		if _, err := f.WriteAt(buf, int64(i*len(buf))); err != nil {
			return err
		}
		if err := unix.Fdatasync(int(f.Fd())); err != nil {
			return err
		}
		ds[i] = time.Since(t0)
	}
	return nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// readReports reads a file of JSON lines, one Report each.
func readReports(path string) ([]Report, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	var out []Report
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		var r Report
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		out = append(out, r)
	}
	return out, sc.Err()
}

// rowKey identifies a row of the matrix.
type rowKey struct {
	Workload string
	Clients  int
	Batch    int
	Rate     int
	// Variant tells apart rows of one workload with other flags (groups).
	Variant string
}

func (k rowKey) String() string {
	w := k.Workload + k.Variant
	if k.Rate > 0 {
		w = fmt.Sprintf("%s @%d/s", w, k.Rate)
	}
	return fmt.Sprintf("%s | %d | %d", w, k.Clients, k.Batch)
}

// cell gathers the runs of one row and label.
type cell struct{ runs []Report }

// items returns the median items/s.
func (c *cell) items() float64 {
	return median(c.runs, func(r Report) float64 { return r.ItemsPerSec })
}

// requests returns the median requests/s (every request kind).
func (c *cell) requests() float64 {
	return median(c.runs, func(r Report) float64 {
		var n int64
		for _, l := range r.Requests {
			n += l.Count
		}
		if r.Seconds <= 0 {
			return 0
		}
		return float64(n) / r.Seconds
	})
}

// itemsPerSync returns the median items per fsync of the server's log
// over the runs that measured it (Report.ItemsPerSync), 0 when none did.
func (c *cell) itemsPerSync() float64 {
	var rs []Report
	for _, r := range c.runs {
		if r.ItemsPerSync > 0 {
			rs = append(rs, r)
		}
	}
	return median(rs, func(r Report) float64 { return r.ItemsPerSync })
}

func (c *cell) rssMiB() float64 {
	return median(c.runs, func(r Report) float64 {
		if r.Server == nil {
			return 0
		}
		return float64(r.Server.RSSAfterKB) / 1024
	})
}

func itemsPerSec(r Report) float64 { return r.ItemsPerSec }

// cpuPerK is the server's CPU milliseconds per 1,000 items moved (0 when
// unknown).
func cpuPerK(r Report) float64 {
	if r.Server == nil || r.Items == 0 {
		return 0
	}
	return r.Server.CPUSeconds / float64(r.Items) * 1e6
}

// median returns the median of f over the cell's runs.
func (c *cell) median(f func(Report) float64) float64 { return median(c.runs, f) }

func median(rs []Report, f func(Report) float64) float64 {
	if len(rs) == 0 {
		return 0
	}
	v := make([]float64, len(rs))
	for i, r := range rs {
		v[i] = f(r)
	}
	sort.Float64s(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

// table groups reports by row and label, rows in order of first appearance.
type table struct {
	rows  []rowKey
	cells map[rowKey]map[string]*cell
}

func group(reports []Report) *table {
	t := &table{cells: map[rowKey]map[string]*cell{}}
	for _, r := range reports {
		k := rowKey{r.Workload, r.Clients, r.Batch, r.Rate, r.variant()}
		if t.cells[k] == nil {
			t.cells[k] = map[string]*cell{}
			t.rows = append(t.rows, k)
		}
		c := t.cells[k][r.Label]
		if c == nil {
			c = &cell{}
			t.cells[k][r.Label] = c
		}
		c.runs = append(c.runs, r)
	}
	return t
}

// tNoSync is issue 13's t_nosync of a closed-loop row, in seconds: the
// time one of its C clients takes per request with sync off (the HTTP
// round trip and the server's work), C / (requests/s with sync off); 0
// when unknown.
func tNoSync(clients int, offRequests float64) float64 {
	if offRequests <= 0 {
		return 0
	}
	return float64(clients) / offRequests
}

// syncLimit is issue 13's limit for a closed-loop row, in items/s: each of
// C clients can go no faster than one request per (t_nosync + t_fsync),
// tNoSync in seconds (see tNoSync), fsyncMS in milliseconds; items/s scale
// with the row's items per request as measured with sync off
// (offItems / offRequests, both per second). 0 when an input is unknown.
func syncLimit(clients int, tNoSync, offItems, offRequests, fsyncMS float64) float64 {
	if tNoSync <= 0 || offRequests <= 0 || fsyncMS <= 0 {
		return 0
	}
	limitReq := float64(clients) / (tNoSync + fsyncMS/1000)
	return limitReq * offItems / offRequests
}

// goal returns a row's goal, as the ratio's name and its minimum, or ""
// when the row has none: issue 13's, except at batch 1 with 4 clients,
// where issue 38 asks for 0.85 of the limit.
func goal(k rowKey) (string, float64) {
	switch {
	case k.Rate > 0 || k.Workload == workloadDead:
		return "", 0
	case k.Batch >= 100:
		return "on/off", 0.9
	case k.Batch == 1 && k.Clients >= 16 && k.Workload == workloadCycle:
		return "on/off", 0.8
	case k.Batch == 1 && k.Clients == 4 && (k.Workload == workloadCycle || k.Workload == workloadProduce):
		return "on/limit", 0.85
	}
	return "", 0
}

// writeSummary renders sync on, sync off and memory side by side with the
// ratios of issue 13: beside each row's limit, the t_nosync and t_fsync it
// comes from; the items each fsync of the log carried with sync on (group
// commit); the server's CPU per 1,000 items and RSS.
func writeSummary(w io.Writer, reports []Report, fsyncMS float64) error {
	t := group(reports)
	var b strings.Builder
	fmt.Fprintf(&b, "limit = C / (t_nosync + t_fsync) in items/s, with t_fsync = %.3f ms (the probe's) and t_nosync = C / (requests/s with sync off), the time a request takes without its fsync.\n", fsyncMS)
	b.WriteString("items/fsync: items per fsync of the server's write-ahead log with sync on (styx_storage_syncs_total; group commit syncs several requests' writes at once).\n")
	b.WriteString("Medians over the runs of each cell; CPU (milliseconds per 1,000 items) and RSS are the server's.\n\n")
	b.WriteString("| workload | clients | batch | sync on items/s | sync off items/s | memory items/s | on/off | t_nosync + t_fsync ms | limit | on/limit | items/fsync on | goal | met | CPU ms/1k items on/off/mem | RSS MiB on/off/mem |\n")
	b.WriteString("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|---|--:|--:|\n")
	for _, k := range t.rows {
		on, off, mem := t.cells[k][labelSyncOn], t.cells[k][labelSyncOff], t.cells[k][labelMemory]
		val := func(c *cell, f func(*cell) float64, format string) string {
			if c == nil || len(c.runs) == 0 {
				return "–"
			}
			return fmt.Sprintf(format, f(c))
		}
		cpu := func(c *cell) float64 { return c.median(cpuPerK) }
		ratio, times, limit, onLimit := "–", "–", "–", "–"
		var rOnOff, rOnLimit float64
		if on != nil && off != nil && off.items() > 0 {
			rOnOff = on.items() / off.items()
			ratio = fmt.Sprintf("%.2f", rOnOff)
			if k.Rate == 0 && k.Workload != workloadDead {
				offReq := off.requests()
				tn := tNoSync(k.Clients, offReq)
				if l := syncLimit(k.Clients, tn, off.items(), offReq, fsyncMS); l > 0 {
					rOnLimit = on.items() / l
					times = fmt.Sprintf("%.2f + %.2f", tn*1000, fsyncMS)
					limit, onLimit = fmt.Sprintf("%.0f", l), fmt.Sprintf("%.2f", rOnLimit)
				}
			}
		}
		perSyncOn := "–"
		if on != nil {
			if v := on.itemsPerSync(); v > 0 {
				perSyncOn = perSync(v)
			}
		}
		g, min := goal(k)
		gs, met := "–", "–"
		if g != "" {
			gs = fmt.Sprintf("%s ≥ %g", g, min)
			got := rOnOff
			if g == "on/limit" {
				got = rOnLimit
			}
			if on != nil && off != nil {
				met = "no"
				if got >= min {
					met = "yes"
				}
			}
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s/%s/%s | %s/%s/%s |\n", k,
			val(on, (*cell).items, "%.0f"), val(off, (*cell).items, "%.0f"), val(mem, (*cell).items, "%.0f"),
			ratio, times, limit, onLimit, perSyncOn, gs, met,
			val(on, cpu, "%.1f"), val(off, cpu, "%.1f"), val(mem, cpu, "%.1f"),
			val(on, (*cell).rssMiB, "%.0f"), val(off, (*cell).rssMiB, "%.0f"), val(mem, (*cell).rssMiB, "%.0f"))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// writeCompare renders an A/B run: labels "old <mode>" and "new <mode>",
// one row per workload and mode, with each run's items/s, the medians and
// new/old.
func writeCompare(w io.Writer, reports []Report) error {
	t := group(reports)
	var modes []string
	for _, r := range reports {
		if m, ok := strings.CutPrefix(r.Label, "old "); ok && !slices.Contains(modes, m) {
			modes = append(modes, m)
		}
	}
	var b strings.Builder
	b.WriteString("| workload | clients | batch | mode | old items/s (runs) | new items/s (runs) | old median | new median | new/old | CPU ms per 1k items, old (runs) | new (runs) | old median | new median | new/old |\n")
	b.WriteString("|---|--:|--:|---|---|---|--:|--:|--:|---|---|--:|--:|--:|\n")
	for _, k := range t.rows {
		for _, m := range modes {
			o, n := t.cells[k]["old "+m], t.cells[k]["new "+m]
			if o == nil || n == nil {
				continue
			}
			runs := func(c *cell, f func(Report) float64, format string) string {
				var s []string
				for _, r := range c.runs {
					s = append(s, fmt.Sprintf(format, f(r)))
				}
				return strings.Join(s, ", ")
			}
			ratio := func(o, n float64) string {
				if o <= 0 {
					return "–"
				}
				return fmt.Sprintf("%.2f", n/o)
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %.0f | %.0f | %s | %s | %s | %.1f | %.1f | %s |\n", k, m,
				runs(o, itemsPerSec, "%.0f"), runs(n, itemsPerSec, "%.0f"), o.items(), n.items(), ratio(o.items(), n.items()),
				runs(o, cpuPerK, "%.1f"), runs(n, cpuPerK, "%.1f"), o.median(cpuPerK), n.median(cpuPerK),
				ratio(o.median(cpuPerK), n.median(cpuPerK)))
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

package main

// The results of one run: a Report, printed as a human table (writeTable),
// as one JSON object (--json), or, from a file of such JSON lines, as a
// markdown table (--markdown, used by bench/run.sh).

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Request kinds, in the order they are printed.
var requestKinds = []string{kindProduce, kindLease, kindComplete, kindRetry}

const (
	kindProduce  = "produce"
	kindLease    = "lease"
	kindComplete = "complete"
	kindRetry    = "retry"
)

// Report is the outcome of one run.
type Report struct {
	// Label is free text from --label (bench/run.sh sets the backend).
	Label      string `json:"label,omitempty"`
	Workload   string `json:"workload"`
	Endpoint   string `json:"endpoint"`
	Queue      string `json:"queue"`
	Clients    int    `json:"clients"`
	Batch      int    `json:"batch"`
	Payload    int    `json:"payload_bytes"`
	Partitions int    `json:"partitions"`
	// Rate is the open-loop produce rate of the latency workload (items/s).
	Rate int `json:"rate,omitempty"`
	// Prefill is how many items the drain and worker workloads produced
	// before measuring.
	Prefill int `json:"prefill,omitempty"`
	// Seconds is the length of the measured window.
	Seconds float64 `json:"seconds"`
	// Items counts the workload's unit of work finished in the window:
	// produced (produce), completed (cycle, drain, latency, worker) or
	// dead-lettered (dead) items.
	Items       int64   `json:"items"`
	ItemsPerSec float64 `json:"items_per_sec"`
	// Requests holds latency statistics per request kind (produce, lease,
	// complete, retry) for requests that succeeded in the window; empty for
	// the worker workload, whose requests the worker library sends.
	Requests map[string]Latency `json:"requests"`
	// LeaseEmpty counts leases answered 454 (nothing to lease before the
	// request timeout); they are not errors and not in Requests["lease"].
	// Not counted for the worker workload.
	LeaseEmpty int64 `json:"lease_empty"`
	// Errors counts failed requests over the whole run, warm-up included.
	Errors int64 `json:"errors"`
	// EndToEnd is the produce→lease latency of the latency workload.
	EndToEnd *Latency `json:"end_to_end,omitempty"`
	// Server is the server process's resource usage over the window.
	Server *ServerUsage `json:"server,omitempty"`
	// Syncs is how many fsyncs of the server's write-ahead log completed
	// in the measured window: the increase of styx_storage_syncs_total on
	// the endpoints' /metrics (summed over them). Nil when no endpoint
	// exposes it (a server that is not Styx, or /metrics not readable); 0
	// on the memory and PostgreSQL backends, and about 0 with --sync=false.
	Syncs *int64 `json:"syncs,omitempty"`
	// ItemsPerSync is Items / Syncs: how many of the workload's items one
	// fsync carried (group commit syncs the writes of several requests at
	// once). An item of cycle is written three times (produce, lease,
	// complete), so there it is a third of the writes per fsync. 0 when
	// Syncs is nil or 0.
	ItemsPerSync float64 `json:"items_per_sync,omitempty"`
	// Intervals splits the window into --interval pieces, in order.
	Intervals []Interval `json:"intervals,omitempty"`
	// Groups and Ordered are --groups and --ordered.
	Groups  int  `json:"groups,omitempty"`
	Ordered bool `json:"ordered,omitempty"`
	// Fairness is the fair workload's outcome.
	Fairness *Fairness `json:"fairness,omitempty"`
}

// variant names the flags that make a run of a workload another row:
// groups, ordered, and the fair workload's baseline.
func (r Report) variant() string {
	var v string
	if r.Groups > 0 {
		v += fmt.Sprintf(" %d groups", r.Groups)
	}
	if r.Ordered {
		v += " ordered"
	}
	if r.Fairness != nil && !r.Fairness.Grouped {
		v += " no groups"
	}
	return v
}

// Interval is the throughput of one --interval of the measured window.
type Interval struct {
	// Start is the interval's start in seconds from the window's start.
	Start float64 `json:"start_s"`
	// Seconds is the interval's length.
	Seconds     float64 `json:"seconds"`
	Items       int64   `json:"items"`
	ItemsPerSec float64 `json:"items_per_sec"`
}

// Latency summarises a histogram of durations, in milliseconds.
type Latency struct {
	Count int64   `json:"count"`
	P50   float64 `json:"p50_ms"`
	P99   float64 `json:"p99_ms"`
	P999  float64 `json:"p999_ms"`
	Max   float64 `json:"max_ms"`
}

// ServerUsage is the server's CPU time and memory over the measured window;
// with several server processes (one per node), the sums of theirs.
type ServerUsage struct {
	// PID is the (first) server process.
	PID int `json:"pid"`
	// PIDs lists all the processes measured when there are several.
	PIDs       []int   `json:"pids,omitempty"`
	CPUSeconds float64 `json:"cpu_seconds"`
	// CPUCores is CPUSeconds divided by the window: average cores busy.
	CPUCores    float64 `json:"cpu_cores"`
	RSSBeforeKB int64   `json:"rss_before_kb"`
	RSSAfterKB  int64   `json:"rss_after_kb"`
	// PeakRSSKB is the process's peak RSS since it started (VmHWM; with
	// several processes, the sum of their peaks).
	PeakRSSKB int64 `json:"peak_rss_kb,omitempty"`
}

// Histogram bounds: microseconds from 1µs to 10 minutes, 3 significant
// digits.
const (
	histMinMicros = 1
	histMaxMicros = int64(10 * time.Minute / time.Microsecond)
	histSigFigs   = 3
)

// newHistogram returns an empty latency histogram in microseconds.
func newHistogram() *hdrhistogram.Histogram {
	return hdrhistogram.New(histMinMicros, histMaxMicros, histSigFigs)
}

// recordDuration adds d to h, clamped to the histogram's range.
func recordDuration(h *hdrhistogram.Histogram, d time.Duration) {
	us := d.Microseconds()
	us = max(histMinMicros, min(histMaxMicros, us))
	_ = h.RecordValue(us) // cannot fail: clamped to the range
}

// summarize returns the count and percentiles of h (in microseconds) in
// milliseconds.
func summarize(h *hdrhistogram.Histogram) Latency {
	if h.TotalCount() == 0 {
		return Latency{}
	}
	ms := func(us int64) float64 { return float64(us) / 1000 }
	return Latency{
		Count: h.TotalCount(),
		P50:   ms(h.ValueAtQuantile(50)),
		P99:   ms(h.ValueAtQuantile(99)),
		P999:  ms(h.ValueAtQuantile(99.9)),
		Max:   ms(h.Max()),
	}
}

// writeJSON prints r as one line of JSON.
func writeJSON(w io.Writer, r Report) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

// writeTable prints r for people: the run's parameters and throughput, a
// table of request latencies, then errors and server usage.
func writeTable(w io.Writer, r Report) error {
	var b strings.Builder
	label := ""
	if r.Label != "" {
		label = " [" + r.Label + "]"
	}
	if r.recordsRequests() {
		fmt.Fprintf(&b, "workload %s%s: %d clients, batch %d, payload %d B, %d partition(s), queue %s\n",
			r.Workload, label, r.Clients, r.Batch, r.Payload, r.Partitions, r.Queue)
	} else {
		fmt.Fprintf(&b, "workload %s%s: one worker, concurrency %d, payload %d B, %d partition(s), queue %s\n",
			r.Workload, label, r.Clients, r.Payload, r.Partitions, r.Queue)
	}
	switch {
	case r.Rate > 0:
		fmt.Fprintf(&b, "open-loop produce rate %d items/s\n", r.Rate)
	case r.Prefill > 0:
		fmt.Fprintf(&b, "prefilled %d items\n", r.Prefill)
	}
	if r.Groups > 0 || r.Ordered {
		fmt.Fprintf(&b, "groups %d, ordered %v\n", r.Groups, r.Ordered)
	}
	fmt.Fprintf(&b, "%d items in %.2fs: %.1f items/s\n", r.Items, r.Seconds, r.ItemsPerSec)
	if f := r.Fairness; f != nil {
		fmt.Fprintf(&b, "fairness (groups on the items: %v): %s\n", f.Grouped, f)
	}
	b.WriteString("\n")
	if !r.recordsRequests() {
		fmt.Fprintf(&b, "request latencies and empty leases: not recorded (the worker library sends its own requests)\nerrors: %d\n", r.Errors)
		writeServer(&b, r)
		writeSyncs(&b, r)
		_, err := io.WriteString(w, b.String())
		return err
	}

	const rowFormat = "%-14s %9v %9v %9v %9v %9v\n"
	fmt.Fprintf(&b, rowFormat, "request", "count", "p50 ms", "p99 ms", "p999 ms", "max ms")
	row := func(name string, l Latency) {
		f := func(ms float64) string { return fmt.Sprintf("%.3f", ms) }
		fmt.Fprintf(&b, rowFormat, name, l.Count, f(l.P50), f(l.P99), f(l.P999), f(l.Max))
	}
	for _, k := range requestKinds {
		if l, ok := r.Requests[k]; ok && l.Count > 0 {
			row(k, l)
		}
	}
	if r.EndToEnd != nil {
		row("produce→lease", *r.EndToEnd)
	}
	fmt.Fprintf(&b, "\nempty leases (454): %d   errors: %d\n", r.LeaseEmpty, r.Errors)
	writeServer(&b, r)
	writeSyncs(&b, r)
	_, err := io.WriteString(w, b.String())
	return err
}

// recordsRequests reports whether r's workload records its own requests:
// every workload but worker, whose requests the worker library sends.
func (r Report) recordsRequests() bool { return r.Workload != workloadWorker }

// writeServer prints the server usage line of writeTable, if r.Server is
// set, with its CPU per 1,000 of the run's items when there were any.
func writeServer(b *strings.Builder, r Report) {
	s := r.Server
	if s == nil {
		return
	}
	who := pidList([]int{s.PID})
	if len(s.PIDs) > 1 {
		who = pidList(s.PIDs) + " summed"
	}
	perK := ""
	if r.Items > 0 {
		perK = fmt.Sprintf(", %.1f CPU-ms per 1,000 items", cpuPerK(r))
	}
	fmt.Fprintf(b, "server %s: %.2f CPU-s (%.2f cores%s), RSS %s → %s (peak %s)\n",
		who, s.CPUSeconds, s.CPUCores, perK, mib(s.RSSBeforeKB), mib(s.RSSAfterKB), mib(s.PeakRSSKB))
}

// writeSyncs prints the fsyncs line of writeTable, if r.Syncs is known.
func writeSyncs(b *strings.Builder, r Report) {
	if r.Syncs == nil {
		return
	}
	fmt.Fprintf(b, "fsyncs of the server's log (styx_storage_syncs_total): %d", *r.Syncs)
	if r.ItemsPerSync > 0 {
		fmt.Fprintf(b, ", %s items per fsync", perSync(r.ItemsPerSync))
	}
	b.WriteString("\n")
}

// perSync formats items per fsync: one decimal below 100.
func perSync(v float64) string {
	if v < 100 {
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.0f", v)
}

// mib formats a size in KiB as MiB.
func mib(kb int64) string { return fmt.Sprintf("%.1f MiB", float64(kb)/1024) }

// writeMarkdown reads JSON reports, one per line, from r and prints them as
// a markdown table, one row per report, in input order. Blank lines are
// skipped.
func writeMarkdown(w io.Writer, r io.Reader) error {
	fmt.Fprintln(w, "| workload | clients | batch | items/s | items/fsync | produce p50/p99 ms | lease p50/p99 ms | complete/retry p50/p99 ms | produce→lease p50/p99 ms | empty leases | errors | server CPU-s | server CPU ms/1k items | server RSS MiB |")
	fmt.Fprintln(w, "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		var rep Report
		if err := json.Unmarshal([]byte(line), &rep); err != nil {
			return fmt.Errorf("report line %q: %w", line, err)
		}
		fmt.Fprintln(w, markdownRow(rep))
	}
	return sc.Err()
}

// markdownRow renders one report as a markdown table row (see
// writeMarkdown for the columns).
func markdownRow(r Report) string {
	pair := func(l Latency, ok bool) string {
		if !ok || l.Count == 0 {
			return "–"
		}
		return fmt.Sprintf("%.2f / %.2f", l.P50, l.P99)
	}
	get := func(k string) string { l, ok := r.Requests[k]; return pair(l, ok) }
	finish := get(kindComplete)
	if l, ok := r.Requests[kindRetry]; ok && l.Count > 0 {
		finish = pair(l, ok)
	}
	workload := r.Workload + r.variant()
	if f := r.Fairness; f != nil {
		workload += " (" + f.String() + ")"
	}
	if r.Rate > 0 {
		workload = fmt.Sprintf("%s @%d/s", r.Workload, r.Rate)
	}
	e2e := "–"
	if r.EndToEnd != nil {
		e2e = pair(*r.EndToEnd, true)
	}
	cpu, perK, rss := "–", "–", "–"
	if r.Server != nil {
		cpu = fmt.Sprintf("%.2f", r.Server.CPUSeconds)
		rss = fmt.Sprintf("%.0f", float64(r.Server.RSSAfterKB)/1024)
		if r.Items > 0 {
			perK = fmt.Sprintf("%.1f", cpuPerK(r))
		}
	}
	perSyncCol := "–"
	if r.ItemsPerSync > 0 {
		perSyncCol = perSync(r.ItemsPerSync)
	}
	batch, empty := fmt.Sprint(r.Batch), fmt.Sprint(r.LeaseEmpty)
	if !r.recordsRequests() {
		batch, empty = "–", "–" // the worker sizes its own leases and sends its own requests
	}
	return fmt.Sprintf("| %s | %d | %s | %.0f | %s | %s | %s | %s | %s | %s | %d | %s | %s | %s |",
		workload, r.Clients, batch, r.ItemsPerSec, perSyncCol, get(kindProduce), get(kindLease), finish, e2e,
		empty, r.Errors, cpu, perK, rss)
}

// renderMarkdownFile prints the JSON reports in path as a markdown table.
func renderMarkdownFile(w io.Writer, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	return writeMarkdown(w, f)
}

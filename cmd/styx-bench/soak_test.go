package main

import (
	"context"
	"encoding/csv"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	pb "github.com/styxq/styx/styxpb"
	"github.com/styxq/styx/styxtest"
)

func TestSoakBuckets(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s := newSoakBuckets(start, time.Minute)
	for _, c := range []struct {
		at   time.Duration
		want int
	}{{-time.Second, 0}, {0, 0}, {59 * time.Second, 0}, {time.Minute, 1}, {150 * time.Second, 2}} {
		if got := s.index(start.Add(c.at)); got != c.want {
			t.Errorf("index(start%+v) = %d, want %d", c.at, got, c.want)
		}
	}

	record := func(at time.Duration, ms int) {
		s.add(start.Add(at), func(b *soakBucket) {
			recordDuration(b.produce, time.Duration(ms)*time.Millisecond)
			b.produced++
		})
	}
	for i := range 100 { // bucket 0: 1..100 ms
		record(time.Duration(i)*100*time.Millisecond, i+1)
	}
	record(61*time.Second, 500) // bucket 1
	record(185*time.Second, 7)  // bucket 3

	b0 := s.take(0)
	if b0.produced != 100 || b0.produce.TotalCount() != 100 {
		t.Fatalf("bucket 0: %d items, %d latencies; want 100 and 100", b0.produced, b0.produce.TotalCount())
	}
	if p99 := summarize(b0.produce).P99; p99 < 98.5 || p99 > 99.5 {
		t.Errorf("bucket 0 p99 = %v ms, want 99", p99)
	}
	record(30*time.Second, 1) // late for bucket 0: dropped
	if s.lateCount() != 1 {
		t.Errorf("late = %d, want 1", s.lateCount())
	}
	if b1 := s.take(1); b1.produced != 1 || summarize(b1.produce).P99 < 499 {
		t.Errorf("bucket 1: %d items, p99 %v ms; want 1 and 500", b1.produced, summarize(b1.produce).P99)
	}
	if b2 := s.take(2); b2.produced != 0 || b2.produce.TotalCount() != 0 || summarize(b2.produce).P99 != 0 {
		t.Errorf("bucket 2 (nothing ended in it) is not empty: %+v", b2)
	}
	if b3 := s.take(3); b3.produced != 1 {
		t.Errorf("bucket 3: %d items, want 1", b3.produced)
	}
	if len(s.open) != 0 {
		t.Errorf("%d buckets left open after taking them all", len(s.open))
	}
}

func TestSoakBucketsConcurrent(t *testing.T) {
	start := time.Now()
	s := newSoakBuckets(start, time.Second)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := range 1000 {
				s.add(start.Add(time.Duration(i%3)*time.Second), func(b *soakBucket) { b.completed++ })
			}
		})
	}
	wg.Wait()
	var total int64
	for k := range 3 {
		total += s.take(k).completed
	}
	if total != 8000 {
		t.Errorf("%d items in the buckets, want 8000", total)
	}
}

func TestJudge(t *testing.T) {
	rows := func(samples ...[2]int64) []soakRow {
		var out []soakRow
		for i, s := range samples {
			out = append(out, soakRow{Interval: i + 1, RSSKB: s[0], Goroutines: s[1]})
		}
		return out
	}
	f := flatness{WarmupIntervals: 1, Window: 2, RSSTolerance: 0.2, GoroutineTolerance: 0.1, GoroutineSlack: 5}
	warm := [2]int64{1000, 10} // interval 1, the warm-up: never judged
	for _, c := range []struct {
		name string
		rows []soakRow
		f    flatness
		flat bool
		want string
	}{
		// A sawtooth whose peaks stay level is flat although its last
		// sample is 50% above the first after the warm-up.
		{"sawtooth", rows(warm, [2]int64{32768, 90}, [2]int64{40960, 100}, [2]int64{60000, 200}, [2]int64{32768, 109}, [2]int64{49152, 100}), f, true,
			"Verdict: FLAT: peak of intervals 2-3 (after the warm-up) → peak of intervals 5-6 (the end): RSS 40.0 MiB → 48.0 MiB (+20.0%, tolerance ±20%); goroutines 100 → 109 (+9, tolerance ±10% or ±5)"},
		{"RSS grows", rows(warm, [2]int64{40960, 100}, [2]int64{30000, 100}, [2]int64{49562, 100}, [2]int64{40000, 100}), f, false,
			"RSS 40.0 MiB → 48.4 MiB (+21.0%, tolerance ±20%) OUT OF TOLERANCE"},
		{"RSS shrinks", rows(warm, [2]int64{40960, 100}, [2]int64{30000, 100}), f, false, "peak of intervals 2 (after the warm-up) → peak of intervals 3 (the end): RSS 40.0 MiB → 29.3 MiB (-26.8%"},
		{"goroutines grow", rows(warm, [2]int64{40960, 100}, [2]int64{40960, 111}), f, false, "goroutines 100 → 111 (+11, tolerance ±10% or ±5) OUT OF TOLERANCE"},
		{"goroutines within the slack", rows(warm, [2]int64{40960, 20}, [2]int64{40960, 25}), f, true, "goroutines 20 → 25 (+5,"},
		{"goroutines beyond the slack", rows(warm, [2]int64{40960, 20}, [2]int64{40960, 26}), f, false, "(+6, tolerance ±10% or ±5) OUT OF TOLERANCE"},
		{"no warm-up", rows([2]int64{40960, 20}, [2]int64{40960, 20}), flatness{Window: 3, RSSTolerance: 0.2, GoroutineTolerance: 0.1}, true,
			"peak of intervals 1 (after the warm-up) → peak of intervals 2 (the end)"},
		{"one interval after the warm-up", rows(warm, [2]int64{40960, 100}), f, false,
			"Verdict: INCONCLUSIVE: 2 interval(s) measured, the warm-up is 1; need at least two more"},
		{"RSS not measured in a window", rows(warm, [2]int64{40960, 100}, [2]int64{-1, 100}, [2]int64{40960, 100}, [2]int64{40960, 100}), f, false,
			"NOT FLAT: peak of intervals 2-3 (after the warm-up) → peak of intervals 4-5 (the end): RSS not measured; goroutines 100 → 100"},
		{"goroutines not measured", rows(warm, [2]int64{40960, 100}, [2]int64{40960, -1}), f, false, "goroutines not measured"},
	} {
		t.Run(c.name, func(t *testing.T) {
			v := judge(c.rows, c.f)
			if v.Flat != c.flat || !strings.Contains(v.Line, c.want) {
				t.Errorf("judge = %v %q\nwant %v, a line containing %q", v.Flat, v.Line, c.flat, c.want)
			}
		})
	}
}

func TestParseGoroutines(t *testing.T) {
	for _, c := range []struct {
		name, text string
		want       int64
		err        bool
	}{
		{"prometheus", "# HELP go_gc_duration_seconds x\ngo_gc_duration_seconds{quantile=\"0\"} 1e-05\n# HELP go_goroutines Number of goroutines that currently exist.\n# TYPE go_goroutines gauge\ngo_goroutines 37\ngo_info{version=\"go1.26\"} 1\n", 37, false},
		{"prometheus float", "go_goroutines 1.2e+02\n", 120, false},
		{"pprof", "goroutine profile: total 42\n5 @ 0x43a 0x44b\n#\t0x43a\truntime.gopark+0x1\n", 42, false},
		{"missing", "go_threads 9\n", 0, true},
		{"bad value", "go_goroutines many\n", 0, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			n, err := parseGoroutines(strings.NewReader(c.text))
			if (err != nil) != c.err || n != c.want {
				t.Errorf("parseGoroutines = %d, %v; want %d, error %v", n, err, c.want, c.err)
			}
		})
	}
}

func TestCountFDs(t *testing.T) {
	root := t.TempDir()
	fd := filepath.Join(root, "42", "fd")
	if err := os.MkdirAll(fd, 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := os.Symlink("/dev/null", filepath.Join(fd, strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := countFDs(root, 42); n != 3 || err != nil {
		t.Errorf("countFDs = %d, %v; want 3", n, err)
	}
	if _, err := countFDs(root, 43); err == nil {
		t.Error("countFDs of a missing process: no error")
	}
}

func TestWriteSoakCSV(t *testing.T) {
	var sb strings.Builder
	r := soakRow{Interval: 1, EndSeconds: 60, Seconds: 60, RSSKB: 2048, Goroutines: 30, OpenFiles: -1,
		Produced: 100, Completed: 80, Retried: 10, Dead: 2, Redriven: 5, Queued: 3, DeadQueued: -1, ProduceP99: 1.5, CycleP99: 12.25}
	if err := writeSoakCSV(&sb, []soakRow{r}); err != nil {
		t.Fatal(err)
	}
	recs, err := csv.NewReader(strings.NewReader(sb.String())).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 || len(recs[1]) != len(soakColumns) {
		t.Fatalf("CSV %q: want a header and one row of %d fields", sb.String(), len(soakColumns))
	}
	got := map[string]string{}
	for i, h := range recs[0] {
		got[h] = recs[1][i]
	}
	for k, want := range map[string]string{"rss_kb": "2048", "open_files": "-1", "moved": "97", "lease_complete_p99_ms": "12.250"} {
		if got[k] != want {
			t.Errorf("%s = %q, want %q", k, got[k], want)
		}
	}
}

func TestSoakFlags(t *testing.T) {
	cfg, err := parseFlags([]string{"--workload", "soak", "--endpoint", "http://127.0.0.1:2319/"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Rate != soakDefaultRate || cfg.Duration != 30*time.Minute || cfg.Interval != time.Minute ||
		cfg.MetricsURL != "http://127.0.0.1:2319/metrics" || cfg.Warmup != 0 {
		t.Errorf("soak defaults: rate %d, duration %s, interval %s, metrics %q, warm-up %s",
			cfg.Rate, cfg.Duration, cfg.Interval, cfg.MetricsURL, cfg.Warmup)
	}
	for _, args := range [][]string{
		{"--duration", "3m", "--interval", "1m"}, // one interval after the 2 warm-up intervals
		{"--verdict-window", "0"},
		{"--endpoint", "http://127.0.0.1:1,http://127.0.0.1:2"},
		{"--rss-tolerance", "0"},
		{"--redrive-every", "-1s"},
	} {
		if _, err := parseFlags(append([]string{"--workload", "soak"}, args...), io.Discard); err == nil {
			t.Errorf("soak %v: no error", args)
		}
	}
}

// TestSoakWorkload runs a short soak against an in-process server (the test
// process is the server process) and checks the rows and the files.
func TestSoakWorkload(t *testing.T) {
	srv := styxtest.Start(t, styxtest.Options{})
	dir := t.TempDir()
	report, csvPath := filepath.Join(dir, "soak.md"), filepath.Join(dir, "soak.csv")
	cfg, err := parseFlags([]string{"--endpoint", srv.Endpoint, "--workload", "soak", "--rate", "200", "--batch", "10",
		"--clients", "2", "--payload", "16", "--duration", "3s", "--interval", "1s", "--warmup-intervals", "1",
		"--redrive-every", "1s", "--lease-wait", "100ms", "--server-pid", strconv.Itoa(os.Getpid()),
		"--soak-report", report, "--soak-csv", csvPath}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	v, err := runSoak(context.Background(), cfg, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(v.Line, "Verdict: ") || strings.Contains(v.Line, "not measured") {
		t.Errorf("verdict %q", v.Line)
	}
	md, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(md), v.Line) || strings.Count(string(md), "\n| ") != 4 { // header and 3 rows
		t.Errorf("report:\n%s", md)
	}
	f, err := os.Open(csvPath)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	recs, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 4 {
		t.Fatalf("%d CSV records, want a header and 3 rows", len(recs))
	}
	col := func(row []string, name string) int64 {
		for i, h := range soakColumns {
			if h == name {
				n, _ := strconv.ParseInt(row[i], 10, 64)
				return n
			}
		}
		t.Fatalf("no column %s", name)
		return 0
	}
	var produced, completed, retried, dead, errs int64
	for _, row := range recs[1:] {
		produced += col(row, "produced")
		completed += col(row, "completed")
		retried += col(row, "retried")
		dead += col(row, "dead")
		errs += col(row, "errors")
		if col(row, "rss_kb") <= 0 || col(row, "goroutines") <= 0 || col(row, "open_files") <= 0 {
			t.Errorf("row %v: RSS, goroutines or open files not measured", row)
		}
	}
	// About 600 items at 200 items/s; 10% retried, 2% dead-lettered.
	if produced < 300 || completed < 200 || retried == 0 || dead == 0 || errs != 0 {
		t.Errorf("produced %d, completed %d, retried %d, dead %d, errors %d", produced, completed, retried, dead, errs)
	}
	if _, err := srv.Client.QueueStats(context.Background(), &pb.QueueStatsRequest{QueueName: cfg.Queue}); err == nil {
		t.Errorf("queue %s was not deleted", cfg.Queue)
	}
}

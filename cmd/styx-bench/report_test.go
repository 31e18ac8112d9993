package main

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"
)

func sampleReport() Report {
	return Report{
		Label: "memory", Workload: "cycle", Endpoint: "http://127.0.0.1:2319", Queue: "bench-cycle-1",
		Clients: 4, Batch: 100, Payload: 1024, Partitions: 1, Seconds: 10, Items: 123456, ItemsPerSec: 12345.6,
		Requests: map[string]Latency{
			kindProduce:  {Count: 1000, P50: 1.5, P99: 4.25, P999: 9, Max: 12},
			kindLease:    {Count: 1000, P50: 1.25, P99: 3.5, P999: 8, Max: 11},
			kindComplete: {Count: 999, P50: 0.75, P99: 2, P999: 5, Max: 6},
		},
		LeaseEmpty: 3, Errors: 1,
		Server: &ServerUsage{PID: 42, CPUSeconds: 7.5, CPUCores: 0.75, RSSBeforeKB: 10240, RSSAfterKB: 20480, PeakRSSKB: 30720},
		Syncs:  ptr(int64(41152)), ItemsPerSync: 123456.0 / 41152,
	}
}

func ptr[T any](v T) *T { return &v }

func TestWriteTable(t *testing.T) {
	var b bytes.Buffer
	if err := writeTable(&b, sampleReport()); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"workload cycle [memory]: 4 clients, batch 100, payload 1024 B",
		"123456 items in 10.00s: 12345.6 items/s",
		"produce             1000     1.500     4.250     9.000    12.000",
		"complete             999     0.750     2.000     5.000     6.000",
		"empty leases (454): 3   errors: 1",
		"server pid 42: 7.50 CPU-s (0.75 cores, 60.8 CPU-ms per 1,000 items), RSS 10.0 MiB → 20.0 MiB (peak 30.0 MiB)",
		"fsyncs of the server's log (styx_storage_syncs_total): 41152, 3.0 items per fsync",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	r := sampleReport()
	r.Server.PIDs = []int{42, 43}
	b.Reset()
	if err := writeTable(&b, r); err != nil {
		t.Fatal(err)
	}
	if want := "server pids 42, 43 summed: 7.50 CPU-s"; !strings.Contains(b.String(), want) {
		t.Errorf("table lacks %q:\n%s", want, b.String())
	}
	if strings.Contains(out, "retry") {
		t.Errorf("table shows a request kind that was never sent:\n%s", out)
	}

	b.Reset()
	if err := writeTable(&b, workerReport()); err != nil {
		t.Fatal(err)
	}
	out = b.String()
	for _, want := range []string{"workload worker: one worker, concurrency 16,", "prefilled 20000 items",
		"20000 items in 2.00s: 10000.0 items/s", "latencies and empty leases: not recorded", "errors: 0",
		"fsyncs of the server's log (styx_storage_syncs_total): 0\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("worker table lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "p50") || strings.Contains(out, "batch") || strings.Contains(out, "per fsync") {
		t.Errorf("worker table shows latencies, a batch size or items per fsync:\n%s", out)
	}

	r = sampleReport()
	r.Syncs, r.ItemsPerSync = nil, 0
	b.Reset()
	if err := writeTable(&b, r); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "fsync") {
		t.Errorf("table shows fsyncs the server does not expose:\n%s", b.String())
	}
}

// workerReport is a run on a server that exposes no fsyncs of its own
// (memory, PostgreSQL): Syncs is 0.
func workerReport() Report {
	return Report{Workload: "worker", Clients: 16, Batch: 1, Payload: 1024, Partitions: 1, Prefill: 20000,
		Seconds: 2, Items: 20000, ItemsPerSec: 10000, Requests: map[string]Latency{}, Syncs: ptr(int64(0))}
}

func TestJSONAndMarkdown(t *testing.T) {
	var lines bytes.Buffer
	r := sampleReport()
	if err := writeJSON(&lines, r); err != nil {
		t.Fatal(err)
	}
	var back map[string]any
	if err := json.Unmarshal(lines.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if back["items_per_sec"] != 12345.6 || back["requests"].(map[string]any)["lease"].(map[string]any)["p99_ms"] != 3.5 ||
		back["syncs"] != 41152.0 || back["items_per_sync"] != 3.0 {
		t.Errorf("unexpected JSON: %s", lines.String())
	}

	lat := Report{Workload: "latency", Clients: 4, Batch: 1, Rate: 1000, ItemsPerSec: 999.6,
		Requests: map[string]Latency{kindProduce: {Count: 10, P50: 0.5, P99: 1}},
		EndToEnd: &Latency{Count: 10, P50: 2, P99: 4.5}}
	if err := writeJSON(&lines, lat); err != nil {
		t.Fatal(err)
	}
	if err := writeJSON(&lines, workerReport()); err != nil {
		t.Fatal(err)
	}
	if l := lines.String(); strings.Count(l, `"syncs"`) != 2 || !strings.Contains(l, `"syncs":0`) || strings.Count(l, `"items_per_sync"`) != 1 {
		t.Errorf("syncs: unknown is left out, 0 is kept; items_per_sync only when there were fsyncs:\n%s", l)
	}
	lines.WriteString("\n") // blank lines are skipped
	var md bytes.Buffer
	if err := writeMarkdown(&md, &lines); err != nil {
		t.Fatal(err)
	}
	rows := strings.Split(strings.TrimSpace(md.String()), "\n")
	if len(rows) != 5 {
		t.Fatalf("want header, separator and 3 rows, got:\n%s", md.String())
	}
	if want := "| workload | clients | batch | items/s | items/fsync | produce p50/p99 ms | lease p50/p99 ms | complete/retry p50/p99 ms | produce→lease p50/p99 ms | empty leases | errors | server CPU-s | server CPU ms/1k items | server RSS MiB |"; rows[0] != want {
		t.Errorf("header\n got %s\nwant %s", rows[0], want)
	}
	if want := "| cycle | 4 | 100 | 12346 | 3.0 | 1.50 / 4.25 | 1.25 / 3.50 | 0.75 / 2.00 | – | 3 | 1 | 7.50 | 60.8 | 20 |"; rows[2] != want {
		t.Errorf("row\n got %s\nwant %s", rows[2], want)
	}
	if want := "| latency @1000/s | 4 | 1 | 1000 | – | 0.50 / 1.00 | – | – | 2.00 / 4.50 | 0 | 0 | – | – | – |"; rows[3] != want {
		t.Errorf("row\n got %s\nwant %s", rows[3], want)
	}
	if want := "| worker | 16 | – | 10000 | – | – | – | – | – | – | 0 | – | – | – |"; rows[4] != want {
		t.Errorf("row\n got %s\nwant %s", rows[4], want)
	}
}

func TestSummarize(t *testing.T) {
	h := newHistogram()
	for i := 1; i <= 1000; i++ {
		recordDuration(h, time.Duration(i)*time.Millisecond)
	}
	recordDuration(h, time.Hour) // clamped to the histogram's maximum, not dropped
	l := summarize(h)
	if l.Count != 1001 {
		t.Errorf("count %d, want 1001", l.Count)
	}
	if l.P50 < 499 || l.P50 > 502 || l.P99 < 988 || l.P99 > 992 {
		t.Errorf("p50 %.3f ms, p99 %.3f ms: want about 500 and 990", l.P50, l.P99)
	}
	if l.Max < 599_000 {
		t.Errorf("max %.0f ms: want the clamp near 10 minutes", l.Max)
	}
	if (summarize(newHistogram()) != Latency{}) {
		t.Error("an empty histogram should summarize to zero")
	}
}

func TestParseFlags(t *testing.T) {
	var stderr bytes.Buffer
	c, err := parseFlags([]string{"--workload", "latency", "--payload", "2"}, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	if c.Endpoint != "http://127.0.0.1:2319" || c.Clients != 4 || c.Batch != 1 || c.Duration != 10*time.Second ||
		c.Warmup != 2*time.Second || c.Payload != 8 || !strings.HasPrefix(c.Queue, "bench-latency-") || c.QueueGiven {
		t.Errorf("unexpected config %+v", c)
	}
	for _, args := range [][]string{{"--workload", "nope"}, {"--batch", "1001"}, {"--clients", "0"}, {"extra"},
		{"--count", "-1", "--workload", "produce"}, {"--count", "5", "--workload", "cycle"},
		{"--interval", "-1s"}, {"--interval", "1ms"}, {"--endpoint", "127.0.0.1:2319"},
		{"--endpoint", "http://a:1,"}, {"--server-pid", "-1"}, {"--workload", "worker", "--prefill", "0"},
		{"--workload", "worker", "--clients", "1001"}, {"--workload", "worker", "--batch", "10"}} {
		if _, err := parseFlags(args, &stderr); err == nil {
			t.Errorf("parseFlags(%q): want an error", args)
		}
	}
	if !slices.Equal(c.Endpoints, []string{"http://127.0.0.1:2319"}) || c.ServerPIDs != nil {
		t.Errorf("default endpoints %q, server pids %v", c.Endpoints, c.ServerPIDs)
	}
	if c, err := parseFlags([]string{"--server-pid", "0"}, &stderr); err != nil || len(c.ServerPIDs) != 0 {
		t.Errorf("--server-pid 0 (look up): pids %v, err %v", c.ServerPIDs, err)
	}
	c, err = parseFlags([]string{"--endpoint", "http://127.0.0.1:1, https://h:2/", "--server-pid", "7,8"}, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.Endpoints, []string{"http://127.0.0.1:1", "https://h:2/"}) || !slices.Equal(c.ServerPIDs, []int{7, 8}) {
		t.Errorf("endpoints %q, server pids %v", c.Endpoints, c.ServerPIDs)
	}
}

func TestParseEndpoints(t *testing.T) {
	for in, want := range map[string][]string{
		"http://127.0.0.1:2319":                   {"http://127.0.0.1:2319"},
		"http://a:1,http://b:2":                   {"http://a:1", "http://b:2"},
		" http://a:1 , https://b:2/ ,http://a:1 ": {"http://a:1", "https://b:2/", "http://a:1"},
	} {
		got, err := parseEndpoints(in)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("parseEndpoints(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", ",", "http://a:1,", "http://a:1,,http://b:2", "http://a:1,b:2", "ftp://a"} {
		if got, err := parseEndpoints(in); err == nil {
			t.Errorf("parseEndpoints(%q) = %q, want an error", in, got)
		}
	}
}

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSyncLimit(t *testing.T) {
	// 4 clients at 10,000 requests/s with sync off: t_nosync = 0.4 ms;
	// with t_fsync = 0.4 ms each client does one request per 0.8 ms.
	tn := tNoSync(4, 10000)
	assert.InDelta(t, 0.0004, tn, 1e-12)
	assert.InDelta(t, 5000, syncLimit(4, tn, 10000, 10000, 0.4), 0.01)
	// cycle: 3 requests per item.
	assert.InDelta(t, 5000.0/3, syncLimit(4, tn, 10000.0/3, 10000, 0.4), 0.01)
	assert.Zero(t, tNoSync(4, 0))
	assert.Zero(t, syncLimit(4, 0, 0, 0, 0.4))
	assert.Zero(t, syncLimit(4, tn, 10000, 10000, 0), "no t_fsync")
}

func TestSummaryAndCompare(t *testing.T) {
	lines := []string{
		`{"label":"pebble","workload":"produce","clients":4,"batch":1,"seconds":10,"items":45000,"items_per_sec":4500,"requests":{"produce":{"count":45000}},"server":{"pid":1,"cpu_seconds":4.5,"rss_after_kb":51200},"syncs":20000,"items_per_sync":2.25}`,
		`{"label":"pebble-nosync","workload":"produce","clients":4,"batch":1,"seconds":10,"items":100000,"items_per_sec":10000,"requests":{"produce":{"count":100000}},"server":{"pid":2,"cpu_seconds":5,"rss_after_kb":40960},"syncs":2,"items_per_sync":50000}`,
		`{"label":"memory","workload":"produce","clients":4,"batch":1,"seconds":10,"items":110000,"items_per_sec":11000,"requests":{"produce":{"count":110000}},"server":{"pid":3,"cpu_seconds":3.3,"rss_after_kb":30720},"syncs":0}`,
		`{"label":"pebble","workload":"cycle","clients":16,"batch":1,"seconds":10,"items":50000,"items_per_sec":5000,"requests":{}}`,
		`{"label":"pebble-nosync","workload":"cycle","clients":16,"batch":1,"seconds":10,"items":70000,"items_per_sec":7000,"requests":{}}`,
	}
	path := filepath.Join(t.TempDir(), "runs")
	require.NoError(t, os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600))
	reports, err := readReports(path)
	require.NoError(t, err)
	var b strings.Builder
	require.NoError(t, writeSummary(&b, reports, 0.4))
	// produce 4×1: t_nosync 4 / 10,000 requests/s = 0.4 ms, limit 5000,
	// on/limit 0.90, met; 2.25 items per fsync with sync on; CPU 4.5 s for
	// 45,000 items: 100 ms per 1,000. cycle 16×1: on/off 0.71 < 0.8, and no
	// requests with sync off, so no t_nosync nor limit.
	assert.Contains(t, b.String(), "| produce | 4 | 1 | 4500 | 10000 | 11000 | 0.45 | 0.40 + 0.40 | 5000 | 0.90 | 2.2 | on/limit ≥ 0.85 | yes | 100.0/50.0/30.0 | 50/40/30 |")
	assert.Contains(t, b.String(), "| cycle | 16 | 1 | 5000 | 7000 | – | 0.71 | – | – | – | – | on/off ≥ 0.8 | no | 0.0/0.0/– | 0/0/– |")
	header := "| workload | clients | batch | sync on items/s | sync off items/s | memory items/s | on/off | t_nosync + t_fsync ms | limit | on/limit | items/fsync on | goal | met | CPU ms/1k items on/off/mem | RSS MiB on/off/mem |"
	assert.Contains(t, b.String(), header)
	assert.Equal(t, 15, strings.Count(header, "|")-1, "columns")

	for i := range lines {
		lines[i] = strings.Replace(lines[i], `"label":"pebble"`, `"label":"old sync"`, 1)
	}
	lines = append(lines, `{"label":"new sync","workload":"produce","clients":4,"batch":1,"seconds":10,"items":54000,"items_per_sec":5400,"requests":{},"server":{"pid":1,"cpu_seconds":0.54}}`)
	require.NoError(t, os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600))
	reports, err = readReports(path)
	require.NoError(t, err)
	b.Reset()
	require.NoError(t, writeCompare(&b, reports))
	assert.Contains(t, b.String(), "| produce | 4 | 1 | sync | 4500 | 5400 | 4500 | 5400 | 1.20 |")
	// 0.54 CPU-s for 54,000 items: 10 ms per 1,000; old: 4.5 CPU-s for 45,000.
	assert.Contains(t, b.String(), "| 100.0 | 10.0 | 100.0 | 10.0 | 0.10 |")
}

func TestFsyncProbe(t *testing.T) {
	p, err := probeFsync(t.TempDir(), 5, 1, false)
	require.NoError(t, err)
	assert.Equal(t, 5, p.Writes)
	assert.Positive(t, p.MeanMS)
	assert.Positive(t, p.P50MS)
	assert.Positive(t, p.SyncsPerSec)
	dir := t.TempDir()
	p, err = probeFsync(dir, 5, 3, true)
	require.NoError(t, err)
	assert.Equal(t, 3, p.Files)
	assert.True(t, p.Overwrite)
	assert.Equal(t, 15, p.Writes)
	left, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Empty(t, left, "the probe's files are removed")
}

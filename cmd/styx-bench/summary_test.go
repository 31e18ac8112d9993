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
	assert.InDelta(t, 5000, syncLimit(4, 10000, 10000, 0.4), 0.01)
	// cycle: 3 requests per item.
	assert.InDelta(t, 5000.0/3, syncLimit(4, 10000.0/3, 10000, 0.4), 0.01)
	assert.Zero(t, syncLimit(4, 0, 0, 0.4))
}

func TestSummaryAndCompare(t *testing.T) {
	lines := []string{
		`{"label":"pebble","workload":"produce","clients":4,"batch":1,"seconds":10,"items":45000,"items_per_sec":4500,"requests":{"produce":{"count":45000}}}`,
		`{"label":"pebble-nosync","workload":"produce","clients":4,"batch":1,"seconds":10,"items":100000,"items_per_sec":10000,"requests":{"produce":{"count":100000}}}`,
		`{"label":"memory","workload":"produce","clients":4,"batch":1,"seconds":10,"items":110000,"items_per_sec":11000,"requests":{"produce":{"count":110000}}}`,
		`{"label":"pebble","workload":"cycle","clients":16,"batch":1,"seconds":10,"items":50000,"items_per_sec":5000,"requests":{}}`,
		`{"label":"pebble-nosync","workload":"cycle","clients":16,"batch":1,"seconds":10,"items":70000,"items_per_sec":7000,"requests":{}}`,
	}
	path := filepath.Join(t.TempDir(), "runs")
	require.NoError(t, os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600))
	reports, err := readReports(path)
	require.NoError(t, err)
	var b strings.Builder
	require.NoError(t, writeSummary(&b, reports, 0.4))
	// produce 4×1: limit 5000, on/limit 0.90, met; cycle 16×1: on/off 0.71 < 0.8.
	assert.Contains(t, b.String(), "| produce | 4 | 1 | 4500 | 10000 | 11000 | 0.45 | 5000 | 0.90 | on/limit ≥ 0.9 | yes |")
	assert.Contains(t, b.String(), "| cycle | 16 | 1 | 5000 | 7000 | – | 0.71 |")
	assert.Contains(t, b.String(), "| on/off ≥ 0.8 | no |")

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
	// 0.54 CPU-s for 54,000 items: 10 ms per 1,000.
	assert.Contains(t, b.String(), "| 10.0 | 0.0 | 10.0 | – |")
}

func TestFsyncProbe(t *testing.T) {
	p, err := probeFsync(t.TempDir(), 5)
	require.NoError(t, err)
	assert.Equal(t, 5, p.Writes)
	assert.Positive(t, p.MeanMS)
	assert.Positive(t, p.P50MS)
}

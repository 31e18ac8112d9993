package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/pprof/profile"
	"github.com/stretchr/testify/require"
)

// TestProfileSummary writes a CPU profile of three stacks and checks the
// buckets, the top functions by own CPU and the CPU per item it prints.
func TestProfileSummary(t *testing.T) {
	fn := func(id uint64, name string) *profile.Function { return &profile.Function{ID: id, Name: name} }
	serve := fn(1, "net/http.(*conn).serve")
	decode := fn(2, "github.com/styxq/styx/transport.(*Handler).decode")
	unmarshal := fn(3, "google.golang.org/protobuf/proto.Unmarshal")
	apply := fn(4, "github.com/cockroachdb/pebble/v2.(*memTable).apply")
	gc := fn(5, "runtime.gcBgMarkWorker")
	scan := fn(6, "runtime.scanobject")
	loc := func(id uint64, lines ...*profile.Function) *profile.Location {
		l := &profile.Location{ID: id}
		for _, f := range lines {
			l.Line = append(l.Line, profile.Line{Function: f})
		}
		return l
	}
	// unmarshal is inlined into decode: one location, two lines.
	l1, l2, l3, l4, l5 := loc(1, unmarshal, decode), loc(2, serve), loc(3, apply), loc(4, scan), loc(5, gc)
	p := &profile.Profile{
		SampleType:    []*profile.ValueType{{Type: "samples", Unit: "count"}, {Type: "cpu", Unit: "nanoseconds"}},
		DurationNanos: 2e9,
		Function:      []*profile.Function{serve, decode, unmarshal, apply, gc, scan},
		Location:      []*profile.Location{l1, l2, l3, l4, l5},
		Sample: []*profile.Sample{
			{Location: []*profile.Location{l1, l2}, Value: []int64{5, 500e6}},
			{Location: []*profile.Location{l3}, Value: []int64{3, 300e6}},
			{Location: []*profile.Location{l4, l5}, Value: []int64{2, 200e6}},
		},
	}
	path := filepath.Join(t.TempDir(), "cpu.pprof")
	f, err := os.Create(path)
	require.NoError(t, err)
	require.NoError(t, p.Write(f))
	require.NoError(t, f.Close())

	s, err := summarizeProfile(path, 2)
	require.NoError(t, err)
	require.InDelta(t, 1.0, s.SampledCPU, 1e-9)
	require.InDelta(t, 2.0, s.Seconds, 1e-9)
	share := map[string]float64{}
	for i, b := range profileBuckets {
		share[b.name] = s.Buckets[i]
	}
	require.InDelta(t, 0.5, share["HTTP serving"], 1e-9)
	require.InDelta(t, 0.5, share["decode"], 1e-9)
	require.InDelta(t, 0.3, share["memtable"], 1e-9)
	require.InDelta(t, 0.2, share["GC"], 1e-9)
	require.Zero(t, share["compactions"])
	require.Equal(t, []profileFunc{{"google.golang.org/protobuf/proto.Unmarshal", 0.5}, {"github.com/cockroachdb/pebble/v2.(*memTable).apply", 0.3}}, s.Top)

	var b strings.Builder
	require.NoError(t, writeProfileSummary(&b, "new sync cycle", s, 1000))
	out := b.String()
	require.Contains(t, out, "**new sync cycle**: 1.00 CPU-s sampled in 2.0 s, 1000 items/s, 500.0 µs of sampled CPU per item")
	require.Contains(t, out, "HTTP serving 50.0 %, decode 50.0 %, memtable 30.0 %, GC 20.0 %.")
	require.Contains(t, out, "| 50.0 % | `proto.Unmarshal` |")
	require.Contains(t, out, "| 30.0 % | `v2.(*memTable).apply` |")
	require.NotContains(t, out, "compactions")

	_, err = summarizeProfile(filepath.Join(t.TempDir(), "missing"), 10)
	require.Error(t, err)
}

func TestShortFunc(t *testing.T) {
	for in, want := range map[string]string{
		"runtime.mallocgc": "runtime.mallocgc",
		"github.com/cockroachdb/pebble/v2/internal/arenaskl.(*Skiplist).findSplice": "arenaskl.(*Skiplist).findSplice",
		"net/http.(*conn).serve.func1":                                              "http.(*conn).serve.func1",
		"slices.SortFunc[go.shape.[]*github.com/x/y.T]":                             "slices.SortFunc[go.shape.[]*github.com/x/y.T]",
	} {
		require.Equal(t, want, shortFunc(in), in)
	}
}

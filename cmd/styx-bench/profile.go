package main

import (
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/google/pprof/profile"
)

// profileBuckets are the parts of the server a CPU profile is split into,
// each by the functions whose frames mark it (a sample counts toward a
// bucket when any frame of its stack, inlined ones included, contains one
// of the names). They are the rows of docs/benchmarks.md's profile tables.
var profileBuckets = []struct {
	name  string
	match []string
}{
	{"HTTP serving", []string{"net/http.(*conn).serve"}},
	{"decode", []string{"transport.(*Handler).decode"}},
	{"reply", []string{"transport.(*Handler).reply"}},
	{"engine", []string{"engine.(*Engine).handle"}},
	{"memtable", []string{"(*memTable).apply"}},
	{"compactions", []string{"runCompaction"}},
	{"WAL", []string{"(*LogWriter).flushLoop"}},
	{"pgx", []string{"jackc/pgx"}},
	{"malloc", []string{"runtime.mallocgc"}},
	{"GC", []string{"runtime.gcBgMarkWorker"}},
}

// profileSummary is one CPU profile reduced to what the A/B report prints.
type profileSummary struct {
	// Seconds is the profile's duration, SampledCPU the CPU seconds its
	// samples hold.
	Seconds, SampledCPU float64
	// Buckets is each profileBuckets entry's cumulative share of
	// SampledCPU (0 to 1), in that order.
	Buckets []float64
	// Top is the functions with the most own CPU, most first, with their
	// share of SampledCPU.
	Top []profileFunc
}

type profileFunc struct {
	Name  string
	Share float64
}

// summarizeProfile reads the CPU profile at path (pprof's format, as
// /debug/pprof/profile serves it) and keeps its top n functions.
func summarizeProfile(path string, n int) (profileSummary, error) {
	f, err := os.Open(path)
	if err != nil {
		return profileSummary{}, err
	}
	defer func() { _ = f.Close() }()
	p, err := profile.Parse(f)
	if err != nil {
		return profileSummary{}, fmt.Errorf("%s: %w", path, err)
	}
	vi := -1
	for i, st := range p.SampleType {
		if st.Type == "cpu" && st.Unit == "nanoseconds" {
			vi = i
		}
	}
	if vi < 0 {
		return profileSummary{}, fmt.Errorf("%s: not a CPU profile (no cpu/nanoseconds sample type)", path)
	}
	var total int64
	bucket := make([]int64, len(profileBuckets))
	flat := map[string]int64{}
	for _, s := range p.Sample {
		v := s.Value[vi]
		total += v
		if len(s.Location) > 0 && len(s.Location[0].Line) > 0 {
			flat[s.Location[0].Line[0].Function.Name] += v
		}
		for bi, b := range profileBuckets {
			if stackMatches(s, b.match) {
				bucket[bi] += v
			}
		}
	}
	out := profileSummary{Seconds: float64(p.DurationNanos) / 1e9, SampledCPU: float64(total) / 1e9}
	share := func(v int64) float64 {
		if total == 0 {
			return 0
		}
		return float64(v) / float64(total)
	}
	for _, v := range bucket {
		out.Buckets = append(out.Buckets, share(v))
	}
	for name, v := range flat {
		out.Top = append(out.Top, profileFunc{Name: name, Share: share(v)})
	}
	sort.Slice(out.Top, func(i, j int) bool {
		if out.Top[i].Share != out.Top[j].Share {
			return out.Top[i].Share > out.Top[j].Share
		}
		return out.Top[i].Name < out.Top[j].Name
	})
	if len(out.Top) > n {
		out.Top = out.Top[:n]
	}
	return out, nil
}

// stackMatches reports whether a frame of s's stack contains one of names.
func stackMatches(s *profile.Sample, names []string) bool {
	for _, loc := range s.Location {
		for _, line := range loc.Line {
			for _, m := range names {
				if strings.Contains(line.Function.Name, m) {
					return true
				}
			}
		}
	}
	return false
}

// writeProfileSummary prints the summary as Markdown under a heading named
// label: the sampled CPU per item (itemsPerSec is the run's throughput over
// the profile; 0 leaves it out), the buckets that hold any CPU, and the top
// functions.
func writeProfileSummary(w io.Writer, label string, s profileSummary, itemsPerSec float64) error {
	var b strings.Builder
	fmt.Fprintf(&b, "**%s**: %.2f CPU-s sampled in %.1f s", label, s.SampledCPU, s.Seconds)
	if itemsPerSec > 0 && s.Seconds > 0 {
		fmt.Fprintf(&b, ", %.0f items/s, %.1f µs of sampled CPU per item", itemsPerSec, s.SampledCPU/(itemsPerSec*s.Seconds)*1e6)
	}
	b.WriteString(".\n\nCumulative:")
	sep := " "
	for i, v := range s.Buckets {
		if v >= 0.0005 {
			fmt.Fprintf(&b, "%s%s %.1f %%", sep, profileBuckets[i].name, v*100)
			sep = ", "
		}
	}
	b.WriteString(".\n\n| own CPU | function |\n|--:|---|\n")
	for _, f := range s.Top {
		fmt.Fprintf(&b, "| %.1f %% | `%s` |\n", f.Share*100, shortFunc(f.Name))
	}
	b.WriteString("\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// shortFunc drops a function name's import path, keeping its package:
// "github.com/cockroachdb/pebble/v2/internal/arenaskl.(*Skiplist).findSplice"
// becomes "arenaskl.(*Skiplist).findSplice".
func shortFunc(name string) string {
	end := len(name)
	if i := strings.IndexAny(name, "(["); i >= 0 {
		end = i
	}
	if i := strings.LastIndexByte(name[:end], '/'); i >= 0 {
		return name[i+1:]
	}
	return name
}

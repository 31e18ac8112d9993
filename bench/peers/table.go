package main

// The side-by-side tables: styx-bench's and peer-bench's JSON lines (and
// the bench script's lines for peers that did not run) in one file,
// grouped by label, workload and batch.

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
)

// line is the part of a JSON line the tables use. Missing (a peer that
// could not be installed or started) and Failed (a run that produced no
// result) are written by bench/peers.sh.
type line struct {
	Label       string  `json:"label"`
	Workload    string  `json:"workload"`
	Batch       int     `json:"batch"`
	ItemsPerSec float64 `json:"items_per_sec"`
	Errors      int64   `json:"errors"`
	Missing     string  `json:"missing"`
	Failed      string  `json:"failed"`
	Config      string  `json:"config"`
}

// cell is one system's runs of one row.
type cell struct {
	rates  []float64 // in the order they ran
	errors int64
	failed []string
}

// styxVariants are the extra Styx rows bench/peers.sh runs (labels
// styx-postgres-SUFFIX and styx-pebble-SUFFIX), each under its row's
// plain Styx figure.
var styxVariants = []struct{ suffix, text string }{
	{"cwl", "Styx completing with the next lease"},
	{"ahead", "Styx's lease sent ahead of its produce, completing the previous item"},
	{"worker", "Styx's clients only producing while one worker.Worker consumes (River's shape)"},
}

// extra is a row under a plain Styx row: its label in the JSON lines and
// its text in the table.
type extra struct{ label, text string }

// ceilings are the rows of bench/peers.sh's ceiling runs (ceilings.go;
// BENCH_PEERS_CEILINGS), per table (keyed by the Styx label): what the
// machine gives the row's loop without a queue server's work (sql,
// http-floor) or without fsync (styx-pebble-nosync).
var ceilings = map[string][]extra{
	"styx-postgres": {{"sql", "ceiling: no queue server, the row work in bare SQL (peer-bench --system sql)"}},
	"styx-pebble": {
		{"styx-pebble-nosync", "ceiling: Styx on Pebble without fsync (--sync=false, not durable)"},
		{"http-floor", "ceiling: no queue, no storage, bare Go net/http with Styx's requests (peer-bench --system http-floor)"},
	},
}

// extras returns the rows under styx's (styx-postgres or styx-pebble) plain
// row, in order: its variants, then its ceilings.
func extras(styx string) []extra {
	out := make([]extra, 0, len(styxVariants)+len(ceilings[styx]))
	for _, v := range styxVariants {
		out = append(out, extra{styx + "-" + v.suffix, v.text})
	}
	return append(out, ceilings[styx]...)
}

// median returns the median of the cell's rates (0 when none).
func (c *cell) median() float64 {
	if c == nil || len(c.rates) == 0 {
		return 0
	}
	s := slices.Clone(c.rates)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// rows are the workloads of the tables, in order.
var rows = []struct {
	workload string
	batch    int
}{{"produce", 1}, {"produce", 100}, {"cycle", 1}, {"cycle", 100}}

// renderTables reads the JSON lines in path and writes the two tables.
func renderTables(out io.Writer, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	cells := map[string]*cell{}
	missing := map[string]string{}
	configs := map[string][]string{} // per label, in the order first seen
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		if strings.TrimSpace(sc.Text()) == "" {
			continue
		}
		var l line
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		if l.Missing != "" {
			missing[l.Label] = l.Missing
			continue
		}
		k := fmt.Sprintf("%s/%s/%d", l.Label, l.Workload, l.Batch)
		c := cells[k]
		if c == nil {
			c = &cell{}
			cells[k] = c
		}
		if l.Failed != "" {
			c.failed = append(c.failed, l.Failed)
			continue
		}
		if l.Config != "" && !slices.Contains(configs[l.Label], l.Config) {
			configs[l.Label] = append(configs[l.Label], l.Config)
		}
		c.rates = append(c.rates, l.ItemsPerSec)
		c.errors += l.Errors
	}
	if err := sc.Err(); err != nil {
		return err
	}
	get := func(label, workload string, batch int) *cell {
		return cells[fmt.Sprintf("%s/%s/%d", label, workload, batch)]
	}
	show := func(label string, c *cell) string {
		if m, ok := missing[label]; ok {
			return "not run: " + m
		}
		if c == nil || (len(c.rates) == 0 && len(c.failed) == 0) {
			return "–"
		}
		if len(c.rates) == 0 {
			return "failed"
		}
		s := thousands(c.median())
		if len(c.rates) > 1 {
			each := make([]string, len(c.rates))
			for i, r := range c.rates {
				each[i] = thousands(r)
			}
			s += " (" + strings.Join(each, " · ") + ")"
		}
		if c.errors > 0 {
			s += fmt.Sprintf(", %d errors", c.errors)
		}
		if len(c.failed) > 0 {
			s += fmt.Sprintf(", %d run(s) failed", len(c.failed))
		}
		return s
	}
	ratio := func(a, b float64) string {
		if a <= 0 || b <= 0 {
			return "–"
		}
		return fmt.Sprintf("%.2f", a/b)
	}

	fmt.Fprintln(out, "### PostgreSQL: Styx beside River")
	fmt.Fprintln(out)
	fmt.Fprintln(out, "Median items/s (each round's figure in parentheses, in the order they ran).")
	fmt.Fprintln(out)
	fmt.Fprintln(out, "| workload | Styx on PostgreSQL | River | Styx / River |")
	fmt.Fprintln(out, "|---|--:|--:|--:|")
	for _, r := range rows {
		s, rv := get("styx-postgres", r.workload, r.batch), get("river", r.workload, r.batch)
		fmt.Fprintf(out, "| %s, batch %d | %s | %s | %s |\n", r.workload, r.batch,
			show("styx-postgres", s), show("river", rv), ratio(s.median(), rv.median()))
		for _, v := range extras("styx-postgres") {
			if c := get(v.label, r.workload, r.batch); c != nil {
				fmt.Fprintf(out, "| %s, batch %d, %s | %s | %s | %s |\n", r.workload, r.batch, v.text,
					show(v.label, c), show("river", rv), ratio(c.median(), rv.median()))
			}
		}
	}
	fmt.Fprintln(out)
	fmt.Fprintln(out, "### One durable node: Styx on Pebble beside RabbitMQ and NATS JetStream")
	fmt.Fprintln(out)
	fmt.Fprintln(out, "Median items/s (each round's figure in parentheses, in the order they ran).")
	fmt.Fprintln(out)
	fmt.Fprintln(out, "| workload | Styx on Pebble | RabbitMQ quorum queue | NATS JetStream (sync always) | Styx / best durable peer |")
	fmt.Fprintln(out, "|---|--:|--:|--:|--:|")
	for _, r := range rows {
		s := get("styx-pebble", r.workload, r.batch)
		rb, nt := get("rabbitmq", r.workload, r.batch), get("nats", r.workload, r.batch)
		best, bestName := rb.median(), "RabbitMQ"
		if nt.median() > best {
			best, bestName = nt.median(), "NATS"
		}
		rt := ratio(s.median(), best)
		if rt != "–" {
			rt += " (" + bestName + ")"
		}
		fmt.Fprintf(out, "| %s, batch %d | %s | %s | %s | %s |\n", r.workload, r.batch,
			show("styx-pebble", s), show("rabbitmq", rb), show("nats", nt), rt)
		for _, v := range extras("styx-pebble") {
			c := get(v.label, r.workload, r.batch)
			if c == nil {
				continue
			}
			rt := ratio(c.median(), best)
			if rt != "–" {
				rt += " (" + bestName + ")"
			}
			fmt.Fprintf(out, "| %s, batch %d, %s | %s | %s | %s | %s |\n", r.workload, r.batch, v.text,
				show(v.label, c), show("rabbitmq", rb), show("nats", nt), rt)
		}
	}
	if len(configs) > 0 {
		fmt.Fprintln(out)
		fmt.Fprintln(out, "Peer configurations, as each run reported them:")
		fmt.Fprintln(out)
		for _, label := range []string{"river", "rabbitmq", "nats", "sql", "http-floor"} {
			for _, c := range configs[label] {
				fmt.Fprintf(out, "- %s: %s\n", label, c)
			}
		}
	}
	return nil
}

// thousands formats v rounded to a whole number with thousands separators.
func thousands(v float64) string {
	s := fmt.Sprintf("%.0f", v)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

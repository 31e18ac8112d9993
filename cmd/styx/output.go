package main

import (
	"encoding/base64"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/styxq/styx/internal/text"
)

// writeJSON writes m as protojson on one line.
func writeJSON(w io.Writer, m proto.Message) error {
	b, err := protojson.Marshal(m)
	if err != nil {
		return fmt.Errorf("encode reply: %w", err)
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

// table writes aligned columns of tab-separated cells.
type table struct{ tw *tabwriter.Writer }

func newTable(w io.Writer, header ...string) *table {
	t := &table{tw: tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)}
	if len(header) > 0 {
		t.row(header...)
	}
	return t
}

// row adds a row; each cell is made one line (oneLine) so that it cannot
// break the alignment or hide what it holds.
func (t *table) row(cells ...string) {
	for i, c := range cells {
		cells[i] = oneLine(c)
	}
	_, _ = fmt.Fprintln(t.tw, strings.Join(cells, "\t"))
}

// flush writes the table.
func (t *table) flush() error { return t.tw.Flush() }

// oneLine returns s as one line for a terminal: tabs and line breaks
// become spaces, and every other hidden character (control, bidi and
// zero-width characters: internal/text) a visible escape such as \u202e or
// \u001b, so that text a client sent (a reference, a kind, an error) can
// neither reorder nor recolour what an operator reads. oneLine of its own
// result is the same string.
func oneLine(s string) string {
	if strings.ContainsAny(s, "\t\n\r") {
		s = strings.Map(func(r rune) rune {
			if r == '\t' || r == '\n' || r == '\r' {
				return ' '
			}
			return r
		}, s)
	}
	return text.Escape(s)
}

// orDash returns s, or "-" if s is empty, so that empty cells stay visible.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// truncate shortens s to at most n characters, ending it with "…" if cut.
func truncate(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// unset reports whether a wire time is unset: omitted, or Go's zero time
// (0001-01-01T00:00:00Z), which Styx and Querator send for Querator's time
// fields that are not set.
func unset(ts *timestamppb.Timestamp) bool {
	return ts == nil || ts.AsTime().IsZero()
}

// formatTime formats ts as RFC 3339 in UTC, or "-" if unset.
func formatTime(ts *timestamppb.Timestamp) string {
	if unset(ts) {
		return "-"
	}
	return ts.AsTime().UTC().Format(time.RFC3339)
}

// relative formats ts relative to now: "3m12s ago", "in 45s", or "-" if
// unset.
func relative(now time.Time, ts *timestamppb.Timestamp) string {
	if unset(ts) {
		return "-"
	}
	d := now.Sub(ts.AsTime())
	if d < 0 {
		return "in " + shortDuration(-d)
	}
	return shortDuration(d) + " ago"
}

// shortDuration formats d to the second with at most two units: "45s",
// "3m12s", "5h7m", "3d4h".
func shortDuration(d time.Duration) string {
	d = d.Round(time.Second)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d/time.Second))
	case d < time.Hour:
		return fmt.Sprintf("%dm%ds", int(d/time.Minute), int(d%time.Minute/time.Second))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%dm", int(d/time.Hour), int(d%time.Hour/time.Minute))
	default:
		return fmt.Sprintf("%dd%dh", int(d/(24*time.Hour)), int(d%(24*time.Hour)/time.Hour))
	}
}

// durationText formats a server duration such as "16.418798ms" for a
// table: to the millisecond under a second, else as shortDuration. Text
// that is not a duration is returned as is; empty text as "-".
func durationText(s string) string {
	d, err := time.ParseDuration(s)
	switch {
	case s == "":
		return "-"
	case err != nil:
		return s
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	default:
		return shortDuration(d)
	}
}

// payloadText returns b as text if it is printable UTF-8 (spaces allowed,
// no newlines or other control characters), else as "base64:" and its
// standard base64 encoding.
func payloadText(b []byte) string {
	if utf8.Valid(b) && !strings.ContainsFunc(string(b), func(r rune) bool { return !unicode.IsPrint(r) }) {
		return string(b)
	}
	return "base64:" + base64.StdEncoding.EncodeToString(b)
}

// plural returns "1 item", "2 items".
func plural(n int, noun string) string {
	if n == 1 {
		return fmt.Sprintf("1 %s", noun)
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

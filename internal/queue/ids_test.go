package queue

import (
	"testing"
	"time"
)

func TestIDRoundTripAndStrictness(t *testing.T) {
	for _, id := range []uint64{0, 1, 1 << 63, ^uint64(0), uint64(time.Now().UnixNano())} {
		s := FormatID(id)
		got, err := ParseID("ids", s)
		if err != nil || got != id {
			t.Fatalf("ParseID(FormatID(%d)=%q) = %d, %v", id, s, got, err)
		}
	}
	s := FormatID(42)
	alias := s[:12] + string(s[12]+1) // sets the last character's spare bit
	if _, err := ParseID("ids", alias); err == nil {
		t.Fatalf("ParseID(%q) accepted an alias of %q", alias, s)
	}
	// The wire form is base32hex of the big-endian bytes, lowercased, as
	// Styx has always written it.
	for id, want := range map[uint64]string{0: "0000000000000", 1: "0000000000002", ^uint64(0): "vvvvvvvvvvvvu", 1 << 63: "g000000000000"} {
		if got := FormatID(id); got != want {
			t.Fatalf("FormatID(%d) = %q, want %q", id, got, want)
		}
	}
	for _, bad := range []string{"", "abc", "zzzzzzzzzzzzz", "0000000000000x", "G000000000000", "0000000000001"} {
		if _, err := ParseID("ids", bad); err == nil {
			t.Fatalf("ParseID(%q) accepted a malformed id", bad)
		}
	}
}

// FuzzParseID: no input panics, and whatever parses formats back to itself.
func FuzzParseID(f *testing.F) {
	f.Add(FormatID(42))
	f.Add("33kv5h6smbuu7")
	f.Fuzz(func(t *testing.T, s string) {
		id, err := ParseID("ids", s)
		if err == nil && FormatID(id) != s {
			t.Fatalf("%q parsed to %d, which formats as %q", s, id, FormatID(id))
		}
	})
}

package embedded

import (
	"testing"
	"time"
)

func TestAgeIndex(t *testing.T) {
	a := ageIndex{counts: map[int64]int32{}}
	sec := func(s int64) int64 { return s * int64(time.Second) }
	if got := a.oldest(); got != 0 {
		t.Fatalf("empty: oldest %d, want 0", got)
	}
	a.add(sec(10) + 5) // same second as the next
	a.add(sec(10) + 7)
	a.add(sec(12))
	a.add(sec(8)) // older, out of order (an import)
	for _, step := range []struct {
		remove int64
		want   int64
	}{
		{-1, sec(8)},
		{sec(8), sec(10)},
		{sec(10) + 5, sec(10)}, // one item of second 10 is left
		{sec(10) + 7, sec(12)},
		{sec(12), 0},
	} {
		if step.remove >= 0 {
			a.remove(step.remove)
		}
		if got := a.oldest(); got != step.want {
			t.Fatalf("after removing %d: oldest %d, want %d", step.remove, got, step.want)
		}
	}
	if len(a.counts) != 0 {
		t.Fatalf("empty index keeps %d seconds", len(a.counts))
	}
	// A second that emptied and filled again is counted once.
	a.add(sec(20))
	a.add(sec(21))
	a.remove(sec(21))
	a.add(sec(21))
	a.remove(sec(20))
	if got := a.oldest(); got != sec(21) {
		t.Fatalf("oldest %d, want %d", got, sec(21))
	}
}

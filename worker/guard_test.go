package worker

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// FuzzErrorText checks that no handler error text makes errorText panic,
// and that what it keeps is what the server accepts (valid UTF-8, at most
// maxErrorBytes) and as much of the text as fits. Its seed corpus is in
// testdata/fuzz/FuzzErrorText: 3,000 × "é" and 10,000 bytes of Cyrillic
// (each cut mid-rune by a byte limit), invalid UTF-8, a 4-byte rune across
// the limit. Run it with go test -fuzz FuzzErrorText ./worker/.
func FuzzErrorText(f *testing.F) {
	for _, s := range []string{"", "x", "é", "\xff", strings.Repeat("😀", 1025)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		sanitized := strings.ToValidUTF8(s, "\uFFFD")
		want := sanitized
		if want == "" {
			want = "*errors.errorString with no text"
		}
		checkCut(t, errorText(errors.New(s)), want, maxErrorBytes)
		if s != "" {
			// Dead and RetryAfter keep the handler's text.
			require.Equal(t, errorText(errors.New(s)), errorText(Dead(errors.New(s))))
			require.Equal(t, errorText(errors.New(s)), errorText(RetryAfter(time.Second, errors.New(s))))
		}
		// Small limits reach every cut position without long inputs.
		for _, limit := range []int{0, 1, 2, 3, 4, 5, 7, len(s) / 2, len(s) - 1} {
			if limit >= 0 {
				checkCut(t, cutText(s, limit), sanitized, limit)
			}
		}
	})
}

// checkCut checks that got is want cut to limit bytes as errorText must.
func checkCut(t *testing.T, got, want string, limit int) {
	t.Helper()
	require.True(t, utf8.ValidString(got), "valid UTF-8 (limit %d): %q", limit, got)
	require.LessOrEqual(t, len(got), limit, "within the limit")
	require.True(t, strings.HasPrefix(want, got), "a prefix of the sanitized input (limit %d)", limit)
	if len(want) > limit {
		require.GreaterOrEqual(t, len(got), limit-3, "at most one rune short of the limit")
	} else {
		require.Equal(t, want, got, "kept whole when it fits")
	}
}

// nilPointerError is an error type whose Error method dereferences its
// receiver: a nil *nilPointerError returned as an error panics in Error.
type nilPointerError struct{ msg string }

func (e *nilPointerError) Error() string { return e.msg }

// stringPanics panics in String, with a value that panics in String: fmt
// recovers the first panic and not the second.
type stringPanics struct{ depth int }

func (s stringPanics) String() string {
	if s.depth > 0 {
		panic(stringPanics{s.depth - 1})
	}
	panic("String failed")
}

// errorPanics is an error whose Error method panics with v.
type errorPanics struct{ v any }

func (e errorPanics) Error() string { panic(e.v) }

// selfWrapping is an error whose Unwrap returns itself: errors.As on it
// never returns.
type selfWrapping struct{}

func (e selfWrapping) Error() string { return "wraps itself" }
func (e selfWrapping) Unwrap() error { return e }

// unwrapPanics is an error whose Unwrap panics.
type unwrapPanics struct{}

func (unwrapPanics) Error() string { return "unwrap panics" }
func (unwrapPanics) Unwrap() error { panic("no") }

// asPanics is an error whose As method panics.
type asPanics struct{}

func (asPanics) Error() string { return "as panics" }
func (asPanics) As(any) bool   { panic("no") }

// asDead claims to be Dead through its As method.
type asDead struct{}

func (asDead) Error() string { return "as dead" }
func (asDead) As(target any) bool {
	if d, ok := target.(**deadError); ok {
		*d = &deadError{err: errors.New("as dead")}
		return true
	}
	return false
}

func TestErrorTextOfBrokenErrors(t *testing.T) {
	var typedNil *nilPointerError
	for _, tc := range []struct {
		name string
		err  error
		want string // a prefix
	}{
		{"typed nil pointer", typedNil, "nil *worker.nilPointerError returned as an error; its Error method panicked: runtime error: invalid memory address or nil pointer dereference"},
		{"Dead of a typed nil pointer", Dead(typedNil), "nil *worker.nilPointerError returned as an error; its Error method panicked: runtime error: invalid memory address"},
		{"RetryAfter of a typed nil pointer", RetryAfter(time.Second, typedNil), "nil *worker.nilPointerError returned as an error; its Error method panicked: runtime error: invalid memory address"},
		{"Error panics", errorPanics{"boom"}, "worker.errorPanics: its Error method panicked: boom"},
		{"Error panics with a value whose String panics twice", errorPanics{stringPanics{1}}, "worker.errorPanics: its Error method panicked: worker.stringPanics value whose String or Error method panicked"},
		{"Error panics with nil", errorPanics{nil}, "worker.errorPanics: its Error method panicked: panic called with nil argument"},
		{"empty text", errors.New(""), "*errors.errorString with no text"},
		{"Dead(nil)", Dead(nil), "dead-lettered by the handler"},
		{"invalid UTF-8", errors.New("bad \xff\xfe byte"), "bad \uFFFD byte"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := errorText(tc.err)
			assert.True(t, strings.HasPrefix(got, tc.want), "%q", got)
			assert.True(t, utf8.ValidString(got))
		})
	}
}

func TestErrorTextKeepsWhatFits(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    string
		keep int
	}{
		{"3,000 × é (issue 41: panicked)", strings.Repeat("é", 3000), 4096},
		{"10,000 bytes of Cyrillic (issue 41: kept 15 bytes)", strings.Repeat("ж", 5000), 4096},
		{"a 3-byte rune across the limit", strings.Repeat("x", 4094) + "€", 4094},
		{"a 4-byte rune across the limit", strings.Repeat("x", 4093) + "😀", 4093},
		{"a 4-byte rune ending at the limit", strings.Repeat("x", 4092) + "😀€", 4096},
		{"invalid bytes", strings.Repeat("\xff", 10000), 3}, // one U+FFFD for the run
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := errorText(errors.New(tc.s))
			assert.Len(t, got, tc.keep)
			assert.True(t, utf8.ValidString(got))
		})
	}
}

func TestPanicValue(t *testing.T) {
	assert.Equal(t, "boom", panicValue("boom"))
	assert.Equal(t, "%!v(PANIC=String method: String failed)", panicValue(stringPanics{0}))
	assert.Equal(t, "worker.stringPanics value whose String or Error method panicked", panicValue(stringPanics{1}))
	assert.True(t, strings.HasPrefix(panicText(stringPanics{3}, 5), "panic: worker.stringPanics value"))
}

func TestClassify(t *testing.T) {
	d := 3 * time.Second
	for _, tc := range []struct {
		name  string
		err   error
		dead  bool
		after *time.Duration
	}{
		{"plain", errors.New("x"), false, nil},
		{"Dead", Dead(errors.New("x")), true, nil},
		{"wrapped Dead", fmt.Errorf("charge: %w", Dead(nil)), true, nil},
		{"joined RetryAfter", errors.Join(errors.New("a"), RetryAfter(d, nil)), false, &d},
		{"Dead beats RetryAfter", errors.Join(RetryAfter(d, nil), Dead(nil)), true, nil},
		{"As method", fmt.Errorf("w: %w", asDead{}), true, nil},
		{"self-wrapping", selfWrapping{}, false, nil},
		{"Unwrap panics", fmt.Errorf("w: %w", unwrapPanics{}), false, nil},
		{"As panics", asPanics{}, false, nil},
		{"typed nil pointer", (*nilPointerError)(nil), false, nil},
		{"nil", nil, false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			done := make(chan struct{})
			var dead bool
			var after *time.Duration
			go func() {
				defer close(done)
				dead, after = classify(tc.err)
			}()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("classify did not return")
			}
			assert.Equal(t, tc.dead, dead)
			assert.Equal(t, tc.after, after)
		})
	}
}

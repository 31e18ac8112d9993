package text_test

import (
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/styxq/styx/internal/text"
)

// TestFindHidden checks every class of hidden character the package
// comment lists, and that ordinary text (accents, CJK, emoji, U+FFFD
// itself) is not hidden.
func TestFindHidden(t *testing.T) {
	hidden := []rune{
		0x00, '\t', '\n', '\r', 0x1b, 0x7f, 0x85, 0x9f, // Cc
		0x061c, 0x200e, 0x200f, 0x202a, 0x202b, 0x202c, 0x202d, 0x202e, // bidi
		0x2066, 0x2067, 0x2068, 0x2069,
		0x200b, 0x200c, 0x200d, 0x2060, 0xfeff, 0x00ad, 0xe0041, // zero-width, soft hyphen, tag
		0x2028, 0x2029, // line and paragraph separators
	}
	for _, r := range hidden {
		s := "ab" + string(r) + "c"
		off, got, found := text.Find(s)
		require.True(t, found, "%U", r)
		require.Equal(t, 2, off, "%U", r)
		require.Equal(t, r, got)
		require.True(t, text.Hidden(r), "%U", r)
	}
	for _, s := range []string{"", "orders-2024_v1.x", "héllo wörld", "注文", "👍🏽", "\uFFFD", "a b~c"} {
		_, r, found := text.Find(s)
		require.False(t, found, "%q: %U", s, r)
	}

	off, r, found := text.Find("ok\xffno")
	require.True(t, found)
	require.Equal(t, 2, off)
	require.Equal(t, utf8.RuneError, r)

	// A field may allow some characters explicitly.
	_, _, found = text.Find("line one\n\tline two", '\t', '\n')
	require.False(t, found)
	off, r, found = text.Find("line one\n\u202eline two", '\t', '\n')
	require.True(t, found)
	require.Equal(t, 9, off)
	require.Equal(t, '\u202e', r)
}

// TestCheckNamesCharacter checks Check's error: the character and its
// position in characters, as the doors' messages quote it.
func TestCheckNamesCharacter(t *testing.T) {
	require.NoError(t, text.Check("plain"))
	err := text.Check("héllo\u202eexe")
	require.EqualError(t, err, "U+202E at character 5")
	var e *text.Error
	require.ErrorAs(t, err, &e)
	require.Equal(t, 6, e.Offset) // é is two bytes
	require.EqualError(t, text.Check("ab\xfe"), "byte 0xFE (not UTF-8) at character 2")
}

// TestEscapeControlAndBidi checks that Escape makes every hidden character
// visible, leaves the rest alone, returns clean strings as they are and is
// idempotent.
func TestEscapeControlAndBidi(t *testing.T) {
	for in, want := range map[string]string{
		"":                           "",
		"clean héllo 注文 \\u202e":     "clean héllo 注文 \\u202e",
		"invoice\u202efdp.exe":       `invoice\u202efdp.exe`,
		"a\tb\nc\rd":                 `a\tb\nc\rd`,
		"\x1b[31mred\x1b[0m":         `\u001b[31mred\u001b[0m`,
		"zero\u200bwidth\ufeff":      `zero\u200bwidth\ufeff`,
		"tag\U000E0041":              `tag\U000e0041`,
		"bad\xffbyte":                `bad\xffbyte`,
		"del\x7f c1\u0085":           `del\u007f c1\u0085`,
		"iso\u2066late\u2069 \u061c": `iso\u2066late\u2069 \u061c`,
	} {
		got := text.Escape(in)
		require.Equal(t, want, got, "%q", in)
		require.Equal(t, got, text.Escape(got), "idempotent: %q", in)
		_, _, found := text.Find(got)
		require.False(t, found, "escaped text holds nothing hidden: %q", got)
	}
	require.Equal(t, "two\nlines\\u202e", text.Escape("two\nlines\u202e", '\n'))
	clean := "nothing to escape"
	require.Zero(t, testing.AllocsPerRun(10, func() { _ = text.Escape(clean) }))
}

// FuzzEscape checks, for any string, that Escape leaves nothing hidden and
// changes nothing that Find accepts.
func FuzzEscape(f *testing.F) {
	for _, s := range []string{"", "a\u202eb", "\xff\xfe", "x\n\ty", "\U000E0041"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := text.Escape(s)
		if _, r, found := text.Find(got); found {
			t.Fatalf("Escape(%q) = %q holds %U", s, got, r)
		}
		if _, _, found := text.Find(s); !found && got != s {
			t.Fatalf("Escape(%q) = %q changed clean text", s, got)
		}
	})
}

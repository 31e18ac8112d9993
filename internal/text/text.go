// Package text is the one rule for client-supplied strings that an operator
// will see: queue names, tag keys and values, SQS attribute names and data
// types, an item's kind, reference and encoding, a lease's client id, and
// error text.
//
// A hidden character is one that changes how the text around it looks
// without looking like anything itself: a control character (Unicode Cc,
// U+0000..U+001F and U+007F..U+009F: a terminal's escape sequences, a
// carriage return that overwrites a line), a format character (Unicode Cf:
// the bidi marks, embeddings, overrides and isolates U+061C, U+200E, U+200F,
// U+202A..U+202E and U+2066..U+2069, the zero-width U+200B..U+200D and
// U+2060, U+FEFF, the soft hyphen U+00AD, tag characters), the line and
// paragraph separators U+2028 and U+2029, and a byte that is not UTF-8.
// "invoice\u202Efdp.exe" shows as "invoiceexe.pdf", and "orders\u200B" as
// "orders".
//
// Where a string is an identifier, the doors refuse it with Find; where it
// is free text (a retry's error), they keep it and every display escapes it
// with Escape. The web console (web/) is not Go: its own escaping must
// cover the same characters.
package text

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Rule says in words what Find refuses, for error messages.
const Rule = "control, bidi and zero-width (format) characters are not allowed"

// Hidden reports whether r is a hidden character (see the package comment).
// utf8.RuneError stands for a byte that is not UTF-8 and is hidden; the
// character U+FFFD itself is not, as Find and Escape tell the two apart.
func Hidden(r rune) bool {
	switch {
	case r < 0x20 || r >= 0x7f && r <= 0x9f:
		return true
	case r < 0x7f:
		return false
	case r == '\u2028' || r == '\u2029':
		return true
	}
	return unicode.Is(unicode.Cf, r)
}

// Find returns the first hidden character of s that allowed does not hold,
// and its offset in bytes, or found false when there is none. A byte that
// is not UTF-8 is reported as utf8.RuneError at its offset. allowed lets a
// field accept some characters explicitly (a JSON document's '\t', '\n'
// and '\r'); it is empty for identifiers. Find does not allocate.
func Find(s string, allowed ...rune) (offset int, r rune, found bool) {
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c < 0x7f { // printable ASCII, the common case
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 || Hidden(r) && !contains(allowed, r) {
			return i, r, true
		}
		i += n
	}
	return 0, 0, false
}

func contains(rs []rune, r rune) bool {
	for _, x := range rs {
		if x == r {
			return true
		}
	}
	return false
}

// Error is Check's answer: the first hidden character of a string.
type Error struct {
	// Rune is the character, utf8.RuneError for a byte that is not UTF-8.
	Rune rune
	// Byte is the invalid byte when Rune is utf8.RuneError, else 0.
	Byte byte
	// Offset is its offset in bytes, Pos in characters, both from 0.
	Offset, Pos int
}

// Error names the character and its position: "U+202E at character 6" or
// "byte 0xFF (not UTF-8) at character 6".
func (e *Error) Error() string {
	if e.Rune == utf8.RuneError && e.Byte != 0 {
		return fmt.Sprintf("byte 0x%02X (not UTF-8) at character %d", e.Byte, e.Pos)
	}
	return fmt.Sprintf("%U at character %d", e.Rune, e.Pos)
}

// Check is Find as an error: nil when s holds no hidden character that
// allowed does not hold, else an *Error.
func Check(s string, allowed ...rune) error {
	off, r, found := Find(s, allowed...)
	if !found {
		return nil
	}
	e := &Error{Rune: r, Offset: off, Pos: utf8.RuneCountInString(s[:off])}
	if r == utf8.RuneError {
		e.Byte = s[off]
	}
	return e
}

// Escape returns s with every hidden character that allowed does not hold
// written as a visible escape: \t, \n and \r, \u202e (four lowercase hex
// digits, or \U and eight above U+FFFF), and \xff for a byte that is not
// UTF-8. Other characters, backslashes included, are unchanged, so Escape
// of an escaped string is the same string: a display that escapes twice
// shows the same text, at the cost of "\u202e" typed literally looking
// like the escaped character (the JSON output is exact). Escape returns s
// itself, without allocating, when there is nothing to escape.
func Escape(s string, allowed ...rune) string {
	off, _, found := Find(s, allowed...)
	if !found {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	b.WriteString(s[:off])
	for i := off; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			b.WriteString(`\x`)
			b.WriteString(hex2(s[i]))
		case !Hidden(r) || contains(allowed, r):
			b.WriteString(s[i : i+n])
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r > 0xffff:
			b.WriteString(`\U`)
			b.WriteString(pad(strconv.FormatInt(int64(r), 16), 8))
		default:
			b.WriteString(`\u`)
			b.WriteString(pad(strconv.FormatInt(int64(r), 16), 4))
		}
		i += n
	}
	return b.String()
}

func hex2(c byte) string { return pad(strconv.FormatUint(uint64(c), 16), 2) }

func pad(h string, n int) string {
	if len(h) < n {
		return strings.Repeat("0", n-len(h)) + h
	}
	return h
}

// Package fingerprint gives an error text the fingerprint of its shape: the
// text with its variable parts (numbers, ids, quoted values, addresses,
// durations, times) replaced by placeholders, hashed to a short stable
// string. Two errors that differ only in those parts ("order 1234 not
// found" and "order 98 not found") have the same fingerprint, so the dead
// items of an incident fall into a handful of groups (dead.groups) instead
// of one group per order number.
//
// The rules, applied left to right in one pass over the text, at the start
// of each token (a position not preceded by a letter or digit); the first
// rule that matches wins, and a match must end at a token boundary:
//
//  1. A quoted value ('…', "…" or `…`, on one line, up to 200 bytes) → <str>
//  2. A UUID (8-4-4-4-12 hex digits) → <uuid>
//  3. A timestamp: a date 2006-01-02 with an optional time (T or space,
//     15:04(:05), fraction, Z or ±07:00 offset) → <time>; a time of day
//     15:04:05(.000) alone → <time>
//  4. An IPv4 address with an optional :port → <ip>; a bracketed IPv6
//     address with an optional port ([::1]:5432) → <ip>
//  5. A hex number 0x… → <hex>
//  6. A duration: a number with a unit ns, us, µs, ms, s, m or h, or Go's
//     compound form 1h2m3.5s → <dur>
//  7. A number (digits with an optional decimal part or exponent) → <n>
//  8. A word of letters and digits ('-' and '_' separate words) that is 8
//     or more characters long and holds a digit, or is made of hex digits
//     only: an id, a hash, a Styx item id → <id>
//  9. In any other word, each run of digits → <n> (worker-7 → worker-<n>,
//     /orders/8812 → /orders/<n>, db3 → db<n>)
//
// Runs of white space become one space and the pattern is trimmed. The
// fingerprint is the first 8 bytes of the SHA-256 of the pattern, in
// lowercase hex (16 characters). The rules are part of the stored format:
// dead items keep the fingerprint computed when they died, so changing a
// rule splits groups between items that died before and after the change.
//
// Known limits: a random id in base64url may be split by its '-' and '_'
// into words that rule 8 does not catch; a number spelt in words or a
// variable word without digits (a customer name) stays in the pattern.
package fingerprint

import (
	"crypto/sha256"
	"encoding/hex"
	"regexp"
	"strings"
)

// Length is the length of a fingerprint in characters (16 hex digits).
const Length = 16

// MaxPatternBytes bounds the pattern Pattern returns: longer patterns are
// cut at this many bytes (on a character boundary) before hashing.
const MaxPatternBytes = 4096

// rules 1-7 are tried at the start of each token in order; see the package
// comment.
var rules = []struct {
	re          *regexp.Regexp
	placeholder string
}{
	{regexp.MustCompile(`^(?:'[^'\n]{0,200}'|"(?:[^"\\\n]|\\.){0,200}"|` + "`[^`\\n]{0,200}`" + `)`), "<str>"},
	{regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}`), "<uuid>"},
	{regexp.MustCompile(`^\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?`), "<time>"},
	{regexp.MustCompile(`^\d{2}:\d{2}:\d{2}(?:\.\d+)?`), "<time>"},
	{regexp.MustCompile(`^(?:\d{1,3}\.){3}\d{1,3}(?::\d{1,5})?`), "<ip>"},
	{regexp.MustCompile(`^\[[0-9a-fA-F:.]*:[0-9a-fA-F:.]*\](?::\d{1,5})?`), "<ip>"},
	{regexp.MustCompile(`^0[xX][0-9a-fA-F]+`), "<hex>"},
	{regexp.MustCompile(`^(?:\d+(?:\.\d+)?h)?(?:\d+(?:\.\d+)?m)?\d+(?:\.\d+)?(?:ns|us|µs|ms|s|m|h)`), "<dur>"},
	{regexp.MustCompile(`^\d+(?:\.\d+)?(?:[eE][+-]?\d+)?`), "<n>"},
}

// Pattern returns the shape of an error text: its variable parts replaced
// by placeholders, white space collapsed, at most MaxPatternBytes bytes.
func Pattern(text string) string {
	var b strings.Builder
	b.Grow(len(text))
	space := false
	for i := 0; i < len(text); {
		c := text[i]
		if c == ' ' || c == '\t' || c == '\n' || c == '\r' {
			space = true
			i++
			continue
		}
		if space && b.Len() > 0 {
			b.WriteByte(' ')
		}
		space = false
		start := i == 0 || !isAlnum(text[i-1])
		if !start {
			b.WriteByte(c)
			i++
			continue
		}
		if n, ph := match(text[i:]); n > 0 {
			b.WriteString(ph)
			i += n
			continue
		}
		if isAlnum(c) {
			w := wordEnd(text[i:])
			writeWord(&b, text[i:i+w])
			i += w
			continue
		}
		b.WriteByte(c)
		i++
	}
	p := b.String()
	if len(p) > MaxPatternBytes {
		p = strings.ToValidUTF8(p[:MaxPatternBytes], "") // drops a character cut in two
	}
	return p
}

// match tries rules 1-7 at the start of s and returns the length matched
// and the placeholder, or 0.
func match(s string) (int, string) {
	c := s[0]
	if !(isDigit(c) || c == '\'' || c == '"' || c == '`' || c == '[' || isHexLetter(c)) {
		return 0, "" // no rule starts with this character
	}
	for _, r := range rules {
		loc := r.re.FindStringIndex(s)
		if loc == nil || loc[1] == 0 {
			continue
		}
		// A match that stops inside a word is not a token of its own
		// ("2fa" is not the number 2), except for quoted values.
		if loc[1] < len(s) && isAlnum(s[loc[1]]) && r.placeholder != "<str>" {
			continue
		}
		return loc[1], r.placeholder
	}
	return 0, ""
}

// writeWord writes a word of letters and digits: <id> for an id (rule 8),
// else the word with each run of digits replaced by <n> (rule 9).
func writeWord(b *strings.Builder, w string) {
	digits, hex := 0, true
	for i := 0; i < len(w); i++ {
		if isDigit(w[i]) {
			digits++
		} else if !isHexLetter(w[i]) {
			hex = false
		}
	}
	if len(w) >= 8 && (digits > 0 || hex) {
		b.WriteString("<id>")
		return
	}
	for i := 0; i < len(w); {
		if isDigit(w[i]) {
			for i < len(w) && isDigit(w[i]) {
				i++
			}
			b.WriteString("<n>")
			continue
		}
		b.WriteByte(w[i])
		i++
	}
}

// Of returns the fingerprint of an error text: 16 lowercase hex digits, the
// same for every text with the same Pattern. The empty text has a
// fingerprint too (that of the empty pattern).
func Of(text string) string { return OfPattern(Pattern(text)) }

// OfPattern returns the fingerprint of a pattern Pattern returned.
func OfPattern(pattern string) string {
	sum := sha256.Sum256([]byte(pattern))
	return hex.EncodeToString(sum[:Length/2])
}

// Valid reports whether s has the form of a fingerprint: 16 lowercase hex
// digits.
func Valid(s string) bool {
	if len(s) != Length {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isDigit(s[i]) && (s[i] < 'a' || s[i] > 'f') {
			return false
		}
	}
	return true
}

func isDigit(c byte) bool     { return c >= '0' && c <= '9' }
func isHexLetter(c byte) bool { return c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' }
func isAlnum(c byte) bool     { return isDigit(c) || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }

func wordEnd(s string) int {
	i := 0
	for i < len(s) && isAlnum(s[i]) {
		i++
	}
	return i
}

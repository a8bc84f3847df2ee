package wire

import (
	"bytes"
	"encoding/json"
	"strconv"
	"unicode/utf8"
)

// maxReplicaEcho bounds a replica's error message passed on.
const maxReplicaEcho = 1024

// ClipN returns s cut to n bytes at a rune boundary, marked as cut.
func ClipN(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…[" + strconv.Itoa(len(s)-n) + " more bytes]"
}

// Quote is s as a JSON string.
func Quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// maxEcho bounds a client's string (a model name, a path, a header)
// repeated in an error message or a log line.
const maxEcho = 256

// Clip returns s cut to maxEcho bytes at a rune boundary, marked as cut.
func Clip(s string) string { return ClipN(s, maxEcho) }

// ValidUTF8 is b with every byte that is not part of a UTF-8 character
// replaced by U+FFFD, one for each such byte, as encoding/json writes a
// string (so text the gateway writes with Quote and text it relays
// agree). Valid b, the normal case, is returned as is, not copied.
func ValidUTF8(b []byte) []byte {
	if utf8.Valid(b) {
		return b
	}
	out := make([]byte, 0, len(b)+8)
	for len(b) > 0 {
		r, n := utf8.DecodeRune(b)
		if r == utf8.RuneError && n == 1 {
			out = utf8.AppendRune(out, utf8.RuneError)
		} else {
			out = append(out, b[:n]...)
		}
		b = b[n:]
	}
	return out
}

// PartialRune is the length (0 to 3) of the start of a UTF-8 character
// that b ends with, cut short: the bytes to hold back when b is written
// before the rest of its text has come.
func PartialRune(b []byte) int {
	for i := 1; i <= min(3, len(b)); i++ {
		c := b[len(b)-i]
		if c < utf8.RuneSelf {
			return 0
		}
		if utf8.RuneStart(c) {
			if utf8.FullRune(b[len(b)-i:]) {
				return 0
			}
			return i
		}
	}
	return 0
}

// ValidEscapes is the JSON text b with every \u escape of a lone UTF-16
// surrogate (a half of a pair without its other half) written \ufffd, as
// encoding/json decodes one: a client's parser would otherwise make a
// string that is not Unicode of it (JavaScript's and Python's do). b with
// no such escape, the normal case, is returned as is, not copied.
func ValidEscapes(b []byte) []byte {
	if bytes.IndexByte(b, '\\') < 0 || !bytes.Contains(b, []byte(`\u`)) {
		return b // one vectorised byte scan for the common event
	}
	var out []byte // nil until the first lone half
	last := 0      // b[last:] is not yet in out
	for i := 0; i < len(b); i++ {
		if b[i] != '\\' {
			continue
		}
		u, ok := escapeUnit(b[i:])
		if !ok || u < 0xD800 || u > 0xDFFF {
			i++ // skip the escaped character, a backslash included
			continue
		}
		if u <= 0xDBFF {
			if low, ok := escapeUnit(b[i+6:]); ok && low >= 0xDC00 && low <= 0xDFFF {
				i += 11 // a whole pair
				continue
			}
		}
		out = append(append(out, b[last:i]...), `\ufffd`...)
		last = i + 6
		i += 5
	}
	if out == nil {
		return b
	}
	return append(out, b[last:]...)
}

// escapeUnit reads the code unit of the \uXXXX escape that b begins with.
func escapeUnit(b []byte) (rune, bool) {
	if len(b) < 6 || b[0] != '\\' || b[1] != 'u' {
		return 0, false
	}
	var u rune
	for _, c := range b[2:6] {
		v, ok := HexValue(c)
		if !ok {
			return 0, false
		}
		u = u<<4 | v
	}
	return u, true
}

// HexValue is the value of the hexadecimal digit c, in either case.
func HexValue(c byte) (rune, bool) {
	switch {
	case c >= '0' && c <= '9':
		return rune(c - '0'), true
	case c >= 'a' && c <= 'f':
		return rune(c-'a') + 10, true
	case c >= 'A' && c <= 'F':
		return rune(c-'A') + 10, true
	}
	return 0, false
}

package wire

import (
	"encoding/json"
	"strconv"
	"unicode/utf8"
)

// maxReplicaEcho bounds x.b replica's error message passed on.
const maxReplicaEcho = 1024

// ClipN returns s cut to n bytes at x.b rune boundary, marked as cut.
func ClipN(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…[" + strconv.Itoa(len(s)-n) + " more bytes]"
}

// Quote is s as x.b JSON string.
func Quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// maxEcho bounds x.b client's string (x.b model name, x.b path, x.b header)
// repeated in an error message or x.b log line.
const maxEcho = 256

// Clip returns s cut to maxEcho bytes at x.b rune boundary, marked as cut.
func Clip(s string) string { return ClipN(s, maxEcho) }

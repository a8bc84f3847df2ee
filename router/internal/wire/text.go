package wire

import (
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

package features

import (
	"strings"
	"unsafe"
)

// failureOf says why a tool result's text reads as a failure ("" when it
// does not): a non-zero exit status, a traceback or panic, an exception
// or error line, failing tests, a command or file not found. It reads the
// lines of text (an excerpt: the head and tail of the output, where
// shells, test runners and interpreters say how a run ended), and only
// the first line for the loose words ("failed", "not found"), so a file
// that merely mentions an error, read back by the agent, is not one.
func failureOf(text string) string {
	var buf [maxLineRead]byte // a line's lower-case form, on the stack
	first := true
	for start := 0; start < len(text); {
		end := strings.IndexByte(text[start:], '\n')
		if end < 0 {
			end = len(text)
		} else {
			end += start
		}
		line := strings.TrimSpace(text[start:end])
		start = end + 1
		if line == "" {
			continue
		}
		if len(line) > maxLineRead {
			line = line[:maxLineRead] // how a run ended is said early in its line
		}
		if why := failureLine(line, asciiLower(buf[:0], line), first); why != "" {
			return why
		}
		first = false
	}
	return ""
}

// maxLineRead bounds how much of a line failureOf reads.
const maxLineRead = 512

// asciiLower appends s with its ASCII letters in lower case to b, as a
// string that lives as long as b's array is not written again.
func asciiLower(b []byte, s string) string {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		b = append(b, c)
	}
	return unsafe.String(unsafe.SliceData(b), len(b))
}

// failureLine checks one line (and its lower-case form); first: it is the
// output's first line.
func failureLine(line, lower string, first bool) string {
	if code, ok := exitCode(lower); ok && code != "0" {
		return "exit code " + code
	}
	switch {
	case strings.HasPrefix(line, "Traceback (most recent call last)"):
		return "traceback"
	case strings.HasPrefix(line, "panic: "), strings.HasPrefix(line, "fatal error: "):
		return "panic"
	case strings.HasPrefix(line, "--- FAIL"), strings.HasPrefix(line, "FAIL"), strings.HasPrefix(line, "FAILED"),
		strings.HasPrefix(line, "✗ "), strings.HasPrefix(line, "✕ "):
		return "failing tests"
	case countBefore(lower, " failed") || countBefore(lower, " failing"):
		return "failing tests"
	case strings.Contains(lower, "command not found"), strings.Contains(lower, "no such file or directory"):
		return "not found"
	case strings.HasPrefix(lower, "error:"), strings.HasPrefix(lower, "error "), strings.HasPrefix(lower, "fatal:"),
		strings.HasPrefix(lower, "exception"), isExceptionLine(line):
		return "error"
	case strings.Contains(lower, `"success":false`), strings.Contains(lower, `"success": false`):
		return "error"
	}
	if first && !strings.Contains(lower, " 0 failed") && (strings.Contains(lower, "failed") || strings.Contains(lower, "not found") ||
		strings.Contains(lower, "permission denied")) {
		return "error"
	}
	return ""
}

// exitCode reads "exit code N", "exit status N", "exited with code N",
// "exit_code": N and "Exit code: N" anywhere in a lower-cased line.
func exitCode(lower string) (string, bool) {
	for _, key := range [...]string{"exited with code ", "exit code: ", "exit code ", "exit status ", `"exit_code":`, `"exitcode":`, "exit_code=", "returncode="} {
		i := strings.Index(lower, key)
		if i < 0 {
			continue
		}
		rest := strings.TrimLeft(lower[i+len(key):], " ")
		n := 0
		for n < len(rest) && n < 4 && rest[n] >= '0' && rest[n] <= '9' {
			n++
		}
		if n > 0 {
			return rest[:n], true
		}
	}
	return "", false
}

// countBefore reports whether word follows a count above zero: "2 failed",
// "1 failing" (test runners' summaries), not "0 failed".
func countBefore(lower, word string) bool {
	for from := 0; ; {
		i := strings.Index(lower[from:], word)
		if i < 0 {
			return false
		}
		at := from + i
		j := at
		for j > 0 && lower[j-1] >= '0' && lower[j-1] <= '9' {
			j--
		}
		if j < at && (j == 0 || lower[j-1] == ' ' || lower[j-1] == ',' || lower[j-1] == '(') && strings.Trim(lower[j:at], "0") != "" {
			return true
		}
		from = at + len(word)
	}
}

// isExceptionLine: "ValueError: ...", "java.lang.NullPointerException: ...",
// "TypeError: ..." at the start of a line.
func isExceptionLine(line string) bool {
	colon := strings.IndexByte(line, ':')
	if colon <= 0 || colon > 80 {
		return false
	}
	name := line[:colon]
	if strings.ContainsAny(name, " \t") {
		return false
	}
	return strings.HasSuffix(name, "Error") || strings.HasSuffix(name, "Exception")
}

package features

import (
	"io"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"
)

// Boilerplate is the text agents add to the user's turn on their own:
// reminders, environment blocks, skills lists. The summary and the
// session key read the user's words without it. Each entry is an XML-like
// tag whose block, from <tag ...> to </tag>, is removed.
var boilerplateTags = [...]string{
	"system-reminder",         // Claude Code, Qwen Code (skills, date, context)
	"environment_context",     // Codex
	"environment_details",     // Cline, Kilo Code, Roo Code
	"user_instructions",       // Codex (the project's agent instructions)
	"available_skills",        // Qwen Code
	"ide_opened_file",         // Claude Code in an IDE
	"ide_selection",           // Claude Code in an IDE
	"command-message",         // Claude Code slash commands
	"local-command-stdout",    // Claude Code
	"user-prompt-submit-hook", // Claude Code hooks
	"qwen:user-prompt-submit-context",
}

// closeTags are the boilerplate tags' end tags, "</tag>".
var closeTags = func() (out [len(boilerplateTags)]string) {
	for i, t := range boilerplateTags {
		out[i] = "</" + t + ">"
	}
	return out
}()

// stripBoilerplate removes boilerplate blocks from s, in one pass (a
// client's text of thousands of blocks costs its length, not its length
// times its blocks). A block cut by an excerpt is removed as far as it
// reaches: an opening tag with no end to the end of s, an end tag with no
// opening from the start of s.
func stripBoilerplate(s string) string {
	if !strings.Contains(s, "<") {
		return s
	}
	var sb strings.Builder
	kept := 0 // s[kept:] is not yet copied
	for i := 0; i < len(s); {
		j := strings.IndexByte(s[i:], '<')
		if j < 0 {
			break
		}
		j += i
		if t, ok := tagAt(s, j+1); ok {
			end := strings.Index(s[j:], closeTags[t])
			sb.WriteString(s[kept:j])
			if end < 0 { // a block that goes on past the excerpt
				return strings.TrimSpace(sb.String())
			}
			i = j + end + len(closeTags[t])
			kept = i
			continue
		}
		if j+1 < len(s) && s[j+1] == '/' {
			if t, ok := tagAt(s, j+2); ok && strings.HasPrefix(s[j+2+len(boilerplateTags[t]):], ">") {
				// An end with no opening: a block that began before
				// the excerpt; what came before it is its text.
				sb.Reset()
				i = j + len(closeTags[t])
				kept = i
				continue
			}
		}
		i = j + 1
	}
	if kept == 0 {
		return strings.TrimSpace(s)
	}
	sb.WriteString(s[kept:])
	return strings.TrimSpace(sb.String())
}

// tagAt reports the boilerplate tag whose name starts s at i, followed by
// '>', a space or a newline (not a longer name).
func tagAt(s string, i int) (int, bool) {
	for t, tag := range boilerplateTags {
		if strings.HasPrefix(s[i:], tag) {
			if next := i + len(tag); next < len(s) && (s[next] == '>' || s[next] == ' ' || s[next] == '\n') {
				return t, true
			}
		}
	}
	return 0, false
}

// wholeBlock reports whether a raw JSON string is one boilerplate block
// and nothing else (Qwen Code's skills list, Claude Code's reminders: a
// text part of their own), as written or with < and > escaped: it is
// skipped without being unescaped.
func wholeBlock(raw string) bool {
	if len(raw) < 2 || raw[0] != '"' {
		return false
	}
	body := strings.TrimRight(raw[1:len(raw)-1], " ")
	for strings.HasSuffix(body, `\n`) {
		body = strings.TrimRight(body[:len(body)-2], " ")
	}
	body = strings.TrimLeft(body, " ")
	for _, tag := range boilerplateTags {
		for _, lt := range [...][2]string{{"<", ">"}, {`\u003c`, `\u003e`}} {
			open, ok := strings.CutPrefix(body, lt[0])
			if rest, ok2 := strings.CutPrefix(open, tag); ok && ok2 && endsWithTag(body, lt[0], tag, lt[1]) {
				return strings.HasPrefix(rest, lt[1]) || strings.HasPrefix(rest, " ") || strings.HasPrefix(rest, `\n`)
			}
		}
	}
	return false
}

// endsWithTag reports whether body ends with the end tag of tag, written
// with lt and gt ("<", ">" or their JSON escapes).
func endsWithTag(body, lt, tag, gt string) bool {
	body, ok := strings.CutSuffix(body, gt)
	if !ok {
		return false
	}
	if body, ok = strings.CutSuffix(body, tag); !ok {
		return false
	}
	body, ok = strings.CutSuffix(body, "/")
	return ok && strings.HasSuffix(body, lt)
}

// excerpt is the text of a raw JSON string value within about n bytes:
// the whole of it when it fits, else its head and tail joined by "\n…\n"
// ("" for a value that is not a string). It cuts the raw JSON before
// unescaping, so a megabyte string costs n bytes, not a megabyte; a cut
// never splits an escape sequence, and the text is valid UTF-8.
func excerpt(raw string, n int) string {
	if len(raw) < 2 || raw[0] != '"' {
		return ""
	}
	body := raw[1 : len(raw)-1]
	if len(body) <= n {
		return unescape(body)
	}
	h := safeHead(body, n/2)
	t := safeTail(body, n-n/2)
	var sb strings.Builder
	sb.Grow(h + len(body) - t + len("\n…\n"))
	unescapeTo(&sb, body[:h])
	sb.WriteString("\n…\n")
	unescapeTo(&sb, body[t:])
	return strings.ToValidUTF8(sb.String(), "\uFFFD")
}

// headExcerpt is the text of the first n bytes or so of a raw JSON
// string value ("" for a value that is not a string).
func headExcerpt(raw string, n int) string {
	if len(raw) < 2 || raw[0] != '"' {
		return ""
	}
	body := raw[1 : len(raw)-1]
	return unescape(body[:safeHead(body, n)])
}

// unescape decodes the inside of a JSON string.
func unescape(part string) string {
	if strings.IndexByte(part, '\\') < 0 {
		return strings.ToValidUTF8(part, "\uFFFD")
	}
	var sb strings.Builder
	sb.Grow(len(part))
	unescapeTo(&sb, part)
	return strings.ToValidUTF8(sb.String(), "\uFFFD")
}

// unescapeTo writes the decoded inside of a JSON string to sb.
func unescapeTo(sb *strings.Builder, part string) {
	i := strings.IndexByte(part, '\\')
	if i < 0 {
		sb.WriteString(part)
		return
	}
	sb.WriteString(part[:i])
	for ; i < len(part); i++ {
		c := part[i]
		if c != '\\' || i+1 >= len(part) {
			sb.WriteByte(c)
			continue
		}
		i++
		switch part[i] {
		case 'n':
			sb.WriteByte('\n')
		case 't':
			sb.WriteByte('\t')
		case 'r':
			sb.WriteByte('\r')
		case 'b':
			sb.WriteByte('\b')
		case 'f':
			sb.WriteByte('\f')
		case 'u':
			r, n := hexRune(part[i+1:])
			if n == 4 && utf16.IsSurrogate(r) && strings.HasPrefix(part[i+5:], `\u`) {
				if r2, n2 := hexRune(part[i+7:]); n2 == 4 {
					r = utf16.DecodeRune(r, r2)
					i += 6
				}
			}
			if n < 4 || utf16.IsSurrogate(r) {
				r = utf8.RuneError
			}
			sb.WriteRune(r)
			i += n
		default: // \" \\ \/
			sb.WriteByte(part[i])
		}
	}
}

// hexRune reads up to four hex digits: the rune and how many were read.
func hexRune(s string) (rune, int) {
	var r rune
	n := 0
	for ; n < 4 && n < len(s); n++ {
		c := s[n]
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return r, n
		}
	}
	return r, n
}

// safeHead is the largest cut at most n bytes into the inside of a JSON
// string that does not split an escape sequence.
func safeHead(raw string, n int) int {
	if n >= len(raw) {
		return len(raw)
	}
	for j := n - 1; j >= 0 && j >= n-6; j-- {
		if raw[j] != '\\' {
			continue
		}
		if escapeStart(raw, j) {
			if j+escapeLen(raw, j) > n {
				return j
			}
		}
		break
	}
	return n
}

// safeTail is the smallest start at least len(raw)-n into the inside of a
// JSON string that is not inside an escape sequence.
func safeTail(raw string, n int) int {
	start := len(raw) - n
	if start <= 0 {
		return 0
	}
	for j := start - 1; j >= 0 && j >= start-6; j-- {
		if raw[j] != '\\' {
			continue
		}
		if escapeStart(raw, j) && j+escapeLen(raw, j) > start {
			return min(len(raw), j+escapeLen(raw, j))
		}
		break
	}
	return start
}

// escapeStart reports whether the backslash at j begins an escape (an odd
// run of backslashes ends at j).
func escapeStart(raw string, j int) bool {
	run := 0
	for k := j; k >= 0 && raw[k] == '\\'; k-- {
		run++
	}
	return run%2 == 1
}

func escapeLen(raw string, j int) int {
	if j+1 < len(raw) && raw[j+1] == 'u' {
		return 6
	}
	return 2
}

// contentExcerpt is the text of a raw message content within about n
// bytes: a string, or the text parts of an array joined, boilerplate
// removed (each part's before the parts are joined). Tool-result blocks
// are not text.
func contentExcerpt(raw string, n int) string {
	if strings.HasPrefix(raw, `"`) {
		return stripBoilerplate(excerpt(raw, boilerplateWindow(n, len(raw))))
	}
	var sb strings.Builder
	elements(raw, func(part string) bool {
		if t := member(part, "text"); t != "" && sb.Len() < n && !wholeBlock(t) {
			if s := stripBoilerplate(excerpt(t, boilerplateWindow(n, len(t)))); s != "" {
				if sb.Len() > 0 {
					sb.WriteByte('\n')
				}
				sb.WriteString(s)
			}
		}
		return true
	})
	return sb.String()
}

// boilerplateWindow is how much of a user text is read: all of it up to
// maxUserText (agents' reminder blocks run to a few kilobytes, and must be
// seen whole to be removed), else an excerpt of n.
func boilerplateWindow(n, size int) int {
	if size <= maxUserText {
		return size
	}
	return max(n, 2048)
}

// maxUserText bounds the user text read whole (see boilerplateWindow).
const maxUserText = 32 << 10

// resultExcerpt is the text of a raw tool result within about n bytes: a
// chat tool message's content, a Responses output (a string or content
// parts), a Messages tool_result block's content (a string or blocks).
func resultExcerpt(raw string, n int) string {
	if strings.HasPrefix(raw, `"`) {
		return excerpt(raw, n)
	}
	var sb strings.Builder
	elements(raw, func(part string) bool {
		t := member(part, "text")
		if t == "" {
			t = member(part, "output")
		}
		if strings.HasPrefix(t, `"`) && sb.Len() < n {
			if sb.Len() > 0 {
				sb.WriteByte('\n')
			}
			sb.WriteString(excerpt(t, n-sb.Len()))
		}
		return true
	})
	return sb.String()
}

// writeUndated writes s to w without its lines that hold a date (an ISO
// date, "Today's date", a current_date field): agents write the day into
// their context, and a session that crosses midnight is still one. Lines
// end at a newline or, in raw JSON text, at the escape \n.
func writeUndated(w io.Writer, s string) {
	for len(s) > 0 {
		end, next := len(s), len(s)
		if i := strings.IndexByte(s, '\n'); i >= 0 {
			end, next = i, i+1
		}
		if i := strings.Index(s[:end], `\n`); i >= 0 {
			end, next = i, i+2
		}
		if line := s[:end]; !datedLine(line) {
			w.Write(unsafe.Slice(unsafe.StringData(line), len(line))) // the hash keeps nothing
			w.Write(newline)
		}
		s = s[next:]
	}
}

var newline = []byte{'\n'}

// datedLine reports whether a line holds a date: YYYY-MM-DD, or the words
// agents put before one.
func datedLine(line string) bool {
	for i := 0; i+10 <= len(line); i++ {
		if isDigits(line[i:i+4]) && line[i+4] == '-' && isDigits(line[i+5:i+7]) && line[i+7] == '-' && isDigits(line[i+8:i+10]) {
			return true
		}
	}
	if !strings.Contains(line, "date") && !strings.Contains(line, "Date") && !strings.Contains(line, "DATE") {
		return false
	}
	lower := strings.ToLower(line)
	return strings.Contains(lower, "today's date") || strings.Contains(lower, "current_date") || strings.Contains(lower, "current date")
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

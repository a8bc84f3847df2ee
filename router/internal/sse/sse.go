package sse

import (
	"bytes"
	"unsafe"
)

// RemoveSpan removes the object member data[start:end] (key to end of
// value) and one comma beside it. When data lies inside ev (one data line)
// ev is edited in place; otherwise (data joined from several lines) the
// event is rebuilt as one data line.
func RemoveSpan(ev, data []byte, start, end int) []byte {
	base := offsetIn(ev, data)
	if base < 0 {
		// data was joined from several data lines: edit the copy, then
		// rebuild the event with the other lines kept in their places
		// and the data split back into lines where it had line breaks.
		d := RemoveSpan(data, data, start, end)
		return RebuildData(ev, d)
	}
	start, end = base+start, base+end
	i := start - 1
	for i >= base && IsSpace(ev[i]) {
		i--
	}
	if i >= base && ev[i] == ',' {
		start = i
	} else {
		j := end
		for j < base+len(data) && IsSpace(ev[j]) {
			j++
		}
		if j < base+len(data) && ev[j] == ',' {
			end = j + 1
		}
	}
	n := copy(ev[start:], ev[end:])
	return ev[:start+n]
}

// RebuildData returns ev with its data lines replaced by data, written as
// "data: " lines at the place of the first one; other lines are kept.
func RebuildData(ev, data []byte) []byte {
	out := make([]byte, 0, len(ev))
	wroteData := false
	for len(ev) > 0 {
		next := len(ev)
		if i := lineEnd(ev); i >= 0 {
			next = i + 1
			if ev[i] == '\r' && i+1 < len(ev) && ev[i+1] == '\n' {
				next++
			}
		}
		line := ev[:next]
		ev = ev[next:]
		if v, ok := bytes.CutPrefix(line, []byte("data")); ok && (len(v) == 0 || v[0] == ':' || v[0] == '\r' || v[0] == '\n') {
			if !wroteData {
				for part := range bytes.SplitSeq(data, []byte("\n")) {
					out = append(append(append(out, "data: "...), part...), '\n')
				}
				wroteData = true
			}
			continue
		}
		out = append(out, line...)
	}
	return out
}

func SkipSpace(b []byte) []byte {
	for len(b) > 0 && IsSpace(b[0]) {
		b = b[1:]
	}
	return b
}

// offsetIn returns where sub starts inside b, or -1 when sub does not
// share b's memory.
func offsetIn(b, sub []byte) int {
	if len(sub) == 0 || len(b) == 0 {
		return -1
	}
	d := int(uintptr(unsafe.Pointer(&sub[0])) - uintptr(unsafe.Pointer(&b[0])))
	if d < 0 || d+len(sub) > len(b) {
		return -1
	}
	return d
}

func IsSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// NextEvent returns the first complete SSE event in b, through the blank
// line that ends it, and its length. When b holds no complete event it
// returns nil and the offset to resume from once more bytes arrive (the
// start of b's last, unfinished line); from is such an offset from an
// earlier call on the same pending bytes (0 for new ones). Lines end in
// CRLF, LF or CR. A CR at the very end of b that ends a blank line ends
// the event whatever follows (a CR or a CRLF, the client sees a blank
// line either way); one that ends a line with text is undecided until the
// next byte (an LF after it makes one CRLF, not a blank line), so b is
// not complete yet. The event boundaries are then exactly the client's.
func NextEvent(b []byte, from int) (ev []byte, n, resume int) {
	lineStart := from
	for lineStart < len(b) {
		j := lineEnd(b[lineStart:])
		if j < 0 {
			return nil, 0, lineStart
		}
		i := lineStart + j
		end := i + 1
		if b[i] == '\r' && end == len(b) && i != lineStart {
			return nil, 0, lineStart // CR or CRLF: the next read decides
		}
		if b[i] == '\r' && end < len(b) && b[end] == '\n' {
			end++
		}
		if i == lineStart {
			return b[:end], end, 0
		}
		lineStart = end
	}
	return nil, 0, lineStart
}

// EventData returns an event's data: the values of its data lines (one
// optional space after "data:" removed) joined by LF, and whether it has
// any. A single data line, the usual case, is returned without copying.
func EventData(ev []byte) ([]byte, bool) {
	var data []byte
	found, joined := false, false
	for len(ev) > 0 {
		line := ev
		next := len(ev)
		if i := lineEnd(ev); i >= 0 {
			line = ev[:i]
			next = i + 1
			if ev[i] == '\r' && i+1 < len(ev) && ev[i+1] == '\n' {
				next++
			}
		}
		ev = ev[next:]
		v, ok := bytes.CutPrefix(line, []byte("data"))
		if !ok || len(v) > 0 && v[0] != ':' {
			continue
		}
		if len(v) > 0 {
			v = v[1:]
			if len(v) > 0 && v[0] == ' ' {
				v = v[1:]
			}
		}
		switch {
		case !found:
			data, found = v, true
		case !joined:
			data = append(append(append([]byte(nil), data...), '\n'), v...)
			joined = true
		default:
			data = append(append(data, '\n'), v...)
		}
	}
	return data, found
}

// lineEnd returns the index of the first CR or LF in b, or -1. Two
// IndexByte scans (vectorised) beat one IndexAny loop on event-sized input.
func lineEnd(b []byte) int {
	i := bytes.IndexByte(b, '\n')
	limit := b
	if i >= 0 {
		limit = b[:i]
	}
	if j := bytes.IndexByte(limit, '\r'); j >= 0 {
		return j
	}
	return i
}

// sse appends one event to b.
func AppendEvent(b []byte, typ string, data string) []byte {
	b = append(b, "event: "...)
	b = append(b, typ...)
	b = append(b, "\ndata: "...)
	b = append(b, data...)
	return append(b, '\n', '\n')
}

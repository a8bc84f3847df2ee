package features

import (
	"strings"

	"github.com/tidwall/gjson"
)

// The walker reads messages from their raw JSON (the body is valid: wire
// checked it) without gjson.Result values for their members: gjson
// unescapes every string value it hands out, which for an agent's tool
// outputs would copy the whole conversation on every request. Strings
// are unescaped only where read, and only an excerpt of a long one.

// members calls fn with each member of the raw JSON object obj: its key
// (as written: the keys read here hold no escapes) and its raw value.
func members(obj string, fn func(key, raw string) bool) {
	objectAt(obj, skipSpace(obj, 0), fn)
}

// objectAt calls fn with each member of the object that starts at i in s
// and returns the index just after it: one scan of its bytes.
func objectAt(s string, i int, fn func(key, raw string) bool) int {
	if i >= len(s) || s[i] != '{' {
		return valueEnd(s, i)
	}
	i++
	stopped := false
	for {
		i = skipSpace(s, i)
		if i >= len(s) {
			return i
		}
		if s[i] == '}' {
			return i + 1
		}
		if s[i] != '"' {
			return valueEnd(s, i)
		}
		kEnd := stringEnd(s, i)
		key := s[i+1 : kEnd-1]
		i = skipSpace(s, kEnd)
		if i >= len(s) || s[i] != ':' {
			return i
		}
		i = skipSpace(s, i+1)
		end := valueEnd(s, i)
		if !stopped && !fn(key, s[i:end]) {
			stopped = true // read on to the object's end
		}
		i = skipSpace(s, end)
		if i < len(s) && s[i] == ',' {
			i++
		}
	}
}

// elements calls fn with each raw element of the raw JSON array arr.
func elements(arr string, fn func(raw string) bool) {
	i := skipSpace(arr, 0)
	if i >= len(arr) || arr[i] != '[' {
		return
	}
	i++
	for {
		i = skipSpace(arr, i)
		if i >= len(arr) || arr[i] == ']' {
			return
		}
		end := valueEnd(arr, i)
		if !fn(arr[i:end]) {
			return
		}
		i = skipSpace(arr, end)
		if i >= len(arr) || arr[i] != ',' {
			return
		}
		i++
	}
}

// member is the raw value of obj's member key, "" when it has none.
func member(obj, key string) string {
	out := ""
	members(obj, func(k, raw string) bool {
		if k == key {
			out = raw
			return false
		}
		return true
	})
	return out
}

// str is a short raw JSON string's text ("" for anything else).
func str(raw string) string {
	if len(raw) < 2 || raw[0] != '"' {
		return ""
	}
	return unescape(raw[1 : len(raw)-1])
}

func skipSpace(s string, i int) int {
	for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r') {
		i++
	}
	return i
}

// valueEnd is the index just after the JSON value starting at i.
func valueEnd(s string, i int) int {
	if i >= len(s) {
		return i
	}
	switch s[i] {
	case '"':
		return stringEnd(s, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(s); j++ {
			k := strings.IndexAny(s[j:], `"{}[]`)
			if k < 0 {
				return len(s)
			}
			j += k
			switch s[j] {
			case '"':
				j = stringEnd(s, j) - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1
				}
			}
		}
		return len(s)
	}
	j := i
	for j < len(s) && s[j] != ',' && s[j] != '}' && s[j] != ']' && s[j] != ' ' && s[j] != '\n' && s[j] != '\t' && s[j] != '\r' {
		j++
	}
	return j
}

// stringEnd is the index just after the JSON string starting at i: the
// first quote after it not escaped by an odd run of backslashes.
func stringEnd(s string, i int) int {
	for j := i + 1; j < len(s); {
		k := strings.IndexByte(s[j:], '"')
		if k < 0 {
			return len(s)
		}
		q := j + k
		run := 0
		for b := q - 1; b > i && s[b] == '\\'; b-- {
			run++
		}
		if run%2 == 0 {
			return q + 1
		}
		j = q + 1
	}
	return len(s)
}

// rawResult wraps a raw value for the code that reads gjson results of
// small values (a system prompt field wire already parsed).
func rawString(v gjson.Result) string {
	if v.Type == gjson.String {
		return v.Raw
	}
	return strings.TrimSpace(v.Raw)
}

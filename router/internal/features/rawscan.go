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
	i := skipSpace(obj, 0)
	if i >= len(obj) || obj[i] != '{' {
		return
	}
	i++
	for {
		i = skipSpace(obj, i)
		if i >= len(obj) || obj[i] != '"' {
			return
		}
		kEnd := valueEnd(obj, i)
		key := obj[i+1 : kEnd-1]
		i = skipSpace(obj, kEnd)
		if i >= len(obj) || obj[i] != ':' {
			return
		}
		i = skipSpace(obj, i+1)
		end := valueEnd(obj, i)
		if !fn(key, obj[i:end]) {
			return
		}
		i = skipSpace(obj, end)
		if i >= len(obj) || obj[i] != ',' {
			return
		}
		i++
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

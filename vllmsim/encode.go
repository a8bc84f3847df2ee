package vllmsim

import (
	"math"
	"strconv"
	"unicode/utf8"
)

// The simulator writes its JSON by appending to byte slices rather than
// through encoding/json: field order then matches vLLM's, and the zero-delay
// path used by proxy benchmarks allocates little.

const hexDigits = "0123456789abcdef"

// appendString appends s as a JSON string.
func appendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	dst = appendEscaped(dst, s)
	return append(dst, '"')
}

// appendEscaped appends the JSON-escaped body of s, without quotes. Invalid
// UTF-8 becomes U+FFFD; U+2028 and U+2029 are escaped for JavaScript readers.
func appendEscaped(dst []byte, s string) []byte {
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	return append(dst, s[start:]...)
}

// minLogprob is what vLLM reports in place of -Inf.
const minLogprob = -9999.0

// appendFloat appends f as a JSON number; non-finite values become minLogprob.
func appendFloat(dst []byte, f float64) []byte {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		f = minLogprob
	}
	return strconv.AppendFloat(dst, f, 'g', -1, 64)
}

// appendBytes appends the UTF-8 bytes of s as a JSON array of numbers, the
// "bytes" field of chat logprobs.
func appendBytes(dst []byte, s string) []byte {
	dst = append(dst, '[')
	for i := 0; i < len(s); i++ {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = strconv.AppendUint(dst, uint64(s[i]), 10)
	}
	return append(dst, ']')
}

// appendUsage appends an OpenAI usage object. prompt_tokens_details is
// {"cached_tokens": cached} when cached > 0 and null otherwise, as vLLM
// writes it (only with --enable-prompt-tokens-details and a cache hit).
func appendUsage(dst []byte, prompt, completion, cached int) []byte {
	dst = append(dst, `{"prompt_tokens":`...)
	dst = strconv.AppendInt(dst, int64(prompt), 10)
	dst = append(dst, `,"total_tokens":`...)
	dst = strconv.AppendInt(dst, int64(prompt+completion), 10)
	dst = append(dst, `,"completion_tokens":`...)
	dst = strconv.AppendInt(dst, int64(completion), 10)
	if cached > 0 {
		dst = append(dst, `,"prompt_tokens_details":{"cached_tokens":`...)
		dst = strconv.AppendInt(dst, int64(cached), 10)
		return append(dst, "}}"...)
	}
	return append(dst, `,"prompt_tokens_details":null}`...)
}

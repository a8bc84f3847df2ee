package translate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
	"unicode/utf16"

	"github.com/tidwall/gjson"
)

// Translation of an Anthropic Messages or OpenAI Responses request into the
// chat completions request that makes vLLM render the same prompt, so that
// a stream cut on one of those APIs can be continued on a replica's
// /v1/chat/completions with continue_final_message (vLLM's Messages and
// Responses endpoints cannot continue a partial answer).
//
// Each rule mirrors a named function of vLLM's: for Messages, the class
// AnthropicServingMessages in vllm/entrypoints/anthropic/serving.py; for
// Responses, construct_input_messages and its helpers in
// vllm/entrypoints/openai/responses/utils.py, ResponsesRequest in
// responses/protocol.py and iter_response_function_tool_dicts in
// vllm/tool_parsers/utils.py. vLLM builds a chat request (Messages) or
// chat messages (Responses) internally and renders them with the same
// chat_utils as the chat endpoint, so equal chat JSON means an equal prompt.
//
// The body is the one the replica received (after Adapt). What cannot be
// carried over faithfully is refused with ErrNotTranslatable, and the
// caller ends the stream with the API's error event rather than guess.
// Fields of the source API that chat has no use for are left out.

// ErrNotTranslatable says a request cannot be turned into an equivalent
// chat completions request; the wrapping error says why.
var ErrNotTranslatable = errors.New("not translatable to chat completions")

// refusef wraps ErrNotTranslatable with the reason.
func refusef(format string, args ...any) error {
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), ErrNotTranslatable)
}

// field is one member of a JSON object; object keeps its members in order
// (chat templates render tool schemas with tojson, which keeps key order,
// so schemas are carried as raw JSON in their own order).
type field struct {
	key string
	val any
}

type object []field

func (o object) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, f := range o {
		if i > 0 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(f.key)
		b.Write(k)
		b.WriteByte(':')
		v, err := json.Marshal(f.val)
		if err != nil {
			return nil, err
		}
		b.Write(v)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// raw is a value carried over as it came.
func raw(r gjson.Result) json.RawMessage { return json.RawMessage(r.Raw) }

// chatMessage is one chat message as vLLM builds it; a nil pointer or
// slice is a key the message does not have (vLLM's merging rules look at
// which keys a message has).
type chatMessage struct {
	role       string
	content    any // nil: no content key; else a string or a list of parts
	reasoning  *string
	toolCalls  []object
	toolCallID *string
}

func (m *chatMessage) MarshalJSON() ([]byte, error) {
	o := object{{"role", m.role}}
	if m.content != nil {
		o = append(o, field{"content", m.content})
	}
	if m.reasoning != nil {
		o = append(o, field{"reasoning", *m.reasoning})
	}
	if m.toolCalls != nil {
		o = append(o, field{"tool_calls", m.toolCalls})
	}
	if m.toolCallID != nil {
		o = append(o, field{"tool_call_id", *m.toolCallID})
	}
	return o.MarshalJSON()
}

// present is a value that is there and not JSON null (pydantic treats an
// explicit null as unset for every optional field used here).
func present(r gjson.Result) bool { return r.Exists() && r.Type != gjson.Null }

// streamFields ends every translated request: the continuation is always
// streamed, with usage in its last chunk.
func streamFields() object {
	return object{
		{"stream", true},
		{"stream_options", object{{"include_usage", true}}},
	}
}

// parseRoot checks body is a JSON object.
func parseRoot(api string, body []byte) (gjson.Result, error) {
	if !gjson.ValidBytes(body) {
		return gjson.Result{}, refusef("%s request: malformed JSON", api)
	}
	root := gjson.ParseBytes(body)
	if !root.IsObject() {
		return gjson.Result{}, refusef("%s request: not a JSON object", api)
	}
	return root, nil
}

// optional copies root's key to out as key as, when it is there and of the
// JSON type is (vLLM would have refused another type).
func optional(out *object, root gjson.Result, key, as, what string, ok func(gjson.Result) bool) error {
	v := root.Get(escapeKey(key))
	if !present(v) {
		return nil
	}
	if !ok(v) {
		return refusef("%s: not %s", key, what)
	}
	*out = append(*out, field{as, raw(v)})
	return nil
}

func isNumber(r gjson.Result) bool { return r.Type == gjson.Number }
func isString(r gjson.Result) bool { return r.Type == gjson.String }

func isInteger(r gjson.Result) bool {
	return r.Type == gjson.Number && !strings.ContainsAny(r.Raw, ".eE")
}

func isStringList(r gjson.Result) bool {
	if !r.IsArray() {
		return false
	}
	ok := true
	r.ForEach(func(_, s gjson.Result) bool { ok = s.Type == gjson.String; return ok })
	return ok
}

func isStringOrList(r gjson.Result) bool { return isString(r) || isStringList(r) }

// escapeKey makes a literal object key safe as a gjson path.
func escapeKey(k string) string {
	var b strings.Builder
	for _, c := range k {
		if strings.ContainsRune(`.*?|#@!\:=<>%~()[]{}"`, c) {
			b.WriteByte('\\')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// members lists an object's members in order; a key given twice keeps its
// first place and its last value, as Python's json.loads does.
func members(r gjson.Result) []field {
	var out []field
	at := map[string]int{}
	r.ForEach(func(k, v gjson.Result) bool {
		if i, ok := at[k.Str]; ok {
			out[i].val = v
			return true
		}
		at[k.Str] = len(out)
		out = append(out, field{k.Str, v})
		return true
	})
	return out
}

// ---------------------------------------------------------------------------
// Anthropic Messages

// nullable is r as raw JSON, or null when r is absent (vLLM passes the
// field either way; pydantic then holds None for both).
func nullable(r gjson.Result) json.RawMessage {
	if !r.Exists() {
		return json.RawMessage("null")
	}
	return raw(r)
}

// appendMember adds member at the end of the JSON object obj, where a
// Python dict puts a new key.
func appendMember(obj, member string) json.RawMessage {
	s := strings.TrimSpace(obj)
	s = strings.TrimSpace(strings.TrimSuffix(s, "}"))
	if strings.HasSuffix(s, "{") {
		return json.RawMessage(s + member + "}")
	}
	return json.RawMessage(s + "," + member + "}")
}

// pyJSONDumps writes v as Python's json.dumps does with its defaults
// (", " and ": " separators, non-ASCII escaped, keys in their order, a
// repeated key once with its last value), which is how vLLM turns a
// tool_use input into the arguments string.
func pyJSONDumps(v gjson.Result) string {
	var b strings.Builder
	pyWrite(&b, v)
	return b.String()
}

func pyWrite(b *strings.Builder, v gjson.Result) {
	switch {
	case v.IsObject():
		b.WriteByte('{')
		for i, m := range members(v) {
			if i > 0 {
				b.WriteString(", ")
			}
			pyString(b, m.key)
			b.WriteString(": ")
			pyWrite(b, m.val.(gjson.Result))
		}
		b.WriteByte('}')
	case v.IsArray():
		b.WriteByte('[')
		for i, e := range v.Array() {
			if i > 0 {
				b.WriteString(", ")
			}
			pyWrite(b, e)
		}
		b.WriteByte(']')
	case v.Type == gjson.String:
		pyString(b, v.Str)
	case v.Type == gjson.Number:
		b.WriteString(pyNumber(v.Raw))
	case v.Type == gjson.True:
		b.WriteString("true")
	case v.Type == gjson.False:
		b.WriteString("false")
	default:
		b.WriteString("null")
	}
}

// pyNumber writes a JSON number as Python reads and writes it: an integer
// exactly, anything with a fraction or exponent as a float's repr.
func pyNumber(lit string) string {
	if !strings.ContainsAny(lit, ".eE") {
		if n, ok := new(big.Int).SetString(lit, 10); ok {
			return n.String()
		}
		return lit
	}
	f, err := strconv.ParseFloat(lit, 64)
	if err != nil && !math.IsInf(f, 0) {
		return lit
	}
	switch {
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	}
	// Python's float repr: the shortest digits that read back, in
	// positional form for decimal exponents -4 to 15, else scientific
	// with a signed exponent of at least two digits (as Go writes it).
	exp := 0
	if f != 0 {
		e := strconv.FormatFloat(f, 'e', -1, 64)
		exp, _ = strconv.Atoi(e[strings.IndexByte(e, 'e')+1:])
	}
	if exp < -4 || exp >= 16 {
		return strconv.FormatFloat(f, 'e', -1, 64)
	}
	s := strconv.FormatFloat(f, 'f', -1, 64)
	if !strings.ContainsRune(s, '.') {
		s += ".0"
	}
	return s
}

// pyString writes s as a JSON string with ensure_ascii: everything outside
// printable ASCII as \uXXXX (lowercase hex, surrogate pairs above the
// BMP), with the short escapes Python uses.
func pyString(b *strings.Builder, s string) {
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		default:
			switch {
			case r >= 0x20 && r <= 0x7e:
				b.WriteRune(r)
			case r > 0xffff:
				hi, lo := utf16.EncodeRune(r)
				fmt.Fprintf(b, `\u%04x\u%04x`, hi, lo)
			default:
				fmt.Fprintf(b, `\u%04x`, r)
			}
		}
	}
	b.WriteByte('"')
}

// ---------------------------------------------------------------------------
// OpenAI Responses

package router

import (
	"bytes"
	"encoding/json"
	"unicode/utf8"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// Responses custom tools (Codex's apply_patch) are emulated: vLLM has no
// tool type for them, so adapt offers each as a function tool with one
// string parameter, input (customFunction), and the model's calls to such
// a function come back to the client as custom tool calls, their input
// the string value of the arguments' input. Only calls to names that were
// custom tools in the request are converted. See docs/agents.md.

// customInput is the input of a custom tool call whose function was
// called with args: the string value of input when args is
// {"input": string}, or args itself when the model wrote something else.
func customInput(args string) string {
	var d inputDecoder
	if s := d.feed(args); d.complete() {
		return s
	}
	if v := gjson.Parse(args); gjson.Valid(args) && v.IsObject() {
		if in := v.Get("input"); in.Type == gjson.String {
			return in.Str
		}
	}
	return args
}

// customCall is the custom_tool_call item for a function_call item of
// the replica, with the given input.
func customCall(it gjson.Result, input string) string {
	out := `{"type":"custom_tool_call"}`
	for _, k := range [...]string{"id", "call_id", "name"} {
		if v := it.Get(k); v.Exists() {
			out, _ = sjson.SetRaw(out, k, v.Raw)
		}
	}
	out, _ = sjson.Set(out, "input", input)
	status := it.Get("status")
	if status.Type != gjson.String {
		status = gjson.Parse(`"completed"`)
	}
	out, _ = sjson.SetRaw(out, "status", status.Raw)
	return out
}

// customOutput turns the function_call items of the output array at path
// (output of a response, response.output of an event) that call custom
// tools into custom_tool_call items. data is not modified.
func customOutput(data []byte, path string, c customTools) []byte {
	arr := gjson.GetBytes(data, path)
	if !arr.IsArray() {
		return data
	}
	type edit struct{ path, item string }
	var edits []edit
	arr.ForEach(func(k, it gjson.Result) bool {
		if it.Get("type").Str == "function_call" && c.has(it.Get("name").Str) {
			edits = append(edits, edit{path + "." + itoa(k.Int()), customCall(it, customInput(it.Get("arguments").Str))})
		}
		return true
	})
	for _, e := range edits {
		if b, err := sjson.SetRawBytes(data, e.path, []byte(e.item)); err == nil {
			data = b
		}
	}
	return data
}

// customStream is the state of a Responses stream whose request offered
// custom tools: the calls to them being streamed, and how far the
// sequence numbers the client sees are behind the replica's (a delta that
// brings no character of the input is not passed on; a catch-up delta is
// added before a done event).
type customStream struct {
	calls []*customCallState
	shift int64
}

// customCallState is one custom tool call being streamed.
type customCallState struct {
	itemID string
	dec    inputDecoder
	// sent is the input the client was sent in deltas.
	sent []byte
}

func (cs *customStream) call(itemID string) *customCallState {
	for _, c := range cs.calls {
		if c.itemID == itemID {
			return c
		}
	}
	return nil
}

func (cs *customStream) end(itemID string) {
	for i, c := range cs.calls {
		if c.itemID == itemID {
			cs.calls = append(cs.calls[:i], cs.calls[i+1:]...)
			return
		}
	}
}

// customEvent turns the events of a replica's function call to a custom
// tool into the client's custom tool call events, and numbers every event
// on from what the client was sent. It returns the event or events to
// send (nil: none) and the data of the last one.
//
//	response.output_item.added (function_call)   → response.output_item.added (custom_tool_call, input "")
//	response.function_call_arguments.delta       → response.custom_tool_call_input.delta, the input's decoded characters (none: not sent)
//	response.function_call_arguments.done        → response.custom_tool_call_input.done (a catch-up delta first when the deltas fell short)
//	response.output_item.done (function_call)    → response.output_item.done (custom_tool_call)
//	response.* with response.output              → its function_call items as custom_tool_call items
func (p *pump) customEvent(ev, data []byte, root gjson.Result, typ string) ([]byte, []byte) {
	cs := p.customs
	if cs == nil {
		cs = &customStream{}
		p.customs = cs
	}
	var out []byte // when set, the events replacing ev (data not yet numbered)
	switch typ {
	case "response.output_item.added", "response.output_item.done":
		it := root.Get("item")
		if it.Get("type").Str != "function_call" || !p.custom.has(it.Get("name").Str) {
			break
		}
		input := ""
		if typ == "response.output_item.added" {
			cs.calls = append(cs.calls, &customCallState{itemID: it.Get("id").Str})
		} else {
			input = customInput(it.Get("arguments").Str)
			cs.end(it.Get("id").Str)
		}
		nd, err := sjson.SetRawBytes(bytes.Clone(data), "item", []byte(customCall(it, input)))
		if err != nil {
			break
		}
		ev, data = rebuildData(ev, nd), nd
	case "response.function_call_arguments.delta":
		c := cs.call(root.Get("item_id").Str)
		if c == nil {
			break
		}
		piece := c.dec.feed(root.Get("delta").Str)
		if piece == "" {
			cs.shift++
			return nil, nil
		}
		c.sent = append(c.sent, piece...)
		ev = customDelta(root, piece, root.Get("sequence_number").Int())
		ev, data = p.renumber(ev)
		return ev, data
	case "response.function_call_arguments.done":
		c := cs.call(root.Get("item_id").Str)
		if c == nil {
			break
		}
		input := customInput(root.Get("arguments").Str)
		n := root.Get("sequence_number").Int()
		if rest, ok := bytes.CutPrefix([]byte(input), c.sent); ok && len(rest) > 0 {
			// The deltas fell short of the input (the arguments ended
			// without their closing quote, or the done event says more):
			// the rest is sent as one more delta.
			out = customDelta(root, string(rest), n-cs.shift)
			c.sent = append(c.sent, rest...)
			cs.shift--
		}
		done := `{"type":"response.custom_tool_call_input.done","item_id":` + root.Get("item_id").Raw +
			`,"output_index":` + rawOr(root.Get("output_index"), "0") + `,"input":` + jstr(input) +
			`,"sequence_number":` + itoa(n) + `}`
		last, d := p.renumber(sse(nil, "response.custom_tool_call_input.done", done))
		return append(out, last...), d
	case "response.created", "response.in_progress", "response.completed", "response.incomplete", "response.failed":
		if bytes.Contains(data, []byte(`"function_call"`)) {
			if nd := customOutput(data, "response.output", p.custom); !bytes.Equal(nd, data) {
				ev, data = rebuildData(ev, nd), nd
			}
		}
	}
	if cs.shift != 0 {
		return p.renumber(ev)
	}
	return ev, data
}

// renumber moves the sequence_number of the one event ev back by the
// stream's shift; it returns the event and its data.
func (p *pump) renumber(ev []byte) ([]byte, []byte) {
	data, _ := eventData(ev)
	shift := p.customs.shift
	n := gjson.GetBytes(data, "sequence_number")
	if shift == 0 || n.Type != gjson.Number {
		return ev, data
	}
	nd, err := sjson.SetBytes(bytes.Clone(data), "sequence_number", n.Int()-shift)
	if err != nil {
		return ev, data
	}
	return rebuildData(ev, nd), nd
}

// customDelta is a response.custom_tool_call_input.delta event for the
// function_call_arguments event root, numbered n.
func customDelta(root gjson.Result, piece string, n int64) []byte {
	return sse(nil, "response.custom_tool_call_input.delta", `{"type":"response.custom_tool_call_input.delta","item_id":`+
		rawOr(root.Get("item_id"), `""`)+`,"output_index":`+rawOr(root.Get("output_index"), "0")+
		`,"delta":`+jstr(piece)+`,"sequence_number":`+itoa(n)+`}`)
}

func rawOr(v gjson.Result, or string) string {
	if v.Exists() {
		return v.Raw
	}
	return or
}

// inputDecoder decodes, as it arrives in pieces of any size, the string
// value of input in a function's arguments {"input": "..."}: each piece
// of the arguments yields the characters of the value that it makes
// certain. Escapes may be split anywhere, \uXXXX included, and a
// surrogate pair's two halves are joined (a lone half is U+FFFD, as in
// encoding/json). Arguments of another shape (another first key, a value
// that is not a string, broken JSON) stop it: it yields nothing more, and
// complete is false.
type inputDecoder struct {
	state decoderState
	key   []byte // the first key's raw text
	// hex is the value of the \u escape being read, from nhex digits.
	hex  rune
	nhex int
	// high is a high surrogate waiting for its low half (0: none).
	high rune
}

type decoderState uint8

const (
	decStart  decoderState = iota // before {
	decKey                        // before the first key
	decKeyStr                     // in the first key
	decKeyEsc                     // after \ in the first key
	decColon                      // before :
	decValue                      // before the value
	decStr                        // in the value
	decEsc                        // after \ in the value
	decHex                        // in a \u escape
	decClose                      // after the value: before } (or another member)
	decEnd                        // after }
	decFailed                     // not {"input": string}
)

// complete reports whether the arguments fed so far are exactly
// {"input": string}, whole.
func (d *inputDecoder) complete() bool { return d.state == decEnd }

// feed reads the next piece of the arguments and returns the characters
// of the input it makes certain.
func (d *inputDecoder) feed(s string) string {
	var out []byte
	for i := 0; i < len(s) && d.state != decFailed; i++ {
		c := s[i]
		switch d.state {
		case decStart, decKey, decColon, decValue, decClose, decEnd:
			if isSpace(c) {
				continue
			}
			switch {
			case d.state == decStart && c == '{':
				d.state = decKey
			case d.state == decKey && c == '"':
				d.state = decKeyStr
			case d.state == decColon && c == ':':
				d.state = decValue
			case d.state == decValue && c == '"':
				d.state = decStr
			case d.state == decClose && c == '}':
				d.state = decEnd
			default:
				d.state = decFailed
			}
		case decKeyStr:
			switch c {
			case '\\':
				d.key = append(d.key, c)
				d.state = decKeyEsc
			case '"':
				var k string
				if json.Unmarshal(append(append([]byte{'"'}, d.key...), '"'), &k) != nil || k != "input" {
					d.state = decFailed
					break
				}
				d.state = decColon
			default:
				d.key = append(d.key, c)
			}
			if len(d.key) > 64 {
				d.state = decFailed // no key this long is input
			}
		case decKeyEsc:
			d.key = append(d.key, c)
			d.state = decKeyStr
		case decStr:
			switch {
			case c == '\\':
				d.state = decEsc
			case c == '"':
				out = d.flushHigh(out)
				d.state = decClose
			case c < 0x20:
				d.state = decFailed // a control character: not JSON
			default:
				out = append(d.flushHigh(out), c)
			}
		case decEsc:
			if c == 'u' {
				d.state, d.hex, d.nhex = decHex, 0, 0
				break
			}
			r, ok := escapes[c]
			if !ok {
				d.state = decFailed
				break
			}
			out = append(d.flushHigh(out), r)
			d.state = decStr
		case decHex:
			v, ok := hexValue(c)
			if !ok {
				d.state = decFailed
				break
			}
			d.hex, d.nhex = d.hex<<4|v, d.nhex+1
			if d.nhex == 4 {
				out = d.unit(out, d.hex)
				d.state = decStr
			}
		}
	}
	return string(out)
}

// escapes are JSON's one-character escapes.
var escapes = map[byte]byte{'"': '"', '\\': '\\', '/': '/', 'b': '\b', 'f': '\f', 'n': '\n', 'r': '\r', 't': '\t'}

// unit adds the UTF-16 code unit u of a \u escape.
func (d *inputDecoder) unit(out []byte, u rune) []byte {
	switch {
	case d.high != 0 && u >= 0xDC00 && u <= 0xDFFF:
		r := (d.high-0xD800)<<10 | (u - 0xDC00) + 0x10000
		d.high = 0
		return utf8.AppendRune(out, r)
	case u >= 0xD800 && u <= 0xDBFF:
		out = d.flushHigh(out)
		d.high = u
		return out
	case u >= 0xDC00 && u <= 0xDFFF:
		return utf8.AppendRune(d.flushHigh(out), utf8.RuneError)
	}
	return utf8.AppendRune(d.flushHigh(out), u)
}

// flushHigh adds a high surrogate that found no low half as U+FFFD.
func (d *inputDecoder) flushHigh(out []byte) []byte {
	if d.high == 0 {
		return out
	}
	d.high = 0
	return utf8.AppendRune(out, utf8.RuneError)
}

func hexValue(c byte) (rune, bool) {
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

package translate

import (
	"encoding/json"
	"strconv"
	"unicode/utf8"

	"github.com/switchyard/switchyard/router/internal/sse"
	"github.com/switchyard/switchyard/router/internal/wire"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// CustomInput is the input of a custom tool call whose function was
// called with args: the string value of input when args begin
// {"input": " (read as InputDecoder reads it, whatever follows, so that a
// stream's deltas, which it yields, add up to it), the input member of
// another JSON object, or args itself when the model wrote something else.
func CustomInput(args string) string {
	var d InputDecoder
	if s := d.Feed(args); d.began {
		return s
	}
	if v := gjson.Parse(args); gjson.Valid(args) && v.IsObject() {
		if in := v.Get("input"); in.Type == gjson.String {
			return in.Str
		}
	}
	return args
}

// CustomCall is the custom_tool_call item for a function_call item of
// the replica, with the given input.
func CustomCall(it gjson.Result, input string) string {
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

// CustomOutput turns the function_call items of the output array at path
// (output of a response, response.output of an event) that call custom
// tools into custom_tool_call items. data is not modified.
func CustomOutput(data []byte, path string, c wire.CustomTools) []byte {
	arr := gjson.GetBytes(data, path)
	if !arr.IsArray() {
		return data
	}
	type edit struct{ path, item string }
	var edits []edit
	arr.ForEach(func(k, it gjson.Result) bool {
		if it.Get("type").Str == "function_call" && c.Has(it.Get("name").Str) {
			edits = append(edits, edit{path + "." + strconv.FormatInt(k.Int(), 10), CustomCall(it, CustomInput(it.Get("arguments").Str))})
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

// CustomDelta is a response.custom_tool_call_input.delta event for the
// function_call_arguments event root, numbered n.
func CustomDelta(root gjson.Result, piece string, n int64) []byte {
	return sse.AppendEvent(nil, "response.custom_tool_call_input.delta", `{"type":"response.custom_tool_call_input.delta","item_id":`+
		RawOr(root.Get("item_id"), `""`)+`,"output_index":`+RawOr(root.Get("output_index"), "0")+
		`,"delta":`+wire.Quote(piece)+`,"sequence_number":`+strconv.FormatInt(n, 10)+`}`)
}

func RawOr(v gjson.Result, or string) string {
	if v.Exists() {
		return v.Raw
	}
	return or
}

// InputDecoder decodes, as it arrives in pieces of any size, the string
// value of input in a function's arguments {"input": "..."}: each piece
// of the arguments yields the characters of the value that it makes
// certain. Escapes may be split anywhere, \uXXXX included, and a
// surrogate pair's two halves are joined (a lone half is U+FFFD, as in
// encoding/json). Arguments of another shape before the value (another
// first key, a value that is not a string) stop it at once: it yields
// nothing. Once the value has begun it is read leniently, since its
// characters may have been sent: an escape JSON does not have (\q, a \u
// without four hex digits) and a raw control character are kept as
// written, a value cut short ends where it was cut (an escape in progress
// dropped), and what follows the value is not read. complete is true only
// for arguments that are exactly {"input": string}, whole.
type InputDecoder struct {
	state decoderState
	key   []byte // the first key's raw text
	// hex is the value of the \u escape being read, from nhex digits,
	// written digits.
	hex    rune
	nhex   int
	digits [4]byte
	// high is a high surrogate waiting for its low half (0: none).
	high rune
	// began: the value's string began; lenient: it was not JSON.
	began, lenient bool
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
func (d *InputDecoder) complete() bool { return d.state == decEnd && !d.lenient }

// feed reads the next piece of the arguments and returns the characters
// of the input it makes certain.
func (d *InputDecoder) Feed(s string) string {
	var out []byte
	for i := 0; i < len(s) && d.state != decFailed; i++ {
		c := s[i]
		switch d.state {
		case decStart, decKey, decColon, decValue, decClose, decEnd:
			if sse.IsSpace(c) {
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
				d.state, d.began = decStr, true
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
				// A raw control character: not JSON, kept as written.
				out, d.lenient = append(d.flushHigh(out), c), true
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
				// Not a JSON escape: kept as written.
				out, d.lenient, d.state = append(d.flushHigh(out), '\\', c), true, decStr
				break
			}
			out = append(d.flushHigh(out), r)
			d.state = decStr
		case decHex:
			v, ok := wire.HexValue(c)
			if !ok {
				// \u without four hex digits: kept as written, and c read
				// again as a character of the string.
				out = append(append(d.flushHigh(out), '\\', 'u'), d.digits[:d.nhex]...)
				d.lenient, d.state = true, decStr
				i--
				break
			}
			d.digits[d.nhex] = c
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
func (d *InputDecoder) unit(out []byte, u rune) []byte {
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
func (d *InputDecoder) flushHigh(out []byte) []byte {
	if d.high == 0 {
		return out
	}
	d.high = 0
	return utf8.AppendRune(out, utf8.RuneError)
}

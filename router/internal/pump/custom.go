package pump

import (
	"bytes"
	"strings"

	"github.com/switchyard/switchyard/router/internal/translate"
	"github.com/switchyard/switchyard/router/internal/wire"

	"github.com/switchyard/switchyard/router/internal/sse"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// Responses custom tools (Codex's apply_patch) are emulated: vLLM has no
// tool type for them, so wire.Adapt offers each as a function tool with one
// string parameter, input (customFunction), and the model's calls to such
// a function come back to the client as custom tool calls, their input
// the string value of the arguments' input. Only calls to names that were
// custom tools in the request are converted. See docs/agents.md.

// customStream is the state of a Responses stream whose request offered
// custom tools: the calls to them being streamed, and how far the
// sequence numbers the client sees are behind the replica's (a delta that
// brings no character of the input is not passed on; a catch-up delta is
// added before a done event).
type customStream struct {
	// tools are the request's custom tools.
	tools wire.CustomTools
	calls []*customCallState
	shift int64
	// settled are the inputs of ended calls whose item, as the replica
	// wrote it, disagrees with what the client was sent: the response
	// object of the terminal event carries these inputs too.
	settled []settledInput
}

type settledInput struct{ itemID, input string }

// customCallState is one custom tool call being streamed.
type customCallState struct {
	itemID string
	dec    translate.InputDecoder
	// sent is the input the client was sent in deltas.
	sent []byte
	// input, once done is set, is the input its done event gave.
	input string
	done  bool
}

// settle is the input of c, given the one its arguments give: the client
// has been sent deltas that cannot be taken back, so an input they do not
// begin (a replica whose done event contradicts its deltas) gives way to
// what they add up to.
func (c *customCallState) settle(input string) string {
	if c.done {
		return c.input
	}
	if !strings.HasPrefix(input, string(c.sent)) {
		return string(c.sent)
	}
	return input
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

// event turns the events of a replica's function call to a custom
// tool into the client's custom tool call events, and numbers every event
// on from what the client was sent. It returns the event or events to
// send (nil: none) and the data of the last one.
//
//	response.output_item.added (function_call)   → response.output_item.added (custom_tool_call, input "")
//	response.function_call_arguments.delta       → response.custom_tool_call_input.delta, the input's decoded characters (none: not sent)
//	response.function_call_arguments.done        → response.custom_tool_call_input.done (a catch-up delta first when the deltas fell short)
//	response.output_item.done (function_call)    → response.output_item.done (custom_tool_call)
//	response.* with response.output              → its function_call items as custom_tool_call items
func (cs *customStream) event(ev, data []byte, root gjson.Result, typ string) ([]byte, []byte) {
	var out []byte // when set, the events replacing ev (data not yet numbered)
	switch typ {
	case "response.output_item.added", "response.output_item.done":
		it := root.Get("item")
		if it.Get("type").Str != "function_call" || !cs.tools.Has(it.Get("name").Str) {
			break
		}
		input := ""
		if typ == "response.output_item.added" {
			cs.calls = append(cs.calls, &customCallState{itemID: it.Get("id").Str})
		} else {
			input = translate.CustomInput(it.Get("arguments").Str)
			if c := cs.call(it.Get("id").Str); c != nil {
				if s := c.settle(input); s != input {
					input = s
					cs.settled = append(cs.settled, settledInput{c.itemID, s})
				}
			}
			cs.end(it.Get("id").Str)
		}
		nd, err := sjson.SetRawBytes(bytes.Clone(data), "item", []byte(translate.CustomCall(it, input)))
		if err != nil {
			break
		}
		ev, data = sse.RebuildData(ev, nd), nd
	case "response.function_call_arguments.delta":
		c := cs.call(root.Get("item_id").Str)
		if c == nil {
			break
		}
		piece := c.dec.Feed(root.Get("delta").Str)
		if piece == "" {
			cs.shift++
			return nil, nil
		}
		c.sent = append(c.sent, piece...)
		ev = translate.CustomDelta(root, piece, root.Get("sequence_number").Int())
		ev, data = cs.renumber(ev)
		return ev, data
	case "response.function_call_arguments.done":
		c := cs.call(root.Get("item_id").Str)
		if c == nil {
			break
		}
		input := c.settle(translate.CustomInput(root.Get("arguments").Str))
		n := root.Get("sequence_number").Int()
		if rest, ok := bytes.CutPrefix([]byte(input), c.sent); ok && len(rest) > 0 {
			// The deltas fell short of the input (arguments of another
			// shape, whose input is known only whole, or a done event that
			// says more): the rest is sent as one more delta.
			out = translate.CustomDelta(root, string(rest), n-cs.shift)
			c.sent = append(c.sent, rest...)
			cs.shift--
		}
		c.input, c.done = input, true
		done := `{"type":"response.custom_tool_call_input.done","item_id":` + translate.RawOr(root.Get("item_id"), `""`) +
			`,"output_index":` + translate.RawOr(root.Get("output_index"), "0") + `,"input":` + wire.Quote(input) +
			`,"sequence_number":` + itoa(n) + `}`
		last, d := cs.renumber(sse.AppendEvent(nil, "response.custom_tool_call_input.done", done))
		return append(out, last...), d
	case "response.created", "response.in_progress", "response.completed", "response.incomplete", "response.failed":
		if bytes.Contains(data, []byte(`"function_call"`)) {
			if nd := cs.settledOutput(translate.CustomOutput(data, "response.output", cs.tools)); !bytes.Equal(nd, data) {
				ev, data = sse.RebuildData(ev, nd), nd
			}
		}
	}
	if cs.shift != 0 {
		return cs.renumber(ev)
	}
	return ev, data
}

// renumber moves the sequence_number of the one event ev back by the
// stream's shift; it returns the event and its data.
func (cs *customStream) renumber(ev []byte) ([]byte, []byte) {
	data, _ := sse.EventData(ev)
	shift := cs.shift
	n := gjson.GetBytes(data, "sequence_number")
	if shift == 0 || n.Type != gjson.Number {
		return ev, data
	}
	nd, err := sjson.SetBytes(bytes.Clone(data), "sequence_number", n.Int()-shift)
	if err != nil {
		return ev, data
	}
	return sse.RebuildData(ev, nd), nd
}

// settledOutput gives the custom tool calls of response.output in data
// the inputs settled for them (see settle).
func (cs *customStream) settledOutput(data []byte) []byte {
	if len(cs.settled) == 0 {
		return data
	}
	type edit struct{ path, input string }
	var edits []edit
	gjson.GetBytes(data, "response.output").ForEach(func(k, it gjson.Result) bool {
		if it.Get("type").Str != "custom_tool_call" {
			return true
		}
		for _, s := range cs.settled {
			if s.itemID == it.Get("id").Str {
				edits = append(edits, edit{"response.output." + itoa(k.Int()) + ".input", s.input})
			}
		}
		return true
	})
	for _, e := range edits {
		if nd, err := sjson.SetBytes(data, e.path, e.input); err == nil {
			data = nd
		}
	}
	return data
}

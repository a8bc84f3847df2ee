package wire

import (
	"bytes"
	"io"
	"strings"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// Adapt rewrites what agents send that vLLM refuses or mishandles into
// what it accepts, leaving everything else byte for byte. Each rule is
// documented in docs/agents.md; body is not modified (a changed body is a
// new slice). custom names the Responses custom tools offered to vLLM as
// function tools (nil when there are none), whose calls the answer turns
// back into custom tool calls.
func Adapt(ep Endpoint, body []byte) (out []byte, custom CustomTools) {
	switch ep {
	case Chat:
		return adaptChat(body), nil
	case Responses:
		return adaptResponses(body)
	case Messages, CountTokens:
		return adaptMessages(body), nil
	}
	return body, nil
}

// vllmEffort maps a reasoning effort vLLM does not take (it takes low,
// medium and high) to the nearest it does; ok is false for the ones it
// takes (and for anything else, which vLLM's own error then names).
func vllmEffort(e string) (string, bool) {
	switch e {
	case "minimal", "none":
		return "low", true
	case "xhigh":
		return "high", true
	}
	return "", false
}

// adaptChat: chat requests (Codex's chat wire API sends
// reasoning_effort "xhigh").
func adaptChat(body []byte) []byte {
	if !bytes.Contains(body, []byte(`"reasoning_effort"`)) {
		return body // the usual request: not parsed
	}
	if e, ok := vllmEffort(gjson.GetBytes(body, "reasoning_effort").Str); ok {
		if b, err := sjson.SetBytes(body, "reasoning_effort", e); err == nil {
			return b
		}
	}
	return body
}

// adaptResponses: Responses API requests (Codex, the OpenAI Agents SDK).
func adaptResponses(body []byte) ([]byte, CustomTools) {
	root := gjson.ParseBytes(body)
	e := bodyEdit{out: body}
	// reasoning.effort beyond vLLM's low/medium/high.
	if eff, ok := vllmEffort(root.Get("reasoning.effort").Str); ok {
		e.set("reasoning.effort", eff)
	}
	extra := e.responsesInput(root)
	custom := e.responsesTools(root, extra)
	// tool_choice naming a custom tool names its function; so do the
	// tools of an allowed_tools choice. (Without custom tools there is
	// nothing to name, and the body is not read again.)
	if custom != nil {
		tc := root.Get("tool_choice")
		switch tc.Get("type").Str {
		case "custom":
			e.set("tool_choice.type", "function")
		case "allowed_tools":
			tc.Get("tools").ForEach(func(k, t gjson.Result) bool {
				if t.Get("type").Str == "custom" {
					e.set("tool_choice.tools."+itoa(k.Int())+".type", "function")
				}
				return true
			})
		}
	}
	return e.out, custom
}

// bodyEdit is a body being edited; a failed edit leaves it as it was.
type bodyEdit struct{ out []byte }

func (e *bodyEdit) set(path string, v any) {
	if b, err := sjson.SetBytes(e.out, path, v); err == nil {
		e.out = b
	}
}

func (e *bodyEdit) setRaw(path, raw string) {
	if b, err := sjson.SetRawBytes(e.out, path, []byte(raw)); err == nil {
		e.out = b
	}
}

// responsesInput adapts a Responses request's input items: items of type
// additional_tools bring their tools (returned, for tools); custom tool
// calls and their outputs, sent back, become the function calls the custom
// tools were offered as.
func (e *bodyEdit) responsesInput(root gjson.Result) (extra []gjson.Result) {
	var update string // a configuration_update item's reasoning effort
	input := root.Get("input")
	if !input.IsArray() {
		return nil
	}
	var items []string
	changed := false
	input.ForEach(func(_, it gjson.Result) bool {
		switch it.Get("type").Str {
		case "additional_tools":
			extra = append(extra, it.Get("tools").Array()...)
			changed = true
			return true
		case "configuration_update":
			// Codex's settings for the turns that follow (its reasoning
			// effort); not an item vLLM knows. The last one's effort
			// stands in for a request that names none.
			if eff := it.Get("reasoning.effort"); eff.Type == gjson.String {
				update = eff.Str
			}
			changed = true
			return true
		case "reasoning":
			if it.Get("encrypted_content").Exists() {
				// vLLM refuses encrypted reasoning (400); the summary
				// and content it keeps.
				b, _ := sjson.DeleteBytes([]byte(it.Raw), "encrypted_content")
				items = append(items, string(b))
				changed = true
				return true
			}
		case "custom_tool_call":
			items = append(items, customCallItem(it))
			changed = true
			return true
		case "custom_tool_call_output":
			items = append(items, customOutputItem(it))
			changed = true
			return true
		}
		items = append(items, it.Raw)
		return true
	})
	if changed {
		e.setRaw("input", "["+strings.Join(items, ",")+"]")
	}
	if update != "" && !root.Get("reasoning.effort").Exists() {
		if eff, ok := vllmEffort(update); ok {
			update = eff
		}
		e.set("reasoning.effort", update)
	}
	return extra
}

// responsesTools adapts the tools (with extra, those of additional_tools
// items): namespace groups are flattened into their tools; custom tools
// become function tools, whose names it returns; tools vLLM cannot run
// (web_search, local_shell, ...) are dropped.
func (e *bodyEdit) responsesTools(root gjson.Result, extra []gjson.Result) CustomTools {
	var custom CustomTools
	tools := root.Get("tools")
	if !tools.IsArray() && len(extra) == 0 {
		return nil
	}
	var kept []string
	changed := len(extra) > 0
	var add func(t gjson.Result)
	add = func(t gjson.Result) {
		switch t.Get("type").Str {
		case "function":
			kept = append(kept, t.Raw)
		case "custom":
			if name := t.Get("name"); name.Type == gjson.String && name.Str != "" {
				kept = append(kept, customFunction(t))
				custom = append(custom, name.Str)
			}
			changed = true
		case "namespace":
			changed = true
			t.Get("tools").ForEach(func(_, in gjson.Result) bool { add(in); return true })
		default:
			changed = true // dropped
		}
	}
	for _, t := range append(tools.Array(), extra...) {
		add(t)
	}
	if changed {
		if len(kept) == 0 {
			if b, err := sjson.DeleteBytes(e.out, "tools"); err == nil {
				e.out = b
			}
		} else {
			e.setRaw("tools", "["+strings.Join(kept, ",")+"]")
		}
	}
	return custom
}

// CustomTools are the names of the custom tools of a Responses request,
// offered to vLLM as function tools (see customFunction). A request has a
// few at most (Codex: apply_patch), so a list is the cheapest set.
type CustomTools []string

func (c CustomTools) Has(name string) bool {
	for _, n := range c {
		if n == name {
			return true
		}
	}
	return false
}

// customFunction is the function tool a Responses custom tool is offered
// to vLLM as: one required string parameter, input, which carries the
// tool's free-form input; the tool's description and its grammar, if it
// has one, are in the function's description. vLLM does not constrain a
// tool's arguments to a grammar: the model is asked to follow it.
func customFunction(t gjson.Result) string {
	var d strings.Builder
	if s := t.Get("description").Str; s != "" {
		d.WriteString(s)
		d.WriteString("\n\n")
	}
	d.WriteString("This tool takes free-form text, not JSON: put the whole text in the string parameter `input`.")
	if f := t.Get("format"); f.Get("type").Str == "grammar" {
		syntax := f.Get("syntax").Str
		if syntax == "" {
			syntax = "lark"
		}
		d.WriteString(" The input must follow this " + syntax + " grammar exactly; text outside the grammar is invalid:\n")
		d.WriteString(f.Get("definition").Str)
	}
	fn := `{"type":"function","name":"","description":"","parameters":{"type":"object","properties":{"input":{"type":"string","description":"The tool's whole input."}},"required":["input"],"additionalProperties":false}}`
	fn, _ = sjson.Set(fn, "name", t.Get("name").Str)
	fn, _ = sjson.Set(fn, "description", d.String())
	return fn
}

// customCallItem is the function_call input item for a custom_tool_call
// one: arguments {"input": <its input>}.
func customCallItem(it gjson.Result) string {
	out := `{"type":"function_call"}`
	for _, k := range [...]string{"id", "call_id", "name", "status"} {
		if v := it.Get(k); v.Exists() {
			out, _ = sjson.SetRaw(out, k, v.Raw)
		}
	}
	args, _ := sjson.Set(`{}`, "input", it.Get("input").Str)
	out, _ = sjson.Set(out, "arguments", args)
	return out
}

// customOutputItem is the function_call_output input item for a
// custom_tool_call_output one (same call_id and output).
func customOutputItem(it gjson.Result) string {
	out := `{"type":"function_call_output"}`
	for _, k := range [...]string{"id", "call_id", "output", "status"} {
		if v := it.Get(k); v.Exists() {
			out, _ = sjson.SetRaw(out, k, v.Raw)
		}
	}
	return out
}

// adaptMessages: Anthropic Messages requests (Claude Code).
func adaptMessages(body []byte) []byte {
	root := gjson.ParseBytes(body)
	out := body
	setRaw := func(path, raw string) {
		if b, err := sjson.SetRawBytes(out, path, []byte(raw)); err == nil {
			out = b
		}
	}
	// System text: blocks as a list (a string becomes one text block when
	// system messages are merged into it); the billing header block Claude
	// Code adds changes every request and defeats vLLM's prefix cache.
	var system []string
	sys := root.Get("system")
	sysChanged := false
	switch {
	case sys.Type == gjson.String:
		b, _ := sjson.SetBytes([]byte(`{"type":"text"}`), "text", sys.Str)
		system = append(system, string(b))
	case sys.IsArray():
		sys.ForEach(func(_, b gjson.Result) bool {
			if strings.HasPrefix(b.Get("text").Str, "x-anthropic-billing-header") {
				sysChanged = true
				return true
			}
			system = append(system, b.Raw)
			return true
		})
	}
	// Messages: a role "system" message (older vLLM refuses it) joins the
	// system blocks; redacted_thinking blocks (older vLLM refuses them)
	// are dropped; a tool_result also carries its tool_use_id as id (older
	// vLLM reads that).
	var msgs []string
	msgsChanged := false
	root.Get("messages").ForEach(func(_, m gjson.Result) bool {
		if m.Get("role").Str == "system" {
			c := m.Get("content")
			if c.Type == gjson.String {
				b, _ := sjson.SetBytes([]byte(`{"type":"text"}`), "text", c.Str)
				system = append(system, string(b))
			} else {
				c.ForEach(func(_, b gjson.Result) bool { system = append(system, b.Raw); return true })
			}
			msgsChanged, sysChanged = true, true
			return true
		}
		c := m.Get("content")
		if !c.IsArray() {
			msgs = append(msgs, m.Raw)
			return true
		}
		var blocks []string
		changed := false
		c.ForEach(func(_, b gjson.Result) bool {
			switch b.Get("type").Str {
			case "redacted_thinking":
				changed = true
				return true
			case "tool_result":
				if id := b.Get("tool_use_id"); id.Exists() && !b.Get("id").Exists() {
					nb, _ := sjson.SetBytes([]byte(b.Raw), "id", id.Str)
					blocks = append(blocks, string(nb))
					changed = true
					return true
				}
			}
			blocks = append(blocks, b.Raw)
			return true
		})
		if !changed {
			msgs = append(msgs, m.Raw)
			return true
		}
		nm, _ := sjson.SetRawBytes([]byte(m.Raw), "content", []byte("["+strings.Join(blocks, ",")+"]"))
		msgs = append(msgs, string(nm))
		msgsChanged = true
		return true
	})
	if msgsChanged {
		setRaw("messages", "["+strings.Join(msgs, ",")+"]")
	}
	if sysChanged {
		setRaw("system", "["+strings.Join(system, ",")+"]")
	}
	return out
}

// AnthropicError turns a replica's error answer on an Anthropic endpoint
// into Anthropic's shape (vLLM answers some errors there, such as request
// validation, in OpenAI's).
func AnthropicError(status int, body []byte) []byte {
	if gjson.GetBytes(body, "type").Str == "error" && gjson.GetBytes(body, "error.type").Str != "" &&
		strings.HasSuffix(gjson.GetBytes(body, "error.type").Str, "_error") {
		return body
	}
	msg := ReadErrorMessage(bytes.NewReader(body))
	if msg == "" {
		msg = "the replica answered " + itoa(int64(status))
	}
	return (&APIError{Status: status, Message: msg}).AnthropicBody()
}

// MinFitAnswer is the shortest answer length FitAnswer lowers a request to.
const MinFitAnswer = 1024

// FitAnswer lowers the answer length a request asks for (max_tokens,
// max_completion_tokens, max_output_tokens) when it cannot fit beside the
// prompt in the pool's context (max_model_len): vLLM refuses such a
// request (400), and Claude Code asks for 32,000-64,000 tokens whatever
// the model. The prompt is over-estimated (three bytes of JSON a token)
// so the lowered length fits. It returns body unchanged when nothing
// needs lowering.
func FitAnswer(body []byte, promptBytes, maxModelLen int) []byte {
	if maxModelLen <= 0 {
		return body
	}
	room := maxModelLen - (promptBytes+2)/3
	if room < MinFitAnswer {
		// The estimate leaves next to nothing (a large prompt, or one
		// whose bytes are not text, such as an image): vLLM's own answer
		// says more than a cut to a few tokens would.
		return body
	}
	for _, k := range [...]string{"max_tokens", "max_completion_tokens", "max_output_tokens"} {
		v := gjson.GetBytes(body, k)
		if v.Type != gjson.Number || v.Int() <= int64(room) {
			continue
		}
		if out, err := sjson.SetBytes(body, k, room); err == nil {
			body = out
		}
	}
	return body
}

// ReadErrorMessage reads a replica's error body (bounded) for the message.
func ReadErrorMessage(body io.Reader) string {
	b, _ := io.ReadAll(io.LimitReader(body, 16<<10))
	// A replica's message may quote the request (vLLM's validation
	// errors do): it is cut like any echoed client string, with more room.
	if !CheckDepth(b, DefaultMaxDepth) {
		return ClipN(strings.TrimSpace(string(b)), maxReplicaEcho)
	}
	if m := gjson.GetBytes(b, "error.message"); m.Exists() {
		return ClipN(m.String(), maxReplicaEcho)
	}
	if m := gjson.GetBytes(b, "message"); m.Exists() {
		return ClipN(m.String(), maxReplicaEcho)
	}
	return ClipN(strings.TrimSpace(string(b)), maxReplicaEcho)
}

package translate

import (
	"encoding/json"
	"fmt"

	"github.com/tidwall/gjson"
)

// ResponsesToChat turns an OpenAI Responses request body into the chat
// completions body whose messages and tools are those vLLM's Responses
// serving renders (OpenAIServingResponses._make_request: instructions and
// input through construct_input_messages, tools through
// construct_tool_dicts), with its sampling fields
// (ResponsesRequest.to_sampling_params) and reasoning effort
// (ResponsesRequest.build_chat_params).
//
// Refused: history the replica holds (previous_response_id, conversation,
// previous_response, previous_input_messages), prompt templates (vLLM
// refuses them), tools and input items vLLM does not convert, and a final
// partial message (vLLM then continues that message itself, see
// should_continue_final_message, and the caller's continuation would be a
// second one).
func ResponsesToChat(body []byte) ([]byte, error) {
	root, err := parseRoot("responses", body)
	if err != nil {
		return nil, err
	}
	for _, k := range []string{"previous_response_id", "conversation", "previous_response", "previous_input_messages"} {
		if present(root.Get(k)) {
			return nil, refusef("responses request: %s: the conversation is held by the replica", k)
		}
	}
	if present(root.Get("prompt")) {
		return nil, refusef("responses request: prompt: a stored prompt template")
	}

	msgs := []*chatMessage{} // never null: chat needs a list
	// construct_input_messages: instructions first, when not empty.
	if in := root.Get("instructions"); present(in) {
		if in.Type != gjson.String {
			return nil, refusef("responses request: instructions: not a string")
		}
		if in.Str != "" {
			msgs = append(msgs, &chatMessage{role: "system", content: in.Str})
		}
	}
	input := root.Get("input")
	switch {
	case input.Type == gjson.String:
		msgs = append(msgs, &chatMessage{role: "user", content: input.Str})
	case input.IsArray():
		items, err := responsesItems(input)
		if err != nil {
			return nil, fmt.Errorf("responses request: %w", err)
		}
		msgs = append(msgs, items...)
	default:
		return nil, refusef("responses request: input: neither a string nor a list of items")
	}

	req := object{}
	if m := root.Get("model"); present(m) {
		if m.Type != gjson.String {
			return nil, refusef("responses request: model: not a string")
		}
		req = append(req, field{"model", m.Str})
	}
	req = append(req, field{"messages", msgs})
	for _, f := range []struct {
		key, as, what string
		ok            func(gjson.Result) bool
	}{
		{"max_output_tokens", "max_tokens", "an integer", isInteger},
		{"temperature", "temperature", "a number", isNumber},
		{"top_p", "top_p", "a number", isNumber},
		{"top_k", "top_k", "an integer", isInteger},
		{"stop", "stop", "a string or a list of strings", isStringOrList},
		{"seed", "seed", "an integer", isInteger},
		{"repetition_penalty", "repetition_penalty", "a number", isNumber},
	} {
		if err := optional(&req, root, f.key, f.as, f.what, f.ok); err != nil {
			return nil, fmt.Errorf("responses request: %w", err)
		}
	}
	// build_chat_params: reasoning.effort is the template's
	// reasoning_effort, which chat's reasoning_effort also sets.
	if r := root.Get("reasoning"); present(r) {
		if !r.IsObject() {
			return nil, refusef("responses request: reasoning: not an object")
		}
		if e := r.Get("effort"); present(e) {
			if e.Type != gjson.String {
				return nil, refusef("responses request: reasoning.effort: not a string")
			}
			req = append(req, field{"reasoning_effort", e.Str})
		}
	}
	if req, err = responsesFormat(root, req); err != nil {
		return nil, err
	}
	if req, err = responsesTools(root, req); err != nil {
		return nil, err
	}
	return json.Marshal(append(req, streamFields()...))
}

// responsesFormat mirrors the text.format part of to_sampling_params: a
// json_schema format with a schema constrains the output to that schema
// (chat's json_schema response_format is the same constraint); text and
// json_object formats vLLM ignores.
func responsesFormat(root gjson.Result, req object) (object, error) {
	f := root.Get("text.format")
	if !present(f) {
		return req, nil
	}
	if !f.IsObject() {
		return nil, refusef("responses request: text.format: not an object")
	}
	s := f.Get("schema")
	if f.Get("type").Str != "json_schema" || !present(s) {
		return req, nil
	}
	if present(root.Get("structured_outputs")) {
		return nil, refusef("responses request: both structured_outputs and text.format (vLLM refuses it)")
	}
	name := "json_schema"
	if n := f.Get("name"); n.Type == gjson.String && n.Str != "" {
		name = n.Str
	}
	return append(req, field{"response_format", object{
		{"type", "json_schema"},
		{"json_schema", object{{"name", name}, {"schema", raw(s)}}},
	}}), nil
}

// responsesItems mirrors construct_chat_messages_with_tool_call and
// _construct_message_from_response_item: function calls, reasoning and
// assistant text join the assistant message just before them when it has
// no such key yet (tool calls always join it); function call outputs are
// tool messages; other messages are carried with their parts.
func responsesItems(items gjson.Result) ([]*chatMessage, error) {
	list := items.Array()
	if n := len(list); n > 0 {
		// should_continue_final_message
		last := list[n-1]
		t := last.Get("type").Str
		if !last.Get("type").Exists() {
			t = "message"
		}
		if st := last.Get("status").Str; (t == "message" || t == "reasoning") && (st == "in_progress" || st == "incomplete") {
			return nil, refusef("input[%d]: a partial %s that vLLM continues itself", n-1, t)
		}
	}
	var out []*chatMessage
	for i, it := range list {
		if !it.IsObject() {
			return nil, refusef("input[%d]: not an object", i)
		}
		var prev *chatMessage
		if len(out) > 0 && out[len(out)-1].role == "assistant" {
			prev = out[len(out)-1]
		}
		typ := it.Get("type")
		t := typ.Str
		if !typ.Exists() && it.Get("role").Exists() {
			t = "message" // EasyInputMessageParam
		}
		m, err := responsesItem(t, it, prev)
		if err != nil {
			return nil, fmt.Errorf("input[%d]: %w", i, err)
		}
		if m != nil {
			out = append(out, m)
		}
	}
	return out, nil
}

// responsesItem converts one input item; nil when it joined prev.
func responsesItem(t string, it gjson.Result, prev *chatMessage) (*chatMessage, error) {
	switch t {
	case "function_call":
		// A function_call becomes a ResponseFunctionToolCall
		// (ResponsesRequest.function_call_parsing), whose name is
		// namespace__name when it has a namespace.
		for _, k := range []string{"call_id", "name", "arguments"} {
			if it.Get(k).Type != gjson.String {
				return nil, refusef("function_call %s: not a string", k)
			}
		}
		name := it.Get("name").Str
		if ns := it.Get("namespace"); present(ns) && ns.Str != "" {
			name = flatNamespaceName(ns.Str, name)
		}
		tc := object{
			{"id", it.Get("call_id").Str},
			{"type", "function"},
			{"function", object{{"name", name}, {"arguments", it.Get("arguments").Str}}},
		}
		if prev != nil {
			prev.toolCalls = append(prev.toolCalls, tc)
			return nil, nil
		}
		return &chatMessage{role: "assistant", toolCalls: []object{tc}}, nil
	case "function_call_output":
		id := it.Get("call_id")
		if id.Type != gjson.String {
			return nil, refusef("function_call_output call_id: not a string")
		}
		content, err := responsesContent(it.Get("output"))
		if err != nil {
			return nil, fmt.Errorf("function_call_output output: %w", err)
		}
		return &chatMessage{role: "tool", content: content, toolCallID: &id.Str}, nil
	case "reasoning":
		// The first content text, else the first summary text. An
		// encrypted_content is not read (Adapt strips it: vLLM refuses
		// it).
		text, err := firstText(it.Get("content"))
		if err != nil {
			return nil, fmt.Errorf("reasoning content: %w", err)
		}
		if !nonEmptyList(it.Get("content")) {
			if text, err = firstText(it.Get("summary")); err != nil {
				return nil, fmt.Errorf("reasoning summary: %w", err)
			}
		}
		if prev != nil && prev.reasoning == nil {
			prev.reasoning = &text
			return nil, nil
		}
		return &chatMessage{role: "assistant", reasoning: &text}, nil
	case "message":
		role := it.Get("role").Str
		switch role {
		case "assistant":
			// Only the first part's text is kept.
			c := it.Get("content")
			text := ""
			switch {
			case c.Type == gjson.String:
				text = c.Str
			case c.IsArray():
				var err error
				if text, err = firstText(c); err != nil {
					return nil, fmt.Errorf("assistant message content: %w", err)
				}
			case present(c):
				return nil, refusef("assistant message content: neither a string nor a list")
			}
			if prev != nil && prev.content == nil {
				prev.content = text
				return nil, nil
			}
			return &chatMessage{role: "assistant", content: text}, nil
		case "user", "system", "developer":
			content, err := responsesContent(it.Get("content"))
			if err != nil {
				return nil, fmt.Errorf("%s message content: %w", role, err)
			}
			return &chatMessage{role: role, content: content}, nil
		}
		return nil, refusef("message role %q is not user, assistant, system or developer", role)
	}
	return nil, refusef("item type %q is not one vLLM converts", t)
}

// flatNamespaceName mirrors flat_namespace_tool_name.
func flatNamespaceName(ns, name string) string { return ns + "__" + name }

func nonEmptyList(r gjson.Result) bool { return r.IsArray() && len(r.Array()) > 0 }

// firstText is the text of a list's first element, as vLLM reads it from
// a dict item: a part's "text" (empty when it has none) or a bare string;
// empty for an empty or absent list. A first part with a non-text payload
// (a refusal) is refused: vLLM's two readings of it disagree.
func firstText(list gjson.Result) (string, error) {
	if !present(list) {
		return "", nil
	}
	if !list.IsArray() {
		return "", refusef("not a list")
	}
	a := list.Array()
	if len(a) == 0 {
		return "", nil
	}
	switch f := a[0]; {
	case f.Type == gjson.String:
		return f.Str, nil
	case f.IsObject():
		t := f.Get("text")
		if !t.Exists() && f.Get("type").Str == "refusal" {
			return "", refusef("first part is a refusal")
		}
		if t.Exists() && t.Type != gjson.String {
			return "", refusef("first part's text: not a string")
		}
		return t.Str, nil
	}
	return "", refusef("first element is neither a string nor a part")
}

// responsesContent carries a user, system, developer or tool content: a
// string as it is, parts as the chat parts chat_utils reads them as
// (input_text and output_text are text parts; an input_image's image_url
// is the image_url part's url).
func responsesContent(c gjson.Result) (any, error) {
	if c.Type == gjson.String {
		return c.Str, nil
	}
	if !c.IsArray() {
		return nil, refusef("neither a string nor a list of parts")
	}
	parts := []object{}
	for k, p := range c.Array() {
		switch p.Get("type").Str {
		case "input_text", "output_text", "text":
			t := p.Get("text")
			if t.Type != gjson.String {
				return nil, refusef("part %d: text: not a string", k)
			}
			parts = append(parts, object{{"type", "text"}, {"text", t.Str}})
		case "input_image":
			u := p.Get("image_url")
			if u.Type != gjson.String || u.Str == "" {
				return nil, refusef("part %d: input_image without an image_url (a file_id is not carried)", k)
			}
			parts = append(parts, object{{"type", "image_url"}, {"image_url", object{{"url", u.Str}}}})
		default:
			return nil, refusef("part %d: type %q is not one vLLM converts", k, p.Get("type").Str)
		}
	}
	return parts, nil
}

// responsesTools mirrors construct_tool_dicts and
// iter_response_function_tool_dicts: each function tool (and each
// function of a namespace, named namespace__name) becomes a chat function
// with every member but type, the members FunctionTool always dumps
// (description, parameters, strict) null when not given. Other tool types
// are refused. tool_choice auto, none and required carry over; a named
// function becomes chat's named form.
func responsesTools(root gjson.Result, req object) (object, error) {
	var list []object
	tools := root.Get("tools")
	if present(tools) {
		if !tools.IsArray() {
			return nil, refusef("responses request: tools: not a list")
		}
		for i, t := range tools.Array() {
			switch t.Get("type").Str {
			case "function":
				fn, err := responsesFunction(t, "")
				if err != nil {
					return nil, fmt.Errorf("responses request: tools[%d]: %w", i, err)
				}
				list = append(list, object{{"type", "function"}, {"function", fn}})
			case "namespace":
				ns := t.Get("name")
				if ns.Type != gjson.String {
					return nil, refusef("responses request: tools[%d]: namespace name: not a string", i)
				}
				for j, in := range t.Get("tools").Array() {
					if in.Get("type").Str != "function" {
						continue
					}
					fn, err := responsesFunction(in, ns.Str)
					if err != nil {
						return nil, fmt.Errorf("responses request: tools[%d].tools[%d]: %w", i, j, err)
					}
					list = append(list, object{{"type", "function"}, {"function", fn}})
				}
			default:
				return nil, refusef("responses request: tools[%d]: type %q is not one vLLM converts", i, t.Get("type").Str)
			}
		}
	}
	var choice any = "auto"
	if tc := root.Get("tool_choice"); present(tc) {
		switch {
		case tc.Type == gjson.String && (tc.Str == "auto" || tc.Str == "none" || tc.Str == "required"):
			choice = tc.Str
		case tc.IsObject() && tc.Get("type").Str == "function" && tc.Get("name").Type == gjson.String:
			choice = object{{"type", "function"}, {"function", object{{"name", tc.Get("name").Str}}}}
		default:
			return nil, refusef("responses request: tool_choice %s is not one carried over", tc.Raw)
		}
	}
	if len(list) == 0 {
		// No tools: vLLM renders none; chat takes a tool_choice only with
		// tools, and forcing a call with no tools is an error either way.
		if choice != "auto" && choice != "none" {
			return nil, refusef("responses request: tool_choice %s without tools", root.Get("tool_choice").Raw)
		}
		return req, nil
	}
	return append(req, field{"tool_choice", choice}, field{"tools", list}), nil
}

// responsesFunction is a Responses function tool as a chat function
// definition: name first (namespace__name inside a namespace), then
// description, parameters and strict, then the tool's other members in
// their order.
func responsesFunction(t gjson.Result, ns string) (object, error) {
	if !t.IsObject() {
		return nil, refusef("not an object")
	}
	name := t.Get("name")
	if name.Type != gjson.String {
		return nil, refusef("name: not a string")
	}
	if p := t.Get("parameters"); present(p) && !p.IsObject() {
		return nil, refusef("parameters: not an object")
	}
	if d := t.Get("description"); present(d) && d.Type != gjson.String {
		return nil, refusef("description: not a string")
	}
	n := name.Str
	if ns != "" {
		n = flatNamespaceName(ns, n)
	}
	fn := object{
		{"name", n},
		{"description", nullable(t.Get("description"))},
		{"parameters", nullable(t.Get("parameters"))},
		{"strict", nullable(t.Get("strict"))},
	}
	for _, m := range members(t) {
		switch m.key {
		case "type", "name", "description", "parameters", "strict":
			continue
		}
		fn = append(fn, field{m.key, raw(m.val.(gjson.Result))})
	}
	return fn, nil
}

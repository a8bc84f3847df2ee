package translate

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/tidwall/gjson"
)

// anthropicBlockTypes are the content block types vLLM's
// AnthropicContentBlock accepts; any other fails its validation.
var anthropicBlockTypes = map[string]bool{
	"text": true, "image": true, "tool_use": true, "tool_result": true,
	"tool_reference": true, "thinking": true, "redacted_thinking": true,
}

// MessagesToChat turns an Anthropic Messages request body into the chat
// completions body vLLM builds from it, mirroring
// AnthropicServingMessages._convert_anthropic_to_openai_request: system
// text first, then the messages, the sampling fields, output_config, tool
// choice and tools. thinking, metadata and kv_transfer_params are not
// carried (vLLM reads neither of the first two; transfer parameters name
// the dead replica's KV cache).
func MessagesToChat(body []byte) ([]byte, error) {
	root, err := parseRoot("messages", body)
	if err != nil {
		return nil, err
	}
	model := root.Get("model")
	if model.Type != gjson.String || model.Str == "" {
		return nil, refusef("messages request: model: not a non-empty string")
	}
	msgs := root.Get("messages")
	if !msgs.IsArray() {
		return nil, refusef("messages request: messages: not a list")
	}

	out := []*chatMessage{} // never null: chat needs a list
	system, err := anthropicSystem(root)
	if err != nil {
		return nil, err
	}
	if system != nil {
		out = append(out, &chatMessage{role: "system", content: *system})
	}
	if out, err = anthropicMessages(msgs, out); err != nil {
		return nil, err
	}

	req := object{{"model", model.Str}, {"messages", out}}
	// _build_base_request: vLLM sets max_tokens and max_completion_tokens
	// to the same value; max_tokens alone says the same.
	for _, f := range []struct {
		key, as, what string
		ok            func(gjson.Result) bool
	}{
		{"max_tokens", "max_tokens", "an integer", isInteger},
		{"stop_sequences", "stop", "a list of strings", isStringList},
		{"temperature", "temperature", "a number", isNumber},
		{"top_p", "top_p", "a number", isNumber},
		{"top_k", "top_k", "an integer", isInteger},
		{"chat_template_kwargs", "chat_template_kwargs", "an object", gjson.Result.IsObject},
	} {
		if err := optional(&req, root, f.key, f.as, f.what, f.ok); err != nil {
			return nil, fmt.Errorf("messages request: %w", err)
		}
	}
	if req, err = anthropicOutputConfig(root, req); err != nil {
		return nil, err
	}
	if req, err = anthropicTools(root, req); err != nil {
		return nil, err
	}
	return json.Marshal(append(req, streamFields()...))
}

// anthropicSystem mirrors _convert_system_message: the top-level system
// (a string, or its non-empty text blocks), then every role "system"
// message of the list, joined with nothing between. A text block starting
// with "x-anthropic-billing-header" (Claude Code's per-request hash) is
// dropped. nil when there is no system text.
func anthropicSystem(root gjson.Result) (*string, error) {
	var parts []string
	found := false
	add := func(where string, c gjson.Result) error {
		switch {
		case c.Type == gjson.String:
			parts, found = append(parts, c.Str), true
		case c.IsArray():
			for i, b := range c.Array() {
				if err := checkAnthropicBlock(b); err != nil {
					return fmt.Errorf("messages request: %s[%d]: %w", where, i, err)
				}
				if b.Get("type").Str != "text" || b.Get("text").Str == "" {
					continue
				}
				if strings.HasPrefix(b.Get("text").Str, "x-anthropic-billing-header") {
					continue
				}
				parts, found = append(parts, b.Get("text").Str), true
			}
		case present(c):
			return refusef("messages request: %s: neither a string nor a list of blocks", where)
		}
		return nil
	}
	// The top-level system counts only when truthy: an empty string or
	// list adds nothing (found stays false for "" alone, like vLLM).
	if sys := root.Get("system"); present(sys) && !(sys.Type == gjson.String && sys.Str == "") {
		if err := add("system", sys); err != nil {
			return nil, err
		}
	}
	for i, m := range root.Get("messages").Array() {
		if anthropicRole(m.Get("role").Str) == "system" {
			if err := add(fmt.Sprintf("messages[%d].content", i), m.Get("content")); err != nil {
				return nil, err
			}
		}
	}
	if !found {
		return nil, nil
	}
	// vLLM appends the system message only when system_parts is non-empty;
	// a list holding just "" (a system message with content "") counts.
	s := strings.Join(parts, "")
	return &s, nil
}

// anthropicRole mirrors AnthropicMessage.normalize_role: Claude Code's
// "ctx" and "msg" roles are user turns.
func anthropicRole(r string) string {
	if r == "ctx" || r == "msg" {
		return "user"
	}
	return r
}

// checkAnthropicBlock refuses what vLLM's AnthropicContentBlock would not
// validate: an unknown type, or a known field of the wrong JSON type.
func checkAnthropicBlock(b gjson.Result) error {
	if !b.IsObject() {
		return refusef("not a content block")
	}
	t := b.Get("type")
	if t.Type != gjson.String || !anthropicBlockTypes[t.Str] {
		return refusef("block type %q is not one vLLM converts", t.Str)
	}
	for _, k := range []string{"text", "id", "tool_use_id", "name", "tool_name", "thinking", "signature", "data"} {
		if v := b.Get(k); present(v) && v.Type != gjson.String {
			return refusef("block %s: not a string", k)
		}
	}
	for _, k := range []string{"source", "input"} {
		if v := b.Get(k); present(v) && !v.IsObject() {
			return refusef("block %s: not an object", k)
		}
	}
	if c := b.Get("content"); present(c) && c.Type != gjson.String {
		if !c.IsArray() {
			return refusef("block content: neither a string nor a list")
		}
		for _, it := range c.Array() {
			if !it.IsObject() {
				return refusef("block content: an item is not an object")
			}
		}
	}
	return nil
}

// anthropicMessages mirrors _convert_messages: role "system" messages were
// folded into the system text; a string content is the message's content;
// blocks go through _convert_message_content. A user message left without
// content (only tool results) is not sent; an assistant one always is.
func anthropicMessages(msgs gjson.Result, out []*chatMessage) ([]*chatMessage, error) {
	for i, m := range msgs.Array() {
		if !m.IsObject() {
			return nil, refusef("messages request: messages[%d]: not an object", i)
		}
		role := anthropicRole(m.Get("role").Str)
		switch role {
		case "system":
			continue
		case "user", "assistant":
		default:
			return nil, refusef("messages request: messages[%d]: role %q is not user, assistant or system", i, m.Get("role").Str)
		}
		msg := &chatMessage{role: role}
		c := m.Get("content")
		switch {
		case c.Type == gjson.String:
			msg.content = c.Str
		case c.IsArray():
			var err error
			if out, err = anthropicContent(c, msg, out); err != nil {
				return nil, fmt.Errorf("messages request: messages[%d]: %w", i, err)
			}
		default:
			return nil, refusef("messages request: messages[%d]: content: neither a string nor a list of blocks", i)
		}
		if role == "user" && msg.content == nil {
			continue
		}
		out = append(out, msg)
	}
	return out, nil
}

// anthropicContent mirrors _convert_message_content and _convert_block:
// text and image blocks become content parts (one lone text part becomes
// a plain string), thinking blocks the message's reasoning, tool_use
// blocks its tool_calls; a user's tool_result blocks become tool messages
// placed before the message itself; redacted_thinking and tool_reference
// blocks are skipped.
func anthropicContent(blocks gjson.Result, msg *chatMessage, out []*chatMessage) ([]*chatMessage, error) {
	var parts []object
	var reasoning []string
	hasReasoning := false
	for j, b := range blocks.Array() {
		if err := checkAnthropicBlock(b); err != nil {
			return nil, fmt.Errorf("content[%d]: %w", j, err)
		}
		switch b.Get("type").Str {
		case "text":
			if t := b.Get("text").Str; t != "" {
				parts = append(parts, object{{"type", "text"}, {"text", t}})
			}
		case "image":
			src := b.Get("source")
			if !src.IsObject() || len(src.Map()) == 0 {
				continue
			}
			url, err := anthropicImageURL(src)
			if err != nil {
				return nil, fmt.Errorf("content[%d]: %w", j, err)
			}
			parts = append(parts, object{{"type", "image_url"}, {"image_url", object{{"url", url}}}})
		case "thinking":
			if t := b.Get("thinking"); present(t) {
				reasoning, hasReasoning = append(reasoning, t.Str), true
			}
		case "tool_use":
			tc, err := anthropicToolUse(b)
			if err != nil {
				return nil, fmt.Errorf("content[%d]: %w", j, err)
			}
			msg.toolCalls = append(msg.toolCalls, tc)
		case "tool_result":
			if msg.role == "user" {
				var err error
				if out, err = anthropicUserToolResult(b, out); err != nil {
					return nil, fmt.Errorf("content[%d]: %w", j, err)
				}
				continue
			}
			// _convert_tool_result_block: in an assistant message vLLM
			// writes the result as text with Python's str(); for a list
			// that is Python's repr, which is not mirrored.
			c := b.Get("content")
			text := ""
			switch {
			case c.Type == gjson.String:
				text = c.Str
			case c.IsArray() && len(c.Array()) > 0:
				return nil, refusef("content[%d]: an assistant's tool_result with a list content (vLLM renders it as Python repr)", j)
			}
			parts = append(parts, object{{"type", "text"}, {"text", "Tool result: " + text}})
		}
	}
	if hasReasoning {
		r := strings.Join(reasoning, "")
		msg.reasoning = &r
	}
	switch {
	case len(parts) == 1 && parts[0][0].val == "text":
		msg.content = parts[0][1].val
	case len(parts) > 0:
		msg.content = parts
	}
	return out, nil
}

// anthropicImageURL mirrors _convert_image_source_to_url: a "url" source
// is its url; anything else is a base64 data URI (media type image/jpeg
// when not given).
func anthropicImageURL(src gjson.Result) (string, error) {
	str := func(k, def string) (string, error) {
		v := src.Get(k)
		if !v.Exists() {
			return def, nil
		}
		if v.Type != gjson.String {
			return "", refusef("image source %s: not a string", k)
		}
		return v.Str, nil
	}
	if t := src.Get("type"); t.Type == gjson.String && t.Str == "url" {
		return str("url", "")
	}
	mt, err := str("media_type", "image/jpeg")
	if err != nil {
		return "", err
	}
	data, err := str("data", "")
	if err != nil {
		return "", err
	}
	return "data:" + mt + ";base64," + data, nil
}

// anthropicToolUse mirrors _convert_tool_use_block: the arguments are the
// input as Python's json.dumps writes it. A block without an id is
// refused: vLLM names it call_<unix seconds>, which cannot be reproduced.
func anthropicToolUse(b gjson.Result) (object, error) {
	id := b.Get("id").Str
	if id == "" {
		return nil, refusef("tool_use without an id (vLLM names it by the clock)")
	}
	args := "{}"
	if in := b.Get("input"); in.IsObject() {
		args = pyJSONDumps(in)
	}
	return object{
		{"id", id},
		{"type", "function"},
		{"function", object{{"name", b.Get("name").Str}, {"arguments", args}}},
	}, nil
}

// anthropicUserToolResult mirrors _convert_user_tool_result: a tool
// message with the result's text (text items joined by newlines), then a
// user message with its images, then a tool message with its tool
// references.
func anthropicUserToolResult(b gjson.Result, out []*chatMessage) ([]*chatMessage, error) {
	var text string
	var images []string
	var refs []object
	c := b.Get("content")
	switch {
	case c.Type == gjson.String:
		text = c.Str
	case c.IsArray():
		var texts []string
		for k, it := range c.Array() {
			switch it.Get("type").Str {
			case "text":
				t := it.Get("text")
				if t.Exists() && t.Type != gjson.String {
					return nil, refusef("tool_result content[%d].text: not a string", k)
				}
				texts = append(texts, t.Str)
			case "image":
				src := it.Get("source")
				if src.Exists() && !src.IsObject() {
					return nil, refusef("tool_result content[%d].source: not an object", k)
				}
				url, err := anthropicImageURL(src)
				if err != nil {
					return nil, fmt.Errorf("tool_result content[%d]: %w", k, err)
				}
				if url != "" {
					images = append(images, url)
				}
			case "tool_reference":
				name := it.Get("tool_name")
				if !present(name) || name.Str == "" {
					name = it.Get("name")
				}
				if present(name) && name.Type != gjson.String {
					return nil, refusef("tool_result content[%d]: tool reference name: not a string", k)
				}
				if name.Str != "" {
					refs = append(refs, object{{"type", "tool_reference"}, {"name", name.Str}})
				}
			}
		}
		text = strings.Join(texts, "\n")
	}
	id := b.Get("tool_use_id").Str
	out = append(out, &chatMessage{role: "tool", toolCallID: &id, content: text})
	if len(images) > 0 {
		parts := make([]object, len(images))
		for i, u := range images {
			parts[i] = object{{"type", "image_url"}, {"image_url", object{{"url", u}}}}
		}
		out = append(out, &chatMessage{role: "user", content: parts})
	}
	if len(refs) > 0 {
		out = append(out, &chatMessage{role: "tool", toolCallID: &id, content: refs})
	}
	return out, nil
}

// anthropicEfforts are the values of vLLM's AnthropicOutputConfig.effort.
var anthropicEfforts = map[string]bool{"low": true, "medium": true, "high": true, "xhigh": true, "max": true}

// anthropicOutputConfig mirrors _handle_output_config: a non-empty
// format.schema becomes a json_schema response_format named "json_schema",
// and effort becomes reasoning_effort.
func anthropicOutputConfig(root gjson.Result, req object) (object, error) {
	oc := root.Get("output_config")
	if !present(oc) {
		return req, nil
	}
	if !oc.IsObject() {
		return nil, refusef("messages request: output_config: not an object")
	}
	if f := oc.Get("format"); present(f) {
		if !f.IsObject() {
			return nil, refusef("messages request: output_config.format: not an object")
		}
		if t := f.Get("type"); present(t) && t.Str != "json_schema" {
			return nil, refusef("messages request: output_config.format.type %q is not json_schema", t.Str)
		}
		s := f.Get("schema")
		if present(s) && !s.IsObject() {
			return nil, refusef("messages request: output_config.format.schema: not an object")
		}
		if s.IsObject() && len(s.Map()) > 0 {
			req = append(req, field{"response_format", object{
				{"type", "json_schema"},
				{"json_schema", object{{"name", "json_schema"}, {"schema", raw(s)}}},
			}})
		}
	}
	if e := oc.Get("effort"); present(e) {
		if e.Type != gjson.String || !anthropicEfforts[e.Str] {
			return nil, refusef("messages request: output_config.effort %s is not one vLLM takes", e.Raw)
		}
		req = append(req, field{"reasoning_effort", e.Str})
	}
	return req, nil
}

// anthropicTools mirrors _convert_tool_choice and _convert_tools: auto,
// any and none become auto, required and none; a named tool becomes a
// named function; each tool becomes a function with input_schema as its
// parameters (given "type":"object" at its end when it has no type, as
// AnthropicTool.validate_input_schema does). Tools with no tool_choice
// choose auto.
func anthropicTools(root gjson.Result, req object) (object, error) {
	var choice any
	if tc := root.Get("tool_choice"); present(tc) {
		if !tc.IsObject() {
			return nil, refusef("messages request: tool_choice: not an object")
		}
		switch tc.Get("type").Str {
		case "auto":
			choice = "auto"
		case "any":
			choice = "required"
		case "none":
			choice = "none"
		case "tool":
			name := tc.Get("name")
			if name.Type != gjson.String || name.Str == "" {
				return nil, refusef("messages request: tool_choice: type tool without a name")
			}
			choice = object{{"type", "function"}, {"function", object{{"name", name.Str}}}}
		default:
			return nil, refusef("messages request: tool_choice type %q is not one vLLM converts", tc.Get("type").Str)
		}
	}
	tools := root.Get("tools")
	if !present(tools) {
		// vLLM sets a tool_choice without tools after validation, where
		// it changes nothing (no tools are rendered and none are forced);
		// chat refuses a tool_choice without tools, so it is left out.
		return req, nil
	}
	if !tools.IsArray() {
		return nil, refusef("messages request: tools: not a list")
	}
	list := []object{}
	for i, t := range tools.Array() {
		name, schema := t.Get("name"), t.Get("input_schema")
		if !t.IsObject() || name.Type != gjson.String || !schema.IsObject() {
			return nil, refusef("messages request: tools[%d]: not a tool with a name and an input_schema object", i)
		}
		if d := t.Get("description"); present(d) && d.Type != gjson.String {
			return nil, refusef("messages request: tools[%d].description: not a string", i)
		}
		params := json.RawMessage(schema.Raw)
		if !schema.Get("type").Exists() {
			params = appendMember(schema.Raw, `"type":"object"`)
		}
		fn := object{
			{"name", name.Str},
			{"description", nullable(t.Get("description"))},
			{"parameters", params},
			{"defer_loading", nullable(t.Get("defer_loading"))},
		}
		list = append(list, object{{"type", "function"}, {"function", fn}})
	}
	if choice == nil {
		choice = "auto"
	}
	return append(req, field{"tool_choice", choice}, field{"tools", list}), nil
}

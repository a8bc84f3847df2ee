package router

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
// The body is the one the replica received (after adapt). What cannot be
// carried over faithfully is refused with errNotTranslatable, and the
// caller ends the stream with the API's error event rather than guess.
// Fields of the source API that chat has no use for are left out.

// errNotTranslatable says a request cannot be turned into an equivalent
// chat completions request; the wrapping error says why.
var errNotTranslatable = errors.New("not translatable to chat completions")

// refusef wraps errNotTranslatable with the reason.
func refusef(format string, args ...any) error {
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), errNotTranslatable)
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

// anthropicBlockTypes are the content block types vLLM's
// AnthropicContentBlock accepts; any other fails its validation.
var anthropicBlockTypes = map[string]bool{
	"text": true, "image": true, "tool_use": true, "tool_result": true,
	"tool_reference": true, "thinking": true, "redacted_thinking": true,
}

// messagesToChat turns an Anthropic Messages request body into the chat
// completions body vLLM builds from it, mirroring
// AnthropicServingMessages._convert_anthropic_to_openai_request: system
// text first, then the messages, the sampling fields, output_config, tool
// choice and tools. thinking, metadata and kv_transfer_params are not
// carried (vLLM reads neither of the first two; transfer parameters name
// the dead replica's KV cache).
func messagesToChat(body []byte) ([]byte, error) {
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

// responsesToChat turns an OpenAI Responses request body into the chat
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
func responsesToChat(body []byte) ([]byte, error) {
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
		// encrypted_content is not read (adapt strips it: vLLM refuses
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

package vllmsim

import (
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/tidwall/gjson"
)

// The Anthropic Messages API as vLLM serves it (vllm/entrypoints/anthropic:
// api_router.py, serving.py, protocol.py). vLLM turns a Messages request
// into a chat completion and converts the answer back, so this file reads
// the request into the same plan a chat request gets and writes the
// converted answer. Where vLLM departs from Anthropic's API this file
// follows vLLM and says so.

// anthropicStopReasons maps a chat finish_reason to Anthropic's stop_reason
// (AnthropicServingMessages.stop_reason_map).
var anthropicStopReasons = map[string]string{"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}

// routeMessages adds the Messages API routes. A query string such as
// Claude Code's ?beta=true is ignored, as vLLM ignores it.
func (s *Server) routeMessages() {
	messages := api{
		parse: func(body []byte) (*plan, wire, *apiError) {
			p, e := s.parseMessages(body, false)
			if e != nil {
				return nil, nil, e
			}
			return p, &messagesWire{block: -1}, nil
		},
		writeError: writeAnthropicError,
	}
	s.mux.HandleFunc("POST /v1/messages", func(w http.ResponseWriter, r *http.Request) {
		s.serveInference(w, r, messages)
	})
	s.mux.HandleFunc("POST /v1/messages/count_tokens", s.serveCountTokens)
}

// writeAnthropicError answers e on the Messages endpoints. vLLM's router
// translates its errors into Anthropic's envelope,
// {"type":"error","error":{"type":…,"message":…}}, keeping the OpenAI-side
// error type ("NotFoundError", "BadRequestError", …) rather than Anthropic's
// names ("not_found_error", …). A request that fails schema validation never
// reaches that router: vLLM's validation handler answers it in the OpenAI
// shape, type "Bad Request", param "body.<field>" (see apiError.validation;
// both envelopes are reported as vllm-project/vllm#57997).
func writeAnthropicError(w http.ResponseWriter, e *apiError) {
	if e.validation {
		writeError(w, e)
		return
	}
	b := make([]byte, 0, 64+len(e.message))
	b = append(b, `{"type":"error","error":{"type":`...)
	b = appendString(b, e.typeName())
	b = append(b, `,"message":`...)
	b = appendString(b, e.message)
	b = append(b, "}}"...)
	writeJSON(w, e.status, b)
}

// invalid is a schema-validation error of a Messages request.
func invalid(format string, args ...any) *apiError {
	e := badRequest(format, args...)
	e.validation, e.typ = true, "Bad Request"
	return e
}

// missing is the schema-validation error of a required field, with vLLM's
// param ("body.<field>").
func missing(name string) *apiError {
	e := invalid("%s: Field required", name)
	e.param = "body." + name
	return e
}

// asValidation marks e, from a shared field reader, as a schema error.
func asValidation(e *apiError) *apiError {
	if e != nil && e.status == http.StatusBadRequest {
		e.validation, e.typ = true, "Bad Request"
	}
	return e
}

// serveCountTokens answers POST /v1/messages/count_tokens, which vLLM
// serves: the prompt tokens the same request would have, with vLLM's
// context_management echo. It is not an inference request: no queue, no
// faults, no Stats or metrics; the request hook sees its body.
func (s *Server) serveCountTokens(w http.ResponseWriter, r *http.Request) {
	body, err := readBody(w, r)
	if err != nil {
		if r.Context().Err() == nil {
			writeAnthropicError(w, invalid("reading the request body: %v", err))
		}
		return
	}
	if s.hook != nil {
		s.hook(r, body)
	}
	p, e := s.parseMessages(body, true)
	if e != nil {
		writeAnthropicError(w, e)
		return
	}
	b := make([]byte, 0, 80)
	b = append(b, `{"input_tokens":`...)
	b = strconv.AppendInt(b, int64(p.promptTokens), 10)
	b = append(b, `,"context_management":{"original_input_tokens":`...)
	b = strconv.AppendInt(b, int64(p.promptTokens), 10)
	b = append(b, "}}"...)
	writeJSON(w, http.StatusOK, b)
}

// anthropicBlockTypes are the content-block types vLLM's protocol accepts.
var anthropicBlockTypes = []string{"text", "image", "tool_use", "tool_result", "tool_reference", "thinking", "redacted_thinking"}

// parseMessages validates a Messages request (count: a count_tokens
// request, which has no max_tokens) into a plan. The prompt is sized as
// vLLM's conversion to chat builds it: system text (top-level and
// role-system messages; Claude Code's per-request billing header is
// dropped), text blocks, tool_use names and inputs, tool_result text, and
// the tool definitions.
func (s *Server) parseMessages(body []byte, count bool) (*plan, *apiError) {
	if !gjson.ValidBytes(body) || !gjson.ParseBytes(body).IsObject() {
		return nil, invalid("the request body must be a JSON object")
	}
	if m := gjson.GetBytes(body, "model"); m.Type != gjson.String || m.Str == "" {
		return nil, missing("model")
	}
	root, e := s.parseRoot(body)
	if e != nil {
		return nil, asValidation(e)
	}
	p := &plan{ep: messagesEndpoint, n: 1, prompts: 1}
	maxTokens := 0
	if !count {
		var set bool
		if maxTokens, set, e = intField(root, "max_tokens", 1, math.MaxInt32); e != nil {
			e = invalid("max_tokens must be positive")
			e.param = "body.max_tokens"
			return nil, e
		}
		if !set {
			return nil, missing("max_tokens")
		}
		if p.stream, e = boolField(root, "stream"); e != nil {
			return nil, asValidation(e)
		}
		if st := root.Get("stop_sequences"); st.Exists() && st.Type != gjson.Null {
			ok := st.IsArray()
			st.ForEach(func(_, v gjson.Result) bool {
				ok = v.Type == gjson.String
				return ok
			})
			if !ok {
				return nil, invalid("stop_sequences: must be a list of strings")
			}
		}
	}

	chars := 0
	systemText := func(t string) {
		if !strings.HasPrefix(t, "x-anthropic-billing-header") {
			chars += len(t)
		}
	}
	switch sys := root.Get("system"); {
	case !sys.Exists() || sys.Type == gjson.Null:
	case sys.Type == gjson.String:
		chars += len(sys.Str)
	case sys.IsArray():
		sys.ForEach(func(_, b gjson.Result) bool {
			if b.Get("type").Str == "text" {
				systemText(b.Get("text").Str)
			}
			return true
		})
	default:
		return nil, invalid("system: must be a string or a list of content blocks")
	}

	msgs := root.Get("messages")
	if !msgs.IsArray() {
		return nil, missing("messages")
	}
	bh := s.messagesBlockHasher(root, msgs, count)
	var h history
	i := 0
	msgs.ForEach(func(_, m gjson.Result) bool {
		role := m.Get("role").Str
		switch role {
		case "ctx", "msg": // Claude Code's non-standard roles; vLLM maps them
			role = "user"
		case "user", "assistant", "system":
		default:
			e = invalid("messages[%d].role: must be user, assistant or system", i)
			return false
		}
		c := m.Get("content")
		if role == "user" {
			h.user(userText(c))
		}
		switch {
		case c.Type == gjson.String:
			chars += len(c.Str)
			if role != "system" {
				h.toolResult = false
				bh.write(c.Str)
			}
			if role == "assistant" {
				h.assistant(false)
			}
		case c.IsArray():
			var n int
			var hasContent, hasResult, hasUse bool
			c.ForEach(func(_, b gjson.Result) bool {
				typ := b.Get("type").Str
				if !slices.Contains(anthropicBlockTypes, typ) {
					e = invalid("messages[%d].content: block type %q is not one of %s", i, typ, strings.Join(anthropicBlockTypes, ", "))
					return false
				}
				switch typ {
				case "text":
					if role == "system" {
						systemText(b.Get("text").Str)
					} else {
						n += len(b.Get("text").Str)
						hasContent = hasContent || b.Get("text").Str != ""
						bh.write(b.Get("text").Str)
					}
				case "image":
					hasContent = true
				case "tool_use":
					n += len(b.Get("name").Str) + len(b.Get("input").Raw)
					hasContent, hasUse = true, true
					bh.write(b.Get("name").Str)
					bh.write(b.Get("input").Raw)
				case "tool_result":
					n += toolResultChars(b.Get("content"), bh)
					hasResult = true
				}
				return true
			})
			if e != nil {
				return false
			}
			chars += n
			if role == "assistant" {
				h.assistant(hasUse)
			}
			if role != "system" && (hasContent || hasResult || role == "assistant") {
				// vLLM turns tool results into tool messages, followed by
				// the user message when anything else is left of it: the
				// conversation then ends with a tool result only when the
				// message held nothing but results.
				h.toolResult = role == "user" && hasResult && !hasContent
			}
		default:
			e = invalid("messages[%d].content: must be a string or a list of content blocks", i)
			return false
		}
		i++
		return true
	})
	if e != nil {
		return nil, e
	}

	tools, e := anthropicTools(root)
	if e != nil {
		return nil, e
	}
	chars += tools.chars
	p.promptTokens = estimateTokens(chars)
	if count {
		return p, nil
	}
	p.cacheable(bh, p.promptTokens)

	// vLLM passes max_tokens to chat, which refuses a request that cannot
	// fit the context. The simulated answer's own length is
	// DefaultMaxTokens; a smaller max_tokens cuts it (stop_reason
	// "max_tokens"), so agents that ask for 32000 tokens get an answer of
	// the usual length.
	if limit := s.profile.MaxModelLen; limit > 0 && p.promptTokens+maxTokens > limit {
		return nil, badRequest("This model's maximum context length is %d tokens. However, you requested %d tokens (%d in the messages, %d in the completion). Please reduce the length of the messages or completion.",
			limit, p.promptTokens+maxTokens, p.promptTokens, maxTokens)
	}
	p.steps, p.finish, p.engineFinish = s.answerLength(h), "stop", "stop"
	if maxTokens < p.steps {
		p.steps, p.finish, p.engineFinish = maxTokens, "length", "length"
	}

	if s.answerTurn(p, tools, h) && root.Get("chat_template_kwargs.enable_thinking").Type != gjson.False {
		// vLLM ignores the request's "thinking" field; a reasoning model
		// thinks unless its chat template is told not to.
		p.reasoning = min(s.profile.ReasoningTokens, p.steps)
	}
	return p, nil
}

// toolResultChars is the size of a tool_result's content: a string, or its
// text items joined by newlines. It feeds that text to bh.
func toolResultChars(c gjson.Result, bh *blockHasher) int {
	if c.Type == gjson.String {
		bh.write(c.Str)
		return len(c.Str)
	}
	n, items := 0, 0
	c.ForEach(func(_, item gjson.Result) bool {
		if item.Get("type").Str == "text" {
			if items > 0 {
				n++
				bh.write("\n")
			}
			n += len(item.Get("text").Str)
			bh.write(item.Get("text").Str)
			items++
		}
		return true
	})
	return n
}

// messagesBlockHasher starts the prefix cache's view of a Messages
// request's prompt as vLLM's conversion to chat lays it out: the tools
// (rendered into the system turn by chat templates), then one system
// message joining the top-level system and the role-system messages
// (Claude Code's per-request billing header dropped, as vLLM drops it so
// that it does not defeat prefix caching); the other messages follow as
// they are read. nil without a prefix cache, or for count_tokens.
func (s *Server) messagesBlockHasher(root, msgs gjson.Result, count bool) *blockHasher {
	bh := s.newBlockHasher()
	if bh == nil || count {
		return nil
	}
	if t := root.Get("tools"); t.IsArray() {
		bh.write(t.Raw)
	}
	system := func(c gjson.Result) {
		if c.Type == gjson.String {
			bh.write(c.Str)
			return
		}
		c.ForEach(func(_, b gjson.Result) bool {
			if t := b.Get("text").Str; b.Get("type").Str == "text" && !strings.HasPrefix(t, "x-anthropic-billing-header") {
				bh.write(t)
			}
			return true
		})
	}
	system(root.Get("system"))
	msgs.ForEach(func(_, m gjson.Result) bool {
		if m.Get("role").Str == "system" {
			system(m.Get("content"))
		}
		return true
	})
	return bh
}

// anthropicTools reads tools ({name, description, input_schema}) and
// tool_choice ({type: auto|any|tool|none, name, disable_parallel_tool_use}).
// Any tool may be called, or the one tool_choice names; "any" or a named
// tool forces a call, "none" calls nothing. Several calls may be made
// unless disable_parallel_tool_use is set.
func anthropicTools(root gjson.Result) (offeredTools, *apiError) {
	tools := root.Get("tools")
	t, e := readTools(root, invalid, func(i int, tool gjson.Result) *apiError {
		if name := tool.Get("name"); name.Type != gjson.String || name.Str == "" {
			return invalid("tools[%d].name: Field required", i)
		}
		if !tool.Get("input_schema").IsObject() {
			return invalid("tools[%d].input_schema: Field required (an object)", i)
		}
		return nil
	})
	if e != nil {
		return t, e
	}

	named := ""
	t.parallel = true
	choice := root.Get("tool_choice")
	if choice.Exists() && choice.Type != gjson.Null {
		switch choice.Get("type").Str {
		case "auto":
		case "any":
			t.forced = true
		case "none":
			return t, nil
		case "tool":
			if named = choice.Get("name").Str; named == "" {
				return t, invalid("tool_choice.name is required when type is 'tool'")
			}
			t.forced = true
		default:
			return t, invalid("tool_choice.type: must be auto, any, tool or none")
		}
		if t.count == 0 && choice.Get("type").Str != "auto" {
			return t, badRequest("When using `tool_choice`, `tools` must be set.")
		}
		disable, e := boolField(choice, "disable_parallel_tool_use")
		if e != nil {
			return t, asValidation(badRequest("tool_choice.disable_parallel_tool_use: must be a boolean"))
		}
		t.parallel = !disable
	}
	tools.ForEach(func(_, tool gjson.Result) bool {
		if named == "" || tool.Get("name").Str == named {
			t.callable = append(t.callable, offeredTool{name: tool.Get("name").Str, schema: tool.Get("input_schema")})
		}
		return true
	})
	if named != "" && len(t.callable) == 0 {
		return t, badRequest("Tool '%s' has not been passed in `tools`.", named)
	}
	if named != "" {
		t.callable = t.callable[:1]
	}
	return t, nil
}

// messagesWire writes a Messages answer the way vLLM converts a chat answer
// (messages_full_converter, message_stream_converter).
type messagesWire struct {
	block     int    // index of the open content block; -1 before the first
	kind      string // type of the open block: "thinking", "text", "tool_use" or ""
	signature string // of the open thinking block
}

var _ wire = (*messagesWire)(nil)

// stopReason is the answer's stop_reason.
func stopReason(p *plan) string { return anthropicStopReasons[p.finish] }

// respond writes the non-stream message. vLLM drops null fields, so the
// answer has no stop_sequence (vllm-project/vllm#56371), and gives a
// thinking block a random signature.
func (m *messagesWire) respond(x *exchange) bool {
	p := x.p
	b := append((*x.buf)[:0], `{"id":`...)
	b = appendString(b, x.id)
	b = append(b, `,"type":"message","role":"assistant","content":[`...)
	switch {
	case p.mode == modeTool:
		for k, call := range p.calls {
			if k > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"type":"tool_use","id":`...)
			b = appendString(b, x.toolID(0, k))
			b = append(b, `,"name":`...)
			b = appendString(b, call.name)
			b = append(b, `,"input":`...)
			b = append(b, call.args...)
			b = append(b, '}')
		}
	default:
		if p.reasoning > 0 {
			b = append(b, `{"type":"thinking","thinking":`...)
			b = x.appendText(b, 0, 0, p.reasoning)
			b = append(b, `,"signature":`...)
			b = appendString(b, x.s.newID(""))
			b = append(b, '}')
		}
		if p.reasoning < p.steps {
			if p.reasoning > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"type":"text","text":`...)
			b = x.appendText(b, 0, p.reasoning, p.steps)
			b = append(b, '}')
		}
	}
	b = append(b, `],"model":`...)
	b = appendString(b, x.s.profile.Model)
	b = append(b, `,"stop_reason":"`...)
	b = append(b, stopReason(p)...)
	b = append(b, `","usage":`...)
	b = appendAnthropicUsage(b, p.promptTokens, p.steps)
	*x.buf = append(b, '}')
	return x.writeBody()
}

func appendAnthropicUsage(b []byte, input, output int) []byte {
	b = append(b, `{"input_tokens":`...)
	b = strconv.AppendInt(b, int64(input), 10)
	b = append(b, `,"output_tokens":`...)
	b = strconv.AppendInt(b, int64(output), 10)
	return append(b, '}')
}

// event sends one stream event: "event: <type>" and data that starts with
// the same "type" (vLLM's AnthropicStreamEvent fields in order: type,
// message, delta, content_block, index, usage), fill appending the rest.
func (m *messagesWire) event(x *exchange, typ string, fill func(b []byte) []byte) bool {
	b := append((*x.buf)[:0], "event: "...)
	b = append(b, typ...)
	b = append(b, "\ndata: {\"type\":\""...)
	b = append(b, typ...)
	b = append(b, '"')
	if fill != nil {
		b = fill(b)
	}
	*x.buf = append(b, "}\n\n"...)
	return x.send()
}

// open sends nothing: vLLM's first event, message_start, is made from the
// first chat chunk, which comes with the first token.
func (m *messagesWire) open(*exchange) bool { return true }

// appendIndex appends `,"index":n`.
func appendIndex(b []byte, n int) []byte {
	b = append(b, `,"index":`...)
	return strconv.AppendInt(b, int64(n), 10)
}

// startBlock closes the open block and opens one of type typ, whose empty
// form is block.
func (m *messagesWire) startBlock(x *exchange, typ, block string) bool {
	if !m.stopBlock(x) {
		return false
	}
	m.block++
	m.kind = typ
	if typ == "thinking" {
		m.signature = x.s.newID("")
	}
	return m.event(x, "content_block_start", func(b []byte) []byte {
		b = append(b, `,"content_block":`...)
		b = append(b, block...)
		return appendIndex(b, m.block)
	})
}

// stopBlock closes the open block, if any; a thinking block gets its
// signature first, as a signature_delta.
func (m *messagesWire) stopBlock(x *exchange) bool {
	if m.kind == "" {
		return true
	}
	if m.kind == "thinking" {
		ok := m.event(x, "content_block_delta", func(b []byte) []byte {
			b = append(b, `,"delta":{"type":"signature_delta","signature":`...)
			b = appendString(b, m.signature)
			return appendIndex(append(b, '}'), m.block)
		})
		if !ok {
			return false
		}
	}
	m.kind = ""
	return m.event(x, "content_block_stop", func(b []byte) []byte { return appendIndex(b, m.block) })
}

// delta sends a content_block_delta of the open block.
func (m *messagesWire) delta(x *exchange, kind, field, text string) bool {
	return m.event(x, "content_block_delta", func(b []byte) []byte {
		b = append(b, `,"delta":{"type":"`...)
		b = append(b, kind...)
		b = append(b, `","`...)
		b = append(b, field...)
		b = append(b, `":`...)
		b = appendString(b, text)
		return appendIndex(append(b, '}'), m.block)
	})
}

// step sends token step, preceded on the first token by message_start and
// by a content_block_start whenever the token opens a block.
func (m *messagesWire) step(x *exchange, step int) bool {
	p := x.p
	if step == 0 {
		// output_tokens is 0, as vLLM sends it. vLLM serializes these events
		// with exclude_unset and sets type and role explicitly since
		// vllm-project/vllm#45376 (without them Claude Code rejects the
		// stream).
		ok := m.event(x, "message_start", func(b []byte) []byte {
			b = append(b, `,"message":{"id":`...)
			b = appendString(b, x.id)
			b = append(b, `,"type":"message","role":"assistant","content":[],"model":`...)
			b = appendString(b, x.s.profile.Model)
			b = append(b, `,"stop_reason":null,"stop_sequence":null,"usage":`...)
			b = appendAnthropicUsage(b, p.promptTokens, 0)
			return append(b, '}')
		})
		if !ok {
			return false
		}
	}
	tok := p.token(0, step)
	switch {
	case p.mode == modeTool:
		// Each call is a tool_use block of its own.
		k, piece := p.toolStep(step)
		if piece < 0 {
			block := `{"type":"tool_use","id":` + string(appendString(nil, x.toolID(0, k))) +
				`,"name":` + string(appendString(nil, p.calls[k].name)) + `,"input":{}}`
			return m.startBlock(x, "tool_use", block)
		}
		return m.delta(x, "input_json_delta", "partial_json", tok)
	case step < p.reasoning:
		if m.kind != "thinking" && !m.startBlock(x, "thinking", `{"type":"thinking","thinking":""}`) {
			return false
		}
		return m.delta(x, "thinking_delta", "thinking", tok)
	default:
		if m.kind != "text" && !m.startBlock(x, "text", `{"type":"text","text":""}`) {
			return false
		}
		return m.delta(x, "text_delta", "text", tok)
	}
}

// end closes the open block and sends message_delta (stop_reason and a null
// stop_sequence, set explicitly since vllm-project/vllm#55325; usage with
// both counts) and message_stop. vLLM sends no ping events.
func (m *messagesWire) end(x *exchange) bool {
	p := x.p
	if !m.stopBlock(x) {
		return false
	}
	ok := m.event(x, "message_delta", func(b []byte) []byte {
		b = append(b, `,"delta":{"stop_reason":"`...)
		b = append(b, stopReason(p)...)
		b = append(b, `","stop_sequence":null},"usage":`...)
		return appendAnthropicUsage(b, p.promptTokens, p.steps)
	})
	return ok && m.event(x, "message_stop", nil)
}

package vllmsim

import (
	"bytes"
	"encoding/json"
	"math"
	"net/http"
	"strconv"
	"sync"

	"github.com/tidwall/gjson"
)

// The OpenAI Responses API as vLLM serves it (vllm/entrypoints/openai/
// responses: api_router.py, serving.py, protocol.py, utils.py and the
// simple, non-Harmony streaming processor in streaming_events.py). Where
// vLLM departs from OpenAI's API this file follows vLLM and says so.

// maxStoredResponses bounds the responses a Server keeps for GET and
// previous_response_id. vLLM keeps every stored response for the life of
// the process (its own FIXME calls this a leak); the simulator drops the
// oldest beyond this bound, so long demos and benchmarks stay bounded.
const maxStoredResponses = 4096

// responseStore keeps the responses of requests with "store": true. vLLM
// stores only when started with VLLM_ENABLE_RESPONSES_API_STORE=1 and
// otherwise silently ignores "store"; the simulator behaves as a server
// with the store enabled.
type responseStore struct {
	max int

	mu    sync.Mutex
	byID  map[string]*storedResponse // guarded by mu
	order []string                   // ids, oldest first; guarded by mu
}

// storedResponse is a completed response kept in the store.
type storedResponse struct {
	// body is the response object, as GET /v1/responses/{id} answers it.
	body []byte
	// conversation is the size in bytes of what a follow-up naming this
	// response inherits as prompt: this request's messages (its
	// instructions, the conversation it inherited, its input) and the text
	// of its output messages. vLLM leaves function calls and reasoning of
	// the previous output out of the follow-up's prompt, and so does this.
	conversation int
	// prefix is the prefix cache's view of the same prompt (its tools,
	// then the conversation); toolsHash identifies the tools it starts
	// with. nil without a prefix cache.
	prefix    *blockHasher
	toolsHash uint64
	// history is the agent loop up to and including this response's
	// answer, which a follow-up continues.
	history history
}

func (st *responseStore) get(id string) *storedResponse {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.byID[id]
}

func (st *responseStore) put(id string, r *storedResponse) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.byID == nil {
		st.byID = make(map[string]*storedResponse)
	}
	if _, ok := st.byID[id]; !ok {
		st.order = append(st.order, id)
	}
	st.byID[id] = r
	for len(st.order) > st.max {
		delete(st.byID, st.order[0])
		st.order[0] = ""
		st.order = st.order[1:]
	}
}

// routeResponses adds the Responses API routes.
func (s *Server) routeResponses() {
	responses := api{parse: s.parseResponses, writeError: writeError}
	s.mux.HandleFunc("POST /v1/responses", func(w http.ResponseWriter, r *http.Request) {
		s.serveInference(w, r, responses)
	})
	s.mux.HandleFunc("GET /v1/responses/{id}", s.serveGetResponse)
	s.mux.HandleFunc("POST /v1/responses/{id}/cancel", s.serveCancelResponse)
	s.mux.HandleFunc("DELETE /v1/responses/{id}", serveMethodNotAllowed("GET"))
}

// responseNotFound is vLLM's error for an id it does not hold.
func responseNotFound(id string) *apiError {
	return &apiError{status: http.StatusNotFound, typ: "invalid_request_error", param: "response_id",
		message: "Response with id '" + id + "' not found."}
}

// serveGetResponse answers GET /v1/responses/{id} with the stored response.
func (s *Server) serveGetResponse(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	st := s.stored.get(id)
	if st == nil {
		writeError(w, responseNotFound(id))
		return
	}
	writeJSON(w, http.StatusOK, st.body)
}

// serveCancelResponse answers POST /v1/responses/{id}/cancel as vLLM does
// for a response that was not created in the background (the simulator
// runs none there): 400 for a stored response, 404 for an unknown id.
func (s *Server) serveCancelResponse(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if s.stored.get(id) == nil {
		writeError(w, responseNotFound(id))
		return
	}
	writeError(w, &apiError{status: http.StatusBadRequest, typ: "invalid_request_error", param: "response_id",
		message: "Cannot cancel a synchronous response."})
}

// serveMethodNotAllowed answers what vLLM's FastAPI app answers for a path
// it routes under another method (DELETE /v1/responses/{id}: vLLM has no
// delete route): 405 with FastAPI's {"detail": …} body and an Allow header.
func serveMethodNotAllowed(allow string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Allow", allow)
		writeJSON(w, http.StatusMethodNotAllowed, []byte(`{"detail":"Method Not Allowed"}`))
	}
}

// responsesWire is a Responses API request and the writer of its answer.
type responsesWire struct {
	store bool
	// conversation is the size in bytes of this request's messages:
	// instructions, inherited conversation and input (tools excluded).
	conversation int
	// prefix hashes the prompt for the prefix cache; nil without one.
	prefix    *blockHasher
	toolsHash uint64
	// history is the request's agent loop: its input and what
	// previous_response_id inherits.
	history history
	// maxOutput is the response's "max_output_tokens": the cap vLLM
	// computed for the request (see parseResponses).
	maxOutput int
	// The raw JSON of the request fields the response echoes; "" when
	// absent or null.
	instructions, metadata, toolChoice, tools, reasoning, text, truncation,
	user, serviceTier, maxToolCalls, parallelToolCalls, temperature, topP,
	previousID string

	// Stream state. vLLM's stream names its items with bare random ids and
	// the call of a function "call_…", while the response in
	// response.completed is built anew with "msg_…", "fc_…" and "rs_…" item
	// ids and the tool parser's "chatcmpl-tool-…" call id; the simulator
	// keeps both sets of ids as vLLM does.
	seq         int
	outputIndex int
	itemID      string
	callID      string
	call        int // the call being streamed (modeTool)
}

var _ wire = (*responsesWire)(nil)

// parseResponses validates a POST /v1/responses request.
func (s *Server) parseResponses(body []byte) (*plan, wire, *apiError) {
	root, e := s.parseRoot(body)
	if e != nil {
		return nil, nil, e
	}
	p := &plan{ep: responsesEndpoint, n: 1, prompts: 1}
	rw := &responsesWire{store: true}
	if p.stream, e = boolField(root, "stream"); e != nil {
		return nil, nil, e
	}
	if v := root.Get("store"); v.Exists() && v.Type != gjson.Null {
		if v.Type != gjson.True && v.Type != gjson.False {
			return nil, nil, badRequest("store: must be a boolean")
		}
		rw.store = v.Type == gjson.True
	}
	background, e := boolField(root, "background")
	if e != nil {
		return nil, nil, e
	}
	if background {
		// vLLM runs background responses only with its store enabled; the
		// simulator runs none, and answers as vLLM does without the store.
		return nil, nil, &apiError{status: http.StatusBadRequest, typ: "invalid_request_error", param: "background",
			message: "This vLLM engine does not support `store=True` and therefore does not support the background mode. " +
				"To enable these features, set the environment variable `VLLM_ENABLE_RESPONSES_API_STORE=1` when launching the vLLM server."}
	}
	if v := root.Get("prompt"); v.Exists() && v.Type != gjson.Null {
		return nil, nil, &apiError{status: http.StatusBadRequest, param: "prompt", message: "prompt template is not supported"}
	}
	maxOutput, explicit, e := intField(root, "max_output_tokens", 1, math.MaxInt32)
	if e != nil {
		return nil, nil, e
	}

	// Echoed fields are compacted, as vLLM writes them anew: a request's
	// line breaks must not reach an SSE data line.
	raw := func(path string) string {
		if v := root.Get(path); v.Exists() && v.Type != gjson.Null {
			return compactJSON(v.Raw)
		}
		return ""
	}
	rw.metadata, rw.toolChoice, rw.tools, rw.reasoning, rw.text = raw("metadata"), raw("tool_choice"), raw("tools"), raw("reasoning"), raw("text")
	rw.truncation, rw.user, rw.serviceTier, rw.maxToolCalls = raw("truncation"), raw("user"), raw("service_tier"), raw("max_tool_calls")
	rw.parallelToolCalls, rw.temperature, rw.topP = raw("parallel_tool_calls"), raw("temperature"), raw("top_p")
	for _, f := range []struct{ name, raw string }{{"temperature", rw.temperature}, {"top_p", rw.topP}} {
		if f.raw != "" && gjson.Parse(f.raw).Type != gjson.Number {
			return nil, nil, badRequest("%s: must be a number", f.name)
		}
	}

	chars := 0
	if v := root.Get("instructions"); v.Exists() && v.Type != gjson.Null {
		if v.Type != gjson.String {
			return nil, nil, badRequest("instructions: must be a string")
		}
		rw.instructions = v.Raw
		chars += len(v.Str)
	}
	bh := s.responsesBlockHasher(root, rw)
	lastRole := "user"
	input := root.Get("input")
	switch {
	case input.Type == gjson.String:
		chars += len(input.Str)
		bh.write(input.Str)
		rw.history.user(input.Str)
	case input.IsArray():
		n, role, e := responsesInput(input, bh, &rw.history)
		if e != nil {
			return nil, nil, e
		}
		chars += n
		if role != "" {
			lastRole = role
		}
	default:
		return nil, nil, badRequest("input: field required (a string or a list of items)")
	}

	tools, e := responsesTools(root)
	if e != nil {
		return nil, nil, e
	}

	// After the model and the request's own checks, as vLLM does.
	if v := root.Get("previous_response_id"); v.Exists() && v.Type != gjson.Null {
		if v.Type != gjson.String {
			return nil, nil, badRequest("previous_response_id: must be a string")
		}
		prev := s.stored.get(v.Str)
		if prev == nil {
			return nil, nil, responseNotFound(v.Str)
		}
		rw.previousID = v.Raw
		chars += prev.conversation
		rw.history.turns += prev.history.turns
		rw.history.rounds += prev.history.rounds
		if prev.history.seenUser {
			rw.history.firstUser, rw.history.seenUser = prev.history.firstUser, true
		}
	}
	rw.conversation = chars
	p.promptTokens = estimateTokens(chars + tools.chars)
	p.cacheable(bh, p.promptTokens)

	// vLLM caps the output at max_output_tokens and at the room the context
	// leaves (get_max_tokens), and refuses only a prompt that fills the
	// context. The simulated answer's own length is DefaultMaxTokens; a
	// smaller cap cuts it, and the response is then "incomplete".
	limit := s.profile.MaxModelLen
	if limit > 0 {
		if p.promptTokens >= limit {
			return nil, nil, &apiError{status: http.StatusBadRequest, typ: "invalid_request_error", param: "input",
				message: "The engine prompt length " + strconv.Itoa(p.promptTokens) + " exceeds the max_model_len " +
					strconv.Itoa(limit) + ". Please reduce prompt."}
		}
		limit -= p.promptTokens
	}
	if explicit && (limit == 0 || maxOutput < limit) {
		limit = maxOutput
	}
	p.steps, p.finish, p.engineFinish = s.answerLength(rw.history), "stop", "stop"
	rw.maxOutput = p.steps
	if limit > 0 {
		rw.maxOutput = limit
		if limit < p.steps {
			p.steps, p.finish, p.engineFinish = limit, "length", "length"
		}
	}

	rw.history.toolResult = lastRole == "tool"
	if s.answerTurn(p, tools, rw.history) && root.Get("chat_template_kwargs.enable_thinking").Type != gjson.False {
		p.reasoning = min(s.profile.ReasoningTokens, p.steps)
	}
	return p, rw, nil
}

// compactJSON is raw, valid JSON, without insignificant whitespace.
func compactJSON(raw string) string {
	var b bytes.Buffer
	if json.Compact(&b, []byte(raw)) != nil {
		return raw
	}
	return b.String()
}

// responsesBlockHasher starts the prefix cache's view of a Responses
// request's prompt, laid out as vLLM builds it (_construct_input_messages):
// the tools (rendered into the system turn by chat templates), the
// instructions as a system message, the previous response's messages and
// output text, then the input. A follow-up without instructions and with
// the same tools extends its previous response's prompt, so its view
// continues that one's. With new instructions vLLM puts them before the
// inherited messages, whose own instructions come again after them; the
// prompt then shares only its tools and instructions with earlier ones,
// and the simulator, which keeps only the previous prompt's hashes, stops
// hashing there. nil without a prefix cache.
func (s *Server) responsesBlockHasher(root gjson.Result, rw *responsesWire) *blockHasher {
	bh := s.newBlockHasher()
	if bh == nil {
		return nil
	}
	tools := root.Get("tools")
	if tools.IsArray() {
		th := s.newBlockHasher()
		th.write(tools.Raw)
		rw.toolsHash = th.h
	}
	var prev *storedResponse
	if v := root.Get("previous_response_id"); v.Type == gjson.String {
		prev = s.stored.get(v.Str)
	}
	instructions := root.Get("instructions").Str
	if prev != nil && prev.prefix != nil && instructions == "" && prev.toolsHash == rw.toolsHash {
		bh = prev.prefix.clone()
	} else {
		if tools.IsArray() {
			bh.write(tools.Raw)
		}
		bh.write(instructions)
		if prev != nil {
			bh.stop()
		}
	}
	rw.prefix = bh
	return bh
}

// responsesInput reads the items of a list input: the size in bytes of
// their text, and the chat role the last one becomes in vLLM's prompt
// ("tool" for a function_call_output or custom_tool_call_output). It feeds
// their text to bh and counts the assistant turns in h: a run of
// consecutive assistant items (messages, reasoning, calls) is one turn, a
// tool round when it holds a call.
func responsesInput(input gjson.Result, bh *blockHasher, h *history) (chars int, lastRole string, e *apiError) {
	i := 0
	inTurn, turnCalls := false, false
	assistant := func(call bool) {
		if !inTurn {
			inTurn, turnCalls = true, false
			h.assistant(false)
		}
		if call && !turnCalls {
			turnCalls = true
			h.rounds++
		}
	}
	input.ForEach(func(_, item gjson.Result) bool {
		if !item.IsObject() {
			e = badRequest("input[%d]: must be an object", i)
			return false
		}
		switch typ := item.Get("type").Str; typ {
		case "", "message":
			role := item.Get("role").Str
			switch role {
			case "user", "assistant", "system", "developer":
			default:
				e = badRequest("input[%d]: role: must be one of user, assistant, system, developer", i)
				return false
			}
			_, n, ok := contentText(item.Get("content"), false)
			if !ok {
				e = badRequest("input[%d]: content: must be a string or a list of content parts", i)
				return false
			}
			chars += n
			bh.writeContent(item.Get("content"))
			lastRole = role
			if role == "user" {
				h.user(userText(item.Get("content")))
			}
			if role == "assistant" {
				assistant(false)
			} else {
				inTurn = false
			}
		case "function_call", "custom_tool_call":
			args := item.Get("arguments").Str
			if typ == "custom_tool_call" {
				args = item.Get("input").Str
			}
			chars += len(item.Get("name").Str) + len(args)
			bh.write(item.Get("name").Str)
			bh.write(args)
			lastRole = "assistant"
			assistant(true)
		case "function_call_output", "custom_tool_call_output":
			inTurn = false
			out := item.Get("output")
			if out.Type == gjson.String {
				chars += len(out.Str)
			} else {
				_, n, _ := contentText(out, false)
				chars += n
			}
			bh.writeContent(out)
			lastRole = "tool"
		case "reasoning":
			// vLLM turns a reasoning item into an assistant message and
			// refuses encrypted reasoning (utils.py).
			if enc := item.Get("encrypted_content"); enc.Type == gjson.String && enc.Str != "" {
				e = badRequest("Encrypted content is not supported.")
				return false
			}
			lastRole = "assistant"
			assistant(false)
		}
		i++
		return true
	})
	return chars, lastRole, e
}

// responsesTools reads tools, tool_choice and parallel_tool_calls
// (default true) of a Responses request. Tools are flat ({"type":
// "function", "name", "parameters", …}); only function tools are called:
// any of them, or the one tool_choice names. "required" or a named
// function forces a call; "none" calls nothing.
func responsesTools(root gjson.Result) (offeredTools, *apiError) {
	tools := root.Get("tools")
	t, e := readTools(root, badRequest, func(i int, tool gjson.Result) *apiError {
		if !tool.IsObject() || tool.Get("type").Type != gjson.String {
			return badRequest("tools[%d]: type: field required", i)
		}
		if tool.Get("type").Str == "function" {
			if name := tool.Get("name"); name.Type != gjson.String || name.Str == "" {
				return badRequest("tools[%d]: name: field required", i)
			}
		}
		return nil
	})
	if e != nil {
		return t, e
	}
	if t.parallel, e = boolFieldDefault(root, "parallel_tool_calls", true); e != nil {
		return t, e
	}

	named := ""
	switch choice := root.Get("tool_choice"); {
	case choice.Str == "none":
		return t, nil
	case choice.Str == "required":
		t.forced = true
	case choice.IsObject() && choice.Get("type").Str == "function":
		if named = choice.Get("name").Str; named == "" {
			return t, badRequest("tool_choice: name: field required")
		}
		t.forced = true
	}
	tools.ForEach(func(_, tool gjson.Result) bool {
		if tool.Get("type").Str == "function" && (named == "" || tool.Get("name").Str == named) {
			t.callable = append(t.callable, offeredTool{name: tool.Get("name").Str, schema: tool.Get("parameters")})
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

// status is the response's final status: vLLM marks an answer cut by the
// token cap "incomplete" and everything else "completed".
func (rw *responsesWire) status(p *plan) string {
	if p.finish == "length" {
		return "incomplete"
	}
	return "completed"
}

// appendResponse appends the response object with vLLM's fields in vLLM's
// order (ResponsesResponse.from_request). output appends the items of the
// output list; usage is written when done.
func (rw *responsesWire) appendResponse(b []byte, x *exchange, status string, output func([]byte) []byte, done bool) []byte {
	p := x.p
	orRaw := func(b []byte, raw, def string) []byte {
		if raw == "" {
			return append(b, def...)
		}
		return append(b, raw...)
	}
	b = append(b, `{"id":`...)
	b = appendString(b, x.id)
	b = append(b, `,"created_at":`...)
	b = strconv.AppendInt(b, x.created, 10)
	b = append(b, `,"incomplete_details":`...)
	if status == "incomplete" {
		b = append(b, `{"reason":"max_output_tokens"}`...)
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"instructions":`...)
	b = orRaw(b, rw.instructions, "null")
	b = append(b, `,"metadata":`...)
	b = orRaw(b, rw.metadata, "null")
	b = append(b, `,"model":`...)
	b = appendString(b, x.s.profile.Model)
	b = append(b, `,"object":"response","output":[`...)
	if output != nil {
		b = output(b)
	}
	b = append(b, `],"parallel_tool_calls":`...)
	b = orRaw(b, rw.parallelToolCalls, "true")
	b = append(b, `,"temperature":`...)
	b = orRaw(b, rw.temperature, "1.0")
	b = append(b, `,"tool_choice":`...)
	b = orRaw(b, rw.toolChoice, `"auto"`)
	b = append(b, `,"tools":`...)
	b = orRaw(b, rw.tools, "[]")
	b = append(b, `,"top_p":`...)
	b = orRaw(b, rw.topP, "1.0")
	b = append(b, `,"background":false,"max_output_tokens":`...)
	b = strconv.AppendInt(b, int64(rw.maxOutput), 10)
	b = append(b, `,"max_tool_calls":`...)
	b = orRaw(b, rw.maxToolCalls, "null")
	b = append(b, `,"previous_response_id":`...)
	b = orRaw(b, rw.previousID, "null")
	b = append(b, `,"prompt":null,"reasoning":`...)
	b = orRaw(b, rw.reasoning, "null")
	b = append(b, `,"service_tier":`...)
	b = orRaw(b, rw.serviceTier, `"auto"`)
	b = append(b, `,"status":"`...)
	b = append(b, status...)
	b = append(b, `","text":`...)
	b = orRaw(b, rw.text, "null")
	b = append(b, `,"top_logprobs":null,"truncation":`...)
	b = orRaw(b, rw.truncation, `"disabled"`)
	b = append(b, `,"usage":`...)
	if done {
		// SimpleContext keeps no per-turn metrics, hence the empty lists.
		reasoning := 0
		if p.mode == modeText {
			reasoning = p.reasoning
		}
		b = append(b, `{"input_tokens":`...)
		b = strconv.AppendInt(b, int64(p.promptTokens), 10)
		// cached_tokens is the engine's num_cached_tokens, reported
		// whether or not --enable-prompt-tokens-details is set.
		b = append(b, `,"input_tokens_details":{"cached_tokens":`...)
		b = strconv.AppendInt(b, int64(p.cached), 10)
		b = append(b, `,"input_tokens_per_turn":[],"cached_tokens_per_turn":[]},"output_tokens":`...)
		b = strconv.AppendInt(b, int64(p.steps), 10)
		b = append(b, `,"output_tokens_details":{"reasoning_tokens":`...)
		b = strconv.AppendInt(b, int64(reasoning), 10)
		b = append(b, `,"tool_output_tokens":0,"output_tokens_per_turn":[],"tool_output_tokens_per_turn":[]},"total_tokens":`...)
		b = strconv.AppendInt(b, int64(p.promptTokens+p.steps), 10)
		b = append(b, '}')
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"user":`...)
	b = orRaw(b, rw.user, "null")
	return append(b, `,"input_messages":null,"output_messages":null}`...)
}

// finish builds the completed response, with the output items vLLM builds
// after generation (DelegatingParser.extract_response_outputs), stores it
// when asked and returns it.
func (rw *responsesWire) finish(x *exchange) []byte {
	p := x.p
	output := func(b []byte) []byte {
		if p.mode == modeTool {
			for k, call := range p.calls {
				if k > 0 {
					b = append(b, ',')
				}
				b = append(b, `{"arguments":`...)
				b = appendString(b, call.args)
				b = append(b, `,"call_id":`...)
				b = appendString(b, x.toolID(0, k))
				b = append(b, `,"name":`...)
				b = appendString(b, call.name)
				b = append(b, `,"type":"function_call","id":`...)
				b = appendString(b, x.s.newID("fc_"))
				b = append(b, `,"status":"completed"}`...)
			}
			return b
		}
		if p.reasoning > 0 {
			// Only the last item has a status in vLLM's output.
			b = append(b, `{"id":`...)
			b = appendString(b, x.s.newID("rs_"))
			b = append(b, `,"summary":[],"type":"reasoning","content":[{"text":`...)
			b = x.appendText(b, 0, 0, p.reasoning)
			b = append(b, `,"type":"reasoning_text"}],"encrypted_content":null,"status":null}`...)
		}
		if p.reasoning < p.steps {
			if p.reasoning > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"id":`...)
			b = appendString(b, x.s.newID("msg_"))
			b = append(b, `,"content":[{"annotations":[],"text":`...)
			b = x.appendText(b, 0, p.reasoning, p.steps)
			b = append(b, `,"type":"output_text","logprobs":null}],"role":"assistant","status":"completed","type":"message"}`...)
		}
		return b
	}
	resp := rw.appendResponse(make([]byte, 0, 2048), x, rw.status(p), output, true)
	if rw.store {
		conv := rw.conversation
		prefix := rw.prefix.clone()
		if p.mode == modeText {
			for step := p.reasoning; step < p.steps; step++ {
				conv += len(p.token(0, step))
				prefix.write(p.token(0, step))
			}
		}
		h := rw.history
		h.assistant(p.mode == modeTool)
		x.s.stored.put(x.id, &storedResponse{body: resp, conversation: conv, prefix: prefix, toolsHash: rw.toolsHash, history: h})
	}
	return resp
}

// respond writes the non-stream answer.
func (rw *responsesWire) respond(x *exchange) bool {
	*x.buf = append((*x.buf)[:0], rw.finish(x)...)
	return x.writeBody()
}

// event sends one stream event: "event: <type>" and its data, whose fields
// fill appends in the openai-python model's order (alphabetical), all but
// the final "type".
func (rw *responsesWire) event(x *exchange, typ string, fill func(b []byte) []byte) bool {
	b := append((*x.buf)[:0], "event: "...)
	b = append(b, typ...)
	b = append(b, "\ndata: {"...)
	b = fill(b)
	b = append(b, `,"type":"`...)
	b = append(b, typ...)
	*x.buf = append(b, "\"}\n\n"...)
	rw.seq++
	return x.send()
}

// appendSeq appends the event's sequence_number, counted from 0 as vLLM
// does.
func (rw *responsesWire) appendSeq(b []byte) []byte {
	b = append(b, `"sequence_number":`...)
	return strconv.AppendInt(b, int64(rw.seq), 10)
}

// appendItemID appends `"item_id":…,` for the open item.
func (rw *responsesWire) appendItemID(b []byte) []byte {
	b = append(b, `"item_id":`...)
	b = appendString(b, rw.itemID)
	return append(b, ',')
}

// appendOutputIndex appends `"output_index":…,` for the open item.
func (rw *responsesWire) appendOutputIndex(b []byte) []byte {
	b = append(b, `"output_index":`...)
	b = strconv.AppendInt(b, int64(rw.outputIndex), 10)
	return append(b, ',')
}

// open sends response.created and response.in_progress, which vLLM sends
// before the request is scheduled.
func (rw *responsesWire) open(x *exchange) bool {
	for _, typ := range []string{"response.created", "response.in_progress"} {
		ok := rw.event(x, typ, func(b []byte) []byte {
			b = append(b, `"response":`...)
			b = rw.appendResponse(b, x, "in_progress", nil, false)
			return rw.appendSeq(append(b, ','))
		})
		if !ok {
			return false
		}
	}
	return true
}

// step sends token step: first the events that open an item when the token
// is the item's first, then the token's delta.
func (rw *responsesWire) step(x *exchange, step int) bool {
	p := x.p
	tok := p.token(0, step)
	if p.mode == modeTool {
		// Calls are streamed one after the other, each an output item of
		// its own.
		if k, piece := p.toolStep(step); piece < 0 { // a call's header: name and ids
			if k > 0 {
				if !rw.closeCall(x) {
					return false
				}
				rw.outputIndex++
			}
			rw.call = k
			rw.itemID, rw.callID = x.s.newID(""), x.s.newID("call_")
			return rw.item(x, "in_progress", "")
		}
		return rw.event(x, "response.function_call_arguments.delta", func(b []byte) []byte {
			b = append(b, `"delta":`...)
			b = appendString(b, tok)
			b = rw.appendItemID(append(b, ','))
			return rw.appendSeq(rw.appendOutputIndex(b))
		})
	}
	if step < p.reasoning {
		if step == 0 && !rw.openReasoning(x) {
			return false
		}
		return rw.event(x, "response.reasoning_text.delta", func(b []byte) []byte {
			b = append(b, `"content_index":0,"delta":`...)
			b = appendString(b, tok)
			b = rw.appendItemID(append(b, ','))
			return rw.appendSeq(rw.appendOutputIndex(b))
		})
	}
	if step == p.reasoning {
		if p.reasoning > 0 && !rw.closeReasoning(x) {
			return false
		}
		if !rw.openMessage(x) {
			return false
		}
	}
	return rw.event(x, "response.output_text.delta", func(b []byte) []byte {
		b = append(b, `"content_index":0,"delta":`...)
		b = appendString(b, tok)
		b = rw.appendItemID(append(b, ','))
		b = append(b, `"logprobs":[],`...)
		return rw.appendSeq(rw.appendOutputIndex(b))
	})
}

// item sends response.output_item.added (status "in_progress") or
// response.output_item.done (status "completed") for the open item. text
// is the done item's text as a JSON string, or a function call's raw
// arguments.
func (rw *responsesWire) item(x *exchange, status, text string) bool {
	p := x.p
	typ := "response.output_item.added"
	if status == "completed" {
		typ = "response.output_item.done"
	}
	reasoning := p.mode == modeText && rw.outputIndex == 0 && p.reasoning > 0
	return rw.event(x, typ, func(b []byte) []byte {
		b = append(b, `"item":`...)
		switch {
		case p.mode == modeTool:
			b = append(b, `{"arguments":`...)
			b = appendString(b, text)
			b = append(b, `,"call_id":`...)
			b = appendString(b, rw.callID)
			b = append(b, `,"name":`...)
			b = appendString(b, p.calls[rw.call].name)
			b = append(b, `,"type":"function_call","id":`...)
			b = appendString(b, rw.itemID)
		case reasoning:
			b = append(b, `{"id":`...)
			b = appendString(b, rw.itemID)
			b = append(b, `,"summary":[],"type":"reasoning","content":`...)
			if status == "completed" {
				b = append(b, `[{"text":`...)
				b = append(b, text...)
				b = append(b, `,"type":"reasoning_text"}]`...)
			} else {
				b = append(b, "null"...)
			}
			b = append(b, `,"encrypted_content":null`...)
		default:
			b = append(b, `{"id":`...)
			b = appendString(b, rw.itemID)
			b = append(b, `,"content":[`...)
			if status == "completed" {
				b = append(b, `{"annotations":[],"text":`...)
				b = append(b, text...)
				b = append(b, `,"type":"output_text","logprobs":null}`...)
			}
			b = append(b, `],"role":"assistant"`...)
		}
		b = append(b, `,"status":"`...)
		b = append(b, status...)
		b = append(b, '"')
		if !reasoning && p.mode == modeText {
			b = append(b, `,"type":"message"`...)
			if status == "completed" {
				// vLLM's done message carries a stray "summary" field.
				b = append(b, `,"summary":[]`...)
			}
		}
		b = append(b, `},`...)
		return rw.appendSeq(rw.appendOutputIndex(b))
	})
}

// part sends a content-part event of the open item: typ is
// response.content_part.added/done (output text) or vLLM's own
// response.reasoning_part.added/done; part is the part as JSON.
func (rw *responsesWire) part(x *exchange, typ, part string) bool {
	return rw.event(x, typ, func(b []byte) []byte {
		b = append(b, `"content_index":0,`...)
		b = rw.appendOutputIndex(rw.appendItemID(b))
		b = append(b, `"part":`...)
		b = append(b, part...)
		return rw.appendSeq(append(b, ','))
	})
}

// closeCall sends the events that end the call being streamed. vLLM sends
// arguments.done only after at least one delta.
func (rw *responsesWire) closeCall(x *exchange) bool {
	call := x.p.calls[rw.call]
	return (len(call.pieces) == 0 || rw.event(x, "response.function_call_arguments.done", func(b []byte) []byte {
		b = append(b, `"arguments":`...)
		b = appendString(b, call.args)
		b = rw.appendItemID(append(b, ','))
		b = append(b, `"name":`...)
		b = appendString(b, call.name)
		return rw.appendSeq(rw.appendOutputIndex(append(b, ',')))
	})) && rw.item(x, "completed", call.args)
}

func (rw *responsesWire) openReasoning(x *exchange) bool {
	rw.itemID = x.s.newID("")
	return rw.item(x, "in_progress", "") &&
		rw.part(x, "response.reasoning_part.added", `{"text":"","type":"reasoning_text"}`)
}

func (rw *responsesWire) closeReasoning(x *exchange) bool {
	text := string(x.appendText(nil, 0, 0, x.p.reasoning))
	ok := rw.event(x, "response.reasoning_text.done", func(b []byte) []byte {
		b = append(b, `"content_index":0,`...)
		b = rw.appendSeq(rw.appendOutputIndex(rw.appendItemID(b)))
		b = append(b, `,"text":`...)
		return append(b, text...)
	}) &&
		rw.part(x, "response.reasoning_part.done", `{"text":`+text+`,"type":"reasoning_text"}`) &&
		rw.item(x, "completed", text)
	rw.outputIndex++
	return ok
}

func (rw *responsesWire) openMessage(x *exchange) bool {
	rw.itemID = x.s.newID("")
	return rw.item(x, "in_progress", "") &&
		rw.part(x, "response.content_part.added", `{"annotations":[],"text":"","type":"output_text","logprobs":[]}`)
}

// end closes the open item and sends response.completed with the full
// response.
func (rw *responsesWire) end(x *exchange) bool {
	p := x.p
	var ok bool
	switch {
	case p.mode == modeTool:
		ok = rw.closeCall(x)
	case p.reasoning >= p.steps:
		ok = rw.closeReasoning(x)
	default:
		text := string(x.appendText(nil, 0, p.reasoning, p.steps))
		ok = rw.event(x, "response.output_text.done", func(b []byte) []byte {
			b = append(b, `"content_index":0,`...)
			b = rw.appendItemID(b)
			b = append(b, `"logprobs":[],`...)
			b = rw.appendSeq(rw.appendOutputIndex(b))
			b = append(b, `,"text":`...)
			return append(b, text...)
		}) &&
			rw.part(x, "response.content_part.done", `{"annotations":[],"text":`+text+`,"type":"output_text","logprobs":null}`) &&
			rw.item(x, "completed", text)
	}
	if !ok {
		return false
	}
	resp := rw.finish(x)
	return rw.event(x, "response.completed", func(b []byte) []byte {
		b = append(b, `"response":`...)
		b = append(b, resp...)
		return rw.appendSeq(append(b, ','))
	})
}

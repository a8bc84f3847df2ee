package resume

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/switchyard/switchyard/router/internal/translate"
	"github.com/switchyard/switchyard/router/internal/wire"

	"github.com/switchyard/switchyard/router/internal/sse"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// Translator resumes a stream of an API whose events name their type
// (Responses, Messages). vLLM continues a partial answer only through chat
// completions (continue_final_message), so the continuation is asked for
// there, and its chunks are translated into the client API's events: the
// client sees one stream in its own API, numbered and indexed on from what
// it was sent, closed by one terminal event.
type Translator interface {
	// observe records one event the client was sent, as the replica wrote
	// it (before ids are rewritten). It marks the stream not resumable
	// (State.broken) when the event is one a continuation could not
	// follow.
	Observe(typ string, root gjson.Result)
	// translate turns one chunk of the continuation's chat stream, read
	// into d, into the client API's events, as SSE bytes (nil: none yet),
	// numbered after seq, the last sequence number the client was sent;
	// done is the chat stream's [DONE], after which the answer is closed.
	Translate(seq int64, d ChatDelta, done bool) ([]byte, error)
	// toChat is the chat request for the client's request body.
	ToChat(body []byte) ([]byte, error)
	// unstarted says why the stream cannot be continued because it had
	// not begun ("" when it had): a continuation has nothing to build on
	// before the API's first event.
	Unstarted() string
}

// ErrNotContinued: a continuation sent what the client's API stream cannot
// carry on from; the stream ends with the API's error event.
var ErrNotContinued = errors.New("the continuation cannot be relayed")

// chatDelta is what one chunk of a chat stream brings to choice 0.
type ChatDelta struct {
	reasoning, content string
	ToolCall           bool
	Finish             string
	Usage              gjson.Result
}

// readChatDelta reads a continuation's chunk. Reasoning deltas are content
// once the answer was in its content (see State.afterContent).
func (rs *State) ReadChatDelta(data []byte) ChatDelta {
	root := gjson.ParseBytes(data)
	var d ChatDelta
	if u := root.Get("usage"); u.IsObject() {
		d.Usage = u
	}
	c0 := root.Get("choices.0")
	delta := c0.Get("delta")
	r := delta.Get("reasoning")
	if !nonEmpty(r) {
		r = delta.Get("reasoning_content")
	}
	if nonEmpty(r) {
		d.reasoning = r.Str
	}
	if t := delta.Get("content"); nonEmpty(t) {
		d.content = t.Str
	}
	if rs.afterContent || rs.inContent {
		d.content, d.reasoning = d.reasoning+d.content, ""
	}
	d.ToolCall = delta.Get("tool_calls").Exists() && delta.Get("tool_calls").Type != gjson.Null
	if f := c0.Get("finish_reason"); f.Type == gjson.String {
		d.Finish = f.Str
	}
	return d
}

// continuationUsage is the continuation's usage moved to the whole answer:
// the text already sent is in its prompt but is part of the completion.
func (rs *State) continuationUsage() (prompt, completion int64, ok bool) {
	if !rs.Usage.IsObject() {
		return 0, 0, false
	}
	prompt = max(rs.Usage.Get("prompt_tokens").Int()-rs.Offset, 0)
	completion = rs.Usage.Get("completion_tokens").Int() + rs.Offset
	return prompt, completion, true
}

func itoaInt(n int) string { return strconv.Itoa(n) }

// ---- Responses ----

// responsesResume follows a Responses stream: the response object of
// response.created (the terminal event's base), the output items done, and
// the item in progress.
type responsesResume struct {
	rs       *State
	rand     func() uint64
	response string
	items    []string
	kept     int // bytes of items
	next     int
	open     *outputItem
}

// outputItem is an output item in progress: a message or reasoning.
type outputItem struct {
	kind  string // "message" or "reasoning"
	id    string
	index int
	part  bool // its content part was opened
	text  []byte
	// textDone, partDone: its text's and its part's done events were sent.
	textDone, partDone bool
}

func (r *responsesResume) ToChat(body []byte) ([]byte, error) { return translate.ResponsesToChat(body) }

func (r *responsesResume) Unstarted() string {
	if r.response == "" {
		return "the stream had not sent response.created"
	}
	return ""
}

func (r *responsesResume) Observe(typ string, root gjson.Result) {
	rs := r.rs
	switch typ {
	case "response.created":
		r.response = root.Get("response").Raw
	case "response.in_progress":
	case "response.output_item.added":
		it := root.Get("item")
		switch k := it.Get("type").Str; k {
		case "message", "reasoning":
			r.open = &outputItem{kind: k, id: it.Get("id").Str, index: int(root.Get("output_index").Int())}
			r.next = r.open.index + 1
		case "function_call", "custom_tool_call":
			rs.Broken = "a tool call was being sent"
		default:
			rs.Broken = "an output item of type " + strconv.Quote(wire.Clip(k)) + " was being sent"
		}
	case "response.content_part.added", "response.reasoning_part.added":
		if r.open != nil {
			r.open.part = true
		}
	case "response.output_text.delta", "response.reasoning_text.delta":
		want := "message"
		if typ == "response.reasoning_text.delta" {
			want = "reasoning"
		}
		if r.open == nil || r.open.kind != want {
			rs.Broken = "a delta came outside its output item"
			return
		}
		d := root.Get("delta").Str
		r.open.text = append(r.open.text, d...)
		if want == "message" {
			rs.addContent(d)
		} else {
			rs.addReasoning(d)
		}
	case "response.output_text.done", "response.reasoning_text.done":
		if r.open != nil {
			r.open.textDone = true
		}
	case "response.content_part.done", "response.reasoning_part.done":
		if r.open != nil {
			r.open.partDone = true
		}
	case "response.output_item.done":
		if root.Get("item.type").Str == "reasoning" {
			rs.reasoningDone = true
		}
		r.items = append(r.items, root.Get("item").Raw)
		if r.kept += len(root.Get("item").Raw); r.kept > rs.maxBuffer {
			// A continuation in progress still needs the items for its
			// terminal event; another one will not be asked for.
			rs.Broken = "the answer outgrew resume.max_buffer"
			if !rs.Cont {
				r.items = nil
			}
		}
		r.next = int(root.Get("output_index").Int()) + 1
		r.open = nil
	case "response.completed", "response.incomplete", "response.failed":
		rs.Broken = "the answer had finished"
	case "response.function_call_arguments.delta", "response.custom_tool_call_input.delta":
		rs.Broken = "a tool call was being sent"
	case "response.refusal.delta":
		rs.Broken = "a refusal was being sent"
	case "error":
		rs.Broken = "the replica sent an error event"
	}
}

func (r *responsesResume) Translate(seq int64, d ChatDelta, done bool) ([]byte, error) {
	rs := r.rs
	if r.response == "" {
		return nil, fmt.Errorf("%w: the stream had not sent response.created", ErrNotContinued)
	}
	e := responsesEmitter{seq: seq, open: r.open, next: r.next, rand: r.rand}
	if r.open != nil {
		cp := *r.open
		e.open = &cp
	}
	if !done {
		if it := e.open; it != nil && it.textDone && d.reasoning+d.content != "" {
			return nil, fmt.Errorf("%w: the output item's text had ended", ErrNotContinued)
		}
		// What the terminal event repeats (the items done, the open
		// item's text) is bounded like the text sent before a cut.
		held := r.kept + len(d.reasoning) + len(d.content)
		if e.open != nil {
			held += len(e.open.text)
		}
		if held > rs.maxBuffer {
			return nil, fmt.Errorf("%w: the continued answer outgrew resume.max_buffer (%d bytes)", ErrNotContinued, rs.maxBuffer)
		}
		if d.reasoning != "" && e.open != nil && e.open.kind == "message" {
			// A message item was opened: what follows is its text.
			d.content, d.reasoning = d.reasoning+d.content, ""
		}
		if d.reasoning != "" {
			if e.open == nil {
				e.start("reasoning")
			} else if !e.open.part {
				e.part()
			}
			e.delta("response.reasoning_text.delta", d.reasoning)
		}
		if d.content != "" {
			if e.open != nil && e.open.kind == "reasoning" {
				e.close()
			}
			if e.open == nil {
				e.start("message")
			} else if !e.open.part {
				e.part()
			}
			e.delta("response.output_text.delta", d.content)
		}
		return e.out, nil
	}
	if rs.Finish == "" {
		return nil, fmt.Errorf("%w: the continuation ended without a finish reason", ErrNotContinued)
	}
	closed := e.close()
	items := append(append([]string(nil), r.items...), closed...)
	resp := r.response
	// vLLM ends every stream it finishes with response.completed, its
	// status "incomplete" when max_output_tokens cut the answer: the
	// continuation ends the way the cut replica would have.
	typ, status := "response.completed", "completed"
	if rs.Finish == "length" {
		status = "incomplete"
		resp, _ = sjson.SetRaw(resp, "incomplete_details", `{"reason":"max_output_tokens"}`)
	}
	resp, _ = sjson.Set(resp, "status", status)
	resp, _ = sjson.SetRaw(resp, "output", "["+strings.Join(items, ",")+"]")
	if pt, ct, ok := rs.continuationUsage(); ok {
		resp, _ = sjson.SetRaw(resp, "usage", `{"input_tokens":`+itoa(pt)+`,"input_tokens_details":{"cached_tokens":0},"output_tokens":`+itoa(ct)+
			`,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":`+itoa(pt+ct)+`}`)
	}
	e.event(typ, `{"response":`+resp+`,"sequence_number":`+e.nextSeq()+`,"type":"`+typ+`"}`)
	return e.out, nil
}

// responsesEmitter writes the Responses events of one translated chunk,
// numbering them after the last one sent.
type responsesEmitter struct {
	out  []byte
	seq  int64
	open *outputItem
	next int
	rand func() uint64
}

func (e *responsesEmitter) nextSeq() string {
	e.seq++
	return itoa(e.seq)
}

func (e *responsesEmitter) event(typ, data string) { e.out = sse.AppendEvent(e.out, typ, data) }

// start opens a message or reasoning item and its content part.
func (e *responsesEmitter) start(kind string) {
	prefix := "msg_"
	if kind == "reasoning" {
		prefix = "rs_"
	}
	it := &outputItem{kind: kind, id: fmt.Sprintf("%s%016x%016x", prefix, e.rand(), e.rand()), index: e.next}
	e.open, e.next = it, e.next+1
	item := `{"id":` + wire.Quote(it.id) + `,"content":[],"role":"assistant","status":"in_progress","type":"message"}`
	if kind == "reasoning" {
		item = `{"id":` + wire.Quote(it.id) + `,"summary":[],"type":"reasoning","content":null,"encrypted_content":null,"status":"in_progress"}`
	}
	e.event("response.output_item.added", `{"item":`+item+`,"output_index":`+itoaInt(it.index)+`,"sequence_number":`+e.nextSeq()+`,"type":"response.output_item.added"}`)
	e.part()
}

// part opens the open item's content part.
func (e *responsesEmitter) part() {
	it := e.open
	typ, part := "response.content_part.added", `{"annotations":[],"text":"","type":"output_text","logprobs":[]}`
	if it.kind == "reasoning" {
		typ, part = "response.reasoning_part.added", `{"text":"","type":"reasoning_text"}`
	}
	it.part = true
	e.event(typ, `{"content_index":0,"item_id":`+wire.Quote(it.id)+`,"output_index":`+itoaInt(it.index)+`,"part":`+part+`,"sequence_number":`+e.nextSeq()+`,"type":"`+typ+`"}`)
}

func (e *responsesEmitter) delta(typ, text string) {
	it := e.open
	it.text = append(it.text, text...)
	logprobs := `,"logprobs":[]`
	if it.kind == "reasoning" {
		logprobs = ""
	}
	e.event(typ, `{"content_index":0,"delta":`+wire.Quote(text)+`,"item_id":`+wire.Quote(it.id)+logprobs+`,"output_index":`+itoaInt(it.index)+`,"sequence_number":`+e.nextSeq()+`,"type":"`+typ+`"}`)
}

// close ends the open item (its text, its part, the item) and returns the
// item as the terminal event lists it.
func (e *responsesEmitter) close() []string {
	it := e.open
	if it == nil {
		return nil
	}
	e.open = nil
	text := wire.Quote(string(it.text))
	head := `{"content_index":0,"item_id":` + wire.Quote(it.id) + `,"output_index":` + itoaInt(it.index)
	var item string
	if it.kind == "reasoning" {
		if !it.textDone {
			e.event("response.reasoning_text.done", head+`,"sequence_number":`+e.nextSeq()+`,"text":`+text+`,"type":"response.reasoning_text.done"}`)
		}
		if !it.partDone {
			e.event("response.reasoning_part.done", head+`,"part":{"text":`+text+`,"type":"reasoning_text"},"sequence_number":`+e.nextSeq()+`,"type":"response.reasoning_part.done"}`)
		}
		item = `{"id":` + wire.Quote(it.id) + `,"summary":[],"type":"reasoning","content":[{"text":` + text + `,"type":"reasoning_text"}],"encrypted_content":null,"status":"completed"}`
	} else {
		if !it.part {
			e.open = it
			e.part()
			e.open = nil
		}
		part := `{"annotations":[],"text":` + text + `,"type":"output_text","logprobs":null}`
		if !it.textDone {
			e.event("response.output_text.done", head+`,"logprobs":[],"sequence_number":`+e.nextSeq()+`,"text":`+text+`,"type":"response.output_text.done"}`)
		}
		if !it.partDone {
			e.event("response.content_part.done", head+`,"part":`+part+`,"sequence_number":`+e.nextSeq()+`,"type":"response.content_part.done"}`)
		}
		item = `{"id":` + wire.Quote(it.id) + `,"content":[` + part + `],"role":"assistant","status":"completed","type":"message"}`
	}
	e.event("response.output_item.done", `{"item":`+item+`,"output_index":`+itoaInt(it.index)+`,"sequence_number":`+e.nextSeq()+`,"type":"response.output_item.done"}`)
	return []string{item}
}

// ---- Messages ----

// messagesResume follows a Messages stream: the content block in progress
// and the next block's index.
type messagesResume struct {
	rs   *State
	rand func() uint64
	open *messagesBlock
	next int
	// input is message_start's input_tokens: the prompt's, exact, where
	// the continuation's includes the text already sent.
	input   gjson.Result
	started bool // message_start was sent
}

// messagesBlock is a text or thinking block in progress.
type messagesBlock struct {
	kind   string // "text" or "thinking"
	index  int
	signed bool // a thinking block's signature was sent
}

func (m *messagesResume) ToChat(body []byte) ([]byte, error) { return translate.MessagesToChat(body) }

func (m *messagesResume) Unstarted() string {
	if !m.started {
		return "the stream had not sent message_start"
	}
	return ""
}

func (m *messagesResume) Observe(typ string, root gjson.Result) {
	rs := m.rs
	switch typ {
	case "message_start":
		m.input, m.started = root.Get("message.usage.input_tokens"), true
	case "ping":
	case "content_block_start":
		switch k := root.Get("content_block.type").Str; k {
		case "text", "thinking":
			m.open = &messagesBlock{kind: k, index: int(root.Get("index").Int())}
			m.next = m.open.index + 1
		case "tool_use", "server_tool_use":
			rs.Broken = "a tool call was being sent"
		default:
			rs.Broken = "a content block of type " + strconv.Quote(wire.Clip(k)) + " was being sent"
		}
	case "content_block_delta":
		d := root.Get("delta")
		switch {
		case m.open == nil:
			rs.Broken = "a delta came outside its content block"
		case d.Get("type").Str == "text_delta" && m.open.kind == "text":
			rs.addContent(d.Get("text").Str)
		case d.Get("type").Str == "thinking_delta" && m.open.kind == "thinking":
			rs.addReasoning(d.Get("thinking").Str)
		case d.Get("type").Str == "signature_delta":
			m.open.signed = true
		default:
			rs.Broken = "a delta of type " + strconv.Quote(wire.Clip(d.Get("type").Str)) + " was being sent"
		}
	case "content_block_stop":
		if m.open != nil && m.open.kind == "thinking" {
			rs.reasoningDone = true
		}
		m.next, m.open = int(root.Get("index").Int())+1, nil
	case "message_delta", "message_stop":
		rs.Broken = "the answer had finished"
	default:
		rs.Broken = "the replica sent an event of type " + strconv.Quote(wire.Clip(typ))
	}
}

func (m *messagesResume) Translate(seq int64, d ChatDelta, done bool) ([]byte, error) {
	rs := m.rs
	e := messagesEmitter{next: m.next, rand: m.rand}
	if m.open != nil {
		cp := *m.open
		e.open = &cp
	}
	if !done {
		if d.reasoning != "" && e.open != nil && e.open.kind == "text" {
			// A text block was opened: what follows is its text.
			d.content, d.reasoning = d.reasoning+d.content, ""
		}
		if d.reasoning != "" {
			if e.open == nil {
				e.start("thinking")
			}
			e.event("content_block_delta", `{"type":"content_block_delta","delta":{"type":"thinking_delta","thinking":`+wire.Quote(d.reasoning)+`},"index":`+itoaInt(e.open.index)+`}`)
		}
		if d.content != "" {
			if e.open != nil && e.open.kind == "thinking" {
				e.close()
			}
			if e.open == nil {
				e.start("text")
			}
			e.event("content_block_delta", `{"type":"content_block_delta","delta":{"type":"text_delta","text":`+wire.Quote(d.content)+`},"index":`+itoaInt(e.open.index)+`}`)
		}
		return e.out, nil
	}
	if rs.Finish == "" {
		return nil, fmt.Errorf("%w: the continuation ended without a finish reason", ErrNotContinued)
	}
	e.close()
	// vLLM's stop-reason map (AnthropicServingMessages.stop_reason_map).
	reason := "end_turn"
	switch rs.Finish {
	case "length":
		reason = "max_tokens"
	case "tool_calls":
		reason = "tool_use"
	}
	usage := ""
	if pt, ct, ok := rs.continuationUsage(); ok {
		if m.input.Type == gjson.Number {
			pt = m.input.Int()
		}
		usage = `,"usage":{"input_tokens":` + itoa(pt) + `,"output_tokens":` + itoa(ct) + `}`
	}
	e.event("message_delta", `{"type":"message_delta","delta":{"stop_reason":"`+reason+`","stop_sequence":null}`+usage+`}`)
	e.event("message_stop", `{"type":"message_stop"}`)
	return e.out, nil
}

// messagesEmitter writes the Messages events of one translated chunk.
type messagesEmitter struct {
	out  []byte
	open *messagesBlock
	next int
	rand func() uint64
}

func (e *messagesEmitter) event(typ, data string) { e.out = sse.AppendEvent(e.out, typ, data) }

func (e *messagesEmitter) start(kind string) {
	e.open = &messagesBlock{kind: kind, index: e.next}
	e.next++
	block := `{"type":"text","text":""}`
	if kind == "thinking" {
		block = `{"type":"thinking","thinking":""}`
	}
	e.event("content_block_start", `{"type":"content_block_start","content_block":`+block+`,"index":`+itoaInt(e.open.index)+`}`)
}

// close ends the open block; a thinking block gets a signature first, as
// vLLM sends one (an opaque value that vLLM ignores when it comes back).
func (e *messagesEmitter) close() {
	b := e.open
	if b == nil {
		return
	}
	e.open = nil
	if b.kind == "thinking" && !b.signed {
		e.event("content_block_delta", fmt.Sprintf(`{"type":"content_block_delta","delta":{"type":"signature_delta","signature":"%016x%016x"},"index":%d}`, e.rand(), e.rand(), b.index))
	}
	e.event("content_block_stop", `{"type":"content_block_stop","index":`+itoaInt(b.index)+`}`)
}

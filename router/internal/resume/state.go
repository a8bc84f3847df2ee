package resume

import (
	"bytes"
	"fmt"
	"strconv"

	"github.com/switchyard/switchyard/router/internal/wire"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// State follows what a chat stream has sent its client, so that when
// its replica fails mid-way another replica can continue the answer (vLLM's
// continue_final_message) and the client sees one uninterrupted stream.
type State struct {
	maxBuffer int
	// typed, for a Responses or Messages stream, follows that API's events
	// and translates a continuation, which vLLM can only make through chat
	// completions, back into them.
	Typed Translator
	// The first chunk's id, created and model (raw JSON): every chunk of a
	// continuation carries them, so SDKs see one completion.
	head               bool
	id, created, model string
	// What the client was sent of choice 0: reasoning text (the
	// "reasoning" or "reasoning_content" deltas of vLLM's reasoning
	// parsers), then content. inContent is set by the first content delta.
	reasoning, content []byte
	inContent          bool
	tokens             int    // deltas sent, about one token each
	Broken             string // why the stream cannot be resumed ("" if it can)
	Cont, roleDropped  bool   // relaying a continuation; its role chunk dropped
	// afterContent is set when the continuation in progress continues the
	// content: any reasoning delta it sends is content (a thinking block
	// closes once), whatever the continuing replica's parser calls it.
	afterContent bool
	// offset is the deltas sent before the continuation in progress: its
	// prompt holds them, its completion does not.
	Offset int64
	// reasoningDone: the reasoning item or thinking block was closed
	// before any content (Responses, Messages): the partial message closes
	// the thinking block, and the continuation's reasoning is content.
	reasoningDone bool
	// finish and usage are the continuation's, for a typed API's closing
	// events.
	Finish string
	Usage  gjson.Result
}

// New follows a stream of API ep for the request body.
func New(ep wire.Endpoint, body []byte, maxBuffer int, rnd func() uint64) *State {
	rs := &State{maxBuffer: maxBuffer}
	root := gjson.ParseBytes(body)
	switch ep {
	case wire.Responses:
		rs.Typed = &responsesResume{rs: rs, rand: rnd}
	case wire.Messages:
		rs.Typed = &messagesResume{rs: rs, rand: rnd}
	case wire.Chat:
	default:
		rs.Broken = "not a chat completion (nor a Responses or Messages stream)"
	}
	switch {
	case root.Get("n").Int() > 1:
		rs.Broken = "n > 1"
	case root.Get("logprobs").Type == gjson.True:
		rs.Broken = "logprobs were requested"
	}
	return rs
}

func nonEmpty(r gjson.Result) bool { return r.Type == gjson.String && r.Str != "" }

// observe records one data event sent to the client.
func (rs *State) Observe(data []byte) {
	if rs.Broken != "" || len(data) == 0 || data[0] != '{' {
		return
	}
	if !rs.head {
		rs.id = gjson.GetBytes(data, "id").Raw
		rs.created = gjson.GetBytes(data, "created").Raw
		rs.model = gjson.GetBytes(data, "model").Raw
		rs.head = rs.id != ""
	}
	gjson.GetBytes(data, "choices").ForEach(func(_, c gjson.Result) bool {
		d := c.Get("delta")
		switch {
		case c.Get("index").Int() != 0:
			rs.Broken = "more than one choice"
		case c.Get("finish_reason").Exists() && c.Get("finish_reason").Type != gjson.Null:
			rs.Broken = "the answer had finished"
		case c.Get("logprobs").Exists() && c.Get("logprobs").Type != gjson.Null:
			rs.Broken = "logprobs were sent"
		case d.Get("tool_calls").Exists():
			rs.Broken = "a tool call was being sent"
		default:
			r := d.Get("reasoning")
			if !nonEmpty(r) {
				r = d.Get("reasoning_content")
			}
			t := d.Get("content")
			switch {
			case nonEmpty(r) && (rs.inContent || nonEmpty(t)):
				rs.Broken = "reasoning came after content"
			case nonEmpty(r):
				rs.addReasoning(r.Str)
			case nonEmpty(t):
				rs.addContent(t.Str)
			}
		}
		return rs.Broken == ""
	})
}

// continuation rewrites one data event of the continuing replica into a
// chunk of the original stream: the first chunk's id, created and model,
// no second role chunk, and usage counting the whole answer. keep false
// drops the event.
func (rs *State) Continuation(data []byte) (out []byte, keep bool) {
	if len(data) == 0 || data[0] != '{' {
		return data, true
	}
	c0 := gjson.GetBytes(data, "choices.0")
	if !rs.roleDropped && c0.Get("delta.role").Exists() && !nonEmpty(c0.Get("delta.content")) && !c0.Get("delta.tool_calls").Exists() {
		rs.roleDropped = true
		return nil, false
	}
	out = bytes.Clone(data)
	if rs.afterContent {
		for _, k := range [...]string{"reasoning", "reasoning_content"} {
			if r := c0.Get("delta." + k); nonEmpty(r) && !c0.Get("delta.content").Exists() {
				out, _ = sjson.DeleteBytes(out, "choices.0.delta."+k)
				out, _ = sjson.SetBytes(out, "choices.0.delta.content", r.Str)
			}
		}
	}
	for _, f := range [...]struct{ path, raw string }{{"id", rs.id}, {"created", rs.created}, {"model", rs.model}} {
		if f.raw != "" && gjson.GetBytes(out, f.path).Exists() {
			out, _ = sjson.SetRawBytes(out, f.path, []byte(f.raw))
		}
	}
	if u := gjson.GetBytes(out, "usage"); u.IsObject() {
		// The continuation's prompt holds the text already sent, which is
		// part of the completion: move it across (one delta ≈ one token).
		p := max(u.Get("prompt_tokens").Int()-rs.Offset, 0)
		c := u.Get("completion_tokens").Int() + rs.Offset
		out, _ = sjson.SetBytes(out, "usage.prompt_tokens", p)
		out, _ = sjson.SetBytes(out, "usage.completion_tokens", c)
		if u.Get("total_tokens").Exists() {
			out, _ = sjson.SetBytes(out, "usage.total_tokens", p+c)
		}
	}
	return out, true
}

// request is the continuation's endpoint ("" for the client's) and body
// for the client's request body.
func (rs *State) Request(body []byte) (string, []byte, error) {
	if rs.Typed == nil {
		b, err := rs.resumeBody(body)
		return "", b, err
	}
	chat, err := rs.Typed.ToChat(body)
	if err != nil {
		return "", nil, fmt.Errorf("the request cannot be continued through chat completions: %w", err)
	}
	b, err := rs.resumeBody(chat)
	return wire.Chat.Path(), b, err
}

// begin starts relaying a continuation.
func (rs *State) Begin() {
	rs.Cont, rs.roleDropped = true, false
	rs.Finish, rs.Usage = "", gjson.Result{}
}

// addReasoning and addContent record text the client was sent.
func (rs *State) addReasoning(s string) {
	if rs.inContent {
		rs.Broken = "reasoning came after content"
		return
	}
	rs.reasoning = append(rs.reasoning, s...)
	rs.tokens++
	rs.checkBuffer()
}

func (rs *State) addContent(s string) {
	rs.content = append(rs.content, s...)
	rs.inContent = true
	rs.tokens++
	rs.checkBuffer()
}

func (rs *State) checkBuffer() {
	if len(rs.reasoning)+len(rs.content) > rs.maxBuffer {
		rs.Broken, rs.reasoning, rs.content = "the answer outgrew resume.max_buffer", nil, nil
	}
}

// Reasoning in the partial assistant message is written the way reasoning
// models' chat templates render a thinking turn, so that the template
// renders the prompt to end where the text sent so far ends.
const (
	thinkOpen  = "<think>\n"
	thinkClose = "\n</think>\n\n"
)

// resumeBody is the request that asks another replica to continue the
// answer: the original request with the text sent so far appended as a
// partial assistant message to continue (continue_final_message), and
// max_tokens reduced by what was generated. Reasoning sent so far is
// written "<think>\n" + reasoning, followed, once content was sent, by
// "\n</think>\n\n" + content (also when a Responses reasoning item or a
// Messages thinking block was closed before any content). With nothing
// sent yet it is the original request.
func (rs *State) resumeBody(body []byte) ([]byte, error) {
	rs.Offset = int64(rs.tokens)
	closed := rs.inContent || rs.reasoningDone
	rs.afterContent = closed
	if len(rs.reasoning)+len(rs.content) == 0 {
		return body, nil
	}
	partial := string(rs.content)
	if len(rs.reasoning) > 0 {
		partial = thinkOpen + string(rs.reasoning)
		if closed {
			partial += thinkClose + string(rs.content)
		}
	}
	msg, err := sjson.SetBytes([]byte(`{"role":"assistant"}`), "content", partial)
	if err != nil {
		return nil, err
	}
	if body, err = sjson.SetRawBytes(body, "messages.-1", msg); err != nil {
		return nil, err
	}
	body, _ = sjson.SetBytes(body, "continue_final_message", true)
	body, _ = sjson.SetBytes(body, "add_generation_prompt", false)
	for _, k := range []string{"max_tokens", "max_completion_tokens"} {
		if v := gjson.GetBytes(body, k); v.Type == gjson.Number {
			body, _ = sjson.SetBytes(body, k, max(v.Int()-int64(rs.tokens), 1))
		}
	}
	return body, nil
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

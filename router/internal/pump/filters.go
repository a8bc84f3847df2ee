package pump

import (
	"bytes"
	"fmt"

	"github.com/tidwall/gjson"

	"github.com/switchyard/switchyard/router/internal/sse"
	"github.com/switchyard/switchyard/router/internal/wire"
)

// The pump's reading loop knows no API: each data event on its way to the
// client runs through the filters of its stream's API, in order, and a
// filter sees the edits of those before it. A filter may edit the event
// (ev and data stay one event: data is ev's data), note what it carries
// (the first token, usage, the terminal event, ids), or drop it (ev nil),
// which ends the chain. One event then flows one way: read, filters,
// client.

// event is one data event in the filters.
type event struct {
	ev, data []byte
	// root and typ, for an event of a typed API (Responses, Messages),
	// are its parsed data and its type.
	root gjson.Result
	typ  string
}

// A filter is one step of an event's way to the client.
type filter func(p *Pump, e *event)

// The chains, by API. Chat and completions: the model rewritten, the
// stream followed for resume (a continuation's chunk rewritten first),
// content after a choice's finish reason dropped (ended.go), the first
// token, usage read and the injected usage removed. Responses: the event
// parsed, dropped after its item's or the answer's end, followed, tokens
// and the terminal event, calls to custom tools, the sequence number,
// response ids and vLLM's per-turn usage, the model rewritten. Messages:
// parsed, dropped after its block's or the answer's end, followed, tokens,
// usage and the terminal event, the model rewritten.
var (
	chatFilters      = []filter{chatModel, chatFollow, chatFinish, chatToken, chatUsage}
	responsesFilters = []filter{typedParse, responsesEnd, typedFollow, responsesNote, responsesCustom, responsesSeq, responsesIDs, responsesModel}
	messagesFilters  = []filter{typedParse, messagesEnd, typedFollow, messagesNote, messagesModel}
)

// filtered runs one event through the filters of p's API and returns what
// to send the client (nil: drop it).
func (p *Pump) filtered(ev, data []byte) []byte {
	p.cur = event{ev: ev, data: data}
	p.filter(&p.cur)
	out := p.cur.ev
	p.cur = event{} // no reference into the read buffer outlives the event
	return out
}

// filter runs e through the filters of p's API.
func (p *Pump) filter(e *event) {
	chain := chatFilters
	switch p.API {
	case wire.Responses:
		chain = responsesFilters
	case wire.Messages:
		chain = messagesFilters
	}
	for _, f := range chain {
		if f(p, e); e.ev == nil {
			return
		}
	}
}

func chatModel(p *Pump, e *event) {
	if p.RewriteModel != "" {
		e.ev, e.data = p.rewrite(e.ev, e.data, "model")
	}
}

// chatFollow feeds the stream being followed for resume: a continuation's
// chunk is first rewritten into one of the original stream, then what the
// client is sent is observed, before any in-place edit of the event.
func chatFollow(p *Pump, e *event) {
	rs := p.Resume
	if rs == nil {
		return
	}
	if rs.Cont {
		out, keep := rs.Continuation(e.data)
		if !keep {
			e.ev = nil
			return
		}
		e.ev = append(append(append(make([]byte, 0, len(out)+8), "data: "...), out...), '\n', '\n')
		e.data = e.ev[len("data: ") : len(e.ev)-2]
	}
	rs.Observe(e.data)
}

func chatToken(p *Pump, e *event) {
	if !p.sawToken && hasToken(e.data) {
		p.sawToken = true
		if p.Token != nil {
			p.Token.FirstToken()
		}
	}
	if p.sawToken {
		p.Deltas++ // an estimate: chunks from the first token on
	}
}

func chatUsage(p *Pump, e *event) { e.ev = p.chatUsage(e.ev, e.data) }

// typedParse refuses an event nested too deeply to parse safely and
// parses the rest.
func typedParse(p *Pump, e *event) {
	if !wire.CheckDepth(e.data, p.depthBound()) {
		p.Refused = fmt.Errorf("the replica sent an event nesting JSON deeper than %d levels", p.depthBound())
		e.ev = nil
		return
	}
	e.root = gjson.ParseBytes(e.data)
	e.typ = e.root.Get("type").Str
}

// typedFollow feeds the stream being followed for resume what the client
// is sent (while a continuation runs its translation keeps following what
// was sent, even once the answer cannot be resumed again).
func typedFollow(p *Pump, e *event) {
	if rs := p.Resume; rs != nil && rs.Typed != nil && (rs.Broken == "" || rs.Cont) {
		rs.Typed.Observe(e.typ, e.root)
	}
}

func responsesNote(p *Pump, e *event) {
	switch e.typ {
	case "response.output_text.delta", "response.function_call_arguments.delta", "response.refusal.delta":
		p.noteToken()
	case "response.completed", "response.incomplete", "response.failed":
		p.complete = true
		if u := e.root.Get("response.usage"); u.IsObject() {
			p.Prompt, p.Completion, p.SawUsage = u.Get("input_tokens").Int(), u.Get("output_tokens").Int(), true
		}
		p.UsageModel = e.root.Get("response.model").Str
	}
}

// responsesCustom turns calls to the request's custom tools back into
// custom tool calls; the event may become two (numbered for the client,
// ids to rewrite: the last one's data is what the filters after see).
func responsesCustom(p *Pump, e *event) {
	if p.Custom == nil {
		return
	}
	nev, nd := p.customEvent(e.ev, e.data, e.root, e.typ)
	if nev == nil {
		e.ev = nil
		return
	}
	if !bytes.Equal(nd, e.data) {
		e.data, e.root = nd, gjson.ParseBytes(nd)
	}
	e.ev = nev
}

// responsesSeq keeps the highest sequence number the client was sent, so
// that an event the gateway adds (an error, a continuation's) follows every
// one of them even when the replica's numbers went back.
func responsesSeq(p *Pump, e *event) {
	if n := e.root.Get("sequence_number"); n.Exists() {
		p.seq = max(p.seq, n.Int())
	}
}

// responsesIDs gives the response object the ids clients see (naming the
// replica) and its usage without vLLM's per-turn arrays.
func responsesIDs(p *Pump, e *event) {
	if !e.root.Get("response.id").Exists() {
		return
	}
	nd := wire.TrimUsage(e.data, "response.")
	if p.IDTag != "" {
		nd = wire.EncodeResponseIDs(nd, p.IDTag, p.IDs)
	}
	if !bytes.Equal(nd, e.data) {
		e.ev = sse.RebuildData(e.ev, nd)
		e.data, _ = sse.EventData(e.ev)
	}
}

func responsesModel(p *Pump, e *event) {
	if p.RewriteModel != "" && e.root.Get("response.model").Exists() {
		e.ev, _ = p.rewrite(e.ev, e.data, "response.model")
	}
}

func messagesNote(p *Pump, e *event) {
	switch e.typ {
	case "message_start":
		u := e.root.Get("message.usage")
		p.Prompt, p.Completion, p.SawUsage = u.Get("input_tokens").Int(), u.Get("output_tokens").Int(), u.IsObject()
		p.UsageModel = e.root.Get("message.model").Str
	case "content_block_delta":
		p.noteToken()
	case "message_delta":
		// Its usage is cumulative: the final output_tokens (and input
		// tokens, when the server repeats them).
		if u := e.root.Get("usage"); u.IsObject() {
			if o := u.Get("output_tokens"); o.Exists() {
				p.Completion, p.SawUsage = o.Int(), true
			}
			if i := u.Get("input_tokens"); i.Exists() && i.Int() > 0 {
				p.Prompt = i.Int()
			}
		}
	case "message_stop":
		p.complete = true
	}
}

func messagesModel(p *Pump, e *event) {
	if e.typ == "message_start" && p.RewriteModel != "" {
		e.ev, _ = p.rewrite(e.ev, e.data, "message.model")
	}
}

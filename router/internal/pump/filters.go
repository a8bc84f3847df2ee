package pump

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/tidwall/gjson"

	"github.com/switchyard/switchyard/router/internal/resume"
	"github.com/switchyard/switchyard/router/internal/sse"
	"github.com/switchyard/switchyard/router/internal/wire"
)

// The pump's reading loop knows no API: each data event on its way to the
// client runs through the filters of its stream's API, in order, and a
// filter sees the edits of those before it. A filter may edit the event
// (ev and data stay one event: data is ev's data), note what it carries
// (the first token, usage, the terminal event, ids) in a small state of its
// own, drop it (ev nil), which ends the chain, or refuse it (an error: the
// event cannot be relayed safely and the stream ends as cut). A filter
// never reaches back into the pump: what it needs is given to it when the
// chain is built, and the pump reads what it noted once the event went
// through. One event then flows one way: read, filters, client.

// event is one data event in the filters.
type event struct {
	ev, data []byte
	// root and typ, for an event of a typed API (Responses, Messages),
	// are its parsed data and its type.
	root gjson.Result
	typ  string
}

// A filter is one step of an event's way to the client.
type filter interface {
	filter(e *event) error
}

// maxChain bounds the filters of one API's chain (Responses with custom
// tools has the most: 10).
const maxChain = 10

// The chains, by API. Chat and completions: the model rewritten, the
// stream followed for resume (a continuation's chunk rewritten first),
// content after a choice's finish reason dropped (ended.go), the first
// token, usage read and the injected usage removed. Responses: the event
// parsed, dropped after its item's or the answer's end, followed, tokens,
// usage and the terminal event, calls to custom tools, the sequence
// number, response ids and vLLM's per-turn usage, the model rewritten.
// Messages: parsed, dropped after its block's or the answer's end,
// followed, tokens, usage and the terminal event, the model rewritten.
//
// chain builds p's chain over the filters' states, which live in p so
// that building it allocates nothing and what they noted outlives it (a
// continuation runs the pump again). The filters are given p's settings
// as they are now.
func (p *Pump) chain() []filter {
	depth := p.depthBound()
	f := &p.filters
	f.model.to = p.RewriteModel
	f.follow.rs = p.Resume
	f.tokens.token = p.Token
	f.usage.injected, f.usage.depth = p.Injected, depth
	f.parse.depth = depth
	f.custom.tools = p.Custom
	f.ids.tag, f.ids.ids = p.IDTag, p.IDs
	c := f.chain[:0]
	switch p.API {
	case wire.Responses:
		c = append(c, &f.parse, (*responsesEnds)(&f.ends), (*typedFollow)(&f.follow),
			(*responsesTokens)(&f.tokens), (*responsesUsage)(&f.usage), (*responsesTerminal)(&f.terminal))
		if f.custom.tools != nil {
			c = append(c, &f.custom)
		}
		c = append(c, &f.seq, &f.ids, (*responsesModel)(&f.model))
	case wire.Messages:
		c = append(c, &f.parse, (*messagesEnds)(&f.ends), (*typedFollow)(&f.follow),
			(*messagesTokens)(&f.tokens), (*messagesUsage)(&f.usage), (*messagesTerminal)(&f.terminal), (*messagesModel)(&f.model))
	default:
		c = append(c, chatValid{}, (*chatModel)(&f.model), (*chatFollow)(&f.follow), (*chatEnds)(&f.ends), (*chatTokens)(&f.tokens), &f.usage)
	}
	return c
}

// filtered runs one event through p's chain and returns what to send the
// client (nil: drop it); a filter's refusal becomes p.Refused, which ends
// the stream as cut.
func (p *Pump) filtered(ev, data []byte) []byte {
	if p.active == nil {
		p.active = p.chain()
	}
	p.cur = event{ev: ev, data: data}
	for _, f := range p.active {
		if err := f.filter(&p.cur); err != nil {
			p.Refused = err
			p.cur.ev = nil
		}
		if p.cur.ev == nil {
			break
		}
	}
	out := p.cur.ev
	p.cur = event{} // no reference into the read buffer outlives the event
	return out
}

// filterState is the filters' own state, one small struct each.
type filterState struct {
	model  modelRewrite
	follow follow
	ends   endState
	tokens tokenNote
	usage  usageNote
	parse  parse
	// terminal: the stream sent its API's terminal event
	// (response.completed, .incomplete or .failed; message_stop), so its
	// end is a normal end.
	terminal bool
	custom   customStream
	seq      seqNote
	ids      responseIDs
	chain    [maxChain]filter
}

// modelRewrite replaces the model named in the stream with to
// (models[].rewrite_response_model); "" leaves it.
type modelRewrite struct{ to string }

type (
	chatModel      modelRewrite
	responsesModel modelRewrite
	messagesModel  modelRewrite
)

func (m *chatModel) filter(e *event) error {
	if m.to != "" {
		e.ev, e.data = rewrite(e.ev, e.data, "model", m.to)
	}
	return nil
}

func (m *responsesModel) filter(e *event) error {
	if m.to != "" && e.root.Get("response.model").Exists() {
		e.ev, _ = rewrite(e.ev, e.data, "response.model", m.to)
	}
	return nil
}

func (m *messagesModel) filter(e *event) error {
	if e.typ == "message_start" && m.to != "" {
		e.ev, _ = rewrite(e.ev, e.data, "message.model", m.to)
	}
	return nil
}

// follow feeds the stream being followed for resume (nil: none).
type follow struct{ rs *resume.State }

type (
	chatFollow  follow
	typedFollow follow
)

// filter, for chat, feeds the stream being followed: a continuation's
// chunk is first rewritten into one of the original stream, then what the
// client is sent is observed, before any in-place edit of the event.
func (f *chatFollow) filter(e *event) error {
	rs := f.rs
	if rs == nil {
		return nil
	}
	if rs.Cont {
		out, keep := rs.Continuation(e.data)
		if !keep {
			e.ev = nil
			return nil
		}
		e.ev = append(append(append(make([]byte, 0, len(out)+8), "data: "...), out...), '\n', '\n')
		e.data = e.ev[len("data: ") : len(e.ev)-2]
	}
	rs.Observe(e.data)
	return nil
}

// filter, for a typed API, feeds the stream being followed what the client
// is sent (while a continuation runs its translation keeps following what
// was sent, even once the answer cannot be resumed again).
func (f *typedFollow) filter(e *event) error {
	if rs := f.rs; rs != nil && rs.Typed != nil && (rs.Broken == "" || rs.Cont) {
		rs.Typed.Observe(e.typ, e.root)
	}
	return nil
}

// tokenNote notes the first token (telling token once) and counts the
// token-bearing events relayed.
type tokenNote struct {
	token interface{ FirstToken() }
	saw   bool
	// Deltas counts the token-bearing events relayed (for chat, the
	// chunks from the first token on): the completion tokens counted when
	// a stream ends before its usage arrives.
	Deltas int64
}

// note counts one token-bearing event of a typed API.
func (t *tokenNote) note() {
	t.Deltas++
	t.first()
}

func (t *tokenNote) first() {
	if !t.saw {
		t.saw = true
		if t.token != nil {
			t.token.FirstToken()
		}
	}
}

type chatTokens tokenNote

func (t *chatTokens) filter(e *event) error {
	n := (*tokenNote)(t)
	if !n.saw && hasToken(e.data) {
		n.first()
	}
	if n.saw {
		n.Deltas++ // an estimate: chunks from the first token on
	}
	return nil
}

// Usage is what the stream said of its tokens, as its usage filter noted
// it: SawUsage when it said anything, the prompt and completion tokens,
// and the model its usage names.
type Usage struct {
	SawUsage           bool
	Prompt, Completion int64
	UsageModel         string
}

// usageNote reads a chat or completions chunk's usage into Usage and, when
// the gateway asked for usage on the client's behalf (injected), removes
// it (see chatUsage).
type usageNote struct {
	Usage
	injected bool
	depth    int
}

func (u *usageNote) filter(e *event) error {
	var err error
	e.ev, err = u.chatUsage(e.ev, e.data)
	return err
}

// chatValid refuses a chat or completions event that is not one JSON
// object (a stray line of text, a NUL): the replica is broken, and the
// client's SDK would fail on it. The stream ends as cut (resumed where
// the pool resumes).
type chatValid struct{}

func (chatValid) filter(e *event) error {
	d := bytes.TrimSpace(e.data)
	if len(d) == 0 || d[0] != '{' || !gjson.ValidBytes(d) {
		e.ev = nil
		return errors.New("the replica sent an event that is not a JSON object")
	}
	return nil
}

// parse refuses an event nested too deeply to parse safely and parses the
// rest.
type parse struct{ depth int }

func (p *parse) filter(e *event) error {
	if !wire.CheckDepth(e.data, p.depth) {
		e.ev = nil
		return fmt.Errorf("the replica sent an event nesting JSON deeper than %d levels", p.depth)
	}
	e.root = gjson.ParseBytes(e.data)
	e.typ = e.root.Get("type").Str
	return nil
}

type (
	responsesTokens   tokenNote
	messagesTokens    tokenNote
	responsesUsage    usageNote
	messagesUsage     usageNote
	responsesTerminal bool
	messagesTerminal  bool
)

func (t *responsesTokens) filter(e *event) error {
	switch e.typ {
	case "response.output_text.delta", "response.function_call_arguments.delta", "response.refusal.delta":
		(*tokenNote)(t).note()
	}
	return nil
}

func (t *messagesTokens) filter(e *event) error {
	if e.typ == "content_block_delta" {
		(*tokenNote)(t).note()
	}
	return nil
}

func (u *responsesUsage) filter(e *event) error {
	switch e.typ {
	case "response.completed", "response.incomplete", "response.failed":
		if r := e.root.Get("response.usage"); r.IsObject() {
			u.Prompt, u.Completion, u.SawUsage = r.Get("input_tokens").Int(), r.Get("output_tokens").Int(), true
		}
		u.UsageModel = e.root.Get("response.model").Str
	}
	return nil
}

func (u *messagesUsage) filter(e *event) error {
	switch e.typ {
	case "message_start":
		r := e.root.Get("message.usage")
		u.Prompt, u.Completion, u.SawUsage = r.Get("input_tokens").Int(), r.Get("output_tokens").Int(), r.IsObject()
		u.UsageModel = e.root.Get("message.model").Str
	case "message_delta":
		// Its usage is cumulative: the final output_tokens (and input
		// tokens, when the server repeats them).
		if r := e.root.Get("usage"); r.IsObject() {
			if o := r.Get("output_tokens"); o.Exists() {
				u.Completion, u.SawUsage = o.Int(), true
			}
			if i := r.Get("input_tokens"); i.Exists() && i.Int() > 0 {
				u.Prompt = i.Int()
			}
		}
	}
	return nil
}

func (t *responsesTerminal) filter(e *event) error {
	switch e.typ {
	case "response.completed", "response.incomplete", "response.failed":
		*t = true
	}
	return nil
}

func (t *messagesTerminal) filter(e *event) error {
	if e.typ == "message_stop" {
		*t = true
	}
	return nil
}

// filter turns calls to the request's custom tools back into custom tool
// calls; the event may become two (numbered for the client, ids to
// rewrite: the last one's data is what the filters after see).
func (cs *customStream) filter(e *event) error {
	nev, nd := cs.event(e.ev, e.data, e.root, e.typ)
	if nev == nil {
		e.ev = nil
		return nil
	}
	if !bytes.Equal(nd, e.data) {
		e.data, e.root = nd, gjson.ParseBytes(nd)
	}
	e.ev = nev
	return nil
}

// seqNote keeps the highest sequence number the client was sent, so that
// an event the gateway adds (an error, a continuation's) follows every one
// of them even when the replica's numbers went back.
type seqNote struct{ last int64 }

func (s *seqNote) filter(e *event) error {
	if n := e.root.Get("sequence_number"); n.Exists() {
		s.last = max(s.last, n.Int())
	}
	return nil
}

// responseIDs gives the response object the ids clients see (naming the
// replica: tag, signed with ids; no tag leaves them) and its usage without
// vLLM's per-turn arrays.
type responseIDs struct {
	tag string
	ids wire.ResponseIDs
}

func (r *responseIDs) filter(e *event) error {
	if !e.root.Get("response.id").Exists() {
		return nil
	}
	nd := wire.TrimUsage(e.data, "response.")
	if r.tag != "" {
		nd = wire.EncodeResponseIDs(nd, r.tag, r.ids)
	}
	if !bytes.Equal(nd, e.data) {
		e.ev = sse.RebuildData(e.ev, nd)
		e.data, _ = sse.EventData(e.ev)
	}
	return nil
}

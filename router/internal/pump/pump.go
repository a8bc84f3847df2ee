package pump

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/switchyard/switchyard/router/internal/resume"

	"github.com/switchyard/switchyard/router/internal/upstream"

	"github.com/switchyard/switchyard/router/internal/wire"

	"github.com/switchyard/switchyard/router/internal/sse"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// Stream buffers start small (an SSE chunk is a few hundred bytes) so that
// thousands of open streams stay cheap; an event that does not fit grows it.
var streamBufPool = sync.Pool{New: func() any { b := make([]byte, 2<<10); return &b }}

// maxEvent bounds one SSE event of a chat or completions stream held while
// looking for its end; a longer event is passed through unparsed. The
// Responses and Messages APIs echo the request in some events (the
// Responses API's response.created and response.completed carry its
// instructions and metadata), which hold ids to rewrite and the terminal
// event, so their events may be held up to maxTypedEvent (the bound of a
// non-stream answer) and are refused beyond it.
const (
	maxEvent      = 4 << 20
	maxTypedEvent = 64 << 20
)

// eventLimit is the largest event p holds whole.
func (p *Pump) eventLimit() int {
	if p.typed() {
		return maxTypedEvent
	}
	return maxEvent
}

var (
	usageKey  = []byte(`"usage"`)
	doneValue = []byte("[DONE]")
)

// ErrStreamCut: the replica's stream ended without its final [DONE].
var ErrStreamCut = errors.New("the replica ended the stream before it was complete")

// ErrClientGone: a write or flush to the client failed, so the client has
// gone even if the request context does not say so yet. It is never held
// against the replica.
var ErrClientGone = errors.New("client went away")

// Pump copies one SSE stream from a replica to the client as it comes: the
// complete events of each read are written and flushed at once; nothing
// waits for more data. Events are found as the SSE specification defines
// them (lines end in CR, LF or CRLF; a blank line ends an event) and pass
// through byte for byte, event:, id:, retry: and comment lines included,
// except for the usage the gateway asked for on the client's behalf, which
// is removed. It notes the first token, and reads usage wherever the
// replica puts it. Its filters' chain points into it: a Pump is not copied
// once Run began.
type Pump struct {
	W  io.Writer
	RC *http.ResponseController
	// WriteTimeout, when positive, is the longest a write to the client
	// may make no progress (server.write_timeout).
	WriteTimeout time.Duration
	deadline     time.Time
	// Injected: the client did not ask for usage; the gateway did.
	Injected bool
	// Clock, when set, is told of every read that brought data.
	Clock *upstream.Clock
	// Token, when set, is told once of the first content or tool-call
	// delta.
	Token interface{ FirstToken() }
	// Resume, when set, follows what the client was sent so that the
	// stream can be continued on another replica (and, while relaying a
	// continuation, rewrites its chunks).
	Resume *resume.State

	// API is the API of the stream: the Responses and Messages APIs end
	// with their own terminal event, not [DONE], and carry usage and
	// tokens in their own events.
	API wire.Endpoint
	// RewriteModel, when set, replaces the model named in the stream
	// (models[].rewrite_response_model).
	RewriteModel string

	// SawDone: the stream's [DONE] came.
	SawDone bool
	// IDTag, for a Responses stream, is the replica's tag for the
	// response ids clients see, and IDs signs them (see storedPrefix).
	IDTag string
	IDs   wire.ResponseIDs
	// MaxDepth bounds how deeply replica data may nest before the pump
	// parses it (server.max_json_depth; 0: the default).
	MaxDepth int
	// Refused, when set, is why an event from the replica could not be
	// relayed safely (a filter refused it); the stream ends as cut.
	Refused error
	// midEvent: the bytes written so far end inside an event (an event
	// too long to parse was passed through), so an error event needs a
	// blank line first.
	midEvent bool
	// Custom, for a Responses stream whose request offered custom tools,
	// names them: their function calls reach the client as custom tool
	// calls (customStream). Nil for every other stream, which is not
	// looked at for them.
	Custom wire.CustomTools
	// cur is the event in the filters: a field, so that passing it to
	// them (calls through interfaces) allocates nothing.
	cur event
	// filters are the filters' own states (filters.go), read once an
	// event went through them; active is the chain over them that Run
	// built from the settings above.
	filters filterState
	active  []filter
}

// Usage is what the stream said of its tokens so far.
func (p *Pump) Usage() Usage { return p.filters.usage.Usage }

// Deltas counts the token-bearing events relayed (for chat, the chunks
// from the first token on): the completion tokens counted when a stream
// ends before its usage arrives.
func (p *Pump) Deltas() int64 { return p.filters.tokens.Deltas }

// complete reports that a Responses or Messages stream sent its terminal
// event, so its end is a normal end.
func (p *Pump) complete() bool { return p.filters.terminal }

// seq is the last sequence_number of a Responses stream the client was
// sent, so that an event the gateway adds can follow it.
func (p *Pump) seq() int64 { return p.filters.seq.last }

// Run pumps body to the client until the stream ends. It returns nil once
// the [DONE] event has been passed to the client (however the client or
// the replica closes afterwards), ErrClientGone (wrapped) when writing to
// the client failed, or ErrStreamCut (wrapped with the read error) when the
// stream ended without [DONE]. Run writes no error event itself; see
// (*Pump).Fail.
func (p *Pump) Run(body io.Reader) error {
	p.active = p.chain()
	bp := streamBufPool.Get().(*[]byte)
	defer streamBufPool.Put(bp)
	buf := *bp
	start, end := 0, 0
	// scan is where the search for the end of the pending event resumes
	// (relative to start), so a slowly arriving event is scanned once,
	// not once per read.
	scan := 0
	for {
		if end == len(buf) {
			var err error
			if buf, start, end, scan, err = p.room(buf, start, end, scan); err != nil {
				return err
			}
		}
		n, rerr := body.Read(buf[end:])
		end += n
		next, wrote, err := p.events(buf[:end], start, scan)
		if err != nil {
			return err
		}
		start, scan = next.start, next.scan
		if wrote {
			if err := p.Flush(); err != nil {
				return err
			}
		}
		if p.SawDone && p.typed() && !p.complete() {
			// These APIs end with their own terminal event; a [DONE]
			// before it ends an answer that is not whole.
			return fmt.Errorf("%w: [DONE] came before the stream's terminal event", ErrStreamCut)
		}
		if p.SawDone {
			// The answer is complete: how the replica or the client ends
			// the connection now does not matter. The replica's own end
			// of the response follows at once; reading it lets the
			// transport reuse the connection instead of closing it.
			if rerr == nil {
				p.drain(body, buf)
			}
			return nil
		}
		if start == end {
			start, end, scan = 0, 0, 0
		}
		if rerr == nil {
			continue
		}
		return p.ended(buf[start:end], rerr)
	}
}

// room makes room in a full buf: it moves the pending event to the front,
// grows buf up to the event limit, or, for an event over it, refuses it
// (typed APIs) or passes what was read of it through unread.
func (p *Pump) room(buf []byte, start, end, scan int) ([]byte, int, int, int, error) {
	switch {
	case start > 0:
		end = copy(buf, buf[start:end])
		return buf, 0, end, scan, nil
	case len(buf) < p.eventLimit():
		nb := make([]byte, min(2*len(buf), p.eventLimit()))
		end = copy(nb, buf[:end])
		return nb, start, end, scan, nil
	case p.typed():
		// Their events carry ids to rewrite and the terminal
		// event: one that cannot be read whole is refused.
		return buf, start, end, scan, fmt.Errorf("%w: the replica sent an event larger than %d bytes", ErrStreamCut, p.eventLimit())
	}
	// One event larger than maxEvent: pass it through unparsed (its
	// invalid UTF-8 replaced all the same), holding back a character cut
	// short at the end of what was read. Its rest is passed through
	// unread when its end comes.
	cut := end - wire.PartialRune(buf[:end])
	if err := p.Write(wire.ValidUTF8(buf[:cut])); err != nil {
		return buf, start, end, scan, err
	}
	p.midEvent = true
	if p.Resume != nil {
		// Unread, so not followed: a continuation would not
		// know what the client was sent.
		p.Resume.Broken = "an event over the size limit was passed through unread"
	}
	return buf, 0, copy(buf, buf[cut:end]), 0, nil
}

// position is where events resumes: the start of the pending bytes and
// where the search for their event's end resumes.
type position struct{ start, scan int }

// events writes the complete events of b[start:], returning where the
// pending bytes start and whether anything was written (to be flushed).
// It stops after [DONE] and at an event it refuses.
func (p *Pump) events(b []byte, start, scan int) (position, bool, error) {
	wrote := false
	for {
		ev, next, resume := sse.NextEvent(b[start:], scan)
		if ev == nil {
			return position{start, resume}, wrote, nil
		}
		start += next
		scan = 0
		if p.midEvent {
			// The end of an event too long to parse.
			if err := p.Write(wire.ValidUTF8(ev)); err != nil {
				return position{}, wrote, err
			}
			p.midEvent, wrote = false, true
			continue
		}
		out, keep := p.event(ev)
		if p.Refused != nil {
			// Flush what came before: the client keeps every event
			// that was whole.
			if wrote {
				if err := p.Flush(); err != nil {
					return position{}, wrote, err
				}
			}
			return position{}, false, fmt.Errorf("%w: %w", ErrStreamCut, p.Refused)
		}
		if !keep {
			if p.SawDone {
				return position{start, 0}, wrote, nil // a [DONE] these APIs do not have: the end all the same
			}
			continue
		}
		if err := p.Write(out); err != nil {
			return position{}, wrote, err
		}
		wrote = true
		if p.SawDone {
			return position{start, 0}, wrote, nil // anything after [DONE] is not for the client
		}
	}
}

// ended is the verdict on a body that ended (rerr) with tail unread.
func (p *Pump) ended(tail []byte, rerr error) error {
	if len(tail) > 0 && !p.midEvent {
		// The stream ended inside an event. A client parser drops an
		// incomplete event, so it is not passed on; a [DONE] whose
		// blank line is missing still completes the stream.
		if data, ok := sse.EventData(tail); ok && bytes.Equal(bytes.TrimSpace(data), doneValue) && !p.typed() {
			end := []byte("\n\n")
			if tail[len(tail)-1] == '\n' {
				end = end[1:] // the line is ended; add the blank line
			}
			if err := p.Write(wire.ValidUTF8(tail)); err != nil {
				return err
			}
			if err := p.Write(end); err != nil {
				return err
			}
			if err := p.Flush(); err != nil {
				return err
			}
			p.SawDone = true
			return nil
		}
	}
	if p.complete() {
		// The terminal event was sent: however the replica ends the
		// connection now, the client has its whole answer.
		return nil
	}
	if errors.Is(rerr, io.EOF) {
		return ErrStreamCut
	}
	return fmt.Errorf("%w: %w", ErrStreamCut, rerr)
}

// drain reads what follows [DONE] to the end of the replica's response,
// at most 64 KiB and, with a clock, for at most drainWait: nothing of it
// goes to the client.
func (p *Pump) drain(body io.Reader, buf []byte) {
	if p.Clock != nil {
		p.Clock.DrainSoon()
	}
	for total := 0; total < 64<<10; {
		n, err := body.Read(buf)
		total += n
		if err != nil {
			return
		}
	}
}

// event inspects one complete event and returns what to send the client,
// or keep false to drop it. Every event is first made valid UTF-8
// (wire.ValidUTF8) with no lone surrogate escape (wire.ValidEscapes):
// what the filters read, what a stream being followed for resume records
// and what the client is sent are the same text, on every API, relayed or
// continued.
func (p *Pump) event(ev []byte) (out []byte, keep bool) {
	ev = wire.ValidEscapes(wire.ValidUTF8(ev))
	data, ok := sse.EventData(ev)
	if !ok {
		return ev, true // comments, id:, retry:, blank lines
	}
	if p.Clock != nil {
		p.Clock.Event() // progress: only events with data count
	}
	if rs := p.Resume; rs != nil && rs.Cont && rs.Typed != nil {
		return p.translated(data)
	}
	if bytes.Equal(bytes.TrimSpace(data), doneValue) {
		p.SawDone = true
		if p.typed() {
			// Not part of these APIs (some vLLM versions add it after the
			// terminal event); their SDKs would read it as an event.
			return nil, false
		}
		return ev, true
	}
	out = p.filtered(ev, data)
	return out, out != nil
}

// typed reports whether the stream's API names its events' types and ends
// with a terminal event of its own (Responses, Messages).
func (p *Pump) typed() bool { return p.API.Spec().Typed }

func (p *Pump) depthBound() int {
	if p.MaxDepth > 0 {
		return p.MaxDepth
	}
	return upstream.ReplicaDepth(wire.DefaultMaxDepth)
}

// chatUsage reads and, when the gateway asked for usage on the client's
// behalf, removes the usage of a chat or completions chunk. JSON parsers
// disagree on a duplicated key (JavaScript's and Python's keep the last,
// gjson finds the first), so every top-level "usage" member is removed, the
// last one is the one counted (what the client's parser would have seen),
// and a "usage" key nested inside another value is never touched. A chunk
// that carries usage and no choice is the usage chunk the client did not
// ask for, and is dropped whole (nil).
func (u *usageNote) chatUsage(ev, data []byte) ([]byte, error) {
	k := bytes.Index(data, usageKey)
	// A key can spell "usage" with \u escapes; without one, a chunk with
	// no "usage" has no usage member.
	escaped := bytes.Contains(data, []byte(`\u`))
	if k < 0 && !escaped {
		return ev, nil
	}
	// Fast path for the "usage":null that servers add to every chunk once
	// include_usage is set: no JSON parse when it is the only "usage" and a
	// top-level key (a string value is never followed by a colon).
	if !escaped && bytes.LastIndex(data, usageKey) == k && objectDepth(data[:k]) == 1 {
		if v := sse.SkipSpace(data[k+len(usageKey):]); len(v) > 0 && v[0] == ':' {
			if v = sse.SkipSpace(v[1:]); bytes.HasPrefix(v, []byte("null")) {
				if !u.injected {
					return ev, nil
				}
				if !gjson.ValidBytes(data) {
					// Not JSON: removing the member could make it
					// JSON ({"choices":[..]"usage":null}).
					return ev, nil
				}
				valueEnd := len(data) - len(v) + len("null")
				return sse.RemoveSpan(ev, data, k, valueEnd), nil
			}
		}
	}
	if !wire.CheckDepth(data, u.depth) {
		// Too deep to parse safely, and it may carry usage.
		return nil, fmt.Errorf("the replica sent an event nesting JSON deeper than %d levels", u.depth)
	}
	if !gjson.ValidBytes(data) {
		// Not JSON: no usage to read, and no member to remove (an edit
		// could turn it into JSON that carries one).
		return ev, nil
	}
	usage := topMembers(data, "usage")
	if len(usage) == 0 {
		return ev, nil
	}
	if v := usage[len(usage)-1].val; v.IsObject() {
		u.Prompt, u.Completion = v.Get("prompt_tokens").Int(), v.Get("completion_tokens").Int()
		u.SawUsage = true
		if u.UsageModel == "" {
			u.UsageModel = gjson.GetBytes(data, "model").String()
		}
	}
	if !u.injected {
		return ev, nil
	}
	object := slices.ContainsFunc(usage, func(m member) bool { return m.val.IsObject() })
	choices := slices.ContainsFunc(topMembers(data, "choices"), func(m member) bool { return m.val.Get("0").Exists() })
	if object && !choices {
		return nil, nil // the usage chunk the client did not ask for
	}
	// Usage members in a chunk that also carries choices ("usage":null,
	// or running totals with continuous usage stats): remove them.
	nd := bytes.Clone(data)
	for i := len(usage) - 1; i >= 0; i-- {
		m := usage[i]
		nd = sse.RemoveSpan(nd, nd, m.start, m.val.Index+len(m.val.Raw))
	}
	return sse.RebuildData(ev, nd), nil
}

// rewrite sets the string at path of an event's data to model,
// rebuilding the event as one data line.
func rewrite(ev, data []byte, path, model string) ([]byte, []byte) {
	if !gjson.GetBytes(data, path).Exists() {
		return ev, data
	}
	nd, err := sjson.SetBytes(bytes.Clone(data), path, model)
	if err != nil {
		return ev, data
	}
	out := sse.RebuildData(ev, nd)
	d, _ := sse.EventData(out)
	return out, d
}

// write sends b to the client, bounding how long it may block.
func (p *Pump) Write(b []byte) error {
	p.armWrite()
	if _, err := p.W.Write(b); err != nil {
		return fmt.Errorf("%w: %w", ErrClientGone, err)
	}
	return nil
}

func (p *Pump) Flush() error {
	if p.RC == nil {
		return nil
	}
	p.armWrite()
	if err := p.RC.Flush(); err != nil {
		return fmt.Errorf("%w: %w", ErrClientGone, err)
	}
	return nil
}

// armWrite pushes the client connection's write deadline to
// write_timeout from now, at most once per quarter of it, so a write fails
// after between 3/4 and all of write_timeout without progress. net/http
// lifts the deadline once the handler returns, so a later request on the
// same connection does not inherit it.
func (p *Pump) armWrite() {
	if p.WriteTimeout <= 0 || p.RC == nil {
		return
	}
	now := time.Now()
	if p.deadline.Sub(now) > p.WriteTimeout*3/4 {
		return
	}
	p.deadline = now.Add(p.WriteTimeout)
	_ = p.RC.SetWriteDeadline(p.deadline)
}

// fail ends a stream the replica cut with an error event, starting on a
// fresh line, and no [DONE]; the handler then ends the response normally.
// The event is not a fake success: the OpenAI Node and Go SDKs, LangChain
// JS and the Vercel AI SDK all raise it with its message (router's SDK
// test). Aborting
// the connection instead, as a proxy without an error channel must, makes
// the Vercel AI SDK report only "Failed to process successful response".
func (p *Pump) Fail(ae *wire.APIError) {
	if p.midEvent {
		_ = p.Write([]byte("\n\n"))
	}
	switch p.API {
	case wire.Responses:
		// The Responses API's error event, numbered after the last event.
		_ = p.Write([]byte("event: error\ndata: "))
		_ = p.Write(ae.ResponsesEvent(p.seq() + 1))
	case wire.Messages:
		_ = p.Write([]byte("event: error\ndata: "))
		_ = p.Write(ae.AnthropicBody())
	default:
		_ = p.Write([]byte("data: "))
		_ = p.Write(ae.Body())
	}
	_ = p.Write([]byte("\n\n"))
	_ = p.Flush()
}

// hasToken reports whether a chunk carries the first generated content: a
// non-empty content or text delta, or a tool-call delta.
func hasToken(data []byte) bool {
	if !bytes.Contains(data, []byte(`"content"`)) && !bytes.Contains(data, []byte(`"tool_calls"`)) && !bytes.Contains(data, []byte(`"text"`)) {
		return false
	}
	c := gjson.GetBytes(data, "choices.0")
	if d := c.Get("delta"); d.Exists() {
		if s := d.Get("content"); s.Type == gjson.String && s.Str != "" {
			return true
		}
		return d.Get("tool_calls").IsArray()
	}
	t := c.Get("text")
	return t.Type == gjson.String && t.Str != ""
}

// member is one top-level member of a JSON object: where its key starts in
// the object's text, and its value (whose Index is also in that text).
type member struct {
	start int
	val   gjson.Result
}

// topMembers returns the members of the JSON object data whose key, once
// unescaped, is name, in order. data must be valid JSON.
func topMembers(data []byte, name string) []member {
	root := gjson.ParseBytes(data)
	if !root.IsObject() {
		return nil
	}
	base := len(data) - len(root.Raw)
	var out []member
	root.ForEach(func(k, v gjson.Result) bool {
		if k.Str == name {
			v.Index += base
			out = append(out, member{start: k.Index + base, val: v})
		}
		return true
	})
	return out
}

// objectDepth returns how deeply the end of the JSON text prefix nests in
// arrays and objects (-1 inside a string).
func objectDepth(prefix []byte) int {
	end, _ := wire.JSONNesting(prefix, math.MaxInt)
	return end
}

// translated relays one event of a typed stream's continuation: the chat
// chunk is translated into the client API's events, each then relayed as
// one from the replica would be (ids rewritten, tokens, usage and the
// terminal event noted).
func (p *Pump) translated(data []byte) ([]byte, bool) {
	rs := p.Resume
	if !wire.CheckDepth(data, p.depthBound()) {
		p.Refused = fmt.Errorf("the replica sent an event nesting JSON deeper than %d levels", p.depthBound())
		return nil, false
	}
	done := strings.TrimSpace(string(data)) == string(doneValue)
	var d resume.ChatDelta
	if !done {
		d = rs.ReadChatDelta(data)
		if rs.Finish != "" {
			// The continuation finished already: what follows is no
			// part of the answer (its usage aside).
			d = resume.ChatDelta{Usage: d.Usage}
		}
		if d.ToolCall {
			rs.Broken = "the continuation called a tool"
			p.Refused = fmt.Errorf("%w: %s", resume.ErrNotContinued, rs.Broken)
			return nil, false
		}
		if d.Finish != "" {
			rs.Finish = d.Finish
		}
		if d.Usage.Exists() {
			rs.Usage = d.Usage
		}
	}
	evs, err := rs.Typed.Translate(p.seq(), d, done)
	if err != nil {
		p.Refused = err
		return nil, false
	}
	if done {
		p.SawDone = true
	}
	var out []byte
	for len(evs) > 0 {
		ev, n, _ := sse.NextEvent(evs, 0)
		if ev == nil {
			break
		}
		evs = evs[n:]
		d, _ := sse.EventData(ev)
		out = append(out, p.filtered(ev, d)...)
		if p.Refused != nil {
			return nil, false
		}
	}
	return out, len(out) > 0
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

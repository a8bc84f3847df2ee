package vllmsim

import (
	"context"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// outcome is how a request ended, for Stats and metrics.
type outcome uint8

const (
	outcomeFailed    outcome = iota // cut by a fault (or an unexpected panic)
	outcomeCancelled                // the client went away
	outcomeCompleted
)

// bufPool recycles response buffers; buffers that grew large are dropped.
var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 4096); return &b }}

const maxPooledBuf = 64 << 10

// wire writes the answer of an API whose shape is not chat's or legacy
// completions' (the Responses and Messages APIs) on the exchange's schedule.
// Each method writes through x (x.buf and x.send for stream events) and
// reports whether the client is still there.
type wire interface {
	// open sends the events a stream starts with, before it is scheduled.
	open(x *exchange) bool
	// step sends token step of a stream.
	step(x *exchange, step int) bool
	// end sends the events that close a stream.
	end(x *exchange) bool
	// respond writes the whole non-stream answer.
	respond(x *exchange) bool
}

// exchange is one validated request being answered: it waits for a batch
// slot, produces tokens on the profile's schedule and writes the response.
// It is used by one goroutine only.
type exchange struct {
	s       *Server
	w       http.ResponseWriter
	rc      *http.ResponseController
	ctx     context.Context
	p       *plan
	f       *Faults
	arrival time.Time
	wire    wire // nil for chat and completions

	id      string
	created int64
	toolIDs []string // modeTool: one id per call of each choice (toolID)
	offsets []int    // completions stream logprobs: text offset per choice
	buf     *[]byte
	prefix  []byte // stream chunks: everything before the choice
	suffix  string // stream chunks: everything after the choice

	timer    *time.Timer
	events   int   // SSE data events written
	admitted bool  // holds a batch slot
	held     int64 // KV tokens held
	outcome  outcome
}

func newExchange(s *Server, w http.ResponseWriter, r *http.Request, p *plan, f *Faults, arrival time.Time) *exchange {
	x := &exchange{
		s: s, w: w, rc: http.NewResponseController(w), ctx: r.Context(), p: p, f: f, arrival: arrival,
		created: arrival.Unix(),
		buf:     bufPool.Get().(*[]byte),
	}
	switch p.ep {
	case completionEndpoint:
		x.id = s.newID("cmpl-")
	case responsesEndpoint:
		x.id = s.newID("resp_")
	default: // chat, and messages: vLLM answers them with the chat id
		x.id = s.newID("chatcmpl-")
	}
	if p.mode == modeTool {
		x.toolIDs = make([]string, p.choices()*len(p.calls))
		for i := range x.toolIDs {
			x.toolIDs[i] = s.newID("chatcmpl-tool-")
		}
	}
	return x
}

// toolID is the id of call k of choice c.
func (x *exchange) toolID(c, k int) string { return x.toolIDs[c*len(x.p.calls)+k] }

// run answers the request and settles its accounting however it ends.
func (x *exchange) run() {
	defer x.settle()
	p := x.p
	if p.stream {
		// Like vLLM, a stream's headers go out as soon as it is accepted, before
		// it is scheduled.
		x.w.Header().Set("Content-Type", "text/event-stream")
		x.w.WriteHeader(http.StatusOK)
		if x.rc.Flush() != nil {
			x.outcome = outcomeCancelled
			return
		}
		if x.wire != nil {
			if !x.wire.open(x) {
				x.outcome = outcomeCancelled
				return
			}
		} else {
			x.prepareChunks()
		}
	}
	if x.s.batch.acquire(x.ctx) != nil {
		x.outcome = outcomeCancelled
		return
	}
	x.admitted = true
	x.hold(int64(p.promptTokens))
	x.lookUpPrefix()

	// The zero-delay path (both rates 0, no SlowStart) creates no timer.
	timed := x.s.prefillSeconds > 0 || x.s.decodeStep > 0 || x.f.SlowStart > 0
	var due time.Time
	if timed {
		// Prefill computes only the tokens the prefix cache did not hold.
		prefill := time.Duration(float64(p.promptTokens-p.cached) * x.s.prefillSeconds * float64(time.Second))
		x.s.prefillNanos.Add(int64(prefill))
		due = x.s.now()
		if x.s.profile.SerialPrefill && prefill > 0 {
			due = x.s.reservePrefill(due, prefill)
		}
		due = due.Add(prefill + x.f.SlowStart)
	}
	for step := 0; step < p.steps; step++ {
		if !x.waitUntil(timed, due) {
			x.outcome = outcomeCancelled
			return
		}
		if step == 0 {
			x.firstToken()
		}
		if p.stream && !x.streamStep(step) {
			x.outcome = outcomeCancelled
			return
		}
		x.produced(int64(p.choices()))
		due = due.Add(x.s.decodeStep)
	}
	if p.stream && !x.streamEnd() || !p.stream && !x.respond() {
		x.outcome = outcomeCancelled
		return
	}
	x.outcome = outcomeCompleted
}

// settle frees the slot and KV tokens and counts the outcome. It runs when
// run returns or panics (an abort).
func (x *exchange) settle() {
	s := x.s
	if x.timer != nil {
		x.timer.Stop()
	}
	if x.admitted {
		s.kvHeld.Add(-x.held)
		s.batch.release()
	}
	switch x.outcome {
	case outcomeCompleted:
		s.completed.Add(1)
		s.metrics.finished(x.p.engineFinish)
		s.metrics.e2e.Observe(s.now().Sub(x.arrival).Seconds())
	case outcomeCancelled:
		s.cancelled.Add(1)
		s.metrics.finished("abort")
	default:
		s.failed.Add(1)
	}
	if cap(*x.buf) <= maxPooledBuf {
		*x.buf = (*x.buf)[:0]
		bufPool.Put(x.buf)
	}
}

// waitUntil waits for due on the Server's clock, or only checks the client
// when untimed; it reports whether the client is still there.
func (x *exchange) waitUntil(timed bool, due time.Time) bool {
	if timed {
		if d := due.Sub(x.s.now()); d > 0 {
			var c <-chan time.Time
			switch {
			case x.s.after != nil:
				c = x.s.after(d)
			case x.timer == nil:
				x.timer = time.NewTimer(d)
				c = x.timer.C
			default:
				x.timer.Reset(d)
				c = x.timer.C
			}
			select {
			case <-c:
				return true
			case <-x.ctx.Done():
				return false
			}
		}
	}
	return x.ctx.Err() == nil
}

// lookUpPrefix looks the admitted request's prompts up in the prefix cache
// and caches their blocks, as vLLM's scheduler does when it schedules a
// request, and sets p.cached.
func (x *exchange) lookUpPrefix() {
	s := x.s
	if s.prefix == nil {
		return
	}
	queried, hit := s.prefix.admit(x.p.cache)
	x.p.cached = hit
	s.cacheQueries.Add(int64(queried))
	s.cacheHits.Add(int64(hit))
	s.metrics.cacheQueries.Add(float64(queried))
	s.metrics.cacheHits.Add(float64(hit))
}

// firstToken accounts the end of prefill.
func (x *exchange) firstToken() {
	n := int64(x.p.promptTokens)
	x.s.promptTokens.Add(n)
	x.s.metrics.promptTokens.Add(float64(n))
	x.s.metrics.ttft.Observe(x.s.now().Sub(x.arrival).Seconds())
}

// produced accounts n output tokens.
func (x *exchange) produced(n int64) {
	x.s.completionTokens.Add(n)
	x.s.metrics.generationTokens.Add(float64(n))
	x.hold(n)
}

// cachedDetail is the cached_tokens to report in prompt_tokens_details: the
// tokens the prefix cache held, with Profile.PromptTokensDetails; 0 (the
// details stay null, as vLLM leaves them when nothing hit) otherwise.
func (x *exchange) cachedDetail() int {
	if !x.s.profile.PromptTokensDetails {
		return 0
	}
	return x.p.cached
}

// hold adds n tokens to the KV cache held by this request.
func (x *exchange) hold(n int64) {
	x.held += n
	x.s.kvHeld.Add(n)
}

// abort drops the connection, for Faults.CutAfterChunks; net/http recovers
// the panic without logging it.
func (x *exchange) abort() {
	_ = x.rc.Flush()
	panic(http.ErrAbortHandler)
}

// appendHead appends the fields every response object starts with, up to and
// including `"choices":[`.
func (x *exchange) appendHead(b []byte, object string) []byte {
	b = append(b, `{"id":`...)
	b = appendString(b, x.id)
	b = append(b, `,"object":"`...)
	b = append(b, object...)
	b = append(b, `","created":`...)
	b = strconv.AppendInt(b, x.created, 10)
	b = append(b, `,"model":`...)
	b = appendString(b, x.s.profile.Model)
	return append(b, `,"choices":[`...)
}

// prepareChunks builds the parts every stream chunk shares.
func (x *exchange) prepareChunks() {
	object := "chat.completion.chunk"
	if x.p.ep == completionEndpoint {
		object = "text_completion"
		if x.p.logprobs {
			x.offsets = make([]int, x.p.choices())
		}
	}
	x.prefix = x.appendHead(nil, object)
	x.suffix = "]}"
	if x.p.includeUsage {
		// With include_usage vLLM sends "usage":null on every other chunk.
		x.suffix = `],"usage":null}`
	}
}

// send writes the SSE event in x.buf and flushes it; it returns false when
// the client has gone. It cuts the stream once Faults.CutAfterChunks events
// have been written.
func (x *exchange) send() bool {
	if cut := x.f.CutAfterChunks; cut > 0 && x.events >= cut {
		x.abort()
	}
	if _, err := x.w.Write(*x.buf); err != nil {
		return false
	}
	x.events++
	return x.rc.Flush() == nil
}

// sendChunk wraps the choice that appendChoice appends into a chunk event
// and sends it.
func (x *exchange) sendChunk(appendChoice func(b []byte) []byte) bool {
	b := append((*x.buf)[:0], "data: "...)
	b = append(b, x.prefix...)
	b = appendChoice(b)
	b = append(b, x.suffix...)
	*x.buf = append(b, "\n\n"...)
	return x.send()
}

// streamStep sends token step of every choice, preceded on the first step by
// each chat choice's role delta.
func (x *exchange) streamStep(step int) bool {
	if x.wire != nil {
		return x.wire.step(x, step)
	}
	p := x.p
	for c := range p.choices() {
		if step == 0 && p.ep == chatEndpoint {
			ok := x.sendChunk(func(b []byte) []byte {
				b = append(b, `{"index":`...)
				b = strconv.AppendInt(b, int64(c), 10)
				return append(b, `,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}`...)
			})
			if !ok {
				return false
			}
		}
		if !x.sendChunk(func(b []byte) []byte { return x.appendDeltaChoice(b, c, step) }) {
			return false
		}
	}
	return true
}

// appendDeltaChoice appends the stream choice carrying token step of choice c.
func (x *exchange) appendDeltaChoice(b []byte, c, step int) []byte {
	p := x.p
	tok := p.token(c, step)
	b = append(b, `{"index":`...)
	b = strconv.AppendInt(b, int64(c), 10)
	if p.ep == completionEndpoint {
		b = append(b, `,"text":`...)
		b = appendString(b, tok)
		b = append(b, `,"logprobs":`...)
		if p.logprobs {
			b = x.appendLegacyLogprobs(b, c, step, step+1, x.offsets[c])
			x.offsets[c] += len(tok)
		} else {
			b = append(b, "null"...)
		}
		return append(b, `,"finish_reason":null,"stop_reason":null}`...)
	}
	switch {
	case p.mode == modeTool:
		// vLLM streams calls one after the other, each delta naming its
		// call by index (0, 1, …): the call's first delta has its id and
		// name, later ones only argument fragments.
		k, piece := p.toolStep(step)
		b = append(b, `,"delta":{"tool_calls":[{"index":`...)
		b = strconv.AppendInt(b, int64(k), 10)
		if piece < 0 {
			b = append(b, `,"id":`...)
			b = appendString(b, x.toolID(c, k))
			b = append(b, `,"type":"function","function":{"name":`...)
			b = appendString(b, p.calls[k].name)
			b = append(b, `,"arguments":""}}]},"logprobs":null`...)
			break
		}
		b = append(b, `,"function":{"arguments":`...)
		b = appendString(b, tok)
		b = append(b, `}}]},"logprobs":null`...)
	default:
		if step < p.reasoning {
			b = append(b, `,"delta":{"reasoning":`...)
		} else {
			b = append(b, `,"delta":{"content":`...)
		}
		b = appendString(b, tok)
		b = append(b, `},"logprobs":`...)
		if p.logprobs {
			b = append(b, `{"content":[`...)
			b = x.appendChatLogprob(b, c, step)
			b = append(b, "]}"...)
		} else {
			b = append(b, "null"...)
		}
	}
	return append(b, `,"finish_reason":null}`...)
}

// streamEnd sends each choice's finish_reason, the usage chunk when asked,
// and [DONE].
func (x *exchange) streamEnd() bool {
	if x.wire != nil {
		return x.wire.end(x)
	}
	p := x.p
	for c := range p.choices() {
		ok := x.sendChunk(func(b []byte) []byte {
			b = append(b, `{"index":`...)
			b = strconv.AppendInt(b, int64(c), 10)
			if p.ep == completionEndpoint {
				b = append(b, `,"text":"","logprobs":null,"finish_reason":`...)
				b = appendString(b, p.finish)
				return append(b, `,"stop_reason":null}`...)
			}
			b = append(b, `,"delta":{},"logprobs":null,"finish_reason":`...)
			b = appendString(b, p.finish)
			return append(b, '}')
		})
		if !ok {
			return false
		}
	}
	if p.includeUsage {
		b := append((*x.buf)[:0], "data: "...)
		b = append(b, x.prefix...)
		b = append(b, `],"usage":`...)
		b = appendUsage(b, p.promptTokens, p.steps*p.choices(), x.cachedDetail())
		*x.buf = append(b, "}\n\n"...)
		if !x.send() {
			return false
		}
	}
	*x.buf = append((*x.buf)[:0], "data: [DONE]\n\n"...)
	return x.send()
}

// respond writes the whole non-stream response; it returns false when the
// client has gone.
func (x *exchange) respond() bool {
	if x.wire != nil {
		return x.wire.respond(x)
	}
	p := x.p
	object := "chat.completion"
	if p.ep == completionEndpoint {
		object = "text_completion"
	}
	b := x.appendHead((*x.buf)[:0], object)
	for c := range p.choices() {
		if c > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"index":`...)
		b = strconv.AppendInt(b, int64(c), 10)
		if p.ep == completionEndpoint {
			b = append(b, `,"text":`...)
			b = x.appendText(b, c, 0, p.steps)
			b = append(b, `,"logprobs":`...)
			if p.logprobs {
				b = x.appendLegacyLogprobs(b, c, 0, p.steps, 0)
			} else {
				b = append(b, "null"...)
			}
			b = append(b, `,"finish_reason":`...)
			b = appendString(b, p.finish)
			b = append(b, `,"stop_reason":null,"prompt_logprobs":null}`...)
			continue
		}
		b = append(b, `,"message":{"role":"assistant","content":`...)
		if p.mode == modeTool {
			b = append(b, `null,"tool_calls":[`...)
			for k, call := range p.calls {
				if k > 0 {
					b = append(b, ',')
				}
				b = append(b, `{"id":`...)
				b = appendString(b, x.toolID(c, k))
				b = append(b, `,"type":"function","function":{"name":`...)
				b = appendString(b, call.name)
				b = append(b, `,"arguments":`...)
				b = appendString(b, call.args)
				b = append(b, `}}`...)
			}
			b = append(b, `]},"logprobs":null`...)
		} else {
			if p.reasoning < p.steps {
				b = x.appendText(b, c, p.reasoning, p.steps)
			} else {
				b = append(b, "null"...)
			}
			b = append(b, `,"tool_calls":[]`...)
			if p.reasoning > 0 {
				b = append(b, `,"reasoning":`...)
				b = x.appendText(b, c, 0, p.reasoning)
			}
			b = append(b, `},"logprobs":`...)
			if p.logprobs {
				b = append(b, `{"content":[`...)
				for step := range p.steps {
					if step > 0 {
						b = append(b, ',')
					}
					b = x.appendChatLogprob(b, c, step)
				}
				b = append(b, "]}"...)
			} else {
				b = append(b, "null"...)
			}
		}
		b = append(b, `,"finish_reason":`...)
		b = appendString(b, p.finish)
		b = append(b, `,"stop_reason":null}`...)
	}
	b = append(b, `],"usage":`...)
	b = appendUsage(b, p.promptTokens, p.steps*p.choices(), x.cachedDetail())
	if p.ep == chatEndpoint {
		b = append(b, `,"prompt_logprobs":null`...)
	}
	b = append(b, '}')
	*x.buf = b
	return x.writeBody()
}

// writeBody writes x.buf as the whole JSON body of a non-stream answer;
// with Faults.CutAfterChunks it promises the whole body, delivers half and
// drops the connection.
func (x *exchange) writeBody() bool {
	b := *x.buf
	h := x.w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	if x.f.CutAfterChunks > 0 {
		x.w.WriteHeader(http.StatusOK)
		_, _ = x.w.Write(b[:len(b)/2])
		x.abort()
	}
	_, err := x.w.Write(b)
	return err == nil
}

// appendText appends the text of steps [from, to) of choice c as one JSON
// string.
func (x *exchange) appendText(b []byte, c, from, to int) []byte {
	b = append(b, '"')
	for step := from; step < to; step++ {
		b = appendEscaped(b, x.p.token(c, step))
	}
	return append(b, '"')
}

// appendChatLogprob appends the chat logprobs entry of token step of choice c.
func (x *exchange) appendChatLogprob(b []byte, c, step int) []byte {
	p := x.p
	tok := p.token(c, step)
	b = append(b, `{"token":`...)
	b = appendString(b, tok)
	b = append(b, `,"logprob":`...)
	b = appendFloat(b, p.tokenLogprob(c, step))
	b = append(b, `,"bytes":`...)
	b = appendBytes(b, tok)
	b = append(b, `,"top_logprobs":[`...)
	for j := range p.topCount(c) {
		if j > 0 {
			b = append(b, ',')
		}
		t, lp := p.top(c, step, j)
		b = append(b, `{"token":`...)
		b = appendString(b, t)
		b = append(b, `,"logprob":`...)
		b = appendFloat(b, lp)
		b = append(b, `,"bytes":`...)
		b = appendBytes(b, t)
		b = append(b, '}')
	}
	return append(b, "]}"...)
}

// appendLegacyLogprobs appends the completions logprobs object of tokens
// [from, to) of choice c, whose first token starts at text offset offset.
func (x *exchange) appendLegacyLogprobs(b []byte, c, from, to, offset int) []byte {
	p := x.p
	b = append(b, `{"text_offset":[`...)
	for step := from; step < to; step++ {
		if step > from {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, int64(offset), 10)
		offset += len(p.token(c, step))
	}
	b = append(b, `],"token_logprobs":[`...)
	for step := from; step < to; step++ {
		if step > from {
			b = append(b, ',')
		}
		b = appendFloat(b, p.tokenLogprob(c, step))
	}
	b = append(b, `],"tokens":[`...)
	for step := from; step < to; step++ {
		if step > from {
			b = append(b, ',')
		}
		b = appendString(b, p.token(c, step))
	}
	b = append(b, `],"top_logprobs":[`...)
	for step := from; step < to; step++ {
		if step > from {
			b = append(b, ',')
		}
		b = append(b, '{')
		for j := range p.topCount(c) {
			if j > 0 {
				b = append(b, ',')
			}
			t, lp := p.top(c, step, j)
			b = appendString(b, t)
			b = append(b, ':')
			b = appendFloat(b, lp)
		}
		b = append(b, '}')
	}
	return append(b, "]}"...)
}

package router

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/switchyard/switchyard/router/internal/upstream"

	"github.com/switchyard/switchyard/router/internal/wire"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
	"go.opentelemetry.io/otel/trace"

	"github.com/switchyard/switchyard/pools"
)

// resumeState follows what a chat stream has sent its client, so that when
// its replica fails mid-way another replica can continue the answer (vLLM's
// continue_final_message) and the client sees one uninterrupted stream.
type resumeState struct {
	maxBuffer int
	// typed, for a Responses or Messages stream, follows that API's events
	// and translates a continuation, which vLLM can only make through chat
	// completions, back into them.
	typed typedResume
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
	broken             string // why the stream cannot be resumed ("" if it can)
	cont, roleDropped  bool   // relaying a continuation; its role chunk dropped
	// afterContent is set when the continuation in progress continues the
	// content: any reasoning delta it sends is content (a thinking block
	// closes once), whatever the continuing replica's parser calls it.
	afterContent bool
	// offset is the deltas sent before the continuation in progress: its
	// prompt holds them, its completion does not.
	offset int64
	// reasoningDone: the reasoning item or thinking block was closed
	// before any content (Responses, Messages): the partial message closes
	// the thinking block, and the continuation's reasoning is content.
	reasoningDone bool
	// finish and usage are the continuation's, for a typed API's closing
	// events.
	finish string
	usage  gjson.Result
}

func newResumeState(x *exchange, maxBuffer int, rnd func() uint64) *resumeState {
	rs := &resumeState{maxBuffer: maxBuffer}
	root := gjson.ParseBytes(x.body)
	switch x.ep {
	case wire.Responses:
		rs.typed = &responsesResume{rs: rs, rand: rnd}
	case wire.Messages:
		rs.typed = &messagesResume{rs: rs, rand: rnd}
	case wire.Chat:
	default:
		rs.broken = "not a chat completion (nor a Responses or Messages stream)"
	}
	switch {
	case root.Get("n").Int() > 1:
		rs.broken = "n > 1"
	case root.Get("logprobs").Type == gjson.True:
		rs.broken = "logprobs were requested"
	}
	return rs
}

func nonEmpty(r gjson.Result) bool { return r.Type == gjson.String && r.Str != "" }

// observe records one data event sent to the client.
func (rs *resumeState) observe(data []byte) {
	if rs.broken != "" || len(data) == 0 || data[0] != '{' {
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
			rs.broken = "more than one choice"
		case c.Get("finish_reason").Exists() && c.Get("finish_reason").Type != gjson.Null:
			rs.broken = "the answer had finished"
		case c.Get("logprobs").Exists() && c.Get("logprobs").Type != gjson.Null:
			rs.broken = "logprobs were sent"
		case d.Get("tool_calls").Exists():
			rs.broken = "a tool call was being sent"
		default:
			r := d.Get("reasoning")
			if !nonEmpty(r) {
				r = d.Get("reasoning_content")
			}
			t := d.Get("content")
			switch {
			case nonEmpty(r) && (rs.inContent || nonEmpty(t)):
				rs.broken = "reasoning came after content"
			case nonEmpty(r):
				rs.addReasoning(r.Str)
			case nonEmpty(t):
				rs.addContent(t.Str)
			}
		}
		return rs.broken == ""
	})
}

// continuation rewrites one data event of the continuing replica into a
// chunk of the original stream: the first chunk's id, created and model,
// no second role chunk, and usage counting the whole answer. keep false
// drops the event.
func (rs *resumeState) continuation(data []byte) (out []byte, keep bool) {
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
		p := max(u.Get("prompt_tokens").Int()-rs.offset, 0)
		c := u.Get("completion_tokens").Int() + rs.offset
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
func (rs *resumeState) request(body []byte) (string, []byte, error) {
	if rs.typed == nil {
		b, err := rs.resumeBody(body)
		return "", b, err
	}
	chat, err := rs.typed.toChat(body)
	if err != nil {
		return "", nil, fmt.Errorf("the request cannot be continued through chat completions: %w", err)
	}
	b, err := rs.resumeBody(chat)
	return wire.Chat.Path(), b, err
}

// begin starts relaying a continuation.
func (rs *resumeState) begin() {
	rs.cont, rs.roleDropped = true, false
	rs.finish, rs.usage = "", gjson.Result{}
}

// addReasoning and addContent record text the client was sent.
func (rs *resumeState) addReasoning(s string) {
	if rs.inContent {
		rs.broken = "reasoning came after content"
		return
	}
	rs.reasoning = append(rs.reasoning, s...)
	rs.tokens++
	rs.checkBuffer()
}

func (rs *resumeState) addContent(s string) {
	rs.content = append(rs.content, s...)
	rs.inContent = true
	rs.tokens++
	rs.checkBuffer()
}

func (rs *resumeState) checkBuffer() {
	if len(rs.reasoning)+len(rs.content) > rs.maxBuffer {
		rs.broken, rs.reasoning, rs.content = "the answer outgrew resume.max_buffer", nil, nil
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
func (rs *resumeState) resumeBody(body []byte) ([]byte, error) {
	rs.offset = int64(rs.tokens)
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

// resume continues x's cut stream (x.cut) on other replicas of ps, as a
// new execution: the failed attempt has been counted against its replica
// and released by then. Each continuation attempt is one send of
// continuation; the executor's rules (other replicas only, up to
// resume.max_attempts, backoff, passive health) apply to it as to any
// request. When no continuation completes the client's stream, it ends
// with the API's error event.
func (g *Gateway) resume(ctx context.Context, x *exchange, ps *poolState) {
	cut := x.cut
	x.cut = nil
	p := &x.pump
	rs := p.resume
	reason := rs.broken
	switch {
	case errors.Is(cut.cause, errShuttingDown):
		reason = "the gateway is shutting down"
	case cut.cause != nil && cut.cause == ps.timeouts.TotalErr:
		reason = "max_stream_duration"
	case ctx.Err() != nil:
		reason = "the client went away"
	case reason == "" && rs.typed != nil:
		reason = rs.typed.unstarted()
	}
	if reason == "" {
		// A request that cannot be continued is found before any replica
		// is asked (the body is made again for each attempt, with what
		// was sent by then).
		if _, _, err := rs.request(x.up.body); err != nil {
			reason = err.Error()
		}
	}
	if reason != "" {
		g.metrics.resumes.WithLabelValues(ps.Name, "not_resumable").Inc()
		x.resume = "not resumable: " + reason
		g.endCut(x, ps, cut.rep, cut.err)
		return
	}
	x.cont = continuation{x: x, failed: cut.rep, cut: cut}
	x.exec = upstream.Execution{Pool: ps.Pool, Req: &x.preq, Attempts: ps.cfg.Resume.MaxAttempts, Call: &x.cont}
	x.exec.Avoid[0] = cut.rep
	var res upstream.Result
	if ps.CanTake(func(r *pools.Replica) bool { return r.Endpoint == cut.rep.Endpoint }) {
		res = g.exec.Execute(ctx, &x.exec)
		x.retries += x.exec.Retries
	} else {
		res.Err = errors.New("no other replica of the pool can take it")
	}
	if !res.Done && ctx.Err() != nil && x.end != endClientLeft {
		// The client left while a continuation was asked for (in a queue,
		// a backoff or before its answer): nothing more is written. One
		// that hung up after the continuation's end (as soon as it had
		// [DONE]) has its whole answer.
		g.clientLeft(ctx, x, ctx.Err(), x.span)
	}
	if x.end == endClientLeft {
		x.resume = "the client left during the resume"
		return
	}
	if !res.Done {
		g.metrics.resumes.WithLabelValues(ps.Name, "failed").Inc()
		x.resume = "resume failed"
		if res.Err != nil {
			x.resume += ": " + wire.Clip(res.Err.Error())
		}
		g.endCut(x, ps, cut.rep, cut.err)
		return
	}
	g.metrics.resumes.WithLabelValues(ps.Name, "resumed").Inc()
	x.resume = fmt.Sprintf("resumed on %s after %d deltas", x.rep.Name, rs.offset)
	x.end = endNormal // the client's stream was completed
	if p.sawUsage {
		g.recordUsage(x, ps, p.prompt, p.completion, p.usageModel, x.span)
	}
	g.log.Warn("stream cut by replica; resumed on another replica", "request_id", x.id, "pool", ps.Name,
		"replica", cut.rep.Name, "error", cut.err.Error())
}

// continuation makes the attempts of a resume: each asks one replica to
// continue the answer the client has been sent so far.
type continuation struct {
	x      *exchange
	failed *pools.Replica
	cut    *cutStream
}

var _ upstream.Attempt = (*continuation)(nil)

func (c *continuation) Acquired(rep *pools.Replica) {
	c.x.replica, c.x.rep = c.failed.Name+">"+rep.Name, rep
}

// send asks rep to continue the stream and relays its answer into the
// client's. A continuation that is cut in turn is retried on another
// replica while the answer is still resumable; one the replica refuses
// (a status other than 200) is not: the others would refuse it too.
func (c *continuation) Send(ctx context.Context, rep *pools.Replica) upstream.Result {
	x := c.x
	g, ps, p := x.g, x.up.ps, &x.pump
	rs := p.resume
	path, body, err := rs.request(x.up.body)
	if err != nil {
		rs.broken = err.Error()
		return upstream.Result{Outcome: pools.Neutral, Err: err}
	}
	// Its own attempt, linked to the one that was cut.
	ctx, span := g.startSpan(ctx, "switchyard.upstream", trace.WithSpanKind(trace.SpanKindClient),
		trace.WithLinks(trace.Link{SpanContext: c.cut.span}))
	defer span.End()
	if sw := c.cut.sw; sw != nil {
		defer func() { setResponseAttrs(span, x.span, sw.resp.attrs()) }()
	}
	if span.IsRecording() {
		span.SetAttributes(attrSwitchyardPool.String(ps.Name), attrSwitchyardReplica.String(rep.Name),
			attrSwitchyardResume.Bool(true), attrSwitchyardResumeLen.Int64(rs.offset),
			attrGenAIOperation.String(x.ep.Operation()), attrGenAIProvider.String(genAIProvider))
		span.SetAttributes(genAIRequestAttrs(body)...) // the model is the pool's
	}
	clock := &x.clock
	defer clock.Stop()
	resp, hctx, res := g.send(ctx, span, sendSpec{ps: ps, rep: rep, clock: clock, ex: &x.exec, what: "resume: ", x: x, body: body, path: path})
	if resp == nil {
		if ctx.Err() != nil {
			g.clientLeft(ctx, x, ctx.Err(), span)
		}
		return res
	}
	defer resp.Body.Close()
	if !upstream.IsEventStream(resp) {
		msg := wire.ReadErrorMessage(resp.Body)
		if resp.StatusCode == http.StatusOK {
			setClientError(span, errTypeNotStream, errors.New("the continuation is not an event stream"))
		}
		o, _, _ := upstream.JudgeStatus(resp.StatusCode)
		err := fmt.Errorf("replica %q answered %d: %s", rep.Name, resp.StatusCode, msg)
		return upstream.Result{Outcome: o, Detail: "resume: " + err.Error(), Err: err}
	}
	clock.StreamingSince(c.cut.started)
	g.trackStream(x, clock.Cancel) // shutdown ends the continuation too
	defer g.untrackStream(x)
	rs.begin()
	// What an earlier attempt left in the pump: why it stopped, a [DONE].
	p.refused, p.sawDone = nil, false
	if span.IsRecording() {
		span.AddEvent("switchyard.resume", trace.WithAttributes(attrSwitchyardReplica.String(rep.Name)))
	}
	err = p.run(resp.Body)
	switch {
	case err == nil:
		return upstream.Result{Done: true, Outcome: pools.Success}
	case ctx.Err() != nil || errors.Is(err, errClientGone):
		g.clientLeft(ctx, x, err, span)
		return upstream.Result{Done: true, Outcome: pools.Neutral}
	}
	setClientError(span, errTypeStreamCut, err)
	var pt *upstream.PhaseTimeout
	switch cause := context.Cause(hctx); {
	case errors.Is(cause, errShuttingDown):
		x.end = endShutdown
		return upstream.Result{Outcome: pools.Neutral, Err: errShuttingDown}
	case errors.As(cause, &pt) && pt == ps.timeouts.TotalErr:
		// A long answer, not a failing replica: not continued again.
		rs.broken = "max_stream_duration"
		return upstream.Result{Outcome: pools.Neutral, Err: fmt.Errorf("%w: %s", errStreamCut, pt.Msg)}
	case errors.Is(err, errNotContinued):
		// The gateway cannot carry what the continuation sent into the
		// client's stream: not the replica's fault, and no other replica
		// would do better.
		rs.broken = err.Error()
		return upstream.Result{Outcome: pools.Neutral, Err: err}
	}
	g.log.Warn("stream resume failed", "request_id", x.id, "pool", ps.Name, "replica", rep.Name, "error", err.Error())
	return upstream.Result{Retry: rs.broken == "", Outcome: pools.Status5xx, Reason: "stream_cut", Detail: "stream: " + err.Error(), Err: err}
}

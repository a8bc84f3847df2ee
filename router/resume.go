package router

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

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
}

func newResumeState(x *exchange, maxBuffer int) *resumeState {
	rs := &resumeState{maxBuffer: maxBuffer}
	root := gjson.ParseBytes(x.body)
	switch {
	case x.ep != chatEndpoint:
		rs.broken = "not a chat completion"
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
				rs.reasoning = append(rs.reasoning, r.Str...)
				rs.tokens++
			case nonEmpty(t):
				rs.content = append(rs.content, t.Str...)
				rs.inContent = true
				rs.tokens++
			}
			if len(rs.reasoning)+len(rs.content) > rs.maxBuffer {
				rs.broken, rs.reasoning, rs.content = "the answer outgrew resume.max_buffer", nil, nil
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
// "\n</think>\n\n" + content. With nothing sent yet it is the original
// request.
func (rs *resumeState) resumeBody(body []byte) ([]byte, error) {
	rs.offset = int64(rs.tokens)
	rs.afterContent = rs.inContent
	if len(rs.reasoning)+len(rs.content) == 0 {
		return body, nil
	}
	partial := string(rs.content)
	if len(rs.reasoning) > 0 {
		partial = thinkOpen + string(rs.reasoning)
		if rs.inContent {
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

// resume continues x's stream, which failed on replica failed with cause,
// on other replicas of ps, up to resume.max_attempts. It returns true when
// the client's stream was completed (or the client left); false leaves the
// caller to end it with the error event.
func (g *Gateway) resume(ctx context.Context, x *exchange, ps *poolState, failed *pools.Replica, p *pump, cause error) bool {
	rs := p.resume
	reason := rs.broken
	switch {
	case errors.Is(cause, errShuttingDown):
		reason = "the gateway is shutting down"
	case cause == ps.timeouts.totalErr:
		reason = "max_stream_duration"
	}
	if reason != "" {
		g.metrics.resumes.WithLabelValues(ps.Name, "not_resumable").Inc()
		x.resume = "not resumable: " + reason
		return false
	}
	tried := []*pools.Replica{failed}
	exclude := func(r *pools.Replica) bool { return slices.Contains(tried, r) }
	for a := 0; a < ps.cfg.Resume.MaxAttempts && ctx.Err() == nil; a++ {
		if !ps.CanTake(exclude) {
			break
		}
		rep, err := ps.Acquire(ctx, &x.preq, exclude)
		if err != nil {
			break
		}
		tried = append(tried, rep)
		done, err := g.continueOn(ctx, x, ps, rep, p)
		ps.Release(rep)
		if done {
			g.metrics.resumes.WithLabelValues(ps.Name, "resumed").Inc()
			x.replica = failed.Name + ">" + rep.Name
			x.resume = fmt.Sprintf("resumed on %s after %d deltas", rep.Name, rs.offset)
			return true
		}
		g.log.Warn("stream resume failed", "request_id", x.id, "pool", ps.Name, "replica", rep.Name, "error", err.Error())
		if rs.broken != "" {
			break
		}
	}
	g.metrics.resumes.WithLabelValues(ps.Name, "failed").Inc()
	x.resume = "resume failed"
	return false
}

// continueOn sends the continuation request to rep and relays its stream
// into the client's. done is true when the client's stream completed (or
// the client left).
func (g *Gateway) continueOn(ctx context.Context, x *exchange, ps *poolState, rep *pools.Replica, p *pump) (done bool, err error) {
	rs := p.resume
	body, err := rs.resumeBody(x.up.body)
	if err != nil {
		return false, err
	}
	ctx, span := g.startSpan(ctx, "switchyard.upstream", trace.WithSpanKind(trace.SpanKindClient))
	defer span.End()
	if span.IsRecording() {
		span.SetAttributes(attrSwitchyardPool.String(ps.Name), attrSwitchyardReplica.String(rep.Name),
			attrSwitchyardResume.Bool(true), attrSwitchyardResumeLen.Int64(rs.offset),
			attrGenAIOperation.String(x.ep.operation()), attrGenAIProvider.String(genAIProvider))
		span.SetAttributes(genAIRequestAttrs(body)...) // the model is the pool's
	}
	clock := &x.clock
	hctx := clock.start(ctx, ps.timeouts)
	defer clock.stop()
	out, err := g.upstreamRequest(ctx, hctx, x, x.up.r, ps, rep, body)
	if err != nil {
		return false, err
	}
	if span.IsRecording() {
		span.SetAttributes(clientRequestAttrs(out)...)
	}
	resp, err := rep.Client().Do(out)
	resp, err = clock.headers(hctx, resp, err)
	if err != nil {
		if ctx.Err() == nil {
			setClientError(span, transportErrorType(err), err)
		}
		res := judgeError(ctx, ps, rep, err, "")
		ps.Observe(rep, res.outcome, res.detail)
		return ctx.Err() != nil, err
	}
	defer resp.Body.Close()
	setClientStatus(span, resp.StatusCode, "")
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		msg := readErrorMessage(resp.Body)
		if resp.StatusCode == http.StatusOK {
			setClientError(span, errTypeNotStream, errors.New("the continuation is not an event stream"))
		}
		o, _, _ := judgeStatus(resp.StatusCode)
		ps.Observe(rep, o, fmt.Sprintf("resume: status %d: %s", resp.StatusCode, msg))
		return false, fmt.Errorf("replica %q answered %d: %s", rep.Name, resp.StatusCode, msg)
	}
	clock.streaming()
	g.trackStream(x, clock.cancel) // shutdown ends the continuation too
	rs.cont, rs.roleDropped = true, false
	if span.IsRecording() {
		span.AddEvent("switchyard.resume", trace.WithAttributes(attrSwitchyardReplica.String(rep.Name)))
	}
	err = p.run(resp.Body)
	switch {
	case err == nil:
		ps.Observe(rep, pools.Success, "")
		return true, nil
	case ctx.Err() != nil || errors.Is(err, errClientGone):
		ps.Observe(rep, pools.Neutral, "")
		x.status = statusClientClosed
		return true, nil
	}
	setClientError(span, errTypeStreamCut, err)
	ps.Observe(rep, pools.Status5xx, "stream: "+err.Error())
	return false, err
}

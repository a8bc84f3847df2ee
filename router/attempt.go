package router

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/switchyard/switchyard/pools"
	"github.com/switchyard/switchyard/router/internal/pump"
	"github.com/switchyard/switchyard/router/internal/resume"
	"github.com/switchyard/switchyard/router/internal/spans"
	"github.com/switchyard/switchyard/router/internal/tokenize"
	"github.com/switchyard/switchyard/router/internal/upstream"
	"github.com/switchyard/switchyard/router/internal/wire"
	"go.opentelemetry.io/otel/trace"
)

func (x *exchange) Acquired(rep *pools.Replica) { x.replica, x.rep = rep.Name, rep }

func (x *exchange) Send(ctx context.Context, rep *pools.Replica) upstream.Result {
	return x.g.attempt(ctx, x, rep)
}

// attempt sends a client request to rep and, if the replica answers
// acceptably, passes the answer to the client.
func (g *Gateway) attempt(ctx context.Context, x *exchange, rep *pools.Replica) upstream.Result {
	u := &x.attempt.up
	ctx, span := g.startSpan(ctx, "switchyard.upstream", trace.WithSpanKind(trace.SpanKindClient))
	defer span.End()
	if span.IsRecording() {
		span.SetAttributes(spans.Pool.String(u.ps.Name), spans.Replica.String(rep.Name),
			spans.GenAIOperation.String(x.ep.Operation()), spans.GenAIProvider.String(spans.Provider))
		span.SetAttributes(spans.AppendString(x.requestSettings(), spans.GenAIRequestModel, u.ps.Model)...)
	}
	defer x.attempt.clock.Stop()
	resp, hctx, res := g.send(ctx, span, sendSpec{ps: u.ps, rep: rep, clock: &x.attempt.clock, ex: &x.attempt.exec, x: x, body: u.body, clientJudge: true})
	if resp == nil {
		if ctx.Err() != nil {
			x.endAs(endClientLeft) // cancelled by the client, not failed
		}
		return res
	}
	defer resp.Body.Close()
	switch {
	case x.ep == wire.CountTokens && resp.StatusCode == http.StatusNotFound:
		return g.countTokensLocally(u.w, x, resp)
	case upstream.IsEventStream(resp) && u.r.Method == http.MethodPost && x.info != nil && !x.info.Stream:
		// A stream to a request that asked for none is no answer its
		// client reads (and may run on without end). Nothing reached
		// the client: another replica may answer.
		ue := &upstream.Error{Pool: u.ps.Name, Replica: rep.Name, Err: errors.New("answered a non-stream request with an event stream")}
		spans.SetClientError(span, spans.ErrTypeUnaskedStream, ue)
		return upstream.Retryable(pools.Status5xx, "status_5xx", ue.Err.Error(), ue)
	case upstream.IsEventStream(resp):
		return g.relay(ctx, hctx, x, rep, resp, span)
	}
	return g.deliver(ctx, hctx, x, rep, resp, span)
}

// deliver passes a non-stream answer to the client, read whole first: a
// replica's failure while reading it can still be retried elsewhere.
func (g *Gateway) deliver(ctx, hctx context.Context, x *exchange, rep *pools.Replica, resp *http.Response, span trace.Span) upstream.Result {
	ps, w := x.attempt.up.ps, x.attempt.up.w
	x.attempt.clock.Body()
	answer, release, err := answers.Read(ctx, resp.Body, resp.ContentLength)
	defer release()
	if errors.Is(err, upstream.ErrAnswerTooLarge) {
		// Terminal: the answer is the request's, not the replica's
		// fault; neither retried nor counted against the replica.
		ue := &upstream.Error{Pool: ps.Name, Replica: rep.Name, Err: err}
		spans.SetClientError(span, spans.ErrTypeTooLarge, ue)
		return upstream.Failed(pools.Neutral, "", ue)
	} else if err != nil {
		if ctx.Err() != nil {
			x.endAs(endClientLeft)
		}
		var pt *upstream.PhaseTimeout
		if errors.As(context.Cause(hctx), &pt) {
			err = pt // the answer stalled (stream_idle_timeout)
		}
		if ctx.Err() == nil {
			spans.SetClientError(span, spans.TransportErrorType(err), err)
		}
		// Nothing has reached the client yet: safe to retry, unless it
		// was a timeout.
		return upstream.JudgeError(ctx, ps.Name, rep, err, "reading body")
	}
	raw := answer
	if x.moreInChain && tokenize.Overflow(resp.StatusCode, answer) {
		// Nothing reached the client: the next, larger pool of the
		// chain takes the request. Not the replica's fault.
		return upstream.Failed(pools.Neutral, "", fmt.Errorf("%w: replica %q: %s", errContextLength, rep.Name, wire.ReadErrorMessage(bytes.NewReader(answer))))
	}
	if d := upstream.ReplicaDepth(x.snap.Config.Server.MaxJSONDepth); resp.StatusCode == http.StatusOK && !wire.CheckDepth(answer, d) {
		// Read as untrusted as a client's body: never parsed.
		ue := &upstream.Error{Pool: ps.Name, Replica: rep.Name, Err: fmt.Errorf("the answer nests JSON deeper than %d levels", d)}
		return upstream.Retryable(pools.Status5xx, "status_5xx", ue.Err.Error(), ue)
	}
	// The same text as every stream event (pump.event): valid UTF-8, no
	// lone surrogate escape. Valid answers, the normal case, are not
	// copied.
	answer = wire.ValidEscapes(wire.ValidUTF8(answer))
	switch {
	case resp.StatusCode == http.StatusOK:
		answer = x.rewriteAnswer(answer, rep)
	case resp.StatusCode >= 400 && x.ep.Anthropic():
		answer = wire.AnthropicError(resp.StatusCode, answer)
	}
	g.writeHeaders(w, x, resp, int64(len(answer)))
	w.WriteHeader(resp.StatusCode)
	x.status, x.sent = resp.StatusCode, resp.StatusCode
	// The write deadline also covers the flush net/http makes when the
	// handler returns, after the access line and metrics are recorded;
	// flushing here would let the client see the end of its answer before
	// they are.
	p := pump.Pump{W: w, RC: x.responseController(w), WriteTimeout: x.snap.Config.Server.WriteTimeout.Std()}
	_ = p.Write(answer)
	if resp.StatusCode == http.StatusOK && x.stored.id == "" { // a stored response's tokens were counted when it was made
		g.usage(x, ps, raw, span)
		if span.IsRecording() {
			var a spans.GenAIResponse
			a.ReadAnswer(raw)
			spans.SetResponseAttrs(span, x.tel.span, a.Attrs())
		}
	}
	return upstream.Answered(pools.Success, "")
}

// relay pumps a stream to the client. A stream the replica cuts is, with
// the pool's resume on, left for resume (x.cut) once this attempt has been
// counted and its replica released; otherwise it ends with the API's
// error event.
func (g *Gateway) relay(ctx, hctx context.Context, x *exchange, rep *pools.Replica, resp *http.Response, span trace.Span) upstream.Result {
	ps, w, clock := x.attempt.up.ps, x.attempt.up.w, &x.attempt.clock
	g.writeHeaders(w, x, resp, -1)
	w.WriteHeader(resp.StatusCode)
	x.status, x.sent = resp.StatusCode, resp.StatusCode
	clock.Streaming()
	g.trackStream(&x.stream.pump, clock.Cancel)
	defer g.untrackStream(&x.stream.pump)
	var sw *spans.SpanWriter
	if span.IsRecording() {
		// A continuation writes on through sw, and sets the attributes of
		// the whole answer on its own span and the request's.
		sw = &spans.SpanWriter{W: w}
		defer func() { spans.SetResponseAttrs(span, x.tel.span, sw.Resp.Attrs()) }()
	}
	x.stream.pump = pump.Pump{W: w, RC: x.responseController(w), WriteTimeout: x.snap.Config.Server.WriteTimeout.Std(),
		Injected: x.attempt.up.injected, Clock: clock, Token: x, API: x.ep, RewriteModel: x.clientModel, MaxDepth: upstream.ReplicaDepth(x.snap.Config.Server.MaxJSONDepth)}
	if x.ep == wire.Responses {
		x.stream.pump.IDTag, x.stream.pump.IDs, x.stream.pump.Custom = replicaTag(rep), x.ids(), x.stream.custom
	}
	if sw != nil {
		x.stream.pump.W = sw
	}
	if rc := ps.cfg.Resume; rc.Enabled {
		x.stream.pump.Resume = resume.New(x.ep, x.body, int(rc.MaxBuffer), g.rand)
	}
	p := &x.stream.pump
	err := p.Flush()
	if err == nil {
		err = p.Run(resp.Body)
	}
	if err == nil {
		if u := p.Usage(); u.SawUsage {
			g.recordUsage(x, ps, u.Prompt, u.Completion, u.UsageModel, span)
		}
		return upstream.Answered(pools.Success, "")
	}
	if ctx.Err() != nil || errors.Is(err, pump.ErrClientGone) {
		g.clientLeft(ctx, x, err, span)
		return upstream.Answered(pools.Neutral, "")
	}
	// A replica that cut its stream, or stalled it past first_token_timeout
	// or stream_idle_timeout, failed; one that ran into
	// max_stream_duration just produced a long answer.
	outcome, end := pools.Status5xx, endCut // counted as failed although 200 was sent
	cause := context.Cause(hctx)
	var pt *upstream.PhaseTimeout
	switch {
	case errors.As(cause, &pt):
		err = fmt.Errorf("%w: %s", pump.ErrStreamCut, pt.Msg)
		if pt == ps.timeouts.TotalErr || pt == ps.timeouts.FirstTokenErr && ps.AliveWithin(rep, ps.timeouts.FirstToken()) {
			// A long answer, or a first token that waited on a replica
			// that answered others or passed its probe meanwhile: the
			// request's prefill.
			outcome = pools.Neutral
		}
	case errors.Is(cause, errShuttingDown):
		err, outcome, end = errShuttingDown, pools.Neutral, endShutdown
	}
	x.endAs(end)
	spans.SetClientError(span, spans.ErrTypeStreamCut, err)
	if p.Resume != nil {
		x.stream.cut = &cutStream{rep: rep, err: err, cause: cause, span: span.SpanContext(), sw: sw, started: clock.StreamStart}
	} else {
		g.endCut(x, ps, rep, err)
	}
	return upstream.Answered(outcome, "stream: "+err.Error())
}

// clientLeft records a client that went away mid-stream (or stopped
// reading for write_timeout): the upstream request is cancelled with the
// attempt's context (vLLM then frees the KV cache), and the tokens
// streamed so far are counted when the usage never came.
func (g *Gateway) clientLeft(ctx context.Context, x *exchange, err error, span trace.Span) {
	p := &x.stream.pump
	x.endAs(endClientLeft)
	x.access.errMsg = "client closed the stream"
	if errors.Is(err, pump.ErrClientGone) && ctx.Err() == nil {
		x.access.errMsg = "client stopped reading: " + err.Error()
	}
	switch u := p.Usage(); {
	case u.SawUsage && u.Completion > 0:
		g.recordUsage(x, x.attempt.up.ps, u.Prompt, u.Completion, u.UsageModel, span)
	case p.Deltas() > 0:
		g.recordUsage(x, x.attempt.up.ps, u.Prompt, p.Deltas(), u.UsageModel, span)
	case u.SawUsage:
		g.recordUsage(x, x.attempt.up.ps, u.Prompt, u.Completion, u.UsageModel, span)
	}
}

// endCut ends a stream its replica cut with the API's error event, and
// counts the tokens it did report.
func (g *Gateway) endCut(x *exchange, ps *poolState, rep *pools.Replica, err error) {
	p := &x.stream.pump
	if u := p.Usage(); u.SawUsage {
		g.recordUsage(x, ps, u.Prompt, u.Completion, u.UsageModel, x.tel.span)
	}
	x.access.errMsg = err.Error()
	p.Fail(&wire.APIError{Type: "upstream_error", Code: "stream_interrupted",
		Message: fmt.Sprintf("the stream was interrupted (pool %q): %v", ps.Name, err)})
	g.log.Warn("stream cut by replica; ended the client stream with an error event", "request_id", x.id, "pool", ps.Name, "replica", rep.Name, "error", err.Error())
}

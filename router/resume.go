package router

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/switchyard/switchyard/router/internal/spans"

	"github.com/switchyard/switchyard/router/internal/pump"

	"github.com/switchyard/switchyard/router/internal/resume"

	"github.com/switchyard/switchyard/router/internal/upstream"

	"github.com/switchyard/switchyard/router/internal/wire"

	"go.opentelemetry.io/otel/trace"

	"github.com/switchyard/switchyard/pools"
)

// resume continues x's cut stream (x.cut) on other replicas of ps, as a
// new execution: the failed attempt has been counted against its replica
// and released by then. Each continuation attempt is one send of
// continuation; the executor's rules (other replicas only, up to
// resume.max_attempts, backoff, passive health) apply to it as to any
// request. When no continuation completes the client's stream, it ends
// with the API's error event.
func (g *Gateway) resume(ctx context.Context, x *exchange, ps *poolState) {
	cut := x.stream.cut
	x.stream.cut = nil
	p := &x.stream.pump
	rs := p.Resume
	reason := rs.Broken
	switch {
	case errors.Is(cut.cause, errShuttingDown):
		reason = "the gateway is shutting down"
	case cut.cause != nil && cut.cause == ps.timeouts.TotalErr:
		reason = "max_stream_duration"
	case ctx.Err() != nil:
		reason = "the client went away"
	case reason == "" && rs.Typed != nil:
		reason = rs.Typed.Unstarted()
	}
	if reason == "" {
		// A request that cannot be continued is found before any replica
		// is asked (the body is made again for each attempt, with what
		// was sent by then).
		if _, _, err := rs.Request(x.attempt.up.body); err != nil {
			reason = err.Error()
		}
	}
	if reason != "" {
		g.metrics.Resumes.WithLabelValues(ps.Name, "not_resumable").Inc()
		x.access.resume = "not resumable: " + reason
		g.endCut(x, ps, cut.rep, cut.err)
		return
	}
	x.stream.cont = continuation{x: x, failed: cut.rep, cut: cut}
	x.attempt.exec = upstream.Execution{Pool: ps.Pool, Req: &x.attempt.preq, Attempts: ps.cfg.Resume.MaxAttempts, Call: &x.stream.cont}
	x.attempt.exec.Avoid[0] = cut.rep
	var res upstream.Result
	if ps.CanTake(func(r *pools.Replica) bool { return r.Endpoint == cut.rep.Endpoint }) {
		res = g.exec.Execute(ctx, &x.attempt.exec)
		x.retries += x.attempt.exec.Retries
		x.access.queued += x.attempt.exec.Queued
	} else {
		res = upstream.NotSent(errors.New("no other replica of the pool can take it"))
	}
	if !res.Done() && ctx.Err() != nil && x.stream.end != endClientLeft {
		// The client left while a continuation was asked for (in a queue,
		// a backoff or before its answer): nothing more is written. One
		// that hung up after the continuation's end (as soon as it had
		// [DONE]) has its whole answer.
		g.clientLeft(ctx, x, ctx.Err(), x.tel.span)
	}
	if x.stream.end == endClientLeft {
		x.access.resume = "the client left during the resume"
		return
	}
	if !res.Done() {
		g.metrics.Resumes.WithLabelValues(ps.Name, "failed").Inc()
		x.access.resume = "resume failed"
		if res.Err() != nil {
			x.access.resume += ": " + wire.Clip(res.Err().Error())
		}
		g.endCut(x, ps, cut.rep, cut.err)
		return
	}
	g.metrics.Resumes.WithLabelValues(ps.Name, "resumed").Inc()
	x.access.resume = fmt.Sprintf("resumed on %s after %d deltas", x.rep.Name, rs.Offset)
	x.endAs(endNormal) // the client's stream was completed
	if u := p.Usage(); u.SawUsage {
		g.recordUsage(x, ps, u.Prompt, u.Completion, u.UsageModel, x.tel.span)
	}
	g.log.Warn("stream cut by replica; resumed on another replica", "request_id", x.id, "pool", ps.Name,
		"replica", cut.rep.Name, "error", cut.err.Error())
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
	g, ps, p := x.g, x.attempt.up.ps, &x.stream.pump
	rs := p.Resume
	path, body, err := rs.Request(x.attempt.up.body)
	if err != nil {
		rs.Broken = err.Error()
		return upstream.Failed(pools.Neutral, "", err)
	}
	// Its own attempt, linked to the one that was cut.
	ctx, span := g.startSpan(ctx, "switchyard.upstream", trace.WithSpanKind(trace.SpanKindClient),
		trace.WithLinks(trace.Link{SpanContext: c.cut.span}))
	defer span.End()
	if sw := c.cut.sw; sw != nil {
		defer func() { spans.SetResponseAttrs(span, x.tel.span, sw.Resp.Attrs()) }()
	}
	if span.IsRecording() {
		span.SetAttributes(spans.Pool.String(ps.Name), spans.Replica.String(rep.Name),
			spans.Resume.Bool(true), spans.ResumeDeltas.Int64(rs.Offset),
			spans.GenAIOperation.String(x.ep.Operation()), spans.GenAIProvider.String(spans.Provider))
		span.SetAttributes(spans.GenAIRequest(body)...) // the model is the pool's
	}
	clock := &x.attempt.clock
	defer clock.Stop()
	resp, hctx, res := g.send(ctx, span, sendSpec{ps: ps, rep: rep, clock: clock, ex: &x.attempt.exec, what: "resume: ", x: x, body: body, path: path})
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
			spans.SetClientError(span, spans.ErrTypeNotStream, errors.New("the continuation is not an event stream"))
		}
		o, _, _ := upstream.JudgeStatus(resp.StatusCode)
		err := fmt.Errorf("replica %q answered %d: %s", rep.Name, resp.StatusCode, msg)
		return upstream.Failed(o, "resume: "+err.Error(), err)
	}
	clock.StreamingSince(c.cut.started)
	g.trackStream(&x.stream.pump, clock.Cancel) // shutdown ends the continuation too
	defer g.untrackStream(&x.stream.pump)
	rs.Begin()
	// What an earlier attempt left in the pump: why it stopped, a [DONE].
	p.Refused, p.SawDone = nil, false
	if span.IsRecording() {
		span.AddEvent("switchyard.resume", trace.WithAttributes(spans.Replica.String(rep.Name)))
	}
	err = p.Run(resp.Body)
	switch {
	case err == nil:
		return upstream.Answered(pools.Success, "")
	case ctx.Err() != nil || errors.Is(err, pump.ErrClientGone):
		g.clientLeft(ctx, x, err, span)
		return upstream.Answered(pools.Neutral, "")
	}
	spans.SetClientError(span, spans.ErrTypeStreamCut, err)
	var pt *upstream.PhaseTimeout
	switch cause := context.Cause(hctx); {
	case errors.Is(cause, errShuttingDown):
		x.endAs(endShutdown)
		return upstream.Failed(pools.Neutral, "", errShuttingDown)
	case errors.As(cause, &pt) && pt == ps.timeouts.TotalErr:
		// A long answer, not a failing replica: not continued again.
		rs.Broken = "max_stream_duration"
		return upstream.Failed(pools.Neutral, "", fmt.Errorf("%w: %s", pump.ErrStreamCut, pt.Msg))
	case errors.Is(err, resume.ErrNotContinued):
		// The gateway cannot carry what the continuation sent into the
		// client's stream: not the replica's fault, and no other replica
		// would do better.
		rs.Broken = err.Error()
		return upstream.Failed(pools.Neutral, "", err)
	}
	g.log.Warn("stream resume failed", "request_id", x.id, "pool", ps.Name, "replica", rep.Name, "error", err.Error())
	if rs.Broken != "" {
		return upstream.Failed(pools.Status5xx, "stream: "+err.Error(), err)
	}
	return upstream.Retryable(pools.Status5xx, "stream_cut", "stream: "+err.Error(), err)
}

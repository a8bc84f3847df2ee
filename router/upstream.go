package router

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/switchyard/switchyard/router/internal/wire"

	"github.com/switchyard/switchyard/pools"
	"github.com/tidwall/sjson"
	"go.opentelemetry.io/otel/trace"
)

// forward sends the request to the decided chain of pools, in order, until
// one answers (placeOn, for each pool).
func (g *Gateway) forward(ctx context.Context, w http.ResponseWriter, r *http.Request, x *exchange) {
	s := x.snap
	chain := x.decision.Pools
	if sp := x.decision.Spill; sp != nil {
		if ps := s.pools[chain[0]]; ps != nil && ps.Saturated(sp.WhenQueueOver) {
			g.metrics.fallbacks.WithLabelValues(chain[0], sp.To, "spill").Inc()
			x.fallback = "spill"
			spilled := []string{sp.To}
			for _, p := range chain {
				if p != sp.To {
					spilled = append(spilled, p)
				}
			}
			chain = spilled
		}
	}
	g.metrics.inflight.WithLabelValues(x.route).Inc()
	defer g.metrics.inflight.WithLabelValues(x.route).Dec()
	var lastErr error
	for i, name := range chain {
		ps := s.pools[name]
		if ps == nil {
			// Cannot happen with a validated config and the policy's
			// session check; never dereference a missing pool.
			lastErr = fmt.Errorf("%w: pool %q is not configured", errNoReplica, name)
			continue
		}
		x.moreInChain = i < len(chain)-1
		if x.moreInChain && !g.fits(ctx, ps, x) {
			// The prompt and a minimal answer cannot fit this pool's
			// context: the next pool of the chain is asked instead.
			lastErr = fmt.Errorf("%w: pool %q", errContextLength, name)
			continue
		}
		if i > 0 {
			reason := "no_replica"
			switch {
			case errors.Is(lastErr, errContextLength):
				reason = "context_length"
				// The conversation only grows: its later turns start here.
				s.Policy.Escalate(x.sessionKey, x.decision, chain[i:])
			case !errors.Is(lastErr, errNoReplica):
				reason = "upstream_error"
			}
			g.metrics.fallbacks.WithLabelValues(chain[i-1], name, reason).Inc()
			if x.fallback == "" {
				x.fallback = reason
			}
		}
		done, err := g.placeOn(ctx, w, r, x, ps)
		if done {
			return
		}
		lastErr = err
		if ctx.Err() != nil {
			x.end = endClientLeft
			return
		}
		// A timeout or an over-size answer is the request's own result,
		// not a pool's failure: a fallback pool would be asked to do the
		// same slow or huge work again. Both end the chain.
		if isTerminal(err) {
			break
		}
	}
	g.fail(w, x, lastErr, "")
}

// errContextLength: the request does not fit a pool's context (its
// estimate does not, or a replica said so); a larger pool of the chain is
// asked.
var errContextLength = errors.New("the prompt does not fit the pool's context")

// fitsContext reports whether the request's prompt estimate and a minimal
// answer fit ps's max_model_len (always, when it is not set or the
// endpoint generates nothing).
func fitsContext(ps *poolState, x *exchange) bool {
	limit := ps.cfg.MaxModelLen
	if limit <= 0 || !x.ep.Generates() || x.info == nil {
		return true
	}
	return x.info.PromptTokens+wire.MinFitAnswer <= limit
}

// contextOverflow reports a replica's 400 that says the prompt exceeds its
// context (vLLM's wordings across versions).
func contextOverflow(status int, body []byte) bool {
	if status != http.StatusBadRequest {
		return false
	}
	b := bytes.ToLower(body)
	for _, w := range [...]string{"maximum context length", "max_model_len", "maximum model length", "context length"} {
		if bytes.Contains(b, []byte(w)) {
			return true
		}
	}
	return false
}

// isTerminal reports a failure that no other replica or pool is asked to
// repeat: a timeout (504) or an answer over the size limit.
func isTerminal(err error) bool {
	return isTimeout(err) || errors.Is(err, errAnswerTooLarge)
}

// errAnswerTooLarge: a non-stream answer exceeded maxResponseBytes.
var errAnswerTooLarge = errors.New("answer over the size limit")

// placeOn places the request on ps through the executor. It returns done
// once a response has been committed to the client.
func (g *Gateway) placeOn(ctx context.Context, w http.ResponseWriter, r *http.Request, x *exchange, ps *poolState) (bool, error) {
	body := x.body
	if x.info.Model != "" && x.info.Model != ps.Model {
		var err error
		if body, err = sjson.SetBytes(body, "model", ps.Model); err != nil {
			return false, wire.BadRequest("model", "could not rewrite model: "+err.Error())
		}
	}
	if x.ep.Generates() {
		body = wire.FitAnswer(body, len(body), ps.cfg.MaxModelLen)
	}
	injected := false
	if x.info.Stream && !x.info.IncludeUsage && x.ep.Spec().AsksUsage {
		// Ask for usage so token accounting is complete; the extra usage
		// chunk is removed from what the client receives.
		if b, err := sjson.SetBytes(body, "stream_options.include_usage", true); err == nil {
			body, injected = b, true
		}
	}
	x.preq = pools.Request{}
	// Waiting for a full replica, keys take turns by weight, and keyless
	// clients one turn each by address.
	x.preq.Tenant, x.preq.Weight = tenantOf(x, r, x.snap.Config.Server.Trusted)
	x.preq.Fair = true // no tenant holds more than its share while others wait
	if ps.NeedsKey() {
		x.preq.Key = affinityKey(x, r, ps.cfg.Affinity.Depth)
	}
	// Until a replica is chosen, an error names this pool and no replica.
	x.pool, x.replica = ps.Name, ""
	x.up = upstreamCall{w: w, r: r, ps: ps, body: body, injected: injected}
	x.exec = execution{ps: ps, req: &x.preq, attempts: 1 + ps.cfg.Retries, call: x, only: x.pinned}
	res := g.execute(ctx, &x.exec)
	x.retries += x.exec.retries
	if x.cut != nil {
		// The stream was cut after its failed attempt was counted and its
		// replica released: a new execution continues it.
		g.resume(ctx, x, ps)
	}
	if res.done {
		return true, nil
	}
	return false, res.err
}

// upstreamCall is what a client request's attempts send where.
type upstreamCall struct {
	w        http.ResponseWriter
	r        *http.Request
	ps       *poolState
	body     []byte
	injected bool
}

var _ caller = (*exchange)(nil)

func (x *exchange) acquired(rep *pools.Replica) { x.replica, x.rep = rep.Name, rep }

func (x *exchange) send(ctx context.Context, rep *pools.Replica) result {
	return x.g.attempt(ctx, x, rep)
}

// attempt sends a client request to rep and, if the replica answers
// acceptably, passes the answer to the client.
func (g *Gateway) attempt(ctx context.Context, x *exchange, rep *pools.Replica) result {
	u := &x.up
	ctx, span := g.startSpan(ctx, "switchyard.upstream", trace.WithSpanKind(trace.SpanKindClient))
	defer span.End()
	if span.IsRecording() {
		span.SetAttributes(attrSwitchyardPool.String(u.ps.Name), attrSwitchyardReplica.String(rep.Name),
			attrGenAIOperation.String(x.ep.Operation()), attrGenAIProvider.String(genAIProvider))
		span.SetAttributes(appendString(x.requestSettings(), attrGenAIRequestModel, u.ps.Model)...)
	}
	defer x.clock.stop()
	resp, hctx, res := g.send(ctx, span, sendSpec{ps: u.ps, rep: rep, clock: &x.clock, ex: &x.exec, x: x, body: u.body, clientJudge: true})
	if resp == nil {
		if ctx.Err() != nil {
			x.end = endClientLeft // cancelled by the client, not failed
		}
		return res
	}
	defer resp.Body.Close()
	switch {
	case x.ep == wire.CountTokens && resp.StatusCode == http.StatusNotFound:
		return g.countTokensLocally(u.w, x, resp)
	case isEventStream(resp):
		return g.relay(ctx, hctx, x, rep, resp, span)
	}
	return g.deliver(ctx, hctx, x, rep, resp, span)
}

// judge classifies a replica's answer status for a client request. A 404
// means the server lacks the pool's model only where the endpoint says so
// (endpointSpec.missingModel404), or where it names a model; otherwise it
// is an answer (FastAPI's {"detail":"Not Found"} of an endpoint this vLLM
// version lacks, a stored response that is not there), which says nothing
// of the replica's other traffic.
func (x *exchange) judge(resp *http.Response) (pools.Outcome, bool, string) {
	o, retry, reason := judgeStatus(resp.StatusCode)
	if resp.StatusCode == http.StatusNotFound && !x.ep.Spec().MissingModel404 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 16<<10))
		resp.Body = readCloser{bytes.NewReader(b), resp.Body}
		if x.pinned != nil || !x.ep.Generates() || !bytes.Contains(bytes.ToLower(b), []byte("model")) {
			o, retry = pools.Neutral, false
		}
	}
	return o, retry, reason
}

// readCloser reads what was peeked of a body and closes the original.
type readCloser struct {
	io.Reader
	io.Closer
}

// deliver passes a non-stream answer to the client, read whole first: a
// replica's failure while reading it can still be retried elsewhere.
func (g *Gateway) deliver(ctx, hctx context.Context, x *exchange, rep *pools.Replica, resp *http.Response, span trace.Span) result {
	ps, w := x.up.ps, x.up.w
	buf := getBuffer()
	defer putBuffer(buf)
	x.clock.body()
	if n, err := buf.ReadFrom(io.LimitReader(resp.Body, maxResponseBytes+1)); err == nil && n > maxResponseBytes {
		// Terminal: the answer is the request's, not the replica's
		// fault; neither retried nor counted against the replica.
		ue := &upstreamError{pool: ps.Name, replica: rep.Name,
			err: fmt.Errorf("%w: non-stream answer larger than %d bytes", errAnswerTooLarge, maxResponseBytes)}
		setClientError(span, errTypeTooLarge, ue)
		return result{outcome: pools.Neutral, err: ue}
	} else if err != nil {
		if ctx.Err() != nil {
			x.end = endClientLeft
		}
		var pt *phaseTimeout
		if errors.As(context.Cause(hctx), &pt) {
			err = pt // the answer stalled (stream_idle_timeout)
		}
		if ctx.Err() == nil {
			setClientError(span, transportErrorType(err), err)
		}
		// Nothing has reached the client yet: safe to retry, unless it
		// was a timeout.
		return judgeError(ctx, ps, rep, err, "reading body")
	}
	answer := buf.Bytes()
	if x.moreInChain && contextOverflow(resp.StatusCode, answer) {
		// Nothing reached the client: the next, larger pool of the
		// chain takes the request. Not the replica's fault.
		return result{outcome: pools.Neutral, err: fmt.Errorf("%w: replica %q: %s", errContextLength, rep.Name, wire.ReadErrorMessage(bytes.NewReader(answer)))}
	}
	if d := replicaDepth(x.snap.Config.Server.MaxJSONDepth); resp.StatusCode == http.StatusOK && !wire.CheckDepth(answer, d) {
		// Read as untrusted as a client's body: never parsed.
		ue := &upstreamError{pool: ps.Name, replica: rep.Name, err: fmt.Errorf("the answer nests JSON deeper than %d levels", d)}
		return result{retry: true, outcome: pools.Status5xx, reason: "status_5xx", detail: ue.err.Error(), err: ue}
	}
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
	p := pump{w: w, rc: x.responseController(w), writeTimeout: x.snap.Config.Server.WriteTimeout.Std()}
	_ = p.write(answer)
	if resp.StatusCode == http.StatusOK && x.storedID == "" { // a stored response's tokens were counted when it was made
		g.usage(x, ps, buf.Bytes(), span)
		if span.IsRecording() {
			var a genAIResponse
			a.readAnswer(buf.Bytes())
			setResponseAttrs(span, x.span, a.attrs())
		}
	}
	return result{done: true, outcome: pools.Success}
}

// relay pumps a stream to the client. A stream the replica cuts is, with
// the pool's resume on, left for resume (x.cut) once this attempt has been
// counted and its replica released; otherwise it ends with the API's
// error event.
func (g *Gateway) relay(ctx, hctx context.Context, x *exchange, rep *pools.Replica, resp *http.Response, span trace.Span) result {
	ps, w, clock := x.up.ps, x.up.w, &x.clock
	g.writeHeaders(w, x, resp, -1)
	w.WriteHeader(resp.StatusCode)
	x.status, x.sent = resp.StatusCode, resp.StatusCode
	clock.streaming()
	g.trackStream(x, clock.cancel)
	defer g.untrackStream(x)
	var sw *spanWriter
	if span.IsRecording() {
		// A continuation writes on through sw, and sets the attributes of
		// the whole answer on its own span and the request's.
		sw = &spanWriter{w: w}
		defer func() { setResponseAttrs(span, x.span, sw.resp.attrs()) }()
	}
	x.pump = pump{w: w, rc: x.responseController(w), writeTimeout: x.snap.Config.Server.WriteTimeout.Std(),
		injected: x.up.injected, clock: clock, token: x, ep: x.ep, rewriteModel: x.clientModel, maxDepth: replicaDepth(x.snap.Config.Server.MaxJSONDepth)}
	if x.ep == wire.Responses {
		x.pump.idTag, x.pump.ids, x.pump.custom = replicaTag(rep), x.ids(), x.custom
	}
	if sw != nil {
		x.pump.w = sw
	}
	if rc := ps.cfg.Resume; rc.Enabled {
		x.pump.resume = newResumeState(x, int(rc.MaxBuffer), g.rand)
	}
	p := &x.pump
	err := p.flush()
	if err == nil {
		err = p.run(resp.Body)
	}
	if err == nil {
		if p.sawUsage {
			g.recordUsage(x, ps, p.prompt, p.completion, p.usageModel, span)
		}
		return result{done: true, outcome: pools.Success}
	}
	if ctx.Err() != nil || errors.Is(err, errClientGone) {
		g.clientLeft(ctx, x, err, span)
		return result{done: true, outcome: pools.Neutral}
	}
	// A replica that cut its stream, or stalled it past first_token_timeout
	// or stream_idle_timeout, failed; one that ran into
	// max_stream_duration just produced a long answer.
	outcome := pools.Status5xx
	x.end = endCut // counted as failed although 200 was sent
	cause := context.Cause(hctx)
	var pt *phaseTimeout
	switch {
	case errors.As(cause, &pt):
		err = fmt.Errorf("%w: %s", errStreamCut, pt.msg)
		if pt == ps.timeouts.totalErr || pt == ps.timeouts.firstTokenErr && ps.AnsweredWithin(rep, ps.timeouts.firstToken) {
			// A long answer, or a first token that waited on a replica
			// that answered others meanwhile: the request's prefill.
			outcome = pools.Neutral
		}
	case errors.Is(cause, errShuttingDown):
		err, outcome, x.end = errShuttingDown, pools.Neutral, endShutdown
	}
	setClientError(span, errTypeStreamCut, err)
	if p.resume != nil {
		x.cut = &cutStream{rep: rep, err: err, cause: cause, span: span.SpanContext(), sw: sw, started: clock.streamStart}
	} else {
		g.endCut(x, ps, rep, err)
	}
	return result{done: true, outcome: outcome, detail: "stream: " + err.Error()}
}

// cutStream is a stream whose replica failed mid-way, left for resume.
type cutStream struct {
	rep *pools.Replica
	err error
	// cause is why the attempt's context ended, if it did (a phase
	// timeout, the gateway shutting down).
	cause error
	// span is the cut attempt's, which a continuation's span links to;
	// sw, when tracing, reads the whole answer for the spans.
	span trace.SpanContext
	sw   *spanWriter
	// started is when the stream began: max_stream_duration counts from
	// then across continuations.
	started time.Time
}

// clientLeft records a client that went away mid-stream (or stopped
// reading for write_timeout): the upstream request is cancelled with the
// attempt's context (vLLM then frees the KV cache), and the tokens
// streamed so far are counted when the usage never came.
func (g *Gateway) clientLeft(ctx context.Context, x *exchange, err error, span trace.Span) {
	p := &x.pump
	x.end = endClientLeft
	x.errMsg = "client closed the stream"
	if errors.Is(err, errClientGone) && ctx.Err() == nil {
		x.errMsg = "client stopped reading: " + err.Error()
	}
	switch {
	case p.sawUsage && p.completion > 0:
		g.recordUsage(x, x.up.ps, p.prompt, p.completion, p.usageModel, span)
	case p.deltas > 0:
		g.recordUsage(x, x.up.ps, p.prompt, p.deltas, p.usageModel, span)
	case p.sawUsage:
		g.recordUsage(x, x.up.ps, p.prompt, p.completion, p.usageModel, span)
	}
}

// endCut ends a stream its replica cut with the API's error event, and
// counts the tokens it did report.
func (g *Gateway) endCut(x *exchange, ps *poolState, rep *pools.Replica, err error) {
	p := &x.pump
	if p.sawUsage {
		g.recordUsage(x, ps, p.prompt, p.completion, p.usageModel, x.span)
	}
	x.errMsg = err.Error()
	p.fail(&wire.APIError{Type: "upstream_error", Code: "stream_interrupted",
		Message: fmt.Sprintf("the stream was interrupted (pool %q): %v", ps.Name, err)})
	g.log.Warn("stream cut by replica; ended the client stream with an error event", "request_id", x.id, "pool", ps.Name, "replica", rep.Name, "error", err.Error())
}

package router

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/textproto"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/switchyard/switchyard/policy"
	"github.com/switchyard/switchyard/pools"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// proxy sends the request to the decided pools in order until one answers.
func (g *Gateway) proxy(ctx context.Context, w http.ResponseWriter, r *http.Request, x *exchange) {
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
		if x.moreInChain && !fitsContext(ps, x) {
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
		done, err := g.tryPool(ctx, w, r, x, ps)
		if done {
			return
		}
		lastErr = err
		if ctx.Err() != nil {
			x.status = statusClientClosed
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
	if limit <= 0 || !x.ep.generates() || x.info == nil {
		return true
	}
	return x.info.PromptTokens+minFitAnswer <= limit
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

// upstreamFailure is a replica answer that will not be passed to the
// client as is (429, 5xx, or a sign the replica is misconfigured), kept to
// explain the final error.
type upstreamFailure struct {
	status int
	msg    string
	// retryAfter is what the replica's Retry-After said (0: nothing).
	retryAfter time.Duration
}

// parseRetryAfter reads a Retry-After header: delay seconds or an HTTP
// date (RFC 9110 §10.2.3). 0 when absent or unreadable.
func parseRetryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	if v = strings.TrimSpace(v); v != "" && strings.Trim(v, "0123456789") == "" {
		// delay-seconds: digits only; absurd values are capped at a day.
		if n, err := strconv.Atoi(v); err == nil {
			return time.Duration(min(n, 86400)) * time.Second
		}
		return 24 * time.Hour
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return min(t.Sub(now), 24*time.Hour)
	}
	return 0
}

func (u *upstreamFailure) Error() string {
	return fmt.Sprintf("replica answered %d: %s", u.status, u.msg)
}

// result is the outcome of one upstream attempt, as the executor needs it.
type result struct {
	// done: the exchange is over (an answer reached the client, or the
	// client went away); nothing is retried.
	done bool
	// retry: nothing reached the client and another replica may take the
	// request (only with !done).
	retry bool
	// outcome and detail feed passive health; reason labels the retry
	// metric if this attempt is retried.
	outcome pools.Outcome
	detail  string
	reason  string
	err     error
	// poison: two replicas gave the same 500 for the request (see
	// execute); the request, not the pool, is at fault.
	poison bool
}

// caller makes the attempts of one execution.
type caller interface {
	// send makes one attempt on rep, which the executor has counted in
	// flight and releases when send returns: send must have closed the
	// response body by then.
	send(ctx context.Context, rep *pools.Replica) result
	// acquired is told each replica chosen, before send.
	acquired(rep *pools.Replica)
}

// execution is one request to be placed on a pool by execute.
type execution struct {
	ps       *poolState
	req      *pools.Request
	attempts int
	call     caller
	// retries counts the retries actually sent.
	retries int
	// triedBuf backs the list of replicas tried, so that it costs no
	// allocation for the usual few attempts.
	triedBuf, refusedBuf [4]*pools.Replica
	// retryAfter is the largest Retry-After of the 429s seen.
	retryAfter time.Duration
	// only, when set, is the one replica that may take the request.
	only *pools.Replica
	// held is a retryable 5xx not yet told to passive health (see the
	// poison rule of execute).
	held *heldFailure
}

// execute is the one upstream executor, for client requests and classifier
// calls alike: acquire a replica, send, record the outcome for passive
// health, release, and retry per the rule below.
//
// Retry rule: an attempt is retried only while nothing has
// reached the client (send says so with retry), on a replica not yet
// tried, bounded by ex.attempts and the request's context. A 429 or 5xx
// answer is never retried on the replica that gave it; a failure to get
// any answer (a keep-alive connection a restarted replica had closed) may
// be retried on the same replica when no other can take it. A retry is
// counted, and its backoff slept, only when some replica can take it.
//
// Poison rule: a request that gets 500 from two replicas is taken to be
// the cause (a vLLM bug on one input, say): it is not retried further, and
// neither answer counts toward either replica's consecutive_5xx. So a
// retryable 500 is told to passive health only once the next attempt's
// status shows whether the request is to blame (settle; the slot is
// released at once all the same).
func (g *Gateway) execute(ctx context.Context, ex *execution) result {
	ps := ex.ps
	ex.held = nil
	defer ex.settle(ps, 0)
	// Replicas are compared by endpoint: a reload during a queue wait
	// hands the waiter the pool's new view, whose Replica values are new.
	tried := ex.triedBuf[:0]
	other := func(r *pools.Replica) bool { return ex.only != nil && r.Endpoint != ex.only.Endpoint }
	exclude := func(r *pools.Replica) bool { return other(r) || hasEndpoint(tried, r) }
	// refused lists the replicas whose attempt got no answer at all; only
	// those may be asked again when no other replica can take the request.
	refused := ex.refusedBuf[:0]
	answered := func(r *pools.Replica) bool {
		return other(r) || hasEndpoint(tried, r) && !hasEndpoint(refused, r)
	}
	var last result
	for a := 0; a < ex.attempts; a++ {
		same := false
		if a > 0 {
			if !ps.CanTake(exclude) {
				if last.outcome != pools.ConnectFailure || !ps.CanTake(answered) {
					break
				}
				same = true
			}
			if err := backoff(ctx, a, g.rand); err != nil {
				return result{err: err}
			}
		}
		waitStart := time.Now()
		var rep *pools.Replica
		var err error
		if same {
			rep, err = ps.Acquire(ctx, ex.req, answered)
		} else {
			rep, err = ps.Acquire(ctx, ex.req, exclude)
		}
		if err != nil {
			switch {
			case ctx.Err() != nil:
				return result{err: ctx.Err()}
			case a > 0:
				return last
			case errors.Is(err, pools.ErrSaturated):
				return result{err: fmt.Errorf("%w: pool %q: every replica is at max_inflight %d", errNoReplica, ps.Name, ps.MaxInflight())}
			}
			return result{err: fmt.Errorf("%w: pool %q has no healthy replica", errNoReplica, ps.Name)}
		}
		g.metrics.queueWait.WithLabelValues(ps.Name).Observe(time.Since(waitStart).Seconds())
		if a > 0 {
			ex.retries++
			g.metrics.retries.WithLabelValues(ps.Name, last.reason).Inc()
		}
		tried = append(tried, rep)
		ex.call.acquired(rep)
		res := ex.call.send(ctx, rep)
		status := failedStatus(res)
		if ex.held != nil && poisonStatus(status) && status == ex.held.status {
			// The same 500 from a second replica: the request's fault.
			ex.held = nil
			ps.Release(rep)
			g.metrics.poison.WithLabelValues(ps.Name).Inc()
			res.retry, res.poison = false, true
			return res
		}
		ex.settle(ps, status)
		if poisonStatus(status) && res.retry && !res.done && ctx.Err() == nil && a+1 < ex.attempts {
			ex.held = &heldFailure{rep: rep, outcome: res.outcome, detail: res.detail, status: status}
		} else {
			ps.Observe(rep, res.outcome, res.detail)
		}
		ps.Release(rep)
		if res.done || !res.retry || ctx.Err() != nil {
			return res
		}
		var uf *upstreamFailure
		if errors.As(res.err, &uf) && uf.status == http.StatusTooManyRequests {
			// The client is told the longest wait any replica asked for.
			ex.retryAfter = max(ex.retryAfter, uf.retryAfter)
			uf.retryAfter = ex.retryAfter
		}
		if res.outcome == pools.ConnectFailure && !hasEndpoint(refused, rep) {
			refused = append(refused, rep)
		}
		last = res
	}
	return last
}

// heldFailure is a replica's 5xx not yet told to passive health (see the
// poison rule of execute).
type heldFailure struct {
	rep     *pools.Replica
	outcome pools.Outcome
	detail  string
	status  int
}

// replicaDepthMargin is how much deeper than a request replica data may
// nest: an answer echoes the request inside its own structure (the
// Responses API's response.created carries the request's tools one level
// down), so a request at the bound must not make its answer refused.
const replicaDepthMargin = 16

func replicaDepth(requestBound int) int { return requestBound + replicaDepthMargin }

// poisonStatus reports a status the poison rule applies to: 500, what
// vLLM answers when one input makes it fail. 502, 503 and 504 describe the
// replica or what stands before it (overloaded, restarting), not the
// request.
func poisonStatus(status int) bool { return status == http.StatusInternalServerError }

// settle tells passive health of a held 5xx once the next attempt's answer
// has a status that is not the same failure (status 0: the execution ends
// without one): the replica was at fault after all. It is called as soon
// as the next answer's headers are judged, not when that answer ends, so
// a failing replica is counted while a long stream runs elsewhere.
func (ex *execution) settle(ps *poolState, status int) {
	if h := ex.held; h != nil && !(status != 0 && status == h.status) {
		ex.held = nil
		ps.Observe(h.rep, h.outcome, h.detail)
	}
}

// hasEndpoint reports whether rs holds a replica of r's endpoint.
func hasEndpoint(rs []*pools.Replica, r *pools.Replica) bool {
	for _, x := range rs {
		if x.Endpoint == r.Endpoint {
			return true
		}
	}
	return false
}

// failedStatus is the status of a replica's failed answer (0 when the
// attempt got none, or succeeded).
func failedStatus(res result) int {
	var uf *upstreamFailure
	if res.done || !errors.As(res.err, &uf) {
		return 0
	}
	return uf.status
}

// isConnectTimeout reports a timeout while connecting (dial or TLS
// handshake): the request was never sent, so it is a connection failure,
// retried elsewhere, not a slow answer.
func isConnectTimeout(err error) bool {
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Op == "dial" {
		return true
	}
	return strings.Contains(err.Error(), "TLS handshake timeout")
}

// judgeStatus classifies a replica's answer status: what it says about the
// replica, and whether another replica may be asked instead.
func judgeStatus(status int) (o pools.Outcome, retry bool, reason string) {
	switch {
	case status == http.StatusTooManyRequests:
		return pools.Neutral, true, "status_429"
	case status >= 500:
		return pools.Status5xx, true, "status_5xx"
	case status == http.StatusUnauthorized || status == http.StatusForbidden || status == http.StatusNotFound:
		// The client's credentials are never forwarded and the model
		// was rewritten to the pool's: the pool's key is wrong, or the
		// server does not serve the pool's model.
		return pools.Misconfigured, true, "misconfigured"
	}
	return pools.Success, false, ""
}

// judgeError classifies a failure to get an answer from rep: the client
// going away, a timeout (never retried), or a connection failure.
func judgeError(ctx context.Context, ps *poolState, rep *pools.Replica, err error, what string) result {
	if ctx.Err() != nil {
		return result{done: true, outcome: pools.Neutral, err: ctx.Err()}
	}
	ue := &upstreamError{pool: ps.Name, replica: rep.Name, err: err}
	if what != "" {
		ue.err = fmt.Errorf("%s: %w", what, err)
	}
	if isTimeout(err) && !isConnectTimeout(err) {
		// Not replayed: the request may be slow rather than lost, and a
		// replay doubles the load. Answers 504.
		return result{outcome: pools.Timeout, detail: ue.err.Error(), err: ue}
	}
	return result{retry: true, outcome: pools.ConnectFailure, detail: ue.err.Error(), reason: "connect", err: ue}
}

// tryPool places the request on ps through the executor. It returns done
// once a response has been committed to the client.
func (g *Gateway) tryPool(ctx context.Context, w http.ResponseWriter, r *http.Request, x *exchange, ps *poolState) (bool, error) {
	body := x.body
	if x.info.Model != "" && x.info.Model != ps.Model {
		var err error
		if body, err = sjson.SetBytes(body, "model", ps.Model); err != nil {
			return false, badRequest("model", "could not rewrite model: "+err.Error())
		}
	}
	if x.ep.generates() {
		body = fitAnswer(body, len(body), ps.cfg.MaxModelLen)
	}
	injected := false
	if x.info.Stream && !x.info.IncludeUsage && x.ep <= completionsEndpoint {
		// Ask for usage so token accounting is complete; the extra usage
		// chunk is removed from what the client receives.
		if b, err := sjson.SetBytes(body, "stream_options.include_usage", true); err == nil {
			body, injected = b, true
		}
	}
	x.preq = pools.Request{}
	if x.key != nil {
		// Waiting for a full replica, keys take turns by weight.
		x.preq.Tenant, x.preq.Weight = x.key.name, x.key.weight
	}
	if ps.Balance() == "affinity" {
		x.preq.Key = affinityKey(x, r, ps.cfg.Affinity.Depth)
	}
	// Until a replica is chosen, an error names this pool and no replica.
	x.pool, x.replica = ps.Name, ""
	x.up = upstreamCall{w: w, r: r, ps: ps, body: body, injected: injected}
	x.exec = execution{ps: ps, req: &x.preq, attempts: 1 + ps.cfg.Retries, call: x, only: x.pinned}
	res := g.execute(ctx, &x.exec)
	x.retries += x.exec.retries
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
	u := &x.up
	return x.g.attempt(ctx, u.w, u.r, x, u.ps, rep, u.body, u.injected)
}

// backoff waits a jittered, growing delay before retry number a (≥1),
// returning early with the context's error.
func backoff(ctx context.Context, a int, rnd func() uint64) error {
	base := 10 * time.Millisecond << min(a-1, 4)
	d := base/2 + time.Duration(rnd()%uint64(base))
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// attempt sends one client request to rep and, if the replica answers
// acceptably, passes the answer to the client.
func (g *Gateway) attempt(ctx context.Context, w http.ResponseWriter, r *http.Request, x *exchange, ps *poolState, rep *pools.Replica, body []byte, injected bool) result {
	ctx, span := g.startSpan(ctx, "switchyard.upstream", trace.WithSpanKind(trace.SpanKindClient))
	defer span.End()
	recording := span.IsRecording()
	if recording {
		span.SetAttributes(attrSwitchyardPool.String(ps.Name), attrSwitchyardReplica.String(rep.Name),
			attrGenAIOperation.String(x.ep.operation()), attrGenAIProvider.String(genAIProvider))
		span.SetAttributes(appendString(x.requestSettings(), attrGenAIRequestModel, ps.Model)...)
	}
	clock := &x.clock
	hctx := clock.start(ctx, ps.timeouts)
	defer clock.stop()
	out, err := g.upstreamRequest(ctx, hctx, x, r, ps, rep, body)
	if err != nil {
		return result{err: fmt.Errorf("%w: %v", errUpstream, err)}
	}
	if recording {
		span.SetAttributes(clientRequestAttrs(out)...)
	}
	resp, err := rep.Client().Do(out)
	resp, err = clock.headers(hctx, resp, err)
	if err != nil {
		if ctx.Err() != nil {
			// The client went away: the call was cancelled, not failed.
			x.status = statusClientClosed
		} else {
			setClientError(span, transportErrorType(err), err)
		}
		return judgeError(ctx, ps, rep, err, "")
	}
	defer resp.Body.Close()
	// A held failure of an earlier attempt is settled now, not when this
	// answer (perhaps a long stream) ends.
	x.exec.settle(ps, resp.StatusCode)
	o, retry, reason := judgeStatus(resp.StatusCode)
	if resp.StatusCode == http.StatusNotFound && x.ep > completionsEndpoint {
		// On chat and completions a 404 means the server lacks the pool's
		// model. Elsewhere it may be an answer: a stored response that is
		// not there, or an endpoint this vLLM version lacks (FastAPI's
		// {"detail":"Not Found"}), which says nothing of the replica's
		// other traffic.
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 16<<10))
		resp.Body = io.NopCloser(bytes.NewReader(b))
		if x.pinned != nil || !x.ep.generates() || !bytes.Contains(bytes.ToLower(b), []byte("model")) {
			o, retry = pools.Neutral, false
		}
	}
	if x.ep == countTokensEndpoint && resp.StatusCode == http.StatusNotFound {
		return g.countTokensLocally(w, x, resp)
	}
	if retry {
		msg := readErrorMessage(resp.Body)
		setClientStatus(span, resp.StatusCode, msg)
		uf := &upstreamFailure{status: resp.StatusCode, msg: msg}
		if resp.StatusCode == http.StatusTooManyRequests {
			uf.retryAfter = parseRetryAfter(resp.Header.Get("Retry-After"), time.Now())
		}
		return result{retry: true, outcome: o, reason: reason, detail: fmt.Sprintf("status %d: %s", resp.StatusCode, msg), err: uf}
	}
	setClientStatus(span, resp.StatusCode, "")
	isStream := resp.StatusCode == http.StatusOK && strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream")
	if !isStream {
		buf := getBuffer()
		defer putBuffer(buf)
		clock.body()
		if n, err := buf.ReadFrom(io.LimitReader(resp.Body, maxResponseBytes+1)); err == nil && n > maxResponseBytes {
			// Terminal: the answer is the request's, not the replica's
			// fault; neither retried nor counted against the replica.
			ue := &upstreamError{pool: ps.Name, replica: rep.Name,
				err: fmt.Errorf("%w: non-stream answer larger than %d bytes", errAnswerTooLarge, maxResponseBytes)}
			setClientError(span, errTypeTooLarge, ue)
			return result{outcome: pools.Neutral, err: ue}
		} else if err != nil {
			if ctx.Err() != nil {
				x.status = statusClientClosed
			}
			var pt *phaseTimeout
			if errors.As(context.Cause(hctx), &pt) {
				err = pt // the answer stalled (stream_idle_timeout)
			}
			if ctx.Err() == nil {
				setClientError(span, transportErrorType(err), err)
			}
			// Nothing has reached the client yet: safe to retry, unless
			// it was a timeout.
			return judgeError(ctx, ps, rep, err, "reading body")
		}
		answer := buf.Bytes()
		if x.moreInChain && contextOverflow(resp.StatusCode, answer) {
			// Nothing reached the client: the next, larger pool of the
			// chain takes the request. Not the replica's fault.
			return result{outcome: pools.Neutral, err: fmt.Errorf("%w: replica %q: %s", errContextLength, rep.Name, readErrorMessage(bytes.NewReader(answer)))}
		}
		if d := replicaDepth(x.snap.Config.Server.MaxJSONDepth); resp.StatusCode == http.StatusOK && !checkDepth(answer, d) {
			// Read as untrusted as a client's body: never parsed.
			ue := &upstreamError{pool: ps.Name, replica: rep.Name, err: fmt.Errorf("the answer nests JSON deeper than %d levels", d)}
			return result{retry: true, outcome: pools.Status5xx, reason: "status_5xx", detail: ue.err.Error(), err: ue}
		}
		switch {
		case resp.StatusCode == http.StatusOK:
			answer = x.rewriteAnswer(answer, rep)
		case resp.StatusCode >= 400 && x.ep.anthropic():
			answer = anthropicError(resp.StatusCode, answer)
		}
		g.writeHeaders(w, x, resp, int64(len(answer)))
		w.WriteHeader(resp.StatusCode)
		x.status, x.sent = resp.StatusCode, resp.StatusCode
		// The write deadline also covers the flush net/http makes when the
		// handler returns, after the access line and metrics are recorded;
		// flushing here would let the client see the end of its answer
		// before they are.
		p := pump{w: w, rc: x.responseController(w), writeTimeout: x.snap.Config.Server.WriteTimeout.Std()}
		_ = p.write(answer)
		if resp.StatusCode == http.StatusOK && x.storedID == "" { // a stored response's tokens were counted when it was made
			g.usage(x, ps, buf.Bytes(), span)
			if recording {
				var a genAIResponse
				a.readAnswer(buf.Bytes())
				setResponseAttrs(span, x.span, a.attrs())
			}
		}
		return result{done: true, outcome: pools.Success}
	}
	g.writeHeaders(w, x, resp, -1)
	w.WriteHeader(resp.StatusCode)
	x.status, x.sent = resp.StatusCode, resp.StatusCode
	clock.streaming()
	g.trackStream(x, clock.cancel)
	defer g.untrackStream(x)
	var sw *spanWriter
	if recording {
		sw = &spanWriter{w: w}
		defer func() { setResponseAttrs(span, x.span, sw.resp.attrs()) }()
	}
	x.pump = pump{w: w, rc: x.responseController(w), writeTimeout: x.snap.Config.Server.WriteTimeout.Std(),
		injected: injected, clock: clock, token: x, ep: x.ep, rewriteModel: x.clientModel, maxDepth: replicaDepth(x.snap.Config.Server.MaxJSONDepth)}
	if x.ep == responsesEndpoint {
		x.pump.idTag, x.pump.ids = replicaTag(rep), x.ids()
	}
	if sw != nil {
		x.pump.w = sw
	}
	if rc := ps.cfg.Resume; rc.Enabled {
		x.pump.resume = newResumeState(x, int(rc.MaxBuffer))
	}
	p := &x.pump
	err = p.flush()
	if err == nil {
		err = p.run(resp.Body)
	}
	if p.sawUsage {
		g.recordUsage(x, ps, p.prompt, p.completion, p.usageModel, span)
	}
	if err == nil {
		return result{done: true, outcome: pools.Success}
	}
	if ctx.Err() != nil || errors.Is(err, errClientGone) {
		// The client went away (or stopped reading for write_timeout);
		// the upstream request is cancelled with the attempt's context
		// (vLLM then frees the KV cache).
		x.status = statusClientClosed
		x.errMsg = "client closed the stream"
		if errors.Is(err, errClientGone) && ctx.Err() == nil {
			x.errMsg = "client stopped reading: " + err.Error()
		}
		if !p.sawUsage && p.deltas > 0 {
			// The usage never came: count what was streamed.
			g.recordUsage(x, ps, 0, p.deltas, p.usageModel, span)
		}
		return result{done: true, outcome: pools.Neutral}
	}
	// A replica that cut its stream, or stalled it past first_token_timeout
	// or stream_idle_timeout, failed; one that ran into
	// max_stream_duration just produced a long answer.
	outcome := pools.Status5xx
	x.status = http.StatusBadGateway // counted as failed although 200 was sent
	var pt *phaseTimeout
	switch cause := context.Cause(hctx); {
	case errors.As(cause, &pt):
		err = fmt.Errorf("%w: %s", errStreamCut, pt.msg)
		if pt == ps.timeouts.totalErr {
			outcome = pools.Neutral
		}
	case errors.Is(cause, errShuttingDown):
		err, outcome, x.status = errShuttingDown, pools.Neutral, http.StatusServiceUnavailable
	}
	if p.resume != nil {
		cause := context.Cause(hctx)
		clock.stop()
		if g.resume(ctx, x, ps, rep, p, cause) {
			// This replica's call failed although the client's stream
			// was completed by another.
			setClientError(span, errTypeStreamCut, err)
			if x.status != statusClientClosed {
				x.status = http.StatusOK
			}
			g.log.Warn("stream cut by replica; resumed on another replica", "request_id", x.id, "pool", ps.Name, "replica", rep.Name, "error", err.Error())
			if p.sawUsage {
				g.recordUsage(x, ps, p.prompt, p.completion, p.usageModel, span)
			}
			return result{done: true, outcome: outcome, detail: "stream: " + err.Error()}
		}
	}
	x.errMsg = err.Error()
	setClientError(span, errTypeStreamCut, err)
	p.fail(&apiError{Type: "upstream_error", Code: "stream_interrupted",
		Message: fmt.Sprintf("the stream was interrupted (pool %q): %v", ps.Name, err)})
	g.log.Warn("stream cut by replica; ended the client stream with an error event", "request_id", x.id, "pool", ps.Name, "replica", rep.Name, "error", err.Error())
	return result{done: true, outcome: outcome, detail: "stream: " + err.Error()}
}

// upstreamRequest builds the request to rep for client request r: body,
// the client's headers less hop-by-hop ones and its credentials, the
// forwarding headers, the request id, the pool's key and the trace context
// of ctx. hctx is the attempt's context.
func (g *Gateway) upstreamRequest(ctx, hctx context.Context, x *exchange, r *http.Request, ps *poolState, rep *pools.Replica, body []byte) (*http.Request, error) {
	method, target := http.MethodPost, rep.Base()+x.ep.path()
	var rd io.Reader = bytes.NewReader(body)
	switch {
	case x.storedID != "":
		method, target = r.Method, rep.Base()+"/v1/responses/"+url.PathEscape(x.storedID)+x.storedSuffix
		if r.URL.RawQuery != "" {
			target += "?" + r.URL.RawQuery // stream, starting_after, include
		}
		if len(body) == 0 {
			rd = http.NoBody
		}
	case x.ep.anthropic() && r.URL.RawQuery != "":
		target += "?" + r.URL.RawQuery // ?beta=true, as Claude Code sends it
	}
	out, err := http.NewRequestWithContext(hctx, method, target, rd)
	if err != nil {
		return nil, err
	}
	copyRequestHeaders(out.Header, r.Header)
	setForwarded(out.Header, r)
	out.Header[headerReqID] = x.idHeader
	if rd != http.NoBody {
		out.Header["Content-Type"] = jsonContentType
	}
	if k := ps.cfg.APIKey; k != "" {
		out.Header.Set("Authorization", "Bearer "+string(k))
	}
	if g.tracing {
		g.prop.Inject(ctx, propagation.HeaderCarrier(out.Header))
	}
	return out, nil
}

// upstreamError is a failure to reach a replica or read its answer; it
// keeps the cause (a timeout maps to 504) and reads as errUpstream.
type upstreamError struct {
	pool, replica string
	err           error
}

func (e *upstreamError) Error() string {
	return fmt.Sprintf("%v: pool %q replica %q: %s", errUpstream, e.pool, e.replica, trimURLError(e.err))
}

func (e *upstreamError) Unwrap() []error { return []error{errUpstream, e.err} }

func trimURLError(err error) string {
	s := err.Error()
	if i := strings.LastIndex(s, ": "); i >= 0 && strings.HasPrefix(s, "Post ") {
		return s[i+2:]
	}
	return s
}

// readErrorMessage reads a replica's error body (bounded) for the message.
func readErrorMessage(body io.Reader) string {
	b, _ := io.ReadAll(io.LimitReader(body, 16<<10))
	// A replica's message may quote the request (vLLM's validation
	// errors do): it is cut like any echoed client string, with more room.
	if !checkDepth(b, policy.DefaultMaxJSONDepth) {
		return clipN(strings.TrimSpace(string(b)), maxReplicaEcho)
	}
	if m := gjson.GetBytes(b, "error.message"); m.Exists() {
		return clipN(m.String(), maxReplicaEcho)
	}
	if m := gjson.GetBytes(b, "message"); m.Exists() {
		return clipN(m.String(), maxReplicaEcho)
	}
	return clipN(strings.TrimSpace(string(b)), maxReplicaEcho)
}

var jsonContentType = []string{"application/json"}

// maxResponseBytes bounds a non-stream answer held in memory before it is
// passed on (streams are never held).
var maxResponseBytes int64 = 64 << 20

// hopHeaders are connection-specific (RFC 9110 §7.6.1) and never forwarded.
var hopHeaders = []string{
	"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

func isHop(k string) bool {
	for _, h := range hopHeaders {
		if k == h {
			return true
		}
	}
	return false
}

// copyRequestHeaders forwards the client's headers except hop-by-hop ones,
// the client's credentials for Switchyard, and those the transport sets.
func copyRequestHeaders(dst, src http.Header) {
	for k, vv := range src {
		switch k {
		case "Authorization", "X-Api-Key", "Content-Length", "Host", "Accept-Encoding", headerReqID:
			continue // the client's credentials are for Switchyard
		}
		if isHop(k) {
			continue
		}
		dst[k] = vv
	}
	dropConnectionHeaders(dst, src)
}

// dropConnectionHeaders removes from dst the headers that src's Connection
// header names: they are hop-by-hop too (RFC 9110 §7.6.1).
func dropConnectionHeaders(dst, src http.Header) {
	for _, f := range src["Connection"] {
		for name := range strings.SplitSeq(f, ",") {
			if name = textproto.TrimString(name); name != "" {
				dst.Del(name)
			}
		}
	}
}

// setForwarded tells the replica who the client is, as
// httputil.ReverseProxy does: the peer's address is appended to
// X-Forwarded-For, and X-Forwarded-Host and X-Forwarded-Proto describe the
// request the gateway received. A Forwarded element (RFC 7239) is
// appended with the same facts.
func setForwarded(dst http.Header, in *http.Request) {
	proto, protoV := "http", protoHTTP
	if in.TLS != nil {
		proto, protoV = "https", protoHTTPS
	}
	dst["X-Forwarded-Proto"] = protoV // shared, read-only
	ip, _, err := net.SplitHostPort(in.RemoteAddr)
	if err != nil {
		dst.Del("X-Forwarded-For")
		dst.Del("Forwarded")
		return
	}
	// One backing array for the three values: one allocation, not three.
	vals := make([]string, 3)
	if in.Host != "" {
		vals[0] = in.Host
		dst["X-Forwarded-Host"] = vals[0:1:1]
	}
	vals[1] = ip
	if prior := dst["X-Forwarded-For"]; len(prior) > 0 {
		vals[1] = strings.Join(prior, ", ") + ", " + ip
	}
	dst["X-Forwarded-For"] = vals[1:2:2]
	node := ip
	if strings.Contains(ip, ":") {
		node = `"[` + ip + `]"` // IPv6 is quoted and bracketed (RFC 7239 §6)
	}
	vals[2] = "for=" + node + ";proto=" + proto
	if prior := strings.Join(dst["Forwarded"], ", "); prior != "" && strings.Count(prior, `"`)%2 == 0 {
		// A client's value with an open quote would swallow ours; such a
		// value is dropped rather than passed on.
		vals[2] = prior + ", " + vals[2]
	}
	dst["Forwarded"] = vals[2:3:3]
}

var (
	protoHTTP  = []string{"http"}
	protoHTTPS = []string{"https"}
)

// writeHeaders copies the replica's response headers and adds Switchyard's.
// length < 0 means streamed (no Content-Length).
func (g *Gateway) writeHeaders(w http.ResponseWriter, x *exchange, resp *http.Response, length int64) {
	h := w.Header()
	for k, vv := range resp.Header {
		if isHop(k) || k == "Content-Length" || k == headerReqID {
			continue
		}
		h[k] = vv
	}
	dropConnectionHeaders(h, resp.Header)
	if length >= 0 {
		h.Set("Content-Length", strconv.FormatInt(length, 10))
	}
	g.setRouteHeaders(h, x)
}

// setRouteHeaders sets the X-Switchyard-* headers and X-Request-Id. The
// header names are already canonical; the values share one backing array so
// this costs one allocation rather than one per header.
func (g *Gateway) setRouteHeaders(h http.Header, x *exchange) {
	vals := [5]string{x.id, x.route, x.pool, x.replica, x.class}
	backing := vals[:]
	set := func(k string, i int) {
		if vals[i] != "" {
			h[k] = backing[i : i+1 : i+1]
		}
	}
	set(headerReqID, 0)
	set(headerRoute, 1)
	set(headerPool, 2)
	set(headerReplica, 3)
	set(headerClass, 4)
}

// countTokensLocally answers count_tokens for a vLLM without it (older
// versions answer 404): an estimate, about four bytes of JSON per token.
func (g *Gateway) countTokensLocally(w http.ResponseWriter, x *exchange, resp *http.Response) result {
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 16<<10))
	answer := []byte(`{"input_tokens":` + itoa(int64(x.info.PromptTokens)) + `}`)
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", itoa(int64(len(answer))))
	g.setRouteHeaders(h, x)
	w.WriteHeader(http.StatusOK)
	x.status, x.sent = http.StatusOK, http.StatusOK
	_, _ = w.Write(answer)
	return result{done: true, outcome: pools.Neutral}
}

// rewriteAnswer applies to a non-stream answer what the gateway changes:
// the model name with rewrite_response_model, and a Responses answer's id
// (see storedPrefix).
func (x *exchange) rewriteAnswer(answer []byte, rep *pools.Replica) []byte {
	if x.ep == responsesEndpoint {
		answer = trimUsage(responseIDs(answer, replicaTag(rep), x.ids()), "")
	}
	if x.clientModel != "" && gjson.GetBytes(answer, "model").Exists() {
		if out, err := sjson.SetBytes(answer, "model", x.clientModel); err == nil {
			answer = out
		}
	}
	return answer
}

// usage records the token counts of a non-stream response.
func (g *Gateway) usage(x *exchange, ps *poolState, data []byte, span trace.Span) {
	if p, c, ok := readUsage(data); ok {
		g.recordUsage(x, ps, p, c, gjson.GetBytes(data, "model").String(), span)
	}
}

// readUsage reads the usage object of a response or chunk.
func readUsage(data []byte) (prompt, completion int64, ok bool) {
	u := gjson.GetBytes(data, "usage")
	if !u.IsObject() {
		return 0, 0, false
	}
	if !u.Get("prompt_tokens").Exists() && u.Get("input_tokens").Exists() {
		// The Responses and Messages APIs' names.
		return u.Get("input_tokens").Int(), u.Get("output_tokens").Int(), true
	}
	return u.Get("prompt_tokens").Int(), u.Get("completion_tokens").Int(), true
}

// recordUsage counts one request's tokens, once.
func (g *Gateway) recordUsage(x *exchange, ps *poolState, p, c int64, model string, span trace.Span) {
	x.prompt, x.complete = p, c
	g.metrics.tokens.WithLabelValues(ps.Name, "prompt").Add(float64(p))
	g.metrics.tokens.WithLabelValues(ps.Name, "completion").Add(float64(c))
	g.metrics.keyTokens.WithLabelValues(x.keyName(), "prompt").Add(float64(p))
	g.metrics.keyTokens.WithLabelValues(x.keyName(), "completion").Add(float64(c))
	if span.IsRecording() {
		if model != "" {
			setResponseAttrs(span, x.span, []attribute.KeyValue{attrGenAIResponseModel.String(model)})
		}
		setUsage(span, p, c)
		setUsage(x.span, p, c)
	}
}

var bufferPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

func getBuffer() *bytes.Buffer { return bufferPool.Get().(*bytes.Buffer) }

func putBuffer(b *bytes.Buffer) {
	if b.Cap() > 1<<20 {
		return // let unusually large buffers go
	}
	b.Reset()
	bufferPool.Put(b)
}

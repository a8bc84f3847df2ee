package router

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/switchyard/switchyard/classifier"
	"github.com/switchyard/switchyard/policy"
	"github.com/switchyard/switchyard/pools"
)

// Response headers set on every proxied response (CONTRACT §2).
const (
	headerRoute   = "X-Switchyard-Route"
	headerPool    = "X-Switchyard-Pool"
	headerReplica = "X-Switchyard-Replica"
	headerClass   = "X-Switchyard-Class"
	headerReqID   = "X-Request-Id"
)

// exchange is the state of one client request, for headers, metrics, the
// access log and the span.
type exchange struct {
	start    time.Time
	id       string
	ep       endpoint
	snap     *Snapshot
	info     *reqInfo
	body     []byte
	key      *apiKey
	decision policy.Decision
	class    string
	route    string
	pool     string
	replica  string
	status   int
	retries  int
	fallback string
	ttft     time.Duration
	prompt   int64
	complete int64
	errMsg   string
	span     trace.Span
}

func (g *Gateway) chat(w http.ResponseWriter, r *http.Request) { g.serve(w, r, chatEndpoint) }
func (g *Gateway) completions(w http.ResponseWriter, r *http.Request) {
	g.serve(w, r, completionsEndpoint)
}

func (g *Gateway) serve(w http.ResponseWriter, r *http.Request, ep endpoint) {
	x := &exchange{start: time.Now(), ep: ep, snap: g.snap.Load()}
	x.id = r.Header.Get(headerReqID)
	if x.id == "" || len(x.id) > 128 {
		x.id = g.newRequestID()
	}
	w.Header().Set(headerReqID, x.id)
	ctx := r.Context()
	if g.tracing {
		ctx = g.prop.Extract(ctx, propagation.HeaderCarrier(r.Header))
	}
	ctx, x.span = g.startSpan(ctx, "switchyard.request", trace.WithSpanKind(trace.SpanKindServer))
	defer g.finish(x)

	if err := g.prepare(ctx, w, r, x); err != nil {
		g.fail(w, x, err, "")
		return
	}
	g.proxy(ctx, w, r, x)
}

// prepare authenticates, reads and checks the request, and decides its route.
func (g *Gateway) prepare(ctx context.Context, w http.ResponseWriter, r *http.Request, x *exchange) error {
	s := x.snap
	key, err := s.authenticate(r)
	if err != nil {
		return err
	}
	x.key = key
	body, err := readBody(r, int64(s.Config.Server.MaxBodyBytes))
	if err != nil {
		return err
	}
	x.body = body
	info, err := parseRequest(body, x.ep)
	if err != nil {
		return err
	}
	x.info = info
	if key != nil && key.limiter != nil && !key.limiter.Allow() {
		return fmt.Errorf("%w: API key %q is over its rate of %g requests/s", errRateLimited, key.name, key.rate.RPS)
	}
	tgt, ok := s.models[info.Model]
	if !ok {
		return fmt.Errorf("%w: the model `%s` does not exist (see GET /v1/models)", errModelNotFound, info.Model)
	}
	if !key.allows(info.Model) {
		return fmt.Errorf("%w: API key %q may not use model %q", errForbidden, key.name, info.Model)
	}
	if !tgt.policy {
		x.decision = policy.Decision{Route: "direct", Pools: []string{tgt.pool.Name}}
	} else {
		x.decision = g.decide(ctx, r, x, false)
	}
	x.route = x.decision.Route
	if x.decision.Classified {
		x.class = x.decision.Class
		w.Header().Set(headerClass, x.class)
	}
	w.Header().Set(headerRoute, x.route)
	return nil
}

// decide evaluates the policy, classifying lazily.
func (g *Gateway) decide(ctx context.Context, r *http.Request, x *exchange, explain bool) policy.Decision {
	s := x.snap
	info := x.info
	ctx, span := g.startSpan(ctx, "switchyard.route")
	defer span.End()
	preq := &policy.Request{
		Model: info.Model, Stream: info.Stream, Tools: info.Tools, Messages: info.Messages,
		PromptTokens: info.PromptTokens, Header: r.Header,
	}
	if x.key != nil {
		preq.Key = x.key.name
	}
	if id := sessionID(s, r, info); id != "" {
		// A session's decision is kept per API key and model name, so a
		// session id cannot carry one key's (or model's) route to another.
		preq.Session = preq.Key + "\x00" + info.Model + "\x00" + id
	}
	d := s.Policy.Decide(preq, func() policy.Classification { return g.classify(ctx, x) }, explain)
	if d.Sticky && d.Classified && s.classifier != nil {
		s.classifier.CountSticky(d.Class)
	}
	if span.IsRecording() {
		span.SetAttributes(attribute.String("switchyard.route", d.Route), attribute.StringSlice("switchyard.pools", d.Pools))
	}
	return d
}

// sessionID is the configured session header's value, else the body's user
// field ("" without a session section).
func sessionID(s *Snapshot, r *http.Request, info *reqInfo) string {
	if s.Config.Session == nil {
		return ""
	}
	if h := s.Config.Session.Header; h != "" {
		if v := r.Header.Get(h); v != "" {
			return v
		}
	}
	return info.User
}

func (g *Gateway) classify(ctx context.Context, x *exchange) policy.Classification {
	c := x.snap.classifier
	if c == nil {
		return policy.Classification{}
	}
	ctx, span := g.startSpan(ctx, "switchyard.classify")
	defer span.End()
	res := c.Classify(ctx, classifierInput(x.info))
	span.SetAttributes(attribute.String("switchyard.class", res.Label), attribute.String("switchyard.classifier.result", res.Outcome))
	if res.Err != nil {
		span.SetStatus(codes.Error, res.Err.Error())
		g.log.Warn("classifier failed; using on_error label", "request_id", x.id, "label", res.Label, "result", res.Outcome, "error", res.Err.Error())
	}
	return policy.Classification{Label: res.Label, Scores: res.Scores}
}

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
		if i > 0 {
			reason := "no_replica"
			if !errors.Is(lastErr, errNoReplica) {
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
	}
	g.fail(w, x, lastErr, "")
}

// statusClientClosed marks a request whose client went away (nginx's 499).
const statusClientClosed = 499

// upstreamFailure is a replica answer that will not be passed to the
// client as is (429 or 5xx), kept to explain the final error.
type upstreamFailure struct {
	status int
	msg    string
}

func (u *upstreamFailure) Error() string {
	return fmt.Sprintf("replica answered %d: %s", u.status, u.msg)
}

// tryPool places the request on ps, retrying on other replicas. It returns
// done once a response has been committed to the client.
//
// Retry rule (STYLE §10): an attempt is retried on another replica only
// while no byte has reached the client — on a connection error or timeout,
// on 429 or 5xx from the replica, or when a non-stream body could not be
// read in full — bounded by the pool's retries and by the request's context.
// Once a response is committed, a failure ends the stream with an error
// event and aborts the connection; it is never retried.
func (g *Gateway) tryPool(ctx context.Context, w http.ResponseWriter, r *http.Request, x *exchange, ps *poolState) (bool, error) {
	body := x.body
	if x.info.Model != ps.Model {
		var err error
		if body, err = sjson.SetBytes(body, "model", ps.Model); err != nil {
			return false, badRequest("model", "could not rewrite model: "+err.Error())
		}
	}
	injected := false
	if x.info.Stream && !x.info.IncludeUsage {
		// Ask for usage so token accounting is complete; the extra usage
		// chunk is removed from what the client receives.
		if b, err := sjson.SetBytes(body, "stream_options.include_usage", true); err == nil {
			body, injected = b, true
		}
	}
	preq := &pools.Request{}
	if ps.Balance() == "affinity" {
		preq.Key = affinityKey(x, r, ps.cfg.Affinity.Depth)
	}
	// Until a replica is chosen, an error names this pool and no replica.
	x.pool, x.replica = ps.Name, ""
	var tried []*pools.Replica
	exclude := func(rep *pools.Replica) bool {
		for _, t := range tried {
			if t == rep {
				return true
			}
		}
		return false
	}
	attempts := 1 + *ps.cfg.Retries
	var lastErr error
	for a := 0; a < attempts; a++ {
		if a > 0 {
			x.retries++
			if err := backoff(ctx, a, g.rand); err != nil {
				return false, err
			}
		}
		waitStart := time.Now()
		rep, err := ps.Acquire(ctx, preq, exclude)
		if errors.Is(err, pools.ErrNoReplica) && len(tried) > 0 && isConnError(lastErr) {
			// Every other replica is out, and the last attempt could not
			// even talk to its replica (e.g. a keep-alive connection that
			// a restarted replica had closed): the same replica may take
			// it now. A 429 or 5xx answer is never retried on the replica
			// that gave it.
			rep, err = ps.Acquire(ctx, preq, nil)
		}
		if err != nil {
			if ctx.Err() != nil {
				return false, ctx.Err()
			}
			if errors.Is(err, pools.ErrSaturated) {
				return false, fmt.Errorf("%w: pool %q: every replica is at max_inflight %d", errNoReplica, ps.Name, ps.MaxInflight())
			}
			if len(tried) == 0 || lastErr == nil {
				return false, fmt.Errorf("%w: pool %q has no healthy replica", errNoReplica, ps.Name)
			}
			return false, lastErr
		}
		g.metrics.queueWait.WithLabelValues(ps.Name).Observe(time.Since(waitStart).Seconds())
		tried = append(tried, rep)
		x.pool, x.replica = ps.Name, rep.Name
		done, retryable, err := g.attempt(ctx, w, r, x, ps, rep, body, injected)
		if done {
			return true, nil
		}
		lastErr = err
		if !retryable || ctx.Err() != nil {
			return false, err
		}
		if a+1 < attempts {
			g.metrics.retries.WithLabelValues(ps.Name, retryReason(err)).Inc()
		}
	}
	return false, lastErr
}

// isConnError reports a failure to exchange with a replica at all (not an
// answer it gave, not a timeout).
func isConnError(err error) bool {
	var ue *upstreamError
	return errors.As(err, &ue) && !isTimeout(ue.err)
}

func retryReason(err error) string {
	var uf *upstreamFailure
	switch {
	case errors.As(err, &uf):
		if uf.status == http.StatusTooManyRequests {
			return "status_429"
		}
		return "status_5xx"
	default: // timeouts are never retried
		return "connect"
	}
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

// attempt sends one upstream request to rep. done means a response reached
// the client; retryable means nothing did and another replica may try.
func (g *Gateway) attempt(ctx context.Context, w http.ResponseWriter, r *http.Request, x *exchange, ps *poolState, rep *pools.Replica, body []byte, injected bool) (done, retryable bool, err error) {
	released := false
	release := func() {
		if !released {
			released = true
			ps.Release(rep)
		}
	}
	defer release()
	ctx, span := g.startSpan(ctx, "switchyard.upstream", trace.WithSpanKind(trace.SpanKindClient))
	defer span.End()
	if span.IsRecording() {
		span.SetAttributes(attribute.String("switchyard.pool", ps.Name), attribute.String("switchyard.replica", rep.Name),
			attribute.String("gen_ai.request.model", ps.Model), attribute.String("gen_ai.system", "vllm"))
	}

	out, err := http.NewRequestWithContext(ctx, http.MethodPost, rep.URL.String()+x.ep.path(), bytes.NewReader(body))
	if err != nil {
		return false, false, fmt.Errorf("%w: %v", errUpstream, err)
	}
	copyRequestHeaders(out.Header, r.Header)
	out.Header[headerReqID] = []string{x.id}
	out.Header["Content-Type"] = jsonContentType
	if k := ps.cfg.APIKey; k != "" {
		out.Header.Set("Authorization", "Bearer "+string(k))
	}
	if g.tracing {
		g.prop.Inject(ctx, propagation.HeaderCarrier(out.Header))
	}
	resp, err := ps.Client.Do(out)
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
		if ctx.Err() != nil {
			ps.Observe(rep, pools.Neutral, "")
			return false, false, ctx.Err()
		}
		ps.Observe(rep, pools.Failure, err.Error())
		// A timeout is not retried (the request may be slow rather than
		// lost; replaying it doubles the load) and answers 504.
		return false, !isTimeout(err), &upstreamError{pool: ps.Name, replica: rep.Name, err: err}
	}
	defer resp.Body.Close()
	if span.IsRecording() {
		span.SetAttributes(attribute.Int("http.response.status_code", resp.StatusCode))
	}
	if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500 {
		msg := readErrorMessage(resp.Body)
		o := pools.Failure
		if resp.StatusCode == http.StatusTooManyRequests {
			o = pools.Neutral
		}
		ps.Observe(rep, o, fmt.Sprintf("status %d: %s", resp.StatusCode, msg))
		span.SetStatus(codes.Error, fmt.Sprintf("status %d", resp.StatusCode))
		return false, true, &upstreamFailure{status: resp.StatusCode, msg: msg}
	}
	isStream := resp.StatusCode == http.StatusOK && strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream")
	if !isStream {
		buf := getBuffer()
		defer putBuffer(buf)
		if n, err := buf.ReadFrom(io.LimitReader(resp.Body, maxResponseBytes+1)); err == nil && n > maxResponseBytes {
			ps.Observe(rep, pools.Failure, "answer over the size limit")
			return false, false, &upstreamError{pool: ps.Name, replica: rep.Name,
				err: fmt.Errorf("non-stream answer larger than %d bytes", maxResponseBytes)}
		} else if err != nil {
			// Nothing has reached the client yet: safe to retry.
			if ctx.Err() != nil {
				ps.Observe(rep, pools.Neutral, "")
				return false, false, ctx.Err()
			}
			ps.Observe(rep, pools.Failure, "reading body: "+err.Error())
			return false, !isTimeout(err), &upstreamError{pool: ps.Name, replica: rep.Name, err: fmt.Errorf("reading body: %w", err)}
		}
		ps.Observe(rep, pools.Success, "")
		g.writeHeaders(w, x, resp, int64(buf.Len()))
		w.WriteHeader(resp.StatusCode)
		x.status = resp.StatusCode
		_, _ = w.Write(buf.Bytes())
		if resp.StatusCode == http.StatusOK {
			g.usage(x, ps, buf.Bytes(), span)
		}
		return true, false, nil
	}
	ps.Observe(rep, pools.Success, "")
	g.writeHeaders(w, x, resp, -1)
	w.WriteHeader(resp.StatusCode)
	x.status = resp.StatusCode
	rc := http.NewResponseController(w)
	_ = rc.Flush()
	if err := g.pumpStream(ctx, w, rc, x, ps, resp.Body, injected, span); err != nil {
		if ctx.Err() != nil || errors.Is(err, errClientGone) {
			// The client went away; the upstream request is cancelled with
			// its context (vLLM then frees the KV cache).
			x.status = statusClientClosed
			return true, false, nil
		}
		x.errMsg = err.Error()
		x.status = http.StatusBadGateway // counted as failed although 200 was sent
		ps.Observe(rep, pools.Failure, "stream: "+err.Error())
		span.SetStatus(codes.Error, err.Error())
		g.log.Warn("stream cut by replica; ended the client stream with an error event", "request_id", x.id, "pool", ps.Name, "replica", rep.Name, "error", err.Error())
		// Headers are sent: abort rather than fake a success (STYLE §11).
		// Deferred releases, metrics and the access log still run.
		panic(http.ErrAbortHandler)
	}
	return true, false, nil
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
	if m := gjson.GetBytes(b, "error.message"); m.Exists() {
		return m.String()
	}
	if m := gjson.GetBytes(b, "message"); m.Exists() {
		return m.String()
	}
	s := strings.TrimSpace(string(b))
	if len(s) > 200 {
		s = s[:200]
	}
	return s
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
		case "Authorization", "Content-Length", "Host", "Accept-Encoding", headerReqID:
			continue
		}
		if isHop(k) {
			continue
		}
		dst[k] = vv
	}
	// Headers named in Connection are hop-by-hop too.
	for _, f := range src["Connection"] {
		for _, name := range strings.Split(f, ",") {
			dst.Del(strings.TrimSpace(name))
		}
	}
}

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
	return u.Get("prompt_tokens").Int(), u.Get("completion_tokens").Int(), true
}

// recordUsage counts one request's tokens, once.
func (g *Gateway) recordUsage(x *exchange, ps *poolState, p, c int64, model string, span trace.Span) {
	x.prompt, x.complete = p, c
	g.metrics.tokens.WithLabelValues(ps.Name, "prompt").Add(float64(p))
	g.metrics.tokens.WithLabelValues(ps.Name, "completion").Add(float64(c))
	if span.IsRecording() {
		if model != "" {
			span.SetAttributes(attribute.String("gen_ai.response.model", model))
		}
		span.SetAttributes(attribute.Int64("gen_ai.usage.input_tokens", p), attribute.Int64("gen_ai.usage.output_tokens", c))
	}
}

// fail writes err as the client's answer, with whatever route headers are
// known.
func (g *Gateway) fail(w http.ResponseWriter, x *exchange, err error, detail string) {
	ae := toAPIError(err, detail)
	var uf *upstreamFailure
	if errors.As(err, &uf) {
		if uf.status == http.StatusTooManyRequests {
			ae = toAPIError(fmt.Errorf("%w: %s", errUpstream429, uf.msg), "")
		} else {
			ae = toAPIError(fmt.Errorf("%w: replica answered %d: %s", errUpstream, uf.status, uf.msg), "")
		}
	}
	x.status = ae.Status
	x.errMsg = ae.Message
	x.span.SetStatus(codes.Error, ae.Message)
	g.setRouteHeaders(w.Header(), x)
	writeError(w, ae)
}

// finish records metrics, the access log line and the span's attributes.
func (g *Gateway) finish(x *exchange) {
	elapsed := time.Since(x.start)
	route, pool, class := orNone(x.route), orNone(x.pool), orNone(x.class)
	if x.status == 0 {
		x.status = http.StatusOK
	}
	g.metrics.requests.WithLabelValues(route, pool, class, statusLabel(x.status)).Inc()
	if x.pool != "" {
		g.metrics.duration.WithLabelValues(x.pool).Observe(elapsed.Seconds())
	}
	if x.span.IsRecording() {
		x.span.SetAttributes(
			attribute.String("switchyard.route", x.route), attribute.String("switchyard.pool", x.pool),
			attribute.String("switchyard.replica", x.replica), attribute.String("switchyard.class", x.class),
			attribute.Int("http.response.status_code", x.status),
		)
		if x.info != nil {
			x.span.SetAttributes(attribute.String("gen_ai.request.model", x.info.Model))
		}
	}
	x.span.End()
	if !g.log.Enabled(context.Background(), slog.LevelInfo) {
		return
	}
	attrs := []slog.Attr{
		slog.String("request_id", x.id), slog.String("route", x.route), slog.String("pool", x.pool),
		slog.String("replica", x.replica), slog.String("class", x.class), slog.Int("status", x.status),
		slog.Float64("duration_ms", float64(elapsed.Microseconds())/1000),
		slog.Int("retries", x.retries), slog.String("fallback", x.fallback),
	}
	if x.info != nil {
		attrs = append(attrs, slog.Bool("stream", x.info.Stream))
	}
	if x.ttft > 0 {
		attrs = append(attrs, slog.Float64("ttft_ms", float64(x.ttft.Microseconds())/1000))
	}
	if x.prompt+x.complete > 0 {
		attrs = append(attrs, slog.Int64("prompt_tokens", x.prompt), slog.Int64("completion_tokens", x.complete))
	}
	if x.errMsg != "" {
		attrs = append(attrs, slog.String("error", x.errMsg))
	}
	if x.snap != nil && x.snap.Config.Server.LogBodies && x.body != nil {
		attrs = append(attrs, slog.String("request_body", string(x.body)))
	}
	g.log.LogAttrs(context.Background(), slog.LevelInfo, "request", attrs...)
}

// statusLabels caches the code label of every HTTP status.
var statusLabels = func() []string {
	out := make([]string, 600)
	for i := range out {
		out[i] = strconv.Itoa(i)
	}
	return out
}()

func statusLabel(code int) string {
	if code >= 0 && code < len(statusLabels) {
		return statusLabels[code]
	}
	return strconv.Itoa(code)
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
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

// classifierInput reads what the classifier looks at from the body fields.
func classifierInput(info *reqInfo) classifier.Input {
	in := classifier.Input{Turns: info.Messages}
	if info.prompt.Exists() {
		if info.prompt.Type == gjson.String {
			in.Prompt = info.prompt.Str
		} else {
			in.Prompt = info.prompt.Get("0").String()
		}
		return in
	}
	info.messages.ForEach(func(_, m gjson.Result) bool {
		switch m.Get("role").Str {
		case "system", "developer":
			if in.System == "" {
				in.System = contentText(m.Get("content"))
			}
		case "user":
			in.LastUser = contentText(m.Get("content"))
		}
		return true
	})
	info.tools.ForEach(func(_, t gjson.Result) bool {
		in.Tools = append(in.Tools, t.Get("function.name").String())
		return true
	})
	return in
}

// contentText returns a message content's text: the string, or the text
// parts of a content array joined.
func contentText(c gjson.Result) string {
	if c.Type == gjson.String {
		return c.Str
	}
	var sb strings.Builder
	c.ForEach(func(_, part gjson.Result) bool {
		if t := part.Get("text"); t.Exists() {
			if sb.Len() > 0 {
				sb.WriteByte('\n')
			}
			sb.WriteString(t.String())
		}
		return true
	})
	return sb.String()
}

// affinityKey groups requests sharing a prompt prefix: the session id when
// there is one, else a hash of the leading depth messages.
func affinityKey(x *exchange, r *http.Request, depth int) string {
	if id := sessionID(x.snap, r, x.info); id != "" {
		return "s:" + id
	}
	var h uint64 = 14695981039346656037
	n := 0
	src := x.info.messages
	if !src.Exists() {
		src = x.info.prompt
	}
	hash := func(raw string) {
		for i := 0; i < len(raw); i++ {
			h = (h ^ uint64(raw[i])) * 1099511628211
		}
	}
	if src.IsArray() {
		src.ForEach(func(_, m gjson.Result) bool {
			hash(m.Raw)
			n++
			return n < depth
		})
	} else {
		hash(src.Raw)
	}
	return "p:" + strconv.FormatUint(h, 16)
}

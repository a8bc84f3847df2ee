package router

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/switchyard/switchyard/router/internal/outcomes"

	"github.com/switchyard/switchyard/router/internal/spans"

	"github.com/switchyard/switchyard/router/internal/upstream"

	"github.com/switchyard/switchyard/router/internal/admin"
	"github.com/switchyard/switchyard/router/internal/wire"

	"github.com/go-chi/chi/v5"

	"github.com/switchyard/switchyard/policy/routing"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

func (g *Gateway) chat(w http.ResponseWriter, r *http.Request) { g.serve(w, r, wire.Chat) }
func (g *Gateway) completions(w http.ResponseWriter, r *http.Request) {
	g.serve(w, r, wire.Completions)
}

// endpointHandler serves one POST endpoint of the client API.
func (g *Gateway) endpointHandler(ep wire.Endpoint) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) { g.serve(w, r, ep) }
}

// newExchange starts the record of one client request.
func (g *Gateway) newExchange(w http.ResponseWriter, r *http.Request, ep wire.Endpoint) *exchange {
	x := &exchange{g: g, start: time.Now(), ep: ep, snap: g.snap.Load()}
	x.id = r.Header.Get(upstream.HeaderRequestID)
	if x.id == "" || len(x.id) > 128 {
		x.id = g.newRequestID()
	}
	// One slice serves the response header and the upstream request's
	// (neither is modified once set).
	x.idHeader = []string{x.id}
	w.Header()[upstream.HeaderRequestID] = x.idHeader
	return x
}

// startExchange starts the request's span; g.finish(x) ends the exchange.
func (g *Gateway) startExchange(r *http.Request, x *exchange) context.Context {
	ctx := r.Context()
	if g.tracing {
		ctx = g.prop.Extract(ctx, propagation.HeaderCarrier(r.Header))
	}
	ctx, x.tel.span = g.startSpan(ctx, "switchyard.request", trace.WithSpanKind(trace.SpanKindServer))
	if x.tel.span.IsRecording() {
		x.tel.span.SetAttributes(spans.ServerRequest(r, x.ep)...)
	}
	return ctx
}

func (g *Gateway) serve(w http.ResponseWriter, r *http.Request, ep wire.Endpoint) {
	x := g.newExchange(w, r, ep)
	ctx := g.startExchange(r, x)
	defer g.finish(x)

	if err := g.prepare(ctx, w, r, x); err != nil {
		g.fail(w, x, err, "")
		return
	}
	g.forward(ctx, w, r, x)
}

// prepare authenticates, reads and checks the request, and decides its route.
func (g *Gateway) prepare(ctx context.Context, w http.ResponseWriter, r *http.Request, x *exchange) error {
	s := x.snap
	// server.body_timeout bounds reading the body, however slowly it
	// trickles in: bounded armed it before any handler ran (so a request
	// refused before its body is read leaves the server discarding that
	// body within it too); it is lifted once the body is read.
	key, err := s.keys.Authenticate(r)
	if err != nil {
		return err
	}
	x.key = key
	body, err := readBody(w, r, int64(s.Config.Server.MaxBodyBytes))
	if err != nil {
		// The deadline stays: after the answer the server would read on
		// to discard the rest of the body, and a client that trickles it
		// must not hold the connection that way either.
		return err
	}
	_ = x.responseController(w).SetReadDeadline(time.Time{})
	x.body = body
	info, err := wire.Parse(body, x.ep, s.Config.Server.MaxJSONDepth)
	if err != nil {
		return err
	}
	x.info = info
	x.body, x.stream.custom = wire.Adapt(x.ep, body)
	if wait, err := key.Throttle(g.opts.Now()); err != nil {
		return &retryAfter{err: err, after: wait}
	}
	if err := x.holdKeySlot(); err != nil {
		return err
	}
	tgt, ok := s.resolve(info.Model)
	if !ok {
		g.hintUnknownModel(s, info.Model)
		return fmt.Errorf("%w: the model `%s` does not exist (see GET /v1/models)", errModelNotFound, wire.Clip(info.Model))
	}
	if !key.Allows(info.Model) {
		return fmt.Errorf("%w: API key %q may not use model %q", errForbidden, key.Name, wire.Clip(info.Model))
	}
	if key != nil {
		x.snap.recorder.Offer(key.Name, r.URL.Path, r.Header, body)
	} else {
		x.snap.recorder.Offer("", r.URL.Path, r.Header, body)
	}
	if tgt.rewrite {
		x.clientModel = info.Model
	}
	switch {
	case info.PreviousResponse != "" && x.ep == wire.Responses:
		// A stored response lives on the replica that made it, which
		// must be in a pool the requested model may reach.
		if err := x.pinToStored(info.PreviousResponse, "previous_response_id"); err != nil {
			return err
		}
		if !s.reaches(tgt, x.decision.Pools[0]) {
			return errResponseNotFound(info.PreviousResponse, "previous_response_id", fmt.Sprintf("it was stored by a pool the model `%s` does not route to", info.Model))
		}
	case !tgt.policy:
		x.decision = routing.Decision{Route: "direct", Pools: []string{tgt.pool.Name}}
	case x.ep == wire.CountTokens:
		// Claude Code counts tokens for the name it generates with (auto,
		// a pattern, a claude-* name): the pool the request would be
		// routed to answers, decided without a classifier call (a class
		// condition reads on_error's label; a session's decision is used
		// as it stands and none is made).
		if cl := s.Config.Classifier; cl != nil {
			x.classify.force = cl.OnError
		}
		x.decision = g.decide(ctx, r, x, true)
	case !x.ep.Generates():
		return wire.BadRequest("model", fmt.Sprintf("the model `%s` is routed by the policy; %s needs a model one pool serves (a pool name, a served model name, or a models[] entry with pool:)", wire.Clip(info.Model), x.ep.Path()))
	default:
		x.decision = g.decide(ctx, r, x, false)
	}
	x.route = x.decision.Route
	if x.decision.Classified && x.classify.force == "" {
		x.class = x.decision.Class
		w.Header().Set(headerClass, x.class)
	}
	w.Header().Set(headerRoute, x.route)
	return nil
}

// hintUnknownModel tells the operator, at most once a minute, that clients
// ask for a model name no models[] entry routes, and the one-line fix: an
// agent's own default name (gpt-4o, claude-sonnet-4-5) gets 404 until a
// pattern routes it.
func (g *Gateway) hintUnknownModel(s *Snapshot, model string) {
	if len(s.patterns) > 0 {
		return // the operator chose which names route; this one does not
	}
	now := g.opts.Now().UnixNano()
	last := g.unknownModelHint.Load()
	if now-last < int64(time.Minute) || !g.unknownModelHint.CompareAndSwap(last, now) {
		return
	}
	g.log.Warn(`a client asked for a model no models[] entry routes; to route every name an agent sends by the policy, add models: [{name: "*", route: policy}] (docs/config.md)`,
		"model", wire.Clip(model))
}

// sample is what the status page keeps of the finished exchange.
func (x *exchange) sample() admin.Sample {
	sm := admin.Sample{API: x.ep, Pool: x.pool, Replica: x.replica, Status: x.status, TTFT: x.tokens.ttft, Route: x.route, Class: x.class}
	if x.rep != nil {
		sm.Endpoint = x.rep.Endpoint
	}
	if x.key != nil {
		sm.Key = x.key.Name
	}
	if x.info != nil {
		sm.Model = wire.Clip(x.info.Model)
	}
	if p, ok := x.decision.Scores[x.class]; ok && x.class != "" {
		sm.Score = &p
	}
	return sm
}

// finish records metrics, the access log line and the span's attributes.
func (g *Gateway) finish(x *exchange) {
	x.releaseKeySlot()
	elapsed := time.Since(x.start)
	route, pool, class := orNone(x.route), orNone(x.pool), orNone(x.class)
	x.status = x.statusOf()
	g.metrics.Requests.WithLabelValues(route, pool, class, statusLabel(x.status)).Inc()
	g.metrics.KeyRequests.WithLabelValues(x.keyName(), statusLabel(x.status)).Inc()
	if x.pool != "" {
		g.metrics.Duration.WithLabelValues(x.pool).Observe(elapsed.Seconds())
	}
	g.status.Record(x.sample(), g.opts.Now(), elapsed)
	if x.snap != nil && x.snap.outcomes != nil && x.sess.key != "" && x.status < 300 && x.pool != "" && !x.decision.Side {
		x.snap.outcomes.Answered(x.sess.key, outcomes.Turn{Pool: x.pool, Route: x.route, Instruction: x.sess.instruction})
	}
	if x.tel.span.IsRecording() {
		g.endServerSpan(x)
	}
	x.tel.span.End()
	if !g.log.Enabled(context.Background(), slog.LevelInfo) {
		return
	}
	attrs := []slog.Attr{
		slog.String("request_id", x.id), slog.String("route", x.route), slog.String("pool", x.pool),
		slog.String("replica", x.replica), slog.String("class", x.class), slog.Int("status", x.status),
		slog.Float64("duration_ms", float64(elapsed.Microseconds())/1000),
		slog.Int("retries", x.retries), slog.String("fallback", x.fallback),
	}
	if x.key != nil {
		attrs = append(attrs, slog.String("key", x.key.Name))
	}
	if x.info != nil {
		attrs = append(attrs, slog.String("model", wire.Clip(x.info.Model)), slog.Bool("stream", x.info.Stream))
	}
	if x.tokens.ttft > 0 {
		attrs = append(attrs, slog.Float64("ttft_ms", float64(x.tokens.ttft.Microseconds())/1000))
	}
	if x.access.placed {
		attrs = append(attrs, slog.Float64("queue_ms", float64(x.access.queued.Microseconds())/1000))
	}
	if x.access.classified {
		attrs = append(attrs, slog.Float64("classify_ms", float64(x.access.classify.Microseconds())/1000))
	}
	if x.tokens.prompt+x.tokens.completion > 0 {
		attrs = append(attrs, slog.Int64("prompt_tokens", x.tokens.prompt), slog.Int64("completion_tokens", x.tokens.completion))
	}
	if x.access.errMsg != "" {
		attrs = append(attrs, slog.String("error", x.access.errMsg))
	}
	if x.access.resume != "" {
		attrs = append(attrs, slog.String("resume", x.access.resume))
	}
	attrs = x.sess.attrs(attrs)
	if x.snap != nil && x.snap.Config.Server.LogBodies && x.body != nil {
		attrs = append(attrs, slog.String("request_body", string(x.body)))
	}
	g.log.LogAttrs(context.Background(), slog.LevelInfo, "request", attrs...)
}

// serveStored serves a call on a stored response (GET, DELETE, cancel).
func (g *Gateway) serveStored(w http.ResponseWriter, r *http.Request, id, suffix string) {
	x := g.newExchange(w, r, wire.Responses)
	ctx := g.startExchange(r, x)
	defer g.finish(x)
	x.stored.suffix = suffix
	s := x.snap
	// bounded armed server.body_timeout for the body; it is lifted once
	// the body is read.
	key, err := s.keys.Authenticate(r)
	if err == nil {
		x.key = key
		x.info = &wire.Info{}
		x.body, err = readBody(w, r, int64(s.Config.Server.MaxBodyBytes))
	}
	if err == nil {
		_ = x.responseController(w).SetReadDeadline(time.Time{})
	}
	if err == nil {
		if wait, terr := key.Throttle(g.opts.Now()); terr != nil {
			err = &retryAfter{err: terr, after: wait}
		}
	}
	if err == nil {
		err = x.holdKeySlot()
	}
	if err == nil {
		err = x.pinToStored(id, "response_id")
	}
	if err != nil {
		g.fail(w, x, err, "")
		return
	}
	x.route = x.decision.Route
	w.Header().Set(headerRoute, x.route)
	g.forward(ctx, w, r, x)
}

// storedHandler serves GET and DELETE /v1/responses/{id} and POST
// /v1/responses/{id}/cancel on the replica that stored the response.
func (g *Gateway) storedHandler(suffix string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		g.serveStored(w, r, chi.URLParam(r, "id"), suffix)
	}
}

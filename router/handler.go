package router

import (
	"context"
	"fmt"
	"github.com/switchyard/switchyard/router/internal/outcomes"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/switchyard/switchyard/router/internal/spans"

	"github.com/switchyard/switchyard/router/internal/pump"

	"github.com/switchyard/switchyard/router/internal/upstream"

	"github.com/switchyard/switchyard/router/internal/admin"
	"github.com/switchyard/switchyard/router/internal/wire"

	"github.com/switchyard/switchyard/classifier"
	"github.com/switchyard/switchyard/policy"
	"github.com/switchyard/switchyard/pools"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Response headers set on every proxied response.
const (
	headerRoute   = "X-Switchyard-Route"
	headerPool    = "X-Switchyard-Pool"
	headerReplica = "X-Switchyard-Replica"
	headerClass   = "X-Switchyard-Class"
)

// exchange is the state of one client request, for headers, metrics, the
// access log and the span.
type exchange struct {
	start    time.Time
	g        *Gateway
	id       string
	idHeader []string
	ep       wire.Endpoint
	snap     *Snapshot
	info     *wire.Info
	body     []byte
	key      *apiKey
	// keySlot: the request counts against its key's max_inflight.
	keySlot  bool
	decision policy.Decision
	class    string
	route    string
	pool     string
	replica  string
	status   int
	retries  int
	fallback string
	tokens   tokenCounts
	// access is what the access line says beyond the request's facts.
	access accessNote
	tel    telemetry
	// sent is the status line sent to the client (0: none), for the
	// span; status is what the exchange came to.
	sent int
	sess sessionState
	// classify is what the classifier said, or what explain --class
	// says instead.
	classify classifyState
	// moreInChain: a pool follows the one being tried in the decision's
	// chain (a context overflow moves on to it).
	moreInChain bool
	// clientModel, with models[].rewrite_response_model, is the model name
	// written back into the answer.
	clientModel string
	// stored is the replica a stored response's follow-up must reach.
	stored storedTarget
	// rep is the replica that took the last attempt (the status page's
	// per-replica outcomes).
	rep *pools.Replica
	// attempt is the upstream state, kept here so that placing a request
	// allocates nothing of its own; stream the state of a streamed answer.
	attempt attemptState
	stream  streamState
}

// accessNote is what the access line adds: the error the client was
// told, what became of a stream its replica cut (resume), and where the
// time went: waiting for replica slots (queued, with placed set once the
// request reached a pool's queue) and in the classifier (classify, with
// classified set when it was asked).
type accessNote struct {
	errMsg             string
	resume             string
	queued, classify   time.Duration
	placed, classified bool
}

// classifyState is the classifier's part of an exchange: force, for
// explain --class, stands in for the classifier; res is its answer, when
// it was asked.
type classifyState struct {
	force string
	res   classifier.Result
}

// tokenCounts are the answer's time to first token and its usage.
type tokenCounts struct {
	ttft               time.Duration
	prompt, completion int64
}

// telemetry is the exchange's server span and its cached attributes.
type telemetry struct {
	span trace.Span
	// settings caches the request's gen_ai.request.* attributes.
	settings []attribute.KeyValue
}

// sessionState is the request's session: its id ("" without one), once
// set, and the policy's key of the session's decision ("" without a
// session).
type sessionState struct {
	id  string
	set bool
	key string
	// The turn's evidence and what the session store did with it, for
	// the access line: the turn (instruction, tool_result), why its tool
	// result reads as a failure, the tool it repeats, and the store's
	// outcome (new, kept, moved_up, moved_down, side, not_kept).
	turn, toolError, repeated, outcome string
	// instruction is the hash of the turn's new instruction (0: none).
	instruction uint64
}

// attrs adds the turn's evidence and the session's outcome to an access
// line: only what is set.
func (s *sessionState) attrs(attrs []slog.Attr) []slog.Attr {
	for _, f := range [...]struct{ k, v string }{{"turn", s.turn}, {"tool_error", s.toolError}, {"repeated_call", s.repeated}, {"session", s.outcome}} {
		if f.v != "" {
			attrs = append(attrs, slog.String(f.k, f.v))
		}
	}
	return attrs
}

// storedTarget, for a request about a stored response, is the one replica
// the exchange may use (pinned) and the upstream path of GET, DELETE and
// cancel (id and suffix; the method is the client's).
type storedTarget struct {
	pinned     *pools.Replica
	id, suffix string
}

// attemptState is what one placement of the request on a pool needs: the
// client attempt, the pool's request, the execution and its clock.
type attemptState struct {
	up    upstreamCall
	preq  pools.Request
	exec  upstream.Execution
	clock upstream.Clock
}

// streamState is the state of a streamed answer, owned by the attempt that
// relays it: the pump, the Responses custom tools offered as function
// tools (calls to them are turned back into custom tool calls; nil
// without them), how the answer ended when not as its status line said
// (finish maps it to the status counted, statusOf), a stream its replica
// cut (left for resume) and the continuation's attempts.
type streamState struct {
	pump   pump.Pump
	rc     *http.ResponseController
	custom wire.CustomTools
	end    ending
	cut    *cutStream
	cont   continuation
}

// responseController returns the exchange's one controller of w.
func (x *exchange) responseController(w http.ResponseWriter) *http.ResponseController {
	if x.stream.rc == nil {
		x.stream.rc = http.NewResponseController(w)
	}
	return x.stream.rc
}

// FirstToken records the time to the first token.
func (x *exchange) FirstToken() {
	x.tokens.ttft = time.Since(x.start)
	x.g.metrics.TTFT.WithLabelValues(x.pool).Observe(x.tokens.ttft.Seconds())
}

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

// serveStored serves a call on a stored response (GET, DELETE, cancel).
func (g *Gateway) serveStored(w http.ResponseWriter, r *http.Request, id, suffix string) {
	x := g.newExchange(w, r, wire.Responses)
	ctx := g.startExchange(r, x)
	defer g.finish(x)
	x.stored.suffix = suffix
	s := x.snap
	// bounded armed server.body_timeout for the body; it is lifted once
	// the body is read.
	key, err := s.authenticate(r)
	if err == nil {
		x.key = key
		x.info = &wire.Info{}
		x.body, err = readBody(w, r, int64(s.Config.Server.MaxBodyBytes))
	}
	if err == nil {
		_ = x.responseController(w).SetReadDeadline(time.Time{})
	}
	if err == nil && key != nil && key.limiter != nil {
		if wait := key.wait(g.opts.Now()); wait > 0 {
			err = &retryAfter{err: fmt.Errorf("%w: API key %q is over its rate of %g requests/s", errRateLimited, key.name, key.rate.RPS), after: wait}
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

// prepare authenticates, reads and checks the request, and decides its route.
func (g *Gateway) prepare(ctx context.Context, w http.ResponseWriter, r *http.Request, x *exchange) error {
	s := x.snap
	// server.body_timeout bounds reading the body, however slowly it
	// trickles in: bounded armed it before any handler ran (so a request
	// refused before its body is read leaves the server discarding that
	// body within it too); it is lifted once the body is read.
	key, err := s.authenticate(r)
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
	if key != nil && key.limiter != nil {
		if wait := key.wait(g.opts.Now()); wait > 0 {
			return &retryAfter{err: fmt.Errorf("%w: API key %q is over its rate of %g requests/s", errRateLimited, key.name, key.rate.RPS), after: wait}
		}
	}
	if err := x.holdKeySlot(); err != nil {
		return err
	}
	tgt, ok := s.resolve(info.Model)
	if !ok {
		g.hintUnknownModel(s, info.Model)
		return fmt.Errorf("%w: the model `%s` does not exist (see GET /v1/models)", errModelNotFound, wire.Clip(info.Model))
	}
	if !key.allows(info.Model) {
		return fmt.Errorf("%w: API key %q may not use model %q", errForbidden, key.name, wire.Clip(info.Model))
	}
	if key != nil {
		g.recorder.Offer(key.name, r.URL.Path, r.Header, body)
	} else {
		g.recorder.Offer("", r.URL.Path, r.Header, body)
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
		x.decision = policy.Decision{Route: "direct", Pools: []string{tgt.pool.Name}}
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

// statusClientClosed marks a request whose client went away (nginx's 499).
const statusClientClosed = 499

// ending is how an exchange ended besides the status line it was sent (or
// that the gateway wrote): the client leaving, or a stream the replica cut
// that no continuation completed.
type ending uint8

const (
	endNormal     ending = iota
	endClientLeft        // 499, whatever was sent
	endCut               // 502: the stream was cut (200 had been sent)
	endShutdown          // 503: the gateway's shutdown ended the stream
)

// endAs records how x ended, as what happened to it last says, and is the
// one place that decides it: a client that went away ends it whatever
// comes after (nothing more reaches the client); otherwise the latest
// word holds (a stream its replica cut is 502, or 503 when the gateway's
// shutdown ended it, and normal again once a continuation completed it).
func (x *exchange) endAs(e ending) {
	if x.stream.end != endClientLeft {
		x.stream.end = e
	}
}

// statusOf is the status an exchange is counted and logged with: the
// status line sent, unless it ended otherwise (ending), 200 when nothing
// set one. It is decided here, once, at the edge.
func (x *exchange) statusOf() int {
	switch x.stream.end {
	case endClientLeft:
		return statusClientClosed
	case endCut:
		return http.StatusBadGateway
	case endShutdown:
		return http.StatusServiceUnavailable
	}
	if x.status == 0 {
		return http.StatusOK
	}
	return x.status
}

// fail writes err as the client's answer, with whatever route headers are
// known.
func (g *Gateway) fail(w http.ResponseWriter, x *exchange, err error, detail string) {
	ae := toAPIError(err, detail)
	x.status, x.sent = ae.Status, ae.Status
	x.access.errMsg = ae.Message
	g.setRouteHeaders(w.Header(), x)
	wire.WriteErrorFor(w, x.ep, ae)
}

// sample is what the status page keeps of the finished exchange.
func (x *exchange) sample() admin.Sample {
	sm := admin.Sample{API: x.ep, Pool: x.pool, Replica: x.replica, Status: x.status, TTFT: x.tokens.ttft, Route: x.route, Class: x.class}
	if x.rep != nil {
		sm.Endpoint = x.rep.Endpoint
	}
	if x.key != nil {
		sm.Key = x.key.name
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
		attrs = append(attrs, slog.String("key", x.key.name))
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

// keyName is the name of the API key the request presented, "none" when
// auth is off or it presented no valid key.
func (x *exchange) keyName() string {
	if x.key == nil {
		return "none"
	}
	return x.key.name
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

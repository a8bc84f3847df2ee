package router

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"github.com/switchyard/switchyard/router/internal/upstream"

	"github.com/switchyard/switchyard/router/internal/spans"

	"github.com/switchyard/switchyard/router/internal/translate"
	"github.com/switchyard/switchyard/router/internal/wire"

	"github.com/switchyard/switchyard/pools"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// sendSpec is one HTTP attempt of an execution: where to, built how, and
// judged how.
type sendSpec struct {
	ps    *poolState
	rep   *pools.Replica
	clock *upstream.Clock
	// ex, when set, settles a failure it holds as soon as this answer's
	// status is known (see execute's poison rule), not when the answer
	// (perhaps a long stream) ends.
	ex *upstream.Execution
	// x, body and path: a client request's attempt, sent with
	// upstreamRequest (path "" is the client's endpoint). Without x,
	// build makes the request with the attempt's context.
	x     *exchange
	body  []byte
	path  string
	build func(hctx context.Context) (*http.Request, error)
	// clientJudge judges the status by the client endpoint's rules
	// (exchange.judge; it may read the body, leaving it readable) instead
	// of upstream.JudgeStatus.
	clientJudge bool
	// what prefixes the detail of a failed status ("classifier ").
	what string
}

// send makes one HTTP attempt: it starts the attempt's clock (the caller
// stops it), sends, and judges the answer's status. resp is an answer to
// pass on, whose body the caller closes; without one, res is the failure
// as the executor needs it (no answer, or a status another replica may be
// asked instead of). hctx is the attempt's context, which the clock ends
// with a phase timeout.
func (g *Gateway) send(ctx context.Context, span trace.Span, a sendSpec) (resp *http.Response, hctx context.Context, res upstream.Result) {
	hctx = a.clock.Start(ctx, a.ps.timeouts)
	var req *http.Request
	var err error
	if a.x != nil {
		req, err = g.upstreamRequest(ctx, hctx, a.x, a.x.attempt.up.r, a.ps, a.rep, a.body, a.path)
	} else {
		req, err = a.build(hctx)
	}
	if err != nil {
		return nil, hctx, upstream.NotSent(fmt.Errorf("%w: %v", upstream.ErrUpstream, err))
	}
	if span.IsRecording() {
		span.SetAttributes(spans.ClientRequest(req)...)
	}
	resp, err = a.rep.Client().Do(req)
	resp, err = a.clock.Headers(hctx, resp, err)
	if err != nil {
		if ctx.Err() == nil {
			spans.SetClientError(span, spans.TransportErrorType(err), err)
		}
		return nil, hctx, upstream.JudgeError(ctx, a.ps.Name, a.rep, err, "")
	}
	if a.ex != nil {
		a.ex.Settle(a.ps.Pool, resp.StatusCode)
	}
	var o pools.Outcome
	var retry bool
	var reason string
	if a.clientJudge {
		o, retry, reason = a.x.judge(resp)
	} else {
		o, retry, reason = upstream.JudgeStatus(resp.StatusCode)
	}
	if !retry {
		spans.SetClientStatus(span, resp.StatusCode, "")
		return resp, hctx, upstream.Result{}
	}
	defer resp.Body.Close()
	msg := wire.ReadErrorMessage(resp.Body)
	spans.SetClientStatus(span, resp.StatusCode, msg)
	uf := &upstream.Failure{Status: resp.StatusCode, Msg: msg}
	if resp.StatusCode == http.StatusTooManyRequests {
		uf.RetryAfter = upstream.ParseRetryAfter(resp.Header.Get("Retry-After"), g.opts.Now())
	}
	return nil, hctx, upstream.Retryable(o, reason, fmt.Sprintf("%sstatus %d: %s", a.what, resp.StatusCode, msg), uf)
}

// upstreamRequest builds the request to rep for client request r: body,
// the client's headers less hop-by-hop ones and its credentials, the
// forwarding headers, the request id, the pool's key and the trace context
// of ctx. hctx is the attempt's context. path, when set, is the endpoint
// to post to instead of the client's (a continuation's).
func (g *Gateway) upstreamRequest(ctx, hctx context.Context, x *exchange, r *http.Request, ps *poolState, rep *pools.Replica, body []byte, path string) (*http.Request, error) {
	method, target := http.MethodPost, rep.Base()+x.ep.Path()
	var rd io.Reader = bytes.NewReader(body)
	switch {
	case path != "":
		target = rep.Base() + path
	case x.stored.id != "":
		method, target = r.Method, rep.Base()+"/v1/responses/"+url.PathEscape(x.stored.id)+x.stored.suffix
		if r.URL.RawQuery != "" {
			target += "?" + r.URL.RawQuery // stream, starting_after, include
		}
		if len(body) == 0 {
			rd = http.NoBody
		}
	case x.ep.Anthropic() && r.URL.RawQuery != "":
		target += "?" + r.URL.RawQuery // ?beta=true, as Claude Code sends it
	}
	out, err := http.NewRequestWithContext(hctx, method, target, rd)
	if err != nil {
		return nil, err
	}
	upstream.CopyRequestHeaders(out.Header, r.Header)
	upstream.SetForwarded(out.Header, r)
	upstream.AddVia(out.Header, g.via) // loops.go: a request that comes back is refused
	out.Header[upstream.HeaderRequestID] = x.idHeader
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

var jsonContentType = []string{"application/json"}

// answers bounds the memory of the non-stream answers held whole before
// they are passed on (streams are never held), across the process: one
// answer at most 64 MiB, refused before it is read when its
// Content-Length says more; one over 1 MiB reserves its size (its bound
// when the replica sends no length) from 256 MiB shared by all, and waits
// for earlier large answers to be passed on when they hold it all.
var answers = upstream.NewAnswers(64<<20, 1<<20, 256<<20)

// writeHeaders copies the replica's response headers and adds Switchyard's.
// length < 0 means streamed (no Content-Length).
func (g *Gateway) writeHeaders(w http.ResponseWriter, x *exchange, resp *http.Response, length int64) {
	h := w.Header()
	for k, vv := range resp.Header {
		if upstream.IsHop(k) || k == "Content-Length" || k == upstream.HeaderRequestID || k == "Set-Cookie" || k == "Set-Cookie2" {
			continue // a replica's cookies are for its own origin, not the gateway's every tenant shares
		}
		h[k] = vv
	}
	upstream.DropConnectionHeaders(h, resp.Header)
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
	set(upstream.HeaderRequestID, 0)
	set(headerRoute, 1)
	set(headerPool, 2)
	set(headerReplica, 3)
	set(headerClass, 4)
}

// countTokensLocally answers count_tokens for a vLLM without it (older
// versions answer 404): an estimate, about four bytes of JSON per token.
func (g *Gateway) countTokensLocally(w http.ResponseWriter, x *exchange, resp *http.Response) upstream.Result {
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 16<<10))
	answer := []byte(`{"input_tokens":` + itoa(int64(x.info.PromptTokens)) + `}`)
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", itoa(int64(len(answer))))
	g.setRouteHeaders(h, x)
	w.WriteHeader(http.StatusOK)
	x.status, x.sent = http.StatusOK, http.StatusOK
	_, _ = w.Write(answer)
	return upstream.Answered(pools.Neutral, "")
}

// rewriteAnswer applies to a non-stream answer what the gateway changes:
// the model name with rewrite_response_model, and a Responses answer's id
// (see storedPrefix) and calls to custom tools (see translate.CustomOutput).
func (x *exchange) rewriteAnswer(answer []byte, rep *pools.Replica) []byte {
	if x.ep == wire.Responses {
		answer = wire.TrimUsage(wire.EncodeResponseIDs(answer, replicaTag(rep), x.ids()), "")
		if x.stream.custom != nil {
			answer = translate.CustomOutput(answer, "output", x.stream.custom)
		}
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
	if p, c, ok := wire.ReadUsage(data); ok {
		g.recordUsage(x, ps, p, c, gjson.GetBytes(data, "model").String(), span)
	}
}

// recordUsage counts one request's tokens, once.
func (g *Gateway) recordUsage(x *exchange, ps *poolState, p, c int64, model string, span trace.Span) {
	x.tokens.prompt, x.tokens.completion = p, c
	g.metrics.Tokens.WithLabelValues(ps.Name, "prompt").Add(float64(p))
	g.metrics.Tokens.WithLabelValues(ps.Name, "completion").Add(float64(c))
	g.metrics.KeyTokens.WithLabelValues(x.keyName(), "prompt").Add(float64(p))
	g.metrics.KeyTokens.WithLabelValues(x.keyName(), "completion").Add(float64(c))
	if span.IsRecording() {
		if model != "" {
			spans.SetResponseAttrs(span, x.tel.span, []attribute.KeyValue{spans.GenAIResponseModel.String(model)})
		}
		spans.SetUsage(span, p, c)
		spans.SetUsage(x.tel.span, p, c)
	}
}

// judge classifies a replica's answer status for a client request. A 404
// means the server lacks the pool's model only where the endpoint says so
// (endpointSpec.missingModel404), or where it names a model; otherwise it
// is an answer (FastAPI's {"detail":"Not Found"} of an endpoint this vLLM
// version lacks, a stored response that is not there), which says nothing
// of the replica's other traffic.
func (x *exchange) judge(resp *http.Response) (pools.Outcome, bool, string) {
	o, retry, reason := upstream.JudgeStatus(resp.StatusCode)
	if resp.StatusCode == http.StatusNotFound && !x.ep.Spec().MissingModel404 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 16<<10))
		resp.Body = readCloser{bytes.NewReader(b), resp.Body}
		if x.stored.pinned != nil || !x.ep.Generates() || !bytes.Contains(bytes.ToLower(b), []byte("model")) {
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

// fail writes err as the client's answer, with whatever route headers are
// known.
func (g *Gateway) fail(w http.ResponseWriter, x *exchange, err error, detail string) {
	ae := toAPIError(err, detail)
	x.status, x.sent = ae.Status, ae.Status
	x.access.errMsg = ae.Message
	g.setRouteHeaders(w.Header(), x)
	wire.WriteErrorFor(w, x.ep, ae)
}

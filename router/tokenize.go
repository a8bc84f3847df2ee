package router

import (
	"context"
	"errors"
	"io"
	"net/http"

	"go.opentelemetry.io/otel/trace"

	"github.com/switchyard/switchyard/router/internal/spans"
	"github.com/switchyard/switchyard/router/internal/tokenize"
	"github.com/switchyard/switchyard/router/internal/upstream"
	"github.com/switchyard/switchyard/router/internal/wire"
)

// fits reports whether x's prompt and a minimal answer fit ps's context:
// the estimate, or, in the band where it could be wrong either way, the
// count of ps's /tokenize (router/internal/tokenize has the rules).
func (g *Gateway) fits(ctx context.Context, ps *poolState, x *exchange) bool {
	ok, result, err := tokenize.Decide(ctx, x.ep, x.info, ps.cfg.MaxModelLen, func() (int, error) { return g.countPrompt(ctx, ps, x) })
	if result != "" {
		g.metrics.Tokenize.WithLabelValues(ps.Name, result).Inc()
	}
	if err != nil {
		g.log.Debug("tokenize failed; the estimate decides", "request_id", x.id, "pool", ps.Name, "error", err.Error())
	}
	return ok
}

// fitsContext reports whether x's prompt estimate and a minimal answer
// fit ps's max_model_len.
func fitsContext(ps *poolState, x *exchange) bool {
	return tokenize.Estimate(x.ep, x.info, ps.cfg.MaxModelLen)
}

// countPrompt asks one available replica of ps to count x's prompt.
func (g *Gateway) countPrompt(ctx context.Context, ps *poolState, x *exchange) (int, error) {
	body, err := tokenize.Body(x.ep, x.info, x.body, ps.Model)
	if err != nil {
		return 0, err
	}
	rep, ok := tokenize.Pick(&ps.tokenizeTurns, ps.Replicas(), g.opts.Now())
	if !ok {
		return 0, upstream.ErrNoReplica
	}
	ctx, cancel := context.WithTimeout(ctx, tokenize.Timeout)
	defer cancel()
	// One HTTP exchange like every other: its span, the pool's header
	// timeout, the status judged. Not counted in flight and not told to
	// passive health: a tokenization is CPU work on the server, and a
	// failure only leaves the estimate to decide.
	ctx, span := g.startSpan(ctx, "switchyard.tokenize", trace.WithSpanKind(trace.SpanKindClient))
	defer span.End()
	if span.IsRecording() {
		span.SetAttributes(spans.Pool.String(ps.Name), spans.Replica.String(rep.Name))
	}
	var clock upstream.Clock
	defer clock.Stop()
	resp, _, res := g.send(ctx, span, sendSpec{ps: ps, rep: rep, clock: &clock, what: "tokenize ",
		build: func(hctx context.Context) (*http.Request, error) {
			return g.gatewayRequest(ctx, hctx, ps, rep, wire.Tokenize.Path(), body)
		}})
	if resp == nil {
		return 0, res.Err()
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, tokenize.MaxAnswer))
	if err != nil {
		return 0, err
	}
	return tokenize.ReadCount(resp.StatusCode, b, upstream.ReplicaDepth(x.snap.Config.Server.MaxJSONDepth))
}

// errContextLength: the request does not fit a pool's context (its
// estimate does not, or a replica said so); a larger pool of the chain is
// asked.
var errContextLength = errors.New("the prompt does not fit the pool's context")

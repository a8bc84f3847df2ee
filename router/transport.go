package router

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"

	"github.com/switchyard/switchyard/router/internal/upstream"

	"github.com/switchyard/switchyard/router/internal/spans"

	"github.com/switchyard/switchyard/router/internal/wire"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/switchyard/switchyard/classifier"
	"github.com/switchyard/switchyard/pools"
)

// poolTransport sends the classifier's requests through the same executor
// as client requests: balanced, counted in flight, health-aware, with one
// retry on another replica. It finds its pool by name in the running
// snapshot, so a kept classifier follows its pool across reloads.
type poolTransport struct {
	g    *Gateway
	pool string
}

var _ classifier.Transport = (*poolTransport)(nil)

// maxClassifierAnswer bounds a classifier answer (a label and its logprobs).
const maxClassifierAnswer = 1 << 20

// ChatCompletion implements classifier.Transport.
func (t *poolTransport) ChatCompletion(ctx context.Context, body []byte) ([]byte, error) {
	s := t.g.snap.Load()
	ps := s.pools[t.pool]
	if ps == nil {
		return nil, fmt.Errorf("classifier pool %q: %w", t.pool, pools.ErrNoReplica)
	}
	call := &classifierCall{t: t, ps: ps, body: body}
	// The classifier's calls wait for a full replica ahead of the keys'
	// requests, and may use the slots classifier.reserved_slots keeps;
	// among themselves they take turns by the tenant whose request each
	// classifies.
	tenant, weight := classifier.TenantOf(ctx)
	ex := &upstream.Execution{Pool: ps.Pool, Req: &pools.Request{Tenant: tenant, Weight: weight, Priority: true, Fair: true}, Attempts: 2, Call: call}
	call.ex = ex
	res := t.g.exec.Execute(ctx, ex)
	if res.Err() != nil {
		if call.replicas == 0 && ps.CanTake(nil) {
			// Never sent: the call waited for a slot of an available
			// replica and its time ran out. Other tenants' requests held
			// the slots; the pool did not fail, and the breaker must not
			// hear of it.
			return nil, fmt.Errorf("classifier pool %q: %w (%w)", t.pool, classifier.ErrNoSlot, res.Err())
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if res.Poison() {
			// The same 500 from two replicas: this request's input, not
			// the pool; the breaker must not hear of it.
			return nil, fmt.Errorf("classifier pool %q: %w (%w)", t.pool, classifier.ErrRefused, res.Err())
		}
		return nil, fmt.Errorf("classifier pool %q: %w", t.pool, res.Err())
	}
	return call.out, nil
}

// classifierCall makes the attempts of one classifier request.
type classifierCall struct {
	t    *poolTransport
	ex   *upstream.Execution
	ps   *poolState
	body []byte
	out  []byte
	// replicas counts the replicas acquired (0: every attempt waited).
	replicas int
}

func (c *classifierCall) Acquired(*pools.Replica) { c.replicas++ }

func (c *classifierCall) Send(ctx context.Context, rep *pools.Replica) upstream.Result {
	var res upstream.Result
	c.out, res = c.t.once(ctx, c.ex, c.ps, rep, c.body)
	return res
}

// once makes one attempt of a classifier call on rep.
func (t *poolTransport) once(ctx context.Context, ex *upstream.Execution, ps *poolState, rep *pools.Replica, body []byte) ([]byte, upstream.Result) {
	// Each attempt is a client span, a child of switchyard.classify.
	ctx, span := t.g.startSpan(ctx, "switchyard.classify.upstream", trace.WithSpanKind(trace.SpanKindClient))
	defer span.End()
	if span.IsRecording() {
		span.SetAttributes(spans.Pool.String(ps.Name), spans.Replica.String(rep.Name),
			spans.GenAIOperation.String(wire.Chat.Operation()), spans.GenAIProvider.String(spans.Provider))
		span.SetAttributes(spans.GenAIRequest(body)...)
	}
	var clock upstream.Clock
	defer clock.Stop()
	resp, _, res := t.g.send(ctx, span, sendSpec{ps: ps, rep: rep, clock: &clock, ex: ex, what: "classifier ",
		build: func(hctx context.Context) (*http.Request, error) {
			return t.g.gatewayRequest(ctx, hctx, ps, rep, wire.Chat.Path(), body)
		}})
	if resp == nil {
		if res.Err() != nil && !res.Done() {
			res = res.WithErr(fmt.Errorf("replica %q: %w", rep.Name, res.Err()))
		}
		return nil, res
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(io.LimitReader(resp.Body, maxClassifierAnswer))
	if err != nil {
		if ctx.Err() == nil {
			spans.SetClientError(span, spans.TransportErrorType(err), err)
		}
		return nil, upstream.JudgeError(ctx, ps.Name, rep, err, "reading answer")
	}
	if !wire.CheckDepth(out, upstream.ReplicaDepth(t.g.snap.Load().Config.Server.MaxJSONDepth)) {
		// Never parsed: a recursive parser on hostile nesting costs
		// memory without bound. The replica's fault.
		err := fmt.Errorf("replica %q: the classifier's answer nests JSON too deeply", rep.Name)
		return nil, upstream.Retryable(pools.Status5xx, "status_5xx", err.Error(), err)
	}
	if resp.StatusCode != http.StatusOK {
		// A 4xx other than the ones send retries: the classifier's own
		// request was refused. Not the replica's fault, not retried.
		return nil, upstream.Failed(pools.Neutral, "", fmt.Errorf("replica %q: status %d: %s: %w", rep.Name, resp.StatusCode, wire.ReadErrorMessage(bytes.NewReader(out)), classifier.ErrRefused))
	}
	p, c, ok := wire.ReadUsage(out)
	if ok {
		t.g.metrics.ClassifierTokens.WithLabelValues("prompt").Add(float64(p))
		t.g.metrics.ClassifierTokens.WithLabelValues("completion").Add(float64(c))
	}
	if span.IsRecording() {
		var a spans.GenAIResponse
		a.ReadAnswer(out)
		span.SetAttributes(a.Attrs()...)
		if ok {
			spans.SetUsage(span, p, c)
		}
	}
	return out, upstream.Answered(pools.Success, "")
}

// gatewayRequest is a request the gateway makes of its own (a classifier
// call, a tokenization): a JSON POST of body to path on rep, with the
// pool's key and ctx's trace context, under the attempt's context hctx.
func (g *Gateway) gatewayRequest(ctx, hctx context.Context, ps *poolState, rep *pools.Replica, path string, body []byte) (*http.Request, error) {
	req, err := http.NewRequestWithContext(hctx, http.MethodPost, rep.Base()+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header["Content-Type"] = jsonContentType
	if k := ps.cfg.APIKey; k != "" {
		req.Header.Set("Authorization", "Bearer "+string(k))
	}
	upstream.AddVia(req.Header, g.via) // loops.go: a request that comes back is refused
	if g.tracing {
		g.prop.Inject(ctx, propagation.HeaderCarrier(req.Header))
	}
	return req, nil
}

package router

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"

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
	// requests, and may use the slots classifier.reserved_slots keeps.
	ex := &execution{ps: ps, req: &pools.Request{Tenant: "(classifier)", Priority: true}, attempts: 2, call: call}
	call.ex = ex
	res := t.g.execute(ctx, ex)
	if res.err != nil {
		if call.replicas == 0 && ps.CanTake(nil) {
			// Never sent: the call waited for a slot of an available
			// replica and its time ran out. Other tenants' requests held
			// the slots; the pool did not fail, and the breaker must not
			// hear of it.
			return nil, fmt.Errorf("classifier pool %q: %w (%w)", t.pool, classifier.ErrNoSlot, res.err)
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if res.poison {
			// The same 500 from two replicas: this request's input, not
			// the pool; the breaker must not hear of it.
			return nil, fmt.Errorf("classifier pool %q: %w (%w)", t.pool, classifier.ErrRefused, res.err)
		}
		return nil, fmt.Errorf("classifier pool %q: %w", t.pool, res.err)
	}
	return call.out, nil
}

// classifierCall makes the attempts of one classifier request.
type classifierCall struct {
	t    *poolTransport
	ex   *execution
	ps   *poolState
	body []byte
	out  []byte
	// replicas counts the replicas acquired (0: every attempt waited).
	replicas int
}

func (c *classifierCall) acquired(*pools.Replica) { c.replicas++ }

func (c *classifierCall) send(ctx context.Context, rep *pools.Replica) result {
	var res result
	c.out, res = c.t.once(ctx, c.ex, c.ps, rep, c.body)
	return res
}

// once makes one attempt of a classifier call on rep.
func (t *poolTransport) once(ctx context.Context, ex *execution, ps *poolState, rep *pools.Replica, body []byte) ([]byte, result) {
	// Each attempt is a client span, a child of switchyard.classify.
	ctx, span := t.g.startSpan(ctx, "switchyard.classify.upstream", trace.WithSpanKind(trace.SpanKindClient))
	defer span.End()
	if span.IsRecording() {
		span.SetAttributes(attrSwitchyardPool.String(ps.Name), attrSwitchyardReplica.String(rep.Name),
			attrGenAIOperation.String(wire.Chat.Operation()), attrGenAIProvider.String(genAIProvider))
		span.SetAttributes(genAIRequestAttrs(body)...)
	}
	var clock upstreamClock
	defer clock.stop()
	resp, _, res := t.g.send(ctx, span, sendSpec{ps: ps, rep: rep, clock: &clock, ex: ex, what: "classifier ",
		build: func(hctx context.Context) (*http.Request, error) {
			req, err := http.NewRequestWithContext(hctx, http.MethodPost, rep.Base()+"/v1/chat/completions", bytes.NewReader(body))
			if err != nil {
				return nil, err
			}
			req.Header.Set("Content-Type", "application/json")
			addVia(req.Header, t.g.via)
			if k := ps.cfg.APIKey; k != "" {
				req.Header.Set("Authorization", "Bearer "+string(k))
			}
			if t.g.tracing {
				t.g.prop.Inject(ctx, propagation.HeaderCarrier(req.Header))
			}
			return req, nil
		}})
	if resp == nil {
		if res.err != nil && !res.done {
			res.err = fmt.Errorf("replica %q: %w", rep.Name, res.err)
		}
		return nil, res
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(io.LimitReader(resp.Body, maxClassifierAnswer))
	if err != nil {
		if ctx.Err() == nil {
			setClientError(span, transportErrorType(err), err)
		}
		return nil, judgeError(ctx, ps, rep, err, "reading answer")
	}
	if !wire.CheckDepth(out, replicaDepth(t.g.snap.Load().Config.Server.MaxJSONDepth)) {
		// Never parsed: a recursive parser on hostile nesting costs
		// memory without bound. The replica's fault.
		err := fmt.Errorf("replica %q: the classifier's answer nests JSON too deeply", rep.Name)
		return nil, result{retry: true, outcome: pools.Status5xx, reason: "status_5xx", detail: err.Error(), err: err}
	}
	if resp.StatusCode != http.StatusOK {
		// A 4xx other than the ones send retries: the classifier's own
		// request was refused. Not the replica's fault, not retried.
		return nil, result{outcome: pools.Neutral, err: fmt.Errorf("replica %q: status %d: %s: %w", rep.Name, resp.StatusCode, wire.ReadErrorMessage(bytes.NewReader(out)), classifier.ErrRefused)}
	}
	p, c, ok := wire.ReadUsage(out)
	if ok {
		t.g.metrics.classifierTokens.WithLabelValues("prompt").Add(float64(p))
		t.g.metrics.classifierTokens.WithLabelValues("completion").Add(float64(c))
	}
	if span.IsRecording() {
		var a genAIResponse
		a.readAnswer(out)
		span.SetAttributes(a.attrs()...)
		if ok {
			setUsage(span, p, c)
		}
	}
	return out, result{done: true, outcome: pools.Success}
}

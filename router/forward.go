package router

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/switchyard/switchyard/router/internal/upstream"

	"github.com/switchyard/switchyard/router/internal/wire"

	"github.com/switchyard/switchyard/pools"
	"github.com/tidwall/sjson"
)

// forward sends the request to the decided chain of pools, in order, until
// one answers (placeOn, for each pool).
func (g *Gateway) forward(ctx context.Context, w http.ResponseWriter, r *http.Request, x *exchange) {
	s := x.snap
	chain := x.decision.Pools
	if sp := x.decision.Spill; sp != nil {
		if ps := s.pools[chain[0]]; ps != nil && ps.Saturated(sp.WhenQueueOver) {
			g.metrics.Fallbacks.WithLabelValues(chain[0], sp.To, "spill").Inc()
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
	g.metrics.Inflight.WithLabelValues(x.route).Inc()
	defer g.metrics.Inflight.WithLabelValues(x.route).Dec()
	var lastErr error
	for i, name := range chain {
		ps := s.pools[name]
		if ps == nil {
			// Cannot happen with a validated config and the policy's
			// session check; never dereference a missing pool.
			lastErr = fmt.Errorf("%w: pool %q is not configured", upstream.ErrNoReplica, name)
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
				s.Policy.Escalate(x.sess.key, x.decision, chain[i:])
			case !errors.Is(lastErr, upstream.ErrNoReplica):
				reason = "upstream_error"
			}
			g.metrics.Fallbacks.WithLabelValues(chain[i-1], name, reason).Inc()
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
			x.endAs(endClientLeft)
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

// isTerminal reports a failure that no other replica or pool is asked to
// repeat: a timeout (504) or an answer over the size limit.
func isTerminal(err error) bool {
	return upstream.IsTimeout(err) || errors.Is(err, upstream.ErrAnswerTooLarge)
}

// placeOn places the request on ps through the executor. It returns done
// once a response has been committed to the client.
func (g *Gateway) placeOn(ctx context.Context, w http.ResponseWriter, r *http.Request, x *exchange, ps *poolState) (bool, error) {
	if err := x.snap.discovery.Empty(ps.Pool); err != nil {
		return false, err
	}
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
	x.attempt.preq = pools.Request{}
	// Waiting for a full replica, keys take turns by weight, and keyless
	// clients one turn each by address.
	x.attempt.preq.Tenant, x.attempt.preq.Weight = tenantOf(x, r, x.snap.Config.Server.Trusted)
	x.attempt.preq.Fair = true // no tenant holds more than its share while others wait
	if ps.NeedsKey() {
		x.attempt.preq.Key = affinityKey(x, r, ps.cfg.Affinity.Depth)
	}
	// Until a replica is chosen, an error names this pool and no replica.
	x.pool, x.replica = ps.Name, ""
	x.attempt.up = upstreamCall{w: w, r: r, ps: ps, body: body, injected: injected}
	x.attempt.exec = upstream.Execution{Pool: ps.Pool, Req: &x.attempt.preq, Attempts: 1 + ps.cfg.Retries, Call: x, Only: x.stored.pinned}
	res := g.exec.Execute(ctx, &x.attempt.exec)
	x.retries += x.attempt.exec.Retries
	x.access.queued += x.attempt.exec.Queued
	x.access.placed = true
	if x.stream.cut != nil {
		// The stream was cut after its failed attempt was counted and its
		// replica released: a new execution continues it.
		g.resume(ctx, x, ps)
	}
	if res.Done() {
		return true, nil
	}
	return false, res.Err()
}

var _ upstream.Attempt = (*exchange)(nil)

package router

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"

	"go.opentelemetry.io/otel/propagation"

	"github.com/switchyard/switchyard/classifier"
	"github.com/switchyard/switchyard/pools"
)

// poolTransport sends the classifier's requests through the same pools
// machinery as client requests: balanced, counted in flight, health-aware,
// with one retry on another replica.
type poolTransport struct {
	g    *Gateway
	pool *poolState
}

var _ classifier.Transport = (*poolTransport)(nil)

// ChatCompletion implements classifier.Transport.
func (t *poolTransport) ChatCompletion(ctx context.Context, body []byte) ([]byte, error) {
	ps := t.pool
	var tried []*pools.Replica
	var lastErr error = fmt.Errorf("classifier pool %q: %w", ps.Name, pools.ErrNoReplica)
	for attempt := 0; attempt < 2; attempt++ {
		rep, err := ps.Acquire(ctx, &pools.Request{}, func(r *pools.Replica) bool {
			for _, t := range tried {
				if t == r {
					return true
				}
			}
			return false
		})
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, fmt.Errorf("classifier pool %q: %w", ps.Name, err)
		}
		tried = append(tried, rep)
		out, retry, err := t.once(ctx, rep, body)
		ps.Release(rep)
		if err == nil {
			return out, nil
		}
		lastErr = err
		if !retry || ctx.Err() != nil {
			break
		}
	}
	return nil, lastErr
}

func (t *poolTransport) once(ctx context.Context, rep *pools.Replica, body []byte) ([]byte, bool, error) {
	ps := t.pool
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, rep.URL.String()+"/v1/chat/completions", bytes.NewReader(body))
	if err != nil {
		return nil, false, err
	}
	req.Header.Set("Content-Type", "application/json")
	if k := ps.cfg.APIKey; k != "" {
		req.Header.Set("Authorization", "Bearer "+string(k))
	}
	if t.g.tracing {
		t.g.prop.Inject(ctx, propagation.HeaderCarrier(req.Header))
	}
	resp, err := ps.Client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			ps.Observe(rep, pools.Neutral, "")
			return nil, false, err
		}
		ps.Observe(rep, pools.Failure, err.Error())
		return nil, true, fmt.Errorf("classifier replica %q: %w", rep.Name, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		if ctx.Err() == nil {
			ps.Observe(rep, pools.Failure, err.Error())
		}
		return nil, ctx.Err() == nil, fmt.Errorf("classifier replica %q: reading answer: %w", rep.Name, err)
	}
	if resp.StatusCode != http.StatusOK {
		o := pools.Neutral
		if resp.StatusCode >= 500 {
			o = pools.Failure
		}
		ps.Observe(rep, o, fmt.Sprintf("classifier status %d", resp.StatusCode))
		retry := resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500
		return nil, retry, fmt.Errorf("classifier replica %q: status %d: %s", rep.Name, resp.StatusCode, readErrorMessage(bytes.NewReader(out)))
	}
	ps.Observe(rep, pools.Success, "")
	return out, false, nil
}

package pools

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tidwall/gjson"
)

// HealthOptions configures active probes; comparable (in EndpointOptions).
type HealthOptions struct {
	// Disabled turns active probes off (outlier detection stays on).
	Disabled       bool
	Path           string
	Interval       time.Duration
	Timeout        time.Duration
	UnhealthyAfter int
	HealthyAfter   int
	// CheckModels makes every probe also check that GET /v1/models lists
	// each model the pools send this server (without it, only probes of a
	// server marked misconfigured do).
	CheckModels bool
}

// ProbeOnce probes every replica of the pool once, concurrently, and
// applies the thresholds. Exported so tests can step health by hand.
func (p *Pool) ProbeOnce(ctx context.Context) {
	var wg sync.WaitGroup
	for _, r := range p.replicas {
		wg.Go(func() { r.apply(ctx, r.Options()) })
	}
	wg.Wait()
}

// errMisconfigured marks a probe failure that keeps the endpoint
// misconfigured (wrong key, model not served).
var errMisconfigured = errors.New("misconfigured")

// probe runs one health probe, under its own timeout, and with models the
// model check.
func (e *Endpoint) probe(ctx context.Context, o EndpointOptions, models bool) error {
	ctx, cancel := context.WithTimeout(ctx, o.Health.Timeout)
	defer cancel()
	if _, err := e.get(ctx, o, o.Health.Path, 64<<10); err != nil || !models {
		return err
	}
	body, err := e.get(ctx, o, "/v1/models", 4<<20)
	if err != nil {
		var se *statusError
		if errors.As(err, &se) && (se.code == http.StatusUnauthorized || se.code == http.StatusForbidden) {
			return fmt.Errorf("%w: GET /v1/models answered %d (check the pool's api_key_env)", errMisconfigured, se.code)
		}
		return err
	}
	listed := gjson.GetBytes(body, "data.#.id").Array()
	for _, m := range strings.Split(o.Models, "\n") {
		if m != "" && !slices.ContainsFunc(listed, func(id gjson.Result) bool { return id.String() == m }) {
			return fmt.Errorf("%w: GET /v1/models does not list the model %q", errMisconfigured, m)
		}
	}
	return nil
}

type statusError struct {
	path string
	code int
}

func (s *statusError) Error() string { return fmt.Sprintf("GET %s: status %d", s.path, s.code) }

// get fetches path from the server with the endpoint's key, reading at
// most limit bytes of a 2xx answer.
func (e *Endpoint) get(ctx context.Context, o EndpointOptions, path string, limit int64) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, o.URL+path, nil)
	if err != nil {
		return nil, err
	}
	if o.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+o.APIKey)
	}
	resp, err := e.control.Load().Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, limit))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return nil, &statusError{path: path, code: resp.StatusCode}
	}
	return body, nil
}

// apply probes e once and applies the verdict to its state (its health
// loop runs it each interval). A replica that spans several nodes is one
// unit: it is up only when its API answers.
func (e *Endpoint) apply(ctx context.Context, o EndpointOptions) {
	models := o.Health.CheckModels || e.misconfigured.Load()
	err := e.probe(ctx, o, models)
	if errors.Is(err, context.Canceled) {
		return
	}
	defer e.probedOnce.Do(func() { close(e.probed) })
	if err == nil {
		e.passed.Store(e.reg.now().UnixNano())
	} else {
		e.passed.Store(0)
	}
	e.mu.Lock()
	var changed, healthy bool
	var why string
	switch {
	case err == nil && e.probing.Load():
		// A new endpoint's first passing probe admits it.
		e.record.probeOK, e.record.probeFail = 1, 0
		e.probing.Store(false)
		e.record.why = ""
		changed, healthy, why = e.Healthy(), true, "first probe passed"
	case err == nil:
		e.record.probeOK, e.record.probeFail = e.record.probeOK+1, 0
		if models && e.misconfigured.Load() {
			if e.reg.now().UnixNano() < e.misHeldUntil.Load() {
				break // the backoff of a misconfiguration found on requests
			}
			// The key is accepted and every model is listed again.
			e.misconfigured.Store(false)
			e.record.lastMisEnd = e.reg.now()
			if e.healthy.Load() {
				e.record.why = ""
				changed, healthy, why = true, true, "key accepted and model listed"
			}
		}
		if !e.healthy.Load() && e.record.probeOK >= o.Health.HealthyAfter {
			e.healthy.Store(true)
			e.record.ejectStreak = 0
			e.record.why = ""
			changed, healthy, why = true, true, fmt.Sprintf("%d probes passed", e.record.probeOK)
			// A replica back from the dead is no longer ejected either.
			e.ejectedUntil.Store(0)
		}
	case errors.Is(err, errMisconfigured):
		e.record.probeOK, e.record.probeFail = 0, 0
		e.record.lastErr = err.Error()
		if !e.misconfigured.Load() {
			e.misconfigured.Store(true)
			e.record.why = err.Error()
			changed, healthy, why = true, false, e.record.why
		}
	default:
		e.record.probeOK, e.record.probeFail = 0, e.record.probeFail+1
		e.record.lastErr = err.Error()
		if e.probing.Load() {
			e.record.why = "waiting for a first passing probe: " + err.Error()
		}
		if e.healthy.Load() && e.record.probeFail >= o.Health.UnhealthyAfter {
			e.healthy.Store(false)
			e.record.why = fmt.Sprintf("%d probes failed: %v", e.record.probeFail, err)
			changed, healthy, why = true, false, e.record.why
		}
	}
	e.mu.Unlock()
	if changed {
		e.reg.changedState(e, healthy, why)
	}
}

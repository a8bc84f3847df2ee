package pools

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"
)

// HealthOptions configures active probes and passive ejection.
type HealthOptions struct {
	// Disabled turns active probes off (passive ejection stays on).
	Disabled       bool
	Path           string
	Interval       time.Duration
	Timeout        time.Duration
	UnhealthyAfter int
	HealthyAfter   int
	// EjectBase is the first passive ejection's length; each further
	// ejection in a row doubles it, up to EjectMax.
	EjectBase time.Duration
	EjectMax  time.Duration
	// OnChange is called when a replica's state changes (health verdict,
	// ejection); why says what happened. Called from the health loop or the
	// request path; must not block.
	OnChange func(r *Replica, healthy bool, why string)
}

func (h *HealthOptions) setDefaults() {
	if h.Path == "" {
		h.Path = "/health"
	}
	if h.Interval <= 0 {
		h.Interval = 5 * time.Second
	}
	if h.Timeout <= 0 {
		h.Timeout = time.Second
	}
	if h.UnhealthyAfter <= 0 {
		h.UnhealthyAfter = 3
	}
	if h.HealthyAfter <= 0 {
		h.HealthyAfter = 2
	}
	if h.EjectBase <= 0 {
		h.EjectBase = 5 * time.Second
	}
	if h.EjectMax < h.EjectBase {
		h.EjectMax = max(h.EjectBase, 2*time.Minute)
	}
}

// Outcome classifies one upstream attempt for passive health.
type Outcome int

const (
	// Success: the replica answered (any status below 500 but 429 counts).
	Success Outcome = iota
	// Failure: connection error, timeout, or a 5xx from the replica.
	Failure
	// Neutral: the client cancelled, or the replica said 429; says nothing
	// about the replica's health.
	Neutral
)

// Observe records the outcome of a request on r (passive health). A failure
// ejects the replica for a backoff that doubles with each ejection in a row,
// but never the pool's last available replica: with nothing else to send to,
// a struggling replica is better than none. A success ends the streak.
func (p *Pool) Observe(r *Replica, o Outcome, detail string) {
	switch o {
	case Success:
		r.mu.Lock()
		r.streak = 0
		r.mu.Unlock()
	case Failure:
		// Check and eject under ejectMu: two replicas failing at once
		// must not each count the other as the one left available.
		p.ejectMu.Lock()
		now := p.opts.Now()
		if r.Ejected(now) {
			p.ejectMu.Unlock()
			r.setErr(detail)
			return
		}
		others := 0
		for _, o := range p.replicas {
			if o != r && o.Available(now) {
				others++
			}
		}
		if others == 0 {
			p.ejectMu.Unlock()
			r.setErr(detail)
			return
		}
		r.mu.Lock()
		d := p.opts.Health.EjectBase << min(r.streak, 16)
		if d > p.opts.Health.EjectMax || d <= 0 {
			d = p.opts.Health.EjectMax
		}
		r.streak++
		r.lastErr = detail
		why := fmt.Sprintf("ejected for %s after: %s", d, detail)
		r.why = why
		r.mu.Unlock()
		r.ejectedUntil.Store(now.Add(d).UnixNano())
		p.ejectMu.Unlock()
		r.ejections.Add(1)
		if cb := p.opts.Health.OnChange; cb != nil {
			cb(r, false, why) // not r.why: the probe loop may be writing it
		}
	}
}

// RunHealth probes every replica's health endpoint each interval until ctx
// ends. A replica that spans several nodes is one unit: it is up only when
// its API answers. Each probe has its own timeout.
func (p *Pool) RunHealth(ctx context.Context) {
	h := p.opts.Health
	if h.Disabled {
		return
	}
	t := time.NewTicker(h.Interval)
	defer t.Stop()
	for {
		p.ProbeOnce(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// ProbeOnce probes every replica once, concurrently, and applies the
// thresholds. Exported so tests can step health by hand.
func (p *Pool) ProbeOnce(ctx context.Context) {
	done := make(chan struct{}, len(p.replicas))
	for _, r := range p.replicas {
		go func() {
			defer func() { done <- struct{}{} }()
			p.apply(r, p.probe(ctx, r))
		}()
	}
	for range p.replicas {
		<-done
	}
}

func (p *Pool) probe(ctx context.Context, r *Replica) error {
	h := p.opts.Health
	ctx, cancel := context.WithTimeout(ctx, h.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.URL.String()+h.Path, nil)
	if err != nil {
		return err
	}
	if key := p.opts.APIKey; key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := p.Client.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("health probe: status %d", resp.StatusCode)
	}
	return nil
}

func (p *Pool) apply(r *Replica, err error) {
	if errors.Is(err, context.Canceled) {
		return
	}
	h := p.opts.Health
	r.mu.Lock()
	var changed, healthy bool
	var why string
	if err == nil {
		r.probeOK++
		r.probeFail = 0
		if !r.healthy.Load() && r.probeOK >= h.HealthyAfter {
			r.healthy.Store(true)
			r.streak = 0
			r.why = ""
			changed, healthy, why = true, true, fmt.Sprintf("%d probes passed", r.probeOK)
			// A replica back from the dead is no longer ejected either.
			r.ejectedUntil.Store(0)
		}
	} else {
		r.probeFail++
		r.probeOK = 0
		r.lastErr = err.Error()
		if r.healthy.Load() && r.probeFail >= h.UnhealthyAfter {
			r.healthy.Store(false)
			r.why = fmt.Sprintf("%d probes failed: %v", r.probeFail, err)
			changed, healthy, why = true, false, r.why
		}
	}
	r.mu.Unlock()
	if changed && healthy {
		p.wakeWaiters()
	}
	if changed && h.OnChange != nil {
		h.OnChange(r, healthy, why)
	}
}

package pools

import (
	"fmt"
	"strconv"
	"time"
)

// OutlierOptions is passive health, modelled on Envoy's outlier detection:
// a replica is ejected after a run of consecutive failures, for a growing
// time (hold), and never so that more than MaxEjectionPercent of the pool
// (or its last available replica) is out (cannotSpare).
type OutlierOptions struct {
	// Consecutive5xx and ConsecutiveConnectFailures eject after this many
	// 5xx answers (or streams cut by the replica), or failures to connect
	// or get any answer, in a row; 0 turns each off.
	Consecutive5xx             int
	ConsecutiveConnectFailures int
	MaxEjectionPercent         int
	BaseEjection               time.Duration
	MaxEjection                time.Duration
	// CountTimeouts counts a response header timeout as a 5xx. Off by
	// default: a long generation that times out is usually not the
	// replica's fault. (A stream that stalls once started is its fault:
	// the caller reports it as Status5xx.)
	CountTimeouts bool
}

// Outcome classifies one upstream attempt for passive health.
type Outcome int

const (
	// Success: the replica answered (any status below 500 but 429 and the
	// misconfiguration codes). It ends every failure streak.
	Success Outcome = iota
	// Neutral: says nothing about the replica (the client went away, the
	// replica said 429, the client's request was bad).
	Neutral
	// Status5xx: the replica answered 5xx, or cut a stream.
	Status5xx
	// ConnectFailure: no answer at all (refused, reset, closed early).
	ConnectFailure
	// Timeout: a timeout waiting for the replica; counted as a 5xx only
	// with CountTimeouts.
	Timeout
	// Misconfigured: 401/403 (the pool's key is wrong) or 404 for the
	// pool's model (not served). Out of rotation until a probe sees the
	// key accepted and the model listed.
	Misconfigured
)

// Observe records the outcome of a request on r. detail says what happened
// and is kept as the replica's last error.
func (p *Pool) Observe(r *Replica, o Outcome, detail string) {
	e := r.Endpoint
	od := p.opts.Outlier
	switch o {
	case Success:
		e.mu.Lock()
		e.record.cons5xx, e.record.consConnect = 0, 0
		e.mu.Unlock()
		e.answered.Store(p.reg.now().UnixNano())
		return
	case Neutral:
		return
	case Misconfigured:
		e.setErr(detail)
		if e.Options().Health.Disabled {
			// No probe would ever clear the mark: eject instead, so the
			// replica is tried again later.
			p.eject(r, "misconfigured: "+detail)
			return
		}
		if e.misconfigured.CompareAndSwap(false, true) {
			// A probe may clear the mark only after a hold, as ejections.
			now := p.reg.now()
			e.mu.Lock()
			d := od.hold(&e.record.misStreak, e.record.lastMisEnd, now)
			e.misHeldUntil.Store(now.Add(d).UnixNano())
			why := fmt.Sprintf("misconfigured (held out at least %s): %s", d, detail)
			e.record.why = why
			e.mu.Unlock()
			p.reg.changedState(e, false, why)
		}
		return
	case Timeout:
		if !od.CountTimeouts {
			e.setErr(detail)
			return
		}
		o = Status5xx
	}
	count, limit, kind := &e.record.cons5xx, od.Consecutive5xx, "5xx"
	if o != Status5xx {
		count, limit, kind = &e.record.consConnect, od.ConsecutiveConnectFailures, "connect failures"
	}
	e.mu.Lock()
	e.record.lastErr = detail
	*count++
	n := *count
	e.mu.Unlock()
	if limit > 0 && n >= limit {
		p.eject(r, fmt.Sprintf("%d consecutive %s, last: %s", n, kind, detail))
	}
}

// eject takes r out of rotation unless a pool listing it cannot spare it.
// Under ejectMu, so the check and the ejection are atomic across pools and
// reloads.
func (p *Pool) eject(r *Replica, cause string) {
	e, g := r.Endpoint, p.reg
	g.ejectMu.Lock()
	now := g.now()
	if e.Ejected(now) {
		g.ejectMu.Unlock()
		e.mu.Lock()
		e.record.cons5xx, e.record.consConnect = 0, 0 // failures of requests sent before the ejection
		e.mu.Unlock()
		return
	}
	// The server is ejected from every pool that lists it, so every such
	// pool must be able to spare it.
	for _, q := range g.poolsOf(e, p) {
		if why := q.cannotSpare(e, now); why != "" {
			g.ejectMu.Unlock()
			e.setErr(cause + " (not ejected: " + why + ")")
			return
		}
	}
	e.mu.Lock()
	d := p.opts.Outlier.hold(&e.record.ejectStreak, e.record.lastEjectEnd, now)
	e.record.cons5xx, e.record.consConnect = 0, 0
	e.record.lastEjectEnd = now.Add(d)
	why := fmt.Sprintf("ejected for %s after %s", d, cause)
	e.record.why = why
	e.mu.Unlock()
	e.ejectedUntil.Store(now.Add(d).UnixNano())
	g.ejectMu.Unlock()
	e.ejections.Add(1)
	g.changedState(e, false, why)
}

// cannotSpare says why the pool cannot have e ejected now ("" when it
// can): it is the pool's last available replica, or the pool is at its
// MaxEjectionPercent. Envoy's rule: eject while the ejected share stays
// within the cap, and always allow one in a pool of two or more.
func (p *Pool) cannotSpare(e *Endpoint, now time.Time) string {
	ejected, others := 0, 0
	for _, o := range p.replicas {
		if o.Endpoint == e {
			continue
		}
		if o.Ejected(now) {
			ejected++
		} else if o.Available(now) {
			others++
		}
	}
	if others == 0 {
		return "it is the last available replica of pool " + strconv.Quote(p.Name)
	}
	if ejected > 0 && (ejected+1)*100 > p.opts.Outlier.MaxEjectionPercent*len(p.replicas) {
		return "max_ejection_percent of pool " + strconv.Quote(p.Name) + " reached"
	}
	return ""
}

// changedState reports a change of e's state to the OnChange hook and
// wakes waiters to look at the replicas again.
func (g *Endpoints) changedState(e *Endpoint, healthy bool, why string) {
	g.broadcast()
	if cb := g.opts.OnChange; cb != nil {
		cb(g.member(e), healthy, why)
	}
}

// hold is the growing backoff of ejections and misconfiguration marks:
// base × the marks in a row (counted in *streak), up to max; a replica that
// behaved for a full max since its last hold ended (lastEnd) starts again
// at the base time.
func (od OutlierOptions) hold(streak *int, lastEnd, now time.Time) time.Duration {
	if !lastEnd.IsZero() && now.Sub(lastEnd) > od.MaxEjection {
		*streak = 0
	}
	*streak++
	d := od.BaseEjection * time.Duration(*streak)
	if d > od.MaxEjection || d <= 0 {
		d = od.MaxEjection
	}
	return d
}

// AliveWithin reports whether r answered a request successfully or passed
// its health probe (with none failed since) within the last d, by the
// pool's clock: a request of its that waited d for its first token was
// slow for its own sake (a long prompt's prefill), not the replica's.
func (p *Pool) AliveWithin(r *Replica, d time.Duration) bool {
	now := p.reg.now().UnixNano()
	for _, t := range []int64{r.answered.Load(), r.passed.Load()} {
		if t != 0 && now-t <= int64(d) {
			return true
		}
	}
	return false
}

package pools

import (
	"math"
	"sync"
	"time"
)

// Shares: while tenants wait for a full replica, none is given more than
// its weighted share of the replica's slots. The queue's fair order (see
// waitQueue) shares the slots as they free; this bounds what a tenant
// holds: a freed slot passes over a waiter whose tenant already holds its
// share, to one whose tenant holds less, and goes to it only when no such
// waiter fits (so no slot stays idle while anyone waits). A tenant's
// share is cap × its weight ÷ the weights of the tenants holding or
// waiting for the replica's slots.
//
// With Options.ShareReserve, a tenant stays in play for that long after
// its last request on the replica, and its share stays reserved: a tenant
// over its own share takes a free slot only if the slots left free cover
// what the others in play are owed (each one's share, up to the most it
// held at once, less what it holds). So a tenant that sends steady
// requests finds its slots free when it comes back, although another
// asked for every slot between two of its requests; the cost is that a
// reserved slot may stay idle while the other waits, until the reserve
// lapses.
//
// Only requests with Request.Fair are counted; they must be released
// with ReleaseFor.

// holds counts, per tenant, the fair requests holding an endpoint's slots.
type holds struct {
	mu sync.Mutex
	m  map[string]*tenantHold
}

type tenantHold struct {
	tenant string
	n      int64
	weight float64
	// peak is the most the tenant held at once since it came into play;
	// until (unix nanoseconds) is when its reserve lapses once it holds
	// nothing (Options.ShareReserve after its last request ended).
	peak, until int64
}

// inPlay reports whether t holds a slot or its reserve has not lapsed.
func (t *tenantHold) inPlay(now int64) bool { return t.n > 0 || t.until > now }

// add counts one of req's requests at now; with a reserve its tenant's
// peak is kept.
func (h *holds) add(req *Request, e *Endpoint, now int64, reserve time.Duration) {
	h.mu.Lock()
	if h.m == nil {
		h.m = map[string]*tenantHold{}
	}
	t := h.m[req.Tenant]
	if t == nil || !t.inPlay(now) {
		t = &tenantHold{tenant: req.Tenant}
		h.m[req.Tenant] = t
	}
	t.n++
	if reserve > 0 {
		t.peak = max(t.peak, t.n)
	}
	t.weight = float64(max(1, req.Weight))
	h.mu.Unlock()
	req.held = e
}

// remove ends one of tenant's requests at now; with a reserve the tenant
// stays in play until now + reserve.
func (h *holds) remove(tenant string, now int64, reserve time.Duration) {
	h.mu.Lock()
	if t := h.m[tenant]; t != nil {
		t.n--
		if reserve > 0 {
			t.until = max(t.until, now+int64(reserve))
		}
		if !t.inPlay(now) {
			delete(h.m, tenant)
		}
	}
	h.mu.Unlock()
}

// others reports whether a tenant other than tenant is in play. h.mu is
// not held.
func (h *holds) others(tenant string, now int64) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for name, t := range h.m {
		if name != tenant && t.inPlay(now) {
			return true
		}
	}
	return false
}

// nextLapse is when the first reserve of a tenant holding nothing lapses
// (unix nanoseconds), 0 when none is pending.
func (h *holds) nextLapse(now int64) int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	var next int64
	for _, t := range h.m {
		if t.n <= 0 && t.until > now && (next == 0 || t.until < next) {
			next = t.until
		}
	}
	return next
}

// shares is one dispatch's view of the tenants' shares of an endpoint.
type shares struct {
	limit, held, peak map[string]int64
}

// full reports whether tenant holds its share already.
func (s *shares) full(tenant string) bool {
	l, ok := s.limit[tenant]
	return ok && s.held[tenant] >= l
}

// owed is what the tenants in play other than tenant are owed of their
// reserved shares: each one's share, up to its peak, less what it holds.
func (s *shares) owed(tenant string) int64 {
	var n int64
	for name, p := range s.peak {
		if name != tenant {
			n += max(0, min(s.limit[name], p)-s.held[name])
		}
	}
	return n
}

// spare reports whether a tenant over its share may take one of free
// slots: what is left covers what the others are owed.
func (s *shares) spare(tenant string, free int64) bool { return free-1 >= s.owed(tenant) }

// give counts a slot handed to tenant during the dispatch.
func (s *shares) give(tenant string) { s.held[tenant]++ }

// shareLimit is the share of each tenant in play on e's slots (holding
// them, within its reserve, or waiting among the first entries of its
// queue): cap × weight ÷ the weights of them all, rounded up, at least 1.
// nil when fewer than two tenants are in play (no one to be fair to).
// e.mu is held.
func (e *Endpoint) shareLimit(cap int64) *shares {
	if cap <= 0 || cap >= 1<<62 {
		return nil
	}
	weights := map[string]float64{}
	e.holdWeights(weights)
	const scan = 256 // bounds the cost of a release under a flood
	for k := 0; k < min(e.queue.len(), scan); k++ {
		if w := e.queue.at(k); w.fair && w.state.Load() == waiting {
			weights[w.tenant] = max(weights[w.tenant], w.weight)
		}
	}
	return e.sharesOf(cap, weights)
}

// holdWeights adds the weights of the tenants in play on e's slots to
// weights, and drops those whose reserve lapsed.
func (e *Endpoint) holdWeights(weights map[string]float64) {
	now := e.reg.now().UnixNano()
	e.holds.mu.Lock()
	defer e.holds.mu.Unlock()
	for name, t := range e.holds.m {
		if !t.inPlay(now) {
			delete(e.holds.m, name)
			continue
		}
		weights[name] = t.weight
	}
}

// sharesOf is the shares of the tenants in weights of cap slots, with
// what each holds and held at most.
func (e *Endpoint) sharesOf(cap int64, weights map[string]float64) *shares {
	if len(weights) < 2 {
		return nil
	}
	held, peak := make(map[string]int64, len(weights)), make(map[string]int64, len(weights))
	e.holds.mu.Lock()
	for name, t := range e.holds.m {
		held[name], peak[name] = t.n, t.peak
	}
	e.holds.mu.Unlock()
	var sum float64
	for _, wt := range weights {
		sum += wt
	}
	limit := make(map[string]int64, len(weights))
	for name, wt := range weights {
		limit[name] = max(1, int64(math.Ceil(float64(cap)*wt/sum)))
	}
	return &shares{limit: limit, held: held, peak: peak}
}

// overShare reports whether req, a fair request, may not take a free
// slot of e (of cap) at once: its tenant holds its share already and
// what would be left does not cover what the other tenants in play are
// owed of their reserves. For a replica with no queue (the queue's own
// waiters are judged by dispatch).
func (e *Endpoint) overShare(req *Request, cap int64) bool {
	if cap <= 0 || !e.holds.others(req.Tenant, e.reg.now().UnixNano()) {
		return false
	}
	weights := map[string]float64{req.Tenant: float64(max(1, req.Weight))}
	e.holdWeights(weights)
	s := e.sharesOf(cap, weights)
	return s != nil && s.full(req.Tenant) && !s.spare(req.Tenant, cap-e.inflight.Load())
}

// ReleaseFor ends a request counted by Acquire for req (as Release does),
// and gives back its tenant's share.
func (p *Pool) ReleaseFor(r *Replica, req *Request) {
	if req != nil && req.held != nil {
		req.held.holds.remove(req.Tenant, p.reg.now().UnixNano(), p.opts.ShareReserve)
		req.held = nil
	}
	r.release()
}

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
	// kept counts the entries of m that hold nothing (kept for their
	// reserve), at most maxKept.
	kept int
}

// maxKept bounds the reserves an endpoint keeps: tenants are keys or,
// keyless, client addresses, and each dispatch reads them all. A tenant
// that ends its last request while maxKept others are kept keeps none.
const maxKept = 256

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
	if t != nil && t.n <= 0 {
		h.kept-- // kept for its reserve, or lapsed: holds one now
		if !t.inPlay(now) {
			t = nil
		}
	}
	if t == nil {
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
	defer h.mu.Unlock()
	t := h.m[tenant]
	if t == nil {
		return
	}
	if t.n--; t.n > 0 {
		return
	}
	if reserve > 0 && h.kept >= maxKept {
		h.sweep(now)
	}
	if reserve > 0 && h.kept < maxKept {
		t.until = max(t.until, now+int64(reserve))
		h.kept++
	} else {
		delete(h.m, tenant)
	}
}

// sweep drops the tenants whose reserve lapsed. h.mu is held.
func (h *holds) sweep(now int64) {
	for name, t := range h.m {
		if !t.inPlay(now) {
			delete(h.m, name)
			h.kept--
		}
	}
}

// others reports whether a tenant other than tenant is in play, and drops
// those whose reserve lapsed.
func (h *holds) others(tenant string, now int64) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.sweep(now)
	for name := range h.m {
		if name != tenant {
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
	held, peak := e.holds.inPlay(e.reg.now().UnixNano(), weights)
	const scan = 256 // bounds the cost of a release under a flood
	for k := 0; k < min(e.queue.len(), scan); k++ {
		if w := e.queue.at(k); w.fair && w.state.Load() == waiting {
			weights[w.tenant] = max(weights[w.tenant], w.weight)
		}
	}
	return sharesOf(cap, weights, held, peak)
}

// inPlay adds the weights of the tenants in play to weights and returns
// what each holds and held at most; it drops those whose reserve lapsed.
func (h *holds) inPlay(now int64, weights map[string]float64) (held, peak map[string]int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.sweep(now)
	held, peak = make(map[string]int64, len(h.m)), make(map[string]int64, len(h.m))
	for name, t := range h.m {
		weights[name] = t.weight
		held[name], peak[name] = t.n, t.peak
	}
	return held, peak
}

// sharesOf is the shares of the tenants in weights of cap slots, with
// what each holds and held at most.
func sharesOf(cap int64, weights map[string]float64, held, peak map[string]int64) *shares {
	if len(weights) < 2 {
		return nil
	}
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
	held, peak := e.holds.inPlay(e.reg.now().UnixNano(), weights)
	s := sharesOf(cap, weights, held, peak)
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

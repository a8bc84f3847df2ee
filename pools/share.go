package pools

import (
	"math"
	"sync"
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
}

func (h *holds) add(req *Request, e *Endpoint) {
	h.mu.Lock()
	if h.m == nil {
		h.m = map[string]*tenantHold{}
	}
	t := h.m[req.Tenant]
	if t == nil {
		t = &tenantHold{tenant: req.Tenant}
		h.m[req.Tenant] = t
	}
	t.n++
	t.weight = float64(max(1, req.Weight))
	h.mu.Unlock()
	req.held = e
}

func (h *holds) remove(tenant string) {
	h.mu.Lock()
	if t := h.m[tenant]; t != nil {
		if t.n--; t.n <= 0 {
			delete(h.m, tenant)
		}
	}
	h.mu.Unlock()
}

// shares is one dispatch's view of the tenants' shares of an endpoint.
type shares struct {
	limit, held map[string]int64
}

// full reports whether tenant holds its share already.
func (s *shares) full(tenant string) bool {
	l, ok := s.limit[tenant]
	return ok && s.held[tenant] >= l
}

// give counts a slot handed to tenant during the dispatch.
func (s *shares) give(tenant string) { s.held[tenant]++ }

// shareLimit is the share of each tenant holding or waiting for e's
// slots (among the first entries of its queue): cap × weight ÷ the
// weights of them all, rounded up, at least 1. nil when fewer than two
// tenants are in play (no one to be fair to). e.mu is held.
func (e *Endpoint) shareLimit(cap int64) *shares {
	if cap <= 0 || cap >= 1<<62 {
		return nil
	}
	weights := map[string]float64{}
	e.holds.mu.Lock()
	held := make(map[string]int64, len(e.holds.m))
	for name, t := range e.holds.m {
		weights[name] = t.weight
		held[name] = t.n
	}
	e.holds.mu.Unlock()
	const scan = 256 // bounds the cost of a release under a flood
	for k := 0; k < min(e.queue.len(), scan); k++ {
		if w := e.queue.at(k); w.fair && w.state.Load() == waiting {
			weights[w.tenant] = max(weights[w.tenant], w.weight)
		}
	}
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
	return &shares{limit: limit, held: held}
}

// ReleaseFor ends a request counted by Acquire for req (as Release does),
// and gives back its tenant's share.
func (p *Pool) ReleaseFor(r *Replica, req *Request) {
	if req != nil && req.held != nil {
		req.held.holds.remove(req.Tenant)
		req.held = nil
	}
	r.release()
}

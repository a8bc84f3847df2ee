package pools

import (
	"container/heap"
	"math"
	"sync"
	"time"
)

// Shares: while tenants wait for a full replica, a freed slot goes to the
// waiting tenant furthest below its share, weighed in slot time: the
// time its requests held the replica's slots lately (see usage), per
// unit of weight. A tenant is given no more than its weighted share of
// the slots while others wait: a freed slot passes over a waiter whose
// tenant already holds its share, to one whose tenant holds less, and
// goes to it only when no such waiter fits (so no slot stays idle while
// anyone waits). A tenant's share is cap × its weight ÷ the weights of
// the tenants holding, waiting for or reserving the replica's slots.
//
// With Options.ShareReserve (the window slot time is weighed over), a
// tenant earns a reserve by the slot time it used: one that held a slot
// at least a fifth of the window on average reserves the most it held at
// once (up to its share) until its slot time, decaying as it stays away,
// falls below that. A
// tenant over its own share takes a free slot only if the slots left
// free cover what the others are owed (each one's reserve less what it
// holds), or half the replica's slots: reserves never leave most of a
// replica idle. So a tenant that sends steady requests finds its slots
// free when it comes back, although another asked for every slot between
// two of its requests, and a tenant that sends one short request now and
// then reserves nothing.
//
// Only requests with Request.Fair are counted; they must be released
// with ReleaseFor.

// holds counts, per tenant, the fair requests holding an endpoint's slots
// and the slot time they used. Every operation on it but the check of the
// others' reserves (owedOver) costs a bounded amount however many tenants
// are in play: the weights are summed as tenants come and go, and kept
// tenants lapse in order from a heap.
type holds struct {
	mu sync.Mutex
	m  map[string]*tenantHold
	// kept counts the entries of m that hold nothing (kept for their
	// reserve or their slot time), at most maxKept.
	kept int
	// weights is the sum of the weights of the tenants in play: holding
	// slots or within their reserve.
	weights float64
	// tau is the window slot time is weighed over (nanoseconds), the
	// share_reserve of the last request counted; 0: tenants are forgotten
	// as soon as they hold nothing.
	tau int64
	// lapses orders the kept tenants' next change: the end of a reserve or
	// being forgotten. An entry whose tenant changed since is stale and
	// skipped.
	lapses lapseHeap
	// waiting is a dispatch's scratch (see shares), kept to be reused.
	waiting map[string]float64
	// prio counts each tenant's priority requests (the classifier's
	// calls) holding slots.
	prio map[string]int64
}

// maxKept bounds the tenants an endpoint keeps while they hold nothing:
// tenants are keys or, keyless, client addresses. A tenant that ends its
// last request while maxKept others are kept is forgotten.
const maxKept = 256

// A kept tenant's reserve lasts while its slot time is at least
// reserveShare of the window; it is remembered, for the order of
// service, while its slot time is at least forgetShare of the window.
const forgetShare = 0.001

type tenantHold struct {
	tenant string
	n      int64
	weight float64
	// counted: weight is in holds.weights (holding, or within its
	// reserve).
	counted bool
	// starts is the sum of the start times of the held slots (unix
	// nanoseconds); used is the slot time of ended requests (nanoseconds),
	// decayed to usedAt.
	starts int64
	used   float64
	usedAt int64
	// For a tenant holding nothing: until is when its reserve ends and
	// forget when it is forgotten (unix nanoseconds).
	until, forget int64
	// peak is the most the tenant held at once since it came into play
	// (or its reserve last ended).
	peak int64
	// kept counts the times the tenant was kept holding nothing: a lapse
	// of an earlier time is stale.
	kept uint64
}

// lapse is a kept tenant's next change: its reserve ends (end) or it is
// forgotten, at at.
type lapse struct {
	t    *tenantHold
	at   int64
	end  bool
	kept uint64
}

type lapseHeap []lapse

func (l lapseHeap) Len() int           { return len(l) }
func (l lapseHeap) Less(i, j int) bool { return l[i].at < l[j].at }
func (l lapseHeap) Swap(i, j int)      { l[i], l[j] = l[j], l[i] }
func (l *lapseHeap) Push(x any)        { *l = append(*l, x.(lapse)) }
func (l *lapseHeap) Pop() any {
	old := *l
	x := old[len(old)-1]
	old[len(old)-1] = lapse{}
	*l = old[:len(old)-1]
	return x
}

// current reports whether l is still due for its tenant. h.mu is held.
func (h *holds) current(l lapse) bool {
	t := l.t
	return t.n <= 0 && h.m[t.tenant] == t && t.kept == l.kept && (!l.end || t.counted)
}

// usage is t's slot time at now (nanoseconds): its ended requests', each
// decayed by e^(-age/tau), and what its held slots have held so far.
func (h *holds) usage(t *tenantHold, now int64) float64 {
	return float64(t.n*now-t.starts) + h.decayed(t, now)
}

// decayed is the slot time of t's ended requests at now.
func (h *holds) decayed(t *tenantHold, now int64) float64 {
	if t.used <= 0 || h.tau <= 0 {
		return 0
	}
	return t.used * math.Exp(-float64(now-t.usedAt)/float64(h.tau))
}

// reserve is the slots t has earned at now: none unless it held a slot
// at least reserveShare of the window on average; then the most it held
// at once since it came into play (what its steady use needs), at most
// limit.
func (h *holds) reserve(t *tenantHold, now, limit int64) int64 {
	switch {
	case h.tau <= 0:
		return 0
	case t.n <= 0:
		// Its slot time only decays now: it is over the bound until
		// t.until.
		if t.until <= now {
			return 0
		}
	case h.usage(t, now) < reserveShare*float64(h.tau):
		return 0
	}
	return min(limit, t.peak)
}

// reserveShare is the least share of the window a tenant must have held
// a slot to reserve any: a tenant that sends steady requests earns its
// reserve, one that sends a short request now and then none.
const reserveShare = 0.2

// minSlotTime is the least slot time an ended request counts for: a
// tenant that sends a few short requests a second (two, with the
// defaults) uses a replica steadily, and earns a reserve, although each
// holds a slot only briefly.
const minSlotTime = 100 * time.Millisecond

// until is when slot time u (nanoseconds, at now) decays below v: now
// when it already is.
func (h *holds) until(u, v float64, now int64) int64 {
	if u < v || v <= 0 {
		return now
	}
	return now + int64(float64(h.tau)*math.Log(u/v))
}

// add counts one request of tenant (of weight) at now. h.mu is held.
func (h *holds) add(tenant string, weight int, now int64, reserve time.Duration) {
	if h.m == nil {
		h.m = map[string]*tenantHold{}
	}
	h.tau = int64(reserve)
	h.sweep(now)
	t := h.m[tenant]
	if t == nil {
		t = &tenantHold{tenant: tenant}
		h.m[tenant] = t
	} else if t.n <= 0 {
		h.kept-- // kept while holding nothing: holds one now
	}
	if t.counted {
		h.weights -= t.weight
	}
	t.n++
	t.peak = max(t.peak, t.n)
	t.starts += now
	t.weight = float64(max(1, weight))
	t.counted = true
	h.weights += t.weight
}

// remove ends one of tenant's requests, started at start, at now; with a
// reserve the tenant stays kept while its slot time lasts.
func (h *holds) remove(tenant string, start, now int64, reserve time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.tau = int64(reserve)
	t := h.m[tenant]
	if t == nil {
		return
	}
	t.n--
	t.starts -= start
	if h.tau > 0 {
		t.used = h.decayed(t, now) + float64(max(now-start, int64(minSlotTime)))
		t.usedAt = now
	}
	if t.n > 0 {
		return
	}
	tau := float64(h.tau)
	t.until = h.until(t.used, tau*reserveShare, now)
	t.forget = h.until(t.used, tau*forgetShare, now)
	if t.forget > now && h.kept >= maxKept {
		h.sweep(now)
	}
	if t.forget <= now || h.kept >= maxKept {
		delete(h.m, tenant)
		h.uncount(t)
		return
	}
	h.kept++
	t.kept++
	heap.Push(&h.lapses, lapse{t: t, at: t.forget, kept: t.kept})
	if t.until > now {
		heap.Push(&h.lapses, lapse{t: t, at: t.until, end: true, kept: t.kept})
	} else {
		h.uncount(t)
	}
	if len(h.lapses) > 4*maxKept+64 {
		h.compact() // many stale entries
	}
}

// uncount takes t's weight out of the tenants in play. h.mu is held.
func (h *holds) uncount(t *tenantHold) {
	if t.counted {
		h.weights -= t.weight
		t.counted = false
	}
}

// sweep ends the reserves and forgets the tenants due by now, and drops
// the stale entries on the way. h.mu is held.
func (h *holds) sweep(now int64) {
	for len(h.lapses) > 0 && h.lapses[0].at <= now {
		l := heap.Pop(&h.lapses).(lapse)
		if !h.current(l) {
			continue
		}
		if l.end {
			h.uncount(l.t)
			l.t.peak = 0
			continue
		}
		delete(h.m, l.t.tenant)
		h.kept--
		h.uncount(l.t)
	}
}

// compact keeps only the heap's current entries (at most 2 × maxKept): a
// tenant that comes back and leaves often adds entries each time. h.mu
// is held.
func (h *holds) compact() {
	kept := h.lapses[:0]
	for _, l := range h.lapses {
		if h.current(l) {
			kept = append(kept, l)
		}
	}
	clear(h.lapses[len(kept):])
	h.lapses = kept
	heap.Init(&h.lapses)
}

// nextLapse is when the first reserve of a tenant holding nothing ends
// (unix nanoseconds), 0 when none will: a waiter held back by it may then
// take a slot.
func (h *holds) nextLapse(now int64) int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.sweep(now)
	var next int64
	for _, l := range h.lapses {
		if l.end && h.current(l) && (next == 0 || l.at < next) {
			next = l.at
		}
	}
	return next
}

// shares is a view of the tenants' shares of an endpoint's cap slots,
// while its holds' mu is held: the tenants in play are those counted in
// h.m and those in h.waiting (waiters from the queue, or the request
// being admitted, not counted there, or with a higher weight than there).
// A tenant's share is cap × its weight ÷ sum, rounded down, at least 1.
type shares struct {
	h   *holds
	cap int64
	sum float64
	now int64
}

// weight is tenant's weight, 0 when it is not in play.
func (s *shares) weight(tenant string) float64 {
	var w float64
	if t := s.h.m[tenant]; t != nil && t.counted {
		w = t.weight
	}
	if x, ok := s.h.waiting[tenant]; ok {
		w = max(w, x)
	}
	return w
}

// limit is the share of a tenant of weight w: rounded down (rounded up,
// the shares of five tenants on eight slots would be two each, and four
// at their share would hold every slot), at least 1.
func (s *shares) limit(w float64) int64 {
	return max(1, int64(math.Floor(float64(s.cap)*w/s.sum+1e-9)))
}

// held is what tenant holds, counting the slots handed to its waiters
// (counted at the hand-over).
func (s *shares) held(tenant string) int64 {
	if t := s.h.m[tenant]; t != nil {
		return t.n
	}
	return 0
}

// full reports whether tenant holds its share already.
func (s *shares) full(tenant string) bool {
	w := s.weight(tenant)
	return w > 0 && s.held(tenant) >= s.limit(w)
}

// behind is how far tenant is from its share: its slot time per unit of
// weight (lower is further below). A tenant the endpoint does not know
// has used nothing.
func (s *shares) behind(tenant string, weight float64) float64 {
	t := s.h.m[tenant]
	if t == nil {
		return 0
	}
	return s.h.usage(t, s.now) / max(weight, t.weight)
}

// owedOver reports whether the tenants in play other than tenant are owed
// more than bound of their reserves: each one's reserve (up to its
// share) less what it holds. The sum stops once over bound.
func (s *shares) owedOver(tenant string, bound int64) bool {
	var n int64
	for name, t := range s.h.m {
		if name == tenant || !t.counted {
			continue
		}
		w := t.weight
		if x, ok := s.h.waiting[name]; ok {
			w = max(w, x)
		}
		if o := s.h.reserve(t, s.now, s.limit(w)) - t.n; o > 0 {
			if n += o; n > bound {
				return true
			}
		}
	}
	return false
}

// spare reports whether a tenant over its share may take one of free
// slots: what is left covers what the others are owed, or half the
// slots (reserves never keep most of a replica idle).
func (s *shares) spare(tenant string, free int64) bool {
	return free-1 >= s.cap/2 || !s.owedOver(tenant, free-1)
}

// shareLimit is the view of the shares of the tenants in play on e's
// slots (holding them, within its reserve, or waiting among the first
// entries of its queue) for a dispatch; ok false when fewer than two
// tenants are in play (no one to be fair to). e.mu and e.holds.mu are
// held.
func (e *Endpoint) shareLimit(cap int64) (s shares, ok bool) {
	if cap <= 0 || cap >= 1<<62 {
		return shares{}, false
	}
	h := &e.holds
	now := e.reg.now().UnixNano()
	h.sweep(now)
	clear(h.waiting)
	s = shares{h: h, cap: cap, sum: h.weights, now: now}
	n := 0
	for _, t := range h.m {
		if t.counted {
			if n++; n >= 2 {
				break
			}
		}
	}
	for k := 0; k < min(e.queue.len(), scanWaiters); k++ {
		w := e.queue.at(k)
		if !w.fair || w.state.Load() != waiting {
			continue
		}
		if cur := s.weight(w.tenant); w.weight > cur {
			if cur == 0 {
				n++
			}
			if h.waiting == nil {
				h.waiting = map[string]float64{}
			}
			h.waiting[w.tenant] = w.weight
			s.sum += w.weight - cur
		}
	}
	return s, n >= 2
}

// scanWaiters bounds the waiters a dispatch weighs against each other,
// and so the cost of a release under a flood (the queue's fair order
// keeps every waiting tenant's first request near its head).
const scanWaiters = 256

// overShare reports whether req, a fair request, may not take a free
// slot of e (of cap) at once: its tenant holds its share already and
// what would be left does not cover what the other tenants in play are
// owed of their reserves. For a replica with no queue (the queue's own
// waiters are judged by dispatch). e.holds.mu is held.
func (e *Endpoint) overShare(req *Request, cap int64) bool {
	if cap <= 0 {
		return false
	}
	h := &e.holds
	now := e.reg.now().UnixNano()
	h.sweep(now)
	mine := h.m[req.Tenant]
	others := len(h.m)
	if mine != nil {
		others--
	}
	if others == 0 {
		return false // no one else in play
	}
	clear(h.waiting)
	s := shares{h: h, cap: cap, sum: h.weights, now: now}
	if mine == nil || !mine.counted {
		if h.waiting == nil {
			h.waiting = map[string]float64{}
		}
		w := float64(max(1, req.Weight))
		h.waiting[req.Tenant] = w
		s.sum += w
	}
	return s.full(req.Tenant) && !s.spare(req.Tenant, cap-e.inflight.Load())
}

// ReleaseFor ends a request counted by Acquire for req (as Release does),
// and gives back its tenant's share.
func (p *Pool) ReleaseFor(r *Replica, req *Request) {
	if req != nil && req.held != nil {
		req.held.holds.remove(req.Tenant, req.heldAt, p.reg.now().UnixNano(), p.opts.ShareReserve)
		req.held = nil
	}
	if req != nil && req.prio != nil {
		req.prio.holds.endPriority(req.Tenant)
		req.prio = nil
	}
	r.release()
}

// priorityLimit is the most slots of an endpoint with cap slots that one
// tenant's priority requests (the classifier's calls for its requests)
// may hold: all but a quarter, at least one kept, so that one tenant's
// burst of classifications leaves another's a slot at once; 0 is no
// limit (no cap, or a single slot).
func priorityLimit(cap int64) int64 {
	if cap < 2 || cap >= 1<<62 {
		return 0
	}
	return cap - max(1, cap/4)
}

// priorityFull reports whether tenant's priority requests hold their
// limit of e's slots of cap. h.mu is held.
func (h *holds) priorityFull(tenant string, cap int64) bool {
	lim := priorityLimit(cap)
	return lim > 0 && h.prio[tenant] >= lim
}

// addPriority counts one of tenant's priority requests. h.mu is held.
func (h *holds) addPriority(tenant string) {
	if h.prio == nil {
		h.prio = map[string]int64{}
	}
	h.prio[tenant]++
}

// endPriority ends one of tenant's priority requests.
func (h *holds) endPriority(tenant string) {
	h.mu.Lock()
	if h.prio[tenant]--; h.prio[tenant] <= 0 {
		delete(h.prio, tenant)
	}
	h.mu.Unlock()
}

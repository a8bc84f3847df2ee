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
// Every operation on it costs a bounded amount however many tenants are
// in play: the weights are summed as tenants come and go, reserves lapse
// in order from a list, and what the others are owed is added up only
// until it is known to be too much (see owedOver).
type holds struct {
	mu sync.Mutex
	m  map[string]*tenantHold
	// kept counts the entries of m that hold nothing (kept for their
	// reserve), at most maxKept.
	kept int
	// weights is the sum of the weights of the tenants in m.
	weights float64
	// lapses lists the kept tenants from lapses[head] in the order they
	// were kept, which is the order their reserves lapse (but after a
	// reload that shortened share_reserve: then a tenant may stay in
	// play until an earlier reserve ahead of it lapses). An entry whose
	// tenant holds a slot again, was kept again later, or was dropped is
	// stale and skipped.
	lapses []lapse
	head   int
	// waiting and given are a dispatch's scratch (see shares), kept to be
	// reused.
	waiting map[string]float64
	given   map[string]int64
}

// maxKept bounds the reserves an endpoint keeps: tenants are keys or,
// keyless, client addresses. A tenant that ends its last request while
// maxKept others are kept keeps none.
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

// lapse is a kept tenant and the end of the reserve it was kept with.
type lapse struct {
	t     *tenantHold
	until int64
}

// inPlay reports whether t holds a slot or its reserve has not lapsed.
func (t *tenantHold) inPlay(now int64) bool { return t.n > 0 || t.until > now }

// current reports whether l is still the entry of a kept tenant. h.mu is
// held.
func (h *holds) current(l lapse) bool {
	return l.t.n <= 0 && l.t.until == l.until && h.m[l.t.tenant] == l.t
}

// add counts one of req's requests at now; with a reserve its tenant's
// peak is kept.
func (h *holds) add(req *Request, e *Endpoint, now int64, reserve time.Duration) {
	h.mu.Lock()
	if h.m == nil {
		h.m = map[string]*tenantHold{}
	}
	h.sweep(now)
	t := h.m[req.Tenant]
	if t != nil && t.n <= 0 {
		if t.inPlay(now) {
			h.kept-- // kept for its reserve: holds one now
		} else {
			h.drop(t) // lapsed, not yet swept: comes into play anew
			t = nil
		}
	}
	if t == nil {
		t = &tenantHold{tenant: req.Tenant}
		h.m[req.Tenant] = t
	} else {
		h.weights -= t.weight
	}
	t.n++
	if reserve > 0 {
		t.peak = max(t.peak, t.n)
	}
	t.weight = float64(max(1, req.Weight))
	h.weights += t.weight
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
	if reserve <= 0 || h.kept >= maxKept {
		delete(h.m, tenant)
		h.weights -= t.weight
		return
	}
	t.until = max(t.until, now+int64(reserve))
	h.kept++
	h.lapses = append(h.lapses, lapse{t, t.until})
	if len(h.lapses)-h.head > 2*maxKept+64 || h.head > 2*maxKept+64 {
		h.compact() // many stale entries, or a long front already read
	}
}

// drop removes t, a kept tenant, from m. h.mu is held.
func (h *holds) drop(t *tenantHold) {
	delete(h.m, t.tenant)
	h.kept--
	h.weights -= t.weight
}

// sweep drops the tenants whose reserve lapsed by now, from the head of
// the list, and the stale entries there. h.mu is held.
func (h *holds) sweep(now int64) {
	for h.head < len(h.lapses) {
		l := h.lapses[h.head]
		if h.current(l) {
			if l.until > now {
				break
			}
			h.drop(l.t)
		}
		h.lapses[h.head] = lapse{}
		h.head++
	}
	if h.head == len(h.lapses) {
		h.lapses, h.head = h.lapses[:0], 0
	}
}

// compact keeps only the list's current entries (at most maxKept), in
// order, at its start: a tenant that comes back and leaves often adds an
// entry each time, and the list rarely empties while tenants keep
// coming. h.mu is held.
func (h *holds) compact() {
	kept := h.lapses[:0]
	for _, l := range h.lapses[h.head:] {
		if h.current(l) {
			kept = append(kept, l)
		}
	}
	clear(h.lapses[len(kept):])
	h.lapses, h.head = kept, 0
}

// nextLapse is when the first reserve of a tenant holding nothing lapses
// (unix nanoseconds), 0 when none is pending.
func (h *holds) nextLapse(now int64) int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.sweep(now)
	if h.head < len(h.lapses) {
		return h.lapses[h.head].until
	}
	return 0
}

// shares is a view of the tenants' shares of an endpoint's cap slots,
// while its holds' mu is held: the tenants in play are those in h.m and
// those in h.waiting (waiters from the queue, or the request being
// admitted, not in h.m, or with a higher weight than there); h.given
// counts the slots a dispatch handed out. A tenant's share is cap × its
// weight ÷ sum, rounded up, at least 1.
type shares struct {
	h   *holds
	cap int64
	sum float64
}

// weight is tenant's weight, 0 when it is not in play.
func (s *shares) weight(tenant string) float64 {
	var w float64
	if t := s.h.m[tenant]; t != nil {
		w = t.weight
	}
	if x, ok := s.h.waiting[tenant]; ok {
		w = max(w, x)
	}
	return w
}

func (s *shares) limit(w float64) int64 {
	return max(1, int64(math.Ceil(float64(s.cap)*w/s.sum)))
}

// held is what tenant holds, counting what the dispatch gave it.
func (s *shares) held(tenant string) int64 {
	var n int64
	if t := s.h.m[tenant]; t != nil {
		n = t.n
	}
	return n + s.h.given[tenant]
}

// full reports whether tenant holds its share already.
func (s *shares) full(tenant string) bool {
	w := s.weight(tenant)
	return w > 0 && s.held(tenant) >= s.limit(w)
}

// owedOver reports whether the tenants in play other than tenant are owed
// more than bound of their reserved shares: each one's share, up to its
// peak, less what it holds. Only tenants in h.m have a peak. The sum
// stops once over bound: every kept tenant (holding nothing, peak at
// least 1) adds at least 1, and only those holding slots (at most cap)
// can add nothing, so it reads at most cap + bound + 1 of them however
// many are in play.
func (s *shares) owedOver(tenant string, bound int64) bool {
	var n int64
	for name, t := range s.h.m {
		if name == tenant || t.peak == 0 {
			continue
		}
		w := t.weight
		if x, ok := s.h.waiting[name]; ok {
			w = max(w, x)
		}
		if o := min(s.limit(w), t.peak) - t.n - s.h.given[name]; o > 0 {
			if n += o; n > bound {
				return true
			}
		}
	}
	return false
}

// spare reports whether a tenant over its share may take one of free
// slots: what is left covers what the others are owed.
func (s *shares) spare(tenant string, free int64) bool { return !s.owedOver(tenant, free-1) }

// give counts a slot handed to tenant during the dispatch.
func (s *shares) give(tenant string) {
	if s.h.given == nil {
		s.h.given = map[string]int64{}
	}
	s.h.given[tenant]++
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
	h.sweep(e.reg.now().UnixNano())
	clear(h.waiting)
	clear(h.given)
	s = shares{h: h, cap: cap, sum: h.weights}
	n := len(h.m)
	const scan = 256 // bounds the cost of a release under a flood
	for k := 0; k < min(e.queue.len(), scan); k++ {
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

// overShare reports whether req, a fair request, may not take a free
// slot of e (of cap) at once: its tenant holds its share already and
// what would be left does not cover what the other tenants in play are
// owed of their reserves. For a replica with no queue (the queue's own
// waiters are judged by dispatch).
func (e *Endpoint) overShare(req *Request, cap int64) bool {
	if cap <= 0 {
		return false
	}
	h := &e.holds
	h.mu.Lock()
	defer h.mu.Unlock()
	h.sweep(e.reg.now().UnixNano())
	mine := h.m[req.Tenant]
	if len(h.m) == 0 || len(h.m) == 1 && mine != nil {
		return false // no one else in play
	}
	clear(h.waiting)
	clear(h.given)
	s := shares{h: h, cap: cap, sum: h.weights}
	if mine == nil {
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
		req.held.holds.remove(req.Tenant, p.reg.now().UnixNano(), p.opts.ShareReserve)
		req.held = nil
	}
	r.release()
}

package pools

import (
	"context"
	"errors"
	"slices"
	"sort"
	"sync/atomic"
	"time"
)

// Errors from Acquire, compared with errors.Is.
var (
	// ErrNoReplica: no replica of the pool is available (or all were excluded).
	ErrNoReplica = errors.New("no healthy replica")
	// ErrSaturated: every available replica stayed at max_inflight for the
	// whole bounded wait.
	ErrSaturated = errors.New("every replica is at max_inflight")
)

// waiter is one Acquire waiting for a slot. It is queued on every full
// endpoint it could use; the first endpoint to free a slot claims it
// (state 0 → 1) and hands the slot over on ch, already counted in flight.
type waiter struct {
	ch    chan *Endpoint // buffered: a hand-off never blocks
	state atomic.Int32   // waiting, served or gone
	// max is the waiter's pool's max_inflight (a reload that raises it
	// raises it here too).
	max atomic.Int64
	// tenant and weight place the waiter among other tenants' (see
	// waitQueue); tenant "" is one tenant like any other.
	tenant   string
	weight   float64
	priority bool
	fair     bool
	// A dispatch that serves the waiter counts the slot for its tenant
	// at once, at heldAt (reqWeight: the request's weight; reserve: its
	// pool's share_reserve); the request takes the count over (take).
	reqWeight int
	reserve   time.Duration
	heldAt    int64
}

// take gives req the slot on e handed to w, counted for its tenant.
func (w *waiter) take(req *Request, e *Endpoint) {
	if w.fair {
		req.held, req.heldAt = e, w.heldAt
	}
	if w.priority {
		req.prio = e
	}
}

const (
	waiting int32 = iota
	served
	gone
)

// waitQueue holds an endpoint's waiters in fair order, by start-time fair
// queueing across tenants (API keys): each waiter gets a virtual start
// tag, max(the queue's virtual time, its tenant's last finish tag), and a
// finish tag one 1/weight later, and the queue is ordered by start tag
// (arrival order among equal tags). So every waiting tenant's first
// request is near the head whatever the size of another's burst, and
// within a tenant the order is strictly first come, first served.
// Dispatch weighs the waiters near the head by their tenants' slot time
// (share.go); the order breaks ties, and alone decides without tenants
// to be fair to. Priority waiters are a tier of their own, served before
// the rest, with tags of their own. Entries of waiters served elsewhere
// or gone are dropped lazily.
type waitQueue struct {
	items []queued
	head  int
	// maxCap is the largest cap of any waiter queued since the queue was
	// last empty (an upper bound, never lowered while it holds waiters).
	maxCap int64
	// tiers are the priority waiters' (0) and the others' (1) tags.
	tiers [2]tagClock
}

// tagClock is one tier's start-time fair queueing: vtime is the start tag
// of the last waiter served; finish is each tenant's last finish tag. Both
// restart when the queue empties.
type tagClock struct {
	vtime  float64
	finish map[string]float64
}

// queued is one entry of a waitQueue, ordered by tier, then start tag.
type queued struct {
	w     *waiter
	tier  int
	start float64
}

// before reports whether a is served before b.
func (a queued) before(b queued) bool {
	return a.tier < b.tier || (a.tier == b.tier && a.start < b.start)
}

func (q *waitQueue) len() int { return len(q.items) - q.head }

func (q *waitQueue) push(w *waiter) {
	// Priority waiters (the classifier's calls) form a tier of their own,
	// served before every other waiter; within each tier tenants take
	// turns by weight (a classifier call carries the tenant whose request
	// it classifies, so one tenant's burst of calls does not delay
	// another's classification by all of it).
	e := queued{w: w, tier: 1}
	if w.priority {
		e.tier = 0
	}
	c := &q.tiers[e.tier]
	if c.finish == nil {
		c.finish = map[string]float64{}
	}
	e.start = max(c.vtime, c.finish[w.tenant])
	c.finish[w.tenant] = e.start + 1/w.weight
	// After every entry served at or before this one: FIFO among equals,
	// and a tenant's own waiters keep their order.
	i := q.head + sort.Search(q.len(), func(k int) bool { return e.before(q.items[q.head+k]) })
	q.items = slices.Insert(q.items, i, e)
	if m := w.max.Load(); m <= 0 {
		q.maxCap = 1 << 62 // unlimited
	} else {
		q.maxCap = max(q.maxCap, m)
	}
}

func (q *waitQueue) peek() *waiter { return q.items[q.head].w }

// at returns the waiter k places behind the head.
func (q *waitQueue) at(k int) *waiter { return q.items[q.head+k].w }

func (q *waitQueue) pop() {
	q.items[q.head] = queued{}
	q.head++
	if q.head == len(q.items) {
		q.reset()
	} else if q.head > 64 && q.head*2 > len(q.items) {
		n := copy(q.items, q.items[q.head:])
		clear(q.items[n:])
		q.items, q.head = q.items[:n], 0
	}
}

// reset empties the queue's bookkeeping once it holds no entry.
func (q *waitQueue) reset() {
	q.items, q.head, q.maxCap = q.items[:0], 0, 0
	for i := range q.tiers {
		q.tiers[i].vtime = 0
		clear(q.tiers[i].finish)
	}
}

// served notes that the entry k places behind the head is being served.
func (q *waitQueue) served(k int) {
	e := q.items[q.head+k]
	c := &q.tiers[e.tier]
	c.vtime = max(c.vtime, e.start)
}

// admit counts one more request on e if that keeps it within max (0 = no
// cap).
func (e *Endpoint) admit(max int64) bool {
	for {
		n := e.inflight.Load()
		if max > 0 && n >= max {
			return false
		}
		if e.inflight.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// admitFor admits req on e within max as admit does; a fair or priority
// request only if its tenant is still within what it may hold, checked,
// admitted and counted in one step under e.holds.mu: requests of one
// tenant arriving at once cannot all pass the check before any counts.
func (e *Endpoint) admitFor(req *Request, max int64, reserve time.Duration) bool {
	if !req.Fair && !req.Priority {
		return e.admit(max)
	}
	h := &e.holds
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case req.Fair && reserve > 0 && e.overShare(req, max),
		req.Priority && h.priorityFull(req.Tenant, max),
		!e.admit(max):
		return false
	}
	if req.Fair {
		now := e.reg.now().UnixNano()
		h.add(req.Tenant, req.Weight, now, reserve)
		req.held, req.heldAt = e, now
	}
	if req.Priority {
		h.addPriority(req.Tenant)
		req.prio = e
	}
	return true
}

// dropDead pops waiters at the head that no longer wait. e.mu is held.
func (e *Endpoint) dropDead() {
	for e.queue.len() > 0 && e.queue.peek().state.Load() != waiting {
		e.queue.pop()
		e.queued.Add(-1)
	}
}

// dispatch hands free slots to queued waiters while e is available: to
// the tenant furthest below its share (share.go), in the queue's fair
// order among equals and within a tenant. A waiter whose own pool's
// max_inflight is lower than the load does not hold back one with a
// higher cap behind it (one server in two pools); when no waiter's cap
// has room a release costs O(1) apart from dropping waiters that left,
// and otherwise at most scanWaiters entries are weighed. e.mu is held.
func (e *Endpoint) dispatch() {
	e.dropDead()
	if e.queue.len() == 0 || !e.Available(e.reg.now()) {
		return
	}
	// A waiter whose tenant is under its share (share.go), or over it
	// with the slots left covering the others' reserves, may take a slot;
	// of those, the tenant furthest below its share in slot time does.
	e.holds.mu.Lock()
	defer e.holds.mu.Unlock()
	var over *shares
	if s, ok := e.shareLimit(e.queue.maxCap); ok {
		over = &s
	}
	e.dispatchPass(over)
}

// dispatchPass serves waiters while one fits, choosing each as next
// does. e.mu is held.
func (e *Endpoint) dispatchPass(over *shares) {
	for {
		k := e.next(over)
		if k < 0 || !e.admit(e.queue.at(k).max.Load()) {
			return
		}
		w := e.queue.at(k)
		if !w.state.CompareAndSwap(waiting, served) {
			e.inflight.Add(-1) // it left in between: offer the slot on
			e.removeAt(k)
			continue
		}
		e.queue.served(k)
		e.removeAt(k)
		// The slot counts for its tenant from now: its request may not
		// run again for a while (busy CPUs), and until it is counted its
		// tenant would look under its share to the next dispatch.
		if w.fair {
			w.heldAt = e.reg.now().UnixNano()
			e.holds.add(w.tenant, w.reqWeight, w.heldAt, w.reserve)
		}
		if w.priority {
			e.holds.addPriority(w.tenant)
		}
		w.ch <- e
	}
}

// next is the queue entry (relative to its head) to serve next, -1 when
// no waiter fits. A waiter fits when its cap (its pool's max_inflight)
// has room, and, when its tenant holds its share in over, the slots left
// would cover the other tenants' reserves. Of the waiters that fit, the
// first of the highest tier (the classifier's calls) goes first; with
// tenants to be fair to (over), among the first scanWaiters the one whose
// tenant is furthest below its share, in slot time (the queue's order
// among equals). e.mu is held.
func (e *Endpoint) next(over *shares) (best int) {
	best = -1
	inflight := e.inflight.Load()
	if m := e.queue.maxCap; m > 0 && m < 1<<62 && inflight >= m {
		return -1 // no waiter's cap has room
	}
	var bestBehind float64
	bestTier := 0
	for k := 0; k < e.queue.len(); {
		q := e.queue.items[e.queue.head+k]
		w := q.w
		if w.state.Load() != waiting {
			e.removeAt(k)
			continue
		}
		if best >= 0 && (q.tier > bestTier || k >= scanWaiters) {
			break
		}
		k++
		wmax := w.max.Load()
		switch {
		case wmax > 0 && inflight >= wmax:
			continue
		case w.priority && e.holds.priorityFull(w.tenant, wmax):
			continue
		case over != nil && w.fair && over.full(w.tenant) && !over.spare(w.tenant, wmax-inflight):
			continue
		case over == nil:
			return k - 1 // no one to weigh against: first come
		}
		if b := over.behind(w.tenant, w.weight); best < 0 || b < bestBehind {
			best, bestBehind, bestTier = k-1, b, q.tier
		}
	}
	return best
}

// removeAt removes the queue entry k places behind the head. e.mu is held.
func (e *Endpoint) removeAt(k int) {
	q := &e.queue
	if k == 0 {
		q.pop()
	} else {
		i := q.head + k
		copy(q.items[i:], q.items[i+1:])
		q.items[len(q.items)-1] = queued{}
		q.items = q.items[:len(q.items)-1]
	}
	e.queued.Add(-1)
	if q.len() == 0 {
		q.reset()
	}
}

// unqueue removes w, which gave up, from e's queue, and lets the waiters
// behind it have any slot it was holding back. Giving up is rare next to
// releases, so this scan keeps the queue exact at a cost paid only then.
func (e *Endpoint) unqueue(w *waiter) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for k := 0; k < e.queue.len(); k++ {
		if e.queue.at(k) == w {
			e.removeAt(k)
			break
		}
	}
	e.dispatch()
}

// recap dispatches again after w's cap changed (a reload), keeping the
// queue's maxCap an upper bound of its waiters' caps.
func (e *Endpoint) recap(w *waiter) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if m := w.max.Load(); m <= 0 {
		e.queue.maxCap = 1 << 62
	} else {
		e.queue.maxCap = max(e.queue.maxCap, m)
	}
	e.dispatch()
}

// enqueue queues w on e and dispatches: if e has room, w (when it is the
// oldest waiter that fits) is served at once, on its channel like any
// hand-off.
//
// queued is raised before dispatch reads inflight, and release lowers
// inflight before reading queued: so either release sees the waiter and
// dispatches, or this dispatch sees the freed slot. No wake-up is lost.
func (e *Endpoint) enqueue(w *waiter) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.queued.Add(1)
	e.queue.push(w)
	e.dispatch()
}

// release ends one request on e. When requests wait, the slot passes
// straight to the oldest waiter that can use it (it stays counted in
// flight), so arrivals cannot overtake the queue.
func (e *Endpoint) release() {
	n := e.inflight.Add(-1)
	if e.queued.Load() > 0 {
		e.mu.Lock()
		e.dispatch()
		e.mu.Unlock()
		n = e.inflight.Load()
	}
	if n == 0 && (e.hasOld.Load() || e.retired.Load()) {
		e.closeOld()
	}
}

// Acquire chooses a replica for req and counts the request in flight on it;
// the caller must Release it exactly once. exclude (may be nil) skips
// replicas already tried by this request. When every available replica is
// at max_inflight, Acquire queues (first come, first served) for up to the
// pool's queue timeout, then returns ErrSaturated; with no available
// replica it returns ErrNoReplica at once. It returns ctx.Err() if ctx
// ends first.
//
// A request with Fair counts against its tenant's share (share.go) until
// ReleaseFor.
func (p *Pool) Acquire(ctx context.Context, req *Request, exclude func(*Replica) bool) (*Replica, error) {
	changed := p.reg.changes()
	r, full := p.tryAcquire(req, exclude)
	if r != nil {
		return r, nil
	}
	if len(full) == 0 {
		return nil, ErrNoReplica
	}
	if p.opts.QueueTimeout <= 0 {
		return nil, ErrSaturated
	}
	timer := time.NewTimer(p.opts.QueueTimeout)
	defer timer.Stop()
	w := p.newWaiter(req)
	for _, f := range full {
		f.enqueue(w)
		if w.state.Load() != waiting {
			break // served
		}
	}
	for {
		// A replica whose ejection ends frees capacity without a release,
		// and so does a tenant's reserve that lapses (share.go).
		var readmit, lapse <-chan time.Time
		var rt *time.Timer
		if d := p.nextReadmission(); d > 0 {
			rt = time.NewTimer(d)
			readmit = rt.C
		}
		if d := nextLapse(p, full); d > 0 {
			lapse = p.reg.opts.After(d)
		}
		var err error
		recheck := false
		select {
		case e := <-w.ch:
			if rt != nil {
				rt.Stop()
			}
			w.take(req, e)
			return replicaOf(full, e), nil
		case <-timer.C:
			err = ErrSaturated
		case <-ctx.Done():
			err = ctx.Err()
		case <-readmit:
			recheck = true
		case <-lapse:
			for _, f := range full {
				f.kick()
			}
			recheck = true
		case <-changed:
			recheck = true
		}
		if rt != nil {
			rt.Stop()
		}
		if recheck {
			// Something changed (a replica back, a reload): look again
			// without giving up the place in the queues. After a reload
			// the waiter follows its pool's new view: replicas added or
			// replaced there can take it, and a new max_inflight applies
			// to it at once.
			changed = p.reg.changes()
			p = p.follow(req, w, full)
			r, more := p.tryAcquire(req, exclude)
			if r == nil {
				full = enqueueMore(w, full, more)
				continue
			}
			if w.state.CompareAndSwap(waiting, gone) {
				p.unqueueAll(w, full)
				return r, nil
			}
			// Served meanwhile as well: keep the hand-off, free r.
			p.ReleaseFor(r, req)
			e := <-w.ch
			w.take(req, e)
			return replicaOf(full, e), nil
		}
		if w.state.CompareAndSwap(waiting, gone) {
			p.unqueueAll(w, full)
			return nil, err
		}
		// Served while giving up: the slot is ours.
		e := <-w.ch
		w.take(req, e)
		if ctx.Err() != nil {
			p.ReleaseFor(replicaOf(full, e), req)
			return nil, ctx.Err()
		}
		return replicaOf(full, e), nil
	}
}

// newWaiter is req waiting for one of p's slots.
func (p *Pool) newWaiter(req *Request) *waiter {
	w := &waiter{ch: make(chan *Endpoint, 1), reqWeight: req.Weight, reserve: p.opts.ShareReserve,
		tenant: req.Tenant, weight: float64(max(1, req.Weight)), priority: req.Priority, fair: req.Fair}
	w.max.Store(p.capFor(req))
	return w
}

// follow is the pool's view in force now: p itself, or after a reload the
// pool that replaced it, whose max_inflight then applies to w at once (w
// queues on full).
func (p *Pool) follow(req *Request, w *waiter, full []*Replica) *Pool {
	np := p.reg.current(p)
	if np == p {
		return p
	}
	if m := np.capFor(req); m != w.max.Load() {
		w.max.Store(m)
		for _, f := range full {
			f.recap(w)
		}
	}
	return np
}

// enqueueMore queues w on the replicas of more it does not queue on yet
// and returns full with them added.
func enqueueMore(w *waiter, full, more []*Replica) []*Replica {
	for _, f := range more {
		if !slices.ContainsFunc(full, func(x *Replica) bool { return x.Endpoint == f.Endpoint }) {
			full = append(full, f)
			f.enqueue(w)
		}
	}
	return full
}

// nextLapse is how long until the first reserve on one of full lapses,
// 0 when none is pending.
func nextLapse(p *Pool, full []*Replica) time.Duration {
	if p.opts.ShareReserve <= 0 {
		return 0
	}
	now := p.reg.now().UnixNano()
	var next int64
	for _, r := range full {
		if u := r.holds.nextLapse(now); u > 0 && (next == 0 || u < next) {
			next = u
		}
	}
	if next == 0 {
		return 0
	}
	return time.Duration(next - now)
}

// kick dispatches e's queue: a lapsed reserve may free its slots.
func (e *Endpoint) kick() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.dispatch()
}

func (p *Pool) unqueueAll(w *waiter, full []*Replica) {
	for _, r := range full {
		r.unqueue(w)
	}
}

func replicaOf(rs []*Replica, e *Endpoint) *Replica {
	for _, r := range rs {
		if r.Endpoint == e {
			return r
		}
	}
	panic("pools: slot handed over by an endpoint the waiter did not queue on")
}

// tryAcquire runs filter → pick → admit once. full lists the replicas that
// are available but at max_inflight (or have a queue of their own).
func (p *Pool) tryAcquire(req *Request, exclude func(*Replica) bool) (r *Replica, full []*Replica) {
	cands, full := p.candidates(req, exclude)
	maxIn := p.capFor(req)
	for len(cands) > 0 {
		pick := p.sel.Select(req, cands)
		if pick.queued.Load() == 0 && pick.admitFor(req, maxIn, p.opts.ShareReserve) {
			return pick, nil
		}
		// Lost a race for the last slot: drop it and choose again.
		full = append(full, pick)
		for i, c := range cands {
			if c == pick {
				cands = append(cands[:i], cands[i+1:]...)
				break
			}
		}
	}
	return nil, full
}

// candidates is the filter stage: replicas available now, not excluded,
// under req's cap (max_inflight, less the reserved slots for all but
// priority requests) and with no queue. full lists those left out for
// being at that cap or having waiters. Whether req's tenant may take a
// slot of the one picked (its share, share.go) is checked by admitFor,
// once, as it takes it.
func (p *Pool) candidates(req *Request, exclude func(*Replica) bool) (cands, full []*Replica) {
	now := p.reg.now()
	maxIn := p.capFor(req)
	cands = make([]*Replica, 0, len(p.replicas))
	for _, r := range p.replicas {
		if !r.Available(now) || (exclude != nil && exclude(r)) {
			continue
		}
		if (maxIn > 0 && r.Inflight() >= maxIn) || r.queued.Load() > 0 {
			full = append(full, r)
			continue
		}
		cands = append(cands, r)
	}
	return cands, full
}

// Release ends a request counted by Acquire; a waiting request may take
// its slot.
func (p *Pool) Release(r *Replica) { r.release() }

// nextReadmission is how long until the first ejected (but healthy)
// replica is back, or 0 when none is ejected.
func (p *Pool) nextReadmission() time.Duration {
	now := p.reg.now().UnixNano()
	var next int64
	for _, r := range p.replicas {
		if u := r.ejectedUntil.Load(); u > now && r.Healthy() && (next == 0 || u < next) {
			next = u
		}
	}
	if next == 0 {
		return 0
	}
	return time.Duration(next - now)
}

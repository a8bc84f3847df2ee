package pools

import (
	"context"
	"errors"
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
	max   int64          // the waiter's pool's max_inflight
}

const (
	waiting int32 = iota
	served
	gone
)

// waitQueue is a FIFO of waiters; entries of waiters served elsewhere or
// gone are dropped lazily when they reach the head, so each waiter costs
// O(1) per endpoint it was queued on.
type waitQueue struct {
	items []*waiter
	head  int
}

func (q *waitQueue) len() int { return len(q.items) - q.head }

func (q *waitQueue) push(w *waiter) { q.items = append(q.items, w) }

func (q *waitQueue) peek() *waiter { return q.items[q.head] }

func (q *waitQueue) pop() {
	q.items[q.head] = nil
	q.head++
	if q.head == len(q.items) {
		q.items, q.head = q.items[:0], 0
	} else if q.head > 64 && q.head*2 > len(q.items) {
		n := copy(q.items, q.items[q.head:])
		clear(q.items[n:])
		q.items, q.head = q.items[:n], 0
	}
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

// dropDead pops waiters at the head that no longer wait. e.mu is held.
func (e *Endpoint) dropDead() {
	for e.queue.len() > 0 && e.queue.peek().state.Load() != waiting {
		e.queue.pop()
		e.queued.Add(-1)
	}
}

// unqueue removes w, which gave up, from e's queue. Giving up is rare
// next to releases, so this scan keeps the queue exact (an arrival is not
// held back by waiters that left) at a cost paid only then.
func (e *Endpoint) unqueue(w *waiter) {
	e.mu.Lock()
	defer e.mu.Unlock()
	q := &e.queue
	for i := q.head; i < len(q.items); i++ {
		if q.items[i] == w {
			copy(q.items[i:], q.items[i+1:])
			q.items[len(q.items)-1] = nil
			q.items = q.items[:len(q.items)-1]
			e.queued.Add(-1)
			break
		}
	}
	if q.len() == 0 {
		q.items, q.head = q.items[:0], 0
	}
}

// enqueue admits w's request on e at once when the queue is empty and there
// is room (claiming w), else queues w. It reports whether the request was
// admitted; false with w no longer waiting means another endpoint served
// w meanwhile.
//
// queued is raised before the room check, and release lowers inflight
// before reading queued: so either release sees the waiter and hands its
// slot over, or this check sees the freed slot. No wake-up is lost.
func (e *Endpoint) enqueue(w *waiter) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.queued.Add(1)
	e.dropDead()
	if e.queue.len() == 0 && e.Available(e.reg.now()) && (w.max <= 0 || e.inflight.Load() < w.max) {
		e.queued.Add(-1)
		if !w.state.CompareAndSwap(waiting, served) {
			return false
		}
		if e.admit(w.max) {
			return true
		}
		// Lost the slot to a concurrent hand-off; wait after all.
		w.state.Store(waiting)
		e.queued.Add(1)
	}
	e.queue.push(w)
	return false
}

// release ends one request on e. When requests wait, the slot passes
// straight to the oldest waiter that can use it (it stays counted in
// flight), so arrivals cannot overtake the queue and a release does O(1)
// work apart from dropping waiters that left.
func (e *Endpoint) release() {
	n := e.inflight.Add(-1)
	if e.queued.Load() == 0 {
		if n == 0 && e.retired.Load() {
			e.closeOld()
		} else if n == 0 {
			e.mu.Lock()
			old := len(e.old)
			e.mu.Unlock()
			if old > 0 {
				e.closeOld()
			}
		}
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for {
		e.dropDead()
		if e.queue.len() == 0 || !e.Available(e.reg.now()) {
			return
		}
		w := e.queue.peek()
		if !e.admit(w.max) {
			return // taken meanwhile, or the head's cap is lower than the load
		}
		if !w.state.CompareAndSwap(waiting, served) {
			e.inflight.Add(-1) // it left in between: offer the slot to the next
			continue
		}
		e.queue.pop()
		e.queued.Add(-1)
		w.ch <- e
		return
	}
}

// Acquire chooses a replica for req and counts the request in flight on it;
// the caller must Release it exactly once. exclude (may be nil) skips
// replicas already tried by this request. When every available replica is
// at max_inflight, Acquire queues (first come, first served) for up to the
// pool's queue timeout, then returns ErrSaturated; with no available
// replica it returns ErrNoReplica at once. It returns ctx.Err() if ctx
// ends first.
func (p *Pool) Acquire(ctx context.Context, req *Request, exclude func(*Replica) bool) (*Replica, error) {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
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
		if timer == nil {
			timer = time.NewTimer(p.opts.QueueTimeout)
		}
		w := &waiter{ch: make(chan *Endpoint, 1), max: int64(p.opts.MaxInflight)}
		for _, f := range full {
			if f.enqueue(w) {
				return f, nil
			}
			if w.state.Load() != waiting {
				break
			}
		}
		// A replica whose ejection ends frees capacity without a release.
		var readmit <-chan time.Time
		var rt *time.Timer
		if d := p.nextReadmission(); d > 0 {
			rt = time.NewTimer(d)
			readmit = rt.C
		}
		r, err, retry := p.wait(ctx, w, full, timer.C, readmit, changed)
		if rt != nil {
			rt.Stop()
		}
		if !retry {
			return r, err
		}
	}
}

// wait blocks until w is served, the queue timeout fires, ctx ends, or
// something changed that may have made room elsewhere (retry).
func (p *Pool) wait(ctx context.Context, w *waiter, full []*Replica, timeout, readmit <-chan time.Time, changed <-chan struct{}) (r *Replica, err error, retry bool) {
	select {
	case e := <-w.ch:
		return replicaOf(full, e), nil, false
	case <-timeout:
		err = ErrSaturated
	case <-ctx.Done():
		err = ctx.Err()
	case <-readmit:
		retry = true
	case <-changed:
		retry = true
	}
	if w.state.CompareAndSwap(waiting, gone) {
		for _, r := range full {
			r.unqueue(w)
		}
		return nil, err, retry
	}
	// Served while giving up: the slot is ours.
	e := <-w.ch
	if ctx.Err() != nil {
		e.release()
		return nil, ctx.Err(), false
	}
	return replicaOf(full, e), nil, false
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
	cands, full := p.candidates(exclude)
	maxIn := int64(p.opts.MaxInflight)
	for len(cands) > 0 {
		pick := p.sel.Select(req, cands)
		if pick.queued.Load() == 0 && pick.admit(maxIn) {
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
// under max_inflight and with no queue. full lists those left out only for
// being at max_inflight or having waiters.
func (p *Pool) candidates(exclude func(*Replica) bool) (cands, full []*Replica) {
	now := p.reg.now()
	maxIn := int64(p.opts.MaxInflight)
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

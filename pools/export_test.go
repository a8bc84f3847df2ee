package pools

// Waiters is how many requests wait in the queues of the pool's replicas,
// counting one waiter once per replica it is queued on (tests).
func (p *Pool) Waiters() int64 {
	var n int64
	for _, r := range p.replicas {
		n += r.queued.Load()
	}
	return n
}

// SetLoad stores l as r's last scrape (benchmarks).
func (r *Replica) SetLoad(l *Load) { r.load.Store(l) }

// WaitLoops waits until e's health and scrape loops have ended (tests:
// after their context ends or the endpoint is removed).
func (e *Endpoint) WaitLoops() { e.loops.Wait() }

// Tenants is how many tenants the pool's replicas count, holding slots or
// kept for their reserve (tests).
func (p *Pool) Tenants() int {
	n := 0
	for _, r := range p.replicas {
		r.holds.mu.Lock()
		n += len(r.holds.m)
		r.holds.mu.Unlock()
	}
	return n
}

// OverShare reports whether req's tenant, asking for one of r's slots,
// is held back by the others' reserves (share.go; tests and benchmarks).
func (p *Pool) OverShare(r *Replica, req *Request) bool {
	r.holds.mu.Lock()
	defer r.holds.mu.Unlock()
	return r.overShare(req, p.capFor(req))
}

// LapseList is the most room the pool's replicas' reserve lists take
// (entries, tests).
func (p *Pool) LapseList() int {
	n := 0
	for _, r := range p.replicas {
		r.holds.mu.Lock()
		n = max(n, cap(r.holds.lapses))
		r.holds.mu.Unlock()
	}
	return n
}

// QueueAsleep queues a fair request of tenant on r as Acquire would,
// with no goroutine to wake when a slot is handed to it: served reports
// whether one was (tests: a waiter served but not yet running, as on a
// machine whose CPUs are busy).
func (p *Pool) QueueAsleep(r *Replica, tenant string) (served func() bool) {
	req := &Request{Tenant: tenant, Fair: true}
	w := p.newWaiter(req)
	r.enqueue(w)
	return func() bool { return len(w.ch) == 1 }
}

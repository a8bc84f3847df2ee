package pools

// Waiters is how many Acquire calls are waiting for a slot (tests).
func (p *Pool) Waiters() int64 { return p.waiters.Load() }

// SetLoad stores l as r's last scrape (benchmarks).
func (r *Replica) SetLoad(l *Load) { r.load.Store(l) }

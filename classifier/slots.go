package classifier

import (
	"context"
	"sync"
)

// slots caps the classifier's concurrent calls (Options.Concurrency) and
// shares them among tenants: no tenant holds more than perTenant of them
// (the rest are kept for the others), and a freed slot goes to the
// waiting tenant that holds the fewest for its weight, each tenant's own
// calls first come, first served. So one tenant's burst of calls, however
// large, leaves another's classification a slot at once.
type slots struct {
	mu        sync.Mutex
	cap       int
	perTenant int
	total     int
	held      map[string]int
	waiters   []*slotWaiter
}

type slotWaiter struct {
	tenant string
	weight int
	ch     chan struct{} // closed when the slot is handed over
	served bool
}

// scanSlotWaiters bounds the waiters a release weighs (the cost of a
// release under a flood of one tenant's calls): a tenant's first waiter
// further back waits for a later release.
const scanSlotWaiters = 256

// newSlots is n slots; a tenant may hold all but a quarter of them (at
// least one kept for others when n is at least 2).
func newSlots(n int) *slots {
	per := n
	if n >= 2 {
		per = n - max(1, n/4)
	}
	return &slots{cap: n, perTenant: per, held: map[string]int{}}
}

// acquire takes a slot for tenant, waiting for one until ctx ends.
func (s *slots) acquire(ctx context.Context, tenant string, weight int) error {
	s.mu.Lock()
	if s.total < s.cap && s.held[tenant] < s.perTenant && !s.waitsBefore(tenant) {
		s.take(tenant)
		s.mu.Unlock()
		return nil
	}
	w := &slotWaiter{tenant: tenant, weight: max(1, weight), ch: make(chan struct{})}
	s.waiters = append(s.waiters, w)
	s.mu.Unlock()
	select {
	case <-w.ch:
		return nil
	case <-ctx.Done():
	}
	s.mu.Lock()
	if w.served {
		s.mu.Unlock()
		s.release(tenant) // handed over as ctx ended: pass it on
	} else {
		for i, x := range s.waiters {
			if x == w {
				s.waiters = append(s.waiters[:i], s.waiters[i+1:]...)
				break
			}
		}
		s.mu.Unlock()
	}
	return ctx.Err()
}

// waitsBefore reports whether one of tenant's own calls is waiting (a
// new one goes behind it). s.mu is held.
func (s *slots) waitsBefore(tenant string) bool {
	for _, w := range s.waiters {
		if w.tenant == tenant {
			return true
		}
	}
	return false
}

// take counts a slot for tenant. s.mu is held.
func (s *slots) take(tenant string) {
	s.total++
	s.held[tenant]++
}

// release gives back one of tenant's slots, handing it to a waiter.
func (s *slots) release(tenant string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.total--
	if s.held[tenant]--; s.held[tenant] <= 0 {
		delete(s.held, tenant)
	}
	for s.total < s.cap {
		i := s.next()
		if i < 0 {
			return
		}
		w := s.waiters[i]
		s.waiters = append(s.waiters[:i], s.waiters[i+1:]...)
		s.take(w.tenant)
		w.served = true
		close(w.ch)
	}
}

// next is the index of the waiter to serve: the first waiter of the
// tenant holding the fewest slots for its weight, among tenants under
// perTenant; -1 when none can be. s.mu is held.
func (s *slots) next() int {
	best := -1
	var bestLoad float64
	for i, w := range s.waiters[:min(len(s.waiters), scanSlotWaiters)] {
		n := s.held[w.tenant]
		if n >= s.perTenant {
			continue
		}
		if load := float64(n) / float64(w.weight); best < 0 || load < bestLoad {
			best, bestLoad = i, load
		}
	}
	return best
}

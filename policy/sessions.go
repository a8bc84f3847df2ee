package policy

import (
	"slices"
	"sync"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
)

// Sessions keeps the routing decision of each session for a TTL, so an
// agent's multi-step task stays on one model: its first decision, moved up
// by a later request that decides a stronger route (Policy.Decide) or that
// outgrew its pool's context (Policy.Escalate), never down. Safe for concurrent use; it
// outlives config reloads (a reused decision whose route is gone is ignored).
type Sessions struct {
	ttl   time.Duration
	now   func() time.Time
	mu    sync.Mutex // guards cache's Get+expiry check
	cache *lru.Cache[string, sessionEntry]
}

type sessionEntry struct {
	d       Decision
	expires time.Time
}

// NewSessions returns a store of at most size sessions kept for ttl. now is
// the clock (nil means time.Now).
func NewSessions(size int, ttl time.Duration, now func() time.Time) *Sessions {
	if now == nil {
		now = time.Now
	}
	c, err := lru.New[string, sessionEntry](max(size, 1))
	if err != nil {
		panic(err) // only for size <= 0, excluded above
	}
	return &Sessions{ttl: ttl, now: now, cache: c}
}

// Get returns the live decision kept for id.
func (s *Sessions) Get(id string) (Decision, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.cache.Get(id)
	if !ok {
		return Decision{}, false
	}
	if !s.now().Before(e.expires) {
		s.cache.Remove(id)
		return Decision{}, false
	}
	d := e.d
	d.Pools = slices.Clone(d.Pools) // callers own what they get
	return d, true
}

// Replace keeps d for id whatever was kept (a session escalated to a
// larger pool).
func (s *Sessions) Replace(id string, d Decision) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cache.Add(id, sessionEntry{d: d, expires: s.now().Add(s.ttl)})
}

// raise keeps d for id unless a live decision is kept that weaker(kept)
// does not call weaker: the store moves a session up, never down, however
// its turns interleave.
func (s *Sessions) raise(id string, d Decision, weaker func(kept Decision) bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.cache.Peek(id); ok && s.now().Before(e.expires) && !weaker(e.d) {
		return
	}
	s.cache.Add(id, sessionEntry{d: d, expires: s.now().Add(s.ttl)})
}

// Delete forgets the decision kept for id.
func (s *Sessions) Delete(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cache.Remove(id)
}

// Len is the number of sessions kept (live or not yet evicted).
func (s *Sessions) Len() int { return s.cache.Len() }

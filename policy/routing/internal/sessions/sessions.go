// Package sessions is the policy's store of session decisions: an LRU of
// at most a fixed number of sessions, each kept for a TTL, safe for
// concurrent use, that moves a session's decision up and never down. The
// policy decides what "up" means; the store only keeps. It imports no
// Switchyard package.
package sessions

import (
	"sync"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
)

// Store keeps one decision D per session id for a TTL.
type Store[D any] struct {
	ttl   time.Duration
	now   func() time.Time
	clone func(D) D
	mu    sync.Mutex // guards cache's Get+expiry check
	cache *lru.Cache[string, entry[D]]
}

type entry[D any] struct {
	d       D
	expires time.Time
}

// New returns a store of at most size sessions kept for ttl. now is the
// clock (nil means time.Now); clone copies a decision for a caller to own.
func New[D any](size int, ttl time.Duration, now func() time.Time, clone func(D) D) *Store[D] {
	if now == nil {
		now = time.Now
	}
	c, err := lru.New[string, entry[D]](max(size, 1))
	if err != nil {
		panic(err) // only for size <= 0, excluded above
	}
	return &Store[D]{ttl: ttl, now: now, clone: clone, cache: c}
}

// Get returns the live decision kept for id.
func (s *Store[D]) Get(id string) (D, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var zero D
	e, ok := s.cache.Get(id)
	if !ok {
		return zero, false
	}
	if !s.now().Before(e.expires) {
		s.cache.Remove(id)
		return zero, false
	}
	return s.clone(e.d), true
}

// Replace keeps d for id whatever was kept (a session escalated to a
// larger pool).
func (s *Store[D]) Replace(id string, d D) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cache.Add(id, entry[D]{d: d, expires: s.now().Add(s.ttl)})
}

// Raise keeps d for id unless a live decision is kept that weaker(kept)
// does not call weaker: the store moves a session up, never down, however
// its turns interleave.
func (s *Store[D]) Raise(id string, d D, weaker func(kept D) bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.cache.Peek(id); ok && s.now().Before(e.expires) && !weaker(e.d) {
		return
	}
	s.cache.Add(id, entry[D]{d: d, expires: s.now().Add(s.ttl)})
}

// Delete forgets the decision kept for id.
func (s *Store[D]) Delete(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cache.Remove(id)
}

// Len is the number of sessions kept (live or not yet evicted).
func (s *Store[D]) Len() int { return s.cache.Len() }

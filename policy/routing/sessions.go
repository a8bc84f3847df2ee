package routing

import (
	"slices"
	"time"

	"github.com/switchyard/switchyard/policy/routing/internal/sessions"
)

// Sessions keeps the routing decision of each session for a TTL, so an
// agent's multi-step task stays on one model: its first decision, moved up
// by a later request that decides a stronger route (Policy.Decide) or that
// outgrew its pool's context (Policy.Escalate), never down. Safe for
// concurrent use; it outlives config reloads (a reused decision whose route
// is gone is ignored).
type Sessions = sessions.Store[Decision]

// NewSessions returns a store of at most size sessions kept for ttl. now is
// the clock (nil means time.Now).
func NewSessions(size int, ttl time.Duration, now func() time.Time) *Sessions {
	return sessions.New(size, ttl, now, func(d Decision) Decision {
		d.Pools = slices.Clone(d.Pools) // callers own what they get
		return d
	})
}

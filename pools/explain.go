package pools

import (
	"slices"
	"strconv"
)

// ReplicaScore is one replica's part in a pick, by the endpoint picker's
// stages: the filter (Filtered says why it is not a candidate; "" for a
// candidate), the scorer (Score is what the balancer weighs, Why what it is
// and which way wins) and the picker (Picked marks the one chosen).
type ReplicaScore struct {
	Replica  string   `json:"replica"`
	Filtered string   `json:"filtered,omitempty"`
	Score    *float64 `json:"score,omitempty"`
	Why      string   `json:"why,omitempty"`
	Picked   bool     `json:"picked,omitempty"`
}

// Explain returns the replica the balancer would choose now (nil when none
// can take a request) and every replica's part in the choice, in the pool's
// order. The scores are those the balancer's own choice weighed (see
// Explainer); a p2c candidate not sampled has none. Like Pick it counts no
// request; it is for explain, never on the request path.
func (p *Pool) Explain(req *Request) (*Replica, []ReplicaScore) {
	now := p.reg.now()
	cands, full := p.candidates(req, nil)
	var picked *Replica
	card := scoreCard{}
	if len(cands) > 0 {
		picked = p.sel.choose(req, cands, card)
	}
	out := make([]ReplicaScore, 0, len(p.replicas))
	for _, r := range p.replicas {
		rs := ReplicaScore{Replica: r.Name, Picked: picked != nil && r.Endpoint == picked.Endpoint}
		switch {
		case r.Retired():
			rs.Filtered = "draining"
		case !r.Healthy():
			rs.Filtered = "unhealthy"
		case r.Ejected(now):
			rs.Filtered = "ejected"
		case slices.ContainsFunc(full, func(x *Replica) bool { return x.Endpoint == r.Endpoint }):
			rs.Filtered = "full: at max_inflight " + strconv.Itoa(p.opts.MaxInflight) + " or with requests queued"
		default:
			n, ok := card[r.Endpoint]
			if !ok {
				n.why = "not sampled: p2c weighs only the two candidates it draws"
			}
			if n.scored {
				rs.Score = &n.score
			}
			rs.Why = n.why
		}
		out = append(out, rs)
	}
	return picked, out
}

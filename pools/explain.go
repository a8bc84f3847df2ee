package pools

import "strconv"

// Explanations of a pick follow the endpoint picker's stages: the filter
// (which replicas could take the request, and why the others could not),
// the scorer (what the balancer weighs for each candidate) and the picker
// (which one it chose). They are made on demand, for explain, never on the
// request path.

// ReplicaScore is how the balancer sees one replica of the pool. Filtered
// says why a replica is not a candidate ("" for a candidate); for a
// candidate, Score is what the balancer weighs (Why says what it is and
// which way wins) and Picked marks the one it chose.
type ReplicaScore struct {
	Replica  string   `json:"replica"`
	Filtered string   `json:"filtered,omitempty"`
	Score    *float64 `json:"score,omitempty"`
	Why      string   `json:"why,omitempty"`
	Picked   bool     `json:"picked,omitempty"`
}

// Explain returns the replica the balancer would choose now (nil when none
// can take a request) and every replica's part in the choice, in the pool's
// order: the scores are those the balancer's own choice weighed (see
// Explainer), so the one picked is the one they say wins. A p2c candidate
// not in the sampled pair was not weighed and has no score. Like Pick it
// counts no request.
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
		case hasReplica(full, r):
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

func hasReplica(rs []*Replica, r *Replica) bool {
	for _, x := range rs {
		if x.Endpoint == r.Endpoint {
			return true
		}
	}
	return false
}

package pools

import (
	"math"
	"strconv"
)

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

// explainer is implemented by the balancers that can say what they weigh
// for a candidate among all the candidates.
type explainer interface {
	explainScore(req *Request, r *Replica, cands []*Replica) (float64, string)
}

// Explain returns the replica the balancer would choose now (nil when none
// can take a request) and every replica's part in the choice, in the pool's
// order. Like Pick it counts no request.
func (p *Pool) Explain(req *Request) (*Replica, []ReplicaScore) {
	now := p.reg.now()
	cands, full := p.candidates(req, nil)
	var picked *Replica
	if len(cands) > 0 {
		picked = p.sel.Select(req, cands)
	}
	ex, _ := p.sel.(explainer)
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
		case ex != nil:
			v, why := ex.explainScore(req, r, cands)
			rs.Score, rs.Why = &v, why
		default:
			rs.Why = "round robin: candidates take turns"
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

func (b *LeastOutstanding) explainScore(_ *Request, r *Replica, _ []*Replica) (float64, string) {
	return float64(r.Inflight()), "requests in flight; fewest wins, ties at random"
}

func (b *P2C) explainScore(_ *Request, r *Replica, _ []*Replica) (float64, string) {
	return b.cost(r, b.env.Now()), "in flight + vLLM queue; the cheaper of two sampled at random wins"
}

func (b *KVAware) explainScore(_ *Request, r *Replica, _ []*Replica) (float64, string) {
	return b.score(r, b.env.Now()), "in flight + 4 x vLLM queue + 0.5 x running + KV cache pressure (in flight alone without a fresh scrape); lowest wins"
}

// explainScore for affinity is the replica's rendezvous rank for the key
// (1 is the key's own replica), or for a request without a key its
// requests in flight.
func (b *Affinity) explainScore(req *Request, r *Replica, cands []*Replica) (float64, string) {
	if req == nil || req.Key == "" {
		return float64(r.Inflight()), "no affinity key: requests in flight; fewest wins"
	}
	var total int64
	w := rendezvous(req.Key, r.Name)
	rank := 1
	for _, c := range cands {
		total += c.Inflight()
		if c.Endpoint != r.Endpoint && rendezvous(req.Key, c.Name) > w {
			rank++
		}
	}
	limit := math.Ceil(b.env.LoadFactor * float64(total+1) / float64(len(cands)))
	why := "rank for the key (1 is its replica); the best rank under the load bound wins"
	if float64(r.Inflight()+1) > limit {
		why = "rank for the key; over the load bound (" + strconv.FormatFloat(limit, 'f', 0, 64) + " in flight), so passed over"
	}
	return float64(rank), why
}

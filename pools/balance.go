package pools

import (
	"maps"
	"math"
	"slices"
	"strconv"
	"sync/atomic"
	"time"
)

// Explainer is a balancer: Select picks one replica among candidates that
// can take the request (healthy, not ejected, under max_inflight; never an
// empty slice). choose is Select's own code: Select runs it without a card,
// Pool.Explain with one, on which it notes what it weighed for each
// candidate as it weighs it (the endpoint picker's ScoredPod), so explain
// shows the scores and pick Select computed, not a second computation.
type Explainer interface {
	Select(req *Request, candidates []*Replica) *Replica
	choose(req *Request, candidates []*Replica, card scoreCard) *Replica
}

// scoreCard is what a balancer weighed for each candidate, by endpoint;
// nil on the request path, where nothing is noted.
type scoreCard map[*Endpoint]noted

// noted is one candidate's entry: the score weighed (scored false for a
// balancer that weighs none), and what it is and which way wins.
type noted struct {
	score  float64
	scored bool
	why    string
}

// note records r's score; a nil card records nothing.
func (c scoreCard) note(r *Replica, score float64, why string) {
	if c != nil {
		c[r.Endpoint] = noted{score: score, scored: true, why: why}
	}
}

// Request is what a balancer may know about the request being placed.
type Request struct {
	// Key groups requests that share a prompt prefix (session id, or a hash
	// of the leading messages); used by affinity.
	Key string
	// Tenant is who sends the request (the API key's name; "" for none)
	// and Weight its share against other tenants while requests wait for
	// a full replica (0 counts as 1). See waitQueue.
	Tenant string
	Weight int
	// Priority requests (the classifier's calls) are served before other
	// waiters of a full replica (taking turns by Tenant and Weight among
	// themselves) and may use the reserved slots (Options.Reserved): a
	// tenant holding the pool's slots delays them by one slot's turn at most.
	Priority bool
	// Fair requests count against their tenant's share of a replica's
	// slots (share.go) and must be released with ReleaseFor.
	Fair bool
	// Once acquired: held is the endpoint a fair request counts on, heldAt
	// since when (unix nanos), prio the one a priority request counts on
	// (see priorityLimit).
	held   *Endpoint
	heldAt int64
	prio   *Endpoint
}

// Env is what balancers get from their pool.
type Env struct {
	Rand       func() uint64
	Now        func() time.Time
	Staleness  time.Duration
	LoadFactor float64
}

// balanceAffinity names the balancer that places requests by their key.
const balanceAffinity = "affinity"

// balancers are the named balancing strategies (policy.LoadOptions lists
// them for the config).
var balancers = map[string]func(env *Env) Explainer{
	"round_robin":       func(env *Env) Explainer { return &RoundRobin{} },
	"least_outstanding": func(env *Env) Explainer { return &LeastOutstanding{env: env} },
	"p2c":               func(env *Env) Explainer { return &P2C{env: env} },
	"kv_aware":          func(env *Env) Explainer { return &KVAware{env: env} },
	balanceAffinity:     func(env *Env) Explainer { return &Affinity{env: env} },
}

// ReadsMetrics reports whether the named balancer weighs the replicas'
// scraped vLLM metrics (queue depth, KV cache use), so they must be scraped.
func ReadsMetrics(balance string) bool { return balance == "p2c" || balance == "kv_aware" }

// Balancers lists the valid balance names, sorted.
func Balancers() []string { return slices.Sorted(maps.Keys(balancers)) }

// RoundRobin cycles through the candidates.
type RoundRobin struct{ next atomic.Uint64 }

func (b *RoundRobin) Select(req *Request, c []*Replica) *Replica { return b.choose(req, c, nil) }

func (b *RoundRobin) choose(_ *Request, c []*Replica, card scoreCard) *Replica {
	if card != nil {
		for _, r := range c {
			card[r.Endpoint] = noted{why: "round robin: candidates take turns"}
		}
	}
	return c[(b.next.Add(1)-1)%uint64(len(c))]
}

// LeastOutstanding picks the candidate with the fewest requests in flight
// through this gateway; ties go to a random one of the tied.
type LeastOutstanding struct{ env *Env }

func (b *LeastOutstanding) Select(req *Request, c []*Replica) *Replica { return b.choose(req, c, nil) }

func (b *LeastOutstanding) choose(_ *Request, c []*Replica, card scoreCard) *Replica {
	return fewestInflight(b.env, c, card, "requests in flight; fewest wins, ties at random")
}

// fewestInflight is the candidate with the fewest requests in flight, ties
// to a random one (from a random start), noting each count with why.
func fewestInflight(env *Env, c []*Replica, card scoreCard, why string) *Replica {
	start := int(env.Rand() % uint64(len(c)))
	best := c[start]
	bestN := best.Inflight()
	card.note(best, float64(bestN), why)
	for i := 1; i < len(c); i++ {
		r := c[(start+i)%len(c)]
		n := r.Inflight()
		card.note(r, float64(n), why)
		if n < bestN {
			best, bestN = r, n
		}
	}
	return best
}

// P2C is the power of two random choices: sample two distinct candidates,
// keep the one with less work (in-flight plus the replica's reported queue).
type P2C struct{ env *Env }

func (b *P2C) Select(req *Request, c []*Replica) *Replica { return b.choose(req, c, nil) }

// choose notes the sampled pair's costs only: the other candidates were
// not weighed.
func (b *P2C) choose(_ *Request, c []*Replica, card scoreCard) *Replica {
	if len(c) == 1 {
		if card != nil {
			card[c[0].Endpoint] = noted{why: "the only candidate: taken without sampling"}
		}
		return c[0]
	}
	i := int(b.env.Rand() % uint64(len(c)))
	j := int(b.env.Rand() % uint64(len(c)-1))
	if j >= i {
		j++
	}
	now := b.env.Now()
	cost := func(r *Replica) float64 { return float64(r.Inflight()) + r.Queue(now, b.env.Staleness) }
	cj, ci := cost(c[j]), cost(c[i])
	const why = "sampled: in flight + vLLM queue; the cheaper of the two sampled at random wins"
	card.note(c[i], ci, why)
	card.note(c[j], cj, why)
	if cj < ci {
		return c[j]
	}
	return c[i]
}

// KVAware scores each candidate (see score); the lowest wins.
type KVAware struct{ env *Env }

func (b *KVAware) Select(req *Request, c []*Replica) *Replica { return b.choose(req, c, nil) }

func (b *KVAware) choose(_ *Request, c []*Replica, card scoreCard) *Replica {
	now := b.env.Now()
	start := int(b.env.Rand() % uint64(len(c)))
	var best *Replica
	bestScore := math.Inf(1)
	for i := range c {
		r := c[(start+i)%len(c)]
		s := b.score(r, now)
		card.note(r, s, "in flight + 4 x vLLM queue + 0.5 x running + KV cache pressure (in flight alone without a fresh scrape); lowest wins")
		if s < bestScore {
			best, bestScore = r, s
		}
	}
	return best
}

// score is lower for a replica with more room: its scraped vLLM queue
// dominates, then running requests, then KV-cache pressure. Scrapes lag by
// up to an interval, so the gateway's own in-flight count is always added;
// a stale, failed or missing scrape scores in-flight alone.
func (b *KVAware) score(r *Replica, now time.Time) float64 {
	in := float64(r.Inflight())
	l := r.load.Load()
	if l == nil || l.Err != "" || now.Sub(l.At) > b.env.Staleness {
		return in
	}
	s := in
	if l.HasQueue {
		s += 4*l.Waiting + 0.5*l.Running
	}
	if l.HasKV {
		// Above ~80% KV usage vLLM starts preempting; make that expensive.
		s += 4 * l.KVUsage
		if l.KVUsage > 0.8 {
			s += 20 * (l.KVUsage - 0.8)
		}
	}
	return s
}

// Affinity keeps requests that share a key on one replica so vLLM's prefix
// cache hits. It ranks all replicas by rendezvous (highest-random-weight)
// hashing of (key, replica name): instances with the same config agree with
// no shared state, and removing a replica moves only its own keys. A replica
// over LoadFactor × its fair share of in-flight requests, or at max_inflight,
// passes the key to the next in its ranking (bounded load). Requests without
// a key go to the least loaded candidate.
type Affinity struct{ env *Env }

func (b *Affinity) Select(req *Request, c []*Replica) *Replica { return b.choose(req, c, nil) }

// choose notes each candidate's rendezvous rank for the key (1: its own).
func (b *Affinity) choose(req *Request, c []*Replica, card scoreCard) *Replica {
	if req == nil || req.Key == "" {
		return fewestInflight(b.env, c, card, "no affinity key: requests in flight; fewest wins")
	}
	var total int64
	for _, r := range c {
		total += r.Inflight()
	}
	// The fair share counts the request placed; ceil: a lone one always fits.
	limit := math.Ceil(b.env.LoadFactor * float64(total+1) / float64(len(c)))
	// Walking the ranking down to the first replica under the limit is the
	// same as taking the highest weight among those under it: one pass, no
	// sort, no allocation.
	var best, top *Replica
	var bestW, topW uint64
	var weighed []affinityWeight // explain only
	for _, r := range c {
		w := rendezvous(req.Key, r.Name)
		if top == nil || w > topW {
			top, topW = r, w
		}
		under := float64(r.Inflight()+1) <= limit
		if under && (best == nil || w > bestW) {
			best, bestW = r, w
		}
		if card != nil {
			weighed = append(weighed, affinityWeight{r, w, under})
		}
	}
	for _, a := range weighed { // rank: 1 plus the candidates weighing more
		rank := 1
		for _, o := range weighed {
			if o.r.Endpoint != a.r.Endpoint && o.w > a.w {
				rank++
			}
		}
		why := "rank for the key (1 is its replica); the best rank under the load bound wins"
		if !a.under {
			why = "rank for the key; over the load bound (" + strconv.FormatFloat(limit, 'f', 0, 64) + " in flight), so passed over"
		}
		card.note(a.r, float64(rank), why)
	}
	if best == nil {
		return top
	}
	return best
}

// affinityWeight is a candidate's rendezvous weight for the key, and
// whether it was under the load bound.
type affinityWeight struct {
	r     *Replica
	w     uint64
	under bool
}

// rendezvous weighs (key, replica) with a fixed hash so that separate
// Switchyard processes rank replicas identically: maphash with a
// process-random seed would not, so this is FNV-1a followed by a 64-bit
// finaliser (splitmix64) for good bit mixing.
func rendezvous(key, replica string) uint64 {
	const offset, prime = 14695981039346656037, 1099511628211
	h := uint64(offset)
	for i := 0; i < len(key); i++ {
		h = (h ^ uint64(key[i])) * prime
	}
	h = (h ^ 0xff) * prime
	for i := 0; i < len(replica); i++ {
		h = (h ^ uint64(replica[i])) * prime
	}
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	h ^= h >> 31
	return h
}

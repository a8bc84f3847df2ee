package pools

import (
	"net/url"
	"time"
)

// ReplicaSpec describes one replica of a pool.
type ReplicaSpec struct {
	Name  string
	URL   *url.URL
	Nodes []string
}

// Options builds a Pool. The config loader fills in every default; the
// pools package applies none of its own.
type Options struct {
	Name    string
	Model   string
	Balance string
	// MaxInflight per replica; 0 = unlimited.
	MaxInflight int
	// Reserved of each replica's MaxInflight slots only priority requests
	// (the classifier's calls) may use (capFor). 0: none.
	Reserved     int
	QueueTimeout time.Duration
	// ShareReserve is the window a tenant's slot time on a replica is
	// weighed over (share.go): a freed slot goes to the waiting tenant with
	// the least, and one that held a slot at least a fifth of it reserves
	// the most it held at once. 0: off, a free slot goes to whoever asks.
	ShareReserve time.Duration
	// ConnectTimeout bounds the dial to a replica.
	ConnectTimeout time.Duration
	Replicas       []ReplicaSpec
	Health         HealthOptions
	Scrape         ScrapeOptions
	Outlier        OutlierOptions
	// Staleness is how old a scrape may be and still steer balancing.
	Staleness  time.Duration
	LoadFactor float64
	// APIKey is sent as a bearer token on probes and scrapes (vLLM --api-key).
	APIKey string
	// Rand is the balancer's randomness; nil means the Endpoints'.
	Rand func() uint64
}

// Pool is an immutable view of a set of interchangeable replicas serving one
// model, as one configuration generation sees it. Replicas' state lives in
// the endpoints of the Endpoints that built it, so a reload loses nothing.
type Pool struct {
	Name     string
	Model    string
	opts     Options
	reg      *Endpoints
	replicas []*Replica
	sel      Explainer
	// own is set for a pool made by New, which owns its Endpoints.
	own bool
}

// Replica is one endpoint as a member of one pool: the pool's name for it
// and the nodes it spans. Its state is the endpoint's.
type Replica struct {
	*Endpoint
	Pool  string
	Name  string
	Nodes []string
}

func newPool(g *Endpoints, o Options) *Pool {
	p := &Pool{Name: o.Name, Model: o.Model, opts: o, reg: g}
	g.mu.Lock()
	for _, spec := range o.Replicas {
		e := g.endpoints[spec.URL.String()]
		p.replicas = append(p.replicas, &Replica{Endpoint: e, Pool: o.Name, Name: spec.Name, Nodes: spec.Nodes})
	}
	g.mu.Unlock()
	rnd := o.Rand
	if rnd == nil {
		rnd = g.opts.Rand
	}
	p.sel = balancers[o.Balance](&Env{Rand: rnd, Now: g.opts.Now, Staleness: o.Staleness, LoadFactor: o.LoadFactor})
	return p
}

// New builds a pool on an Endpoints of its own, with no loops running (see
// Endpoints.Start); Close releases it. Gateways use Endpoints.Apply, so
// that pools share endpoints.
func New(o Options, ro EndpointsOptions) (*Pool, error) {
	g := NewEndpoints(ro)
	ps, err := g.Apply([]Options{o})
	if err != nil {
		return nil, err
	}
	ps[0].own = true
	return ps[0], nil
}

// Now is the pool's clock (EndpointsOptions.Now).
func (p *Pool) Now() time.Time { return p.reg.now() }

// Endpoints returns the set the pool's endpoints live in.
func (p *Pool) Endpoints() *Endpoints { return p.reg }

// Replicas returns the pool's replicas (do not modify the slice).
func (p *Pool) Replicas() []*Replica { return p.replicas }

// Replica returns the replica called name, or nil.
func (p *Pool) Replica(name string) *Replica {
	for _, r := range p.replicas {
		if r.Name == name {
			return r
		}
	}
	return nil
}

// Balance is the balancer's name.
func (p *Pool) Balance() string { return p.opts.Balance }

// NeedsKey reports whether the pool's balancer places requests by their
// Request.Key (affinity), so that the caller computes one.
func (p *Pool) NeedsKey() bool { return p.opts.Balance == balanceAffinity }

// MaxInflight is the per-replica cap (0 = none).
func (p *Pool) MaxInflight() int { return p.opts.MaxInflight }

// capFor is the per-replica cap that applies to req (0 = none): priority
// requests may use the reserved slots, others may not.
func (p *Pool) capFor(req *Request) int64 {
	if p.opts.MaxInflight <= 0 || (req != nil && req.Priority) {
		return int64(p.opts.MaxInflight)
	}
	return int64(max(1, p.opts.MaxInflight-p.opts.Reserved))
}

// Options returns the options the pool was built with.
func (p *Pool) Options() Options { return p.opts }

// HealthyCount is the number of replicas available now.
func (p *Pool) HealthyCount() int {
	now := p.reg.now()
	n := 0
	for _, r := range p.replicas {
		if r.Available(now) {
			n++
		}
	}
	return n
}

// Saturated reports whether every available replica is at max_inflight or
// has a fresh reported queue over queueOver (spillover's test).
func (p *Pool) Saturated(queueOver int) bool {
	now := p.reg.now()
	any := false
	for _, r := range p.replicas {
		if !r.Available(now) {
			continue
		}
		any = true
		atCap := p.opts.MaxInflight > 0 && r.Inflight() >= int64(p.opts.MaxInflight)
		if !atCap && r.Queue(now, p.opts.Staleness) <= float64(queueOver) {
			return false
		}
	}
	return any
}

// CanTake reports whether a replica not excluded is available now (full or
// not): whether a retry has anywhere to go.
func (p *Pool) CanTake(exclude func(*Replica) bool) bool {
	now := p.reg.now()
	for _, r := range p.replicas {
		if r.Available(now) && (exclude == nil || !exclude(r)) {
			return true
		}
	}
	return false
}

// Pick returns the replica the balancer would choose now, without counting
// a request on it (for explain). nil when none can take a request.
func (p *Pool) Pick(req *Request) *Replica {
	cands, _ := p.candidates(req, nil)
	if len(cands) == 0 {
		return nil
	}
	return p.sel.Select(req, cands)
}

// Close releases a pool made by New: its loops and idle connections (a
// pool from Endpoints.Apply: nothing; its Endpoints owns them).
func (p *Pool) Close() {
	if p.own {
		p.reg.Close()
	}
}

package pools

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Errors from Acquire, compared with errors.Is.
var (
	// ErrNoReplica: no replica of the pool is healthy (or all were excluded).
	ErrNoReplica = errors.New("no healthy replica")
	// ErrSaturated: every healthy replica stayed at max_inflight for the
	// whole bounded wait.
	ErrSaturated = errors.New("every replica is at max_inflight")
)

// ReplicaSpec describes one replica.
type ReplicaSpec struct {
	Name  string
	URL   *url.URL
	Nodes []string
}

// Options builds a Pool.
type Options struct {
	Name    string
	Model   string
	Balance string
	// MaxInflight per replica; 0 = unlimited.
	MaxInflight  int
	QueueTimeout time.Duration
	// ConnectTimeout and HeaderTimeout bound the dial and the wait for
	// response headers on every upstream request.
	ConnectTimeout time.Duration
	HeaderTimeout  time.Duration
	Replicas       []ReplicaSpec
	Health         HealthOptions
	Scrape         ScrapeOptions
	LoadFactor     float64
	// APIKey is sent as a bearer token on probes and scrapes (vLLM --api-key).
	APIKey string
	// Rand and Now are injected for tests; nil means math/rand/v2 and time.Now.
	Rand func() uint64
	Now  func() time.Time
	// Transport overrides the pool's upstream transport (tests).
	Transport http.RoundTripper
	// Previous is the pool this one replaces on a reload. Its replicas with
	// the same name, URL and nodes are carried over as they are — in-flight
	// counts, health, ejections — so that a reload neither forgets a dead
	// replica nor lets in-flight requests exceed max_inflight.
	Previous *Pool
}

// Pool is a set of interchangeable replicas serving one model.
type Pool struct {
	Name  string
	Model string
	opts  Options

	replicas []*Replica
	sel      Selector
	env      *Env
	// Client reaches the replicas: a tuned transport with connection reuse
	// and the pool's connect and header timeouts.
	Client *http.Client

	waiters atomic.Int64
	mu      sync.Mutex // guards wake
	wake    chan struct{}
	// ejectMu serialises passive ejections, so that concurrent failures
	// cannot each see another replica available and eject them all.
	ejectMu sync.Mutex
}

// New builds a pool. An unknown balancer is an error listing valid names
// (config validation normally catches it first).
func New(o Options) (*Pool, error) {
	mk, ok := balancers[o.Balance]
	if !ok {
		return nil, fmt.Errorf("pool %q: unknown balancer %q (known: %v)", o.Name, o.Balance, Balancers())
	}
	if o.Rand == nil {
		o.Rand = rand.Uint64
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.LoadFactor < 1 {
		o.LoadFactor = 1.25
	}
	if o.Scrape.Staleness == 0 {
		o.Scrape.Staleness = 500 * time.Millisecond
	}
	o.Health.setDefaults()
	p := &Pool{Name: o.Name, Model: o.Model, opts: o, wake: make(chan struct{})}
	for _, spec := range o.Replicas {
		if r := o.Previous.sameReplica(spec); r != nil {
			p.replicas = append(p.replicas, r)
			continue
		}
		p.replicas = append(p.replicas, newReplica(o.Name, spec))
	}
	p.opts.Previous = nil // do not keep the old pool alive
	p.env = &Env{Rand: o.Rand, Now: o.Now, Staleness: o.Scrape.Staleness, LoadFactor: o.LoadFactor}
	p.sel = mk(p.env)
	rt := o.Transport
	if rt == nil {
		rt = NewTransport(o.ConnectTimeout, o.HeaderTimeout)
	}
	p.Client = &http.Client{Transport: rt, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	}}
	return p, nil
}

// NewTransport returns an upstream transport tuned for a gateway: many idle
// keep-alive connections per replica, bounded dial, TLS and header waits, no
// compression negotiation (bodies pass through as the replica sent them).
func NewTransport(connect, header time.Duration) *http.Transport {
	if connect <= 0 {
		connect = 2 * time.Second
	}
	return &http.Transport{
		Proxy:                 nil, // replicas are reached directly, never via $HTTP_PROXY
		DialContext:           (&net.Dialer{Timeout: connect, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:          1024,
		MaxIdleConnsPerHost:   256,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   connect,
		ResponseHeaderTimeout: header,
		ExpectContinueTimeout: 0,
		DisableCompression:    true,
		ForceAttemptHTTP2:     false,
		// Small per-connection buffers: SSE chunks are a few hundred bytes,
		// and bufio reads and writes larger payloads directly, so this only
		// trims what each open stream holds (about 4 KiB of 8).
		WriteBufferSize: 2 << 10,
		ReadBufferSize:  2 << 10,
	}
}

// Replicas returns the pool's replicas (do not modify the slice).
func (p *Pool) Replicas() []*Replica { return p.replicas }

// sameReplica returns p's replica matching spec exactly, or nil.
func (p *Pool) sameReplica(spec ReplicaSpec) *Replica {
	if p == nil {
		return nil
	}
	r := p.Replica(spec.Name)
	if r == nil || r.URL.String() != spec.URL.String() || !slices.Equal(r.Nodes, spec.Nodes) {
		return nil
	}
	return r
}

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

// MaxInflight is the per-replica cap (0 = none).
func (p *Pool) MaxInflight() int { return p.opts.MaxInflight }

// Options returns the options the pool was built with.
func (p *Pool) Options() Options { return p.opts }

// HealthyCount is the number of replicas available now.
func (p *Pool) HealthyCount() int {
	now := p.opts.Now()
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
	now := p.opts.Now()
	any := false
	for _, r := range p.replicas {
		if !r.Available(now) {
			continue
		}
		any = true
		atCap := p.opts.MaxInflight > 0 && r.Inflight() >= int64(p.opts.MaxInflight)
		if !atCap && r.Queue(now, p.opts.Scrape.Staleness) <= float64(queueOver) {
			return false
		}
	}
	return any
}

// Acquire chooses a replica for req and counts the request in flight on it;
// the caller must Release it exactly once. exclude (may be nil) skips
// replicas already tried by this request. When every available replica is
// at max_inflight, Acquire waits up to the pool's queue timeout for a slot,
// then returns ErrSaturated; with no available replica it returns
// ErrNoReplica at once. It returns ctx.Err() if ctx ends first.
func (p *Pool) Acquire(ctx context.Context, req *Request, exclude func(*Replica) bool) (*Replica, error) {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		r, full := p.tryAcquire(req, exclude)
		if r != nil {
			return r, nil
		}
		if !full {
			return nil, ErrNoReplica
		}
		if timer == nil {
			if p.opts.QueueTimeout <= 0 {
				return nil, ErrSaturated
			}
			timer = time.NewTimer(p.opts.QueueTimeout)
		}
		p.mu.Lock()
		wake := p.wake
		p.mu.Unlock()
		p.waiters.Add(1)
		// Re-check after registering as a waiter: a Release between
		// tryAcquire and Add would otherwise be missed.
		if r, _ := p.tryAcquire(req, exclude); r != nil {
			p.waiters.Add(-1)
			return r, nil
		}
		// A replica whose ejection ends frees capacity without a Release:
		// wake up then too.
		var readmit <-chan time.Time
		var rt *time.Timer
		if d := p.nextReadmission(); d > 0 {
			rt = time.NewTimer(d)
			readmit = rt.C
		}
		stopReadmit := func() {
			if rt != nil {
				rt.Stop()
			}
		}
		select {
		case <-wake:
			p.waiters.Add(-1)
			stopReadmit()
		case <-readmit:
			p.waiters.Add(-1)
		case <-timer.C:
			stopReadmit()
			p.waiters.Add(-1)
			return nil, ErrSaturated
		case <-ctx.Done():
			stopReadmit()
			p.waiters.Add(-1)
			return nil, ctx.Err()
		}
	}
}

// tryAcquire runs filter → pick → admit once. full reports that replicas
// exist but all are at max_inflight.
func (p *Pool) tryAcquire(req *Request, exclude func(*Replica) bool) (r *Replica, full bool) {
	cands, full := p.candidates(exclude)
	maxIn := int64(p.opts.MaxInflight)
	for len(cands) > 0 {
		pick := p.sel.Select(req, cands)
		if p.admit(pick, maxIn) {
			return pick, false
		}
		// Lost a race for the last slot: drop it and choose again.
		full = true
		for i, c := range cands {
			if c == pick {
				cands = append(cands[:i], cands[i+1:]...)
				break
			}
		}
	}
	return nil, full
}

func (p *Pool) admit(r *Replica, maxIn int64) bool {
	for {
		n := r.inflight.Load()
		if maxIn > 0 && n >= maxIn {
			return false
		}
		if r.inflight.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// Pick returns the replica the balancer would choose now, without counting
// a request on it (for explain). nil when none can take a request.
func (p *Pool) Pick(req *Request) *Replica {
	cands, _ := p.candidates(nil)
	if len(cands) == 0 {
		return nil
	}
	return p.sel.Select(req, cands)
}

// candidates is the filter stage: replicas available now, not excluded and
// under max_inflight. full reports that some were left out only for being
// at max_inflight.
func (p *Pool) candidates(exclude func(*Replica) bool) (cands []*Replica, full bool) {
	now := p.opts.Now()
	maxIn := int64(p.opts.MaxInflight)
	cands = make([]*Replica, 0, len(p.replicas))
	for _, r := range p.replicas {
		if !r.Available(now) || (exclude != nil && exclude(r)) {
			continue
		}
		if maxIn > 0 && r.Inflight() >= maxIn {
			full = true
			continue
		}
		cands = append(cands, r)
	}
	return cands, full
}

// Release ends a request counted by Acquire and wakes waiters.
func (p *Pool) Release(r *Replica) {
	r.inflight.Add(-1)
	p.wakeWaiters()
}

// wakeWaiters wakes every Acquire waiting for capacity: a slot was
// released or a replica came back.
func (p *Pool) wakeWaiters() {
	if p.waiters.Load() > 0 {
		p.mu.Lock()
		close(p.wake)
		p.wake = make(chan struct{})
		p.mu.Unlock()
	}
}

// nextReadmission is how long until the first ejected (but healthy)
// replica is back, or 0 when none is ejected.
func (p *Pool) nextReadmission() time.Duration {
	now := p.opts.Now().UnixNano()
	var next int64
	for _, r := range p.replicas {
		if u := r.ejectedUntil.Load(); u > now && r.Healthy() && (next == 0 || u < next) {
			next = u
		}
	}
	if next == 0 {
		return 0
	}
	return time.Duration(next - now)
}

// Close releases the pool's idle upstream connections.
func (p *Pool) Close() {
	if t, ok := p.Client.Transport.(interface{ CloseIdleConnections() }); ok {
		t.CloseIdleConnections()
	}
}

package pools

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// EndpointsOptions configures an Endpoints. Zero values are production
// defaults.
type EndpointsOptions struct {
	// Now, Rand and After (the timer a waiting request wakes on when a
	// reserved share lapses) are injected for tests; nil means time.Now,
	// math/rand/v2 and time.After.
	Now   func() time.Time
	Rand  func() uint64
	After func(time.Duration) <-chan time.Time
	// Transport, when set, replaces every endpoint's transport (tests).
	Transport http.RoundTripper
	// OnChange is called when an endpoint's state changes (health verdict,
	// ejection, misconfiguration), with a pool that lists it and why. It
	// must not block.
	OnChange func(r *Replica, healthy bool, why string)
	// OnMissing is called once per endpoint whose metrics lack load
	// signals, with the names it lacks.
	OnMissing func(r *Replica, missing []string)
}

// Endpoints owns every endpoint the running configuration uses, keyed by base
// URL. It outlives reloads: Apply reconciles it with a new configuration and
// returns immutable pool views that point into it.
type Endpoints struct {
	opts EndpointsOptions

	mu        sync.Mutex // guards endpoints, views, ctx, changed
	endpoints map[string]*Endpoint
	ctx       context.Context // set by Start; nil means no loops
	changed   chan struct{}
	views     []*Pool    // the pools of the last Apply
	applyMu   sync.Mutex // serialises Apply
	// ejectMu serialises ejections across every pool and reload, so that
	// concurrent failures cannot each see another replica available and
	// eject them all.
	ejectMu sync.Mutex
}

// NewEndpoints returns an empty set of endpoints.
func NewEndpoints(o EndpointsOptions) *Endpoints {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Rand == nil {
		o.Rand = rand.Uint64
	}
	if o.After == nil {
		o.After = time.After
	}
	return &Endpoints{opts: o, endpoints: map[string]*Endpoint{}, changed: make(chan struct{})}
}

func (g *Endpoints) now() time.Time { return g.opts.Now() }

// newClient returns a client that never follows redirects, on a new
// transport (or the tests' shared one); a control one (for the health and
// scrape loops) keeps at most two idle connections: a probe's and a scrape's.
func (g *Endpoints) newClient(o EndpointOptions, control bool) *http.Client {
	var rt http.RoundTripper = g.opts.Transport
	if rt == nil {
		tr := NewTransport(o.ConnectTimeout)
		if control {
			tr.MaxIdleConnsPerHost = 2
		}
		rt = tr
	}
	return &http.Client{Transport: rt, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// changes returns a channel closed at the next state change that may make
// room for a waiting request (an endpoint back in rotation, a reload).
func (g *Endpoints) changes() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.changed
}

// broadcast wakes every waiting Acquire to look at the replicas again. It
// is for rare events only; releases hand slots over one waiter at a time.
func (g *Endpoints) broadcast() {
	g.mu.Lock()
	close(g.changed)
	g.changed = make(chan struct{})
	g.mu.Unlock()
}

// Endpoints returns every endpoint, sorted by URL.
func (g *Endpoints) Endpoints() []*Endpoint {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := slices.Collect(maps.Values(g.endpoints))
	sort.Slice(out, func(i, j int) bool { return out[i].url.String() < out[j].url.String() })
	return out
}

// Apply reconciles the endpoints with a configuration (see wantedEndpoints)
// and returns its pools in order. Endpoints are added, kept (same options:
// untouched), updated (see reconfigure: loops restarted, state kept) or
// removed (no new requests; those in flight finish, then idle connections
// close; loops stop at once). Apply fails, changing nothing, if a pool's
// options are invalid.
func (g *Endpoints) Apply(opts []Options) ([]*Pool, error) {
	g.applyMu.Lock()
	defer g.applyMu.Unlock()
	want, urls, err := wantedEndpoints(opts)
	if err != nil {
		return nil, err
	}

	g.mu.Lock()
	var start, retire []*Endpoint
	for key, e := range g.endpoints {
		if _, ok := want[key]; !ok {
			delete(g.endpoints, key)
			retire = append(retire, e)
		}
	}
	for key, eo := range want {
		e, ok := g.endpoints[key]
		switch {
		case !ok:
			e = newEndpoint(g, urls[key], eo)
			// Out of rotation from the moment a pool view lists it until
			// its first probe passes (when loops will run it).
			e.probing.Store(!eo.Health.Disabled && g.ctx != nil)
			g.endpoints[key] = e
		case !e.reconfigure(g, eo):
			continue
		}
		start = append(start, e)
	}
	ctx := g.ctx
	g.mu.Unlock()

	pools := make([]*Pool, 0, len(opts))
	for _, o := range opts {
		pools = append(pools, newPool(g, o))
	}
	g.mu.Lock()
	g.views = pools
	g.mu.Unlock()

	for _, e := range retire {
		e.retired.Store(true)
		e.stopLoops()
		if e.inflight.Load() == 0 {
			e.closeOld()
		}
	}
	if ctx != nil {
		for _, e := range start {
			e.startLoops(ctx)
		}
	}
	g.broadcast()
	return pools, nil
}

// wantedEndpoints is the endpoint options each server of opts gets: the
// first pool listing it sets them, but it is scraped when any pool scrapes
// it, and its models are every listing pool's. It fails if a pool's
// options are invalid.
func wantedEndpoints(opts []Options) (map[string]EndpointOptions, map[string]*url.URL, error) {
	want := map[string]EndpointOptions{}
	urls := map[string]*url.URL{}
	models := map[string][]string{}
	for _, o := range opts {
		if err := o.check(); err != nil {
			return nil, nil, err
		}
		for _, rs := range o.Replicas {
			key := rs.URL.String()
			eo, seen := want[key]
			if !seen {
				eo = EndpointOptions{URL: key, APIKey: o.APIKey, ConnectTimeout: o.ConnectTimeout, Health: o.Health, Scrape: o.Scrape}
				urls[key] = rs.URL
			} else if o.Scrape.Enabled && !eo.Scrape.Enabled {
				eo.Scrape = o.Scrape
			}
			if !slices.Contains(models[key], o.Model) {
				models[key] = append(models[key], o.Model)
			}
			want[key] = eo
		}
	}
	for key, ms := range models {
		eo := want[key]
		sort.Strings(ms)
		eo.Models = strings.Join(ms, "\n")
		want[key] = eo
	}
	return want, urls, nil
}

// reconfigure gives a kept endpoint its new options eo; false when they
// are the same (nothing to restart). A new connect timeout gets new
// transports.
func (e *Endpoint) reconfigure(g *Endpoints, eo EndpointOptions) bool {
	e.mu.Lock()
	old := e.opts
	e.opts = eo
	e.mu.Unlock()
	if old == eo {
		return false
	}
	if old.APIKey != eo.APIKey || old.Models != eo.Models || old.Health != eo.Health {
		// What made it misconfigured or unhealthy may be fixed, and with
		// probes off nothing else would clear the marks (nor end probing):
		// let requests and probes judge it afresh.
		e.misconfigured.Store(false)
		if eo.Health.Disabled {
			e.healthy.Store(true)
			e.probing.Store(false)
		}
		e.mu.Lock()
		e.record.why, e.record.probeOK, e.record.probeFail = "", 0, 0
		e.mu.Unlock()
	}
	if old.ConnectTimeout != eo.ConnectTimeout {
		e.retireClient(e.client.Swap(g.newClient(eo, false)))
		e.retireClient(e.control.Swap(g.newClient(eo, true)))
	}
	return true
}

// current returns the view of the last Apply with p's name: p itself
// while it is current, and p too when the pool is gone (or p was not made
// by Apply).
func (g *Endpoints) current(p *Pool) *Pool {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, v := range g.views {
		if v.Name == p.Name {
			return v
		}
	}
	return p
}

// poolsOf returns p and every current pool that lists e.
func (g *Endpoints) poolsOf(e *Endpoint, p *Pool) []*Pool {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := []*Pool{p}
	for _, v := range g.views {
		if v != p && slices.ContainsFunc(v.replicas, func(r *Replica) bool { return r.Endpoint == e }) {
			out = append(out, v)
		}
	}
	return out
}

// member returns the first replica of the current pools that lists e (for
// callbacks that name a pool and replica), or a bare one.
func (g *Endpoints) member(e *Endpoint) *Replica {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, v := range g.views {
		if i := slices.IndexFunc(v.replicas, func(r *Replica) bool { return r.Endpoint == e }); i >= 0 {
			return v.replicas[i]
		}
	}
	return &Replica{Endpoint: e, Name: e.url.Host}
}

// Start runs the health and scrape loops of every endpoint, now and for
// endpoints later reconciled in, until ctx ends or Close. It returns once
// every endpoint's first probe has answered or timed out: replicas take
// traffic only after a passing probe, so a gateway serving at once would
// refuse requests its healthy replicas could take.
func (g *Endpoints) Start(ctx context.Context) {
	g.mu.Lock()
	g.ctx = ctx
	eps := slices.Collect(maps.Values(g.endpoints))
	g.mu.Unlock()
	for _, e := range eps {
		e.startLoops(ctx)
	}
	for _, e := range eps {
		o := e.Options()
		if o.Health.Disabled {
			continue
		}
		select {
		case <-e.probed:
		case <-time.After(o.Health.Timeout + 100*time.Millisecond):
		case <-ctx.Done():
		}
	}
}

// Close stops every loop and closes idle upstream connections. Requests in
// flight keep their connections.
func (g *Endpoints) Close() {
	g.mu.Lock()
	g.ctx = nil // closed: a later Apply starts no loops
	eps := slices.Collect(maps.Values(g.endpoints))
	g.mu.Unlock()
	for _, e := range eps {
		e.stopLoops()
		for _, tr := range e.transports(e.Client(), e.control.Load()) {
			tr.CloseIdleConnections()
		}
	}
}

// startLoops (re)starts e's health and scrape loops with its current
// options under ctx.
func (e *Endpoint) startLoops(ctx context.Context) {
	e.stopLoops()
	lctx, cancel := context.WithCancel(ctx)
	e.mu.Lock()
	e.stop = cancel
	o := e.opts
	e.mu.Unlock()
	if !o.Health.Disabled {
		select {
		case <-e.probed:
		default:
			// Never probed yet: it takes traffic only once a probe
			// passes (with probes off, at once).
			e.probing.Store(true)
		}
		e.loops.Go(func() { every(lctx, o.Health.Interval, func() { e.apply(lctx, o) }) })
	} else {
		e.probing.Store(false)
	}
	if o.Scrape.Enabled {
		e.loops.Go(func() { e.runScrape(lctx, o) })
	}
}

// every runs f now and each d until ctx ends.
func every(ctx context.Context, d time.Duration, f func()) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		f()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (e *Endpoint) stopLoops() {
	e.mu.Lock()
	stop := e.stop
	e.stop = nil
	e.mu.Unlock()
	if stop != nil {
		stop()
	}
}

// check rejects options a pool cannot run with (the config loader applies
// every default: a zero here is a caller's mistake).
func (o *Options) check() error {
	if _, ok := balancers[o.Balance]; !ok {
		return fmt.Errorf("pool %q: unknown balancer %q (known: %v)", o.Name, o.Balance, Balancers())
	}
	switch {
	case o.LoadFactor < 1:
		return fmt.Errorf("pool %q: load factor %g is below 1", o.Name, o.LoadFactor)
	case o.ConnectTimeout <= 0:
		return fmt.Errorf("pool %q: connect timeout must be positive", o.Name)
	case !o.Health.Disabled && (o.Health.Interval <= 0 || o.Health.Timeout <= 0 || o.Health.HealthyAfter <= 0 || o.Health.UnhealthyAfter <= 0):
		return fmt.Errorf("pool %q: health interval, timeout and thresholds must be positive", o.Name)
	case o.Staleness <= 0:
		return fmt.Errorf("pool %q: scrape staleness must be positive", o.Name)
	case o.Scrape.Enabled && (o.Scrape.Interval <= 0 || o.Scrape.Timeout <= 0):
		return fmt.Errorf("pool %q: scrape interval and timeout must be positive", o.Name)
	case o.Outlier.BaseEjection <= 0 || o.Outlier.MaxEjection < o.Outlier.BaseEjection:
		return fmt.Errorf("pool %q: outlier ejection times must be positive, base at most max", o.Name)
	case o.Outlier.MaxEjectionPercent < 0 || o.Outlier.MaxEjectionPercent > 100:
		return fmt.Errorf("pool %q: max ejection percent must be within 0..100", o.Name)
	}
	for _, r := range o.Replicas {
		if r.URL == nil {
			return fmt.Errorf("pool %q: replica %q has no URL", o.Name, r.Name)
		}
	}
	return nil
}

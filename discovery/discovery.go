package discovery

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard/switchyard/pools"
)

// Discovery results, the values of switchyard_discovery_resolutions_total's
// result label.
const (
	// ResultOK: the name resolved to at least one address.
	ResultOK = "ok"
	// ResultEmpty: the name exists but has no address, or does not exist
	// (NXDOMAIN); the last good set is kept.
	ResultEmpty = "empty"
	// ResultError: no answer (timeout, refused, SERVFAIL); the last good
	// set is kept.
	ResultError = "error"
)

// ErrNoRecords is a resolution that found no address (NXDOMAIN or no
// records of the asked type).
var ErrNoRecords = errors.New("no records")

// Lookup resolves a discovery name. For kind "dns" every A and AAAA record
// of name is an address, with port; for "srv" every SRV record's target
// (resolved to its addresses) and port. It returns the addresses as
// host:port strings and the smallest TTL of the records used (negative
// when unknown). No address is ErrNoRecords.
type Lookup interface {
	Lookup(ctx context.Context, kind, name string, port int) (addrs []string, ttl time.Duration, err error)
}

// Watcher is a source that tells every change of its set instead of being
// asked again each interval (Kubernetes EndpointSlices).
type Watcher interface {
	// Watch follows the source until ctx ends, calling update, one call
	// at a time, with the whole set after each change, or with an error
	// when the source is lost or empty (ErrNoRecords), after which the
	// last good set is kept; except ErrNoReadyEndpoints, the source's
	// own word that the set is empty, which empties it.
	Watch(ctx context.Context, update func(addrs []string, err error))
}

// Options configures one pool's Discovery. The config loader
// fills in every default but MinRefresh, Timeout, Now and After.
type Options struct {
	Pool string
	// Kind is "dns" or "srv"; Name is what is resolved; Port is the
	// replicas' port with "dns".
	Kind string
	Name string
	Port int
	// Interval is the longest time between two resolutions.
	Interval time.Duration
	// Lookup answers the queries (NewDNSLookup in production).
	Lookup Lookup
	// Watcher, when set, follows the source after the first Resolve
	// instead of resolving again each interval (NewKubernetes).
	Watcher Watcher
	// MinRefresh floors a TTL-driven re-resolution and is the first retry
	// after a failure (doubling up to Interval). Default 1s.
	MinRefresh time.Duration
	// Timeout bounds one resolution. Default min(Interval, 5s).
	Timeout time.Duration
	// Now and After are the clock (tests); nil means time.Now and
	// time.After.
	Now   func() time.Time
	After func(time.Duration) <-chan time.Time
	// Metrics, when set, counts resolutions and the replicas in use.
	Metrics *Metrics
	// OnEvent is told of every change worth a log line: the set changed
	// or the result did (ok, empty, error). It must not block.
	OnEvent func(Event)
	// Refuse, when set, is asked of each address an answer lists; those
	// it refuses (the gateway's own listener) are dropped, as if the
	// answer had not listed them. It must not block.
	Refuse func(addr string) bool
}

// Event is a change in a pool's discovery.
type Event struct {
	Pool, Kind, Name string
	Result           string
	// Err is the failure of a result other than ok.
	Err error
	// Added and Removed are the addresses the resolution changed (ok
	// only); Addrs is the set in use after it (on a failure, the last good
	// set, kept).
	Added, Removed, Addrs []string
}

// Status is what /admin/pools shows of a pool's discovery.
type Status struct {
	Kind, Name string
	// Addrs is the set in use: the last good resolution's addresses,
	// sorted.
	Addrs []string
	// ResolvedAt is the last resolution that found addresses (zero if none
	// has yet); AttemptAt the last attempt, with its Result and Err.
	ResolvedAt, AttemptAt time.Time
	Result                string
	Err                   string
	// TTL is the smallest record TTL of the last good resolution
	// (negative: unknown).
	TTL time.Duration
}

// Discovery keeps a pool's replica set in step with DNS or a Service's
// EndpointSlices. A failed or empty resolution keeps the last good set:
// DNS hiccups, a failed list or a lost watch never take a pool's replicas
// away (health checks still do, one replica at a time). The one exception
// is ErrNoReadyEndpoints: the API server itself lists no endpoint for the
// Service, and the set becomes empty.
type Discovery struct {
	opts Options

	mu     sync.Mutex // guards the fields below
	status Status
	// fails counts failed resolutions in a row (the retry backoff).
	fails int
	// stopped: Stop was called; a resolution still running changes
	// nothing, so the pool's series, once forgotten, stay gone.
	stopped bool
}

// Stop makes d inert: a resolution in progress (Run's, after its context
// ended) records nothing and tells nothing.
func (d *Discovery) Stop() {
	d.mu.Lock()
	d.stopped = true
	d.mu.Unlock()
}

// New returns a pool's discovery with an empty set; call Resolve
// for a first set and Run to follow the name.
func New(o Options) *Discovery {
	if o.MinRefresh <= 0 {
		o.MinRefresh = time.Second
	}
	if o.Timeout <= 0 {
		o.Timeout = min(o.Interval, 5*time.Second)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.After == nil {
		o.After = time.After
	}
	return &Discovery{opts: o, status: Status{Kind: o.Kind, Name: o.Name, TTL: -1}}
}

// Options returns the options d was made with.
func (d *Discovery) Options() Options { return d.opts }

// Status returns the discovery's state now.
func (d *Discovery) Status() Status {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := d.status
	s.Addrs = slices.Clone(s.Addrs)
	return s
}

// Replicas returns the set in use as replica specs, each named after its
// address (10.0.0.5:8000) with the base URL http://ADDRESS.
func (d *Discovery) Replicas() []pools.ReplicaSpec {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]pools.ReplicaSpec, 0, len(d.status.Addrs))
	for _, a := range d.status.Addrs {
		out = append(out, pools.ReplicaSpec{Name: a, URL: &url.URL{Scheme: "http", Host: a}})
	}
	return out
}

// MaxDiscovered bounds the replicas one pool takes from a resolution.
const MaxDiscovered = 256

// Resolve runs one resolution and reports whether it changed the set in
// use. A failure or an empty answer changes nothing but the status.
func (d *Discovery) Resolve(ctx context.Context) (changed bool) {
	ctx, cancel := context.WithTimeout(ctx, d.opts.Timeout)
	defer cancel()
	addrs, ttl, err := d.opts.Lookup.Lookup(ctx, d.opts.Kind, d.opts.Name, d.opts.Port)
	return d.record(addrs, ttl, err)
}

// record takes one answer (a resolution's, or a watcher's update) and
// reports whether it changed the set in use. Addresses Refuse names (the
// gateway's own) are dropped first.
func (d *Discovery) record(addrs []string, ttl time.Duration, err error) (changed bool) {
	addrs = d.refuse(addrs)
	if err == nil && len(addrs) == 0 {
		err = ErrNoRecords
	}
	// The API server's own word that the Service has no endpoint: the set
	// becomes empty, unlike a source that failed or a name without records.
	emptied := errors.Is(err, ErrNoReadyEndpoints)
	result := ResultOK
	switch {
	case errors.Is(err, ErrNoRecords):
		result = ResultEmpty
	case err != nil:
		result = ResultError
	}
	addrs = slices.Compact(slices.Sorted(slices.Values(addrs)))
	// An answer is untrusted input: a name that lists thousands of
	// addresses must not become thousands of endpoints, each with its
	// connections and probe loop.
	truncated := len(addrs) > MaxDiscovered
	if truncated {
		addrs = addrs[:MaxDiscovered]
	}
	now := d.opts.Now()

	d.mu.Lock()
	if d.stopped {
		d.mu.Unlock()
		return false
	}
	prev := d.status
	d.status.AttemptAt, d.status.Result, d.status.Err = now, result, ""
	var added, removed []string
	switch {
	case emptied:
		d.fails = 0
		_, removed = diffSets(prev.Addrs, nil)
		d.status.Addrs, d.status.ResolvedAt, d.status.TTL = nil, now, -1
		d.status.Err = err.Error()
	case err != nil:
		d.status.Err = err.Error()
		d.fails++
	default:
		d.fails = 0
		added, removed = diffSets(prev.Addrs, addrs)
		d.status.Addrs, d.status.ResolvedAt, d.status.TTL = addrs, now, ttl
		if truncated {
			d.status.Err = fmt.Sprintf("the answer listed more than %d addresses; the first %d (in address order) are used", MaxDiscovered, MaxDiscovered)
		}
	}
	cur := slices.Clone(d.status.Addrs)
	if m := d.opts.Metrics; m != nil {
		m.resolutions.WithLabelValues(d.opts.Pool, result).Inc()
		m.replicas.WithLabelValues(d.opts.Pool).Set(float64(len(cur)))
	}
	d.mu.Unlock()

	changed = len(added)+len(removed) > 0
	// Told once per change: a name failing every interval is one line,
	// not one per attempt (the error's text varies: ports, servers).
	if d.opts.OnEvent != nil && (changed || result != prev.Result) {
		d.opts.OnEvent(Event{Pool: d.opts.Pool, Kind: d.opts.Kind, Name: d.opts.Name, Result: result, Err: err,
			Added: added, Removed: removed, Addrs: cur})
	}
	return changed
}

// next is how long to wait before the next resolution: the interval, or
// sooner when the last good answer's TTL ends first (never below
// MinRefresh); after failures MinRefresh doubling per failure, up to the
// interval.
func (d *Discovery) next() time.Duration {
	d.mu.Lock()
	defer d.mu.Unlock()
	o := d.opts
	if d.fails > 0 {
		wait := o.MinRefresh << min(d.fails-1, 20)
		return min(wait, o.Interval)
	}
	if ttl := d.status.TTL; ttl >= 0 && ttl < o.Interval {
		return max(ttl, o.MinRefresh)
	}
	return o.Interval
}

// Run re-resolves until ctx ends, calling onChange (from Run's goroutine)
// after each resolution that changed the set in use. It waits first: the
// caller has run the first Resolve. With a Watcher, it follows the
// watcher's updates instead, calling onChange from the watcher's
// goroutines (one at a time).
func (d *Discovery) Run(ctx context.Context, onChange func()) {
	if w := d.opts.Watcher; w != nil {
		w.Watch(ctx, func(addrs []string, err error) {
			if d.record(addrs, -1, err) && ctx.Err() == nil {
				onChange()
			}
		})
		return
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-d.opts.After(d.next()):
		}
		if d.Resolve(ctx) && ctx.Err() == nil {
			onChange()
		}
	}
}

// diffSets returns what b adds to a and what it removes from a (both
// sorted).
func diffSets(a, b []string) (added, removed []string) {
	for _, x := range b {
		if _, found := slices.BinarySearch(a, x); !found {
			added = append(added, x)
		}
	}
	for _, x := range a {
		if _, found := slices.BinarySearch(b, x); !found {
			removed = append(removed, x)
		}
	}
	return added, removed
}

// Metrics are the discovery series:
// switchyard_discovery_resolutions_total{pool,result} and
// switchyard_discovery_replicas{pool}.
type Metrics struct {
	resolutions *prometheus.CounterVec
	replicas    *prometheus.GaugeVec
}

// NewMetrics registers the discovery series on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		resolutions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "switchyard_discovery_resolutions_total",
			Help: "Resolutions of a discovered pool's name (DNS), or updates of its Service's EndpointSlices (kubernetes), by result: ok, empty (no records: the last good set is kept; a Service with no ready or serving endpoint: the pool is emptied) or error (no answer, a failed list, a lost watch: kept)."},
			[]string{"pool", "result"}),
		replicas: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "switchyard_discovery_replicas",
			Help: "Replicas of a discovered pool: the addresses of its last good resolution."}, []string{"pool"}),
	}
	reg.MustRegister(m.resolutions, m.replicas)
	return m
}

// Forget drops a pool's series (its discovery is gone).
func (m *Metrics) Forget(pool string) {
	m.replicas.DeleteLabelValues(pool)
	for _, r := range []string{ResultOK, ResultEmpty, ResultError} {
		m.resolutions.DeleteLabelValues(pool, r)
	}
}

// refuse drops the addresses Options.Refuse refuses.
func (d *Discovery) refuse(addrs []string) []string {
	if d.opts.Refuse == nil {
		return addrs
	}
	return slices.DeleteFunc(addrs, d.opts.Refuse)
}

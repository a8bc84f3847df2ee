package discoveries

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard/switchyard/discovery"
	"github.com/switchyard/switchyard/policy"
	"github.com/switchyard/switchyard/pools"
	"github.com/switchyard/switchyard/router/internal/admin"
	"github.com/switchyard/switchyard/router/internal/conns"
	"github.com/switchyard/switchyard/router/internal/upstream"
)

// Options are what the discoveries need of the gateway.
type Options struct {
	Log     *slog.Logger
	Now     func() time.Time
	Metrics *discovery.Metrics
	// Passive resolves nothing and runs no loops (one-shot tools).
	Passive bool
	// Refuse is a pool's discovery's Refuse: an address naming one of the
	// gateway's own listeners is dropped.
	Refuse func(pool string, sc *policy.Server) func(addr string) bool
	// Changed is called, on the loop's goroutine, when a running
	// discovery's set of replicas changed.
	Changed func(pool string, p *Pool)
}

// Pool is a pool's running discovery. It outlives reloads that keep the
// pool's discovery section, so its set (and its endpoints' state) carries
// over.
type Pool struct {
	d   *discovery.Discovery
	cfg policy.Discovery
	// cancel stops its loop; nil until it runs.
	cancel context.CancelFunc
}

// Set is the discoveries of one config, by pool name.
type Set map[string]*Pool

// Running holds the committed discoveries. Its methods are called
// serialised (the gateway's reload lock).
type Running struct {
	opts    Options
	running Set
}

// New returns a Running with no discovery.
func New(o Options) *Running { return &Running{opts: o} }

// resolvConf is the system resolver's configuration.
var resolvConf = "/etc/resolv.conf"

// Next returns the discoveries cfg's pools need: the running one of a
// pool whose section did not change, else a new one, resolved once now
// under ctx (so a reload or a start serves the names' replicas at once).
// New ones run only once committed.
func (r *Running) Next(ctx context.Context, cfg *policy.Config) Set {
	next := Set{}
	for _, pc := range cfg.Pools {
		dc := pc.Discovery
		if dc == nil {
			continue
		}
		if old := r.running[pc.Name]; old != nil && old.cfg == *dc {
			next[pc.Name] = old
			continue
		}
		var lookup discovery.Lookup
		var watcher discovery.Watcher
		name := dc.Name()
		if dc.IsKubernetes() {
			k := discovery.NewKubernetes(discovery.KubernetesOptions{Service: dc.Kubernetes.Service, Namespace: dc.Kubernetes.Namespace,
				PortName: dc.Kubernetes.Port.Name, PortNumber: dc.Kubernetes.Port.Number, Kubeconfig: dc.Kubernetes.Kubeconfig})
			lookup, watcher, name = k, k, k.Name()
		} else if l, err := discovery.NewDNSLookup(dc.Resolver, resolvConf); err != nil {
			// No resolv.conf to read servers from: the standard
			// library's resolver still works, without TTLs.
			r.opts.Log.Warn("discovery: using the system resolver without TTLs; re-resolving every interval", "pool", pc.Name, "error", err.Error())
			lookup = discovery.StdLookup{}
		} else {
			lookup = l
		}
		d := discovery.New(discovery.Options{Pool: pc.Name, Kind: dc.Kind(), Name: name, Port: dc.Port,
			Interval: dc.Interval.Std(), Lookup: lookup, Watcher: watcher, Now: r.opts.Now, Metrics: r.opts.Metrics, OnEvent: r.logEvent,
			Refuse: r.opts.Refuse(pc.Name, &cfg.Server)})
		if !r.opts.Passive {
			d.Resolve(ctx)
		}
		next[pc.Name] = &Pool{d: d, cfg: *dc}
	}
	return next
}

// Commit makes s the running discoveries: new ones start their loops
// under ctx, replaced and dropped ones stop. Called after the snapshot
// built with s is swapped in.
func (r *Running) Commit(ctx context.Context, s Set) {
	for name, dp := range r.running {
		if s[name] == dp {
			continue
		}
		if dp.cancel != nil {
			dp.cancel()
		}
		dp.d.Stop()
		if s[name] == nil {
			r.opts.Metrics.Forget(name)
		}
	}
	for name, dp := range s {
		if dp.cancel != nil || r.opts.Passive {
			continue
		}
		ctx, cancel := context.WithCancel(ctx)
		dp.cancel = cancel
		go dp.d.Run(ctx, func() { r.opts.Changed(name, dp) })
	}
	r.running = s
}

// Runs reports whether p is pool's running discovery (not one a reload
// replaced meanwhile).
func (r *Running) Runs(pool string, p *Pool) bool { return r.running[pool] == p }

// RefuseSelf is a discovery's Refuse for the gateway whose host has the
// interface addresses local: an answer that names one of the gateway's own
// listeners is refused, logged and counted in refused by pool (a request
// sent there would loop); the rest of the answer is used.
func RefuseSelf(log *slog.Logger, refused *prometheus.CounterVec, local []netip.Addr) func(pool string, sc *policy.Server) func(addr string) bool {
	return func(pool string, sc *policy.Server) func(string) bool {
		return func(addr string) bool {
			which, self := conns.SelfAddr(conns.Listeners(sc.Listen, sc.AdminListen), local, addr)
			if self {
				refused.WithLabelValues(pool).Inc()
				log.Error("discovery: an answer names this gateway's own listener; the address is refused (a request sent there would loop)",
					"pool", pool, "addr", addr, "listener", which)
			}
			return self
		}
	}
}

// logEvent logs a discovery's changes (once per change, see
// discovery.Options.OnEvent).
func (r *Running) logEvent(ev discovery.Event) {
	attrs := []any{"pool", ev.Pool, ev.Kind, ev.Name, "replicas", len(ev.Addrs)}
	switch {
	case ev.Result == discovery.ResultOK && len(ev.Added)+len(ev.Removed) > 0:
		r.opts.Log.Info("discovery: replica set changed", append(attrs, "added", ev.Added, "removed", ev.Removed)...)
	case ev.Result == discovery.ResultOK:
		r.opts.Log.Info("discovery: the name resolves again", attrs...)
	case errors.Is(ev.Err, discovery.ErrNoReadyEndpoints):
		// The API server's own word: the pool is empty (requests get 503
		// naming the Service, or the route's fallback).
		r.opts.Log.Warn("discovery: the Service lists no ready or serving endpoint; the pool has no replica",
			append(attrs, "removed", ev.Removed, "error", ev.Err.Error())...)
	case ev.Result == discovery.ResultEmpty:
		r.opts.Log.Warn("discovery: the name has no address; keeping the last good set", append(attrs, "error", ev.Err.Error())...)
	default:
		r.opts.Log.Error("discovery: resolution failed; keeping the last good set", append(attrs, "error", ev.Err.Error())...)
	}
}

// Replicas are the replicas pool's discovery found, and whether the pool
// is discovered.
func (s Set) Replicas(pool string) ([]pools.ReplicaSpec, bool) {
	dp := s[pool]
	if dp == nil {
		return nil, false
	}
	return dp.d.Replicas(), true
}

// Empty is why a request finds no replica in a discovered pool whose
// source lists none (a Kubernetes Service without a ready or serving
// endpoint, or a name never resolved): ErrNoReplica naming the source, so
// the client's 503 no_replica_available says why, and the route's fallback
// is tried as for a pool without a healthy replica. nil for a pool with
// replicas or without discovery.
func (s Set) Empty(p *pools.Pool) error {
	dp := s[p.Name]
	if dp == nil || len(p.Replicas()) > 0 {
		return nil
	}
	st := dp.d.Status()
	if len(st.Addrs) > 0 || st.Err == "" {
		return nil
	}
	return fmt.Errorf("%w: pool %q has no replica: %s", upstream.ErrNoReplica, p.Name, st.Err)
}

// View is a discovered pool's part of /admin/pools (nil for a pool
// without discovery).
func (s Set) View(pool string) *admin.DiscoveryView {
	dp := s[pool]
	if dp == nil {
		return nil
	}
	st := dp.d.Status()
	v := &admin.DiscoveryView{Kind: st.Kind, Name: st.Name, Resolver: dp.cfg.Resolver, Interval: dp.cfg.Interval.Std().String(),
		Addresses: st.Addrs, Result: st.Result, Error: st.Err}
	if dp.cfg.IsKubernetes() {
		v.Interval = "" // the informer tells every change
	}
	if v.Addresses == nil {
		v.Addresses = []string{}
	}
	if !st.ResolvedAt.IsZero() {
		v.LastResolve = st.ResolvedAt.UTC().Format(time.RFC3339Nano)
	}
	if !st.AttemptAt.IsZero() {
		v.LastAttempt = st.AttemptAt.UTC().Format(time.RFC3339Nano)
	}
	if st.TTL >= 0 && !st.ResolvedAt.IsZero() {
		v.TTL = st.TTL.String()
	}
	return v
}

// Source is where a pool's replicas come from: config, dns, srv or
// kubernetes.
func Source(pc *policy.Pool) string {
	if pc.Discovery != nil {
		return pc.Discovery.Kind()
	}
	return "config"
}

package router

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/switchyard/switchyard/discovery"
	"github.com/switchyard/switchyard/policy"
	"github.com/switchyard/switchyard/router/internal/admin"
	"github.com/switchyard/switchyard/router/internal/upstream"
)

// discoveredPool is a pool's running DNS discovery. It outlives reloads
// that keep the pool's discovery section, so its set (and its endpoints'
// state) carries over.
type discoveredPool struct {
	d   *discovery.Discovery
	cfg policy.Discovery
	// cancel stops its loop; nil until it runs.
	cancel context.CancelFunc
}

// resolvConf is the system resolver's configuration.
var resolvConf = "/etc/resolv.conf"

// discoveries returns the discoveries cfg's pools need: the running one of
// a pool whose section did not change, else a new one, resolved once now
// (so a reload or a start serves the names' replicas at once). New ones
// run only once committed. Called with reloadMu held (or from New).
func (g *Gateway) discoveries(cfg *policy.Config) map[string]*discoveredPool {
	next := map[string]*discoveredPool{}
	for _, pc := range cfg.Pools {
		dc := pc.Discovery
		if dc == nil {
			continue
		}
		if old := g.disc[pc.Name]; old != nil && old.cfg == *dc {
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
			g.log.Warn("discovery: using the system resolver without TTLs; re-resolving every interval", "pool", pc.Name, "error", err.Error())
			lookup = discovery.StdLookup{}
		} else {
			lookup = l
		}
		d := discovery.New(discovery.Options{Pool: pc.Name, Kind: dc.Kind(), Name: name, Port: dc.Port,
			Interval: dc.Interval.Std(), Lookup: lookup, Watcher: watcher, Now: g.opts.Now, Metrics: g.discMetrics, OnEvent: g.onDiscovery,
			Refuse: g.refuseSelf(pc.Name, &cfg.Server)})
		if !g.opts.Passive {
			d.Resolve(g.ctx)
		}
		next[pc.Name] = &discoveredPool{d: d, cfg: *dc}
	}
	return next
}

// commitDiscovery makes s's discoveries the running ones: new ones start
// their loops, replaced and dropped ones stop. Called with reloadMu held
// (or from New), after s is swapped in.
func (g *Gateway) commitDiscovery(s *Snapshot) {
	for name, dp := range g.disc {
		if s.discovery[name] == dp {
			continue
		}
		if dp.cancel != nil {
			dp.cancel()
		}
		dp.d.Stop()
		if s.discovery[name] == nil {
			g.discMetrics.Forget(name)
		}
	}
	for name, dp := range s.discovery {
		if dp.cancel != nil || g.opts.Passive {
			continue
		}
		ctx, cancel := context.WithCancel(g.ctx)
		dp.cancel = cancel
		go dp.d.Run(ctx, func() { g.rediscover(name, dp) })
	}
	g.disc = s.discovery
}

// rediscover rebuilds the running snapshot from its own config after a
// resolution changed a pool's set: the registry adds the new addresses
// (probing until a probe passes) and retires the vanished ones (no new
// requests; those in flight finish), and waiters follow the new view. It
// is serialised with reloads; a discovery a reload replaced meanwhile is
// ignored. The generation stays: the config did not change.
func (g *Gateway) rediscover(pool string, dp *discoveredPool) {
	g.reloadMu.Lock()
	defer g.reloadMu.Unlock()
	if g.disc[pool] != dp {
		return
	}
	prev := g.snap.Load()
	s, err := g.build(prev.Config, prev)
	if err != nil {
		g.log.Error("discovery: the new replica set could not be applied; the running set keeps serving", "pool", pool, "error", err.Error())
		return
	}
	s.Generation = prev.Generation
	g.snap.Store(s)
	g.commitDiscovery(s)
}

// onDiscovery logs a discovery's changes (once per change, see
// discovery.Options.OnEvent).
func (g *Gateway) onDiscovery(ev discovery.Event) {
	attrs := []any{"pool", ev.Pool, ev.Kind, ev.Name, "replicas", len(ev.Addrs)}
	switch {
	case ev.Result == discovery.ResultOK && len(ev.Added)+len(ev.Removed) > 0:
		g.log.Info("discovery: replica set changed", append(attrs, "added", ev.Added, "removed", ev.Removed)...)
	case ev.Result == discovery.ResultOK:
		g.log.Info("discovery: the name resolves again", attrs...)
	case errors.Is(ev.Err, discovery.ErrNoReadyEndpoints):
		// The API server's own word: the pool is empty (requests get 503
		// naming the Service, or the route's fallback).
		g.log.Warn("discovery: the Service lists no ready or serving endpoint; the pool has no replica",
			append(attrs, "removed", ev.Removed, "error", ev.Err.Error())...)
	case ev.Result == discovery.ResultEmpty:
		g.log.Warn("discovery: the name has no address; keeping the last good set", append(attrs, "error", ev.Err.Error())...)
	default:
		g.log.Error("discovery: resolution failed; keeping the last good set", append(attrs, "error", ev.Err.Error())...)
	}
}

// emptyPool is why a request finds no replica in a discovered pool whose
// source lists none (a Kubernetes Service without a ready or serving
// endpoint, or a name never resolved): ErrNoReplica naming the source, so
// the client's 503 no_replica_available says why, and the route's fallback
// is tried as for a pool without a healthy replica. nil for a pool with
// replicas or without discovery.
func (s *Snapshot) emptyPool(ps *poolState) error {
	dp := s.discovery[ps.Name]
	if dp == nil || len(ps.Replicas()) > 0 {
		return nil
	}
	st := dp.d.Status()
	if len(st.Addrs) > 0 || st.Err == "" {
		return nil
	}
	return fmt.Errorf("%w: pool %q has no replica: %s", upstream.ErrNoReplica, ps.Name, st.Err)
}

// discoveryView is a discovered pool's part of /admin/pools.
func (s *Snapshot) discoveryView(pool string) *admin.DiscoveryView {
	dp := s.discovery[pool]
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

// replicaSource is where a pool's replicas come from: config, dns, srv or
// kubernetes.
func replicaSource(pc *policy.Pool) string {
	if pc.Discovery != nil {
		return pc.Discovery.Kind()
	}
	return "config"
}

package router

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"reflect"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/switchyard/switchyard/classifier"
	"github.com/switchyard/switchyard/discovery"
	"github.com/switchyard/switchyard/policy"
	"github.com/switchyard/switchyard/policy/routing"
	"github.com/switchyard/switchyard/pools"
	"github.com/switchyard/switchyard/router/internal/admin"
	"github.com/switchyard/switchyard/router/internal/conns"
	"github.com/switchyard/switchyard/router/internal/discoveries"
	"github.com/switchyard/switchyard/router/internal/keys"
	"github.com/switchyard/switchyard/router/internal/metrics"
	"github.com/switchyard/switchyard/router/internal/outcomes"
	"github.com/switchyard/switchyard/router/internal/recorder"
	"github.com/switchyard/switchyard/router/internal/shadow"
	"github.com/switchyard/switchyard/router/internal/upstream"
)

// The running configuration: New starts a gateway on a config, Reload
// and Apply swap in another, and a discovery's change of replicas
// rebuilds the running one; each builds an immutable Snapshot and swaps
// it in.

// New builds a gateway running cfg and starts its health and scrape loops.
func New(cfg *policy.Config, o Options) (*Gateway, error) {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Registry == nil {
		o.Registry = prometheus.NewRegistry()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	rnd := o.Rand
	if rnd == nil {
		rnd = rand.Uint64
	}
	tp := o.Tracer
	if tp == nil {
		// Without a configured provider tracing must cost nothing: otel's
		// global delegate still allocates spans, noop does not.
		tp = noop.NewTracerProvider()
	}
	if o.Propagator == nil {
		o.Propagator = propagation.TraceContext{}
	}
	g := &Gateway{opts: o, log: o.Logger, reg: o.Registry, tracer: tp.Tracer("github.com/switchyard/switchyard/router"),
		tracing: o.Tracer != nil, prop: o.Propagator, rand: rnd, via: upstream.NewVia(), local: conns.LocalAddrs()}
	g.metrics = metrics.New(o.Registry, o.Version)
	g.exec = &upstream.Executor{QueueWait: g.metrics.QueueWait, Retries: g.metrics.Retries, Poison: g.metrics.Poison, Rand: rnd}
	g.classMetrics = classifier.NewMetrics(o.Registry)
	g.discs = discoveries.New(discoveries.Options{Log: o.Logger, Now: o.Now, Metrics: discovery.NewMetrics(o.Registry),
		Passive: o.Passive, Refuse: discoveries.RefuseSelf(o.Logger, g.metrics.DiscoverySelf, g.local), Changed: g.rediscover})
	o.Registry.MustRegister(metrics.NewControlCollector(func() (metrics.ControlState, bool) {
		s := g.snap.Load()
		if s == nil || s.Policy == nil || s.Policy.Controller() == nil {
			return metrics.ControlState{}, false
		}
		c := s.Policy.Controller()
		return metrics.ControlState{Pool: c.Pool(), Target: c.Target(), Share: c.Share(), Threshold: c.Threshold()}, true
	}))
	o.Registry.MustRegister(metrics.NewReplicaCollector(func() []*pools.Pool {
		if s := g.snap.Load(); s != nil {
			return s.poolList()
		}
		return nil
	}))
	g.ctx, g.stop = context.WithCancel(context.Background())
	g.status, g.started = &admin.Ring{Gather: o.Registry}, o.Now()
	now := o.Now().Unix()
	g.status.Prepare(now)
	g.status.Prepare(now + 1)
	g.status.Prepare(now + 2)
	// The counters' first sample, before any request: the page's rates
	// over the uptime count every request (Run samples once a second).
	g.status.SampleClassifier(g.started)
	go g.status.Run(g.ctx, o.Now)
	g.endpoints = pools.NewEndpoints(pools.EndpointsOptions{Now: o.Now, Rand: o.Rand, Transport: o.Transport,
		OnChange: g.onHealthChange, OnMissing: g.onMissingSignals})
	s, err := g.build(cfg, nil)
	if err != nil {
		g.stop()
		return nil, err
	}
	s.Generation = g.gen.Add(1)
	g.metrics.Generation.Set(float64(s.Generation))
	g.snap.Store(s)
	g.discs.Commit(g.ctx, s.discovery)
	s.recorder.Configure(g.ctx, captureConfig(cfg))
	if o.ShadowPath != "" {
		if err := g.loadShadow(); err != nil {
			g.stop()
			return nil, fmt.Errorf("shadow policy: %w", err)
		}
	}
	if !o.Passive {
		g.endpoints.Start(g.ctx)
	}
	return g, nil
}

// Reload re-reads the config file and applies it. An invalid file leaves the
// running config in place and returns the validation errors.
func (g *Gateway) Reload() (int64, error) {
	if g.opts.ConfigPath == "" {
		return 0, errors.New("reload: no config file (the gateway runs an embedded config)")
	}
	cfg, err := LoadConfig(g.opts.ConfigPath)
	if err == nil {
		if g.opts.Override != nil {
			cfg = g.opts.Override(cfg)
		}
		err = restartKeys(g.snap.Load().Config, cfg)
	}
	if err != nil {
		g.metrics.Reloads.WithLabelValues("error").Inc()
		g.log.Error("config reload refused; the running config keeps serving", "file", g.opts.ConfigPath, "error", err.Error())
		g.lastReload.Store(&admin.ReloadOutcome{At: g.opts.Now().UTC(), OK: false, Error: err.Error()})
		return g.snap.Load().Generation, err
	}
	gen, err := g.Apply(cfg)
	if err == nil && g.opts.ShadowPath != "" {
		// The shadow is re-read with the config; a bad shadow file leaves
		// the previous shadow running and the live config applied.
		if serr := g.loadShadow(); serr != nil {
			g.log.Error("shadow policy reload refused; the previous shadow keeps running", "file", g.opts.ShadowPath, "error", serr.Error())
		}
	}
	return gen, err
}

// restartKeys refuses a reload that changes what is fixed when the
// listeners start: their addresses and connection timeouts. Applying the
// rest would leave the served config saying one thing while the process
// does another.
func restartKeys(running, next *policy.Config) error {
	a, b := running.Server, next.Server
	var errs policy.Errors
	for _, k := range []struct {
		key      string
		was, now string
	}{
		{"listen", a.Listen, b.Listen},
		{"admin_listen", a.AdminListen, b.AdminListen},
		{"read_header_timeout", a.ReadHeaderTimeout.Std().String(), b.ReadHeaderTimeout.Std().String()},
		{"idle_timeout", a.IdleTimeout.Std().String(), b.IdleTimeout.Std().String()},
	} {
		if k.was != k.now {
			line, col := next.Position("server", k.key)
			errs = append(errs, &policy.Error{File: next.File, Line: line, Col: col,
				Msg: fmt.Sprintf("server: %s changed from %s to %s: it is fixed when the listeners start; restart switchyard to change it", k.key, k.was, k.now)})
		}
	}
	if len(errs) > 0 {
		return errs
	}
	return nil
}

// Apply swaps in cfg: build (which reconciles the endpoint registry) →
// swap. Requests in flight finish on the snapshot they started with;
// replicas that stay keep their state (in-flight counts, queues, health),
// whatever else changed.
func (g *Gateway) Apply(cfg *policy.Config) (int64, error) {
	g.reloadMu.Lock()
	defer g.reloadMu.Unlock()
	prev := g.snap.Load()
	s, err := g.build(cfg, prev)
	if err != nil {
		g.metrics.Reloads.WithLabelValues("error").Inc()
		g.log.Error("config reload failed; the running config keeps serving", "error", err.Error())
		g.lastReload.Store(&admin.ReloadOutcome{At: g.opts.Now().UTC(), OK: false, Error: err.Error()})
		return prev.Generation, err
	}
	s.Generation = g.gen.Add(1)
	g.snap.Store(s)
	g.discs.Commit(g.ctx, s.discovery)
	s.recorder.Configure(g.ctx, captureConfig(cfg))
	g.lastReload.Store(&admin.ReloadOutcome{At: g.opts.Now().UTC(), OK: true, Generation: s.Generation})
	g.metrics.Reloads.WithLabelValues("ok").Inc()
	g.metrics.Generation.Set(float64(s.Generation))
	g.log.Info("config reloaded", "file", cfg.File, "generation", s.Generation, "pools", len(s.poolOrder), "routes", len(cfg.Routes))
	return s.Generation, nil
}

// rediscover rebuilds the running snapshot from its own config after a
// resolution changed a pool's set: the registry adds the new addresses
// (probing until a probe passes) and retires the vanished ones (no new
// requests; those in flight finish), and waiters follow the new view. It
// is serialised with reloads; a discovery a reload replaced meanwhile is
// ignored. The generation stays: the config did not change.
func (g *Gateway) rediscover(pool string, dp *discoveries.Pool) {
	g.reloadMu.Lock()
	defer g.reloadMu.Unlock()
	if !g.discs.Runs(pool, dp) {
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
	g.discs.Commit(g.ctx, s.discovery)
}

func (g *Gateway) onHealthChange(r *pools.Replica, healthy bool, why string) {
	if healthy {
		g.log.Info("replica healthy", "pool", r.Pool, "replica", r.Name, "why", why)
	} else {
		g.log.Warn("replica out of rotation", "pool", r.Pool, "replica", r.Name, "why", why)
	}
}

func (g *Gateway) onMissingSignals(r *pools.Replica, missing []string) {
	g.log.Warn("replica metrics lack load signals; balancing it on in-flight alone for those", "pool", r.Pool, "replica", r.Name, "missing", missing)
}

// captureConfig is the recorder's config from cfg's capture: section (nil:
// off). The headers kept are the session ids agents send, the configured
// session header and the Messages API's version: never a key.
func captureConfig(cfg *policy.Config) *recorder.Config {
	c := cfg.Capture
	if c == nil {
		return nil
	}
	headers := append([]string{"anthropic-version", "prompt-cache-key"}, sessionHeaders[:]...)
	if se := cfg.Session; se != nil && se.Header != "" && !isSecretHeader(se.Header) {
		headers = append(headers, se.Header)
	}
	return &recorder.Config{Dir: c.Dir, Keys: c.Keys, Sample: c.Sample, MaxFileBytes: int64(c.MaxFileSize), MaxFiles: c.MaxFiles, Headers: headers}
}

// isSecretHeader reports whether a header carries credentials.
func isSecretHeader(name string) bool {
	switch strings.ToLower(name) {
	case "authorization", "proxy-authorization", "x-api-key", "api-key", "cookie":
		return true
	}
	return false
}

// build makes a snapshot from cfg, reusing pools, limiters and sessions of
// prev where their configuration did not change.
func (g *Gateway) build(cfg *policy.Config, prev *Snapshot) (*Snapshot, error) {
	s := &Snapshot{Config: cfg, pools: map[string]*poolState{}, models: map[string]target{}}
	// One recorder for the gateway's life, handed from snapshot to
	// snapshot; Apply configures it once the snapshot is running.
	if prev != nil {
		s.recorder = prev.recorder
	} else {
		s.recorder = recorder.New(g.log, func() float64 { return float64(g.rand()>>11) / (1 << 53) }, g.opts.Now, g.metrics.CaptureDropped, g.metrics.CaptureLines)
	}
	if err := checkSelfReplicas(cfg, g.local); err != nil {
		return nil, err
	}
	if cl := cfg.Classifier; cl != nil {
		// An unchanged classifier sending to a pool of the same model keeps
		// its cache; it reaches the pool by name through the running
		// snapshot, so it follows the pool across reloads.
		if prev != nil && prev.classifier != nil && reflect.DeepEqual(prev.Config.Classifier, cl) &&
			(cl.Kind != "model" || prev.pools[cl.Pool] != nil && prev.pools[cl.Pool].Model == cfg.Pools.Get(cl.Pool).Model) {
			s.classifier = prev.classifier
		}
	}
	if cl := cfg.Classifier; cl != nil && s.classifier == nil {
		c, err := g.buildClassifier(cl, s)
		if err != nil {
			return nil, err
		}
		s.classifier = c
	}
	opts := make([]pools.Options, len(cfg.Pools))
	s.discovery = g.discs.Next(g.ctx, cfg)
	for i, pc := range cfg.Pools {
		opts[i] = poolOptions(pc, cfg)
		if reps, ok := s.discovery.Replicas(pc.Name); ok {
			opts[i].Replicas = reps
		}
	}
	// Reconciling the registry is the last step that can fail, and it
	// fails before changing anything. Endpoints the old snapshot still
	// uses but the new one drops are retired at once (no new requests;
	// those in flight finish), before the swap.
	views, err := g.endpoints.Apply(opts)
	if err != nil {
		return nil, err
	}
	for i, pc := range cfg.Pools {
		ps := &poolState{Pool: views[i], cfg: pc, timeouts: upstream.NewTimeouts(pc.ResponseHeaderTimeout.Std(),
			pc.FirstTokenTimeout.Std(), pc.StreamIdleTimeout.Std(), pc.MaxStreamDuration.Std())}
		s.pools[pc.Name] = ps
		s.poolOrder = append(s.poolOrder, ps)
	}
	for _, ps := range s.poolOrder {
		s.models[ps.Name] = target{pool: ps}
		if _, taken := s.models[ps.Model]; !taken {
			s.models[ps.Model] = target{pool: ps}
		}
	}
	for _, m := range cfg.Models {
		t := target{policy: m.Pool == "", rewrite: m.RewriteResponseModel}
		if m.Pool != "" {
			t.pool = s.pools[m.Pool]
		}
		if m.IsPattern() {
			s.patterns = append(s.patterns, modelPattern{pattern: m.Name, target: t})
		} else {
			s.models[m.Name] = t
		}
	}
	var prevKeys keys.Set
	if prev != nil {
		prevKeys = prev.keys
	}
	s.keys = keys.Build(cfg, prevKeys)
	s.idSecret = responseIDSecret(&cfg.Server)
	s.Policy = routing.New(cfg, g.policyOptions(cfg, prev, s)...)
	if r := cfg.Server.Readiness; r != nil {
		s.required = r.RequirePools
	}
	return s, nil
}

// policyOptions are the policy's session store, random source and share
// controller; the store and the controller outlive a reload that keeps
// their settings.
func (g *Gateway) policyOptions(cfg *policy.Config, prev *Snapshot, s *Snapshot) []routing.Option {
	var popts []routing.Option
	if se := cfg.Session; se != nil {
		if prev != nil && prev.sessions != nil && reflect.DeepEqual(prev.Config.Session, se) {
			s.sessions, s.outcomes = prev.sessions, prev.outcomes
		} else {
			s.sessions = routing.NewSessions(se.Size, se.TTL.Std(), g.opts.Now)
			s.outcomes = outcomes.New(se.Size, g.metrics.TurnOutcomes)
		}
		popts = append(popts, routing.WithSessions(s.sessions))
	}
	if g.opts.Rand != nil {
		popts = append(popts, routing.WithRand(g.opts.Rand))
	}
	if ctl := cfg.Control; ctl != nil && ctl.Share != nil {
		// The controller (its threshold and measurements) outlives a
		// reload that keeps its settings.
		var c *routing.Controller
		if prev != nil && prev.Policy != nil && prev.Config.Control != nil && reflect.DeepEqual(prev.Config.Control.Share, ctl.Share) {
			c = prev.Policy.Controller()
		}
		if c == nil {
			o := routing.ControlOptionsFor(ctl.Share)
			o.Now = g.opts.Now
			pool := ctl.Share.Pool
			o.Load = func() float64 { return g.utilization(pool) }
			c = routing.NewController(o)
		}
		popts = append(popts, routing.WithController(c))
	}
	return popts
}

func (g *Gateway) buildClassifier(cl *policy.Classifier, s *Snapshot) (*classifier.Classifier, error) {
	o := classifier.Options{
		Kind: cl.Kind, Labels: cl.Labels, Descriptions: cl.Descriptions, MaxInputChars: cl.MaxInputChars,
		Timeout: cl.Timeout.Std(), OnError: cl.OnError, CacheSize: cl.Cache.Size, CacheTTL: cl.Cache.TTL.Std(),
		Concurrency: cl.Concurrency, GuidedChoice: cl.GuidedChoice, Prompt: cl.Prompt, Metrics: g.classMetrics,
		BreakerFailures: cl.Breaker.Failures, BreakerCooldown: cl.Breaker.Cooldown.Std(), Now: g.opts.Now,
		OnBreaker: func(open bool, err error) {
			if open {
				g.log.Error("classifier circuit opened: not calling the classifier pool; using on_error", "pool", cl.Pool,
					"label", cl.OnError, "cooldown", cl.Breaker.Cooldown.Std().String(), "error", fmt.Sprint(err))
			} else {
				g.log.Info("classifier circuit closed: the classifier pool answers again", "pool", cl.Pool)
			}
		},
	}
	if cl.Kind == "model" {
		o.Model = s.Config.Pools.Get(cl.Pool).Model
		o.Transport = &poolTransport{g: g, pool: cl.Pool}
	}
	return classifier.New(o)
}

// utilization is a pool's in-flight and queued requests over its slots
// (max_inflight per available replica): 1 is full, above 1 a queue.
func (g *Gateway) utilization(pool string) float64 {
	ps := g.snap.Load().pools[pool]
	if ps == nil || ps.MaxInflight() <= 0 {
		return 0
	}
	var busy int64
	slots := 0
	now := g.opts.Now()
	for _, r := range ps.Replicas() {
		busy += r.Inflight() + r.Waiting()
		if r.Available(now) {
			slots += ps.MaxInflight()
		}
	}
	if slots == 0 {
		return 2 // nothing available: as saturated as it gets
	}
	return float64(busy) / float64(slots)
}

// loadShadow reads the shadow policy file and runs it (see shadow.New).
func (g *Gateway) loadShadow() error {
	path := g.opts.ShadowPath
	cfg, err := LoadConfig(path)
	if err != nil {
		return err
	}
	sh, err := shadow.New(path, cfg, g.snap.Load().Config, g.shadow.Load(), g.metrics.Shadow)
	if err != nil {
		return err
	}
	g.shadow.Store(sh)
	g.log.Info("shadow policy loaded", "file", path, "generation", sh.Generation(), "routes", len(cfg.Routes))
	return nil
}

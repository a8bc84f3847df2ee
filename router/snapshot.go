package router

import (
	"crypto/sha256"
	"fmt"
	"path"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/switchyard/switchyard/router/internal/discoveries"
	"github.com/switchyard/switchyard/router/internal/keys"
	"github.com/switchyard/switchyard/router/internal/outcomes"
	"github.com/switchyard/switchyard/router/internal/recorder"

	"github.com/switchyard/switchyard/router/internal/upstream"

	"github.com/switchyard/switchyard/classifier"
	"github.com/switchyard/switchyard/policy"
	"github.com/switchyard/switchyard/pools"
)

// LoadOptions is the set of strategy names the config may use, drawn from the
// packages that own them.
func LoadOptions() policy.LoadOptions {
	return policy.LoadOptions{Balancers: pools.Balancers(), Classifiers: classifier.Kinds()}
}

// LoadConfig reads and validates a config file.
func LoadConfig(path string) (*policy.Config, error) {
	return policy.LoadFile(path, LoadOptions())
}

// Snapshot is one immutable running configuration: everything a request
// needs, built from one Config. Requests keep the snapshot they started
// with across reloads.
type Snapshot struct {
	Config     *policy.Config
	Generation int64
	Policy     *policy.Policy

	pools     map[string]*poolState
	poolOrder []*poolState
	models    map[string]target
	patterns  []modelPattern
	keys      keys.Set
	// idSecret signs the stored-response ids clients see (see ids).
	idSecret   []byte
	classifier *classifier.Classifier
	sessions   *policy.Sessions
	// recorder writes the requests capture: chooses (off without it).
	recorder *recorder.Recorder
	// outcomes keeps each session's last answered turn, to count how it
	// went (nil without sessions); it lives as long as sessions.
	outcomes *outcomes.Tracker
	// required are the pools /readyz needs an available replica in.
	required []string
	// discovery are the discovered pools' discoveries, by pool name.
	discovery discoveries.Set
}

// poolState is a pool as this snapshot runs it: the pool view (its replicas
// point into the gateway's endpoint registry) and its config.
type poolState struct {
	*pools.Pool
	cfg      *policy.Pool
	timeouts *upstream.Timeouts
	// tokenizeTurn rotates the context check's /tokenize calls among
	// equally loaded replicas.
	tokenizeTurn atomic.Uint64
}

// target is what a client-visible model name resolves to.
type target struct {
	policy bool
	pool   *poolState
	// rewrite writes the client's model name into the answer.
	rewrite bool
}

// modelPattern is a models[] entry whose name is a glob pattern.
type modelPattern struct {
	pattern string
	target  target
}

// resolve finds where a client model name goes: a pool or served model
// name, then an exact models[] name, then the first models[] pattern it
// matches.
func (s *Snapshot) resolve(name string) (target, bool) {
	if t, ok := s.models[name]; ok {
		return t, true
	}
	for _, p := range s.patterns {
		if ok, _ := path.Match(p.pattern, name); ok {
			return p.target, true
		}
	}
	return target{}, false
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
	s.Policy = policy.New(cfg, g.policyOptions(cfg, prev, s)...)
	if r := cfg.Server.Readiness; r != nil {
		s.required = r.RequirePools
	}
	return s, nil
}

// poolList returns the pools in file order.
func (s *Snapshot) poolList() []*pools.Pool {
	out := make([]*pools.Pool, len(s.poolOrder))
	for i, ps := range s.poolOrder {
		out[i] = ps.Pool
	}
	return out
}

// scrapes reports whether a pool reads its replicas' vLLM metrics: its
// balancer needs them, or a route spills out of it on queue depth.
func scrapes(cfg *policy.Config, pc *policy.Pool) bool {
	return pools.ReadsMetrics(pc.Balance) || spillsFrom(cfg, pc.Name)
}

// poolOptions maps a validated pool config to the pools package's options.
// The config carries every default; nothing is defaulted here.
func poolOptions(pc *policy.Pool, cfg *policy.Config) pools.Options {
	od := pc.Outlier
	o := pools.Options{
		Name: pc.Name, Model: pc.Model, Balance: pc.Balance, MaxInflight: pc.MaxInflight,
		QueueTimeout: pc.QueueTimeout.Std(), ShareReserve: pc.ShareReserve.Std(), ConnectTimeout: pc.ConnectTimeout.Std(),
		LoadFactor: pc.Affinity.LoadFactor, Staleness: pc.Scrape.Staleness.Std(), APIKey: string(pc.APIKey),
		Health: pools.HealthOptions{
			Disabled: pc.Health.Disabled, Path: pc.Health.Path, Interval: pc.Health.Interval.Std(),
			Timeout: pc.Health.Timeout.Std(), UnhealthyAfter: pc.Health.UnhealthyAfter,
			HealthyAfter: pc.Health.HealthyAfter, CheckModels: pc.Health.CheckModels,
		},
		Outlier: pools.OutlierOptions{
			Consecutive5xx: od.Consecutive5xx, ConsecutiveConnectFailures: od.ConsecutiveConnectFailures,
			MaxEjectionPercent: od.MaxEjectionPercent, BaseEjection: od.BaseEjection.Std(),
			MaxEjection: od.MaxEjection.Std(), CountTimeouts: od.CountTimeouts,
		},
		Scrape: pools.ScrapeOptions{
			Enabled: scrapes(cfg, pc), Path: pc.Scrape.Path, Interval: pc.Scrape.Interval.Std(), Timeout: pc.Scrape.Timeout.Std(),
		},
	}
	for _, r := range pc.Replicas {
		o.Replicas = append(o.Replicas, pools.ReplicaSpec{Name: r.Name, URL: r.Parsed, Nodes: r.Nodes})
	}
	if cl := cfg.Classifier; cl != nil && cl.Pool == pc.Name {
		o.Reserved = cl.ReservedSlots
	}
	return o
}

// spillsFrom reports whether a route spills out of pool, which needs the
// replicas' queue depth.
func spillsFrom(cfg *policy.Config, pool string) bool {
	for _, r := range cfg.Routes {
		if r.Spill == nil {
			continue
		}
		if r.To == pool {
			return true
		}
		for _, e := range r.Split {
			if e.Pool == pool {
				return true
			}
		}
	}
	return false
}

// policyOptions are the policy's session store, random source and share
// controller; the store and the controller outlive a reload that keeps
// their settings.
func (g *Gateway) policyOptions(cfg *policy.Config, prev *Snapshot, s *Snapshot) []policy.Option {
	var popts []policy.Option
	if se := cfg.Session; se != nil {
		if prev != nil && prev.sessions != nil && reflect.DeepEqual(prev.Config.Session, se) {
			s.sessions, s.outcomes = prev.sessions, prev.outcomes
		} else {
			s.sessions = policy.NewSessions(se.Size, se.TTL.Std(), g.opts.Now)
			s.outcomes = outcomes.New(se.Size, g.metrics.TurnOutcomes)
		}
		popts = append(popts, policy.WithSessions(s.sessions))
	}
	if g.opts.Rand != nil {
		popts = append(popts, policy.WithRand(g.opts.Rand))
	}
	if ctl := cfg.Control; ctl != nil && ctl.Share != nil {
		// The controller (its threshold and measurements) outlives a
		// reload that keeps its settings.
		var c *policy.Controller
		if prev != nil && prev.Policy != nil && prev.Config.Control != nil && reflect.DeepEqual(prev.Config.Control.Share, ctl.Share) {
			c = prev.Policy.Controller()
		}
		if c == nil {
			o := ctl.Share.Options()
			o.Now = g.opts.Now
			pool := ctl.Share.Pool
			o.Load = func() float64 { return g.utilization(pool) }
			c = policy.NewController(o)
		}
		popts = append(popts, policy.WithController(c))
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

// readiness reports why the snapshot is not ready ("" when it is): a pool
// named in server.readiness.require_pools has no available replica. Pools
// are not otherwise part of readiness: a pod that turns unready because a
// backend is down takes every gateway pod out of the Service at once.
func (s *Snapshot) readiness() string {
	var down []string
	for _, name := range s.required {
		if ps := s.pools[name]; ps != nil && ps.HealthyCount() == 0 {
			down = append(down, name)
		}
	}
	if len(down) > 0 {
		return fmt.Sprintf("no available replica in required pool(s) %s", strings.Join(down, ", "))
	}
	return ""
}

// Pool returns the running pool called name, or nil.
func (s *Snapshot) Pool(name string) *pools.Pool {
	if ps := s.pools[name]; ps != nil {
		return ps.Pool
	}
	return nil
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

// responseIDSecret is the secret of the deployment's response ids:
// server.response_id_secret_env's value, else a digest of the API keys'
// values (unknown to any one client when there are several keys), else,
// without keys, a constant (ids are then bound to nothing but their
// replica, as every client may use every id).
func responseIDSecret(sc *policy.Server) []byte {
	h := sha256.New()
	h.Write([]byte("switchyard response ids\x00"))
	if sc.ResponseIDSecret != "" {
		h.Write([]byte(sc.ResponseIDSecret))
		return h.Sum(nil)
	}
	secrets := make([]string, 0, len(sc.APIKeys))
	for _, k := range sc.APIKeys {
		secrets = append(secrets, string(k.Secret))
	}
	slices.Sort(secrets)
	for _, k := range secrets {
		h.Write([]byte(k))
		h.Write([]byte{0})
	}
	return h.Sum(nil)
}

package router

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"net/http"
	"reflect"
	"strings"

	"golang.org/x/time/rate"

	"github.com/switchyard/switchyard/classifier"
	"github.com/switchyard/switchyard/policy"
	"github.com/switchyard/switchyard/pools"
)

// Registry is the set of strategy names the config may use, drawn from the
// packages that own them.
func Registry() policy.Registry {
	return policy.Registry{Balancers: pools.Balancers(), Classifiers: classifier.Kinds()}
}

// LoadConfig reads and validates a config file.
func LoadConfig(path string) (*policy.Config, error) {
	return policy.LoadFile(path, Registry())
}

// Snapshot is one immutable running configuration: everything a request
// needs, built from one Config. Requests keep the snapshot they started
// with across reloads.
type Snapshot struct {
	Config     *policy.Config
	Generation int64
	Policy     *policy.Policy

	pools      map[string]*poolState
	poolOrder  []*poolState
	models     map[string]target
	keys       []*apiKey
	classifier *classifier.Classifier
	sessions   *policy.Sessions
	// reachable are the pools some route or model can send to (readiness).
	reachable []string
}

type poolState struct {
	*pools.Pool
	cfg *policy.Pool
	// spec fingerprints the pool's build options: an unchanged spec on
	// reload keeps the same *pools.Pool, its in-flight counts and health.
	spec   string
	cancel context.CancelFunc
}

// target is what a client-visible model name resolves to.
type target struct {
	policy bool
	pool   *poolState
}

type apiKey struct {
	name    string
	sum     [32]byte
	models  policy.StringList
	limiter *rate.Limiter
	rate    *policy.Rate
}

// build makes a snapshot from cfg, reusing pools, limiters and sessions of
// prev where their configuration did not change.
func (g *Gateway) build(cfg *policy.Config, prev *Snapshot) (*Snapshot, error) {
	s := &Snapshot{Config: cfg, pools: map[string]*poolState{}, models: map[string]target{}}
	for _, pc := range cfg.Pools {
		spec := poolSpec(pc, cfg)
		if prev != nil {
			if old, ok := prev.pools[pc.Name]; ok && old.spec == spec {
				ps := &poolState{Pool: old.Pool, cfg: pc, spec: spec, cancel: old.cancel}
				s.pools[pc.Name] = ps
				s.poolOrder = append(s.poolOrder, ps)
				continue
			}
		}
		o := g.poolOptions(pc, cfg)
		if prev != nil {
			if old, ok := prev.pools[pc.Name]; ok {
				o.Previous = old.Pool
			}
		}
		p, err := pools.New(o)
		if err != nil {
			s.stopNew(prev)
			return nil, err
		}
		ps := &poolState{Pool: p, cfg: pc, spec: spec}
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
		s.models[m.Name] = target{policy: true}
	}
	for _, k := range cfg.Server.APIKeys {
		ak := &apiKey{name: k.Name, sum: sha256.Sum256([]byte(k.Secret)), models: k.Models, rate: k.Rate}
		if k.Rate != nil {
			if old := prev.key(k.Name); old != nil && reflect.DeepEqual(old.rate, k.Rate) {
				ak.limiter = old.limiter
			} else {
				ak.limiter = rate.NewLimiter(rate.Limit(k.Rate.RPS), k.Rate.Burst)
			}
		}
		s.keys = append(s.keys, ak)
	}
	var popts []policy.Option
	if se := cfg.Session; se != nil {
		if prev != nil && prev.sessions != nil && reflect.DeepEqual(prev.Config.Session, se) {
			s.sessions = prev.sessions
		} else {
			s.sessions = policy.NewSessions(se.Size, se.TTL.Std(), g.opts.Now)
		}
		popts = append(popts, policy.WithSessions(s.sessions))
	}
	if g.opts.Rand != nil {
		popts = append(popts, policy.WithRand(g.opts.Rand))
	}
	s.Policy = policy.New(cfg, popts...)
	if cl := cfg.Classifier; cl != nil {
		// An unchanged classifier on an unchanged pool keeps its cache.
		if prev != nil && prev.classifier != nil && reflect.DeepEqual(prev.Config.Classifier, cl) &&
			(cl.Kind != "model" || prev.pools[cl.Pool] != nil && s.pools[cl.Pool].Pool == prev.pools[cl.Pool].Pool) {
			s.classifier = prev.classifier
		}
	}
	if cl := cfg.Classifier; cl != nil && s.classifier == nil {
		c, err := g.buildClassifier(cl, s)
		if err != nil {
			s.stopNew(prev)
			return nil, err
		}
		s.classifier = c
	}
	s.reachable = reachablePools(cfg)
	return s, nil
}

// start runs health and scrape loops for pools this snapshot created.
func (s *Snapshot) start(ctx context.Context) {
	for _, ps := range s.poolOrder {
		if ps.cancel != nil {
			continue
		}
		pctx, cancel := context.WithCancel(ctx)
		ps.cancel = cancel
		go ps.RunHealth(pctx)
		go ps.RunScrape(pctx)
	}
}

// retire stops the loops of prev's pools that s no longer uses. Requests
// still running on prev keep working: a pool's client outlives its loops.
func (s *Snapshot) retire(prev *Snapshot) {
	if prev == nil {
		return
	}
	for name, old := range prev.pools {
		if cur, ok := s.pools[name]; ok && cur.Pool == old.Pool {
			continue
		}
		if old.cancel != nil {
			old.cancel()
		}
	}
}

// stopNew cancels loops of pools built for a snapshot that is abandoned.
func (s *Snapshot) stopNew(prev *Snapshot) {
	for _, ps := range s.poolOrder {
		if prev != nil {
			if old, ok := prev.pools[ps.Name]; ok && old.Pool == ps.Pool {
				continue
			}
		}
		if ps.cancel != nil {
			ps.cancel()
		}
	}
}

func (s *Snapshot) key(name string) *apiKey {
	if s == nil {
		return nil
	}
	for _, k := range s.keys {
		if k.name == name {
			return k
		}
	}
	return nil
}

// poolList returns the pools in file order.
func (s *Snapshot) poolList() []*pools.Pool {
	out := make([]*pools.Pool, len(s.poolOrder))
	for i, ps := range s.poolOrder {
		out[i] = ps.Pool
	}
	return out
}

// poolSpec fingerprints everything a pool is built from. The API key enters
// as a digest (Secret prints itself redacted), and whether the pool scrapes
// depends on the routes too.
func poolSpec(pc *policy.Pool, cfg *policy.Config) string {
	key := sha256.Sum256([]byte(pc.APIKey))
	return fmt.Sprintf("%s|%s|%d|%v|%v|%v|%v|%x|%+v|%+v|%t|%+v", pc.Model, pc.Balance, pc.MaxInflight,
		pc.QueueTimeout, pc.ConnectTimeout, pc.ResponseHeaderTimeout, *pc.Retries, key[:8], *pc.Health, *pc.Scrape,
		scrapes(cfg, pc), replicaSpecs(pc))
}

// scrapes reports whether a pool reads its replicas' vLLM metrics: its
// balancer needs them, or a route spills out of it on queue depth.
func scrapes(cfg *policy.Config, pc *policy.Pool) bool {
	return pc.Balance == "kv_aware" || pc.Balance == "p2c" || spillsFrom(cfg, pc.Name)
}

func replicaSpecs(pc *policy.Pool) string {
	var sb strings.Builder
	for _, r := range pc.Replicas {
		fmt.Fprintf(&sb, "%s=%s%v;", r.Name, r.URL, r.Nodes)
	}
	return sb.String() + fmt.Sprint(*pc.Affinity)
}

func (g *Gateway) poolOptions(pc *policy.Pool, cfg *policy.Config) pools.Options {
	o := pools.Options{
		Name: pc.Name, Model: pc.Model, Balance: pc.Balance, MaxInflight: pc.MaxInflight,
		QueueTimeout: pc.QueueTimeout.Std(), ConnectTimeout: pc.ConnectTimeout.Std(),
		HeaderTimeout: pc.ResponseHeaderTimeout.Std(), LoadFactor: pc.Affinity.LoadFactor,
		APIKey: string(pc.APIKey), Rand: g.opts.Rand, Now: g.opts.Now, Transport: g.opts.Transport,
		Health: pools.HealthOptions{
			Disabled: pc.Health.Disabled, Path: pc.Health.Path, Interval: pc.Health.Interval.Std(),
			Timeout: pc.Health.Timeout.Std(), UnhealthyAfter: pc.Health.UnhealthyAfter,
			HealthyAfter: pc.Health.HealthyAfter, EjectBase: pc.Health.EjectBase.Std(),
			EjectMax: pc.Health.EjectMax.Std(), OnChange: g.onHealthChange,
		},
		Scrape: pools.ScrapeOptions{
			Enabled: scrapes(cfg, pc),
			Path:    pc.Scrape.Path, Interval: pc.Scrape.Interval.Std(), Timeout: pc.Scrape.Timeout.Std(),
			Staleness: pc.Scrape.Staleness.Std(), OnMissing: g.onMissingSignals,
		},
	}
	for _, r := range pc.Replicas {
		o.Replicas = append(o.Replicas, pools.ReplicaSpec{Name: r.Name, URL: r.Parsed, Nodes: r.Nodes})
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

func reachablePools(cfg *policy.Config) []string {
	seen := map[string]bool{}
	var out []string
	add := func(p string) {
		if p != "" && !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	for _, r := range cfg.Routes {
		add(r.To)
		for _, e := range r.Split {
			add(e.Pool)
		}
		for _, fb := range r.Fallback {
			add(fb)
		}
		if r.Spill != nil {
			add(r.Spill.To)
		}
	}
	if cl := cfg.Classifier; cl != nil && cl.Kind == "model" {
		add(cl.Pool)
	}
	return out
}

// authenticate returns the API key presented in the Authorization header
// (nil when auth is off). Every configured key is compared, in constant time
// over fixed-length digests, so timing reveals neither which key matched nor
// how much of one did.
func (s *Snapshot) authenticate(r *http.Request) (*apiKey, error) {
	if len(s.keys) == 0 {
		return nil, nil
	}
	h := r.Header.Get("Authorization")
	token, ok := strings.CutPrefix(h, "Bearer ")
	if !ok || token == "" {
		return nil, fmt.Errorf("%w: send Authorization: Bearer <key>", errUnauthorized)
	}
	sum := sha256.Sum256([]byte(token))
	var found *apiKey
	for _, k := range s.keys {
		if subtle.ConstantTimeCompare(sum[:], k.sum[:]) == 1 {
			found = k
		}
	}
	if found == nil {
		return nil, fmt.Errorf("%w: the API key is not valid", errUnauthorized)
	}
	return found, nil
}

// allows reports whether key may use the client-visible model name.
func (k *apiKey) allows(model string) bool {
	return k == nil || k.models.Has("*") || k.models.Has(model)
}

func (g *Gateway) buildClassifier(cl *policy.Classifier, s *Snapshot) (*classifier.Classifier, error) {
	o := classifier.Options{
		Kind: cl.Kind, Labels: cl.Labels, Descriptions: cl.Descriptions, MaxInputChars: cl.MaxInputChars,
		Timeout: cl.Timeout.Std(), OnError: cl.OnError, CacheSize: *cl.Cache.Size, CacheTTL: cl.Cache.TTL.Std(),
		Concurrency: cl.Concurrency, GuidedChoice: cl.GuidedChoice, Prompt: cl.Prompt, Metrics: g.classMetrics,
	}
	if cl.Kind == "model" {
		ps := s.pools[cl.Pool]
		o.Model = ps.Model
		o.Transport = &poolTransport{g: g, pool: ps}
	}
	return classifier.New(o)
}

// readiness reports why the snapshot is not ready ("" when it is).
func (s *Snapshot) readiness() string {
	var down []string
	for _, name := range s.reachable {
		if ps := s.pools[name]; ps != nil && ps.HealthyCount() == 0 {
			down = append(down, name)
		}
	}
	if len(down) > 0 {
		return fmt.Sprintf("no healthy replica in pool(s) %s", strings.Join(down, ", "))
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

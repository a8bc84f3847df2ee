package router

import (
	"crypto/sha256"
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/switchyard/switchyard/router/internal/discoveries"
	"github.com/switchyard/switchyard/router/internal/keys"
	"github.com/switchyard/switchyard/router/internal/outcomes"
	"github.com/switchyard/switchyard/router/internal/recorder"
	"github.com/switchyard/switchyard/router/internal/tokenize"

	"github.com/switchyard/switchyard/router/internal/upstream"

	"github.com/switchyard/switchyard/classifier"
	"github.com/switchyard/switchyard/policy"
	"github.com/switchyard/switchyard/policy/routing"
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
	Policy     *routing.Policy

	pools     map[string]*poolState
	poolOrder []*poolState
	models    map[string]target
	patterns  []modelPattern
	keys      keys.Set
	// idSecret signs the stored-response ids clients see (see ids).
	idSecret   []byte
	classifier *classifier.Classifier
	sessions   *routing.Sessions
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
	// tokenizeTurns rotates the context check's /tokenize calls among
	// equally loaded replicas.
	tokenizeTurns tokenize.Turns
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

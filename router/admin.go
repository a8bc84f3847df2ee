package router

import (
	"crypto/sha256"
	"errors"
	"net/http"
	"time"

	"github.com/switchyard/switchyard/classifier"
	"github.com/switchyard/switchyard/policy"
	"github.com/switchyard/switchyard/router/internal/admin"
	"github.com/switchyard/switchyard/router/internal/discoveries"
	"github.com/switchyard/switchyard/router/internal/wire"
)

// AdminHandler returns the admin API (router/internal/admin) over this
// gateway.
func (g *Gateway) AdminHandler() http.Handler {
	return g.bounded(true, admin.Handler(adminView{g}, admin.Options{Registry: g.reg, Version: g.opts.Version,
		Started: g.started, Now: g.opts.Now, Ring: g.status, CacheHitRate: classifier.CacheHitRate}))
}

// adminView is the gateway as the admin API sees it.
type adminView struct{ g *Gateway }

func (v adminView) Running() admin.Running {
	s := v.g.snap.Load()
	sc := &s.Config.Server
	run := admin.Running{Generation: s.Generation, TokenMetrics: sc.AdminTokenMetrics, AdminListen: sc.AdminListen}
	if sc.AdminToken != "" {
		d := sha256.Sum256([]byte(sc.AdminToken))
		run.Token = &d
	}
	if cl := s.Config.Classifier; cl != nil {
		run.Classifier = cl.Kind
	}
	if t := s.Config.Topology; t != nil {
		run.Topology = t
	}
	return run
}

func (v adminView) ConfigYAML() ([]byte, int64, error) {
	s := v.g.snap.Load()
	out, err := policy.Render(s.Config)
	return out, s.Generation, err
}

func (v adminView) Ready() (int, map[string]any) { return v.g.readiness() }

// Reload lists a refused config's problems one by one (policy.Errors).
func (v adminView) Reload() (int64, []string, error) {
	gen, err := v.g.Reload()
	if err == nil {
		return gen, nil, nil
	}
	var errs policy.Errors
	if !errors.As(err, &errs) {
		return gen, []string{err.Error()}, err
	}
	list := make([]string, 0, len(errs))
	for _, e := range errs {
		list = append(list, e.Error())
	}
	return gen, list, err
}

func (v adminView) Explain(r *http.Request) (any, *wire.APIError) {
	s := v.g.snap.Load()
	// The admin view has no response writer: its answer keeps the
	// Connection: close that bounded set (explain is an operator's call).
	body, err := readBody(nil, r, int64(s.Config.Server.MaxBodyBytes))
	if err != nil {
		return nil, toAPIError(err, "")
	}
	e, err := v.g.ExplainAPI(r.Context(), r.Header, body, r.URL.Query().Get("class"), r.URL.Query().Get("api"))
	if err != nil {
		return nil, toAPIError(err, "")
	}
	return e, nil
}

func (v adminView) Pools(now time.Time) []admin.PoolView { return v.g.poolViews(v.g.snap.Load(), now) }

func (v adminView) Control() (any, bool) {
	ctrl := v.g.snap.Load().Policy.Controller()
	if ctrl == nil {
		return nil, false
	}
	return ctrl.State(), true
}

func (v adminView) Shadow() *admin.ShadowSummary {
	sh := v.g.shadow.Load()
	if sh == nil {
		return nil
	}
	sum := sh.Summary()
	return &sum
}

func (v adminView) LastReload() *admin.ReloadOutcome { return v.g.lastReload.Load() }

// poolViews is every pool and replica of s as /admin/pools and the status
// page show them.
func (g *Gateway) poolViews(s *Snapshot, now time.Time) []admin.PoolView {
	out := make([]admin.PoolView, 0, len(s.poolOrder))
	for _, ps := range s.poolOrder {
		pv := admin.PoolView{Name: ps.Name, Model: ps.Model, Balance: ps.Balance(), MaxInflight: ps.MaxInflight(), Healthy: ps.HealthyCount(),
			Discovery: s.discovery.View(ps.Name), Replicas: []admin.ReplicaView{}}
		source := discoveries.Source(ps.cfg)
		for _, rep := range ps.Replicas() {
			lastErr, why := rep.LastError()
			rv := admin.ReplicaView{Name: rep.Name, URL: rep.URL().String(), Source: source, Nodes: rep.Nodes, State: admin.ReplicaFlags{Retired: rep.Retired(), Probing: rep.Probing(),
				Misconfigured: rep.Misconfigured(), Ejected: rep.Ejected(now), Healthy: rep.Healthy()}.State(), Healthy: rep.Healthy(),
				Ejected: rep.Ejected(now), Misconfigured: rep.Misconfigured(), Why: why, Inflight: rep.Inflight(),
				Waiting: rep.Waiting(), Ejections: rep.Ejections(), LastError: lastErr,
				Recent: g.status.Replica(rep.Endpoint, now, time.Minute)}
			if rv.Ejected {
				u := rep.EjectedUntil().UTC()
				rv.EjectedUntil = &u
			}
			if l := rep.CurrentLoad(); l != nil {
				rv.LastScrape = l.At.UTC().Format(time.RFC3339Nano)
				rv.ScrapeErr = l.Err
				if l.Err == "" {
					rv.Missing = l.Missing()
					if l.HasQueue {
						rv.Queue = &l.Waiting
					}
					if l.HasRunning {
						rv.Running = &l.Running
					}
					if l.HasKV {
						rv.KVUsage = &l.KVUsage
					}
				}
			}
			pv.Replicas = append(pv.Replicas, rv)
		}
		out = append(out, pv)
	}
	return out
}

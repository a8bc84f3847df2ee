package router

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/switchyard/switchyard/classifier"
	"github.com/switchyard/switchyard/policy"
	"github.com/switchyard/switchyard/router/internal/admin"
)

// shadowState is a candidate policy evaluated on live traffic without
// affecting it (serve --shadow FILE).
type shadowState struct {
	file       string
	generation int64
	policy     *policy.Policy

	// pending counts shadow decisions waiting on a classifier call;
	// skipped those not made because too many were.
	pending, skipped atomic.Int64

	mu sync.Mutex
	// pairs counts decisions by live pool and shadow pool; routes by
	// live route and shadow route.
	pairs  map[[2]string]int64
	routes map[[2]string]int64
}

// maxShadowCalls bounds the shadow decisions waiting on a classifier call.
const maxShadowCalls = 64

// loadShadow reads the shadow policy file. Its routes, pools and
// classifier labels are checked against the running config: the shadow
// may only name the running pools, and it shares the running classifier
// (and its cache), so its labels must be the running ones.
func (g *Gateway) loadShadow() error {
	path := g.opts.ShadowPath
	cfg, err := LoadConfig(path)
	if err != nil {
		return err
	}
	s := g.snap.Load()
	for _, p := range cfg.Pools {
		if s.pools[p.Name] == nil {
			return fmt.Errorf("%s: shadow pool %q is not a pool of the running config (a shadow policy routes over the running pools)", path, p.Name)
		}
	}
	var live, cand []string
	if s.Config.Classifier != nil {
		live = s.Config.Classifier.Labels
	}
	if cfg.Classifier != nil {
		cand = cfg.Classifier.Labels
	}
	if !slices.Equal(live, cand) {
		return fmt.Errorf("%s: the shadow's classifier labels %v differ from the running %v (the shadow shares the running classifier)", path, cand, live)
	}
	prev := g.shadow.Load()
	st := &shadowState{file: path, policy: policy.New(cfg), pairs: map[[2]string]int64{}, routes: map[[2]string]int64{}}
	st.generation = 1
	if prev != nil {
		st.generation = prev.generation + 1
	}
	g.shadow.Store(st)
	g.log.Info("shadow policy loaded", "file", path, "generation", st.generation, "routes", len(cfg.Routes))
	return nil
}

// shadowDecide evaluates the shadow policy for x, whose live decision is
// made: at once when the live decision already has the classification
// (or needs none), else on its own goroutine, so the request never waits
// for a classifier call the shadow alone needs.
func (g *Gateway) shadowDecide(ctx context.Context, x *exchange, live policy.Decision, preq *policy.Request, in classifier.Input) {
	sh := g.shadow.Load()
	if sh == nil {
		return
	}
	// The shadow policy has no session store; the session id still
	// picks its splits, as the live policy's.
	req := *preq
	if res := x.classify.res; res.Outcome != "" || x.snap.classifier == nil {
		cls := policy.Classification{Label: res.Label, Scores: res.Scores, Fallback: res.Fallback()}
		sh.record(g, live, sh.policy.Decide(&req, func() policy.Classification { return cls }, false))
		return
	}
	c := x.snap.classifier
	// The shadow's own classifier calls are bounded: past maxShadowCalls
	// at once, a request is not evaluated (counted in skipped), so a slow
	// classifier cannot pile up goroutines at the request rate.
	if sh.pending.Add(1) > maxShadowCalls {
		sh.pending.Add(-1)
		sh.skipped.Add(1)
		return
	}
	ctx = context.WithoutCancel(ctx)
	go func() {
		defer sh.pending.Add(-1)
		d := sh.policy.Decide(&req, func() policy.Classification {
			r := c.Classify(ctx, in)
			return policy.Classification{Label: r.Label, Scores: r.Scores, Fallback: r.Fallback()}
		}, false)
		sh.record(g, live, d)
	}()
}

func (sh *shadowState) record(g *Gateway, live, shadow policy.Decision) {
	lp, sp := live.Pools[0], shadow.Pools[0]
	g.metrics.Shadow.WithLabelValues(lp, sp).Inc()
	sh.mu.Lock()
	sh.pairs[[2]string{lp, sp}]++
	sh.routes[[2]string{live.Route, shadow.Route}]++
	sh.mu.Unlock()
}

func (sh *shadowState) summary() admin.ShadowSummary {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	out := admin.ShadowSummary{Enabled: true, File: sh.file, Generation: sh.generation, Skipped: sh.skipped.Load(),
		LiveSplit: map[string]float64{}, Split: map[string]float64{}}
	same := int64(0)
	for k, n := range sh.pairs {
		out.Decisions += n
		out.LiveSplit[k[0]] += float64(n)
		out.Split[k[1]] += float64(n)
		if k[0] == k[1] {
			same += n
		}
		out.Pairs = append(out.Pairs, admin.ShadowPair{Live: k[0], Shadow: k[1], Count: n})
	}
	for k, n := range sh.routes {
		out.Routes = append(out.Routes, admin.ShadowPair{Live: k[0], Shadow: k[1], Count: n})
	}
	if out.Decisions > 0 {
		out.Agreement = float64(same) / float64(out.Decisions)
		for _, m := range []map[string]float64{out.LiveSplit, out.Split} {
			for k := range m {
				m[k] /= float64(out.Decisions)
			}
		}
	}
	for _, l := range [][]admin.ShadowPair{out.Pairs, out.Routes} {
		sort.Slice(l, func(i, j int) bool {
			if l[i].Count != l[j].Count {
				return l[i].Count > l[j].Count
			}
			return strings.Compare(l[i].Live+l[i].Shadow, l[j].Live+l[j].Shadow) < 0
		})
	}
	return out
}

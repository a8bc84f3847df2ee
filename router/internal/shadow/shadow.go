package shadow

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard/switchyard/classifier"
	"github.com/switchyard/switchyard/policy"
	"github.com/switchyard/switchyard/policy/routing"
	"github.com/switchyard/switchyard/router/internal/admin"
)

// Shadow is a candidate policy evaluated on live traffic.
type Shadow struct {
	file       string
	generation int64
	policy     *routing.Policy
	// counter counts decisions by live and shadow pool (a metric).
	counter *prometheus.CounterVec

	// pending counts shadow decisions waiting on a classifier call;
	// skipped those not made because too many were.
	pending, skipped atomic.Int64

	mu sync.Mutex
	// pairs counts decisions by live pool and shadow pool; routes by
	// live route and shadow route.
	pairs  map[[2]string]int64
	routes map[[2]string]int64
}

// maxCalls bounds the shadow decisions waiting on a classifier call.
const maxCalls = 64

// New makes the shadow of cfg, read from file, beside the running config.
// The shadow may only name the running pools, and it shares the running
// classifier (and its cache), so its labels must be the running ones. Its
// generation follows prev's (1 without one); counter counts its decisions
// by live and shadow pool.
func New(file string, cfg, running *policy.Config, prev *Shadow, counter *prometheus.CounterVec) (*Shadow, error) {
	for _, p := range cfg.Pools {
		if running.Pools.Get(p.Name) == nil {
			return nil, fmt.Errorf("%s: shadow pool %q is not a pool of the running config (a shadow policy routes over the running pools)", file, p.Name)
		}
	}
	var live, cand []string
	if running.Classifier != nil {
		live = running.Classifier.Labels
	}
	if cfg.Classifier != nil {
		cand = cfg.Classifier.Labels
	}
	if !slices.Equal(live, cand) {
		return nil, fmt.Errorf("%s: the shadow's classifier labels %v differ from the running %v (the shadow shares the running classifier)", file, cand, live)
	}
	sh := &Shadow{file: file, policy: routing.New(cfg), counter: counter, pairs: map[[2]string]int64{}, routes: map[[2]string]int64{}}
	sh.generation = 1
	if prev != nil {
		sh.generation = prev.generation + 1
	}
	return sh, nil
}

// Generation counts the shadow files loaded, from 1.
func (sh *Shadow) Generation() int64 { return sh.generation }

// Decide evaluates the shadow policy for a request whose live decision is
// made: at once when the live decision already has the classification res
// (or the gateway has no classifier c), else on its own goroutine, so the
// request never waits for a classifier call the shadow alone needs.
func (sh *Shadow) Decide(ctx context.Context, live routing.Decision, preq *routing.Request, res classifier.Result, c *classifier.Classifier, in classifier.Input) {
	// The shadow policy has no session store; the session id still
	// picks its splits, as the live policy's.
	req := *preq
	if res.Outcome != "" || c == nil {
		cls := routing.Classification{Label: res.Label, Scores: res.Scores, Fallback: res.Fallback()}
		sh.record(live, sh.policy.Decide(&req, func() routing.Classification { return cls }, false))
		return
	}
	// The shadow's own classifier calls are bounded: past maxCalls at
	// once, a request is not evaluated (counted in skipped), so a slow
	// classifier cannot pile up goroutines at the request rate.
	if sh.pending.Add(1) > maxCalls {
		sh.pending.Add(-1)
		sh.skipped.Add(1)
		return
	}
	ctx = context.WithoutCancel(ctx)
	go func() {
		defer sh.pending.Add(-1)
		d := sh.policy.Decide(&req, func() routing.Classification {
			r := c.Classify(ctx, in)
			return routing.Classification{Label: r.Label, Scores: r.Scores, Fallback: r.Fallback()}
		}, false)
		sh.record(live, d)
	}()
}

func (sh *Shadow) record(live, shadow routing.Decision) {
	lp, sp := live.Pools[0], shadow.Pools[0]
	sh.counter.WithLabelValues(lp, sp).Inc()
	sh.mu.Lock()
	sh.pairs[[2]string{lp, sp}]++
	sh.routes[[2]string{live.Route, shadow.Route}]++
	sh.mu.Unlock()
}

// Summary is the shadow's part of /admin/shadow: how often it agreed with
// the live policy, the split of each, and the pairs of pools and routes,
// most frequent first.
func (sh *Shadow) Summary() admin.ShadowSummary {
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

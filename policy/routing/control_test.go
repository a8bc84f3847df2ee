package routing_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchyard/switchyard/policy/internal/policytest"
	"github.com/switchyard/switchyard/policy/routing"
)

const controlYAML = header + `control:
  share: {pool: a, target: 0.25, window: 2m}
routes:
  - name: tools
    when: {tools: {gte: 4}}
    to: a
  - name: hard
    when: {score: {complex: {gte: auto}}}
    to: a
  - name: default
    to: b
`

// simClock is a clock the test moves.
type simClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *simClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *simClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// mixRun drives pol with requests at rate per second for d of simulated
// time: a share hard of them are hard (a complex score around 0.75, the
// easy ones around 0.25, overlapping), 5% offer many tools. It returns the
// pool a share of each second.
func mixRun(pol *routing.Policy, clk *simClock, rng *rand.Rand, hard float64, d time.Duration, rate int) []float64 {
	step := time.Second / time.Duration(rate)
	var perSecond []float64
	toA, n := 0, 0
	for t := time.Duration(0); t < d; t += step {
		score := 0.05 + 0.5*rng.Float64() // easy: 0.05..0.55
		if rng.Float64() < hard {
			score = 0.4 + 0.55*rng.Float64() // hard: 0.40..0.95
		}
		req := &routing.Request{}
		if rng.Float64() < 0.05 {
			req.Tools = 5
		}
		cls := func() routing.Classification {
			return routing.Classification{Label: "complex", Scores: map[string]float64{"complex": score, "simple": 1 - score}}
		}
		if pol.Decide(req, cls, false).Pools[0] == "a" {
			toA++
		}
		n++
		clk.Advance(step)
		if n == rate {
			perSecond = append(perSecond, float64(toA)/float64(n))
			toA, n = 0, 0
		}
	}
	return perSecond
}

// rolling is the share over the last k seconds at each second.
func rolling(perSecond []float64, k int) []float64 {
	var out []float64
	for i := k; i <= len(perSecond); i++ {
		sum := 0.0
		for _, v := range perSecond[i-k : i] {
			sum += v
		}
		out = append(out, sum/float64(k))
	}
	return out
}

// settled is the first second from which every rolling share stays within
// tol of target, or -1.
func settled(r []float64, target, tol float64) int {
	for i := len(r) - 1; i >= 0; i-- {
		if math.Abs(r[i]-target) > tol {
			if i == len(r)-1 {
				return -1
			}
			return i + 1
		}
	}
	return 0
}

// TestShareController: a mix that moves from 20% to 60% hard requests
// (and, with tools, requests sent to the pool by another route) holds the
// pool's share at 0.25 ± 0.02 once the controller has converged, with no
// oscillation: after it settles, the share stays in the band.
func TestShareController(t *testing.T) {
	cfg := policytest.Load(t, controlYAML)
	clk := &simClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	sc := routing.ControlOptionsFor(cfg.Control.Share)
	sc.Now = clk.Now
	ctrl := routing.NewController(sc)
	pol := routing.New(cfg, routing.WithController(ctrl))
	rng := rand.New(rand.NewPCG(3, 2))
	const rate = 100

	phase1 := mixRun(pol, clk, rng, 0.2, 10*time.Minute, rate)
	thr1 := ctrl.Threshold()
	phase2 := mixRun(pol, clk, rng, 0.6, 10*time.Minute, rate)
	thr2 := ctrl.Threshold()

	for i, ph := range [][]float64{phase1, phase2} {
		r := rolling(ph, 60) // the share over a minute
		at := settled(r, 0.25, 0.02)
		if at < 0 {
			t.Fatalf("phase %d: the share ends at %.3f, outside 0.25 ± 0.02", i+1, r[len(r)-1])
		}
		t.Logf("phase %d (%.0f%% hard): within 0.25 ± 0.02 from %d s on (the share over the last minute; the window is 2m), final %.3f",
			i+1, []float64{20, 60}[i], at+60, r[len(r)-1])
		if at+60 > 300 {
			t.Errorf("phase %d: took %d s to settle, want under 300 s", i+1, at+60)
		}
	}
	if !(thr2 > thr1) {
		t.Errorf("threshold %.3f after the shift to hard traffic, want it above %.3f", thr2, thr1)
	}
	st := ctrl.State()
	if math.Abs(st.Share-0.25) > 0.02 || st.Mode != "share" || st.Pool != "a" {
		t.Errorf("state %+v", st)
	}
}

// TestShareControllerCapacity: in capacity mode the pool takes more
// borderline traffic while it has headroom and less as it saturates: with
// a pool that can take 40 requests/s, at 200 requests/s its share settles
// near what keeps it at the utilization goal (0.8 × 40 / 200 = 0.16), and
// when the load drops to 50 requests/s it rises (0.64).
func TestShareControllerCapacity(t *testing.T) {
	cfg := policytest.Load(t, strings.Replace(header, "model: org/a\n", "model: org/a\n    max_inflight: 8\n", 1)+`control:
  share: {pool: a, target: capacity, window: 1m}
routes:
  - name: hard
    when: {score: {complex: {gte: auto}}}
    to: a
  - name: default
    to: b
`)
	clk := &simClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	var mu sync.Mutex
	rate, capacity := 200.0, 40.0
	var ctrl *routing.Controller
	sc := routing.ControlOptionsFor(cfg.Control.Share)
	sc.Now = clk.Now
	// Utilization: what the pool is asked (share × load) over what it can
	// take; a queue builds over 1.
	sc.Load = func() float64 {
		mu.Lock()
		defer mu.Unlock()
		return ctrl.Share() * rate / capacity
	}
	ctrl = routing.NewController(sc)
	pol := routing.New(cfg, routing.WithController(ctrl))
	rng := rand.New(rand.NewPCG(3, 4))

	busy := rolling(mixRun(pol, clk, rng, 0.4, 8*time.Minute, 200), 30)
	high := busy[len(busy)-1]
	mu.Lock()
	rate = 50
	mu.Unlock()
	quiet := rolling(mixRun(pol, clk, rng, 0.4, 8*time.Minute, 50), 30)
	low := quiet[len(quiet)-1]
	t.Logf("share at 200 req/s %.3f (utilization %.2f), at 50 req/s %.3f (utilization %.2f)", high, high*200/capacity, low, low*50/capacity)
	if u := high * 200 / capacity; u > 0.9 {
		t.Errorf("busy: utilization %.2f, want the queue bounded (≤ 0.9)", u)
	}
	if math.Abs(high-0.16) > 0.03 {
		t.Errorf("busy: share %.3f, want about 0.16", high)
	}
	if !(low > high+0.3) {
		t.Errorf("quiet: share %.3f, want it well above the busy %.3f", low, high)
	}
}

// TestControllerSurvivesReload: a policy rebuilt with the same controller
// keeps its threshold.
func TestControllerSurvivesReload(t *testing.T) {
	cfg := policytest.Load(t, controlYAML)
	clk := &simClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	sc := routing.ControlOptionsFor(cfg.Control.Share)
	sc.Now = clk.Now
	ctrl := routing.NewController(sc)
	pol := routing.New(cfg, routing.WithController(ctrl))
	mixRun(pol, clk, rand.New(rand.NewPCG(5, 6)), 0.6, 5*time.Minute, 100)
	before := ctrl.Threshold()
	again := routing.New(policytest.Load(t, controlYAML), routing.WithController(ctrl))
	if again.Controller().Threshold() != before || before == 0.5 {
		t.Errorf("threshold %v after the rebuild, want %v (moved from 0.5)", again.Controller().Threshold(), before)
	}
}

// BenchmarkControllerDecide is the controller's per-request cost: a score
// observation, the threshold, and a decision observation (with the tick
// when due).
func BenchmarkControllerDecide(b *testing.B) {
	cfg := policytest.Load(b, controlYAML)
	ctrl := routing.NewController(routing.ControlOptionsFor(cfg.Control.Share))
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		v := 0.0
		for pb.Next() {
			v += 0.0137
			if v > 1 {
				v -= 1
			}
			routing.ControllerObserve(ctrl, v)
		}
	})
}

// TestControllerSheds1: scores of exactly 1 (a classifier without
// logprobs gives its label 1) can be kept out: the threshold goes above 1.
func TestControllerSheds1(t *testing.T) {
	cfg := policytest.Load(t, controlYAML)
	clk := &simClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	o := routing.ControlOptionsFor(cfg.Control.Share)
	o.Target, o.Now = 0.05, clk.Now
	ctrl := routing.NewController(o)
	for range 20000 {
		routing.ControllerObserve(ctrl, 1)
		clk.Advance(10 * time.Millisecond)
	}
	if thr := ctrl.Threshold(); thr <= 1 {
		t.Errorf("threshold %v with every score 1 and a target of 0.05, want above 1", thr)
	}
}

// TestShareControllerSessions: on agent traffic, where each session's
// turns are decided against the auto bound until one passes it and the
// session then stays on the pool, the controller still holds the pool's
// share of requests at the target: it steers the sessions that have not
// moved up yet.
func TestShareControllerSessions(t *testing.T) {
	cfg := policytest.Load(t, header+`control:
  share: {pool: a, target: 0.25, window: 2m}
session: {header: X-Session-Id, ttl: 1m}
routes:
  - name: hard
    when: {score: {complex: {gte: auto}}}
    to: a
  - name: default
    to: b
`)
	clk := &simClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	sc := routing.ControlOptionsFor(cfg.Control.Share)
	sc.Now = clk.Now
	ctrl := routing.NewController(sc)
	pol := routing.New(cfg, routing.WithController(ctrl), routing.WithSessions(routing.NewSessions(10000, time.Minute, clk.Now)))
	rng := rand.New(rand.NewPCG(5, 8))
	const (
		rate     = 100 // turns per second
		live     = 40  // sessions in progress
		turns    = 8   // per session
		duration = 12 * time.Minute
	)
	type session struct {
		id        string
		hard      bool
		turnsLeft int
	}
	next := 0
	fresh := func() *session {
		next++
		return &session{id: fmt.Sprint("s", next), hard: rng.Float64() < 0.3, turnsLeft: turns}
	}
	var ss []*session
	for range live {
		ss = append(ss, fresh())
	}
	step := time.Second / rate
	var perSecond []float64
	toA, n := 0, 0
	for t := time.Duration(0); t < duration; t += step {
		i := rng.IntN(live)
		s := ss[i]
		score := 0.05 + 0.5*rng.Float64()
		if s.hard {
			score = 0.4 + 0.55*rng.Float64()
		}
		cls := func() routing.Classification {
			return routing.Classification{Label: "complex", Scores: map[string]float64{"complex": score, "simple": 1 - score}}
		}
		if pol.Decide(&routing.Request{Session: s.id}, cls, false).Pools[0] == "a" {
			toA++
		}
		if s.turnsLeft--; s.turnsLeft == 0 {
			ss[i] = fresh()
		}
		n++
		clk.Advance(step)
		if n == rate {
			perSecond = append(perSecond, float64(toA)/float64(n))
			toA, n = 0, 0
		}
	}
	r := rolling(perSecond, 60)
	at := settled(r, 0.25, 0.03)
	if at < 0 || at+60 > 420 {
		t.Fatalf("the share over the last minute ends at %.3f (within 0.25 ± 0.03 from %d s), want it settled within 420 s", r[len(r)-1], at+60)
	}
	t.Logf("agent sessions: within 0.25 ± 0.03 from %d s on, final %.3f, threshold %.3f", at+60, r[len(r)-1], ctrl.Threshold())
}

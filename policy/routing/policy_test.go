package routing_test

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/switchyard/switchyard/policy"
	"github.com/switchyard/switchyard/policy/internal/policytest"
	"github.com/switchyard/switchyard/policy/routing"
)

// header is the start of every inline test config: three pools, two API
// keys and a heuristic classifier with labels simple and complex.
const header = `version: 1
server:
  api_keys:
    - {name: agents, key_env: SWITCHYARD_KEY_AGENTS}
    - {name: ci, key_env: SWITCHYARD_KEY_CI}
pools:
  a:
    model: org/a
    replicas: [{url: "http://10.0.0.1:8000"}]
  b:
    model: org/b
    replicas: [{url: "http://10.0.0.2:8000"}]
  c:
    model: org/c
    replicas: [{url: "http://10.0.0.3:8000"}]
classifier:
  kind: heuristic
  labels: [simple, complex]
`

// classifier is a ClassifyFunc that counts its calls.
type classifier struct {
	cls   routing.Classification
	calls int
}

func (c *classifier) classify() routing.Classification {
	c.calls++
	return c.cls
}

func label(l string, scores ...float64) *classifier {
	c := &classifier{cls: routing.Classification{Label: l}}
	if len(scores) == 2 {
		c.cls.Scores = map[string]float64{"simple": scores[0], "complex": scores[1]}
	}
	return c
}

func headers(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Set(kv[i], kv[i+1])
	}
	return h
}

func TestDecideConditions(t *testing.T) {
	tests := []struct {
		name  string
		when  string // the flow mapping under the first route's when
		req   routing.Request
		cls   *classifier
		match bool
	}{
		{"model in list", `{model: [auto, agent]}`, routing.Request{Model: "agent"}, nil, true},
		{"model not in list", `{model: [auto, agent]}`, routing.Request{Model: "gpt-4"}, nil, false},
		{"model scalar", `{model: auto}`, routing.Request{Model: "auto"}, nil, true},
		{"header value", `{header: {X-Experiment: [b, c]}}`, routing.Request{Header: headers("X-Experiment", "c")}, nil, true},
		{"header other value", `{header: {X-Experiment: [b, c]}}`, routing.Request{Header: headers("X-Experiment", "a")}, nil, false},
		{"header absent", `{header: {X-Experiment: b}}`, routing.Request{}, nil, false},
		{"header name case", `{header: {x-experiment: b}}`, routing.Request{Header: headers("X-EXPERIMENT", "b")}, nil, true},
		{"stream true", `{stream: true}`, routing.Request{Stream: true}, nil, true},
		{"stream false", `{stream: true}`, routing.Request{}, nil, false},
		{"tools gte", `{tools: {gte: 4}}`, routing.Request{Tools: 4}, nil, true},
		{"tools below", `{tools: {gte: 4}}`, routing.Request{Tools: 3}, nil, false},
		{"tools bare number is eq", `{tools: 2}`, routing.Request{Tools: 2}, nil, true},
		{"tools bare number other", `{tools: 2}`, routing.Request{Tools: 3}, nil, false},
		{"messages in range", `{messages: {gt: 2, lte: 5}}`, routing.Request{Messages: 5}, nil, true},
		{"messages above range", `{messages: {gt: 2, lte: 5}}`, routing.Request{Messages: 6}, nil, false},
		{"messages at exclusive bound", `{messages: {gt: 2, lte: 5}}`, routing.Request{Messages: 2}, nil, false},
		{"prompt_tokens lt", `{prompt_tokens: {lt: 1000}}`, routing.Request{PromptTokens: 999}, nil, true},
		{"prompt_tokens at bound", `{prompt_tokens: {lt: 1000}}`, routing.Request{PromptTokens: 1000}, nil, false},
		{"key", `{key: ci}`, routing.Request{Key: "ci"}, nil, true},
		{"key other", `{key: ci}`, routing.Request{Key: "agents"}, nil, false},
		{"key without auth", `{key: [ci, agents]}`, routing.Request{}, nil, false},
		{"any first", `{any: [{stream: true}, {tools: {gte: 1}}]}`, routing.Request{Stream: true}, nil, true},
		{"any second", `{any: [{stream: true}, {tools: {gte: 1}}]}`, routing.Request{Tools: 2}, nil, true},
		{"any none", `{any: [{stream: true}, {tools: {gte: 1}}]}`, routing.Request{}, nil, false},
		{"not", `{not: {model: auto}}`, routing.Request{Model: "gpt-4"}, nil, true},
		{"not negated", `{not: {model: auto}}`, routing.Request{Model: "auto"}, nil, false},
		{"all must hold", `{stream: true, tools: {gte: 1}}`, routing.Request{Stream: true, Tools: 1}, nil, true},
		{"all must hold, one fails", `{stream: true, tools: {gte: 1}}`, routing.Request{Stream: true}, nil, false},
		{"class", `{class: complex}`, routing.Request{}, label("complex"), true},
		{"class other", `{class: complex}`, routing.Request{}, label("simple"), false},
		{"class list", `{class: [simple, complex]}`, routing.Request{}, label("simple"), true},
		{"class under not", `{not: {class: simple}}`, routing.Request{}, label("complex"), true},
		{"class under any", `{any: [{stream: true}, {class: complex}]}`, routing.Request{}, label("complex"), true},
		{"score", `{score: {complex: {gte: 0.8}}}`, routing.Request{}, label("complex", 0.15, 0.85), true},
		{"score below", `{score: {complex: {gte: 0.8}}}`, routing.Request{}, label("complex", 0.5, 0.5), false},
		{"score unknown is 0", `{score: {simple: {lt: 0.1}}}`, routing.Request{}, label("simple"), true},
		{"score all labels", `{score: {simple: {lt: 0.3}, complex: {gt: 0.6}}}`, routing.Request{}, label("complex", 0.2, 0.8), true},
		{"score one label fails", `{score: {simple: {lt: 0.3}, complex: {gt: 0.9}}}`, routing.Request{}, label("complex", 0.2, 0.8), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := policytest.Load(t, header+`routes:
  - {name: rule, when: `+tc.when+`, to: a}
  - {name: default, to: b}
`)
			cls := tc.cls
			if cls == nil {
				cls = label("simple")
			}
			d := routing.New(cfg).Decide(&tc.req, cls.classify, false)
			want := "default"
			if tc.match {
				want = "rule"
			}
			if d.Route != want {
				t.Errorf("route = %q, want %q", d.Route, want)
			}
			if tc.cls == nil && cls.calls != 0 {
				t.Errorf("classifier called %d times for a rule without class or score", cls.calls)
			}
		})
	}
}

func TestDecideFirstMatchWins(t *testing.T) {
	cfg := policytest.Load(t, header+`routes:
  - {name: tools, when: {tools: {gte: 4}}, to: a}
  - {name: stream, when: {stream: true}, to: b}
  - {name: also-tools, when: {tools: {gte: 1}}, to: c}
  - {name: default, to: c}
`)
	pol := routing.New(cfg)
	if diff := cmp.Diff([]string{"tools", "stream", "also-tools", "default"}, pol.Routes()); diff != "" {
		t.Errorf("Routes() (-want +got):\n%s", diff)
	}
	tests := []struct {
		name  string
		req   routing.Request
		route string
	}{
		{"both first and second match", routing.Request{Tools: 5, Stream: true}, "tools"},
		{"second and third match", routing.Request{Tools: 2, Stream: true}, "stream"},
		{"only third", routing.Request{Tools: 2}, "also-tools"},
		{"none", routing.Request{}, "default"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if d := pol.Decide(&tc.req, label("simple").classify, false); d.Route != tc.route {
				t.Errorf("route = %q, want %q", d.Route, tc.route)
			}
		})
	}
}

func TestDecideClassifierIsLazy(t *testing.T) {
	pol := routing.New(policytest.Load(t, header+`routes:
  - {name: stream, when: {stream: true}, to: a}
  - {name: tools-complex, when: {tools: {gte: 4}, class: complex}, to: b}
  - {name: complex, when: {class: complex}, to: b}
  - {name: confident-simple, when: {score: {simple: {gte: 0.9}}}, to: a}
  - {name: not-simple, when: {not: {class: simple}}, to: c}
  - {name: default, to: a}
`))
	tests := []struct {
		name       string
		req        routing.Request
		cls        *classifier
		route      string
		calls      int
		classified bool
	}{
		// An earlier rule without class conditions matched.
		{"earlier cheap rule matches", routing.Request{Stream: true}, label("complex"), "stream", 0, false},
		// tools-complex fails on tools before reaching its class condition,
		// then complex needs the classifier.
		{"cheap condition fails first", routing.Request{Tools: 1}, label("complex"), "complex", 1, true},
		// Several class and score rules: one call serves them all.
		{"one call for many rules", routing.Request{Tools: 5}, label("simple", 0.6, 0.4), "default", 1, true},
		{"score rule", routing.Request{}, label("simple", 0.95, 0.05), "confident-simple", 1, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := pol.Decide(&tc.req, tc.cls.classify, false)
			if d.Route != tc.route {
				t.Errorf("route = %q, want %q", d.Route, tc.route)
			}
			if tc.cls.calls != tc.calls {
				t.Errorf("classifier called %d times, want %d", tc.cls.calls, tc.calls)
			}
			if d.Classified != tc.classified {
				t.Errorf("Classified = %t, want %t", d.Classified, tc.classified)
			}
			if tc.classified && (d.Class != tc.cls.cls.Label || !cmp.Equal(d.Scores, tc.cls.cls.Scores)) {
				t.Errorf("Class, Scores = %q, %v, want %q, %v", d.Class, d.Scores, tc.cls.cls.Label, tc.cls.cls.Scores)
			}
		})
	}

	// A rule failing on a cheap condition never calls the classifier, even
	// when the decision ends without any class rule being reached.
	pol = routing.New(policytest.Load(t, header+`routes:
  - {name: r, when: {model: agent, score: {complex: {gte: 0.5}}}, to: b}
  - {name: default, to: a}
`))
	cls := label("complex", 0, 1)
	if d := pol.Decide(&routing.Request{Model: "auto"}, cls.classify, false); d.Route != "default" || d.Classified || cls.calls != 0 {
		t.Errorf("Decide = route %q, classified %t after %d calls; want default, not classified, no call", d.Route, d.Classified, cls.calls)
	}
}

func TestDecideSplitWeights(t *testing.T) {
	cfg := policytest.Load(t, header+`routes:
  - {name: experiment, split: {a: 25, b: 75}}
`)
	rng := rand.New(rand.NewPCG(1, 2))
	pol := routing.New(cfg, routing.WithRand(rng.Uint64))
	const n = 10000
	counts := map[string]int{}
	for range n {
		counts[pol.Decide(&routing.Request{}, nil, false).Pools[0]]++
	}
	if got := 100 * float64(counts["a"]) / n; got < 23 || got > 27 {
		t.Errorf("a got %.1f%% of %d decisions (%v), want 25 ± 2", got, n, counts)
	}
	if counts["a"]+counts["b"] != n {
		t.Errorf("counts = %v, want only a and b", counts)
	}

	// The weights partition rand's range in file order: [0,25) → a, [25,100) → b.
	for _, tc := range []struct {
		r    uint64
		want string
	}{{0, "a"}, {24, "a"}, {25, "b"}, {99, "b"}, {100, "a"}, {124, "a"}, {125, "b"}} {
		pol := routing.New(cfg, routing.WithRand(func() uint64 { return tc.r }))
		if got := pol.Decide(&routing.Request{}, nil, false).Pools[0]; got != tc.want {
			t.Errorf("rand %d picked %q, want %q", tc.r, got, tc.want)
		}
	}
}

func TestDecidePools(t *testing.T) {
	cfg := policytest.Load(t, header+`routes:
  - name: spill
    when: {stream: true}
    to: a
    fallback: [c, b]
    spill: {to: c, when_queue_over: 8}
  - name: split
    when: {tools: {gte: 1}}
    split: {b: 1, c: 1}
    fallback: [a]
  - name: split-own
    when: {key: ci}
    split: {b: 1, c: 1}
    fallback: [b, c, a]
  - {name: default, to: a}
`)
	pol := routing.New(cfg, routing.WithRand(func() uint64 { return 1 })) // picks c
	tests := []struct {
		name  string
		req   routing.Request
		pools []string
		spill *policy.Spill
	}{
		{"target then fallbacks in order", routing.Request{Stream: true}, []string{"a", "c", "b"}, &policy.Spill{To: "c", WhenQueueOver: 8}},
		{"split pick then fallbacks", routing.Request{Tools: 1}, []string{"c", "a"}, nil},
		{"split's own pools as fallbacks, minus the pick", routing.Request{Key: "ci"}, []string{"c", "b", "a"}, nil},
		{"no fallback", routing.Request{}, []string{"a"}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := pol.Decide(&tc.req, nil, false)
			if diff := cmp.Diff(tc.pools, d.Pools); diff != "" {
				t.Errorf("Pools (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.spill, d.Spill); diff != "" {
				t.Errorf("Spill (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDecideExplain(t *testing.T) {
	pol := routing.New(policytest.Load(t, header+`routes:
  - {name: stream, when: {stream: true}, to: a}
  - {name: tools, when: {tools: {gte: 4}}, to: b}
  - {name: complex, when: {class: complex}, to: b}
  - {name: either, when: {any: [{model: agent}, {header: {X-Tier: gold}}]}, to: c}
  - {name: not-auto, when: {not: {model: auto}}, to: c}
  - {name: default, to: a}
`))
	req := &routing.Request{Model: "auto", Tools: 1}
	d := pol.Decide(req, label("simple").classify, true)
	want := routing.Decision{
		Route:      "default",
		Pools:      []string{"a"},
		Classified: true,
		Class:      "simple",
		Matched:    []string{"default"},
		Skipped: []routing.Skip{
			{Route: "stream", Reason: "stream is false"},
			{Route: "tools", Reason: "tools 1 not >= 4"},
			{Route: "complex", Reason: `class is "simple", want [complex]`},
			{Route: "either", Reason: `none of any matched (model "auto" not in [agent]; header X-Tier is "", want [gold])`},
			{Route: "not-auto", Reason: "not: the negated condition matched"},
		},
	}
	if diff := cmp.Diff(want, d); diff != "" {
		t.Errorf("explained decision (-want +got):\n%s", diff)
	}

	d = pol.Decide(req, label("simple").classify, false)
	if d.Matched != nil || d.Skipped != nil {
		t.Errorf("without explain Matched, Skipped = %#v, %#v, want nil", d.Matched, d.Skipped)
	}
	if d.Route != "default" {
		t.Errorf("route = %q, want default", d.Route)
	}
}

// clock is a hand-driven clock for session TTLs.
type clock struct{ now time.Time }

func (c *clock) Now() time.Time          { return c.now }
func (c *clock) Advance(d time.Duration) { c.now = c.now.Add(d) }

// seq is injected randomness that counts its draws and returns 0, 1, 2, ...
type seq struct{ n uint64 }

func (s *seq) next() uint64 { s.n++; return s.n - 1 }

func TestDecideSticky(t *testing.T) {
	cfg := policytest.Load(t, header+`session: {header: X-Session-Id, ttl: 1m}
routes:
  - name: experiment
    when: {header: {X-Experiment: b}}
    split: {a: 1, b: 1}
    sticky: false
  - {name: complex, when: {class: complex}, split: {b: 1, c: 1}}
  - {name: default, split: {a: 1, b: 1, c: 1}}
`)
	simple := label("simple").classify
	clk := &clock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	newPolicy := func() (*routing.Policy, *seq) {
		r := &seq{}
		return routing.New(cfg, routing.WithRand(r.next), routing.WithSessions(routing.NewSessions(100, time.Minute, clk.Now))), r
	}

	t.Run("split decided once per session", func(t *testing.T) {
		pol, r := newPolicy()
		first := pol.Decide(&routing.Request{Session: "s1"}, simple, false)
		if first.Sticky {
			t.Fatalf("first decision is Sticky")
		}
		for i := range 20 {
			d := pol.Decide(&routing.Request{Session: "s1"}, simple, false)
			if !d.Sticky || d.Route != first.Route || !cmp.Equal(d.Pools, first.Pools) {
				t.Fatalf("decision %d = %+v, want the sticky %v", i, d, first.Pools)
			}
		}
		// A session's split is picked by a hash of its id, not drawn, so
		// another instance (a policy with no store entry) picks the same.
		if r.n != 0 {
			t.Errorf("split drew %d random numbers, want 0", r.n)
		}
		other, _ := newPolicy()
		if d := other.Decide(&routing.Request{Session: "s1"}, simple, false); !cmp.Equal(d.Pools, first.Pools) {
			t.Errorf("another instance picked %v for the session, want %v", d.Pools, first.Pools)
		}
		// Another session is decided on its own.
		if d := pol.Decide(&routing.Request{Session: "s2"}, simple, false); d.Sticky {
			t.Errorf("other session: Sticky = %t, want a fresh decision", d.Sticky)
		}
		// Sessions spread over the split's pools by weight.
		seen := map[string]bool{}
		for i := range 60 {
			seen[pol.Decide(&routing.Request{Session: fmt.Sprint("spread", i)}, simple, false).Pools[0]] = true
		}
		if len(seen) != 3 {
			t.Errorf("60 sessions landed on %v, want all three pools", seen)
		}
		// No session id, no stickiness.
		pol.Decide(&routing.Request{}, simple, false)
		if d := pol.Decide(&routing.Request{}, simple, false); d.Sticky {
			t.Errorf("request without a session id got a sticky decision")
		}
	})

	t.Run("sticky false is not kept", func(t *testing.T) {
		pol, r := newPolicy()
		exp := &routing.Request{Session: "s1", Header: headers("X-Experiment", "b")}
		var pools []string
		for range 4 {
			d := pol.Decide(exp, simple, false)
			if d.Sticky || d.Route != "experiment" {
				t.Fatalf("decision = %+v, want a fresh experiment decision", d)
			}
			pools = append(pools, d.Pools[0])
		}
		if diff := cmp.Diff([]string{"a", "b", "a", "b"}, pools); diff != "" {
			t.Errorf("experiment picks (-want +got):\n%s", diff)
		}
		// The session is still free: its first sticky route is kept.
		d := pol.Decide(&routing.Request{Session: "s1"}, simple, false)
		if d.Sticky || d.Route != "default" {
			t.Fatalf("decision = %+v, want a fresh default decision", d)
		}
		d = pol.Decide(exp, simple, false)
		if !d.Sticky || d.Route != "default" || r.n != 4 {
			t.Errorf("decision = %+v after %d draws, want the kept default decision", d, r.n)
		}
	})

	t.Run("class is kept without calling the classifier", func(t *testing.T) {
		pol, _ := newPolicy()
		cls := label("complex", 0.1, 0.9)
		first := pol.Decide(&routing.Request{Session: "s1"}, cls.classify, false)
		d := pol.Decide(&routing.Request{Session: "s1"}, cls.classify, true)
		if cls.calls != 1 {
			t.Errorf("classifier called %d times, want 1", cls.calls)
		}
		want := first
		want.Sticky, want.Matched, want.Session = true, []string{"complex"}, routing.SessionKept
		want.Skipped = []routing.Skip{{Route: "experiment", Reason: `header X-Experiment is "", want [b]`}}
		want.SessionReason = `the session keeps route "complex": no route above it matched`
		if diff := cmp.Diff(want, d); diff != "" {
			t.Errorf("sticky explained decision (-want +got):\n%s", diff)
		}
	})

	t.Run("explaining does not store", func(t *testing.T) {
		pol, _ := newPolicy()
		pol.Decide(&routing.Request{Session: "s1"}, simple, true)
		if d := pol.Decide(&routing.Request{Session: "s1"}, simple, false); d.Sticky {
			t.Errorf("after an explained decision: Sticky = %t, want a fresh decision", d.Sticky)
		}
	})

	t.Run("ttl expiry", func(t *testing.T) {
		pol, _ := newPolicy()
		pol.Decide(&routing.Request{Session: "s1"}, simple, false)
		clk.Advance(59 * time.Second)
		if d := pol.Decide(&routing.Request{Session: "s1"}, simple, false); !d.Sticky {
			t.Errorf("decision within the ttl is not sticky")
		}
		clk.Advance(time.Second)
		if d := pol.Decide(&routing.Request{Session: "s1"}, simple, false); d.Sticky {
			t.Errorf("decision at the ttl: Sticky = %t, want a fresh decision", d.Sticky)
		}
		if d := pol.Decide(&routing.Request{Session: "s1"}, simple, false); !d.Sticky {
			t.Errorf("the fresh decision was not kept")
		}
	})

	t.Run("kept route gone after reload", func(t *testing.T) {
		sessions := routing.NewSessions(100, time.Minute, clk.Now)
		old := routing.New(policytest.Load(t, header+"routes:\n  - {name: old, to: c}\n"), routing.WithSessions(sessions))
		old.Decide(&routing.Request{Session: "s1"}, simple, false)
		pol := routing.New(cfg, routing.WithSessions(sessions), routing.WithRand((&seq{}).next))
		if d := pol.Decide(&routing.Request{Session: "s1"}, simple, false); d.Sticky || d.Route != "default" {
			t.Errorf("decision = %+v, want a fresh default decision", d)
		}
	})
}

// TestDecideConcurrent gives the race detector concurrent decisions sharing
// one session store.
func TestDecideConcurrent(t *testing.T) {
	cfg := policytest.Load(t, header+`session: {ttl: 1m}
routes:
  - {name: complex, when: {class: complex}, split: {b: 1, c: 1}}
  - {name: default, split: {a: 1, b: 1}}
`)
	pol := routing.New(cfg, routing.WithSessions(routing.NewSessions(64, time.Minute, nil)))
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 200 {
				req := &routing.Request{Session: fmt.Sprintf("s%d", (g*200+i)%100)}
				cls := label([]string{"simple", "complex"}[i%2])
				if d := pol.Decide(req, cls.classify, i%3 == 0); len(d.Pools) != 1 {
					t.Errorf("Decide = %+v, want one pool", d)
					return
				}
			}
		})
	}
	wg.Wait()
}

// TestPolicyKeepsNothingOfConfig: New compiles the routes into its own
// copies, so a change to the Config after New (which nothing should make)
// cannot change what the Policy decides.
func TestPolicyKeepsNothingOfConfig(t *testing.T) {
	cfg := policytest.Load(t, `version: 1
pools:
  a: {model: a, replicas: [{name: a1, url: "http://127.0.0.1:1"}]}
  b: {model: b, replicas: [{name: b1, url: "http://127.0.0.1:2"}]}
routes:
  - {name: streams, when: {stream: true, header: {X-A: "1"}}, to: a, fallback: [b]}
  - {name: default, to: b}
`)
	pol := routing.New(cfg)
	req := &routing.Request{Stream: true, Header: http.Header{"X-A": {"1"}}}
	want := pol.Decide(req, nil, false)
	r := cfg.Routes[0]
	r.Name, r.To, r.Fallback[0] = "changed", "b", "a"
	*r.When.Stream = false
	r.When.Header["X-A"][0] = "2"
	if diff := cmp.Diff(want, pol.Decide(req, nil, false)); diff != "" {
		t.Errorf("a change to the config changed the decision (-before +after):\n%s", diff)
	}
}

// TestDecideSessionMovesUp: a session's kept decision is replaced by a
// later request's decision of a route written above it, never by one
// below it; side routes are routed on their own and neither read nor
// change what is kept; sticky: false routes never move a session.
func TestDecideSessionMovesUp(t *testing.T) {
	cfg := policytest.Load(t, header+`models:
  - {name: auto, route: policy}
  - {name: "*-haiku-*", route: policy, small: true}
session: {header: X-Session-Id, ttl: 1m}
routes:
  - name: side
    when: {any: [{tools: 0, max_tokens: {lte: 4096}}, {small_model: true}, {system_contains: "You are a title generator"}]}
    to: a
    side: true
  - {name: tools, when: {tools: {gte: 4}}, to: c}
  - {name: complex, when: {class: complex}, to: b}
  - {name: experiment, when: {header: {X-Experiment: b}}, to: c, sticky: false}
  - {name: default, to: a, fallback: [b]}
`)
	simple, complex := label("simple"), label("complex")
	clk := &clock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	pol := routing.New(cfg, routing.WithSessions(routing.NewSessions(100, time.Minute, clk.Now)))
	type step struct {
		req           routing.Request
		cls           *classifier
		route, pool   string
		session       string
		classifyCalls int
	}
	title := routing.Request{Model: "auto", Session: "s1", MaxTokens: 1024}
	turn := routing.Request{Model: "auto", Session: "s1", Tools: 1, MaxTokens: 32000}
	bigTools := routing.Request{Model: "auto", Session: "s1", Tools: 10}
	haiku := routing.Request{Model: "claude-haiku-4-5", Session: "s1", Tools: 10}
	exp := turn
	exp.Header = headers("X-Experiment", "b")
	for _, st := range []step{
		{req: title, cls: complex, route: "side", pool: "a", session: routing.SessionSide},
		// The side request kept nothing: the first turn decides afresh.
		{req: turn, cls: simple, route: "default", pool: "a", session: routing.SessionNew, classifyCalls: 1},
		{req: turn, cls: simple, route: "default", pool: "a", session: routing.SessionKept, classifyCalls: 1},
		// A sticky: false route above the kept one does not move it.
		{req: exp, cls: simple, route: "default", pool: "a", session: routing.SessionKept, classifyCalls: 1},
		{req: turn, cls: complex, route: "complex", pool: "b", session: routing.SessionMovedUp, classifyCalls: 1},
		// Never down: a simple turn keeps complex, without asking the
		// classifier (only the routes above complex are evaluated).
		{req: turn, cls: simple, route: "complex", pool: "b", session: routing.SessionKept},
		{req: title, cls: simple, route: "side", pool: "a", session: routing.SessionSide},
		{req: haiku, cls: simple, route: "side", pool: "a", session: routing.SessionSide},
		{req: bigTools, cls: simple, route: "tools", pool: "c", session: routing.SessionMovedUp},
		{req: turn, cls: complex, route: "tools", pool: "c", session: routing.SessionKept},
		{req: title, cls: simple, route: "side", pool: "a", session: routing.SessionSide},
	} {
		d := pol.Decide(&st.req, st.cls.classify, false)
		if d.Route != st.route || d.Pools[0] != st.pool || d.Session != st.session || d.Side != (st.route == "side") {
			t.Fatalf("%+v: decision %+v, want route %s pool %s session %s", st.req, d, st.route, st.pool, st.session)
		}
		if st.cls.calls != st.classifyCalls {
			t.Errorf("%+v: classifier called %d times, want %d", st.req, st.cls.calls, st.classifyCalls)
		}
		st.cls.calls = 0
	}
	// A side request's context overflow is not kept either.
	side := pol.Decide(&title, simple.classify, false)
	pol.Escalate("s1", side, []string{"b"})
	if d := pol.Decide(&turn, simple.classify, false); d.Route != "tools" || d.Pools[0] != "c" {
		t.Errorf("after a side request's escalation: %+v, want the kept tools decision", d)
	}
}

// TestDecideExplainsSession: explain names why a request is a side
// request, which conditions held, and what the session store would do,
// and stores nothing.
func TestDecideExplainsSession(t *testing.T) {
	cfg := policytest.Load(t, header+`models:
  - {name: auto, route: policy}
  - {name: "*-haiku-*", route: policy, small: true}
session: {header: X-Session-Id, ttl: 1m}
routes:
  - name: side
    when: {any: [{tools: 0, max_tokens: {lte: 4096}}, {small_model: true}, {system_contains: ["title generator", "summarize"]}]}
    to: a
    side: true
  - {name: complex, when: {class: complex}, to: b}
  - {name: default, to: a}
`)
	pol := routing.New(cfg, routing.WithSessions(routing.NewSessions(100, time.Minute, nil)))
	for _, tc := range []struct {
		name string
		req  routing.Request
		why  []string
	}{
		{"no tools, short budget", routing.Request{Model: "auto", Session: "s", MaxTokens: 1024}, []string{"tools 0 == 0", "max_tokens 1024 <= 4096"}},
		{"small model", routing.Request{Model: "claude-haiku-4-5", Session: "s", Tools: 3}, []string{`model "claude-haiku-4-5" is the client's small model (models: "*-haiku-*")`}},
		{"fingerprint", routing.Request{Model: "auto", Session: "s", Tools: 2, System: "You are a title generator. Answer"}, []string{`system prompt contains "title generator"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := pol.Decide(&tc.req, label("complex").classify, true)
			if diff := cmp.Diff(tc.why, d.Why); diff != "" || d.Route != "side" || d.Session != routing.SessionSide {
				t.Errorf("decision %+v; why (-want +got):\n%s", d, diff)
			}
			if want := `route "side" is a side route: the request is routed on its own and the session keeps no decision`; d.SessionReason != want {
				t.Errorf("session reason %q, want %q", d.SessionReason, want)
			}
		})
	}
	// No max_tokens is no bound: not a short answer budget.
	d := pol.Decide(&routing.Request{Model: "auto", Session: "s"}, label("simple").classify, true)
	if d.Route != "default" || d.Skipped[0].Reason != "none of any matched (max_tokens unset not <= 4096; model \"auto\" is not a small model; system prompt (0 bytes) contains none of system_contains)" {
		t.Errorf("no max_tokens: %+v", d)
	}
	if d.Session != routing.SessionNew {
		t.Errorf("explained first decision: session %q, want new", d.Session)
	}
	if d := pol.Decide(&routing.Request{Model: "auto", Session: "s"}, label("complex").classify, true); d.Session != routing.SessionNew {
		t.Errorf("explain stored a decision: the next one is %q", d.Session)
	}
}

// TestDecideExplainsKept: explaining a request of a session with a kept
// decision says why the session keeps it.
func TestDecideExplainsKept(t *testing.T) {
	cfg := policytest.Load(t, header+`session: {header: X-Session-Id, ttl: 1m}
routes:
  - {name: experiment, when: {header: {X-Experiment: b}}, to: c, sticky: false}
  - {name: tools, when: {tools: {gte: 4}}, to: c}
  - {name: complex, when: {class: complex}, to: b}
  - {name: default, to: a}
`)
	pol := routing.New(cfg, routing.WithSessions(routing.NewSessions(100, time.Minute, nil)))
	pol.Decide(&routing.Request{Session: "s"}, label("complex").classify, false)
	for _, tc := range []struct {
		name string
		req  routing.Request
		want string
	}{
		{"nothing above", routing.Request{Session: "s"}, `the session keeps route "complex": no route above it matched`},
		{"sticky false above", routing.Request{Session: "s", Header: headers("X-Experiment", "b")}, `the session keeps route "complex": route "experiment" matched, but it is sticky: false`},
	} {
		d := pol.Decide(&tc.req, label("simple").classify, true)
		if d.Route != "complex" || d.Session != routing.SessionKept || d.SessionReason != tc.want || d.Why != nil {
			t.Errorf("%s: %+v, want reason %q", tc.name, d, tc.want)
		}
	}
}

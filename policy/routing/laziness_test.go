package routing_test

import (
	"testing"
	"time"

	"github.com/switchyard/switchyard/policy"
	"github.com/switchyard/switchyard/policy/internal/policytest"
	"github.com/switchyard/switchyard/policy/routing"
)

// TestCheapConditionsDecideFirst: a rule whose cheap conditions fail never
// classifies, even when its class condition sits inside any, or its not is
// cheap.
func TestCheapConditionsDecideFirst(t *testing.T) {
	cfg, err := policy.Load("lazy.yaml", []byte(`
version: 1
pools:
  a: {model: a, replicas: [{name: a1, url: "http://127.0.0.1:1"}]}
  b: {model: b, replicas: [{name: b1, url: "http://127.0.0.1:2"}]}
classifier: {kind: heuristic, labels: [simple, complex]}
routes:
  - name: hard-not-streaming
    when: {any: [{class: complex}], not: {stream: true}}
    to: b
  - name: tools-or-hard
    when: {any: [{class: complex}, {tools: {gte: 1}}]}
    to: b
  - name: default
    to: a
`), policytest.LoadOptions)
	if err != nil {
		t.Fatal(err)
	}
	p := routing.New(cfg)
	calls := 0
	classify := func() routing.Classification {
		calls++
		return routing.Classification{Label: "simple", Scores: map[string]float64{"simple": 1}}
	}
	// Streaming with a tool: the first rule fails on not(stream), the second
	// matches on tools; the classifier is never needed.
	d := p.Decide(&routing.Request{Model: "auto", Stream: true, Tools: 1, Messages: 1}, classify, false)
	if d.Route != "tools-or-hard" || calls != 0 {
		t.Errorf("route %q after %d classifier calls, want tools-or-hard after 0", d.Route, calls)
	}
}

// TestStickyDecisionDroppedWhenPoolIsGone: a session store that outlives a
// reload never hands back a decision naming a pool the new config lacks.
func TestStickyDecisionDroppedWhenPoolIsGone(t *testing.T) {
	sessions := routing.NewSessions(10, time.Hour, nil)
	old := routing.New(policytest.Load(t, `
version: 1
pools:
  a: {model: a, replicas: [{name: a1, url: "http://127.0.0.1:1"}]}
routes:
  - name: default
    to: a
`), routing.WithSessions(sessions))
	req := &routing.Request{Model: "auto", Messages: 1, Session: "s1"}
	if d := old.Decide(req, nil, false); d.Pools[0] != "a" {
		t.Fatalf("pools %v", d.Pools)
	}
	cur := routing.New(policytest.Load(t, `
version: 1
pools:
  b: {model: b, replicas: [{name: b1, url: "http://127.0.0.1:2"}]}
routes:
  - name: default
    to: b
`), routing.WithSessions(sessions))
	d := cur.Decide(req, nil, false)
	if d.Sticky || d.Pools[0] != "b" {
		t.Errorf("after the pool was removed: sticky %t pools %v, want a fresh decision for b", d.Sticky, d.Pools)
	}
	if d := cur.Decide(req, nil, false); !d.Sticky || d.Pools[0] != "b" {
		t.Errorf("the fresh decision was not kept: sticky %t pools %v", d.Sticky, d.Pools)
	}
}

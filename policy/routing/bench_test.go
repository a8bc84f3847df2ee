package routing_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/switchyard/switchyard/policy/internal/policytest"
	"github.com/switchyard/switchyard/policy/routing"
)

// BenchmarkDecide20Rules decides a request that only the 20th (catch-all)
// route matches: 19 rules fail, each on a cheap condition, some of them in
// front of a class condition that must then not run.
func BenchmarkDecide20Rules(b *testing.B) {
	conds := []string{
		`{stream: true}`,
		`{tools: {gte: 4}}`,
		`{model: [agent, coder]}`,
		`{header: {X-Experiment: b}}`,
		`{messages: {gt: 40}}`,
		`{prompt_tokens: {gte: 8000}}`,
		`{key: ci}`,
		`{any: [{stream: true}, {tools: {gt: 8}}]}`,
		`{not: {model: auto}}`,
		`{stream: true, class: complex}`,
		`{tools: {gte: 2}, score: {complex: {gte: 0.9}}}`,
	}
	var yaml strings.Builder
	yaml.WriteString(header + "routes:\n")
	for i := range 19 {
		fmt.Fprintf(&yaml, "  - {name: r%02d, when: %s, to: %c}\n", i, conds[i%len(conds)], 'a'+i%3)
	}
	yaml.WriteString("  - {name: default, to: a, fallback: [b]}\n")
	cfg := policytest.Load(b, yaml.String())
	pol := routing.New(cfg)
	req := &routing.Request{
		Model:        "auto",
		Tools:        1,
		Messages:     12,
		PromptTokens: 2400,
		Header:       http.Header{"X-Experiment": {"a"}, "X-Session-Id": {"abc"}},
		Key:          "agents",
	}
	classify := func() routing.Classification {
		b.Fatal("classifier called")
		return routing.Classification{}
	}
	b.ReportAllocs()
	for b.Loop() {
		if d := pol.Decide(req, classify, false); d.Route != "default" {
			b.Fatalf("route = %q, want default", d.Route)
		}
	}
}

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"path/filepath"
	"slices"
	"strings"

	"github.com/switchyard/switchyard/replay"

	"github.com/switchyard/switchyard/demo"
	"github.com/switchyard/switchyard/examples"
	"github.com/switchyard/switchyard/policy"
	"github.com/switchyard/switchyard/router"
)

// The replay workload sends the request sequences captured from real
// agents (testdata/agents/sessions/*.jsonl, written by agents'
// TestCaptureSessions) through the reference policy, one agent at a time
// on a fresh gateway, each request in the order the agent sent it, and
// counts where each went. The replicas are simulated (the reference
// cluster's profiles) and the classifier is vllmsim.DefaultChooser, a
// stated rule in place of MiniCPM that reads the turn the classifier's
// summary describes as the reference labels ask (a tool result that shows
// a failure, or an instruction that asks for reasoning or a plan:
// complex; a routine step: simple), so the split is the policy's on these
// requests with that rule, not a real MiniCPM's.

// replayPolicy is the reference policy with two more models entries: "*",
// so that the agents' own model names are routed by the policy, and the
// small model name the capture gave OpenCode (its small_model, where it
// sends its title requests) marked small, as docs/agents.md tells an
// operator to name an agent's small model.
// smallModelName is the small model agents' TestCaptureSessions configures
// (OpenCode's small_model).
const smallModelName = "agent-small"

func replayPolicy() (*policy.Config, error) {
	data, err := examples.Policies.ReadFile(demo.DefaultPolicy)
	if err != nil {
		return nil, err
	}
	text := strings.Replace(string(data), "\nmodels:\n", "\nmodels:\n  - {name: \"*\", route: policy}\n  - {name: "+smallModelName+", route: policy, small: true}\n", 1)
	return policy.Load("replay.yaml", []byte(text), router.LoadOptions())
}

// ReplayResult is one agent's replayed split.
type ReplayResult struct {
	Agent    string `json:"agent"`
	Requests int    `json:"requests"`
	// PromptTokens are estimated as the policy does, about four bytes of
	// the request's JSON a token.
	PromptTokens  int            `json:"prompt_tokens"`
	ByPool        map[string]int `json:"requests_by_pool"`
	ByRoute       map[string]int `json:"requests_by_route"`
	TokensByPool  map[string]int `json:"prompt_tokens_by_pool"`
	TokensByRoute map[string]int `json:"prompt_tokens_by_route"`
	Routes        []string       `json:"routes_in_order"`
	// Gain is the capacity model's throughput of the routed cluster (3
	// Qwen replicas, 2 MiniCPM, the classifier's calls on MiniCPM) over a
	// Qwen-only one (4 Qwen replicas) on this agent's requests as routed
	// (package replay); Bottleneck is the pool that limits it.
	Gain       float64 `json:"gain"`
	Bottleneck string  `json:"bottleneck"`
}

// Replay replays every session file in dir.
func Replay(ctx context.Context, dir string) ([]ReplayResult, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	if err != nil || len(files) == 0 {
		return nil, fmt.Errorf("no captured sessions in %s (run SWITCHYARD_CAPTURE=1 go test ./agents/ -run TestCaptureSessions)", dir)
	}
	slices.Sort(files)
	var out []ReplayResult
	for _, f := range files {
		r, err := replayFile(ctx, f)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		out = append(out, r)
	}
	return out, nil
}

func replayFile(ctx context.Context, file string) (ReplayResult, error) {
	res := ReplayResult{Agent: strings.TrimSuffix(filepath.Base(file), ".jsonl"), ByPool: map[string]int{}, ByRoute: map[string]int{},
		TokensByPool: map[string]int{}, TokensByRoute: map[string]int{}}
	rs, errs := replay.Run(ctx, replayPolicy, []string{file})
	if len(errs) > 0 {
		return res, errors.Join(errs...)
	}
	if len(rs) != 1 || rs[0].Requests == 0 {
		return res, fmt.Errorf("no requests")
	}
	r := rs[0]
	if len(r.Failed) > 0 {
		return res, fmt.Errorf("request %s", r.Failed[0])
	}
	res.Requests, res.PromptTokens, res.ByPool, res.TokensByPool, res.ByRoute = r.Requests, r.PromptTokens, r.ByPool, r.TokensByPool, r.ByRoute
	for _, t := range r.Turns {
		res.TokensByRoute[t.Route] += t.PromptTokens
		res.Routes = append(res.Routes, t.Route)
	}
	res.Gain, res.Bottleneck = r.Gain.Factor, r.Gain.Bottleneck
	return res, nil
}

// runReplay prints Replay's results.
func runReplay(ctx context.Context, w io.Writer, dir string, asJSON bool) error {
	rs, err := Replay(ctx, dir)
	if err != nil {
		return err
	}
	if asJSON {
		for _, r := range rs {
			b, _ := json.Marshal(r)
			fmt.Fprintln(w, string(b))
		}
		return nil
	}
	fmt.Fprintf(w, "Captured agent sessions through the reference policy (%s; simulated replicas; classifier: the simulator's DefaultChooser, not MiniCPM)\n", dir)
	fmt.Fprintf(w, "%-12s %8s %13s %12s %12s %9s %9s %s\n", "agent", "requests", "prompt tokens", "minicpm req", "minicpm tok", "qwen req", "qwen tok", "gain vs Qwen-only")
	pct := func(n, of int) string { return fmt.Sprintf("%.0f%%", 100*float64(n)/float64(max(of, 1))) }
	for _, r := range rs {
		fmt.Fprintf(w, "%-12s %8d %13d %12s %12s %9s %9s %.2fx (%s-bound)\n", r.Agent, r.Requests, r.PromptTokens,
			pct(r.ByPool["minicpm"], r.Requests), pct(r.TokensByPool["minicpm"], r.PromptTokens),
			pct(r.ByPool["qwen"], r.Requests), pct(r.TokensByPool["qwen"], r.PromptTokens), r.Gain, r.Bottleneck)
	}
	fmt.Fprintf(w, "\nroutes: requests (share of requests, of prompt tokens), and the order they came in\n")
	for _, r := range rs {
		var routes []string
		for _, name := range slices.Sorted(maps.Keys(r.ByRoute)) {
			routes = append(routes, fmt.Sprintf("%s %d (%s, %s)", name, r.ByRoute[name], pct(r.ByRoute[name], r.Requests), pct(r.TokensByRoute[name], r.PromptTokens)))
		}
		fmt.Fprintf(w, "%-12s %s; %s\n", r.Agent, strings.Join(routes, ", "), strings.Join(r.Routes, " "))
	}
	return nil
}

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard/switchyard/capacity"
	"github.com/switchyard/switchyard/demo"
	"github.com/switchyard/switchyard/examples"
	"github.com/switchyard/switchyard/policy"
	"github.com/switchyard/switchyard/router"
	"github.com/switchyard/switchyard/vllmsim"
)

// The replay workload sends the request sequences captured from real
// agents (testdata/agents/sessions/*.jsonl, written by agents'
// TestCaptureSessions) through the reference policy, one agent at a time
// on a fresh gateway, each request in the order the agent sent it, and
// counts where each went. The replicas are simulated (the reference
// cluster's profiles) and the classifier is the simulator's
// DefaultChooser, so the split is the policy's on these requests with that
// classifier, not a real MiniCPM's.

// replayPolicy is the reference policy with one more models entry, "*",
// so that the agents' own model names are routed by the policy.
func replayPolicy() (*policy.Config, error) {
	data, err := examples.Policies.ReadFile(demo.DefaultPolicy)
	if err != nil {
		return nil, err
	}
	text := strings.Replace(string(data), "\nmodels:\n", "\nmodels:\n  - {name: \"*\", route: policy}\n", 1)
	return policy.Load("replay.yaml", []byte(text), router.LoadOptions())
}

// ReplayResult is one agent's replayed split.
type ReplayResult struct {
	Agent    string `json:"agent"`
	Requests int    `json:"requests"`
	// PromptTokens are estimated as the policy does, about four bytes of
	// the request's JSON a token.
	PromptTokens int            `json:"prompt_tokens"`
	ByPool       map[string]int `json:"requests_by_pool"`
	ByRoute      map[string]int `json:"requests_by_route"`
	TokensByPool map[string]int `json:"prompt_tokens_by_pool"`
	Routes       []string       `json:"routes_in_order"`
	// Bound is the capacity model's throughput of the routed cluster over
	// a Qwen-only one at this agent's share of requests on Qwen, with its
	// mean prompt and 64 output tokens (capacity.Cluster.Bound).
	Bound float64 `json:"bound"`
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
	res := ReplayResult{Agent: strings.TrimSuffix(filepath.Base(file), ".jsonl"), ByPool: map[string]int{}, ByRoute: map[string]int{}, TokensByPool: map[string]int{}}
	data, err := os.ReadFile(file)
	if err != nil {
		return res, err
	}
	cfg, err := replayPolicy()
	if err != nil {
		return res, err
	}
	cl, err := demo.StartCluster(cfg, demo.ProfileByModel, 1000, vllmsim.WithChooser(vllmsim.DefaultChooser))
	if err != nil {
		return res, err
	}
	defer cl.Close()
	g, err := router.New(cfg, router.Options{Logger: slog.New(slog.DiscardHandler), Registry: prometheus.NewRegistry()})
	if err != nil {
		return res, err
	}
	defer g.Close()
	srv := httptest.NewServer(g.Handler())
	defer srv.Close()
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for n := 1; sc.Scan(); n++ {
		var req struct {
			Path    string            `json:"path"`
			Headers map[string]string `json:"headers"`
			Body    json.RawMessage   `json:"body"`
		}
		if err := json.Unmarshal(sc.Bytes(), &req); err != nil {
			return res, fmt.Errorf("line %d: %w", n, err)
		}
		hr, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+req.Path, bytes.NewReader(req.Body))
		if err != nil {
			return res, fmt.Errorf("line %d: %w", n, err)
		}
		hr.Header.Set("Content-Type", "application/json")
		for k, v := range req.Headers {
			hr.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(hr)
		if err != nil {
			return res, fmt.Errorf("line %d: %w", n, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return res, fmt.Errorf("line %d: status %d", n, resp.StatusCode)
		}
		pool, route := resp.Header.Get("X-Switchyard-Pool"), resp.Header.Get("X-Switchyard-Route")
		tokens := (len(req.Body) + 3) / 4
		res.Requests++
		res.PromptTokens += tokens
		res.ByPool[pool]++
		res.ByRoute[route]++
		res.TokensByPool[pool] += tokens
		res.Routes = append(res.Routes, route)
	}
	if err := sc.Err(); err != nil {
		return res, err
	}
	if res.Requests == 0 {
		return res, fmt.Errorf("no requests")
	}
	share := float64(res.ByPool["qwen"]) / float64(res.Requests)
	q, m := vllmsim.QwenFlashNext2Node(), vllmsim.MiniCPM5_2B()
	prompt := res.PromptTokens / res.Requests
	c := capacity.Cluster{
		Large:    capacity.Pool{Replicas: 3, ReplicaRPS: capacity.ReplicaRPS(q, prompt, 64)},
		Small:    capacity.Pool{Replicas: 2, ReplicaRPS: capacity.ReplicaRPS(m, prompt, 64)},
		Baseline: 4,
	}
	res.Bound = c.Bound(share)
	return res, nil
}

// runReplay prints Replay's results.
func runReplay(ctx context.Context, w io.Writer, dir string, asJSON bool) error {
	rs, err := Replay(ctx, dir)
	if err != nil {
		return err
	}
	if !asJSON {
		fmt.Fprintf(w, "Captured agent sessions through the reference policy (%s; simulated replicas, DefaultChooser classifier)\n", dir)
		fmt.Fprintf(w, "%-12s %8s %14s %18s %22s %s\n", "agent", "requests", "qwen requests", "qwen prompt tokens", "routes", "bound vs Qwen-only")
	}
	for _, r := range rs {
		if asJSON {
			b, _ := json.Marshal(r)
			fmt.Fprintln(w, string(b))
			continue
		}
		var routes []string
		for _, name := range slices.Sorted(maps.Keys(r.ByRoute)) {
			routes = append(routes, fmt.Sprintf("%s %d", name, r.ByRoute[name]))
		}
		fmt.Fprintf(w, "%-12s %8d %13.0f%% %17.0f%% %22s %.2fx\n", r.Agent, r.Requests,
			100*float64(r.ByPool["qwen"])/float64(r.Requests), 100*float64(r.TokensByPool["qwen"])/float64(max(r.PromptTokens, 1)),
			strings.Join(routes, ", "), r.Bound)
	}
	return nil
}

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
	// Qwen replicas, 2 MiniCPM) over a Qwen-only one (4 Qwen replicas) on
	// this agent's requests as routed (replayGain); Bottleneck is the
	// pool that limits it.
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
	var sized []routedRequest
	reqs, err := loadSession(file)
	if err != nil {
		return res, err
	}
	for n, req := range reqs {
		hr, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+req.Path, bytes.NewReader(req.Body))
		if err != nil {
			return res, fmt.Errorf("request %d: %w", n+1, err)
		}
		hr.Header.Set("Content-Type", "application/json")
		for k, v := range req.Headers {
			hr.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(hr)
		if err != nil {
			return res, fmt.Errorf("request %d: %w", n+1, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return res, fmt.Errorf("request %d: status %d", n+1, resp.StatusCode)
		}
		pool, route := resp.Header.Get("X-Switchyard-Pool"), resp.Header.Get("X-Switchyard-Route")
		tokens := (len(req.Body) + 3) / 4
		res.Requests++
		res.PromptTokens += tokens
		res.ByPool[pool]++
		res.ByRoute[route]++
		res.TokensByPool[pool] += tokens
		res.TokensByRoute[route] += tokens
		res.Routes = append(res.Routes, route)
		sized = append(sized, routedRequest{pool, tokens})
	}
	if res.Requests == 0 {
		return res, fmt.Errorf("no requests")
	}
	res.Gain, res.Bottleneck = replayGain(sized)
	return res, nil
}

// capturedRequest is one line of a session file: the request's path, the
// headers kept and its body.
type capturedRequest struct {
	Path    string            `json:"path"`
	Headers map[string]string `json:"headers"`
	Body    json.RawMessage   `json:"body"`
}

// loadSession reads a session file: one request a line, each with an API
// path (/v1/...) and a JSON object body; an empty file is an error.
func loadSession(file string) ([]capturedRequest, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var out []capturedRequest
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for n := 1; sc.Scan(); n++ {
		var req capturedRequest
		if err := json.Unmarshal(sc.Bytes(), &req); err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		if !strings.HasPrefix(req.Path, "/v1/") {
			return nil, fmt.Errorf("line %d: path %q is not an API path", n, req.Path)
		}
		if len(req.Body) == 0 || req.Body[0] != '{' {
			return nil, fmt.Errorf("line %d: the body is not a JSON object", n)
		}
		out = append(out, req)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no requests")
	}
	return out, nil
}

// routedRequest is one replayed request: the pool it went to and its
// prompt tokens.
type routedRequest struct {
	pool   string
	prompt int
}

// replayOutput is the answer length the capacity model gives every
// replayed request, as the classes workload's.
const replayOutput = 64

// replayGain is the capacity model (capacity.ServiceTime over the
// presets' batch limits: a saturated replica's time per request, with no
// prefix cache) applied request by request: the Qwen-only cluster spends
// the Qwen time of every request over 4 replicas; the routed one the Qwen
// time of the requests routed to qwen over 3 replicas and the MiniCPM time
// of the others over 2, the busier pool setting the pace. With every
// request of one size it is capacity.Cluster.Bound at the share sent to
// Qwen.
func replayGain(reqs []routedRequest) (float64, string) {
	q, m := vllmsim.QwenFlashNext2Node(), vllmsim.MiniCPM5_2B()
	var base, large, small float64
	for _, r := range reqs {
		wq := capacity.ServiceTime(q, r.prompt, replayOutput) / float64(q.MaxBatch)
		base += wq
		if r.pool == "qwen" {
			large += wq
		} else {
			small += capacity.ServiceTime(m, r.prompt, replayOutput) / float64(m.MaxBatch)
		}
	}
	largeT, smallT := large/3, small/2
	if largeT >= smallT {
		return (base / 4) / largeT, "qwen"
	}
	return (base / 4) / smallT, "minicpm"
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

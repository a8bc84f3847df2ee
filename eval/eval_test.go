package eval_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/switchyard/switchyard/eval"
	"github.com/switchyard/switchyard/policy"
	"github.com/switchyard/switchyard/router"
	"github.com/switchyard/switchyard/vllmsim"
)

// sim starts a simulated replica of model whose classifier answers come
// from vllmsim.DefaultChooser.
func sim(t *testing.T, model string) string {
	t.Helper()
	s := httptest.NewServer(vllmsim.New(vllmsim.Profile{Model: model, DefaultMaxTokens: 4, MaxModelLen: 65536},
		vllmsim.WithChooser(vllmsim.DefaultChooser)))
	t.Cleanup(s.Close)
	return s.URL
}

// fixtureConfig is a routed cluster of the reference models: two large
// replicas of two nodes each, one small replica of one node that also
// classifies; the policy of dgx-spark-8node.yaml without sessions.
const fixtureConfig = `version: 1
topology:
  fabric: switch
  nodes: [n1, n2, n3, n4, n5]
pools:
  small:
    model: openbmb/MiniCPM5-2B
    health: {disabled: true}
    replicas:
      - {name: s1, url: SMALL, nodes: [n5]}
  large:
    model: Qwen/Qwen3.8-Flash-Next
    health: {disabled: true}
    replicas:
      - {name: l1, url: LARGE1, nodes: [n1, n2]}
      - {name: l2, url: LARGE2, nodes: [n3, n4]}
classifier:
  kind: model
  pool: small
  labels: [simple, complex]
  timeout: 10s
  on_error: complex
models:
  - {name: auto, route: policy}
routes:
  - name: tool-heavy
    when: {tools: {gte: 4}}
    to: large
  - name: complex
    when: {class: complex}
    to: large
  - name: default
    to: small
`

// gateway loads yaml, with the replicas' URLs pointed at simulators, and
// builds a passive gateway on it, as switchyard eval does.
func gateway(t *testing.T, yaml string) (*router.Gateway, *policy.Config) {
	t.Helper()
	yaml = strings.NewReplacer("SMALL", sim(t, "openbmb/MiniCPM5-2B"),
		"LARGE1", sim(t, "Qwen/Qwen3.8-Flash-Next"), "LARGE2", sim(t, "Qwen/Qwen3.8-Flash-Next")).Replace(yaml)
	cfg, err := policy.Load("fixture.yaml", []byte(yaml), router.LoadOptions())
	if err != nil {
		t.Fatal(err)
	}
	g, err := router.New(cfg, router.Options{Logger: slog.New(slog.DiscardHandler), Passive: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Close)
	return g, cfg
}

// longAnalysis is long user text with two reasoning markers: two signs
// of difficulty, so complex at 0.9 (its length is no sign).
var longAnalysis = "Analyze this access log step by step and tell me what happened. " + strings.Repeat("GET /api/v1/items 200 12ms; ", 60)

// fixture is eight cases. What DefaultChooser answers follows from the
// user text the classifier is sent (no sessions here, so the last user
// turn): complex when it holds a reasoning marker (its length and its
// tools are no sign), simple otherwise. The answer gets 0.9, or 0.85 for
// a complex answer with one sign.
//
//	line  label    API        why                          predicted  p(complex)  route
//	1     simple   chat       plain question               simple     0.1         default
//	2     simple   chat       "why"                        complex    0.85        complex
//	3     complex  chat       "prove"                      complex    0.85        complex
//	4     complex  chat       no sign                      simple     0.1         default
//	5     complex  responses  "analyze" + "step by step"   complex    0.9         complex
//	6     simple   messages   system field, plain          simple     0.1         default
//	7     complex  chat       4 tools, no sign             simple     0.1         tool-heavy
//	8     simple   messages   "api" given, plain           simple     0.1         default
var fixture = strings.Join([]string{
	`{"label":"simple","request":{"model":"auto","messages":[{"role":"user","content":"What's the capital of France?"}]}}`,
	`{"label":"simple","request":{"model":"auto","messages":[{"role":"user","content":"Why is the sky blue?"}]}}`,
	`{"label":"complex","request":{"model":"auto","messages":[{"role":"user","content":"Prove that there are infinitely many primes."}]}}`,
	`{"label":"complex","request":{"model":"auto","messages":[{"role":"user","content":"Refactor the billing module into services."}]}}`,
	`{"label":"complex","request":{"model":"auto","instructions":"Be thorough.","input":` + quote(longAnalysis) + `}}`,
	`{"label":"simple","request":{"model":"auto","max_tokens":64,"system":"You are terse.","messages":[{"role":"user","content":"hi"}]}}`,
	`{"label":"complex","request":{"model":"auto","messages":[{"role":"user","content":"Add a feature flag for dark mode."}],"tools":[` +
		`{"type":"function","function":{"name":"read_file"}},{"type":"function","function":{"name":"write_file"}},` +
		`{"type":"function","function":{"name":"run_tests"}},{"type":"function","function":{"name":"grep"}}]}}`,
	"",
	`{"label":"simple","api":"messages","request":{"model":"auto","max_tokens":64,"messages":[{"role":"user","content":[{"type":"text","text":"Fix the typo in 'teh'."}]}]}}`,
}, "\n")

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func runFixture(t *testing.T, o eval.Options) (*eval.Report, []eval.Case, *router.Gateway) {
	t.Helper()
	g, cfg := gateway(t, fixtureConfig)
	cases, err := eval.Read(g, cfg.Classifier.Labels, "fixture.jsonl", []byte(fixture))
	if err != nil {
		t.Fatal(err)
	}
	r, err := eval.Run(context.Background(), g, cases, o)
	if err != nil {
		t.Fatal(err)
	}
	return r, cases, g
}

func f(x float64) *float64 { return &x }

// TestEvalFixture checks every section of the report against the table
// above, computed by hand.
func TestEvalFixture(t *testing.T) {
	r, cases, _ := runFixture(t, eval.Options{Concurrency: 3})
	var lines []int
	var apis []router.API
	for _, c := range cases {
		lines, apis = append(lines, c.Line), append(apis, c.API)
	}
	if diff := cmp.Diff([]int{1, 2, 3, 4, 5, 6, 7, 9}, lines); diff != "" {
		t.Errorf("case lines (-want +got):\n%s", diff)
	}
	wantAPIs := []router.API{"chat", "chat", "chat", "chat", "responses", "messages", "chat", "messages"}
	if diff := cmp.Diff(wantAPIs, apis); diff != "" {
		t.Errorf("APIs (-want +got):\n%s", diff)
	}
	approx := cmpopts.EquateApprox(0, 0.0001)
	want := &eval.Report{
		Cases:    8,
		APIs:     map[router.API]int{"chat": 5, "responses": 1, "messages": 2},
		Labels:   []string{"simple", "complex"},
		Accuracy: 0.625,
		Correct:  5,
		Confusion: map[string]map[string]int{
			"simple":  {"simple": 3, "complex": 1},
			"complex": {"simple": 2, "complex": 2},
		},
		PerLabel: map[string]eval.LabelStats{
			"simple":  {Support: 4, Predicted: 5, Correct: 3, Precision: f(0.6), Recall: f(0.75), F1: f(0.6667)},
			"complex": {Support: 4, Predicted: 3, Correct: 2, Precision: f(0.6667), Recall: f(0.5), F1: f(0.5714)},
		},
		Split: eval.Split{
			Pools:  map[string]eval.Count{"small": {4, 0.5}, "large": {4, 0.5}},
			Routes: map[string]eval.Count{"tool-heavy": {1, 0.125}, "complex": {3, 0.375}, "default": {4, 0.5}},
			ByLabel: map[string]map[string]eval.Count{
				"simple":  {"small": {3, 0.75}, "large": {1, 0.25}},
				"complex": {"small": {1, 0.25}, "large": {3, 0.75}},
			},
			Classified: 7, // the tool-heavy route matched before any class condition
		},
		// Two large replicas of two nodes and one small of one: 5 nodes
		// hold 2 large-only replicas. At share 0.5 the large pool limits:
		// 2 / (0.5 × 2) = 2.
		Projected: eval.Projection{HardLabel: "complex", LargePool: "large", SmallPool: "small", Share: 0.5, Ratio: f(2),
			Bottleneck: "large", LargeReplicas: 2, SmallReplicas: 1, Nodes: 5, BaselineReplicas: 2,
			ReplicaRPS: map[string]float64{"large": 5.403, "small": 89.5801}},
		ClassifierFailures: eval.Failures{Label: "complex", Cases: []eval.Failure{}},
	}
	got := *r
	got.Calibration, got.Sweep = eval.Calibration{}, eval.Sweep{}
	if diff := cmp.Diff(want, &got, approx); diff != "" {
		t.Errorf("report (-want +got):\n%s", diff)
	}

	// Calibration: lines 2 and 3 at 0.85 (one right), the six others at
	// 0.9 (four right).
	bins := make([]eval.Bin, 10)
	for i := range bins {
		bins[i] = eval.Bin{From: float64(i) / 10, To: float64(i+1) / 10}
	}
	bins[8] = eval.Bin{From: 0.8, To: 0.9, Cases: 2, Confidence: f(0.85), Accuracy: f(0.5)}
	bins[9] = eval.Bin{From: 0.9, To: 1, Cases: 6, Confidence: f(0.9), Accuracy: f(0.6667)}
	// (2 × |0.5 − 0.85| + 6 × |4/6 − 0.9|) / 8 = 0.2625
	wantCal := eval.Calibration{Cases: 8, Bins: bins, ECE: f(0.2625)}
	if diff := cmp.Diff(wantCal, r.Calibration, approx); diff != "" {
		t.Errorf("calibration (-want +got):\n%s", diff)
	}

	// Sweep: p(complex) is 0.1 for five cases, 0.85 for lines 2 and 3, 0.9
	// for line 5. Projected: 2 / (share × 2) while the large pool limits;
	// with no large traffic the small pool does: 89.58 / (2 × 5.403).
	type point struct {
		share, recall float64
		precision     *float64
		projected     float64
	}
	wantAt := func(th float64) point {
		switch {
		case th <= 0.1:
			return point{1, 1, f(0.5), 1}
		case th <= 0.85:
			return point{0.375, 0.5, f(0.6667), 2.6667}
		case th <= 0.9:
			return point{0.125, 0.25, f(1), 8}
		}
		return point{0, 0, nil, 8.2898}
	}
	if r.Sweep.Label != "complex" || len(r.Sweep.Points) != 21 {
		t.Fatalf("sweep of %q with %d points, want complex with 21", r.Sweep.Label, len(r.Sweep.Points))
	}
	for i, p := range r.Sweep.Points {
		th := float64(i) * 0.05
		w := wantAt(th - 1e-9)
		gotP := point{p.Share, *p.Recall, p.Precision, *p.Projected}
		if diff := cmp.Diff(w, gotP, approx, cmp.AllowUnexported(point{})); diff != "" || p.Threshold != float64(int(th*100+0.5))/100 {
			t.Errorf("threshold %.2f (got %v) (-want +got):\n%s", th, p.Threshold, diff)
		}
		if i > 0 {
			prev := r.Sweep.Points[i-1]
			if p.Share > prev.Share || *p.Recall > *prev.Recall {
				t.Errorf("threshold %.2f: share %v, recall %v rose from %v, %v", th, p.Share, *p.Recall, prev.Share, *prev.Recall)
			}
		}
	}
}

// TestEvaluateMatchesExplain: for chat requests, Evaluate reaches the
// route, pool and class that explain (the serving path's decide) does,
// with and without sessions (which classify a conversation's opening).
func TestEvaluateMatchesExplain(t *testing.T) {
	bodies := []string{
		`{"model":"auto","messages":[{"role":"user","content":"What's the capital of France?"}]}`,
		`{"model":"auto","messages":[{"role":"user","content":"Why is the sky blue?"}]}`,
		`{"model":"auto","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"Hello!"},{"role":"user","content":"Now prove Fermat's little theorem."}]}`,
		`{"model":"auto","messages":[{"role":"system","content":"Debug mode."},{"role":"user","content":"hi"}]}`,
		`{"model":"large","messages":[{"role":"user","content":"hi"}]}`,
	}
	for _, tc := range []struct{ name, session string }{{"no session", ""}, {"implicit session", "session: {}\n"}} {
		t.Run(tc.name, func(t *testing.T) {
			g, _ := gateway(t, fixtureConfig+tc.session)
			for _, body := range bodies {
				req, err := g.PrepareEval(router.DetectAPI([]byte(body)), []byte(body))
				if err != nil {
					t.Fatal(err)
				}
				got := g.Evaluate(context.Background(), req)
				want, err := g.Explain(context.Background(), nil, []byte(body), "")
				if err != nil {
					t.Fatal(err)
				}
				class := ""
				if got.Classified {
					class = got.Label
				}
				if got.Route != want.Route || got.Pools[0] != want.Pool || class != want.Class {
					t.Errorf("%s: evaluate %s/%s class %q, explain %s/%s class %q", body, got.Route, got.Pools[0], class, want.Route, want.Pool, want.Class)
				}
			}
		})
	}
}

func TestEvalProgress(t *testing.T) {
	var buf bytes.Buffer
	clock := time.Unix(0, 0)
	now := func() time.Time { clock = clock.Add(time.Second); return clock }
	runFixture(t, eval.Options{Concurrency: 1, Progress: &buf, Now: now})
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 8 || lines[0] != "1/8 cases (12%), 0 classifier failures, 1s" || lines[7] != "8/8 cases (100%), 0 classifier failures, 9s" {
		t.Errorf("progress lines:\n%s", buf.String())
	}
	buf.Reset()
	// A run that ends before its second is quiet, however slow the machine:
	// the clock starts at 0 and then reads 999ms.
	started := false
	justUnder := func() time.Time {
		if !started {
			started = true
			return time.Unix(0, 0)
		}
		return time.Unix(0, 0).Add(999 * time.Millisecond)
	}
	runFixture(t, eval.Options{Progress: &buf, Now: justUnder})
	if buf.Len() != 0 {
		t.Errorf("a short run printed progress:\n%s", buf.String())
	}
}

// TestEvalClassifierFailure: a classifier that cannot answer gives every
// case on_error's label, each listed.
func TestEvalClassifierFailure(t *testing.T) {
	dead := httptest.NewServer(nil)
	dead.Close()
	g, cfg := gateway(t, strings.Replace(fixtureConfig, "url: SMALL", "url: "+dead.URL, 1))
	cases, err := eval.Read(g, cfg.Classifier.Labels, "fixture.jsonl", []byte(fixture))
	if err != nil {
		t.Fatal(err)
	}
	r, err := eval.Run(context.Background(), g, cases, eval.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if r.ClassifierFailures.Count != 8 || len(r.ClassifierFailures.Cases) != 8 || r.ClassifierFailures.Cases[7].Line != 9 ||
		r.ClassifierFailures.Cases[0].Error == "" || r.Accuracy != 0.5 || r.Confusion["simple"]["complex"] != 4 || r.Calibration.Cases != 0 {
		t.Errorf("failures %+v, accuracy %v, confusion %v, calibration cases %d", r.ClassifierFailures, r.Accuracy, r.Confusion, r.Calibration.Cases)
	}
}

func TestEvalReadErrors(t *testing.T) {
	g, cfg := gateway(t, fixtureConfig)
	data := strings.Join([]string{
		`{"label":"simple","request":{"model":"auto","messages":[{"role":"user","content":"hi"}]}}`,
		`{"label":"simple","request":{"model":"auto","messages":[`,
		`{"label":"hard","request":{"model":"auto","messages":[{"role":"user","content":"hi"}]}}`,
		`{"request":{"model":"auto","messages":[{"role":"user","content":"hi"}]}}`,
		`{"label":"simple"}`,
		`{"label":"simple","request":{"model":"auto"}}`,
		`{"label":"simple","request":{"model":"gpt-9","messages":[{"role":"user","content":"hi"}]}}`,
		`{"label":"simple","request":{"model":"auto","input":"hi"},"weight":2}`,
		`{"label":"simple","api":"embeddings","request":{"model":"auto","input":"hi"}}`,
		`[1, 2]`,
		`{"label":1,"request":{}}`,
		``,
		`{"label":"complex","request":{"model":"auto","input":"hi"}}`,
	}, "\n")
	_, err := eval.Read(g, cfg.Classifier.Labels, "set.jsonl", []byte(data))
	var errs eval.Errors
	if !errors.As(err, &errs) {
		t.Fatalf("Read: %v, want eval.Errors", err)
	}
	want := []string{
		`set.jsonl:2: not valid JSON`,
		`set.jsonl:3: label "hard" is not a class of the classifier (labels: simple, complex)`,
		`set.jsonl:4: missing "label"`,
		`set.jsonl:5: missing "request"`,
		`set.jsonl:6: request (chat API): missing required parameter: 'messages'`,
		"set.jsonl:7: request (chat API): model not found: the model `gpt-9` does not exist",
		`set.jsonl:8: unknown key "weight" (known: label, request, api)`,
		`set.jsonl:9: request (embeddings API): unknown API "embeddings" (known: chat, completions, responses, messages)`,
		`set.jsonl:10: want a JSON object with label and request, got a JSON array`,
		`set.jsonl:11: "label" must be a string, not a JSON number`,
	}
	if len(errs) != len(want) {
		t.Fatalf("%d errors, want %d:\n%v", len(errs), len(want), err)
	}
	for i, w := range want {
		if !strings.HasPrefix(errs[i].Error(), w) {
			t.Errorf("error %d: %q, want it to start with %q", i, errs[i].Error(), w)
		}
	}
	if _, err := eval.Read(g, cfg.Classifier.Labels, "empty.jsonl", []byte("\n\n")); err == nil || !strings.Contains(err.Error(), "empty.jsonl:1: no cases") {
		t.Errorf("empty set: %v", err)
	}
}

// TestEvalExamples runs the shipped set against simulators of the
// reference cluster: every line reads, the classifier answers every case,
// and the result is neither perfect nor useless.
func TestEvalExamples(t *testing.T) {
	data, err := os.ReadFile("../examples/eval/agents.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := router.LoadConfig("../examples/policies/dgx-spark-8node.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range cfg.Pools {
		for _, rep := range p.Replicas {
			rep.URL = sim(t, p.Model)
			if rep.Parsed, err = url.Parse(rep.URL); err != nil {
				t.Fatal(err)
			}
		}
	}
	cfg.Classifier.Timeout = policy.Duration(10 * time.Second) // the race detector on a busy machine
	g, err := router.New(cfg, router.Options{Logger: slog.New(slog.DiscardHandler), Passive: true})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	cases, err := eval.Read(g, cfg.Classifier.Labels, "agents.jsonl", data)
	if err != nil {
		t.Fatal(err)
	}
	r, err := eval.Run(context.Background(), g, cases, eval.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if r.Cases < 90 || r.ClassifierFailures.Count != 0 || r.Accuracy <= 0.5 || r.Accuracy >= 0.95 {
		t.Errorf("%d cases, %d classifier failures, accuracy %v", r.Cases, r.ClassifierFailures.Count, r.Accuracy)
	}
	for _, api := range []router.API{router.APIChat, router.APIResponses, router.APIMessages} {
		if r.APIs[api] < 20 {
			t.Errorf("%d %s cases, want a fair mix of the three APIs", r.APIs[api], api)
		}
	}
	var text bytes.Buffer
	if err := eval.WriteText(&text, r, cfg.Pools.Names(), g.Snapshot().Policy.Routes()); err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", text.String())
}

// TestEvalSimClusterConfig: examples/eval/sim-cluster.yaml is
// dgx-spark-8node.yaml with local URLs and nothing else changed, so what
// docs/eval.md shows on it holds for the reference policy.
func TestEvalSimClusterConfig(t *testing.T) {
	var rendered []string
	for _, path := range []string{"../examples/policies/dgx-spark-8node.yaml", "../examples/eval/sim-cluster.yaml"} {
		cfg, err := router.LoadConfig(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range cfg.Pools {
			for _, rep := range p.Replicas {
				rep.URL, rep.Parsed = "", nil
			}
		}
		out, err := policy.Render(cfg)
		if err != nil {
			t.Fatal(err)
		}
		rendered = append(rendered, string(out))
	}
	if diff := cmp.Diff(rendered[0], rendered[1]); diff != "" {
		t.Errorf("sim-cluster.yaml differs from the reference policy beyond its URLs (-reference +sim-cluster):\n%s", diff)
	}
}

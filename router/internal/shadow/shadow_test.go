package shadow

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/switchyard/switchyard/classifier"
	"github.com/switchyard/switchyard/policy"
	"github.com/switchyard/switchyard/policy/routing"
	"github.com/switchyard/switchyard/pools"
)

const runningYAML = `
version: 1
pools:
  qwen: {model: Qwen/Qwen3.8-Flash-Next, health: {disabled: true}, replicas: [{name: qwen-a, url: "http://127.0.0.1:1"}]}
  minicpm: {model: openbmb/MiniCPM5-2B, health: {disabled: true}, replicas: [{name: minicpm-a, url: "http://127.0.0.1:2"}]}
classifier:
  kind: model
  pool: minicpm
  labels: [simple, {complex: "multi-step reasoning, code"}]
  timeout: 1m
  on_error: complex
models:
  - {name: auto, route: policy}
routes:
  - name: default
    to: qwen
`

func load(t *testing.T, text string) *policy.Config {
	t.Helper()
	cfg, err := policy.Load("t.yaml", []byte(text), policy.LoadOptions{Balancers: pools.Balancers(), Classifiers: classifier.Kinds()})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func counter() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: "shadow_decisions_total"}, []string{"live_pool", "shadow_pool"})
}

// TestNewRefuses: a shadow may only name the running pools, and shares
// the running classifier, so its labels must be the running ones.
func TestNewRefuses(t *testing.T) {
	running := load(t, runningYAML)
	for name, c := range map[string]struct{ yaml, why string }{
		"other pool":   {strings.Replace(strings.ReplaceAll(runningYAML, "minicpm", "tiny"), "openbmb/MiniCPM5-2B", "m", 1), `shadow pool "tiny" is not a pool of the running config`},
		"other labels": {strings.Replace(runningYAML, "labels: [simple, {complex:", "labels: [easy, {complex:", 1), "classifier labels [easy complex] differ"},
	} {
		cand := load(t, c.yaml)
		if _, err := New("shadow.yaml", cand, running, nil, counter()); err == nil || !strings.Contains(err.Error(), c.why) {
			t.Errorf("%s: %v, want the shadow refused (%s)", name, err, c.why)
		}
	}
	prev, err := New("shadow.yaml", load(t, runningYAML), running, nil, counter())
	if err != nil {
		t.Fatal(err)
	}
	next, err := New("shadow.yaml", load(t, runningYAML), running, prev, counter())
	if err != nil || prev.Generation() != 1 || next.Generation() != 2 {
		t.Errorf("generations %d, %d (%v), want 1, 2", prev.Generation(), next.Generation(), err)
	}
}

// stalled is a classifier transport that answers nothing until released.
type stalled struct{ release chan struct{} }

func (s stalled) ChatCompletion(ctx context.Context, _ []byte) ([]byte, error) {
	select {
	case <-s.release:
	case <-ctx.Done():
	}
	return nil, errors.New("released")
}

// TestClassifierCallsBounded: when only the shadow needs the classifier
// and the classifier stalls, at most 64 shadow decisions wait on it; the
// rest are counted as skipped, and Decide never waits.
func TestClassifierCallsBounded(t *testing.T) {
	running := load(t, runningYAML)
	cand := load(t, strings.Replace(runningYAML, "routes:\n", "routes:\n  - name: complex\n    when: {class: complex}\n    to: qwen\n", 1))
	tr := stalled{release: make(chan struct{})}
	c, err := classifier.New(classifier.Options{Kind: "model", Model: "m", Labels: []string{"simple", "complex"}, OnError: "complex",
		MaxInputChars: 1000, Timeout: time.Minute, Concurrency: 4, Transport: tr})
	if err != nil {
		t.Fatal(err)
	}
	sh, err := New("shadow.yaml", cand, running, nil, counter())
	if err != nil {
		t.Fatal(err)
	}
	live := routing.Decision{Route: "default", Pools: []string{"qwen"}}
	start := time.Now()
	for i := range 70 {
		sh.Decide(context.Background(), live, &routing.Request{Model: "auto", Messages: 1}, classifier.Result{}, c,
			classifier.Input{LastUser: fmt.Sprint("question ", i)})
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("70 decisions took %v: Decide waited on the classifier", d)
	}
	sum := sh.Summary()
	if sum.Skipped != 6 || sum.Decisions != 0 {
		t.Errorf("skipped %d, decisions %d while the classifier stalled; want 6 and 0", sum.Skipped, sum.Decisions)
	}
	close(tr.release)
	deadline := time.Now().Add(10 * time.Second)
	for sh.Summary().Decisions != 64 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := sh.Summary().Decisions; n != 64 {
		t.Errorf("%d decisions once the classifier answered, want the 64 that waited", n)
	}
}

// TestSummary: decisions known at once are counted by live and shadow
// pool and route; agreement and the splits are shares of them, and the
// pairs come most frequent first.
func TestSummary(t *testing.T) {
	running := load(t, runningYAML)
	cand := load(t, strings.Replace(runningYAML, "    to: qwen\n", "    to: minicpm\n", 1))
	m := counter()
	sh, err := New("shadow.yaml", cand, running, nil, m)
	if err != nil {
		t.Fatal(err)
	}
	done := classifier.Result{Label: "simple", Outcome: classifier.OutcomeOK}
	for _, pool := range []string{"qwen", "qwen", "qwen", "minicpm"} {
		sh.Decide(context.Background(), routing.Decision{Route: "live-" + pool, Pools: []string{pool}}, &routing.Request{Model: "auto", Messages: 1}, done, nil, classifier.Input{})
	}
	s := sh.Summary()
	if s.Decisions != 4 || s.Agreement != 0.25 || s.LiveSplit["qwen"] != 0.75 || s.Split["minicpm"] != 1 || !s.Enabled || s.File != "shadow.yaml" {
		t.Errorf("summary %+v", s)
	}
	if len(s.Pairs) != 2 || s.Pairs[0].Live != "qwen" || s.Pairs[0].Shadow != "minicpm" || s.Pairs[0].Count != 3 {
		t.Errorf("pairs %+v, want qwen->minicpm 3 first", s.Pairs)
	}
	if len(s.Routes) != 2 || s.Routes[0].Live != "live-qwen" || s.Routes[0].Shadow != "default" {
		t.Errorf("routes %+v", s.Routes)
	}
	if v := testutil.ToFloat64(m.WithLabelValues("qwen", "minicpm")); v != 3 {
		t.Errorf("metric qwen/minicpm = %v, want 3", v)
	}
}

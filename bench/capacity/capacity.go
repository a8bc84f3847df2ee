package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard/switchyard/capacity"
	"github.com/switchyard/switchyard/demo"
	"github.com/switchyard/switchyard/policy"
	"github.com/switchyard/switchyard/router"
	"github.com/switchyard/switchyard/vllmsim"
)

// Options sets the scale of a run.
type Options struct {
	Duration  time.Duration
	SpeedUp   float64
	Workers   int
	MaxTokens int
	// BatchScale multiplies the presets' batch limits (tests use a smaller
	// cluster so the race detector keeps up); ratios do not depend on it.
	BatchScale float64
	// Balance, when set, overrides every pool's balancer.
	Balance string
	// SerialPrefill makes the replicas prefill one request at a time
	// (vllmsim.Profile.SerialPrefill), as compute-bound prefill is.
	SerialPrefill bool
	// AgentPool is the pool the agents workload runs on: "qwen" (3
	// replicas, the default) or "minicpm" (2), as in the reference
	// cluster.
	AgentPool string
}

// Layout is a cluster shape.
type Layout int

// The two clusters compared.
const (
	QwenOnly Layout = iota
	Routed
)

// Result is one measurement.
type Result struct {
	RPS      float64
	P50, P99 time.Duration
	Errors   int
}

// Point is one row of the capacity table.
type Point struct {
	Share, RPS, Ratio, Bound, Efficiency float64
}

// hardMarker makes the simulated classifier answer "complex".
const hardMarker = "[hard]"

func profiles(o Options) (qwen, minicpm vllmsim.Profile) {
	qwen, minicpm = vllmsim.QwenFlashNext2Node(), vllmsim.MiniCPM5_2B()
	for _, p := range []*vllmsim.Profile{&qwen, &minicpm} {
		p.SpeedUp = o.SpeedUp
		p.MaxBatch = max(1, int(math.Round(float64(p.MaxBatch)*o.BatchScale)))
		p.SerialPrefill = o.SerialPrefill
	}
	return qwen, minicpm
}

// promptTokens is what the simulator counts for the load's prompts.
const promptTokens = 40

// Bound is the capacity bound of the routed cluster over the Qwen-only one
// at share: each pool's capacity over its share of the traffic, the smaller
// wins (the model is package capacity's).
func Bound(o Options, share float64) float64 {
	q, m := profiles(o)
	c := capacity.Cluster{
		Large:    capacity.Pool{Replicas: 3, ReplicaRPS: capacity.ReplicaRPS(q, promptTokens, o.MaxTokens)},
		Small:    capacity.Pool{Replicas: 2, ReplicaRPS: capacity.ReplicaRPS(m, promptTokens, o.MaxTokens)},
		Baseline: 4,
	}
	return c.Bound(share)
}

func config(o Options, layout Layout) string {
	bal := func(def string) string {
		if o.Balance != "" {
			return o.Balance
		}
		return def
	}
	var sb strings.Builder
	sb.WriteString("version: 1\npools:\n")
	if layout == QwenOnly {
		fmt.Fprintf(&sb, "  qwen:\n    model: Qwen/Qwen3.8-Flash-Next\n    balance: %s\n    health: {disabled: true}\n    replicas:\n", bal("affinity"))
		for i := range 4 {
			fmt.Fprintf(&sb, "      - {name: qwen-%d, url: http://sim}\n", i)
		}
		sb.WriteString("routes:\n  - name: all\n    to: qwen\n")
		return sb.String()
	}
	fmt.Fprintf(&sb, "  qwen:\n    model: Qwen/Qwen3.8-Flash-Next\n    balance: %s\n    health: {disabled: true}\n    replicas:\n", bal("affinity"))
	for i := range 3 {
		fmt.Fprintf(&sb, "      - {name: qwen-%d, url: http://sim}\n", i)
	}
	fmt.Fprintf(&sb, "  minicpm:\n    model: openbmb/MiniCPM5-2B\n    balance: %s\n    health: {disabled: true}\n    replicas:\n", bal("affinity"))
	for i := range 2 {
		fmt.Fprintf(&sb, "      - {name: minicpm-%d, url: http://sim}\n", i)
	}
	sb.WriteString(`classifier:
  kind: model
  pool: minicpm
  labels: [simple, complex]
  timeout: 5s
  cache: {size: 1000, ttl: 10m}
routes:
  - name: complex
    when: {class: complex}
    to: qwen
  - name: default
    to: minicpm
`)
	return sb.String()
}

// chooser answers the classifier by the load's marker, so exactly the
// intended share is complex.
func chooser(req vllmsim.ChoiceRequest) (string, map[string]float64) {
	for _, m := range req.Messages {
		if strings.Contains(m.Content, hardMarker) {
			return "complex", map[string]float64{"complex": 0.97, "simple": 0.03}
		}
	}
	return "simple", map[string]float64{"simple": 0.97, "complex": 0.03}
}

// Measure runs the closed-loop load against layout at share and returns the
// completed requests per second over the measurement window.
func Measure(ctx context.Context, o Options, layout Layout, share float64) (Result, error) {
	cfg, err := policy.Load("capacity.yaml", []byte(config(o, layout)), router.LoadOptions())
	if err != nil {
		return Result{}, err
	}
	qp, mp := profiles(o)
	cl, err := demo.StartCluster(cfg, func(p *policy.Pool) vllmsim.Profile {
		if p.Name == "qwen" {
			return qp
		}
		return mp
	}, o.SpeedUp, vllmsim.WithChooser(chooser))
	if err != nil {
		return Result{}, err
	}
	defer cl.Close()
	g, err := router.New(cfg, router.Options{Logger: slog.New(slog.DiscardHandler), Registry: prometheus.NewRegistry()})
	if err != nil {
		return Result{}, err
	}
	defer g.Close()
	srv := httptest.NewServer(g.Handler())
	defer srv.Close()

	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: o.Workers, MaxIdleConns: o.Workers, DisableCompression: true}}
	defer client.CloseIdleConnections()
	warmup := o.Duration / 2
	runCtx, cancel := context.WithTimeout(ctx, warmup+o.Duration)
	defer cancel()
	start := time.Now()
	windowStart, windowEnd := start.Add(warmup), start.Add(warmup+o.Duration)
	var seq atomic.Int64
	var mu sync.Mutex
	var lat []time.Duration
	var completed, errs atomic.Int64
	var wg sync.WaitGroup
	for range o.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for runCtx.Err() == nil {
				n := seq.Add(1)
				// Exactly share of the sequence is hard: request n is hard
				// when floor(n·share) steps up.
				hard := math.Floor(float64(n)*share) > math.Floor(float64(n-1)*share)
				body := requestBody(n, hard, o.MaxTokens)
				t0 := time.Now()
				resp, err := client.Post(srv.URL+"/v1/chat/completions", "application/json", bytes.NewReader(body))
				if err != nil {
					if runCtx.Err() == nil {
						errs.Add(1)
					}
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				t1 := time.Now()
				if resp.StatusCode != 200 {
					errs.Add(1)
					continue
				}
				if t1.After(windowStart) && t1.Before(windowEnd) {
					completed.Add(1)
					mu.Lock()
					lat = append(lat, t1.Sub(t0))
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if ctx.Err() != nil {
		return Result{}, ctx.Err()
	}
	slices.Sort(lat)
	r := Result{RPS: float64(completed.Load()) / o.Duration.Seconds(), Errors: int(errs.Load())}
	if len(lat) > 0 {
		r.P50, r.P99 = lat[len(lat)/2], lat[min(len(lat)-1, len(lat)*99/100)]
	}
	if r.Errors > 0 {
		return r, fmt.Errorf("%d requests failed", r.Errors)
	}
	return r, nil
}

// requestBody is one of a small set of prompts per class (so the
// classifier's cache serves repeats, as it does for real agents' system
// prompts), each about promptTokens long.
func requestBody(n int64, hard bool, maxTokens int) []byte {
	topic := n % 16
	text := fmt.Sprintf("Question %02d about the harbor schedule and the boats leaving today, please answer", topic)
	if hard {
		text = hardMarker + fmt.Sprintf(" Plan %02d: reason through the harbor logistics step by step", topic)
	}
	return fmt.Appendf(nil, `{"model":"auto","max_tokens":%d,"messages":[{"role":"user","content":%q}]}`, maxTokens, text)
}

// Command capacity reproduces the reference cluster's published capacity
// result through the real gateway, balancers and classifier path, on
// simulated replicas timed like the reference DGX Spark cluster's published figures.
//
// With --workload classes (the default), a Qwen-only cluster (four Qwen
// replicas of two nodes) is compared with the routed cluster (three Qwen
// replicas of two nodes and two MiniCPM replicas of one node, MiniCPM also
// classifying) at several shares of traffic sent to Qwen. Closed-loop
// clients send the same request mix to both; the classifier sends an exact
// share to Qwen.
//
// With --workload agents, multi-turn agent conversations (a few agents with
// long system prompts, growing conversations) run against one pool of three
// Qwen replicas with vLLM's prefix cache, once per balancer in --balancers,
// to show what prefix affinity is worth: throughput, TTFT and the cache's
// hit rate.
//
// With --workload replay, the request sequences captured from real agents
// (--sessions, testdata/agents/sessions) go through the reference policy,
// with a stated turn rule in place of the MiniCPM classifier, and each
// agent's share of requests and of prompt tokens per pool and per route is
// printed, with the capacity model's throughput gain over a Qwen-only
// cluster on those requests (replay.go).
//
//	go run ./bench/capacity [--json] [--duration 4s] [--speedup 10]
//	go run ./bench/capacity --workload agents [--balancers affinity,round_robin] [--duration 12s] [--workers 64]
//	go run ./bench/capacity --workload replay [--sessions testdata/agents/sessions] [--json]
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"time"
)

func main() {
	fs := flag.NewFlagSet("capacity", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print one JSON object per line instead of a table")
	duration := fs.Duration("duration", 4*time.Second, "measurement window per point (after warm-up)")
	speedUp := fs.Float64("speedup", 10, "divide simulated model time by this")
	workers := fs.Int("workers", 192, "closed-loop clients (enough to saturate Qwen at every share, few enough that the Qwen queue settles quickly)")
	sharesFlag := fs.String("shares", "1.0,0.75,0.5,0.25,0.1", "shares of traffic sent to Qwen")
	noBalance := fs.Bool("skip-balancers", false, "skip the round_robin comparison")
	workload := fs.String("workload", "classes", "classes: the routed cluster against Qwen-only; agents: multi-turn agents on one Qwen pool, one run per balancer (--duration defaults to 12s and --workers to 64); replay: the captured agent sessions (--sessions) through the reference policy")
	sessionsFlag := fs.String("sessions", "testdata/agents/sessions", "with --workload replay: the directory of captured sessions (*.jsonl)")
	balancersFlag := fs.String("balancers", strings.Join(AgentBalancers, ","), "with --workload agents: the pool balancers compared")
	poolFlag := fs.String("pool", "qwen", "with --workload agents: the pool the agents run on: qwen (3 replicas) or minicpm (2), with the reference cluster's timing")
	prefillFlag := fs.String("prefill", "request,serial", "with --workload agents: the prefill models compared: request (each request at the prefill rate, the simulator's default) and serial (one prefill at a time per replica, compute-bound)")
	if err := fs.Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	switch *workload {
	case "classes":
	case "replay":
		if err := runReplay(ctx, os.Stdout, *sessionsFlag, *asJSON); err != nil {
			fmt.Fprintln(os.Stderr, "capacity:", err)
			os.Exit(1)
		}
		return
	case "agents":
		if *poolFlag != "qwen" && *poolFlag != "minicpm" {
			fmt.Fprintf(os.Stderr, "capacity: unknown --pool %q (known: qwen, minicpm)\n", *poolFlag)
			os.Exit(2)
		}
		o := Options{Duration: 12 * time.Second, SpeedUp: *speedUp, Workers: 64, MaxTokens: 64, BatchScale: 1, AgentPool: *poolFlag}
		if set["duration"] {
			o.Duration = *duration
		}
		if set["workers"] {
			o.Workers = *workers
		}
		var names []string
		for _, b := range strings.Split(*balancersFlag, ",") {
			names = append(names, strings.TrimSpace(b))
		}
		models := strings.Split(*prefillFlag, ",")
		for i, m := range models {
			if models[i] = strings.TrimSpace(m); models[i] != "request" && models[i] != "serial" {
				fmt.Fprintf(os.Stderr, "capacity: unknown prefill model %q (known: request, serial)\n", m)
				os.Exit(2)
			}
		}
		for i, m := range models {
			oo := o
			oo.SerialPrefill = m == "serial"
			if i > 0 && !*asJSON {
				fmt.Fprintln(os.Stdout)
			}
			if err := runAgents(ctx, os.Stdout, oo, names, *asJSON); err != nil {
				fmt.Fprintln(os.Stderr, "capacity:", err)
				os.Exit(1)
			}
		}
		return
	default:
		fmt.Fprintf(os.Stderr, "capacity: unknown workload %q (known: agents, classes, replay)\n", *workload)
		os.Exit(2)
	}
	var shares []float64
	for _, s := range strings.Split(*sharesFlag, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
		if err != nil || v <= 0 || v > 1 {
			fmt.Fprintf(os.Stderr, "capacity: bad share %q\n", s)
			os.Exit(2)
		}
		shares = append(shares, v)
	}
	o := Options{Duration: *duration, SpeedUp: *speedUp, Workers: *workers, MaxTokens: 64, BatchScale: 1}
	if err := run(ctx, os.Stdout, o, shares, *asJSON, !*noBalance); err != nil {
		fmt.Fprintln(os.Stderr, "capacity:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, w io.Writer, o Options, shares []float64, asJSON, balancers bool) error {
	if !asJSON {
		fmt.Fprintf(w, "Capacity: routed cluster (3 Qwen ×2 nodes + 2 MiniCPM ×1 node) vs Qwen-only (4 Qwen ×2 nodes)\n")
		fmt.Fprintf(w, "closed loop, %d clients, %d output tokens, model time ÷%g, %s per point\n\n", o.Workers, o.MaxTokens, o.SpeedUp, o.Duration)
	}
	base, err := Measure(ctx, o, QwenOnly, 1)
	if err != nil {
		return err
	}
	if !asJSON {
		fmt.Fprintf(w, "Qwen-only: %.1f req/s (p99 %s)\n\n", base.RPS, base.P99.Round(time.Millisecond))
		fmt.Fprintf(w, "%6s %10s %8s %8s %10s %9s\n", "share", "req/s", "ratio", "bound", "efficiency", "p99")
	}
	for _, share := range shares {
		r, err := Measure(ctx, o, Routed, share)
		if err != nil {
			return err
		}
		p := Point{Share: share, RPS: r.RPS, Ratio: r.RPS / base.RPS, Bound: Bound(o, share)}
		p.Efficiency = p.Ratio / p.Bound
		if asJSON {
			b, _ := json.Marshal(map[string]any{"share": p.Share, "ratio": round(p.Ratio), "bound": round(p.Bound),
				"efficiency": round(p.Efficiency), "rps": round(p.RPS), "qwen_only_rps": round(base.RPS), "p99_ms": r.P99.Milliseconds()})
			fmt.Fprintln(w, string(b))
			continue
		}
		fmt.Fprintf(w, "%6.2f %10.1f %7.2fx %7.2fx %9.0f%% %9s\n", share, r.RPS, p.Ratio, p.Bound, 100*p.Efficiency, r.P99.Round(time.Millisecond))
	}
	if !balancers {
		return nil
	}
	if !asJSON {
		fmt.Fprintf(w, "\nWhat balancing is worth (routed cluster, share 0.5):\n%-42s %10s %9s %9s\n", "balancers", "req/s", "p50", "p99")
	}
	for _, b := range []struct{ name, override string }{{"configured (affinity on both pools)", ""}, {"round_robin everywhere", "round_robin"}} {
		oo := o
		oo.Balance = b.override
		r, err := Measure(ctx, oo, Routed, 0.5)
		if err != nil {
			return err
		}
		if asJSON {
			bb, _ := json.Marshal(map[string]any{"balancers": b.name, "share": 0.5, "rps": round(r.RPS), "p50_ms": r.P50.Milliseconds(), "p99_ms": r.P99.Milliseconds()})
			fmt.Fprintln(w, string(bb))
			continue
		}
		fmt.Fprintf(w, "%-42s %10.1f %9s %9s\n", b.name, r.RPS, r.P50.Round(time.Millisecond), r.P99.Round(time.Millisecond))
	}
	return nil
}

func round(v float64) float64 { return float64(int(v*100+0.5)) / 100 }

// runAgents measures the agents workload once per balancer and prints a
// table (or JSON lines).
func runAgents(ctx context.Context, w io.Writer, o Options, balancers []string, asJSON bool) error {
	if !asJSON {
		name, _, replicas, q := agentPool(o)
		fmt.Fprintf(w, "Agents: %d agents (system prompts %d–%d tokens), %d-turn conversations, each turn adding the answer and a %d-token tool result\n",
			len(agentSystemTokens), slices.Min(agentSystemTokens), slices.Max(agentSystemTokens), agentTurns, toolResultTokens)
		prefill := "each request prefills at %g tok/s (the simulator's default)"
		if o.SerialPrefill {
			prefill = "one prefill at a time per replica at %g tok/s (compute-bound)"
		}
		fmt.Fprintf(w, "one pool of %d %s replicas (batch %d, prefix cache %d blocks of %d tokens each), "+prefill+";\nclosed loop, %d clients, %d output tokens, model time ÷%g, %s per balancer after %s warm-up\n\n",
			replicas, name, q.MaxBatch, q.PrefixCacheBlocks, q.BlockSize, q.PrefillTPS, o.Workers, o.MaxTokens, o.SpeedUp, o.Duration, o.Duration/2)
		fmt.Fprintf(w, "%-18s %8s %8s %10s %10s %9s %12s %8s %8s\n", "balancer", "req/s", "bound", "TTFT p50", "TTFT p99", "hit rate", "prefill/req", "prompt", "busiest")
	}
	for _, b := range balancers {
		r, err := MeasureAgents(ctx, o, b)
		if err != nil {
			return err
		}
		if asJSON {
			bb, _ := json.Marshal(map[string]any{"workload": "agents", "serial_prefill": o.SerialPrefill, "balance": b, "rps": round(r.RPS), "bound_rps": round(r.Bound), "ttft_p50_ms": r.TTFTP50.Milliseconds(),
				"ttft_p99_ms": r.TTFTP99.Milliseconds(), "hit_rate": round(r.HitRate), "prefill_per_request_ms": r.PrefillPerRequest.Milliseconds(),
				"prompt_tokens": math.Round(r.PromptTokens), "busiest": round(r.Busiest), "requests": r.Requests})
			fmt.Fprintln(w, string(bb))
			continue
		}
		fmt.Fprintf(w, "%-18s %8.1f %8.1f %10s %10s %8.1f%% %12s %8.0f %7.2fx\n", b, r.RPS, r.Bound, r.TTFTP50.Round(time.Millisecond), r.TTFTP99.Round(time.Millisecond),
			100*r.HitRate, r.PrefillPerRequest.Round(time.Millisecond), r.PromptTokens, r.Busiest)
	}
	return nil
}

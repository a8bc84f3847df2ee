// Command capacity reproduces the reference cluster's published capacity
// result through the real gateway, balancers and classifier path, on
// simulated replicas timed like the reference DGX Spark cluster's published figures.
//
// A Qwen-only cluster (four Qwen replicas of two nodes) is compared with the
// routed cluster (three Qwen replicas of two nodes and two MiniCPM replicas
// of one node, MiniCPM also classifying) at several shares of traffic sent
// to Qwen. Closed-loop clients send the same request mix to both; the
// classifier sends an exact share to Qwen.
//
//	go run ./bench/capacity [--json] [--duration 4s] [--speedup 10]
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
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
	if err := fs.Parse(os.Args[1:]); err != nil {
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
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
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
	for _, b := range []struct{ name, override string }{{"configured (least_outstanding / affinity)", ""}, {"round_robin everywhere", "round_robin"}} {
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

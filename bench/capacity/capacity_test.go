package main

import (
	"context"
	"testing"
	"time"
)

// TestRoutedBeatsQwenOnly is a short, time-scaled capacity run: at a
// quarter of the traffic on Qwen the routed cluster must clearly beat the
// Qwen-only one (published: about 3x; the full table is `go run
// ./bench/capacity`). The cluster is scaled down (batch ÷4) so the race
// detector on two shared cores keeps up; ratios do not depend on it.
func TestRoutedBeatsQwenOnly(t *testing.T) {
	if testing.Short() {
		t.Skip("capacity run skipped in -short mode")
	}
	o := Options{Duration: 2 * time.Second, SpeedUp: 4, Workers: 64, MaxTokens: 16, BatchScale: 0.25}
	base, err := Measure(context.Background(), o, QwenOnly, 1)
	if err != nil {
		t.Fatal(err)
	}
	routed, err := Measure(context.Background(), o, Routed, 0.25)
	if err != nil {
		t.Fatal(err)
	}
	ratio := routed.RPS / base.RPS
	t.Logf("Qwen-only %.1f req/s, routed at share 0.25 %.1f req/s: ratio %.2f (bound %.2f)", base.RPS, routed.RPS, ratio, Bound(o, 0.25))
	// The published figure (about 3x at share 0.25) is the benchmark's to
	// reproduce (go run ./bench/capacity, docs/benchmarks.md). This test
	// runs beside other packages' builds and tests under -race on a
	// 2-core machine, where CPU starvation compresses the ratio (1.96 was
	// seen against a bound of 2.0), so it asserts only a win no loaded
	// machine erases.
	if ratio < 1.25 {
		t.Errorf("routed/Qwen-only ratio %.2f at share 0.25, want a clear win (≥ 1.25 under any load; published ≈ 3.0)", ratio)
	}
}

func TestBound(t *testing.T) {
	o := Options{SpeedUp: 10, MaxTokens: 64, BatchScale: 1}
	for _, tc := range []struct{ share, want float64 }{{1, 0.75}, {0.5, 1.5}, {0.25, 3}} {
		if got := Bound(o, tc.share); got < tc.want-0.01 || got > tc.want+0.01 {
			t.Errorf("bound at %.2f = %.3f, want %.2f (Qwen is the bottleneck)", tc.share, got, tc.want)
		}
	}
}

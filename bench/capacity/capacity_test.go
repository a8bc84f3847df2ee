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

// TestAffinityKeepsConversationsCached is a short, time-scaled run of the
// agents workload (the full comparison is `go run ./bench/capacity
// --workload agents`, docs/benchmarks.md): prefix affinity keeps each
// conversation on the replica that cached its earlier turns, so the pool's
// prefix-cache hit rate beats round_robin's, which lands a turn on another
// replica two times in three. The hit rate depends on where requests go,
// not on how fast the machine runs them, so it is asserted with a margin;
// throughput and TTFT are only logged.
func TestAffinityKeepsConversationsCached(t *testing.T) {
	if testing.Short() {
		t.Skip("capacity run skipped in -short mode")
	}
	o := Options{Duration: 2 * time.Second, SpeedUp: 4, Workers: 10, MaxTokens: 16, BatchScale: 0.25}
	res := map[string]AgentResult{}
	for _, b := range []string{"affinity", "round_robin"} {
		r, err := MeasureAgents(context.Background(), o, b)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%-12s %6.1f req/s, TTFT p50 %v p99 %v, hit rate %.1f%%, prefill %v/request, %d requests, busiest %.2fx",
			b, r.RPS, r.TTFTP50, r.TTFTP99, 100*r.HitRate, r.PrefillPerRequest, r.Requests, r.Busiest)
		if r.Requests < 10 {
			t.Fatalf("%s: only %d requests completed in the window", b, r.Requests)
		}
		res[b] = r
	}
	// The system prompts alone are about half of every prompt and are
	// cached on every replica either way; affinity adds the conversation's
	// history (measured ≈ 88% against ≈ 75% at full scale).
	if aff, rr := res["affinity"].HitRate, res["round_robin"].HitRate; aff < rr+0.05 {
		t.Errorf("prefix-cache hit rate: affinity %.1f%%, round_robin %.1f%%; want affinity ahead by 5 points or more", 100*aff, 100*rr)
	}
}

// TestReplayCapturedSessions: every captured request of every agent is
// answered through the reference policy and counted once.
func TestReplayCapturedSessions(t *testing.T) {
	rs, err := Replay(context.Background(), "../../testdata/agents/sessions")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		pools := 0
		for _, n := range r.ByPool {
			pools += n
		}
		if r.Requests == 0 || pools != r.Requests || len(r.Routes) != r.Requests || r.Bound <= 0 {
			t.Errorf("%+v", r)
		}
		t.Logf("%s: %d requests, by pool %v, by route %v, bound %.2fx", r.Agent, r.Requests, r.ByPool, r.ByRoute, r.Bound)
	}
	if len(rs) < 2 {
		t.Errorf("%d agents replayed, want Claude Code and Codex at least", len(rs))
	}
	if _, err := Replay(context.Background(), t.TempDir()); err == nil {
		t.Error("an empty directory replayed without an error")
	}
}

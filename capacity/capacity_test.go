package capacity_test

import (
	"math"
	"testing"

	"github.com/switchyard/switchyard/capacity"
	"github.com/switchyard/switchyard/vllmsim"
)

// reference is bench/capacity's cluster: three Qwen replicas of two nodes
// and two MiniCPM replicas of one node against four Qwen replicas, for 40
// prompt and 64 output tokens.
func reference() capacity.Cluster {
	return capacity.Cluster{
		Large:    capacity.Pool{Replicas: 3, ReplicaRPS: capacity.ReplicaRPS(vllmsim.QwenFlashNext2Node(), 40, 64)},
		Small:    capacity.Pool{Replicas: 2, ReplicaRPS: capacity.ReplicaRPS(vllmsim.MiniCPM5_2B(), 40, 64)},
		Baseline: 4,
	}
}

func TestBound(t *testing.T) {
	for _, tc := range []struct {
		name       string
		c          capacity.Cluster
		share      float64
		want       float64
		bottleneck string
	}{
		// The published figures: 0.75/share while Qwen is the bottleneck.
		{"all on qwen", reference(), 1, 0.75, "large"},
		{"half", reference(), 0.5, 1.5, "large"},
		{"quarter", reference(), 0.25, 3, "large"},
		// 2 × 89.57 / 0.95 / (4 × 5.403) = 8.73 < 0.75/0.05 = 15.
		{"small pool saturates", reference(), 0.05, 8.727, "small"},
		{"small unknown", capacity.Cluster{Large: capacity.Pool{Replicas: 3}, Small: capacity.Pool{Replicas: 2}, Baseline: 4}, 0.05, 15, "large"},
		{"none on qwen", reference(), 0, 8.291, "small"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.c.Bound(tc.share); math.Abs(got-tc.want) > 0.005 {
				t.Errorf("Bound(%g) = %.4f, want %.3f", tc.share, got, tc.want)
			}
			if got := tc.c.Bottleneck(tc.share); got != tc.bottleneck {
				t.Errorf("Bottleneck(%g) = %q, want %q", tc.share, got, tc.bottleneck)
			}
		})
	}
	unbounded := capacity.Cluster{Large: capacity.Pool{Replicas: 3}, Small: capacity.Pool{Replicas: 2}, Baseline: 4}
	if got := unbounded.Bound(0); !math.IsInf(got, 1) {
		t.Errorf("no traffic on the large pool and an unknown small pool: Bound = %g, want +Inf", got)
	}
}

func TestReplicaRPS(t *testing.T) {
	q := vllmsim.QwenFlashNext2Node()
	// 40/2988 + 64/21.71 = 2.9613 s per request, 16 at once.
	if got := capacity.ReplicaRPS(q, 40, 64); math.Abs(got-5.403) > 0.001 {
		t.Errorf("Qwen replica: %.4f req/s, want 5.403", got)
	}
	q.SpeedUp = 10
	if got := capacity.ReplicaRPS(q, 40, 64); math.Abs(got-54.03) > 0.01 {
		t.Errorf("Qwen replica ÷10: %.3f req/s, want 54.03", got)
	}
	if got := capacity.ReplicaRPS(vllmsim.Profile{Model: "x", DecodeTPS: 10}, 40, 64); !math.IsInf(got, 1) {
		t.Errorf("unlimited batch: %g, want +Inf", got)
	}
}

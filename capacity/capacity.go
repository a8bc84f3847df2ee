package capacity

import (
	"math"

	"github.com/switchyard/switchyard/vllmsim"
)

// ServiceTime is one request's time on a replica of p, in seconds:
// prefill of promptTokens plus decoding outputTokens, divided by
// p.SpeedUp (0 counts as 1). A rate of 0 is instant, as in the simulator.
func ServiceTime(p vllmsim.Profile, promptTokens, outputTokens int) float64 {
	t := 0.0
	if p.PrefillTPS > 0 {
		t += float64(promptTokens) / p.PrefillTPS
	}
	if p.DecodeTPS > 0 {
		t += float64(outputTokens) / p.DecodeTPS
	}
	if p.SpeedUp > 0 {
		t /= p.SpeedUp
	}
	return t
}

// ReplicaRPS is the requests per second one replica of p completes when
// saturated: its batch limit over ServiceTime. An unlimited batch
// (MaxBatch 0) or an instant service is +Inf.
func ReplicaRPS(p vllmsim.Profile, promptTokens, outputTokens int) float64 {
	t := ServiceTime(p, promptTokens, outputTokens)
	if p.MaxBatch == 0 || t == 0 {
		return math.Inf(1)
	}
	return float64(p.MaxBatch) / t
}

// Pool is a pool of identical replicas.
type Pool struct {
	Replicas int
	// ReplicaRPS is one replica's capacity in requests per second; 0
	// means unknown.
	ReplicaRPS float64
}

// Cluster is a routed cluster, Large and Small, compared with Baseline
// replicas of the large model alone (each as fast as one of Large's).
type Cluster struct {
	Large, Small Pool
	Baseline     int
}

// Bound is the routed cluster's throughput over the large-only cluster's
// when share (0 to 1) of the requests go to Large and the rest to Small:
// each pool's capacity over its share of the traffic, the smaller wins,
// over the baseline's capacity. A Small of unknown capacity is taken never
// to be the bottleneck; then only Large's replica count matters, since the
// baseline runs the same model. With neither pool limiting (share 0 and
// Small unknown) it is +Inf.
func (c Cluster) Bound(share float64) float64 {
	large, small := c.terms(share)
	return math.Min(large, small)
}

// Bottleneck names the pool that saturates first at share: "large" or
// "small" ("large" on a tie).
func (c Cluster) Bottleneck(share float64) string {
	large, small := c.terms(share)
	if small < large {
		return "small"
	}
	return "large"
}

// terms are each pool's capacity over its share, over the baseline's
// capacity. Large's replica capacity cancels out of its own term.
func (c Cluster) terms(share float64) (large, small float64) {
	large, small = math.Inf(1), math.Inf(1)
	if share > 0 {
		large = float64(c.Large.Replicas) / (share * float64(c.Baseline))
	}
	if share < 1 && known(c.Small.ReplicaRPS) && known(c.Large.ReplicaRPS) {
		small = float64(c.Small.Replicas) * c.Small.ReplicaRPS / (1 - share) / (float64(c.Baseline) * c.Large.ReplicaRPS)
	}
	return large, small
}

// known reports whether a replica capacity is a usable number.
func known(rps float64) bool { return rps > 0 && !math.IsInf(rps, 1) }

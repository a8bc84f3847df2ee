package replay

import (
	"github.com/switchyard/switchyard/capacity"
	"github.com/switchyard/switchyard/demo"
	"github.com/switchyard/switchyard/policy"
)

// Output is the answer length the capacity model gives every replayed
// request (the classes workload's).
const Output = 64

// Gain is the throughput the capacity model projects for the replayed
// traffic against a cluster of the same nodes serving only the largest
// model.
type Gain struct {
	// Factor is the routed cluster's throughput over the large-only one.
	Factor float64 `json:"factor"`
	// Bottleneck is the pool that sets the routed cluster's pace.
	Bottleneck string `json:"bottleneck"`
	// ClassifierShare is the share of the classifier pool's busy time
	// that its classifier calls take.
	ClassifierShare float64 `json:"classifier_share"`
}

// project applies the capacity model request by request: each pool's
// replicas (the reference profiles by model: Qwen's for a Qwen model,
// MiniCPM's otherwise) spend capacity.ServiceTime of each request routed
// to them, over their batch limit, and the classifier pool also its calls
// (their prompt tokens, one output token each); the busiest pool per
// replica sets the pace. The large-only cluster spends the largest
// model's time on every request, over as many of its replicas as the
// pools' nodes hold (each replica's nodes, one when it names none).
func project(cfg *policy.Config, turns []Turn, classifierCalls, classifierTokens int) Gain {
	type poolLoad struct {
		pool     *policy.Pool
		replicas int
		nodes    int
		busy     float64
	}
	loads := map[string]*poolLoad{}
	var large *poolLoad
	nodes := 0
	for _, p := range cfg.Pools {
		l := &poolLoad{pool: p, replicas: len(p.Replicas)}
		for _, r := range p.Replicas {
			l.nodes += max(1, len(r.Nodes))
		}
		nodes += l.nodes
		loads[p.Name] = l
		if l.replicas > 0 && (large == nil || perRequest(p, 1000) > perRequest(large.pool, 1000)) {
			large = l
		}
	}
	if large == nil || len(turns) == 0 {
		return Gain{}
	}
	var base float64
	for _, t := range turns {
		base += perRequest(large.pool, t.PromptTokens)
		if l := loads[t.Pool]; l != nil {
			l.busy += perRequest(l.pool, t.PromptTokens)
		}
	}
	var classifierBusy float64
	if c := cfg.Classifier; c != nil && classifierCalls > 0 {
		if l := loads[c.Pool]; l != nil {
			p := demo.ProfileByModel(l.pool)
			classifierBusy = float64(classifierCalls) * capacity.ServiceTime(p, classifierTokens/classifierCalls, 1) / float64(max(1, p.MaxBatch))
			l.busy += classifierBusy
		}
	}
	largeNodes := max(1, large.nodes/max(1, large.replicas))
	baseReplicas := max(1, nodes/largeNodes)
	var g Gain
	var pace float64
	for _, p := range cfg.Pools {
		l := loads[p.Name]
		if l.replicas == 0 || l.busy == 0 {
			continue
		}
		if t := l.busy / float64(l.replicas); t > pace {
			pace, g.Bottleneck = t, p.Name
		}
		if cfg.Classifier != nil && p.Name == cfg.Classifier.Pool {
			g.ClassifierShare = classifierBusy / l.busy
		}
	}
	if pace > 0 {
		g.Factor = (base / float64(baseReplicas)) / pace
	}
	return g
}

// perRequest is one request's time on a saturated replica of pool p.
func perRequest(p *policy.Pool, prompt int) float64 {
	prof := demo.ProfileByModel(p)
	return capacity.ServiceTime(prof, prompt, Output) / float64(max(1, prof.MaxBatch))
}

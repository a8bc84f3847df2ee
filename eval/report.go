package eval

import (
	"fmt"
	"math"
	"strings"

	"github.com/switchyard/switchyard/capacity"
	"github.com/switchyard/switchyard/policy"
	"github.com/switchyard/switchyard/router"
	"github.com/switchyard/switchyard/vllmsim"
)

// Report is the outcome of a run. Shares, rates and probabilities are
// fractions from 0 to 1, rounded to four decimals; a rate with nothing to
// divide by is null.
type Report struct {
	Config string `json:"config,omitempty"`
	Data   string `json:"data,omitempty"`
	Cases  int    `json:"cases"`
	// APIs counts the cases per API their body was read as.
	APIs map[router.API]int `json:"apis"`
	// Labels are the classifier's, in its order.
	Labels []string `json:"labels"`
	// Accuracy is the share of cases whose predicted class is their label.
	Accuracy float64 `json:"accuracy"`
	Correct  int     `json:"correct"`
	// Confusion counts cases by label, then by predicted class.
	Confusion map[string]map[string]int `json:"confusion"`
	PerLabel  map[string]LabelStats     `json:"per_label"`
	// Calibration compares the probability the classifier gave its
	// answer with how often that answer was right.
	Calibration Calibration `json:"calibration"`
	Split       Split       `json:"split"`
	Sweep       Sweep       `json:"sweep"`
	Projected   Projection  `json:"projected"`
	// ClassifierFailures are the cases the classifier could not answer;
	// they count as on_error's label everywhere but in the calibration.
	ClassifierFailures Failures `json:"classifier_failures"`
}

// LabelStats are one class's figures.
type LabelStats struct {
	// Support counts the cases with this label; Predicted those the
	// classifier put in this class; Correct both.
	Support   int `json:"support"`
	Predicted int `json:"predicted"`
	Correct   int `json:"correct"`
	// Precision is Correct/Predicted, Recall Correct/Support, F1 their
	// harmonic mean.
	Precision *float64 `json:"precision"`
	Recall    *float64 `json:"recall"`
	F1        *float64 `json:"f1"`
}

// Calibration bins the cases the classifier answered by the probability
// of its answer.
type Calibration struct {
	// Cases counts the answered cases (classifier failures are left out:
	// their probability is not the classifier's).
	Cases int `json:"cases"`
	// Bins are ten, [0, 0.1) to [0.9, 1].
	Bins []Bin `json:"bins"`
	// ECE, the expected calibration error, is the mean over the cases of
	// the gap between their bin's accuracy and mean confidence.
	ECE *float64 `json:"ece"`
}

// Bin is one calibration bin.
type Bin struct {
	From  float64 `json:"from"`
	To    float64 `json:"to"`
	Cases int     `json:"cases"`
	// Confidence is the mean probability of the answers in the bin;
	// Accuracy the share of them that were right.
	Confidence *float64 `json:"confidence"`
	Accuracy   *float64 `json:"accuracy"`
}

// Split is where the policy would send the cases.
type Split struct {
	// Pools and Routes count the cases per first pool of the decision
	// (before fallback or spill) and per route; every configured pool and
	// route is listed, "direct" too when a case named a pool.
	Pools  map[string]Count `json:"pools"`
	Routes map[string]Count `json:"routes"`
	// ByLabel splits each label's cases over the pools.
	ByLabel map[string]map[string]Count `json:"by_label"`
	// Classified counts the decisions that used the class (the others
	// matched a route before any class condition).
	Classified int `json:"classified"`
}

// Count is a number of cases and their share of the whole.
type Count struct {
	Requests int     `json:"requests"`
	Share    float64 `json:"share"`
}

// Sweep is what a score threshold on the hard class would do: a request
// goes to the large pool when the classifier gives the class a
// probability of at least the threshold (the condition
// `score: {LABEL: {gte: T}}`). Other route conditions play no part.
type Sweep struct {
	Label  string       `json:"label"`
	Points []SweepPoint `json:"points"`
}

// SweepPoint is one threshold.
type SweepPoint struct {
	Threshold float64 `json:"threshold"`
	// Share is the share of the cases at or over the threshold: the large
	// pool's traffic.
	Share float64 `json:"share"`
	// Recall is the share of the label's cases at or over it; Precision
	// the share of those at or over it that carry the label.
	Recall    *float64 `json:"recall"`
	Precision *float64 `json:"precision"`
	// Projected is the throughput the share projects against a
	// large-only cluster (see Projection); null when it is unbounded or
	// cannot be projected.
	Projected *float64 `json:"projected"`
}

// Projection is the throughput of the configured cluster, at the share the
// policy sends to the large pool, over a cluster running only the large
// model on the same nodes (package capacity's model).
type Projection struct {
	// LargePool is where the policy sends a plain request of the hard
	// class, SmallPool one of the easiest class.
	HardLabel string `json:"hard_label"`
	LargePool string `json:"large_pool"`
	SmallPool string `json:"small_pool"`
	// Share is the large pool's share of the cases in the policy's split.
	Share float64 `json:"share"`
	// Ratio is the projected throughput over the large-only cluster's;
	// null when it cannot be projected (Note says why).
	Ratio *float64 `json:"ratio"`
	// Bottleneck is the pool that saturates first.
	Bottleneck string `json:"bottleneck,omitempty"`
	// LargeReplicas and SmallReplicas are the pools' replicas; Nodes the
	// nodes they span; BaselineReplicas how many replicas of the large
	// model those nodes hold.
	LargeReplicas    int `json:"large_replicas"`
	SmallReplicas    int `json:"small_replicas"`
	Nodes            int `json:"nodes"`
	BaselineReplicas int `json:"baseline_replicas"`
	// ReplicaRPS is each pool's capacity per replica in requests per
	// second, from the simulator profile of its served model, for the
	// reference request (ProjectPromptTokens, ProjectOutputTokens).
	ReplicaRPS map[string]float64 `json:"replica_rps"`
	Note       string             `json:"note,omitempty"`
}

// Failures are the cases the classifier could not answer.
type Failures struct {
	Count int `json:"count"`
	// Label is on_error's, which they were given.
	Label string    `json:"label"`
	Cases []Failure `json:"cases"`
}

// Failure is one case the classifier could not answer.
type Failure struct {
	Line   int    `json:"line"`
	Result string `json:"result"`
	Error  string `json:"error"`
}

// The reference request of the projection: bench/capacity's, 40 prompt
// tokens and 64 output tokens.
const (
	ProjectPromptTokens = 40
	ProjectOutputTokens = 64
)

// profiles are the simulator profiles the projection knows, by served
// model name.
var profiles = func() map[string]vllmsim.Profile {
	out := map[string]vllmsim.Profile{}
	for _, p := range []vllmsim.Profile{vllmsim.QwenFlashNext2Node(), vllmsim.MiniCPM5_2B()} {
		out[p.Model] = p
	}
	return out
}()

// sweepStep is the distance between two thresholds of the sweep.
const sweepStep = 0.05

// eps absorbs the rounding of probabilities renormalised from logprobs
// (0.9 may arrive as 0.8999999999999999) at bin edges and thresholds.
const eps = 1e-9

func newReport(cfg *policy.Config, cases []Case, results []router.Evaluation, hard string, t targets) *Report {
	labels := cfg.Classifier.Labels
	n := len(cases)
	r := &Report{Cases: n, APIs: map[router.API]int{}, Labels: labels, Confusion: map[string]map[string]int{},
		PerLabel: map[string]LabelStats{}}
	r.ClassifierFailures = Failures{Label: cfg.Classifier.OnError, Cases: []Failure{}}
	for _, l := range labels {
		r.Confusion[l] = map[string]int{}
		for _, p := range labels {
			r.Confusion[l][p] = 0
		}
	}
	for i, c := range cases {
		res := results[i]
		r.APIs[c.API]++
		r.Confusion[c.Label][res.Label]++
		if res.Label == c.Label {
			r.Correct++
		}
		if res.Err != nil {
			r.ClassifierFailures.Cases = append(r.ClassifierFailures.Cases, Failure{Line: c.Line, Result: res.Outcome, Error: res.Err.Error()})
		}
	}
	r.ClassifierFailures.Count = len(r.ClassifierFailures.Cases)
	r.Accuracy = round(float64(r.Correct) / float64(n))
	for _, l := range labels {
		var s LabelStats
		for _, p := range labels {
			s.Support += r.Confusion[l][p]
			s.Predicted += r.Confusion[p][l]
		}
		s.Correct = r.Confusion[l][l]
		s.Precision, s.Recall = ratio(s.Correct, s.Predicted), ratio(s.Correct, s.Support)
		if s.Precision != nil && s.Recall != nil && *s.Precision+*s.Recall > 0 {
			s.F1 = ptr(round(2 * *s.Precision * *s.Recall / (*s.Precision + *s.Recall)))
		}
		r.PerLabel[l] = s
	}
	r.Calibration = calibrate(cases, results)
	r.Split = split(cfg, cases, results)
	r.Projected = project(cfg, t, hard, r.Split)
	r.Sweep = sweep(cases, results, hard, r.Projected)
	return r
}

func calibrate(cases []Case, results []router.Evaluation) Calibration {
	var sumConf, sumRight [10]float64
	var count [10]int
	c := Calibration{Bins: make([]Bin, 10)}
	for i, res := range results {
		if res.Err != nil {
			continue
		}
		p := res.Scores[res.Label]
		b := min(9, max(0, int(math.Floor(p*10+eps))))
		count[b]++
		sumConf[b] += p
		if res.Label == cases[i].Label {
			sumRight[b]++
		}
		c.Cases++
	}
	ece := 0.0
	for b := range c.Bins {
		bin := Bin{From: float64(b) / 10, To: float64(b+1) / 10, Cases: count[b]}
		if count[b] > 0 {
			conf, acc := sumConf[b]/float64(count[b]), sumRight[b]/float64(count[b])
			bin.Confidence, bin.Accuracy = ptr(round(conf)), ptr(round(acc))
			ece += float64(count[b]) * math.Abs(acc-conf)
		}
		c.Bins[b] = bin
	}
	if c.Cases > 0 {
		c.ECE = ptr(round(ece / float64(c.Cases)))
	}
	return c
}

func split(cfg *policy.Config, cases []Case, results []router.Evaluation) Split {
	pools, routes := map[string]int{}, map[string]int{}
	byLabel := map[string]map[string]int{}
	for _, p := range cfg.Pools {
		pools[p.Name] = 0
	}
	for _, rt := range cfg.Routes {
		routes[rt.Name] = 0
	}
	s := Split{}
	for i, res := range results {
		pool := res.Pools[0]
		pools[pool]++
		routes[res.Route]++
		if byLabel[cases[i].Label] == nil {
			byLabel[cases[i].Label] = map[string]int{}
		}
		byLabel[cases[i].Label][pool]++
		if res.Classified {
			s.Classified++
		}
	}
	s.Pools, s.Routes = counts(pools, len(results)), counts(routes, len(results))
	s.ByLabel = map[string]map[string]Count{}
	for _, l := range cfg.Classifier.Labels {
		m := byLabel[l]
		total := 0
		for _, v := range m {
			total += v
		}
		if total == 0 {
			continue // no case with this label
		}
		for _, p := range cfg.Pools {
			if _, ok := m[p.Name]; !ok {
				m[p.Name] = 0
			}
		}
		s.ByLabel[l] = counts(m, total)
	}
	return s
}

func counts(m map[string]int, total int) map[string]Count {
	out := make(map[string]Count, len(m))
	for k, v := range m {
		out[k] = Count{Requests: v, Share: round(float64(v) / float64(total))}
	}
	return out
}

func sweep(cases []Case, results []router.Evaluation, hard string, proj Projection) Sweep {
	s := Sweep{Label: hard}
	cl := proj.cluster()
	for i := 0; i <= int(math.Round(1/sweepStep)); i++ {
		t := float64(i) * sweepStep
		var over, positives, hit int
		for j, res := range results {
			isHard := cases[j].Label == hard
			if isHard {
				positives++
			}
			if res.Scores[hard] >= t-eps {
				over++
				if isHard {
					hit++
				}
			}
		}
		share := float64(over) / float64(len(results))
		pt := SweepPoint{Threshold: round(t), Share: round(share), Recall: ratio(hit, positives), Precision: ratio(hit, over)}
		if cl != nil {
			pt.Projected = finite(cl.Bound(share))
		}
		s.Points = append(s.Points, pt)
	}
	return s
}

// project places the split on package capacity's model. The large and
// small pools' replicas span Nodes (a replica that lists no nodes counts
// as one node of its own); the baseline fits as many replicas of the
// large model on them as the large pool's first replica takes nodes.
// Replica speeds come from the simulator profile of each pool's served
// model; a small pool without one is taken never to saturate.
func project(cfg *policy.Config, t targets, hard string, sp Split) Projection {
	p := Projection{HardLabel: hard, LargePool: t.large, SmallPool: t.small, ReplicaRPS: map[string]float64{}}
	switch {
	case t.large == "":
		p.Note = "no case is routed by the policy (every model names a pool): nothing to project"
		return p
	case t.large == t.small:
		p.Note = fmt.Sprintf("a plain request of class %q and one of class %q both go to pool %q: there is no smaller pool to project", hard, cfg.Classifier.Labels[0], t.large)
		return p
	}
	total := 0
	for _, c := range sp.Pools {
		total += c.Requests
	}
	share := float64(sp.Pools[t.large].Requests) / float64(total)
	p.Share = round(share)
	large, small := cfg.Pools.Get(t.large), cfg.Pools.Get(t.small)
	nodes := map[string]bool{}
	for _, pool := range []*policy.Pool{large, small} {
		for _, rep := range pool.Replicas {
			if len(rep.Nodes) == 0 {
				nodes[pool.Name+"/"+rep.Name] = true
			}
			for _, node := range rep.Nodes {
				nodes[node] = true
			}
		}
	}
	per := 1
	if len(large.Replicas) > 0 {
		per = max(1, len(large.Replicas[0].Nodes))
	}
	p.LargeReplicas, p.SmallReplicas, p.Nodes = len(large.Replicas), len(small.Replicas), len(nodes)
	p.BaselineReplicas = p.Nodes / per
	var missing []string
	for _, pool := range []*policy.Pool{large, small} {
		if prof, ok := profiles[pool.Model]; ok {
			p.ReplicaRPS[pool.Name] = round(capacity.ReplicaRPS(prof, ProjectPromptTokens, ProjectOutputTokens))
		} else {
			missing = append(missing, fmt.Sprintf("%s (%s)", pool.Name, pool.Model))
		}
	}
	if len(missing) > 0 {
		p.Note = fmt.Sprintf("no simulator profile for %s: the small pool is taken never to saturate, so the ratio is an upper bound", strings.Join(missing, ", "))
	}
	if other := total - sp.Pools[t.large].Requests - sp.Pools[t.small].Requests; other > 0 {
		note := fmt.Sprintf("%d cases go to neither pool and are counted on the small pool", other)
		p.Note = strings.TrimPrefix(p.Note+"; "+note, "; ")
	}
	cl := p.cluster()
	p.Ratio = finite(cl.Bound(share))
	if p.Ratio != nil {
		p.Bottleneck = t.large
		if cl.Bottleneck(share) == "small" {
			p.Bottleneck = t.small
		}
	}
	return p
}

// cluster is the projection's capacity model; nil when there is none.
func (p Projection) cluster() *capacity.Cluster {
	if p.LargePool == "" || p.LargePool == p.SmallPool || p.BaselineReplicas == 0 {
		return nil
	}
	return &capacity.Cluster{
		Large:    capacity.Pool{Replicas: p.LargeReplicas, ReplicaRPS: p.ReplicaRPS[p.LargePool]},
		Small:    capacity.Pool{Replicas: p.SmallReplicas, ReplicaRPS: p.ReplicaRPS[p.SmallPool]},
		Baseline: p.BaselineReplicas,
	}
}

func ratio(num, den int) *float64 {
	if den == 0 {
		return nil
	}
	return ptr(round(float64(num) / float64(den)))
}

func finite(x float64) *float64 {
	if math.IsInf(x, 0) || math.IsNaN(x) {
		return nil
	}
	return ptr(round(x))
}

func round(x float64) float64 { return math.Round(x*1e4) / 1e4 }

func ptr(x float64) *float64 { return &x }

func joinLabels(labels []string) string { return strings.Join(labels, ", ") }

package eval

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/switchyard/switchyard/router"
)

// WriteText writes r as aligned tables. pools and routes give the order of
// the split's rows (the config's); names missing from them follow.
func WriteText(w io.Writer, r *Report, pools, routes []string) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(cells ...string) { fmt.Fprintln(tw, strings.Join(cells, "\t")) }
	end := func() { tw.Flush(); fmt.Fprintln(w) }

	var apis []string
	for _, a := range router.APIs() {
		if n := r.APIs[a]; n > 0 {
			apis = append(apis, fmt.Sprintf("%s %d", a, n))
		}
	}
	fmt.Fprintf(w, "%d cases", r.Cases)
	if r.Data != "" {
		fmt.Fprintf(w, " from %s", r.Data)
	}
	fmt.Fprintf(w, " (%s)", strings.Join(apis, ", "))
	if r.Config != "" {
		fmt.Fprintf(w, ", config %s", r.Config)
	}
	fmt.Fprintln(w)
	f := r.ClassifierFailures
	fmt.Fprintf(w, "classifier failures: %d", f.Count)
	if f.Count > 0 {
		fmt.Fprintf(w, " (counted as on_error's label %q)", f.Label)
	}
	fmt.Fprintf(w, "\n\naccuracy %s (%d of %d)\n\n", num(r.Accuracy), r.Correct, r.Cases)

	fmt.Fprintln(w, "Confusion (rows: label, columns: predicted)")
	row(append([]string{"label"}, r.Labels...)...)
	for _, l := range r.Labels {
		cells := []string{l}
		for _, p := range r.Labels {
			cells = append(cells, fmt.Sprint(r.Confusion[l][p]))
		}
		row(cells...)
	}
	end()

	fmt.Fprintln(w, "Per label")
	row("label", "support", "predicted", "correct", "precision", "recall", "f1")
	for _, l := range r.Labels {
		s := r.PerLabel[l]
		row(l, fmt.Sprint(s.Support), fmt.Sprint(s.Predicted), fmt.Sprint(s.Correct), opt(s.Precision), opt(s.Recall), opt(s.F1))
	}
	end()

	fmt.Fprintf(w, "Calibration (%d answered cases: probability of the predicted class against how often it was right)\n", r.Calibration.Cases)
	row("probability", "cases", "confidence", "accuracy")
	for _, b := range r.Calibration.Bins {
		row(fmt.Sprintf("%.1f-%.1f", b.From, b.To), fmt.Sprint(b.Cases), opt(b.Confidence), opt(b.Accuracy))
	}
	tw.Flush()
	fmt.Fprintf(w, "expected calibration error %s\n\n", opt(r.Calibration.ECE))

	fmt.Fprintf(w, "Split (the first pool of each decision; %d of %d decisions used the class)\n", r.Split.Classified, r.Cases)
	poolOrder := ordered(pools, r.Split.Pools)
	row("pool", "requests", "share")
	for _, p := range poolOrder {
		c := r.Split.Pools[p]
		row(p, fmt.Sprint(c.Requests), num(c.Share))
	}
	end()
	row("route", "requests", "share")
	for _, rt := range ordered(routes, r.Split.Routes) {
		c := r.Split.Routes[rt]
		row(rt, fmt.Sprint(c.Requests), num(c.Share))
	}
	end()
	fmt.Fprintln(w, "Each label's cases by pool (share)")
	row(append([]string{"label"}, poolOrder...)...)
	for _, l := range r.Labels {
		m, ok := r.Split.ByLabel[l]
		if !ok {
			continue
		}
		cells := []string{l}
		for _, p := range poolOrder {
			cells = append(cells, num(m[p].Share))
		}
		row(cells...)
	}
	end()

	fmt.Fprintf(w, "Threshold sweep: requests with score(%s) >= threshold go to the large pool\n", r.Sweep.Label)
	row("threshold", "share", "recall", "precision", "projected")
	for _, p := range r.Sweep.Points {
		row(fmt.Sprintf("%.2f", p.Threshold), num(p.Share), opt(p.Recall), opt(p.Precision), times(p.Projected))
	}
	end()

	pr := r.Projected
	fmt.Fprintln(w, "Projected throughput against a large-only cluster")
	if pr.LargePool != "" && pr.LargePool != pr.SmallPool {
		row("large pool", fmt.Sprintf("%s: %d replicas (class %s)", pr.LargePool, pr.LargeReplicas, pr.HardLabel))
		row("small pool", fmt.Sprintf("%s: %d replicas (class %s)", pr.SmallPool, pr.SmallReplicas, r.Labels[0]))
		row("large-only cluster", fmt.Sprintf("%d replicas of %s on the same %d nodes", pr.BaselineReplicas, pr.LargePool, pr.Nodes))
		for _, p := range []string{pr.LargePool, pr.SmallPool} {
			if v, ok := pr.ReplicaRPS[p]; ok {
				row("capacity of one "+p+" replica", fmt.Sprintf("%s req/s (%d prompt, %d output tokens)", num(v), ProjectPromptTokens, ProjectOutputTokens))
			}
		}
		row("share on "+pr.LargePool, num(pr.Share))
		ratio := times(pr.Ratio)
		if pr.Bottleneck != "" {
			ratio += " (bottleneck: " + pr.Bottleneck + ")"
		}
		row("throughput", ratio)
		tw.Flush()
	}
	if pr.Note != "" {
		fmt.Fprintln(w, "note: "+pr.Note)
	}
	return tw.Flush()
}

// ordered lists the keys of m: first those in order, then the rest sorted.
func ordered[V any](order []string, m map[string]V) []string {
	var out []string
	for _, k := range order {
		if _, ok := m[k]; ok {
			out = append(out, k)
		}
	}
	var rest []string
	for k := range m {
		if !slices.Contains(out, k) {
			rest = append(rest, k)
		}
	}
	slices.Sort(rest)
	return append(out, rest...)
}

func num(x float64) string { return fmt.Sprintf("%.2f", x) }

func opt(x *float64) string {
	if x == nil {
		return "-"
	}
	return num(*x)
}

func times(x *float64) string {
	if x == nil {
		return "-"
	}
	return num(*x) + "x"
}

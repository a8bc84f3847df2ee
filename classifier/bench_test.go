package classifier_test

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard/switchyard/classifier"
)

// BenchmarkClassifyCacheHit is the cost of a repeated request: truncate,
// hash, cache lookup and the metrics, with no call to the classifier pool.
func BenchmarkClassifyCacheHit(b *testing.B) {
	c := newModel(b, &capture{label: "simple"}, func(o *classifier.Options) {
		o.CacheSize = 50000
		o.CacheTTL = 0
		o.Metrics = classifier.NewMetrics(prometheus.NewRegistry())
	})
	in := classifier.Input{
		System:   "You are a helpful coding agent. Follow the repository's conventions.",
		LastUser: "Rename the function parseConfig to loadConfig and update every caller.",
		Tools:    []string{"read_file", "write_file", "run_shell"},
		Turns:    5,
	}
	ctx := context.Background()
	if r := c.Classify(ctx, in); r.Outcome != classifier.OutcomeOK {
		b.Fatalf("warm-up: outcome %q (%v)", r.Outcome, r.Err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if r := c.Classify(ctx, in); r.Outcome != classifier.OutcomeCacheHit {
			b.Fatalf("outcome %q, want cache_hit", r.Outcome)
		}
	}
}

package metrics

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// BenchmarkInstrumentationPerRequest times the metric updates one proxied
// stream request makes (requests, duration, TTFT, queue wait, tokens,
// in-flight per route), to compare with BenchmarkProxy's ns/op: the
// instrumented path's extra cost over a bare one.
func BenchmarkInstrumentationPerRequest(b *testing.B) {
	m := New(prometheus.NewRegistry(), "bench")
	b.ReportAllocs()
	for b.Loop() {
		m.Inflight.WithLabelValues("default").Inc()
		m.QueueWait.WithLabelValues("minicpm").Observe(0.0001)
		m.TTFT.WithLabelValues("minicpm").Observe(0.01)
		m.Tokens.WithLabelValues("minicpm", "prompt").Add(12)
		m.Tokens.WithLabelValues("minicpm", "completion").Add(16)
		m.Inflight.WithLabelValues("default").Dec()
		m.Requests.WithLabelValues("default", "minicpm", "simple", "200").Inc()
		m.Duration.WithLabelValues("minicpm").Observe(0.02)
	}
}

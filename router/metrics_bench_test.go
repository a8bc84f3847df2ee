package router

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// BenchmarkInstrumentationPerRequest times the metric updates one proxied
// stream request makes (requests, duration, TTFT, queue wait, tokens,
// in-flight per route), to compare with BenchmarkProxy's ns/op: the
// instrumented path's extra cost over a bare one.
func BenchmarkInstrumentationPerRequest(b *testing.B) {
	m := newMetrics(prometheus.NewRegistry(), "bench")
	b.ReportAllocs()
	for b.Loop() {
		m.inflight.WithLabelValues("default").Inc()
		m.queueWait.WithLabelValues("minicpm").Observe(0.0001)
		m.ttft.WithLabelValues("minicpm").Observe(0.01)
		m.tokens.WithLabelValues("minicpm", "prompt").Add(12)
		m.tokens.WithLabelValues("minicpm", "completion").Add(16)
		m.inflight.WithLabelValues("default").Dec()
		m.requests.WithLabelValues("default", "minicpm", "simple", statusLabel(200)).Inc()
		m.duration.WithLabelValues("minicpm").Observe(0.02)
	}
}

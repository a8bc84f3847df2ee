package vllmsim

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Histogram buckets are vLLM's.
var (
	ttftBuckets = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
		1, 2.5, 5, 7.5, 10, 20, 40, 80, 160, 640, 2560}
	latencyBuckets = []float64{0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60,
		120, 240, 480, 960, 1920, 7680}
)

// metrics are the vllm:* series of one Server, on its own registry, labelled
// model_name like vLLM's. Gauges are computed from live state at scrape time.
type metrics struct {
	registry         *prometheus.Registry
	promptTokens     prometheus.Counter
	generationTokens prometheus.Counter
	// success counts finished requests by vLLM's finished_reason: stop,
	// length, abort (a client that went away).
	successStop, successLength, successAbort prometheus.Counter
	ttft, e2e                                prometheus.Histogram
	// cacheQueries and cacheHits are the prefix cache's lookups and hits,
	// in tokens.
	cacheQueries, cacheHits prometheus.Counter
}

func newMetrics(s *Server) *metrics {
	labels := prometheus.Labels{"model_name": s.profile.Model}
	reg := prometheus.NewRegistry()
	m := &metrics{
		registry: reg,
		promptTokens: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "vllm:prompt_tokens_total", Help: "Number of prefill tokens processed.", ConstLabels: labels}),
		generationTokens: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "vllm:generation_tokens_total", Help: "Number of generation tokens processed.", ConstLabels: labels}),
		ttft: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "vllm:time_to_first_token_seconds", Help: "Histogram of time to first token in seconds.",
			ConstLabels: labels, Buckets: ttftBuckets}),
		e2e: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "vllm:e2e_request_latency_seconds", Help: "Histogram of e2e request latency in seconds.",
			ConstLabels: labels, Buckets: latencyBuckets}),
	}
	// vLLM names the label finished_reason (the llm-d simulator's capture says
	// finish_reason; vLLM's own name wins).
	success := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "vllm:request_success_total", Help: "Count of successfully processed requests.", ConstLabels: labels},
		[]string{"finished_reason"})
	m.successStop = success.WithLabelValues("stop")
	m.successLength = success.WithLabelValues("length")
	m.successAbort = success.WithLabelValues("abort")

	// vLLM v1 counts prefix-cache lookups and hits in tokens
	// (vllm/v1/metrics/loggers.py, PrometheusStatLogger): Counters named
	// vllm:prefix_cache_queries and vllm:prefix_cache_hits, which
	// prometheus_client exposes with the _total suffix. Before vLLM 0.9
	// they were vllm:gpu_prefix_cache_queries and _hits, renamed with
	// vllm:gpu_cache_usage_perc.
	cacheName, prefixName := "vllm:kv_cache_usage_perc", "vllm:prefix_cache_"
	queriesHelp, hitsHelp := "Prefix cache queries, in terms of number of queried tokens.", "Prefix cache hits, in terms of number of cached tokens."
	if s.profile.LegacyMetrics {
		cacheName, prefixName = "vllm:gpu_cache_usage_perc", "vllm:gpu_prefix_cache_"
		queriesHelp, hitsHelp = "GPU prefix cache queries, in terms of number of queried tokens.", "GPU prefix cache hits, in terms of number of cached tokens."
	}
	m.cacheQueries = prometheus.NewCounter(prometheus.CounterOpts{
		Name: prefixName + "queries_total", Help: queriesHelp, ConstLabels: labels})
	m.cacheHits = prometheus.NewCounter(prometheus.CounterOpts{
		Name: prefixName + "hits_total", Help: hitsHelp, ConstLabels: labels})
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "vllm:num_requests_running", Help: "Number of requests in model execution batches.", ConstLabels: labels},
			func() float64 { return float64(s.Running()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "vllm:num_requests_waiting", Help: "Number of requests waiting to be processed.", ConstLabels: labels},
			func() float64 { return float64(s.Waiting()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: cacheName, Help: "KV-cache usage. 1 means 100 percent usage.", ConstLabels: labels},
			s.kvCacheUsage),
		m.promptTokens, m.generationTokens, success, m.ttft, m.e2e, m.cacheQueries, m.cacheHits,
	)
	return m
}

// finished counts a request that ended with vLLM's finished_reason.
func (m *metrics) finished(reason string) {
	switch reason {
	case "length":
		m.successLength.Inc()
	case "abort":
		m.successAbort.Inc()
	default:
		m.successStop.Inc()
	}
}

package metrics

import (
	"runtime"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Metrics are the gateway's own series (docs/observability.md); replica
// gauges come from NewReplicaCollector and classifier series from the
// classifier package.
type Metrics struct {
	Requests *prometheus.CounterVec
	Duration *prometheus.HistogramVec
	TTFT     *prometheus.HistogramVec
	Tokens   *prometheus.CounterVec
	// KeyRequests and keyTokens are per API key name ("none" without a
	// key): their label values are bounded by the configured keys.
	KeyRequests *prometheus.CounterVec
	KeyTokens   *prometheus.CounterVec
	// ClassifierTokens are the classifier's own calls' tokens.
	ClassifierTokens *prometheus.CounterVec
	// TurnOutcomes are the outcomes of answered agent turns, read from
	// the session's next turn (router/internal/outcomes).
	TurnOutcomes *prometheus.CounterVec
	// CaptureLines and CaptureDropped count the capture: section's
	// recorded requests, and those not recorded by reason.
	CaptureLines   prometheus.Counter
	CaptureDropped *prometheus.CounterVec
	// Shadow counts live and shadow pool pairs (serve --shadow).
	Shadow     *prometheus.CounterVec
	Retries    *prometheus.CounterVec
	Fallbacks  *prometheus.CounterVec
	Resumes    *prometheus.CounterVec
	Reloads    *prometheus.CounterVec
	Generation prometheus.Gauge
	Inflight   *prometheus.GaugeVec
	QueueWait  *prometheus.HistogramVec
	// ConnsOpen and connsRefused are per listener (api or admin).
	ConnsOpen    *prometheus.GaugeVec
	ConnsRefused *prometheus.CounterVec
	// ConnsEvicted counts idle connections closed to make room, by
	// listener and reason.
	ConnsEvicted *prometheus.CounterVec
	// ConnsIdle counts the connections known idle, by listener.
	ConnsIdle *prometheus.GaugeVec
	// Loops counts requests that came back to this gateway (508).
	Loops prometheus.Counter
	// DiscoverySelf counts discovered addresses refused for naming the
	// gateway itself, by pool.
	DiscoverySelf *prometheus.CounterVec
	// Poison counts requests that failed alike on two replicas.
	Poison *prometheus.CounterVec
	// Tokenize counts the prompts counted by a pool's /tokenize to decide
	// whether they fit its context.
	Tokenize *prometheus.CounterVec
}

// latencyBuckets span a fast classifier hit to a long reasoning answer.
var latencyBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300}

// New registers the gateway's series, the Go and process collectors and
// switchyard_build_info on reg.
func New(reg prometheus.Registerer, version string) *Metrics {
	m := &Metrics{
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_requests_total",
			Help: "Requests answered, by route, pool, class and HTTP status code.",
		}, []string{"route", "pool", "class", "code"}),
		Duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "switchyard_request_duration_seconds", Help: "Time from request to the last byte of the answer.",
			Buckets: latencyBuckets,
		}, []string{"pool"}),
		TTFT: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "switchyard_time_to_first_token_seconds", Help: "Time from request to the first content or tool-call delta of a stream.",
			Buckets: latencyBuckets,
		}, []string{"pool"}),
		Tokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_tokens_total", Help: "Tokens reported in replica usage, by pool and kind (prompt or completion).",
		}, []string{"pool", "kind"}),
		KeyRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_key_requests_total", Help: "Requests answered, by API key name (none: auth off or no valid key) and HTTP status code.",
		}, []string{"key", "code"}),
		KeyTokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_key_tokens_total", Help: "Tokens reported in replica usage, by API key name (none: auth off) and kind (prompt or completion).",
		}, []string{"key", "kind"}),
		ClassifierTokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_classifier_tokens_total", Help: "Tokens of the classifier's own calls to its pool, by kind (prompt or completion); not in switchyard_tokens_total.",
		}, []string{"kind"}),
		Retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_upstream_retries_total", Help: "Retries sent, by pool and the reason the previous attempt failed (on another replica, or on the same one after a connection failure when no other can take the request).",
		}, []string{"pool", "reason"}),
		CaptureLines: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "switchyard_capture_requests_total", Help: "Requests recorded by the capture: section.",
		}),
		CaptureDropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_capture_dropped_total", Help: "Requests the capture: section chose but did not record, by reason: queue_full (the writer is behind), write_error (the folder is full or unwritable).",
		}, []string{"reason"}),
		TurnOutcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_turn_outcomes_total",
			Help: "Answered turns of sessions by the pool and route that answered them and what the session's next turn showed: ok, tool_error, repeated_call, reasked, moved_up.",
		}, []string{"pool", "route", "outcome"}),
		Resumes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_stream_resumes_total",
			Help: "Streams (chat, Responses, Messages) whose replica failed mid-way, by pool and result: resumed (continued on another replica), failed, not_resumable.",
		}, []string{"pool", "result"}),
		Fallbacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_fallbacks_total", Help: "Requests sent to another pool than the route's target, by reason (fallback or spill).",
		}, []string{"from", "to", "reason"}),
		Reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_config_reloads_total", Help: "Config reload attempts by result.",
		}, []string{"result"}),
		Generation: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "switchyard_config_generation", Help: "Generation of the running config; increases on each successful reload.",
		}),
		Inflight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "switchyard_route_inflight", Help: "Requests in flight per route.",
		}, []string{"route"}),
		QueueWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "switchyard_queue_wait_seconds", Help: "Time spent waiting for a replica slot (max_inflight) before the upstream call.",
			Buckets: []float64{.0001, .001, .01, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"pool"}),
	}
	m.guardSeries()
	build := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "switchyard_build_info", Help: "Build information; always 1.",
	}, []string{"version", "goversion"})
	build.WithLabelValues(version, runtime.Version()).Set(1)
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.Shadow = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "switchyard_shadow_decisions_total",
		Help: "Policy-routed requests by the pool the live policy chose and the pool the shadow policy (serve --shadow) would have chosen.",
	}, []string{"live_pool", "shadow_pool"})
	reg.MustRegister(m.Shadow)
	reg.MustRegister(m.Requests, m.Duration, m.TTFT, m.Tokens, m.KeyRequests, m.KeyTokens, m.ClassifierTokens, m.TurnOutcomes, m.CaptureLines, m.CaptureDropped, m.Retries, m.Fallbacks, m.Resumes,
		m.Reloads, m.Generation, m.Inflight, m.QueueWait, m.ConnsOpen, m.ConnsRefused, m.ConnsIdle, m.ConnsEvicted, m.Loops, m.DiscoverySelf, m.Poison, m.Tokenize, build)
	for _, l := range []string{"api", "admin"} {
		m.ConnsRefused.WithLabelValues(l)
		for _, r := range []string{"idle_at_cap", "per_client", "idle_timeout"} {
			m.ConnsEvicted.WithLabelValues(l, r)
		}
	}
	for _, r := range []string{"ok", "error"} {
		m.Reloads.WithLabelValues(r)
	}
	return m
}

// guardSeries makes the series of the gateway's guards: its connection
// bounds, request loops, the context check's /tokenize calls and poison
// requests.
func (m *Metrics) guardSeries() {
	m.ConnsOpen = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "switchyard_connections_open", Help: "Client connections open, by listener (api or admin).",
	}, []string{"listener"})
	m.ConnsRefused = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "switchyard_connections_refused_total", Help: "Connections answered 503 and closed because the listener was at its cap (server.max_connections, server.admin_max_connections), by listener.",
	}, []string{"listener"})
	m.ConnsIdle = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "switchyard_connections_idle", Help: "Client connections open and idle (keep-alive between requests, or not yet sent a request), by listener: the first to be closed when the listener is full.",
	}, []string{"listener"})
	m.ConnsEvicted = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "switchyard_connections_evicted_total", Help: "Idle client connections closed to make room, by listener and reason (idle_at_cap: the listener was full; per_client: the client address was at its cap; idle_timeout: idle past the idle timeout, shortened under pressure).",
	}, []string{"listener", "reason"})
	m.Loops = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "switchyard_request_loops_total", Help: "Requests that came back to the gateway that had forwarded them (marked by its Via entry) and were answered 508 instead of being forwarded again.",
	})
	m.DiscoverySelf = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "switchyard_discovery_self_refused_total", Help: "Addresses in discovery answers refused because they name the gateway's own listener, by pool.",
	}, []string{"pool"})
	m.Tokenize = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "switchyard_context_tokenize_total", Help: "Prompts whose estimate was too close to a pool's max_model_len to decide, counted by the pool's /tokenize, by pool and result: fits, too_long, error (the estimate decided).",
	}, []string{"pool", "result"})
	m.Poison = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "switchyard_poison_requests_total", Help: "Requests that got the same 500 or 503 from two replicas with no untried replica left within retries: not retried further and held against no replica, by pool.",
	}, []string{"pool"})
}

// ControlState is the share controller's state, as its series report it.
type ControlState struct {
	Pool                     string
	Target, Share, Threshold float64
}

// controlCollector reports the share controller's state, when the running
// config has one.
type controlCollector struct {
	state                    func() (ControlState, bool)
	target, share, threshold *prometheus.Desc
}

// NewControlCollector reports switchyard_control_{target,share,threshold}
// from state, asked at each scrape (ok false: the running config has no
// share controller, and nothing is reported).
func NewControlCollector(state func() (ControlState, bool)) prometheus.Collector {
	return &controlCollector{state: state,
		target:    prometheus.NewDesc("switchyard_control_target", "The share of policy-routed requests the controller holds its pool at (moving in capacity mode).", []string{"pool"}, nil),
		share:     prometheus.NewDesc("switchyard_control_share", "The pool's measured share of policy-routed requests over the controller's window.", []string{"pool"}, nil),
		threshold: prometheus.NewDesc("switchyard_control_threshold", "The score threshold the controller sets for the routes' auto bounds.", []string{"pool"}, nil),
	}
}

func (c *controlCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.target
	ch <- c.share
	ch <- c.threshold
}

func (c *controlCollector) Collect(ch chan<- prometheus.Metric) {
	st, ok := c.state()
	if !ok {
		return
	}
	ch <- prometheus.MustNewConstMetric(c.target, prometheus.GaugeValue, st.Target, st.Pool)
	ch <- prometheus.MustNewConstMetric(c.share, prometheus.GaugeValue, st.Share, st.Pool)
	ch <- prometheus.MustNewConstMetric(c.threshold, prometheus.GaugeValue, st.Threshold, st.Pool)
}

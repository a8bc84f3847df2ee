package router

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/switchyard/switchyard/classifier"
	"github.com/switchyard/switchyard/policy"
	"github.com/switchyard/switchyard/pools"
	"github.com/switchyard/switchyard/router/internal/admin"
	"github.com/switchyard/switchyard/router/internal/discoveries"
	"github.com/switchyard/switchyard/router/internal/metrics"
	"github.com/switchyard/switchyard/router/internal/pump"
	"github.com/switchyard/switchyard/router/internal/shadow"
	"github.com/switchyard/switchyard/router/internal/upstream"
)

// Options configures a Gateway. Zero values are production defaults.
type Options struct {
	// ConfigPath is re-read by Reload.
	ConfigPath string
	Logger     *slog.Logger
	// Registry receives every metric; nil means a new registry.
	Registry *prometheus.Registry
	// Tracer is used for request spans; nil means no tracing (a no-op provider).
	Tracer trace.TracerProvider
	// Propagator carries trace context to replicas; nil means W3C trace context.
	Propagator propagation.TextMapPropagator
	Version    string
	// Rand and Now are injected into pools and policy (tests). Now is the
	// time of day every component reads: sessions, the classifier cache,
	// the share controller, key rate limits, passive health and ejection,
	// Retry-After dates, the model lists' created times, the status page.
	// Durations the runtime's timers
	// enforce (timeouts, backoff, latency histograms) use the monotonic
	// clock.
	Rand func() uint64
	Now  func() time.Time
	// Transport overrides every pool's upstream transport (tests).
	Transport http.RoundTripper
	// Passive runs no health or scrape loops (one-shot tools like explain).
	Passive bool
	// ShadowPath, when set, is a candidate policy evaluated on live
	// traffic without affecting it (serve --shadow); Reload re-reads it.
	ShadowPath string
	// Override is applied to every config Reload reads before it is
	// checked and used, as it was to the first: serve's --listen and
	// --admin-listen. It returns the config to use and leaves its argument
	// unchanged (a loaded config is immutable; see policy.Config.WithListen).
	Override func(*policy.Config) *policy.Config
}

// Gateway serves the client API and the admin API from the current snapshot.
type Gateway struct {
	opts         Options
	log          *slog.Logger
	reg          *prometheus.Registry
	metrics      *metrics.Metrics
	classMetrics *classifier.Metrics
	tracer       trace.Tracer
	// tracing is false with no configured provider: then no span is
	// started at all, so tracing costs nothing (not even context values).
	tracing bool
	prop    propagation.TextMapPropagator
	// unknownModelHint is when the operator was last told of a client's
	// unknown model name (unix nanos; at most once a minute).
	unknownModelHint atomic.Int64
	// status is the status page's data; lastReload the last reload's
	// outcome (nil before any).
	status     *admin.Ring
	lastReload atomic.Pointer[admin.ReloadOutcome]
	started    time.Time

	// shadow is the candidate policy of serve --shadow, nil without one.
	shadow atomic.Pointer[shadow.Shadow]
	// endpoints owns every replica server across reloads.
	endpoints *pools.Endpoints
	// discs are the pools' running discoveries (reloadMu).
	discs *discoveries.Running
	snap  atomic.Pointer[Snapshot]
	// draining is set on shutdown: /readyz answers 503.
	draining atomic.Bool
	// streams are the client streams being pumped, by their pump, with
	// the cancel of their upstream attempt, so that shutdown can end them
	// cleanly.
	streamsMu sync.Mutex
	streams   map[*pump.Pump]context.CancelCauseFunc
	// streamsCut: CutStreams has run; later streams are ended at once.
	streamsCut bool
	reloadMu   sync.Mutex // serialises Reload/Apply
	gen        atomic.Int64
	ctx        context.Context // owns pool loops
	stop       context.CancelFunc
	reqSeq     atomic.Uint64
	// rand jitters retry backoff (Options.Rand, else math/rand/v2).
	rand func() uint64
	// exec is the upstream executor.
	exec *upstream.Executor
	// via is this process's Via entry and local the machine's addresses
	// (loops.go).
	via   string
	local []netip.Addr
}

// Snapshot returns the running snapshot.
func (g *Gateway) Snapshot() *Snapshot { return g.snap.Load() }

// Registry returns the metrics registry.
func (g *Gateway) Registry() *prometheus.Registry { return g.reg }

// Close stops health and scrape loops and idle upstream connections.
func (g *Gateway) Close() {
	g.stop()
	g.endpoints.Close()
}

// errShuttingDown ends the streams still open when the shutdown grace runs
// out.
var errShuttingDown = errors.New("the gateway is shutting down")

// trackStream records a stream being pumped, so that CutStreams can end
// it. Once CutStreams has run, a stream that starts (a request that was
// queued, or a continuation of a cut stream) is ended at once.
func (g *Gateway) trackStream(p *pump.Pump, cancel context.CancelCauseFunc) {
	g.streamsMu.Lock()
	defer g.streamsMu.Unlock()
	if g.streamsCut {
		cancel(errShuttingDown)
		return
	}
	if g.streams == nil {
		g.streams = map[*pump.Pump]context.CancelCauseFunc{}
	}
	g.streams[p] = cancel
}

func (g *Gateway) untrackStream(p *pump.Pump) {
	g.streamsMu.Lock()
	delete(g.streams, p)
	g.streamsMu.Unlock()
}

// CutStreams ends every client stream in progress with an error event
// saying the gateway is shutting down (their upstream requests are
// cancelled), and returns how many there were; a stream that starts later
// (a queued request, a cut stream's continuation) is ended as it starts.
// The handlers finish writing on their own goroutines.
func (g *Gateway) CutStreams() int {
	g.streamsMu.Lock()
	defer g.streamsMu.Unlock()
	g.streamsCut = true
	for _, cancel := range g.streams {
		cancel(errShuttingDown)
	}
	return len(g.streams)
}

// Drain marks the gateway as shutting down: /readyz answers 503 from now
// on, so a load balancer stops sending new connections, while requests
// keep being served.
func (g *Gateway) Drain() { g.draining.Store(true) }

// newRequestID returns a short unique id for requests that brought none.
func (g *Gateway) newRequestID() string {
	b := make([]byte, 0, 24)
	b = append(b, "sy-"...)
	b = strconv.AppendUint(b, uint64(time.Now().UnixNano())&0xffffffffff, 16)
	b = append(b, '-')
	b = strconv.AppendUint(b, g.reqSeq.Add(1), 16)
	return string(b)
}

var noopSpan = trace.SpanFromContext(context.Background())

// startSpan starts a span when tracing is configured; otherwise it returns
// ctx unchanged and a no-op span.
func (g *Gateway) startSpan(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if !g.tracing {
		return ctx, noopSpan
	}
	return g.tracer.Start(ctx, name, opts...)
}
